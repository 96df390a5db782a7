"""Where run journals live: one interface (:class:`RunJournalStore`), the file store its first implementation.

Everything that reads or writes journals (the public calls in ``journal``, the
subscriber's writer thread, the HTTP routes, the CLI) goes through this
interface, so another backend serves the same snapshots and SSE streams.

Contract for an implementation:

- A row is ``{version, event_id: "<run_id>:<seq>", seq, run_id, session_id,
  event, type, created_at, terminal, terminal_state, payload}`` (RUN_JOURNAL.md).
  ``seq`` starts at 1 and has no gaps within a run.
- Ids are checked with ``paths.check_ids`` (``ValueError("invalid
  session_id/run_id")``) before anything is stored or looked up.
- The synchronous methods may block (disk, network): async callers run them
  in a thread. ``follow`` is the one async method, so a backend with blocking
  tail reads (Redis ``XREAD BLOCK``) waits there without polling.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any, Protocol, runtime_checkable

from . import paths
from .default_store import env_store
from .journal import file_summary, iter_file_pages, read_file_events
from .listing import list_runs, list_sessions, locate
from .storage import append_run_event, fsync_policy, row_cap
from .tailing import follow_file

Row = dict[str, Any]
PathLike = str | os.PathLike[str]

DEFAULT_IDLE = 15.0


@runtime_checkable
class RunJournalStore(Protocol):
    """The operations every journal backend provides."""

    def append(
        self,
        session_id: str,
        run_id: str,
        event: str,
        payload: Any = None,
        *,
        seq: int | None = None,
        created_at: Any = None,
    ) -> Row:
        """Append one row and return it as stored (with its ``seq``).

        ``payload`` ``None`` -> ``{}``; an empty event name -> ``ValueError``; a payload that is not
        JSON -> ``TypeError``. ``seq`` makes the append conditional: it must be the run's next seq
        (else ``ValueError``). A payload whose row would exceed the store's row cap is stored
        truncated with a marker (``payload["truncated"] is True``), never dropped.
        """
        ...

    def read(
        self, session_id: str, run_id: str, *, after_seq: int = 0, max_seq: int | None = None
    ) -> dict[str, Any]:
        """``{session_id, run_id, events, malformed}``: rows with ``after_seq < seq <= max_seq`` in seq order.

        ``malformed`` lists what could not be read as a row (``{offset, reason, text}``); a store
        that cannot hold malformed data returns ``[]``. No run -> empty ``events``.
        """
        ...

    def summary(self, session_id: str, run_id: str) -> dict[str, Any] | None:
        """The run's summary (``states.summarize`` over all its rows); ``None`` when the session has no journal.

        A session that exists but has no rows for this run gets an empty summary (``event_count`` 0).
        Callers own the returned dict.
        """
        ...

    def locate(self, run_id: str) -> str | None:
        """The session holding ``run_id`` (the most recently written one if several do), or ``None``.

        Must not cost in proportion to the number of sessions.
        """
        ...

    def list_sessions(self) -> list[dict[str, Any]]:
        """``[{session_id, updated_at}]`` for every session with a journal, most recently written first."""
        ...

    def list_runs(self, session_id: str) -> list[dict[str, Any]]:
        """``[{session_id, run_id, updated_at}]`` for the session's runs, most recently written first."""
        ...

    def follow(
        self, session_id: str, run_id: str, *, after_seq: int = 0, idle: float = DEFAULT_IDLE
    ) -> AsyncIterator[list[Row]]:
        """Rows after ``after_seq`` as they are stored, in bounded batches, until the run has ended.

        Yields non-empty lists of rows in seq order (each list bounded in size by the store), and an
        empty list whenever ``idle`` seconds pass without a new row (callers send keepalives then).
        Ends after yielding the run's terminal row and whatever was stored after it by then, or at
        once when the run has already ended and nothing follows the cursor; a terminal row stored at
        or before the cursor (a cursor past the end of a live run) ends it too. A run with no rows yet is
        waited for. Closing the iterator (``aclose``, or cancelling its consumer) releases
        everything it holds.
        """
        ...


@runtime_checkable
class PagedStore(Protocol):
    """Optional: a store that hands a whole run over a page at a time (see :func:`read_pages`)."""

    def pages(self, session_id: str, run_id: str) -> Iterator[dict[str, Any]]:
        """``read(session_id, run_id)`` as ``{events, malformed}`` pages, each bounded in size by the store,
        read as they are asked for (closing the iterator releases what it holds)."""
        ...


_WINDOW_ROWS = 128


def read_pages(store: RunJournalStore, session_id: str, run_id: str) -> Generator[dict[str, Any], None, None]:
    """Every row of the run as ``{events, malformed}`` pages, so a fold over them holds one page, not the run.

    A :class:`PagedStore` pages itself; any other store is read in windows of ``_WINDOW_ROWS`` seqs
    (``read`` with ``max_seq``, which a store that reads seq ranges bounds) until a window comes
    back short: seqs have no gaps, so a short window is the end of the run as it is now.
    """
    if isinstance(store, PagedStore):
        yield from store.pages(session_id, run_id)
        return
    cursor = 0
    while True:
        window = store.read(session_id, run_id, after_seq=cursor, max_seq=cursor + _WINDOW_ROWS)
        yield window
        if len(window["events"]) < _WINDOW_ROWS:
            return
        cursor += _WINDOW_ROWS


class FileStore:
    """Journals as files: ``<session_dir>/_run_journal/<session_id>/<run_id>.jsonl`` (RUN_JOURNAL.md).

    ``session_dir`` ``None`` means the default directory, looked up at each call (so replacing
    ``run_journal._default_session_dir`` moves it). ``fsync`` is the policy for appends (``"terminal"``,
    ``"eager"``; default from ``RELAY_JOURNAL_FSYNC``). ``poll`` is how often ``follow`` looks for
    new rows. ``max_row_bytes`` caps a row (default ``$RELAY_JOURNAL_MAX_ROW_BYTES`` or 8 MiB): larger
    payloads are stored truncated, and readers skip longer lines (torn rows) as malformed.
    ``page_bytes`` bounds the rows ``follow`` hands over at once (at least one row).
    """

    def __init__(
        self,
        session_dir: PathLike | None = None,
        *,
        fsync: str | None = None,
        poll: float = 0.05,
        max_row_bytes: int | None = None,
        page_bytes: int = 64 * 1024,
    ) -> None:
        if not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
        if type(page_bytes) is not int or page_bytes < 1:
            raise ValueError(f"page_bytes must be a positive integer, got {page_bytes!r}")
        self.session_dir = session_dir
        self.fsync = fsync_policy(fsync)
        self.poll = poll
        self.max_row_bytes = row_cap(max_row_bytes)
        self.page_bytes = page_bytes

    def __repr__(self) -> str:
        return f"FileStore({os.fspath(paths.resolve_session_dir(self.session_dir))!r})"

    def append(
        self,
        session_id: str,
        run_id: str,
        event: str,
        payload: Any = None,
        *,
        seq: int | None = None,
        created_at: Any = None,
    ) -> Row:
        return append_run_event(
            session_id,
            run_id,
            event,
            payload,
            session_dir=self.session_dir,
            seq=seq,
            created_at=created_at,
            fsync=self.fsync,
            max_row_bytes=self.max_row_bytes,
        )

    def read(
        self, session_id: str, run_id: str, *, after_seq: int = 0, max_seq: int | None = None
    ) -> dict[str, Any]:
        return read_file_events(
            session_id,
            run_id,
            after_seq=after_seq,
            max_seq=max_seq,
            session_dir=self.session_dir,
            max_row_bytes=self.max_row_bytes,
        )

    def summary(self, session_id: str, run_id: str) -> dict[str, Any] | None:
        return file_summary(session_id, run_id, session_dir=self.session_dir, max_row_bytes=self.max_row_bytes)

    def pages(self, session_id: str, run_id: str) -> Iterator[dict[str, Any]]:
        return iter_file_pages(
            session_id,
            run_id,
            session_dir=self.session_dir,
            max_row_bytes=self.max_row_bytes,
            page_bytes=self.page_bytes,
        )

    def locate(self, run_id: str) -> str | None:
        return locate(run_id, self.session_dir)

    def list_sessions(self) -> list[dict[str, Any]]:
        return list_sessions(self.session_dir)

    def list_runs(self, session_id: str) -> list[dict[str, Any]]:
        return list_runs(session_id, self.session_dir)

    async def follow(
        self, session_id: str, run_id: str, *, after_seq: int = 0, idle: float = DEFAULT_IDLE
    ) -> AsyncIterator[list[Row]]:
        async for rows in follow_file(self, session_id, run_id, after_seq=after_seq, idle=idle):
            yield rows


def resolve_store(store: RunJournalStore | None, session_dir: PathLike | None) -> RunJournalStore:
    """The store a call with ``store=`` / ``session_dir=`` means (giving both is an error).

    Neither: the store ``RELAY_JOURNAL_URL`` names, else the file store in the default directory.
    """
    if store is None:
        return (env_store() if session_dir is None else None) or FileStore(session_dir)
    if session_dir is not None:
        raise ValueError("give a store or a session_dir, not both")
    return store

