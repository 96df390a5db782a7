"""``relay-runtime journal show|tail SESSION RUN`` reads a run's journal; ``journal serve`` shows runs in a browser."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO

from . import paths
from .default_store import env_store
from .errors import JournalUnavailable
from .storage import readable_json
from .store import FileStore, RunJournalStore

# The one line `relay-runtime --help` shows for this command.
SUMMARY = "read a run's journal (show, tail) or serve a page that follows runs live"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay-runtime journal",
        description=(
            "Read or serve run journals: the rows JournalSubscriber wrote for each turn (status, tokens, "
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
    serve = commands.add_parser(
        "serve",
        help="serve the journal's HTTP routes and a page that lists runs and follows one live",
        description="Serve the run page (/) and the journal's snapshot and SSE routes.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8766, help="port (default 8766; 0 picks a free one)")
    serve.add_argument("--session-dir", help="the sessions directory (default: $RELAY_HOME/sessions)")
    serve.add_argument(
        "--token",
        default=os.environ.get("RELAY_JOURNAL_TOKEN"),
        help="require this token (default: $RELAY_JOURNAL_TOKEN); the page asks for it once",
    )
    serve.add_argument("--heartbeat", type=float, default=15.0, help="seconds between keepalives on a quiet stream")
    serve.add_argument(
        "--write-timeout", type=float, default=30.0, help="drop an SSE client that accepts nothing for this long"
    )
    serve.add_argument(
        "--max-streams-per-client",
        type=int,
        default=64,
        help="SSE streams one client address may hold at once (429 beyond); raise it behind a proxy",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="close a connection that has not sent a whole request head within this many seconds",
    )
    serve.add_argument(
        "--max-connections-per-client",
        type=int,
        default=96,
        help="connections one client address may hold at once (503 beyond); raise it behind a proxy",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without a token, also serve requests naming this host (a proxy's or the machine's name); repeatable",
    )
    show.add_argument("--no-summary", action="store_true", help="print the rows only")
    tail.add_argument("--poll", type=float, default=0.1, help="seconds between checks for new rows")
    tail.add_argument("--timeout", type=float, default=None, help="give up (exit 1) after this many seconds")
    return parser


def _print_row(row: dict[str, Any], raw: bool, out: TextIO) -> None:
    if raw:
        print(readable_json(row), file=out)
        return
    payload = readable_json(row.get("payload"))
    print(f"{row.get('seq', '?'):>6}  {row.get('event', '?')!s:<14} {payload}", file=out)


def _report_malformed(malformed: list[dict[str, Any]], where: str) -> None:
    for entry in malformed:
        print(f"malformed line at byte {entry['offset']} of {where}: {entry['reason']}", file=sys.stderr)


def _where(args: argparse.Namespace, store: RunJournalStore) -> str:
    """The run's file for the file store, else the store itself: what a damaged-data message names."""
    if isinstance(store, FileStore):
        return os.fspath(paths.run_path(args.session_id, args.run_id, store.session_dir))
    return f"run {args.run_id!r} of session {args.session_id!r} in {store!r}"


def _show(args: argparse.Namespace, store: RunJournalStore) -> int:
    result = store.read(args.session_id, args.run_id, after_seq=args.after_seq)
    summary = store.summary(args.session_id, args.run_id)
    malformed = result["malformed"]
    if summary is None or not summary["event_count"]:
        if malformed:
            # A journal that exists but holds nothing readable is damaged, not missing.
            where = _where(args, store)
            _report_malformed(malformed, where)
            print(f"relay-runtime journal: {where} holds no readable row, only damaged lines", file=sys.stderr)
            return 2
        print(f"relay-runtime journal: no run {args.run_id!r} in session {args.session_id!r}", file=sys.stderr)
        return 1
    for row in result["events"]:
        _print_row(row, args.json, sys.stdout)
    if malformed:
        _report_malformed(malformed, _where(args, store))
    if not args.no_summary:
        print(readable_json(summary, indent=2))
    return 0


async def _follow(args: argparse.Namespace, store: RunJournalStore) -> None:
    rows_iter = store.follow(args.session_id, args.run_id, after_seq=args.after_seq)
    try:
        async for rows in rows_iter:
            for row in rows:
                _print_row(row, args.json, sys.stdout)
            sys.stdout.flush()
    finally:
        aclose = getattr(rows_iter, "aclose", None)
        if aclose is not None:
            await aclose()


def _default_store(args: argparse.Namespace) -> RunJournalStore:
    """``--session-dir`` names the file store; without it ``RELAY_JOURNAL_URL`` may name a shared one."""
    default = env_store() if args.session_dir is None else None
    return default or FileStore(args.session_dir, poll=getattr(args, "poll", 0.05))


def _serve(args: argparse.Namespace, store: RunJournalStore | None) -> int:
    from aiohttp import web

    from .routes import create_app

    if not 0 <= args.port <= 65535:
        print("relay-runtime journal serve: --port must be 0-65535", file=sys.stderr)
        return 2
    if args.token == "":
        print("relay-runtime journal serve: --token must not be empty", file=sys.stderr)
        return 2
    if args.host not in _LOOPBACK and not args.token:
        print(
            f"relay-runtime journal serve: warning: {args.host} is reachable beyond this machine and no --token"
            " is set: anyone who can reach it reads every run",
            file=sys.stderr,
        )
    try:
        app = create_app(
            store=store or _default_store(args),
            bearer_token=args.token,
            page=True,
            heartbeat=args.heartbeat,
            write_timeout=args.write_timeout,
            max_streams_per_client=args.max_streams_per_client,
            allowed_hosts=[*args.allow_host, *_host_name(args.host)],
            header_timeout=args.header_timeout,
        )
    except ValueError as exc:
        print(f"relay-runtime journal serve: {exc}", file=sys.stderr)
        return 2

    if type(args.max_connections_per_client) is not int or args.max_connections_per_client < 1:
        print("relay-runtime journal serve: --max-connections-per-client must be a positive integer", file=sys.stderr)
        return 2
    return _run(web.AppRunner(app), args.host, args.port, args.max_connections_per_client)


_LOOPBACK = frozenset(("127.0.0.1", "localhost", "::1"))


def _host_name(host: str) -> list[str]:
    """``--host`` when it is a name (its requests name it), not an address (those are allowed as reached)."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return [host] if host else []
    return []


def _run(runner: Any, host: str, port: int, max_connections_per_client: int) -> int:
    import asyncio
    import signal

    from .serving import GuardedSite

    async def serve() -> None:
        await runner.setup()
        await GuardedSite(runner, host, port, max_connections_per_client=max_connections_per_client).start()
        for address in runner.addresses:  # the real port, also when --port 0 picked one
            name = f"[{address[0]}]" if ":" in address[0] else address[0]
            print(f"relay-runtime journal: serving runs at http://{name}:{address[1]}/", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except OSError as exc:
        print(f"relay-runtime journal serve: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    return 0


def _tail(args: argparse.Namespace, store: RunJournalStore) -> int:
    try:
        asyncio.run(asyncio.wait_for(_follow(args, store), args.timeout))
    except TimeoutError:
        print(f"relay-runtime journal: run {args.run_id!r} did not end in {args.timeout}s", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None, *, store: RunJournalStore | None = None) -> int:
    """Run the command; ``store`` reads another store than the file store ``--session-dir`` names."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "serve":
        return _serve(args, store)
    if not (paths.valid_id(args.session_id) and paths.valid_id(args.run_id)):
        print(
            "relay-runtime journal: invalid session_id/run_id (1-200 characters of A-Z a-z 0-9 _ . -, not '.' or '..')",
            file=sys.stderr,
        )
        return 2
    if args.after_seq < 0:
        print("relay-runtime journal: --after-seq must be a non-negative integer", file=sys.stderr)
        return 2
    if args.command == "tail" and not args.poll > 0:
        print("relay-runtime journal: --poll must be a positive number of seconds", file=sys.stderr)
        return 2
    if store is None:
        store = _default_store(args)
    elif args.session_dir is not None:
        print("relay-runtime journal: --session-dir names the file store; this command reads another", file=sys.stderr)
        return 2
    try:
        return _show(args, store) if args.command == "show" else _tail(args, store)
    except KeyboardInterrupt:
        return 130
    except (OSError, JournalUnavailable) as exc:  # a file, or a shared store that cannot be reached
        print(f"relay-runtime journal: cannot read the journal: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
