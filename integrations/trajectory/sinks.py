"""Where an ``AtifExporter`` delivers trajectories: a file, an HTTP endpoint, object storage.

Sinks run on one worker thread: a conversation that ends hands its session id over
and the agent goes on. The worker builds the trajectory and gives it to each sink; an
HTTP sink retries with backoff a bounded number of times, then gives up (counted in
``failures``). At most ``max_pending`` trajectories wait; more are dropped (counted).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import os
import queue
import socket
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from relay_runtime.urls import shown_url

log = logging.getLogger("relay_runtime.integrations.trajectory")


class Sink(Protocol):
    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        """Deliver one trajectory; raise to report a failure."""


def _dump(trajectory: dict[str, Any]) -> str:
    return json.dumps(trajectory, ensure_ascii=False, indent=2)


def write_file(path: str, text: str) -> str:
    """``text`` at ``path``, whole or not at all: written to a file beside it, then renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".atif-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path


def _path_safe(session_id: str) -> str:
    """``session_id`` as one path segment: a conversation id is caller data, and ``../x`` or ``a/b``
    must not name a file outside the sink's directory (nor another URL). Plain ids stay as they are."""
    text = urllib.parse.quote(session_id, safe="")
    return text.replace(".", "%2E") if text in ("", ".", "..") else text


def _named(template: str, session_id: str) -> str:
    if "{session_id}" not in template:
        raise ValueError(f"a sink's path or URL template must contain {{session_id}}, got {template!r}")
    return template.replace("{session_id}", _path_safe(session_id))


# What is read of an endpoint's answer (it is not used): an endless body cannot hold the sinks' thread.
_MAX_ANSWER = 64 * 1024


class FileSink:
    """``FileSink("out/atif-{session_id}.json")``: one file per conversation, replaced whole on each export."""

    def __init__(self, template: str | os.PathLike[str]) -> None:
        self.template = os.fspath(template)
        _named(self.template, "x")

    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        write_file(_named(self.template, session_id), _dump(trajectory))


class HttpSink:
    """POSTs each trajectory as JSON to ``url``; retries network errors and 5xx / 429 answers with backoff.

    ``retries`` further tries at most, waiting ``backoff`` seconds, doubled each time; another 4xx
    is not retried, nor is a redirect (it is not followed: that would hand ``headers`` to wherever it
    points). ``timeout``: seconds the endpoint may stay silent; ``deadline``: seconds one try may take
    in all (an endpoint trickling its answer is cut off). Runs on the sinks' thread, never the agent's.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 3.0,
        retries: int = 3,
        backoff: float = 0.2,
        deadline: float = 30.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"HttpSink needs an http(s) URL, got {shown_url(url)}")
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError as exc:
            raise ValueError(f"HttpSink needs an http(s) URL, got {shown_url(url)}: {exc}") from None
        if not parts.hostname:
            raise ValueError(f"HttpSink needs an http(s) URL with a host, got {shown_url(url)}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
        for name, value in (("timeout", timeout), ("deadline", deadline)):
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(backoff, bool) or not (isinstance(backoff, (int, float)) and 0 <= backoff < math.inf):
            raise ValueError(f"backoff must be a number of seconds >= 0, got {backoff!r}")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        self.retries = retries
        self.backoff = float(backoff)
        self.attempts = 0

    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        body = json.dumps(trajectory, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "X-Session-Id": session_id, **self.headers}
        delay = self.backoff
        shown = shown_url(self.url)
        for attempt in range(self.retries + 1):
            self.attempts += 1
            try:
                status = self._post(body, headers)
            except (OSError, http.client.HTTPException) as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    return
                if status < 500 and status != 429:
                    raise RuntimeError(f"HTTP sink {shown}: the endpoint refused the trajectory ({status})")
                failure = f"HTTP {status}"
            if attempt < self.retries:
                time.sleep(delay)
                delay *= 2
        raise RuntimeError(f"HTTP sink {shown}: gave up after {self.retries + 1} tries: {failure}")

    def _post(self, body: bytes, headers: dict[str, str]) -> int:
        """One try: the endpoint's status, its answer read no further than ``_MAX_ANSWER``."""
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=self.timeout)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        cut = threading.Event()
        answered = threading.Lock()  # held once the answer is read: a late watchdog then cuts nothing

        def cut_off() -> None:
            # A blocked read is woken by shutting the socket down; the try then fails as cut off.
            if not answered.acquire(blocking=False):
                return
            cut.set()
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.deadline, cut_off)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request("POST", target, body=body, headers=headers)
            answer = connection.getresponse()
            answer.read(_MAX_ANSWER)
            answered.acquire(blocking=False)
        except (OSError, http.client.HTTPException):
            if not cut.is_set():
                raise
        finally:
            watchdog.cancel()
            connection.close()
        if cut.is_set():
            # Cut off mid-answer, http.client may even have seen a whole one (the end of the stream
            # ends the headers): it is not the endpoint's word.
            raise TimeoutError(f"the try took more than its deadline of {self.deadline:g}s")
        return answer.status


class FsspecSink:
    """``FsspecSink("s3://bucket/atif/{session_id}.json")``: any URL ``fsspec`` opens (extra ``trajectory``)."""

    def __init__(self, template: str, **storage_options: Any) -> None:
        _named(template, "x")
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError("FsspecSink needs fsspec: pip install 'relay-runtime[trajectory]'") from exc
        # The URL's protocol is resolved now: an unknown one, or one whose package is missing, is the
        # caller's error here, not a warning on the sinks' thread at each conversation's end.
        protocol = fsspec.core.split_protocol(template)[0] or "file"
        try:
            fsspec.get_filesystem_class(protocol)
        except (ValueError, ImportError) as exc:
            raise type(exc)(f"FsspecSink cannot write {shown_url(template)}: {exc}") from None
        self._fsspec = fsspec
        self.template = template
        self.storage_options = storage_options

    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        with self._fsspec.open(_named(self.template, session_id), "w", encoding="utf-8", **self.storage_options) as out:
            out.write(_dump(trajectory))


class SinkWorker:
    """One thread delivering trajectories to the sinks, fed session ids through a bounded queue."""

    def __init__(self, sinks: list[Sink], build: Callable[[str], dict[str, Any]], max_pending: int = 1024) -> None:
        for sink in sinks:
            if not callable(getattr(sink, "send", None)):
                raise TypeError(f"a sink needs a send(session_id, trajectory) method, got {type(sink).__name__}")
        self._sinks = sinks
        self._build = build
        self._queue: queue.Queue[Any] = queue.Queue(max_pending)
        self.failures = 0
        self.dropped = 0
        self.delivered = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="relay-atif-sinks", daemon=True)
        self._thread.start()

    def submit(self, session_id: str) -> None:
        if self._closed:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(session_id)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                    continue
                self._deliver(item)
            finally:
                self._queue.task_done()

    def _deliver(self, session_id: str) -> None:
        try:
            trajectory = self._build(session_id)
        except Exception:
            self.failures += 1
            log.exception("building the trajectory of %r failed", session_id)
            return
        for sink in self._sinks:
            try:
                sink.send(session_id, trajectory)
                self.delivered += 1
            except Exception as exc:
                self.failures += 1
                log.warning("trajectory sink %r failed for %r: %s", type(sink).__name__, session_id, exc)

    def flush(self, timeout: float | None) -> bool:
        if not self._thread.is_alive():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        done = threading.Event()
        # Waiting for room counts against the timeout too: with a sink stuck and the queue full,
        # an unbounded put held the caller (and shutdown at exit) for ever.
        if not self._put(done, deadline):
            return False
        return done.wait(_left(deadline))

    def close(self, timeout: float | None) -> bool:
        if self._closed:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = self.flush(timeout)
        self._closed = True
        if not self._put(None, deadline):
            return False  # the thread is a daemon: a sink stuck for good ends with the process
        self._thread.join(_left(deadline))
        return flushed

    def _put(self, item: Any, deadline: float | None) -> bool:
        try:
            self._queue.put(item, timeout=_left(deadline))
        except queue.Full:
            return False
        return True


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
