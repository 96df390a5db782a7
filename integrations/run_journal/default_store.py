"""``RELAY_JOURNAL_URL``: a shared store every call without ``store=`` / ``session_dir=`` uses instead of files.

``RELAY_JOURNAL_URL=redis://host:6379/0`` (or ``rediss://``, ``unix://``) makes a
``RedisStreamStore`` on that URL the default of the journal's calls, the
``JournalSubscriber``, the routes and the CLI; unset, the file store stays the
default. One store per URL per process, made on first use.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from relay_runtime.urls import shown_url

if TYPE_CHECKING:
    from .store import RunJournalStore

JOURNAL_URL_ENV = "RELAY_JOURNAL_URL"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_stores: dict[str, RunJournalStore] = {}
_lock = threading.Lock()


def env_store() -> RunJournalStore | None:
    """The store ``RELAY_JOURNAL_URL`` names, or ``None`` (the file store) when it is unset or empty."""
    url = os.environ.get(JOURNAL_URL_ENV)
    if not url:
        return None
    store = _stores.get(url)
    if store is None:
        with _lock:
            store = _stores.get(url)
            if store is None:
                store = _stores[url] = open_store(url)
    return store


def open_store(url: str) -> RunJournalStore:
    """A store for a journal URL (only Redis URLs name one today)."""
    if not url.startswith(_REDIS_SCHEMES):
        raise ValueError(f"{JOURNAL_URL_ENV} must be a redis://, rediss:// or unix:// URL, got {shown_url(url)}")
    try:
        from .redis_store import RedisStreamStore
    except ImportError as exc:
        raise RuntimeError(
            f"{JOURNAL_URL_ENV} names a Redis journal, which needs the redis package: "
            "pip install 'relay-runtime[journal-redis]'"
        ) from exc
    return RedisStreamStore(url)
