"""Errors a journal store raises that callers act on: retry later, or stop writing to this run."""

from __future__ import annotations


class JournalUnavailable(Exception):
    """The store could not be reached (down, restarting, network): the append may be retried later."""


class RunFull(RuntimeError):
    """The run reached its size cap: it refuses further rows (its earlier rows are kept whole)."""

    def __init__(self, session_id: str, run_id: str, max_bytes: int) -> None:
        super().__init__(f"run {session_id}/{run_id} reached its size cap of {max_bytes} bytes; row refused")
        self.session_id = session_id
        self.run_id = run_id
        self.max_bytes = max_bytes
