"""``relay-runtime trajectory``: export a journaled run as ATIF or ATOF, or validate an ATIF file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

SUMMARY = "export a journaled run as an ATIF trajectory or ATOF events, or validate an ATIF file"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relay-runtime trajectory", description=SUMMARY)
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="a run (or, with RUN '-', every run of the session) from the journal")
    export.add_argument("session_id", metavar="SESSION")
    export.add_argument("run_id", metavar="RUN", help="the run (turn) id; '-' for every run of the session in order")
    export.add_argument("--format", choices=("atif", "atof"), required=True)
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    export.add_argument("--session-dir", help="the file journal's directory (default: RELAY_JOURNAL_URL or ~/.relay)")
    export.add_argument("--agent-name", default="agent")
    export.add_argument("--agent-version", default="0")
    validate = commands.add_parser("validate", help="check an ATIF file against v1.7; exit status 1 when invalid")
    validate.add_argument("file", metavar="FILE")
    return parser


def _export(args: argparse.Namespace, store: Any) -> int:
    from ..run_journal import paths
    from ..run_journal.errors import JournalUnavailable
    from .from_journal import DamagedJournal, atif_from_journal, atof_from_journal

    run_id = None if args.run_id == "-" else args.run_id
    if not paths.valid_id(args.session_id) or (run_id is not None and not paths.valid_id(run_id)):
        print("relay-runtime trajectory: invalid SESSION/RUN (1-200 characters of A-Z a-z 0-9 _ . -)", file=sys.stderr)
        return 2
    where: dict[str, Any] = {"store": store} if store is not None else {"session_dir": args.session_dir}
    try:
        if args.format == "atif":
            text = json.dumps(
                atif_from_journal(args.session_id, run_id, agent_name=args.agent_name,
                                  agent_version=args.agent_version, **where),
                ensure_ascii=False, indent=2,
            ) + "\n"  # fmt: skip
        else:
            events = atof_from_journal(args.session_id, run_id, **where)
            text = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events)
    except (LookupError, DamagedJournal, JournalUnavailable) as exc:
        print(f"relay-runtime trajectory: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # --session-dir names a file, or a directory this user may not read
        named = f" in {args.session_dir}" if args.session_dir else ""
        print(f"relay-runtime trajectory: cannot read the journal{named}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.output:
        from .sinks import write_file

        try:
            write_file(args.output, text)
        except OSError as exc:
            print(f"relay-runtime trajectory: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


def _no_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has no such numbers, and other readers refuse them.
    raise ValueError(f"{name} is not a JSON number")


def _validate(path: str) -> int:
    from .validate import validate_atif

    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh, parse_constant=_no_constant)
    except FileNotFoundError:
        print(f"relay-runtime trajectory validate: no such file: {path}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"relay-runtime trajectory validate: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"{path}: $: not JSON: {exc}")
        return 1
    except (ValueError, RecursionError) as exc:
        # Python's own limits (integer digits, nesting) and NaN: not a trajectory a consumer can read.
        print(f"{path}: $: not JSON this validator can read: {type(exc).__name__}: {str(exc)[:200]}")
        return 1
    errors = validate_atif(obj)
    for error in errors:
        print(f"{path}: {error}")
    if errors:
        return 1
    print(f"{path}: valid ATIF ({obj.get('schema_version')}, {len(obj.get('steps') or [])} steps)")
    return 0


def main(argv: list[str] | None = None, *, store: Any = None) -> int:
    """Run the command; ``store`` reads another journal store than the file store ``--session-dir`` names."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "validate":
        return _validate(args.file)
    if store is not None and args.session_dir is not None:
        print(
            "relay-runtime trajectory: --session-dir names the file store; this command reads another", file=sys.stderr
        )
        return 2
    return _export(args, store)
