"""Rows handed to one writer thread through a bounded queue, so the disk never holds up an agent."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .storage import append_run_event, fsync_policy, is_truncated

if TYPE_CHECKING:
    from .store import RunJournalStore

Row = tuple[str, str, str, Any]  # session_id, run_id, event, payload
_STOP = object()


class RowWriter:
    """Writes rows in the order they were submitted; drops (and counts) when the queue is full."""

    def __init__(
        self,
        *,
        session_dir: str | os.PathLike[str] | None,
        fsync: str | None,
        maxsize: int,
        count: Callable[[str], None],
        store: RunJournalStore | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"queue size must be at least 1, got {maxsize!r}")
        if store is not None and (session_dir is not None or fsync is not None):
            raise ValueError("give a store or session_dir/fsync, not both (the store has its own)")
        self._store = store
        self._session_dir = session_dir
        # Resolved here, where a bad value can still be an error; on the writer thread it would only be counted.
        self._fsync = fsync_policy(fsync)
        self._count = count
        self._queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self.written = 0

    def submit(self, row: Row) -> bool:
        """Queue ``row``; False (counted) if the writer is closed or the queue is full. Never blocks."""
        with self._lock:
            if self._closed:
                self._count("journal.dropped_closed")
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="run-journal-writer", daemon=True)
                self._thread.start()
            try:
                self._queue.put_nowait(row)
            except queue.Full:
                self._count("journal.dropped")
                return False
            self._pending += 1
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            session_id, run_id, event, payload = item
            try:
                try:
                    self._append(session_id, run_id, event, payload)
                except TypeError:
                    # Say that something was there rather than lose the row (and the run's shape).
                    self._count("journal.unserializable")
                    self._append(session_id, run_id, event, {"unserializable": repr(payload)[:1000]})
            except Exception:
                self._count("journal.write_errors")
            finally:
                with self._lock:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.notify_all()

    def _append(self, session_id: str, run_id: str, event: str, payload: Any) -> None:
        if self._store is not None:
            row = self._store.append(session_id, run_id, event, payload)
        else:
            row = append_run_event(session_id, run_id, event, payload, session_dir=self._session_dir, fsync=self._fsync)
        self.written += 1
        if is_truncated(row):
            self._count("journal.truncated")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row submitted so far is written (or failed); False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Write what is queued, stop the thread, refuse further rows; False if it did not stop in time."""
        with self._lock:
            first = not self._closed
            self._closed = True
            thread = self._thread
        if thread is None:
            return True
        if first:
            try:
                self._queue.put(_STOP, timeout=timeout)
            except queue.Full:
                return False
        thread.join(timeout)
        return not thread.is_alive()
