"""``AtofExporter``: every scope start, scope end and mark as one ATOF JSON line.

The agent's thread only appends the event to a bounded buffer; a writer thread turns
events into lines and writes them, so a slow disk never holds the agent up. A full
buffer drops the event and counts it (``dropped``, and ``trajectory.atof_dropped`` in
the relay's ``diagnostics()``).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import IO, Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_START, Event, Relay
from relay_runtime.attach import Attachment, detach_all, subscriber_attachment
from relay_runtime.types import ScopeType

from .atof import Roots, atof_line
from .records import frozen, frozen_request
from .sent_copies import SentCopies

_MODES = ("append", "overwrite")
_INTERVAL = 0.05
_LLM = ScopeType.LLM.value
_TOOL = ScopeType.TOOL.value


class AtofExporter:
    """``AtofExporter("run.atof.jsonl").attach(SESSION_COORDINATOR)``; or ``stream=`` any writable text stream."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        stream: IO[str] | None = None,
        mode: str = "append",
        max_buffered: int = 100_000,
    ) -> None:
        if (path is None) == (stream is None):
            raise ValueError("AtofExporter needs a path or a stream= (one of them)")
        if mode not in _MODES:
            raise ValueError(f"AtofExporter mode must be 'append' or 'overwrite', got {mode!r}")
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise TypeError(f"AtofExporter stream= needs a writable text stream, got {type(stream).__name__}")
        if type(max_buffered) is not int or max_buffered < 1:
            raise ValueError(f"max_buffered must be a positive integer, got {max_buffered!r}")
        self.path = os.fspath(path) if path is not None else None
        self._owned: IO[str] | None = None
        if self.path is not None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "append" else os.O_TRUNC), 0o600)
            self._owned = os.fdopen(fd, "a" if mode == "append" else "w", encoding="utf-8")
        self._out: IO[str] = self._owned if self._owned is not None else stream  # type: ignore[assignment]
        self._max = max_buffered
        self._buffer: deque[Any] = deque()
        self._copies = SentCopies()  # each request's messages as sent: the writer writes them later
        self._wake = threading.Event()
        self._stopped = False
        self.dropped = 0
        self.write_errors = 0
        self.written = 0
        self._attachments: list[Attachment] = []
        self._relays: list[Relay] = []
        self._roots = Roots()
        self._thread = threading.Thread(target=self._run, name="relay-atof-writer", daemon=True)
        self._thread.start()

    # -- wiring ------------------------------------------------------------------------------

    def attach(self, target: Any, *, name: str | None = None) -> AtofExporter:
        """Write the events of ``target``: a ``Relay``, a session host, or ``SESSION_COORDINATOR``."""

        name = name or f"atof@{id(self):x}"  # one subscriber name per exporter: several may watch a relay

        # Stream chunks are marks in ATOF too; the writer learns each relay (for its diagnostics).
        self._attachments.append(
            subscriber_attachment(target, self, name=name, chunks=True, on_connect=self._relays.append)
        )
        return self

    def detach(self) -> None:
        detach_all(self._attachments)

    # -- the agent's side: one append ------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        buffer = self._buffer
        if len(buffer) >= self._max or self._stopped:
            self._drop()
            return
        scope_type = event.scope_type
        if scope_type == _LLM and event.kind == SCOPE_START:
            # Written later, on the writer's thread: the request is taken as sent (the agent's list grows),
            content, headers = frozen_request(event, self._copies)
            buffer.append((event, {"headers": headers, "content": content}))
        elif scope_type == _TOOL or (event.kind == MARK and event.name != CHUNK_MARK):
            buffer.append((event, frozen(event)))  # and a tool's arguments and result, a mark's data, as they were
        else:
            buffer.append(event)

    def _drop(self) -> None:
        self.dropped += 1
        for relay in self._relays:
            relay.count("trajectory.atof_dropped")

    # -- the writer ------------------------------------------------------------------------------

    def _run(self) -> None:
        buffer = self._buffer
        while True:
            self._wake.wait(_INTERVAL)
            self._wake.clear()
            stop = False
            lines: list[str] = []
            done: list[threading.Event] = []
            while buffer:
                item = buffer.popleft()
                if type(item) is threading.Event:
                    done.append(item)
                    continue
                if item is None:
                    stop = True
                    continue
                held = None
                if type(item) is tuple:
                    item, held = item
                try:
                    lines.append(atof_line(item, self._roots.of(item), held))
                except Exception:
                    self.write_errors += 1
            if lines:
                try:
                    self._out.write("\n".join(lines) + "\n")
                    self._out.flush()
                    self.written += len(lines)
                except Exception:
                    self.write_errors += len(lines)
            for waiter in done:
                waiter.set()
            if stop:
                return

    def force_flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until every event given so far is written; False on timeout."""
        if not self._thread.is_alive():
            return not self._buffer
        waiter = threading.Event()
        self._buffer.append(waiter)
        self._wake.set()
        return waiter.wait(timeout)

    def shutdown(self, timeout: float | None = 5.0) -> bool:
        """Stop listening, write what is buffered, close the file (a given stream stays open). Idempotent."""
        self.detach()
        if self._stopped:
            return True
        flushed = self.force_flush(timeout)
        self._stopped = True
        self._buffer.append(None)
        self._wake.set()
        self._thread.join(timeout)
        if self._owned is not None:
            self._owned.close()
        return flushed
