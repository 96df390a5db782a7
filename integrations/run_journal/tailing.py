"""Following a run's file as it grows: the file store's ``follow``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from . import paths
from .reading import signature
from .states import ends_run

if TYPE_CHECKING:
    from .store import FileStore


async def follow_file(
    store: FileStore, session_id: str, run_id: str, *, after_seq: int, idle: float
) -> AsyncIterator[list[dict[str, Any]]]:
    path = paths.run_path(session_id, run_id, store.session_dir)
    summary = await asyncio.to_thread(store.summary, session_id, run_id)
    # A run that had already ended only has its replay left to send.
    ended = bool(summary and summary["terminal"])
    loop = asyncio.get_running_loop()
    cursor = after_seq
    last_sig: tuple[int, ...] | None = None
    quiet_since = loop.time()
    while True:
        try:
            sig: tuple[int, ...] | None = signature(os.stat(path))
        except FileNotFoundError:
            sig = None
        if sig != last_sig:
            last_sig = sig
            window = await asyncio.to_thread(store.read, session_id, run_id, after_seq=cursor)
            rows = window["events"]
            if rows:
                cursor = rows[-1]["seq"]
                ended = ended or any(ends_run(row) for row in rows)
                yield rows
                quiet_since = loop.time()
                continue
        if ended:
            return
        if loop.time() - quiet_since >= idle:
            yield []
            quiet_since = loop.time()
        await asyncio.sleep(store.poll)
