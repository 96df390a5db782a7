"""The ``relay-runtime`` command. ``trace`` is the core's; other layers add subcommands by entry point."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from .jsonl import read_events
from .trace_tree import build, render

COMMAND_GROUP = "relay_runtime.commands"


def _trace(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="relay-runtime trace", description="Draw the scope tree of a run.")
    parser.add_argument("file", help="a JSONL event file written by relay_runtime.jsonl.JsonlWriter")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    args = parser.parse_args(argv)
    try:
        roots = build(read_events(args.file))
    except FileNotFoundError:
        print(f"relay-runtime trace: no such file: {args.file}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"relay-runtime trace: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print(render(roots, color=color) if roots else "(no scopes in this file)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plugins = {ep.name: ep for ep in entry_points(group=COMMAND_GROUP)}
    commands = ["trace", *sorted(plugins)]
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: relay-runtime {{{','.join(commands)}}} ...")
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
