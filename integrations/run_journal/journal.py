"""The journal's public calls: append (``append_run_event`` lives with the storage it drives), read, summarize."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from . import paths
from .reading import read_after, read_all, signature
from .states import copy_summary, summarize
from .storage import append_run_event as append_file_event
from .storage import append_to, fsync_policy, run_file_for

if TYPE_CHECKING:
    from .store import RunJournalStore

PathLike = str | os.PathLike[str]
_SUMMARY_CACHE_SIZE = 256


class RunJournalWriter:
    """Appends the rows of one run."""

    __slots__ = ("_file", "fsync", "run_id", "session_dir", "session_id", "store")

    def __init__(
        self,
        session_id: str,
        run_id: str,
        *,
        session_dir: PathLike | None = None,
        fsync: str | None = None,
        store: RunJournalStore | None = None,
    ) -> None:
        paths.check_ids(session_id, run_id)
        if store is not None and (session_dir is not None or fsync is not None):
            raise ValueError("give a store or session_dir/fsync, not both (the store has its own)")
        self.session_id = session_id
        self.run_id = run_id
        self.session_dir = session_dir
        self.store = store
        # Resolved once: a writer keeps the policy (and, given a directory, the file) it was made with.
        # Without a directory the default one is looked up per row, so replacing it takes effect.
        self.fsync = fsync_policy(fsync)
        self._file = run_file_for(session_id, run_id, session_dir) if session_dir is not None else None

    def append_sse_event(self, event: str, payload: Any = None) -> dict[str, Any]:
        if self.store is not None:
            return self.store.append(self.session_id, self.run_id, event, payload)
        if self._file is None:
            return append_file_event(self.session_id, self.run_id, event, payload, fsync=self.fsync)
        return append_to(self._file, self.session_id, self.run_id, event, payload, None, None, self.fsync)


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
    if store is not None:
        return _no_session_dir(store, session_dir).read(session_id, run_id, after_seq=after_seq or 0, max_seq=max_seq)
    return read_file_events(session_id, run_id, after_seq=after_seq or 0, max_seq=max_seq, session_dir=session_dir)


def read_file_events(
    session_id: str, run_id: str, *, after_seq: int = 0, max_seq: int | None = None, session_dir: PathLike | None = None
) -> dict[str, Any]:
    """``read_run_events`` on the file store."""
    path = paths.run_path(session_id, run_id, session_dir)
    check_cursor("after_seq", after_seq)
    check_cursor("max_seq", max_seq)
    if after_seq:
        events, malformed = read_after(path, after_seq, max_seq)
    else:
        events, malformed, _ = read_all(path, max_seq)
    return {"session_id": session_id, "run_id": run_id, "events": events, "malformed": malformed}


class _SummaryCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[tuple[int, ...], dict[str, Any]]] = OrderedDict()

    def get(self, key: str, sig: tuple[int, ...]) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != sig:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: str, sig: tuple[int, ...], summary: dict[str, Any]) -> None:
        with self._lock:
            self._entries[key] = (sig, summary)
            self._entries.move_to_end(key)
            while len(self._entries) > _SUMMARY_CACHE_SIZE:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


SUMMARY_CACHE = _SummaryCache()


def latest_run_summary(
    session_id: str, run_id: str, *, session_dir: PathLike | None = None, store: RunJournalStore | None = None
) -> dict[str, Any] | None:
    """The run's summary; ``None`` when the session has no journal at all.

    A session that has a journal but no rows for this run gets an empty
    summary (``event_count`` 0, no ``runtime_model``): the run may not have
    written its first row yet.
    """
    if store is not None:
        return _no_session_dir(store, session_dir).summary(session_id, run_id)
    return file_summary(session_id, run_id, session_dir=session_dir)


def file_summary(session_id: str, run_id: str, *, session_dir: PathLike | None = None) -> dict[str, Any] | None:
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
        rows, _, stable = read_all(path)
        cached = summarize(session_id, run_id, rows)
        # Only a read that no append raced may stand for this file's signature.
        if stable is not None and signature(stable) == sig:
            SUMMARY_CACHE.put(key, sig, cached)
    return copy_summary(cached)
