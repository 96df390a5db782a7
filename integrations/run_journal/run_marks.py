"""A run's high-water mark: the last seq handed out, kept in its index entry beside the run's file.

A writer learns a run's last seq from its file's tail; the mark outlasts that file being cut to
nothing or removed, so a seq is never handed out twice (``storage``).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from . import paths
from .listing import add_to_index, index_entry

_MARK_DIGITS = 20  # any 64-bit seq


def open_mark(path: str) -> mmap.mmap:
    """The run's high-water mark, mapped: its index entry (``listing``) holds the last seq handed out.

    It lives outside the run's file, so it outlasts that file being cut to nothing or removed.
    Every writer of the run maps the same page and uses it under the run file's lock.
    """
    file = Path(path)
    directory = file.parent
    root, session_id, run_id = directory.parent, directory.name, file.name[: -len(paths.SUFFIX)]
    entry = index_entry(root, session_id, run_id)
    try:
        fd = os.open(entry, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:  # a run written before the index existed, or an entry removed by hand
        add_to_index(root, session_id, run_id)
        fd = os.open(entry, os.O_RDWR | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_size < _MARK_DIGITS + 1:
            os.ftruncate(fd, _MARK_DIGITS + 1)  # only ever grows it: a mark already written stays
        return mmap.mmap(fd, _MARK_DIGITS + 1)
    finally:
        os.close(fd)


def read_mark(mark: mmap.mmap | None) -> int:
    """The seq a mark holds (0 for a new or unreadable one: the file's rows are then all there is)."""
    head = mark[:_MARK_DIGITS].strip(b"\0 ") if mark is not None else b""
    return int(head) if head.isdigit() else 0


def write_mark(mark: mmap.mmap | None, seq: int) -> None:
    if mark is not None:
        mark[: _MARK_DIGITS + 1] = b"%020d\n" % seq
