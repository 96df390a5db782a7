"""Rows handed to one writer thread through a bounded queue, so the store never holds up an agent.

When the store is unreachable (``JournalUnavailable``: Redis down or
restarting) the thread keeps the rows it holds and retries them, in order, with
backoff; meanwhile it holds at most ``maxsize`` rows, and a row that finds it full
is dropped and counted (the first drop of an outage is logged). A store that can
append a batch in one round trip (``prepare`` names each row, ``append_many``
writes a batch, and a resent batch is written once) gets everything queued at once.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .default_store import env_store
from .errors import JournalUnavailable, RunFull
from .states import terminal_state
from .storage import append_run_event, encode_json, fsync_policy, is_truncated

if TYPE_CHECKING:
    from .store import RunJournalStore

Row = tuple[str, str, str, Any]  # session_id, run_id, event, payload
_STOP = object()
_BATCH = 256
_RETRY_FIRST = 0.05
_RETRY_MAX = 2.0
_UNSERIALIZABLE_PREVIEW = 1000
_RUNS_WITH_DROPS = 4096  # runs whose dropped rows are counted until their end row (the oldest forgotten)

log = logging.getLogger("relay_runtime.integrations.run_journal")


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
        if store is None and session_dir is None and fsync is None:
            store = env_store()
        self._store = store
        self._session_dir = session_dir
        # Resolved here, where a bad value can still be an error; on the writer thread it would only be counted.
        self._fsync = fsync_policy(fsync)
        self._count = count
        self._maxsize = maxsize  # rows held at once, queued or in the writer's hands
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._abandon = threading.Event()  # close() timed out: stop retrying, count what is left as dropped
        self._outage = False  # the store is unreachable right now (logged once per outage)
        self._drop_logged = False
        self._dropped_by_run: dict[tuple[str, str], int] = {}
        self.written = 0

    def submit(self, row: Row) -> bool:
        """Queue ``row``; False (counted) if the writer is closed or the queue is full. Never blocks.

        A run's terminal row is queued even when the queue is full (one per run): without it the run
        would read as running for ever. It carries ``dropped_rows``, the count of that run's rows dropped.
        """
        session_id, run_id, event, payload = row
        with self._lock:
            if self._closed:
                self._count("journal.dropped_closed")
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="run-journal-writer", daemon=True)
                self._thread.start()
            if terminal_state(event, payload) is not None:
                lost = self._dropped_by_run.pop((session_id, run_id), 0)
                if lost and isinstance(payload, dict):
                    row = (session_id, run_id, event, {**payload, "dropped_rows": lost})
            elif self._pending >= self._maxsize:
                key = (session_id, run_id)
                self._dropped_by_run[key] = self._dropped_by_run.pop(key, 0) + 1
                if len(self._dropped_by_run) > _RUNS_WITH_DROPS:
                    del self._dropped_by_run[next(iter(self._dropped_by_run))]
                self._count("journal.dropped")
                if not self._drop_logged:
                    self._drop_logged = True
                    log.warning(
                        "run journal: writer queue full (%d rows%s); dropping rows, counted in journal.dropped",
                        self._maxsize,
                        ", the store is unreachable" if self._outage else "",
                    )
                return False
            self._queue.put_nowait(row)
            self._pending += 1
        return True

    def _run(self) -> None:
        batched = callable(getattr(self._store, "append_many", None)) and callable(
            getattr(self._store, "prepare", None)
        )
        while True:
            items = [self._queue.get()]
            if batched:
                while len(items) < _BATCH:
                    try:
                        items.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
            stop = any(item is _STOP for item in items)
            rows = [item for item in items if item is not _STOP]
            try:
                if batched:
                    self._write_batch(rows)
                else:
                    for row in rows:
                        self._write_one(row)
            finally:
                with self._lock:
                    self._pending -= len(rows)
                    if not self._pending:
                        self._idle.notify_all()
            if stop:
                return

    def _write_one(self, item: Row) -> None:
        session_id, run_id, event, payload = item
        try:
            try:
                self._append(session_id, run_id, event, payload)
            except TypeError:
                # Say that something was there rather than lose the row (and the run's shape).
                self._count("journal.unserializable")
                self._append(session_id, run_id, event, _unserializable(payload))
        except _Abandoned:
            self._count("journal.dropped_closed")
        except RunFull:
            self._count("journal.run_full")
        except Exception:
            self._count("journal.write_errors")

    def _append(self, session_id: str, run_id: str, event: str, payload: Any) -> None:
        if self._store is not None:
            row = self._store_append(self._store, session_id, run_id, event, payload)
        else:
            row = self._retrying(
                lambda: append_run_event(
                    session_id, run_id, event, payload, session_dir=self._session_dir, fsync=self._fsync
                )
            )
        self.written += 1
        if is_truncated(row):
            self._count("journal.truncated")

    def _store_append(self, store: Any, session_id: str, run_id: str, event: str, payload: Any) -> dict[str, Any]:
        """One append, retried here until the store answers; a store that named the row in its
        ``JournalUnavailable`` gets that name back, so a row it may have written is not written twice."""
        row_id: str | None = None

        def attempt() -> Any:
            nonlocal row_id
            try:
                if row_id is None:
                    return store.append(session_id, run_id, event, payload)
                return store.append(session_id, run_id, event, payload, row_id=row_id)
            except JournalUnavailable as exc:
                row_id = row_id or getattr(exc, "row_id", None)
                raise

        result: dict[str, Any] = self._retrying(attempt)
        return result

    def _write_batch(self, items: Sequence[Row]) -> None:
        store: Any = self._store
        pending = []
        for session_id, run_id, event, payload in items:
            try:
                try:
                    pending.append(store.prepare(session_id, run_id, event, payload))
                except TypeError:
                    self._count("journal.unserializable")
                    pending.append(store.prepare(session_id, run_id, event, _unserializable(payload)))
            except Exception:
                self._count("journal.write_errors")
        if not pending:
            return
        append_many = store.append_many
        try:
            results = self._retrying(lambda: append_many(pending))
        except _Abandoned:
            for _ in pending:
                self._count("journal.dropped_closed")
            return
        except Exception:
            for _ in pending:
                self._count("journal.write_errors")
            return
        for result in results:
            if isinstance(result, RunFull):
                self._count("journal.run_full")
            elif isinstance(result, Exception):
                self._count("journal.write_errors")
            else:
                self.written += 1
                if is_truncated(result):
                    self._count("journal.truncated")

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        """``attempt()`` until the store answers; the same rows (and row ids) each time, so order holds."""
        delay = _RETRY_FIRST
        while True:
            try:
                result = attempt()
            except JournalUnavailable as exc:
                if not self._outage:
                    self._outage = True
                    self._count("journal.store_unavailable")
                    log.warning(
                        "run journal: store unreachable (%s); keeping up to %d rows and retrying in order",
                        exc,
                        self._maxsize,
                    )
                if self._abandon.wait(delay):
                    raise _Abandoned from exc
                delay = min(delay * 2, _RETRY_MAX)
                continue
            if self._outage:
                self._outage = False
                self._drop_logged = False
                log.warning("run journal: store reachable again; buffered rows written")
            return result

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row submitted so far is written (or failed); False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Write what is queued, stop the thread, refuse further rows; False if it did not stop in time.

        Rows still unwritten at the timeout (the store stayed unreachable) are given up and counted
        as ``journal.dropped_closed``.
        """
        with self._lock:
            first = not self._closed
            self._closed = True
            thread = self._thread
        if thread is None:
            return True
        if first:
            self._queue.put_nowait(_STOP)
        thread.join(timeout)
        if thread.is_alive():
            self._give_up()
            return False
        return True

    def _give_up(self) -> None:
        self._abandon.set()
        while True:  # what never reached the thread is dropped here, counted
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                continue
            self._count("journal.dropped_closed")
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.notify_all()
        self._queue.put_nowait(_STOP)  # the thread, done with what it holds, then ends


class _Abandoned(Exception):
    """The writer was closed while the store was unreachable."""


def _unserializable(payload: Any) -> dict[str, Any]:
    """What is written instead: the payload's fields that are JSON (a terminal row's ``type`` decides how the
    run ended, ``dropped_rows`` what it lost), and the repr of the whole."""
    kept: dict[str, Any] = {}
    if isinstance(payload, dict):
        for key, value in payload.items():
            try:
                encode_json(value)
            except TypeError:
                continue
            if isinstance(key, str):
                kept[key] = value
    return {**kept, "unserializable": repr(payload)[:_UNSERIALIZABLE_PREVIEW]}
