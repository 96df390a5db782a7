"""Errors a journal store raises that callers act on: retry later, or stop writing to this run."""

from __future__ import annotations


class JournalUnavailable(Exception):
    """The store could not be reached (down, restarting, network): the append may be retried later.

    ``row_id``: the id the failed append gave its row (``None`` for a read or a batch). Retrying with
    ``store.append(..., row_id=exc.row_id)`` stores the row at most once, whatever happened to the
    first try. ``maybe_written``: the row reached the store's connection before it failed (no reply
    came), so the store may hold it; ``False`` means nothing was sent (the store could not be reached).
    """

    def __init__(self, message: str, *, row_id: str | None = None, maybe_written: bool = False) -> None:
        super().__init__(message)
        self.row_id = row_id
        self.maybe_written = maybe_written


class RunFull(RuntimeError):
    """The run reached its size cap: it refuses further rows (its earlier rows are kept whole)."""

    def __init__(self, session_id: str, run_id: str, max_bytes: int) -> None:
        super().__init__(f"run {session_id}/{run_id} reached its size cap of {max_bytes} bytes; row refused")
        self.session_id = session_id
        self.run_id = run_id
        self.max_bytes = max_bytes
