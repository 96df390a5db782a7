"""A subscriber that appends every event as one JSON line, and the reader for such files."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from .events import Event


def _default(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if hasattr(value, "model_dump"):
        try:
            return value.model_dump(mode="json")
        except Exception:
            pass
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "items"):
        return dict(value.items())
    return repr(value)


def event_json(event: Event) -> str:
    return json.dumps(event.to_dict(), default=_default, ensure_ascii=False, separators=(",", ":"))


class JsonlWriter:
    """Appends events to ``path`` (created 0600: events can hold prompts). Fails open like any subscriber."""

    def __init__(self, path: str | os.PathLike[str], *, chunks: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.chunks = chunks

    def __call__(self, event: Event) -> None:
        line = event_json(event)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The events of a JSONL file; a line that is not a JSON object is skipped, not fatal."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row
