"""Message content by reference: written to a store once per call, spans carry where it is.

``OTelExporter(content_store="file:///var/genai")`` (any ``fsspec`` URL: ``s3://``, ``gs://``,
``memory://``; ``pip install 'relay-runtime[otel-upload]'``), or util-genai's
``OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH``: at each attempt's end its content (after the
redaction policy and the exporter's hook) is written as JSON files, and the span (and the
details event) carries references named as util-genai's upload hook names them:
``gen_ai.input.messages_ref``, ``gen_ai.output.messages_ref``,
``gen_ai.system_instructions_ref``, ``gen_ai.tool.definitions_ref``. Files are
``<uuid>_inputs.json`` and ``<uuid>_outputs.json``; system instructions and tool definitions
are named by the hash of their content (``<sha256>_system_instruction.json``,
``<sha256>_tool.definitions.json``) and written once. Writes run on one background thread
behind a bounded queue: a call never waits for the store; what the queue cannot take is
dropped and counted (``otel.content_store.dropped``), and the span gets no reference to it;
a failed write is counted too (``otel.content_store.errors``). Behind a tail sampler the files
are queued only when the sampler keeps the call's trace: a dropped trace leaves nothing in the
store (a write the queue cannot take then is counted as dropped; the span already names it).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import queue
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from relay_runtime.events import Event

from .content import (
    INPUT_MESSAGES,
    OUTPUT_MESSAGES,
    SYSTEM_INSTRUCTIONS,
    TOOL_DEFINITIONS,
    ContentRecorder,
    input_messages,
    output_messages,
    system_instructions,
    tool_definitions,
)

UPLOAD_ENV = "OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH"
DROPPED = "otel.content_store.dropped"
ERRORS = "otel.content_store.errors"
REF = "_ref"
_STOP: Any = object()
Write = tuple[str, str, bool]  # where, what, and whether it is a content-named file shared by calls


def store_from_env() -> str | None:
    value = os.environ.get(UPLOAD_ENV, "").strip()
    return value or None


class ContentStore:
    """Where content goes: an ``fsspec`` filesystem and a base path, and the thread that writes there."""

    def __init__(self, url: str, count: Callable[[str], None], *, queue_size: int = 256) -> None:
        if not isinstance(url, str) or not url:
            raise ValueError(f"content_store must be a URL (file:///..., s3://..., ...), got {url!r}")
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError("content_store needs fsspec: pip install 'relay-runtime[otel-upload]'") from exc
        try:
            self._fs, path = fsspec.url_to_fs(url)
        except (ValueError, ImportError) as exc:
            raise ValueError(f"content_store {url!r} is not a URL fsspec can open: {exc}") from exc
        self.base = self._fs.unstrip_protocol(path)
        self._fs.makedirs(path, exist_ok=True)
        self._count = count
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._written: OrderedDict[str, None] = OrderedDict()  # content-named files already there
        self._idle = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="relay-otel-content-store", daemon=True)
        self._thread.start()

    def references(self, event: Event, recorder: ContentRecorder, held: list[Write] | None = None) -> dict[str, str]:
        """Queue this attempt's content for writing; the reference attributes to record instead of it.

        ``held``: the writes are added to it instead, for ``submit`` once the call's trace is kept.
        """
        refs: dict[str, str] = {}
        req = event.annotated_request
        call = uuid.uuid4().hex
        parts: list[tuple[str, Any, str | None]] = []
        if req is not None:
            parts.append((INPUT_MESSAGES, input_messages(req.messages), f"{call}_inputs.json"))
            if req.system:
                parts.append((SYSTEM_INSTRUCTIONS, system_instructions(req.system), None))
            if req.tools:
                parts.append((TOOL_DEFINITIONS, tool_definitions(req.tools), None))
        parts.append((OUTPUT_MESSAGES, output_messages(event), f"{call}_outputs.json"))
        for key, value, name in parts:
            kept = recorder.structured(key, value) if value else None
            if kept is None:
                continue
            text = json.dumps(kept, ensure_ascii=False, default=str)
            shared = name is None
            if shared:  # the same instructions and tools come with every call: one file each
                digest = hashlib.sha256(text.encode()).hexdigest()
                name = f"{digest}_{'system_instruction' if key == SYSTEM_INSTRUCTIONS else 'tool.definitions'}.json"
            assert name is not None
            path = posixpath.join(self.base, name)
            if shared and path in self._written:
                refs[key + REF] = path
            elif held is not None:
                held.append((path, text, shared))
                refs[key + REF] = path
            elif self._submit(path, text, shared):  # content the queue could not take gets no reference
                refs[key + REF] = path
        return refs

    def submit(self, writes: list[Write]) -> None:
        """Queue writes ``references`` held back (each one the queue cannot take is counted as dropped)."""
        for path, text, shared in writes:
            self._submit(path, text, shared)

    def _submit(self, path: str, text: str, shared: bool) -> bool:
        """Queue one write; False (counted) when the queue is full and it is dropped."""
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait((path, text, shared))
        except queue.Full:
            self._done()
            self._count(DROPPED)
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            path, text, shared = item
            try:
                with self._fs.open(path, "w") as file:
                    file.write(text + "\n")
                if shared:
                    self._written[path] = None
                    if len(self._written) > 1024:
                        self._written.popitem(last=False)
            except Exception:
                self._count(ERRORS)
            finally:
                self._done()

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            if self._pending <= 0:
                self._idle.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until what is queued is written (or ``timeout`` seconds); whether it all was."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending <= 0, timeout)

    def close(self, timeout: float) -> bool:
        done = self.flush(timeout)
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass
        return done
