"""The journal's public calls: append (``append_run_event`` lives with the storage it drives), read, summarize."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .default_store import env_store
from .reading import Gaps, iter_lines, parse, parse_line, read_after, read_all, signature
from .states import SummaryFold, copy_summary, summarize
from .storage import append_run_event as append_file_event
from .storage import append_to, fsync_policy, row_cap, run_file_for

if TYPE_CHECKING:
    from .store import RunJournalStore

PathLike = str | os.PathLike[str]
_SUMMARY_CACHE_SIZE = 256
_PAGE_MALFORMED = 1000  # a file of garbage lines is paged by their count, not by the rows it lacks
_SUMMARY_CACHE_TEXT = 64 * 1024 * 1024  # characters of last_assistant_text held across all entries


class RunJournalWriter:
    """Appends the rows of one run."""

    __slots__ = ("_file", "fsync", "max_row_bytes", "run_id", "session_dir", "session_id", "store")

    def __init__(
        self,
        session_id: str,
        run_id: str,
        *,
        session_dir: PathLike | None = None,
        fsync: str | None = None,
        max_row_bytes: int | None = None,
        store: RunJournalStore | None = None,
    ) -> None:
        paths.check_ids(session_id, run_id)
        if store is not None and (session_dir is not None or fsync is not None or max_row_bytes is not None):
            raise ValueError("give a store or session_dir/fsync/max_row_bytes, not both (the store has its own)")
        if store is None and session_dir is None and fsync is None and max_row_bytes is None:
            store = env_store()
        self.session_id = session_id
        self.run_id = run_id
        self.session_dir = session_dir
        self.store = store
        # Resolved once: a writer keeps the policy (and, given a directory, the file) it was made with.
        # Without a directory the default one is looked up per row, so replacing it takes effect.
        self.fsync = fsync_policy(fsync)
        self.max_row_bytes = row_cap(max_row_bytes)
        self._file = run_file_for(session_id, run_id, session_dir) if session_dir is not None else None

    def append_sse_event(self, event: str, payload: Any = None) -> dict[str, Any]:
        if self.store is not None:
            return self.store.append(self.session_id, self.run_id, event, payload)
        if self._file is None:
            return append_file_event(
                self.session_id, self.run_id, event, payload, fsync=self.fsync, max_row_bytes=self.max_row_bytes
            )
        return append_to(
            self._file, self.session_id, self.run_id, event, payload, None, None, self.fsync, self.max_row_bytes
        )


def append_run_event(
    session_id: str,
    run_id: str,
    event: str,
    payload: Any = None,
    *,
    session_dir: PathLike | None = None,
    seq: int | None = None,
    created_at: Any = None,
    fsync: str | None = None,
    store: RunJournalStore | None = None,
) -> dict[str, Any]:
    """Append one row and return it.

    ``seq`` makes the append conditional: it must be the run's next seq.
    ``fsync`` overrides the file store's policy (``"terminal"`` or ``"eager"``; default from
    ``RELAY_JOURNAL_FSYNC``). ``store`` writes to another store (then without ``session_dir``/``fsync``).
    """
    if store is None and session_dir is None and fsync is None:
        store = env_store()
    if store is None:
        return append_file_event(
            session_id, run_id, event, payload, session_dir=session_dir, seq=seq, created_at=created_at, fsync=fsync
        )
    if session_dir is not None or fsync is not None:
        raise ValueError("give a store or session_dir/fsync, not both (the store has its own)")
    return store.append(session_id, run_id, event, payload, seq=seq, created_at=created_at)


def _no_session_dir(store: RunJournalStore, session_dir: PathLike | None) -> RunJournalStore:
    if session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    return store


def check_cursor(name: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def read_run_events(
    session_id: str,
    run_id: str,
    *,
    after_seq: int | None = None,
    max_seq: int | None = None,
    session_dir: PathLike | None = None,
    store: RunJournalStore | None = None,
) -> dict[str, Any]:
    """``{session_id, run_id, events, malformed}``; with ``after_seq`` only the rows after that cursor."""
    check_cursor("after_seq", after_seq)
    check_cursor("max_seq", max_seq)
    if store is None and session_dir is None:
        store = env_store()
    if store is not None:
        return _no_session_dir(store, session_dir).read(session_id, run_id, after_seq=after_seq or 0, max_seq=max_seq)
    return read_file_events(session_id, run_id, after_seq=after_seq or 0, max_seq=max_seq, session_dir=session_dir)


def read_file_events(
    session_id: str,
    run_id: str,
    *,
    after_seq: int = 0,
    max_seq: int | None = None,
    session_dir: PathLike | None = None,
    max_row_bytes: int | None = None,
) -> dict[str, Any]:
    """``read_run_events`` on the file store."""
    path = paths.run_path(session_id, run_id, session_dir)
    check_cursor("after_seq", after_seq)
    check_cursor("max_seq", max_seq)
    cap = row_cap(max_row_bytes)
    if after_seq:
        events, malformed = read_after(path, after_seq, max_seq, max_line=cap)
    else:
        events, malformed, _ = read_all(path, max_seq, max_line=cap)
    return {"session_id": session_id, "run_id": run_id, "events": events, "malformed": malformed}


def iter_file_pages(
    session_id: str,
    run_id: str,
    *,
    session_dir: PathLike | None = None,
    max_row_bytes: int | None = None,
    page_bytes: int = 64 * 1024,
) -> Iterator[dict[str, Any]]:
    """``read_file_events`` in pages of about ``page_bytes`` of rows (at least one row each), read as they are
    handed over: ``{events, malformed}`` per page, so a reader folding them holds one page, not the run."""
    path = paths.run_path(session_id, run_id, session_dir)
    cap = row_cap(max_row_bytes)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below; a missing file is no rows
    except FileNotFoundError:
        return
    with f:
        events: list[dict[str, Any]] = []
        malformed: list[dict[str, Any]] = []
        gaps = Gaps()
        size = 0
        for offset, line, terminated, _ in iter_lines(f, 0, cap):
            row, bad = parse(offset, line, terminated, cap)
            if row is None:
                malformed.append(bad)
            else:
                if (gap := gaps.check(row, offset)) is not None:
                    malformed.append(gap)
                events.append(row)
            size += len(line) if line is not None else 0
            if size >= page_bytes or len(malformed) >= _PAGE_MALFORMED:
                yield {"events": events, "malformed": malformed}
                events, malformed, size = [], [], 0
        if events or malformed:
            yield {"events": events, "malformed": malformed}


def summarize_file(path: Path, session_id: str, run_id: str, max_line: int) -> tuple[dict[str, Any], Any]:
    """The summary of a run file, folded row by row (never holding them all), and its stat if no append raced."""
    fold = SummaryFold(session_id, run_id)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the ``with`` below
    except FileNotFoundError:
        return fold.result(), None
    with f:
        before = os.fstat(f.fileno())
        for _, line, _, _ in iter_lines(f, 0, max_line):
            row, _ = parse_line(line) if line is not None else (None, None)
            if row is not None:
                fold.feed(row)
        after = os.fstat(f.fileno())
        end = f.tell()
    stable = signature(before) == signature(after) and after.st_size == end
    return fold.result(), after if stable else None


class _SummaryCache:
    """Summaries by file signature, bounded in entries and in the assistant text they hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[tuple[int, ...], dict[str, Any]]] = OrderedDict()
        self._text = 0

    def get(self, key: str, sig: tuple[int, ...]) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != sig:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: str, sig: tuple[int, ...], summary: dict[str, Any]) -> None:
        size = len(summary.get("last_assistant_text") or "")
        if size > _SUMMARY_CACHE_TEXT // 4:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._text -= len(old[1].get("last_assistant_text") or "")
            self._entries[key] = (sig, summary)
            self._text += size
            while len(self._entries) > _SUMMARY_CACHE_SIZE or self._text > _SUMMARY_CACHE_TEXT:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._text -= len(evicted.get("last_assistant_text") or "")

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._text = 0


SUMMARY_CACHE = _SummaryCache()
# One summary computation per file at a time: a crowd reconnecting to one large run reads it once.
_COMPUTING = [threading.Lock() for _ in range(32)]


def latest_run_summary(
    session_id: str, run_id: str, *, session_dir: PathLike | None = None, store: RunJournalStore | None = None
) -> dict[str, Any] | None:
    """The run's summary; ``None`` when the session has no journal at all.

    A session that has a journal but no rows for this run gets an empty
    summary (``event_count`` 0, no ``runtime_model``): the run may not have
    written its first row yet.
    """
    if store is None and session_dir is None:
        store = env_store()
    if store is not None:
        return _no_session_dir(store, session_dir).summary(session_id, run_id)
    return file_summary(session_id, run_id, session_dir=session_dir)


def file_summary(
    session_id: str, run_id: str, *, session_dir: PathLike | None = None, max_row_bytes: int | None = None
) -> dict[str, Any] | None:
    """``latest_run_summary`` on the file store."""
    path = paths.run_path(session_id, run_id, session_dir)
    key = os.fspath(path)
    try:
        sig = signature(os.stat(path))
    except FileNotFoundError:
        if not path.parent.is_dir():
            return None
        return summarize(session_id, run_id, [])
    cached = SUMMARY_CACHE.get(key, sig)
    if cached is None:
        with _COMPUTING[hash(key) % len(_COMPUTING)]:
            cached = SUMMARY_CACHE.get(key, sig)  # computed by whoever held the lock before us
            if cached is None:
                cached, stable = summarize_file(path, session_id, run_id, row_cap(max_row_bytes))
                # Only a read that no append raced may stand for this file's signature.
                if stable is not None and signature(stable) == sig:
                    SUMMARY_CACHE.put(key, sig, cached)
    return copy_summary(cached)
