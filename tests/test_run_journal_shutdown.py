"""Stopping the journal server is bounded, whatever its stream handlers are doing when it starts.

A stream handler is registered for cancellation as it starts, not only once its stream is open: a
request still looking its run up when the server begins to stop (a slow store) is ended with the
rest, instead of opening a live stream that the server's graceful stop then waits on for a minute.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from relay_runtime.integrations.run_journal import FileStore, RunJournalWriter
from relay_runtime.integrations.run_journal.routes import STATS, _end_streams, create_app


async def _started(app: web.Application) -> tuple[web.AppRunner, int]:
    """``app`` served on a loopback port of its own: its runner (to stop it) and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


class SlowSummaryStore(FileStore):
    """A file store whose run look-up waits until the test lets it go (a store under load)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.looking = threading.Event()
        self.release = threading.Event()

    def summary(self, session_id: str, run_id: str) -> dict[str, Any] | None:
        self.looking.set()
        self.release.wait(30)
        return super().summary(session_id, run_id)


@pytest.mark.asyncio
async def test_a_stream_still_looking_up_its_run_is_ended_by_the_stop(tmp_path: Path) -> None:
    writer = RunJournalWriter("s", "live", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "a run that never ends"})
    store = SlowSummaryStore(tmp_path)
    app = create_app(store=store, heartbeat=0.5)
    runner, port = await _started(app)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as client:
        request = asyncio.create_task(client.get(f"http://127.0.0.1:{port}/runs/live/events"))
        assert await asyncio.to_thread(store.looking.wait, 10)
        started = time.monotonic()
        stopping = asyncio.create_task(runner.cleanup())
        await asyncio.sleep(0.2)  # the stop has begun (its shutdown hooks ran) before the look-up returns
        store.release.set()
        await asyncio.wait_for(stopping, 15)
        assert time.monotonic() - started < 5  # not the runner's one-minute graceful wait
        with pytest.raises(aiohttp.ClientError):
            response = await asyncio.wait_for(request, 10)
            await asyncio.wait_for(response.content.read(), 10)  # a stream cut off, not one that goes on
    assert app[STATS]["sse_open"] == 0


@pytest.mark.asyncio
async def test_a_stream_asked_for_once_the_stop_began_is_refused(tmp_path: Path) -> None:
    writer = RunJournalWriter("s", "live", session_dir=tmp_path)
    writer.append_sse_event("token", {"text": "a run that never ends"})
    app = create_app(store=FileStore(tmp_path), heartbeat=0.5)
    runner, port = await _started(app)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
            async with client.get(f"http://127.0.0.1:{port}/stats") as response:  # a kept-alive connection
                assert response.status == 200
            await _end_streams(app)  # the stop's shutdown hook: the listener is closed, kept-alive ones are not yet
            async with client.get(f"http://127.0.0.1:{port}/runs/live/events") as response:
                assert response.status == 503
                assert await response.json() == {"error": "the server is stopping"}
            async with client.get(f"http://127.0.0.1:{port}/runs/live") as response:
                assert response.status == 200  # a snapshot ends by itself: still served
    finally:
        await asyncio.wait_for(runner.cleanup(), 10)
    assert app[STATS]["sse_open"] == 0
