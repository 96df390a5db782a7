"""A relay's events as two sinks hold them, for tests that look for a value in every sink's text."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from relay_runtime import Recorder
from relay_runtime.events import FIELDS
from relay_runtime.jsonl import JsonlWriter


class SinkTexts:
    """``with SinkTexts(relay, tmp_path) as sinks:`` a recorder and a JSONL writer, both taking chunk marks;
    after the block, ``sinks.texts()`` is each one's text (every field of every event, the file's lines)."""

    def __init__(self, relay: Any, folder: Path) -> None:
        self.relay = relay
        self.events = Recorder()
        self.path = folder / "events.jsonl"
        self._jsonl = JsonlWriter(self.path, chunks=True)

    def __enter__(self) -> SinkTexts:
        self.relay.subscribers.register(self.events, name="test.events", chunks=True)
        self.relay.subscribers.register(self._jsonl, name="test.jsonl", chunks=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.relay.subscribers.deregister("test.events")
        self.relay.subscribers.deregister("test.jsonl")
        self._jsonl.close()

    def texts(self) -> dict[str, str]:
        return {
            "events": " ".join(repr(getattr(e, name)) for e in self.events.events for name in FIELDS),
            "jsonl": self.path.read_text(),
        }
