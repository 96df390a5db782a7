"""The run journal on Redis Streams: one stream per run, shared by every writer and server that reaches it.

See ``redis_keys`` for the layout and the append script. Appends are
synchronous (the row comes back with its seq once Redis has it, or the call
raises); a lost reply is retried with the same row id, which the script
recognises, so a row is never written twice. Live reads block in ``XREAD``
(no polling), on the asyncio client.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from . import paths
from .errors import JournalUnavailable, RunFull
from .reading import parse_line
from .redis_keys import APPEND_SCRIPT, DEFAULT_PREFIX, DUPLICATE, REFUSED, ROW_FIELD, Keys

DEFAULT_RETENTION = 7 * 24 * 3600.0
DEFAULT_MAX_RUN_BYTES = 64 * 1024 * 1024
TERMINAL_RESERVE = 64 * 1024  # a run at its cap can still record how it ended
_READ_BATCH = 512
_PREVIEW = 200
# Lost connections, timeouts, and a server that restarted or is still loading its data.
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, NoScriptError, OSError)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSIENT):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(("LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN"))


def new_row_id() -> str:
    return uuid.uuid4().hex


class AppendResult:
    """What the script answered for one row: its seq, and whether an earlier try had already written it."""

    __slots__ = ("duplicate", "seq")

    def __init__(self, seq: int, duplicate: bool) -> None:
        self.seq = seq
        self.duplicate = duplicate


class RedisRuns:
    """The Redis side of the store: append, read, follow, list. Ids are checked by the caller."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: float = DEFAULT_RETENTION,
        max_run_bytes: int = DEFAULT_MAX_RUN_BYTES,
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retries: int = 3,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"Redis URL must start with redis://, rediss:// or unix://, got {url!r}")
        if not (isinstance(retention, int | float) and retention >= 1):
            raise ValueError(f"retention must be at least 1 second, got {retention!r}")
        if type(max_run_bytes) is not int or max_run_bytes < 1:
            raise ValueError(f"max_run_bytes must be a positive integer, got {max_run_bytes!r}")
        self.url = url
        self.keys = Keys(prefix)
        self.retention = int(retention)
        self.max_run_bytes = max_run_bytes
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            # A retried append is safe: the script drops a row id it has already written.
            "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), retries),
            "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        }
        self.client = redis.Redis.from_url(url, **self._options)
        self._script = self.client.register_script(APPEND_SCRIPT)
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
            weakref.WeakKeyDictionary()
        )

    def close(self) -> None:
        self.client.close()

    # -- appending -----------------------------------------------------------------------

    def _args(self, session_id: str, run_id: str, row_id: str, tail: str, terminal: bool) -> list[Any]:
        return [
            run_id,
            session_id,
            row_id,
            tail,
            "1" if terminal else "0",
            int(time.time() * 1000),
            self.retention,
            self.max_run_bytes,
            TERMINAL_RESERVE,
        ]

    def append(self, session_id: str, run_id: str, row_id: str, tail: str, terminal: bool) -> AppendResult:
        """Append one row (``tail``: its JSON after the seq); raises ``RunFull`` or ``JournalUnavailable``."""
        keys = self.keys.append_keys(session_id, run_id)
        try:
            answer = self._script(keys, self._args(session_id, run_id, row_id, tail, terminal))
        except Exception as exc:
            raise self._error(exc) from exc
        return self._result(session_id, run_id, answer)

    def append_many(
        self, rows: Sequence[tuple[str, str, str, str, bool]]
    ) -> list[AppendResult | RunFull]:
        """Append ``(session_id, run_id, row_id, tail, terminal)`` rows in order, in one round trip.

        Raises ``JournalUnavailable`` if Redis could not be reached: then any
        prefix of the rows may have been written, and sending them all again
        (same row ids) writes each exactly once.
        """
        pipe = self.client.pipeline(transaction=False)
        for session_id, run_id, row_id, tail, terminal in rows:
            self._script(
                self.keys.append_keys(session_id, run_id),
                self._args(session_id, run_id, row_id, tail, terminal),
                client=pipe,
            )
        try:
            answers = pipe.execute(raise_on_error=False)
        except Exception as exc:
            raise self._error(exc) from exc
        out: list[AppendResult | RunFull] = []
        for (session_id, run_id, *_), answer in zip(rows, answers, strict=True):
            if isinstance(answer, Exception):
                raise self._error(answer)
            try:
                out.append(self._result(session_id, run_id, answer))
            except RunFull as full:
                out.append(full)
        return out

    def _result(self, session_id: str, run_id: str, answer: Any) -> AppendResult:
        seq, status = int(answer[0]), int(answer[1])
        if status == REFUSED:
            raise RunFull(session_id, run_id, self.max_run_bytes)
        return AppendResult(seq, status == DUPLICATE)

    def _error(self, exc: BaseException) -> Exception:
        if isinstance(exc, JournalUnavailable | RunFull):
            return exc
        if _transient(exc):
            return JournalUnavailable(f"run journal on {self._where()} unavailable: {exc}")
        if isinstance(exc, Exception):
            return exc
        return RuntimeError(str(exc))

    def _where(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        return f"redis {kwargs.get('host', kwargs.get('path', '?'))}:{kwargs.get('port', '')}"

    # -- reading -------------------------------------------------------------------------

    def read(
        self, session_id: str, run_id: str, after_seq: int = 0, max_seq: int | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Rows with ``after_seq < seq <= max_seq`` and the entries that are not rows, in stream order."""
        stream = self.keys.stream(session_id, run_id)
        end = "+" if max_seq is None else str(max_seq)  # an entry id without its part after "-": up to N-<max>
        start = f"{after_seq + 1}-0" if after_seq else "-"
        rows: list[dict[str, Any]] = []
        malformed: list[dict[str, Any]] = []
        try:
            while True:
                entries: Any = self.client.xrange(stream, start, end, count=_READ_BATCH)
                parse_entries(entries, rows, malformed)
                if len(entries) < _READ_BATCH:
                    break
                start = "(" + _text(entries[-1][0])
        except Exception as exc:
            raise self._error(exc) from exc
        return rows, malformed

    def last_seq(self, session_id: str, run_id: str) -> int:
        try:
            value = self.client.hget(self.keys.meta(session_id, run_id), "seq")
        except Exception as exc:
            raise self._error(exc) from exc
        return int(value or 0)

    def stats(self, session_id: str, run_id: str) -> dict[str, int]:
        """``{seq, bytes, refused, done}`` of a run (zeros for a run Redis does not hold)."""
        try:
            values = self.client.hmget(self.keys.meta(session_id, run_id), "seq", "bytes", "refused", "done")
        except Exception as exc:
            raise self._error(exc) from exc
        return dict(zip(("seq", "bytes", "refused", "done"), (int(v or 0) for v in values), strict=True))

    def session_of(self, run_id: str) -> str | None:
        try:
            value: Any = self.client.get(self.keys.where(run_id))
        except Exception as exc:
            raise self._error(exc) from exc
        return _text(value) if value is not None else None

    def has_session(self, session_id: str) -> bool:
        try:
            return bool(self.client.exists(self.keys.runs(session_id)))
        except Exception as exc:
            raise self._error(exc) from exc

    def list_sessions(self) -> list[str]:
        """Sessions with at least one run Redis still holds, most recently written first."""
        try:
            names = [_text(n) for n in self._members(self.keys.sessions)]
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.exists(self.keys.runs(name))
            alive = pipe.execute()
            gone = [n for n, a in zip(names, alive, strict=True) if not a]
            if gone:
                self.client.zrem(self.keys.sessions, *gone)
        except Exception as exc:
            raise self._error(exc) from exc
        return [n for n, a in zip(names, alive, strict=True) if a and paths.valid_id(n)]

    def list_runs(self, session_id: str) -> list[str]:
        """A session's runs that Redis still holds, most recently written first."""
        runs_key = self.keys.runs(session_id)
        try:
            names = [_text(n) for n in self._members(runs_key)]
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.exists(self.keys.meta(session_id, name))
            alive = pipe.execute()
            gone = [n for n, a in zip(names, alive, strict=True) if not a]
            if gone:
                self.client.zrem(runs_key, *gone)
        except Exception as exc:
            raise self._error(exc) from exc
        return [n for n, a in zip(names, alive, strict=True) if a and paths.valid_id(n)]

    def _members(self, key: str) -> list[Any]:
        members: Any = self.client.zrevrange(key, 0, -1)
        return list(members)

    # -- following -----------------------------------------------------------------------

    def _async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = self._async[loop] = redis.asyncio.Redis.from_url(self.url, **self._async_options())
        return client

    def _async_options(self) -> dict[str, Any]:
        from redis.asyncio.retry import Retry as AsyncRetry

        options = dict(self._options)
        options["retry"] = AsyncRetry(ExponentialBackoff(cap=0.5, base=0.02), 3)
        options["socket_timeout"] = None  # blocking reads carry their own timeout
        return options

    async def follow(
        self, session_id: str, run_id: str, after_seq: int, block: float
    ) -> AsyncIterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """``(rows, malformed)`` batches after ``after_seq`` as they are written; an empty batch every ``block`` s."""
        client = self._async_client()
        stream = self.keys.stream(session_id, run_id)
        last = f"{after_seq}-18446744073709551615" if after_seq else "0-0"
        block_ms = max(1, int(block * 1000))
        while True:
            try:
                answer: Any = await client.xread({stream: last}, count=_READ_BATCH, block=block_ms)
            except Exception as exc:
                raise self._error(exc) from exc
            rows: list[dict[str, Any]] = []
            malformed: list[dict[str, Any]] = []
            if answer:
                entries = answer[0][1]
                parse_entries(entries, rows, malformed)
                last = _text(entries[-1][0])
            yield rows, malformed

    async def aclose(self) -> None:
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_entries(
    entries: Sequence[Any], rows: list[dict[str, Any]], malformed: list[dict[str, Any]]
) -> None:
    """Split stream entries into rows and reports of entries that are not rows (never raising)."""
    for entry_id, fields in entries:
        ident = _text(entry_id)
        data = fields.get(ROW_FIELD) if isinstance(fields, dict) else None
        if data is None:
            malformed.append({"offset": ident, "reason": "stream entry without a row", "text": repr(fields)[:_PREVIEW]})
            continue
        row, reason = parse_line(data)
        if row is None:
            malformed.append(
                {"offset": ident, "reason": reason or "", "text": data[:_PREVIEW].decode("utf-8", "replace")}
            )
        elif f"{row['seq']}-0" != ident:
            malformed.append(
                {
                    "offset": ident,
                    "reason": f"row seq {row['seq']} does not match its stream entry",
                    "text": data[:_PREVIEW].decode("utf-8", "replace"),
                }
            )
        else:
            rows.append(row)
