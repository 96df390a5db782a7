"""The ``relay-runtime`` command. ``trace`` is the core's; other layers add subcommands by entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any

from .jsonl import read_events
from .trace_tree import build, render

COMMAND_GROUP = "relay_runtime.commands"
TRACE_SUMMARY = "draw the scope tree of a run (turns, LLM attempts, tools) from a JSONL event file"
_EVENT_KEYS = ("kind", "uuid")


def _trace(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="relay-runtime trace",
        description=(
            "Draw the scope tree of a run from a JSONL event file: one line per scope with its "
            "type, duration, outcome and error; LLM attempts also show their tokens."
        ),
        epilog="Write such a file with relay.subscribers.register(relay_runtime.jsonl.JsonlWriter(path)).",
    )
    parser.add_argument("file", help="a JSONL event file written by relay_runtime.jsonl.JsonlWriter")
    parser.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto", help="colour the tree (auto: on a terminal)"
    )
    args = parser.parse_args(argv)
    seen = {"events": 0, "rows": 0}

    def counted() -> Iterator[dict[str, Any]]:
        for row in read_events(args.file):
            seen["rows"] += 1
            if all(key in row for key in _EVENT_KEYS):
                seen["events"] += 1
            yield row

    try:
        roots = build(counted())
        if not seen["events"] and _has_content(args.file):
            print(
                f"relay-runtime trace: {args.file} is not a JSONL trace: no line is a relay event "
                f"(a JSON object with {' and '.join(repr(k) for k in _EVENT_KEYS)})",
                file=sys.stderr,
            )
            return 2
    except FileNotFoundError:
        print(f"relay-runtime trace: no such file: {args.file}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"relay-runtime trace: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print(render(roots, color=color) if roots else "(no scopes in this file)")
    return 0


def _has_content(path: str) -> bool:
    with open(path, "rb") as fh:
        return any(line.strip() for line in fh)


def _summary(entry: Any) -> str:
    """A plugin command's one-line description: its module's ``SUMMARY``, else its docstring's first line."""
    try:
        command = entry.load()
    except ImportError as exc:
        return f"(needs an optional dependency: {exc})"
    module = sys.modules.get(command.__module__)
    summary = getattr(module, "SUMMARY", None)
    if isinstance(summary, str) and summary:
        return summary
    doc = (getattr(module, "__doc__", None) or command.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def _usage(commands: list[str], plugins: dict[str, Any], *, full: bool) -> str:
    lines = [f"usage: relay-runtime {{{','.join(commands)}}} ...", ""]
    if not full:
        return lines[0] + "\nrun `relay-runtime --help` for what each command does"
    lines.append("relay-runtime from the terminal: draw a trace, read a run journal, run the voice relay.")
    lines.append("")
    lines.append("commands:")
    summaries = {"trace": TRACE_SUMMARY, **{name: _summary(ep) for name, ep in sorted(plugins.items())}}
    width = max(len(name) for name in summaries)
    lines += [f"  {name:<{width}}  {text}" for name, text in summaries.items()]
    lines += ["", "`relay-runtime COMMAND --help` describes a command's arguments."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plugins = {ep.name: ep for ep in entry_points(group=COMMAND_GROUP)}
    commands = ["trace", *sorted(plugins)]
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(commands, plugins, full=bool(argv)))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "trace":
        return _trace(rest)
    if name in plugins:
        try:
            command = plugins[name].load()
        except ImportError as exc:
            print(f"relay-runtime {name}: needs an optional dependency: {exc}", file=sys.stderr)
            return 2
        return int(command(rest) or 0)
    print(f"relay-runtime: unknown command {name!r}; expected one of {commands}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
