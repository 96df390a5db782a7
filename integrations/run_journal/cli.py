"""``relay-runtime journal show|tail SESSION RUN``: read a run's journal from the terminal."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, TextIO

from . import paths
from .journal import latest_run_summary, read_run_events
from .reading import signature
from .states import ends_run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay-runtime journal",
        description=(
            "Read a run's journal: the rows JournalSubscriber wrote for one turn (status, tokens, "
            "tool calls, model observations, the terminal row), from $RELAY_HOME/sessions."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show_help = "print a run's rows and its summary"
    tail_help = "print a run's rows as they are written; exit at its terminal row"
    show = commands.add_parser("show", help=show_help, description=f"{show_help[0].upper()}{show_help[1:]}.")
    tail = commands.add_parser("tail", help=tail_help, description=f"{tail_help[0].upper()}{tail_help[1:]}.")
    for sub in (show, tail):
        sub.add_argument("session_id", help="the conversation's session id")
        sub.add_argument("run_id", help="the run id: the turn id given to begin_turn")
        sub.add_argument("--session-dir", help="the sessions directory (default: $RELAY_HOME/sessions)")
        sub.add_argument("--after-seq", type=int, default=0, help="only rows after this seq")
        sub.add_argument("--json", action="store_true", help="print rows as raw JSON lines")
    show.add_argument("--no-summary", action="store_true", help="print the rows only")
    tail.add_argument("--poll", type=float, default=0.1, help="seconds between checks for new rows")
    tail.add_argument("--timeout", type=float, default=None, help="give up (exit 1) after this many seconds")
    return parser


def _print_row(row: dict[str, Any], raw: bool, out: TextIO) -> None:
    if raw:
        print(json.dumps(row, ensure_ascii=False, separators=(",", ":")), file=out)
        return
    payload = json.dumps(row.get("payload"), ensure_ascii=False, separators=(",", ":"))
    print(f"{row.get('seq', '?'):>6}  {row.get('event', '?')!s:<14} {payload}", file=out)


def _report_malformed(malformed: list[dict[str, Any]]) -> None:
    for entry in malformed:
        print(f"malformed line at byte {entry['offset']}: {entry['reason']}", file=sys.stderr)



def _show(args: argparse.Namespace) -> int:
    result = read_run_events(args.session_id, args.run_id, after_seq=args.after_seq, session_dir=args.session_dir)
    summary = latest_run_summary(args.session_id, args.run_id, session_dir=args.session_dir)
    if summary is None or not summary["event_count"]:
        print(f"relay-runtime journal: no run {args.run_id!r} in session {args.session_id!r}", file=sys.stderr)
        return 1
    for row in result["events"]:
        _print_row(row, args.json, sys.stdout)
    _report_malformed(result["malformed"])
    if not args.no_summary:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    return 0


def _tail(args: argparse.Namespace) -> int:
    path = paths.run_path(args.session_id, args.run_id, args.session_dir)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    cursor = args.after_seq
    last_sig: tuple[int, ...] | None = None
    while True:
        try:
            sig: tuple[int, ...] | None = signature(os.stat(path))
        except FileNotFoundError:
            sig = None
        if sig is not None and sig != last_sig:
            last_sig = sig
            result = read_run_events(args.session_id, args.run_id, after_seq=cursor, session_dir=args.session_dir)
            _report_malformed(result["malformed"])
            for row in result["events"]:
                _print_row(row, args.json, sys.stdout)
                cursor = row["seq"]
            sys.stdout.flush()
            if any(ends_run(row) for row in result["events"]):
                return 0
            if cursor == args.after_seq and not result["events"]:
                summary = latest_run_summary(args.session_id, args.run_id, session_dir=args.session_dir)
                if summary is not None and summary["terminal"]:
                    return 0  # it ended at or before the cursor
        if deadline is not None and time.monotonic() >= deadline:
            print(f"relay-runtime journal: run {args.run_id!r} did not end in {args.timeout}s", file=sys.stderr)
            return 1
        time.sleep(args.poll)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not (paths.valid_id(args.session_id) and paths.valid_id(args.run_id)):
        print(
            "relay-runtime journal: invalid session_id/run_id (1-200 characters of A-Z a-z 0-9 _ . -, not '.' or '..')",
            file=sys.stderr,
        )
        return 2
    if args.after_seq < 0:
        print("relay-runtime journal: --after-seq must be a non-negative integer", file=sys.stderr)
        return 2
    try:
        return _show(args) if args.command == "show" else _tail(args)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"relay-runtime journal: cannot read the journal: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
