"""A durable, append-only journal of each agent run, fed by relay events and replayed over HTTP.

See ``RunJournalWriter`` / ``append_run_event`` to write, ``read_run_events`` /
``latest_run_summary`` to read, and ``JournalSubscriber`` to record a relay's
turns as runs. Each takes ``store=`` (a ``RunJournalStore``; the default is the
``FileStore`` at ``session_dir``, or the store ``RELAY_JOURNAL_URL`` names).
``RedisStreamStore`` (extra ``journal-redis``) keeps journals in Redis Streams,
for writers and servers on several machines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .errors import JournalUnavailable, RunFull
from .journal import RunJournalWriter, append_run_event, latest_run_summary, read_run_events
from .store import FileStore, RunJournalStore
from .subscriber import JournalSubscriber


def _default_session_dir() -> Path:
    """Where journals go when no ``session_dir`` is given (replace this to move them all)."""
    return paths.default_session_dir()


def _run_path(session_id: str, run_id: str, session_dir: str | os.PathLike[str] | None = None) -> Path:
    return paths.run_path(session_id, run_id, session_dir)


if TYPE_CHECKING:
    from .redis_store import RedisStreamStore


def __getattr__(name: str) -> Any:
    # Imported on first use: the redis package is an optional extra.
    if name == "RedisStreamStore":
        try:
            from .redis_store import RedisStreamStore
        except ImportError as exc:
            raise ImportError(
                "RedisStreamStore needs the redis package: pip install 'relay-runtime[journal-redis]'"
            ) from exc
        return RedisStreamStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FileStore",
    "JournalSubscriber",
    "JournalUnavailable",
    "RedisStreamStore",
    "RunFull",
    "RunJournalStore",
    "RunJournalWriter",
    "append_run_event",
    "latest_run_summary",
    "read_run_events",
]
