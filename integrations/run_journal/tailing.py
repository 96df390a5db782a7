"""Following a run's file as it grows: the file store's ``follow``.

The file is read forwards from a byte offset, one bounded page at a time, so a
client replaying a large run costs one page of memory however large the run is.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from . import paths
from .reading import offset_after, read_page
from .states import ends_run

if TYPE_CHECKING:
    from .store import FileStore


_HEAD_BYTES = 256  # the start of a run's first row: its seq and created_at


def _page(
    path: str, start: int, max_bytes: int, max_line: int, head: bytes
) -> tuple[list[dict[str, Any]], int, bool, bytes | None]:
    """A page from ``start``, with the file's first bytes now; ``None`` for them when they no longer begin
    with ``head`` (what they were): the file was cut and written again, perhaps past ``start``."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below
    except FileNotFoundError:
        return [], start, False, head
    with f:
        now = f.read(_HEAD_BYTES)
        if not now.startswith(head):
            return [], start, False, None
        return (*read_page(f, start, max_bytes=max_bytes, max_line=max_line), now)


async def follow_file(
    store: FileStore, session_id: str, run_id: str, *, after_seq: int, idle: float
) -> AsyncIterator[list[dict[str, Any]]]:
    path = paths.run_file(session_id, run_id, store.session_dir)
    summary = await asyncio.to_thread(store.summary, session_id, run_id)
    # A run that had already ended only has its replay left to send.
    ended = bool(summary and summary["terminal"])
    loop = asyncio.get_running_loop()
    cursor = after_seq
    offset: int | None = None  # where the next unread line starts, once known
    inode = -1
    seen_size = -1
    head = b""  # the file's first bytes when last read: they change when it is cut and written again
    quiet_since = loop.time()
    while True:
        try:
            st: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and (st.st_ino != inode or st.st_size < (offset or 0)):
            # First look, or the file was replaced or cut short: find the cursor again.
            inode = st.st_ino
            offset, head = await asyncio.to_thread(offset_after, path, cursor, max_line=store.max_row_bytes), b""
            seen_size = -1
        if st is not None and offset is not None and st.st_size != seen_size:
            page, offset, more, now = await asyncio.to_thread(
                _page, path, offset, store.page_bytes, store.max_row_bytes, head
            )
            if now is None:  # cut and grown back past where we were: the size alone could not show it
                inode = -1
                continue
            head = now
            # A terminal row at or before the cursor (a cursor past the end of a live run) ends it too.
            ended = ended or any(ends_run(row) for row in page)
            rows = [row for row in page if row["seq"] > cursor]
            if rows:
                cursor = rows[-1]["seq"]
                yield rows
                quiet_since = loop.time()
            if rows or more:
                continue  # more may follow at once: read on before sleeping
            seen_size = st.st_size  # read up to here; wait for the file to change
        if ended:
            return
        if loop.time() - quiet_since >= idle:
            yield []
            quiet_since = loop.time()
        await asyncio.sleep(store.poll)
