"""``RedisStreamStore``: the run journal on Redis Streams, shared by every writer and server that reaches it.

See ``redis_keys`` for the layout and the append script. Appends are
synchronous (the row comes back with its seq once Redis has it, or the call
raises ``JournalUnavailable``); a lost reply is retried with the same row id,
which the script recognises, so a row is never written twice. Live reads block
in ``XREAD`` on the asyncio client: no polling.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from relay_runtime.urls import shown_url

from . import paths
from .errors import JournalUnavailable, RunFull
from .redis_entries import READ_BATCH, largest, page_count, parse_entries, text
from .redis_keys import APPEND_SCRIPT, DEFAULT_PREFIX, DUPLICATE, FOREIGN, REFUSED, WRONG_SEQ, Keys
from .redis_sending import sending, tracked
from .states import SummaryFold, copy_summary, ends_run
from .storage import EncodedRow, row_cap, shrunk

DEFAULT_RETENTION = 7 * 24 * 3600.0
DEFAULT_MAX_RUN_BYTES = 64 * 1024 * 1024
TERMINAL_RESERVE = 64 * 1024  # a run at its cap can still record how it ended
DEFAULT_IDLE = 15.0
# An append gives up within about (retries + 1) x socket_timeout: 3 s by default. A caller that
# waits longer gains nothing (a frozen Redis does not answer sooner), and one told late retries late.
DEFAULT_SOCKET_TIMEOUT = 1.0
DEFAULT_CONNECT_TIMEOUT = 1.0
DEFAULT_RETRIES = 2
_FOLLOW_BUDGET = 1 << 20  # bytes a follower asks for at once (bounded by count, adapted to row sizes)
_FOLD_BUDGET = 1 << 17  # bytes a summary folds at once: every SSE lookup of a live run folds it
_SUMMARY_CACHE_SIZE = 256
# Lost connections, timeouts, and a server that restarted (scripts gone) or is still loading its data.
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, NoScriptError, OSError)
_TRANSIENT_REPLIES = ("LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "BUSY")

PendingRow = tuple[EncodedRow, str]  # a row and the id its writer gave it


def new_row_id() -> str:
    return uuid.uuid4().hex


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSIENT):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(_TRANSIENT_REPLIES)


class RedisStreamStore:
    """Run journals in Redis Streams at ``url`` (``redis://``, ``rediss://``, ``unix://``), keys under ``prefix``.

    ``retention``: seconds a finished run is kept after its last row (default 7 days).
    ``max_run_bytes``: a run's cap; rows past it are refused (``RunFull``), old rows are never trimmed.
    ``max_row_bytes``: a row's cap (as the file store's: a larger payload is stored truncated, with a marker).
    A connection lost mid-append, or a reply that takes over ``socket_timeout`` seconds, is retried
    ``retries`` times with the same row id before raising ``JournalUnavailable``: with the defaults an
    append fails within about 3 s ((retries + 1) x socket_timeout) when Redis is frozen or gone.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: float = DEFAULT_RETENTION,
        max_run_bytes: int = DEFAULT_MAX_RUN_BYTES,
        max_row_bytes: int | None = None,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"Redis URL must start with redis://, rediss:// or unix://, got {shown_url(url)}")
        if isinstance(retention, bool) or not isinstance(retention, int | float) or not retention >= 1:
            raise ValueError(f"retention must be at least 1 second, got {retention!r}")
        if type(max_run_bytes) is not int or max_run_bytes < 1:
            raise ValueError(f"max_run_bytes must be a positive integer, got {max_run_bytes!r}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        for name, value in (("socket_timeout", socket_timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        self.url = url
        self.keys = Keys(prefix)
        self.retention = int(retention)
        self.max_run_bytes = max_run_bytes
        self.max_row_bytes = row_cap(max_row_bytes)
        self._retries = retries
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        }
        # Its connections note whether an append's script reached the socket (``JournalUnavailable.maybe_written``).
        self.client = redis.Redis.from_url(
            url, retry=self._retry(Retry), connection_class=tracked(url), **self._options
        )
        self._script = self.client.register_script(APPEND_SCRIPT)
        # Per run: the (seq, bytes) it had when summarized, and the summary.
        self._summaries: OrderedDict[tuple[str, str], tuple[tuple[Any, ...], dict[str, Any]]] = OrderedDict()
        self._summaries_lock = threading.Lock()

    def _retry(self, kind: Any) -> Any:
        # Retrying an append is safe: the script drops a row id it has already written.
        return kind(ExponentialBackoff(cap=0.5, base=0.02), self._retries)

    def __repr__(self) -> str:
        return f"RedisStreamStore({self._where()!r}, prefix={self.keys.prefix!r})"

    def close(self) -> None:
        """Close the client's connections (each ``follow`` closes its own when it ends or is closed)."""
        self.client.close()

    # -- appending -----------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        run_id: str,
        event: str,
        payload: Any = None,
        *,
        seq: int | None = None,
        created_at: Any = None,
        row_id: str | None = None,
    ) -> dict[str, Any]:
        """Append one row; return it with its seq once Redis has it.

        ``row_id`` (default: a new one) names the row: the store's own retries resend it, and
        appending the same id to the run again returns the first append's row instead of writing
        a second one. Raises ``JournalUnavailable`` when Redis cannot be reached (its ``row_id`` is
        the one to retry with; ``maybe_written`` says whether the row may be stored), ``RunFull``
        at the run's cap.
        """
        paths.check_ids(session_id, run_id)
        if seq is not None and (type(seq) is not int or seq < 1):
            raise ValueError(f"seq must be a positive integer, got {seq!r}")
        if row_id is not None and (not isinstance(row_id, str) or not row_id or len(row_id) > 200):
            raise ValueError(f"row_id must be a non-empty string of at most 200 characters, got {row_id!r}")
        row = EncodedRow(session_id, run_id, event, payload, created_at, self.max_row_bytes)
        row_id = row_id or new_row_id()
        group = [(row, row_id)]
        answer = self._run_script(group, seq, row_id)
        result = self._results(group, answer, seq)[0]
        if isinstance(result, RunFull) and row.state is not None:
            result = self._end_anyway(row, group[0][1], seq)
        if isinstance(result, Exception):
            raise result
        return result

    def _end_anyway(self, row: EncodedRow, row_id: str, seq: int | None) -> dict[str, Any] | Exception:
        """A terminal row too large for the run's reserve, stored again as the truncation marker: the run's
        end (its state) is recorded, never lost to the cap. Its own row id, so a resend writes it once."""
        small = shrunk(row, self.max_row_bytes)
        if small is None:
            return RunFull(row.session_id, row.run_id, self.max_run_bytes)
        group = [(small, f"{row_id}.end")]
        return self._results(group, self._run_script(group, seq, row_id), seq)[0]

    def _run_script(self, group: Sequence[PendingRow], seq: int | None, row_id: str) -> Any:
        with sending(self._script.sha) as sent:
            try:
                return self._script(*self._call(group, seq))
            except Exception as exc:
                raise self._error(exc, row_id=row_id, maybe_written=sent.sent) from exc

    def prepare(self, session_id: str, run_id: str, event: str, payload: Any = None) -> PendingRow:
        """A row for ``append_many``, encoded once and named: resending it never writes it twice."""
        paths.check_ids(session_id, run_id)
        return EncodedRow(session_id, run_id, event, payload, None, self.max_row_bytes), new_row_id()

    def append_many(self, rows: Sequence[PendingRow]) -> list[dict[str, Any] | Exception]:
        """Append rows in order in one round trip; per row, the stored row or why it was not stored.

        Consecutive rows of one run go to Redis as one script call. Raises
        ``JournalUnavailable`` if Redis could not be reached: any prefix of the rows
        may then have been written (``maybe_written``), and sending them all again
        (same row ids) writes each exactly once.
        """
        groups: list[list[PendingRow]] = []
        for item in rows:
            row = item[0]
            paths.check_ids(row.session_id, row.run_id)
            last = groups[-1][-1][0] if groups else None
            if last is not None and (last.session_id, last.run_id) == (row.session_id, row.run_id):
                groups[-1].append(item)
            else:
                groups.append([item])
        pipe = self.client.pipeline(transaction=False)
        for group in groups:
            self._script(*self._call(group, None), client=pipe)
        with sending(self._script.sha) as sent:
            try:
                answers = pipe.execute(raise_on_error=False)
            except Exception as exc:
                raise self._error(exc, maybe_written=sent.sent) from exc
        out: list[dict[str, Any] | Exception] = []
        for group, answer in zip(groups, answers, strict=True):
            if isinstance(answer, Exception):
                if is_transient(answer):
                    raise self._error(answer, maybe_written=True)
                out += [answer] * len(group)
            else:
                results = self._results(group, answer, None)
                for i, ((row, row_id), result) in enumerate(zip(group, results, strict=True)):
                    if isinstance(result, RunFull) and row.state is not None:
                        # After the rest of its batch: a run's terminal row is its last as a rule.
                        results[i] = self._end_anyway(row, row_id, None)
                out += results
        return out

    def _call(self, group: Sequence[PendingRow], seq: int | None) -> tuple[list[str], list[Any]]:
        """The keys and arguments of one script call appending ``group`` (rows of one run)."""
        first = group[0][0]
        args: list[Any] = [
            first.run_id,
            first.session_id,
            int(time.time() * 1000),
            self.retention,
            self.max_run_bytes,
            TERMINAL_RESERVE,
            seq or 0,
        ]
        for row, row_id in group:
            args += (row_id, "0" if row.state is None else "1", row.tail)
        return self.keys.append_keys(first.session_id, first.run_id), args

    def _results(
        self, group: Sequence[PendingRow], answer: Any, expected: int | None
    ) -> list[dict[str, Any] | Exception]:
        out: list[dict[str, Any] | Exception] = []
        duplicates: dict[int, int] = {}  # seq -> index in out
        for i, (row, _) in enumerate(group):
            seq, status = int(answer[2 * i]), int(answer[2 * i + 1])
            if status == FOREIGN:
                error = RuntimeError(text(answer[2 * i + 2]))
                out += [error] * (len(group) - i)  # the script stopped here: nothing after it was tried
                break
            if status == REFUSED:
                out.append(RunFull(row.session_id, row.run_id, self.max_run_bytes))
            elif status == WRONG_SEQ:
                out.append(ValueError(f"seq {expected} is not the run's next seq {seq + 1}"))
            elif status == DUPLICATE:
                duplicates[seq] = len(out)
                out.append(LookupError(f"row {row.run_id}:{seq} was written, then expired before it was read back"))
            else:
                out.append(row.row(seq))
        if duplicates:
            # An earlier try wrote these: the caller gets what was stored, not what it sent again.
            first = group[0][0]
            stored = self.read(first.session_id, first.run_id, after_seq=min(duplicates) - 1, max_seq=max(duplicates))
            for found in stored["events"]:
                index = duplicates.get(found["seq"])
                if index is not None:
                    out[index] = found
        return out

    def _error(self, exc: BaseException, *, row_id: str | None = None, maybe_written: bool = False) -> Exception:
        if isinstance(exc, JournalUnavailable | RunFull):
            return exc
        if is_transient(exc):
            return JournalUnavailable(
                f"run journal on {self._where()} unavailable: {exc}", row_id=row_id, maybe_written=maybe_written
            )
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))

    def _where(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        if "path" in kwargs:
            return f"unix:{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    # -- reading -------------------------------------------------------------------------

    def read(self, session_id: str, run_id: str, *, after_seq: int = 0, max_seq: int | None = None) -> dict[str, Any]:
        paths.check_ids(session_id, run_id)
        rows: list[dict[str, Any]] = []
        malformed: list[dict[str, Any]] = []
        stream = self.keys.stream(session_id, run_id)
        end = "+" if max_seq is None else str(max_seq)  # an id without "-<n>" ends at <max_seq>-<largest n>
        start = f"{after_seq + 1}-0" if after_seq else "-"
        try:
            for entries in self._pages(stream, start, end, READ_BATCH):
                parse_entries(entries, rows, malformed)
        except Exception as exc:
            raise self._error(exc) from exc
        return {"session_id": session_id, "run_id": run_id, "events": rows, "malformed": malformed}

    def summary(self, session_id: str, run_id: str) -> dict[str, Any] | None:
        """The run's summary over every row (cached per run until its seq or size moves)."""
        paths.check_ids(session_id, run_id)
        key = (session_id, run_id)
        meta = self.keys.meta(session_id, run_id)
        try:
            state: Any = self.client.hmget(meta, "seq", "bytes")
            with self._summaries_lock:
                cached = self._summaries.get(key)
            if cached is not None and state[0] and cached[0] == tuple(state):
                return copy_summary(cached[1])
            if not (last := int(state[0] or 0)) and not self.client.exists(self.keys.runs(session_id)):
                return None
            summary = self._fold(session_id, run_id, last, int(state[1] or 0))
        except Exception as exc:
            raise self._error(exc) from exc
        if last and summary["last_seq"] == last:  # not a run that expired while it was read
            with self._summaries_lock:
                self._summaries[key] = (tuple(state), summary)
                self._summaries.move_to_end(key)
                while len(self._summaries) > _SUMMARY_CACHE_SIZE:
                    self._summaries.popitem(last=False)
        return copy_summary(summary)

    def _fold(self, session_id: str, run_id: str, last: int, size: int) -> dict[str, Any]:
        """The summary of rows 1..``last`` (which never change), folded a page at a time: every SSE stream's
        lookup of a live run asks for it, and reading the run whole held it once per request."""
        fold = SummaryFold(session_id, run_id)
        if last:
            stream, count = self.keys.stream(session_id, run_id), page_count(size // last, _FOLD_BUDGET)
            for entries in self._pages(stream, "-", str(last), count, _FOLD_BUDGET):
                rows: list[dict[str, Any]] = []
                parse_entries(entries, rows, [])
                for row in rows:
                    fold.feed(row)
        return fold.result()

    def _pages(self, stream: str, start: str, end: str, count: int, budget: int | None = None) -> Iterator[Any]:
        """The stream's entries ``start``..``end``, ``count`` at a time; with a byte ``budget``, each next page
        as many as fit it at the largest row of the last."""
        while True:
            entries: Any = self.client.xrange(stream, start, end, count=count)
            yield entries
            if len(entries) < count:
                return
            start = "(" + text(entries[-1][0])
            if budget is not None:
                count = page_count(largest(entries), budget)

    def locate(self, run_id: str) -> str | None:
        paths.check_ids("s", run_id)
        try:
            value: Any = self.client.get(self.keys.where(run_id))
        except Exception as exc:
            raise self._error(exc) from exc
        session_id = text(value) if value is not None else None
        return session_id if paths.valid_id(session_id) else None

    def list_sessions(self) -> list[dict[str, Any]]:
        """Sessions with a run Redis still holds, most recently written first (expired ones are pruned)."""
        return [
            {"session_id": name, "updated_at": score}
            for name, score in self._listed(self.keys.sessions, self.keys.runs)
        ]

    def list_runs(self, session_id: str) -> list[dict[str, Any]]:
        if not paths.valid_id(session_id):
            raise ValueError("invalid session_id/run_id")
        return [
            {"session_id": session_id, "run_id": name, "updated_at": score}
            for name, score in self._listed(self.keys.runs(session_id), lambda run: self.keys.meta(session_id, run))
        ]

    def _listed(self, index: str, key_of: Any) -> list[tuple[str, float]]:
        try:
            members: Any = self.client.zrevrange(index, 0, -1, withscores=True)
            named = [(text(m), float(score) / 1000) for m, score in members]
            valid = [item for item in named if paths.valid_id(item[0])]
            pipe = self.client.pipeline(transaction=False)
            for name, _ in valid:
                pipe.exists(key_of(name))
            alive = [item for item, exists in zip(valid, pipe.execute(), strict=True) if exists]
            if len(alive) < len(named):
                kept = {name for name, _ in alive}
                self.client.zrem(index, *(name for name, _ in named if name not in kept))
        except Exception as exc:
            raise self._error(exc) from exc
        return alive

    def run_stats(self, session_id: str, run_id: str) -> dict[str, int]:
        """``{seq, bytes, refused, done}`` of a run (zeros for a run Redis does not hold)."""
        paths.check_ids(session_id, run_id)
        try:
            values: Any = self.client.hmget(self.keys.meta(session_id, run_id), "seq", "bytes", "refused", "done")
        except Exception as exc:
            raise self._error(exc) from exc
        return dict(zip(("seq", "bytes", "refused", "done"), (int(v or 0) for v in values), strict=True))

    # -- following -----------------------------------------------------------------------

    async def follow(
        self, session_id: str, run_id: str, *, after_seq: int = 0, idle: float = DEFAULT_IDLE
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Rows after ``after_seq`` as Redis gets them (``XREAD BLOCK``), until the run's terminal row."""
        paths.check_ids(session_id, run_id)
        # A connection of its own: a blocking read holds it, and closing the iterator closes it.
        # Its timeout outlasts the longest block, so only a dead link (no reply at all) times out.
        options = {**self._options, "socket_timeout": idle + max(5.0, self._options["socket_timeout"])}
        client = redis.asyncio.Redis.from_url(
            self.url, retry=self._retry(AsyncRetry), single_connection_client=True, **options
        )
        batches = self._follow(client, session_id, run_id, after_seq, idle)
        try:
            async for rows in batches:
                yield rows
        finally:
            await batches.aclose()
            await client.aclose()

    async def _follow(
        self, client: redis.asyncio.Redis, session_id: str, run_id: str, after_seq: int, idle: float
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        stream = self.keys.stream(session_id, run_id)
        block_ms = max(1, int(idle * 1000))
        try:
            meta: Any = await client.hmget(self.keys.meta(session_id, run_id), "done", "seq", "bytes")
        except Exception as exc:
            raise self._error(exc) from exc
        ended = bool(meta[0])
        # Read from the run's end when the cursor is past it: rows up to the cursor are not sent,
        # but a terminal row among them still ends the stream.
        start = min(after_seq, int(meta[1] or 0))
        last = f"{start}-18446744073709551615" if start else "0-0"
        # Ask for as many rows as fit the budget at the run's average row size, then at the largest seen.
        average = int(meta[2] or 0) // max(1, int(meta[1] or 0))
        count = page_count(average, _FOLLOW_BUDGET)
        while True:
            try:
                # A run that has ended only has what is already stored left to send.
                answer: Any = await client.xread({stream: last}, count=count, block=None if ended else block_ms)
            except Exception as exc:
                raise self._error(exc) from exc
            if not answer:
                if ended:
                    return
                yield []
                continue
            entries = answer[0][1]
            last = text(entries[-1][0])
            count = page_count(largest(entries), _FOLLOW_BUDGET)
            rows: list[dict[str, Any]] = []
            parse_entries(entries, rows, [], raw=True)
            ended = ended or any(ends_run(row) for row in rows)
            rows = [row for row in rows if row["seq"] > after_seq]
            if rows:
                yield rows
