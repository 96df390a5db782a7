"""One simulated machine for the journal's multi-machine tests: a process sharing nothing with the others but Redis.

(No tests here.) Each process gets its own working and home directory and finds
the journal through ``RELAY_JOURNAL_URL`` alone, as a worker or a web server on
another host would.

    journal_machine.py write SESSION RUN COUNT TAG   direct appends, after "go" on stdin
    journal_machine.py turn SESSION RUN COUNT DELAY  a relay turn streaming COUNT chunks, journaled by the subscriber
    journal_machine.py serve                         the HTTP routes on a free port (printed); stops when stdin closes
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _write(session_id: str, run_id: str, count: int, tag: str) -> None:
    from relay_runtime.integrations.run_journal import RunJournalWriter

    writer = RunJournalWriter(session_id, run_id)
    print("ready", flush=True)
    sys.stdin.readline()
    seqs = [writer.append_sse_event("token", {"text": f"{tag}:{i}"})["seq"] for i in range(count)]
    print(json.dumps(seqs), flush=True)


class _Paced:
    """Chunks handed out ``delay`` seconds apart, as a provider streams them."""

    def __init__(self, count: int, delay: float) -> None:
        self.count = count
        self.delay = delay

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self.count):
            time.sleep(self.delay)
            yield {"model": "m-1", "text": f"t{i} "}


def _turn(session_id: str, run_id: str, count: int, delay: float) -> None:
    from journal_support import run_turn, stream_call

    from relay_runtime.integrations.run_journal import default_store

    store = default_store.env_store()
    print("ready", flush=True)
    chunks: Any = _Paced(count, delay)
    result = run_turn(
        Path.cwd(),
        lambda: stream_call("openai", "m", chunks),
        session_id=session_id,
        run_id=run_id,
        store=store,
    )
    print(json.dumps({"counts": dict(result.subscriber.counts), "rows": len(result.rows)}), flush=True)


async def _serve() -> None:
    from aiohttp import web

    from relay_runtime.integrations.run_journal.routes import create_app

    runner = web.AppRunner(create_app(heartbeat=0.5))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the test closes our stdin
    await runner.cleanup()


def main(argv: list[str]) -> None:
    command = argv[0]
    if command == "write":
        _write(argv[1], argv[2], int(argv[3]), argv[4])
    elif command == "turn":
        _turn(argv[1], argv[2], int(argv[3]), float(argv[4]))
    elif command == "serve":
        asyncio.run(_serve())
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
