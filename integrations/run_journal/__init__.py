"""A durable, append-only journal of each agent run, fed by relay events and replayed over HTTP.

See ``RunJournalWriter`` / ``append_run_event`` to write, ``read_run_events`` /
``latest_run_summary`` to read, and ``JournalSubscriber`` to record a relay's
turns as runs. Each takes ``store=`` (a ``RunJournalStore``; the default is the
``FileStore`` at ``session_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import paths
from .journal import RunJournalWriter, append_run_event, latest_run_summary, read_run_events
from .store import FileStore, RunJournalStore
from .subscriber import JournalSubscriber


def _default_session_dir() -> Path:
    """Where journals go when no ``session_dir`` is given (replace this to move them all)."""
    return paths.default_session_dir()


def _run_path(session_id: str, run_id: str, session_dir: str | os.PathLike[str] | None = None) -> Path:
    return paths.run_path(session_id, run_id, session_dir)


__all__ = [
    "FileStore",
    "JournalSubscriber",
    "RunJournalStore",
    "RunJournalWriter",
    "append_run_event",
    "latest_run_summary",
    "read_run_events",
]
