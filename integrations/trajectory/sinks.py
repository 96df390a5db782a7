"""Where an ``AtifExporter`` delivers trajectories: a file, an HTTP endpoint, object storage.

Sinks run on one worker thread: a conversation that ends hands its session id over
and the agent goes on. The worker builds the trajectory and gives it to each sink; an
HTTP sink retries with backoff a bounded number of times, then gives up (counted in
``failures``). At most ``max_pending`` trajectories wait; more are dropped (counted).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

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


def _named(template: str, session_id: str) -> str:
    if "{session_id}" not in template:
        raise ValueError(f"a sink's path or URL template must contain {{session_id}}, got {template!r}")
    return template.replace("{session_id}", session_id)


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
    is not retried. Runs on the sinks' thread, never on the agent's.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 3.0,
        retries: int = 3,
        backoff: float = 0.2,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"HttpSink needs an http(s) URL, got {url!r}")
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.attempts = 0

    def send(self, session_id: str, trajectory: dict[str, Any]) -> None:
        body = json.dumps(trajectory, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "X-Session-Id": session_id, **self.headers}
        delay = self.backoff
        for attempt in range(self.retries + 1):
            self.attempts += 1
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    answer.read()
                return
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429:
                    raise RuntimeError(
                        f"HTTP sink {self.url}: the endpoint refused the trajectory ({exc.code})"
                    ) from exc
                failure: Exception = exc
            except (urllib.error.URLError, OSError) as exc:
                failure = exc
            if attempt < self.retries:
                time.sleep(delay)
                delay *= 2
        raise RuntimeError(f"HTTP sink {self.url}: gave up after {self.retries + 1} tries: {failure}")


class FsspecSink:
    """``FsspecSink("s3://bucket/atif/{session_id}.json")``: any URL ``fsspec`` opens (extra ``trajectory``)."""

    def __init__(self, template: str, **storage_options: Any) -> None:
        _named(template, "x")
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError("FsspecSink needs fsspec: pip install 'relay-runtime[trajectory]'") from exc
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
        done = threading.Event()
        self._queue.put(done)  # waits for room: flushing is the caller's choice to wait
        return done.wait(timeout)

    def close(self, timeout: float | None) -> bool:
        if self._closed:
            return True
        flushed = self.flush(timeout)
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout)
        return flushed
