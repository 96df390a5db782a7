# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""A Redis that stops answering (SIGSTOP: the process frozen, its sockets still accepting) or is gone.

An append then fails in seconds with ``JournalUnavailable`` naming its row id and whether the row may
have been written; retrying with that id stores the row once, whatever Redis did with the first try.
Every test runs a real redis-server of its own (``redis_support``) and freezes it with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from redis_support import RedisServer, own_redis_server, redis_prefix  # noqa: F401 - fixtures

from relay_runtime.integrations.run_journal import JournalUnavailable, RedisStreamStore
from relay_runtime.integrations.run_journal.background import RowWriter
from relay_runtime.integrations.run_journal.routes import create_app


@contextlib.contextmanager
def frozen(server: RedisServer) -> Iterator[None]:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


def _rows(store: RedisStreamStore, run_id: str = "r") -> list[dict[str, Any]]:
    return store.read("s", run_id)["events"]


def _wait_for_seq(store: RedisStreamStore, seq: int, run_id: str = "r") -> None:
    deadline = time.monotonic() + 10
    while store.run_stats("s", run_id)["seq"] < seq and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_frozen_redis_fails_an_append_in_seconds_and_the_retry_with_its_row_id_stores_it_once(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisStreamStore(own_redis_server.url, prefix=redis_prefix)  # the default timeouts
    try:
        store.append("s", "r", "token", {"text": "before"})  # script loaded, connection up
        with frozen(own_redis_server):
            started = time.monotonic()
            with pytest.raises(JournalUnavailable) as caught:
                store.append("s", "r", "token", {"text": "while frozen"})
            took = time.monotonic() - started
        # About (retries + 1) x socket_timeout = 3 s; it was 20 s. A loaded machine gets slack.
        assert took < 8, f"an append to a frozen Redis took {took:.1f}s to fail"
        error = caught.value
        assert isinstance(error.row_id, str) and error.row_id
        assert error.maybe_written is True  # the script reached the socket: Redis may run it once it wakes
        # Redis woke up and ran what it had been sent: the row is there, once.
        _wait_for_seq(store, 2)
        assert [row["payload"] for row in _rows(store)] == [{"text": "before"}, {"text": "while frozen"}]
        # The caller retries as told: the row the first try wrote comes back; nothing is written twice.
        retried = store.append("s", "r", "token", {"text": "while frozen"}, row_id=error.row_id)
        assert retried["seq"] == 2 and retried == _rows(store)[1]
        again = store.append("s", "r", "token", {"text": "while frozen"}, row_id=error.row_id)
        assert again == retried
        assert store.append("s", "r", "done", {})["seq"] == 3
        assert [row["seq"] for row in _rows(store)] == [1, 2, 3]
    finally:
        store.close()


def test_a_redis_that_cannot_be_reached_says_nothing_was_written(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisStreamStore(own_redis_server.url, prefix=redis_prefix)
    try:
        store.append("s", "r", "token", {"text": "before"})
        own_redis_server.kill()
        with pytest.raises(JournalUnavailable) as caught:
            store.append("s", "r", "token", {"text": "while down"})
        assert caught.value.maybe_written is False  # refused at connect: nothing was sent
        assert caught.value.row_id
        own_redis_server.start()
        row = store.append("s", "r", "token", {"text": "while down"}, row_id=caught.value.row_id)
        assert row["seq"] == 2
        assert store.append("s", "r", "token", {"text": "while down"}, row_id=caught.value.row_id) == row
        assert [row["seq"] for row in _rows(store)] == [1, 2]
    finally:
        store.close()


def test_a_row_id_is_checked(own_redis_server: RedisServer, redis_prefix: str) -> None:
    store = RedisStreamStore(own_redis_server.url, prefix=redis_prefix)
    try:
        for bad in ("", "x" * 201, 7):
            with pytest.raises(ValueError, match="row_id must be a non-empty string"):
                store.append("s", "r", "token", {}, row_id=bad)  # type: ignore[arg-type]
    finally:
        store.close()
    with pytest.raises(ValueError, match="socket_timeout must be a positive number"):
        RedisStreamStore(own_redis_server.url, socket_timeout=0)


class OneByOne:
    """The Redis store with only ``append``: the writer thread's one-row path, which retries by itself."""

    def __init__(self, store: RedisStreamStore) -> None:
        self.store = store
        self.tries = 0

    def append(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.tries += 1
        return self.store.append(*args, **kwargs)


def test_the_journal_writer_retries_a_row_that_may_be_written_under_its_own_id(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisStreamStore(own_redis_server.url, prefix=redis_prefix)
    one_by_one = OneByOne(store)
    counts: list[str] = []
    writer = RowWriter(
        session_dir=None, fsync=None, maxsize=16, count=lambda name: counts.append(name), store=one_by_one
    )  # type: ignore[arg-type]
    try:
        writer.submit(("s", "r", "token", {"text": "first"}))
        assert writer.flush(10)
        with frozen(own_redis_server):
            writer.submit(("s", "r", "token", {"text": "sent while frozen"}))
            deadline = time.monotonic() + 15
            while "journal.store_unavailable" not in counts and time.monotonic() < deadline:
                time.sleep(0.05)
        assert "journal.store_unavailable" in counts  # the first try failed after sending its row
        assert writer.flush(15)
        writer.submit(("s", "r", "done", {}))
        assert writer.flush(10)
        assert one_by_one.tries >= 4  # first, the failed try, its retry, done
        assert [(row["seq"], row["event"]) for row in _rows(store)] == [(1, "token"), (2, "token"), (3, "done")]
    finally:
        writer.close()
        store.close()


@pytest.mark.asyncio
async def test_a_client_at_its_stream_cap_is_refused_before_its_run_is_read(
    own_redis_server: RedisServer, redis_prefix: str
) -> None:
    # Looking a run up reads it; a client at its cap must cost nothing more, whatever state the store is in.
    store = RedisStreamStore(own_redis_server.url, prefix=redis_prefix)
    store.append("s", "r", "token", {"text": "live"})
    app = create_app(store=store, max_streams_per_client=1, heartbeat=0.2)
    try:
        async with (
            TestServer(app, host="127.0.0.1") as server,
            aiohttp.ClientSession() as client,
            client.get(server.make_url("/runs/r/events?session_id=s")) as held,
        ):
            assert held.status == 200
            assert b"r:1" in await asyncio.wait_for(held.content.readuntil(b"\n\n"), 10)
            with frozen(own_redis_server):
                async with client.get(server.make_url("/runs/r/events?session_id=s")) as refused:
                    assert refused.status == 429
                    assert "at most 1 sse responses at once per client" in (await refused.json())["error"]
    finally:
        store.close()
