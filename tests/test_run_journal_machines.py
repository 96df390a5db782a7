# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""Several machines on one Redis, simulated with processes that share nothing else (see journal_machine.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from process_support import LineReader
from redis_support import RedisServer, own_redis_server, redis_prefix, redis_server  # noqa: F401 - fixtures
from test_run_journal_http import TIMEOUT, read_sse, rows_only

from relay_runtime.integrations.run_journal import RedisStreamStore

MACHINE = Path(__file__).with_name("journal_machine.py")


class Machine:
    """A process with its own directory, home and environment; only the Redis URL is shared."""

    def __init__(self, root: Path, name: str, url: str, *args: str) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "PYTEST_"))}
        env.update(RELAY_JOURNAL_URL=url, RELAY_HOME=str(self.dir / "home"), HOME=str(self.dir))
        self.process = subprocess.Popen(
            [sys.executable, str(MACHINE), *args],
            cwd=self.dir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.out = LineReader(self.process.stdout)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[list[Machine]]:
    started: list[Machine] = []
    yield started
    for machine in started:
        machine.stop()


def test_four_writer_processes_share_one_gapless_run(redis_server, tmp_path, machines):
    run_id = f"run-{os.getpid()}-{time.monotonic_ns()}"
    per_writer = 250
    writers = [
        Machine(tmp_path, f"writer-{n}", redis_server.url, "write", "s", run_id, str(per_writer), f"w{n}")
        for n in range(4)
    ]
    machines.extend(writers)
    for w in writers:
        assert w.out.next() == "ready\n"
    for w in writers:
        w.send("go")
    acknowledged = {n: json.loads(w.out.next(timeout=60)) for n, w in enumerate(writers)}
    store = RedisStreamStore(redis_server.url)
    try:
        rows = store.read("s", run_id)["events"]
    finally:
        store.close()
    assert [row["seq"] for row in rows] == list(range(1, 4 * per_writer + 1))
    by_seq = {row["seq"]: row["payload"]["text"] for row in rows}
    for n, seqs in acknowledged.items():
        assert [by_seq[seq] for seq in seqs] == [f"w{n}:{i}" for i in range(per_writer)]  # its own order
    interleaved = sum(
        1 for a, b in itertools.pairwise(rows) if a["payload"]["text"][:2] != b["payload"]["text"][:2]
    )
    assert interleaved > 3  # the writers really ran at once
    for w in writers:  # nothing was written to any machine's own disk
        assert not list(w.dir.rglob("*.jsonl"))


def _serve(tmp_path: Path, name: str, url: str, machines: list[Machine]) -> str:
    machine = Machine(tmp_path, name, url, "serve")
    machines.append(machine)
    return f"http://127.0.0.1:{int(machine.out.next())}"


@pytest.mark.asyncio
async def test_a_browser_moves_between_servers_while_redis_restarts(own_redis_server, tmp_path, machines):
    """Worker on machine W streams a turn; the browser reads from server A, is cut off, Redis is killed
    mid-run and restarted, and the browser resumes from server B: no gap, no duplicate, nothing lost."""
    redis: RedisServer = own_redis_server
    chunks = 400
    server_a = _serve(tmp_path, "server-a", redis.url, machines)
    server_b = _serve(tmp_path, "server-b", redis.url, machines)
    worker = Machine(tmp_path, "worker", redis.url, "turn", "chat", "run-1", str(chunks), "0.004")
    machines.append(worker)
    assert worker.out.next() == "ready\n"
    received: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
        resp = await _get_when_there(client, f"{server_a}/runs/run-1/events")
        received += rows_only(await read_sse(resp, limit=60))
        resp.close()  # cut off
        redis.kill()
        await asyncio.sleep(0.4)  # the worker goes on streaming: its rows wait in its writer
        down = await client.get(f"{server_b}/runs/run-1/events", headers={"Last-Event-ID": received[-1]["id"]})
        assert down.status == 503
        await asyncio.to_thread(redis.start)
        resp = await client.get(f"{server_b}/runs/run-1/events", headers={"Last-Event-ID": received[-1]["id"]})
        assert resp.status == 200
        received += rows_only(await read_sse(resp))
    report = json.loads(worker.out.next(timeout=60))
    assert report["counts"].get("journal.store_unavailable") == 1
    assert not {k for k in report["counts"] if k.startswith("journal.dropped") or k == "journal.write_errors"}

    store = RedisStreamStore(redis.url)
    try:
        stored = store.read("chat", "run-1")["events"]
    finally:
        store.close()
    assert [m["id"] for m in received] == [f"run-1:{n}" for n in range(1, len(stored) + 1)]  # no gap, no duplicate
    assert [m["data"] for m in received] == stored
    names = [row["event"] for row in stored]
    # Rows from before, during and after the outage, all in order.
    assert names == ["status", "runtime_model", *["token"] * chunks, "span", "span", "done"]
    assert "".join(row["payload"]["text"] for row in stored if row["event"] == "token") == "".join(
        f"t{i} " for i in range(chunks)
    )


async def _get_when_there(client: aiohttp.ClientSession, url: str) -> aiohttp.ClientResponse:
    deadline = time.monotonic() + 20
    while True:
        resp = await client.get(url)
        if resp.status == 200:
            return resp
        assert resp.status == 404 and time.monotonic() < deadline, resp.status
        resp.close()
        await asyncio.sleep(0.02)
