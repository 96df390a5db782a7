"""What one client may cost the journal server: failed token checks, and SSE streams held open at once;
and the stream tasks a stopping server has to end.

Both tables are keyed by the client's address and bounded in size, so a crowd of addresses costs a
fixed amount of memory; behind a reverse proxy every client shares the proxy's address.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

_MAX_ADDRESSES = 4096


class FailedLogins:
    """Past ``limit`` failed token checks within ``window`` seconds an address is refused without its
    token being looked at, until the window has passed; each failure is also answered ``delay`` seconds late.
    Guessing a token then costs time, not just requests."""

    def __init__(self, *, limit: int = 10, window: float = 60.0, delay: float = 0.25) -> None:
        self.limit = limit
        self.window = window
        self.delay = delay
        self._lock = threading.Lock()
        self._table: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def retry_after(self, address: str | None) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        with self._lock:
            entry = self._table.get(address or "")
            if entry is None:
                return 0.0
            left = entry[0] + self.window - time.monotonic()
            return left if entry[1] >= self.limit and left > 0 else 0.0

    def failed(self, address: str | None) -> None:
        key = address or ""
        now = time.monotonic()
        with self._lock:
            start, count = self._table.pop(key, (now, 0))
            if now - start > self.window:
                start, count = now, 0
            self._table[key] = (start, count + 1)
            while len(self._table) > _MAX_ADDRESSES:
                self._table.popitem(last=False)


class StreamsPerClient:
    """How many SSE streams each address holds open; an address at ``limit`` is refused another."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def take(self, address: str | None) -> bool:
        key = address or ""
        held = self._open.get(key, 0)
        if held >= self.limit:
            return False
        self._open[key] = held + 1
        return True

    def release(self, address: str | None) -> None:
        key = address or ""
        held = self._open.get(key, 0) - 1
        if held > 0:
            self._open[key] = held
        else:
            self._open.pop(key, None)


class StreamTasks:
    """The tasks serving SSE streams, which a stop ends: a stream of a live run never ends by itself.

    A handler enters as it starts (before it looks its run up), so one that a stop finds anywhere in
    its work is ended with the rest; one that starts after the stop began is refused.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.stopping = False

    def enter(self, task: asyncio.Task[Any] | None) -> bool:
        """Register ``task``; False (and nothing held) once the server is stopping."""
        if self.stopping:
            return False
        if task is not None:
            self._tasks.add(task)
        return True

    def leave(self, task: asyncio.Task[Any] | None) -> None:
        self._tasks.discard(task)

    def end_all(self) -> None:
        self.stopping = True
        for task in [*self._tasks]:
            task.cancel()


class SlotsPerClient:
    """At most ``limit`` at once per address; more from the same address wait their turn (up to a timeout).

    A client that stops reading holds up its own address, not everyone's.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._table: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @asynccontextmanager
    async def slot(self, address: str | None, timeout: float) -> AsyncIterator[bool]:
        """Yields whether a slot was had within ``timeout`` seconds."""
        key = address or ""
        entry = self._table.get(key)
        if entry is None:
            entry = self._table[key] = (asyncio.Semaphore(self.limit), [0])
        semaphore, users = entry
        users[0] += 1
        try:
            try:
                await asyncio.wait_for(semaphore.acquire(), timeout)
            except TimeoutError:
                yield False
                return
            try:
                yield True
            finally:
                semaphore.release()
        finally:
            users[0] -= 1
            if not users[0]:
                del self._table[key]


class QuietClientErrors(logging.LoggerAdapter[logging.Logger]):
    """The server's logger, except that a request the HTTP parser refused (a 4xx: junk, oversized
    headers, a bad method) is one INFO line, not an ERROR with a traceback: it is the client's fault."""

    def exception(self, msg: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError) and 400 <= exc_info.code < 500:
            reason = str(exc_info.message).strip().splitlines()[0] if exc_info.message else ""
            self.logger.info("run journal: refused a malformed request (%s %s)", exc_info.code, reason[:200])
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)
