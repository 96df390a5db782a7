"""Per-session JSONL log of everything the relay sent or decided, with audio redacted."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
_REDACTED_KEYS = frozenset({"audio", "pcm"})
_SECRET_KEYS = frozenset({"resume_token", "token", "authorization", "bearer_token", "api_key"})


def validate_session_id(session_id: str) -> str:
    """Session ids become file names: refuse anything but url-safe characters."""
    if not isinstance(session_id, str) or not _SAFE_ID.match(session_id):
        raise ValueError(f"invalid voice session id {session_id!r}")
    return session_id


def redact(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        lowered = key.lower()
        if lowered in _REDACTED_KEYS and isinstance(value, (bytes, bytearray, str)):
            out[key] = {"redacted_bytes": len(value)}
        elif lowered in _SECRET_KEYS:
            out[key] = "[redacted]"
        else:
            out[key] = value
    return out


class EventLog:
    """Append-only; write failures are logged once and counted, never raised into the session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.write_failures = 0
        self._fh: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Line buffered: each record is on disk as soon as it is written, for tails and tests.
            self._fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        return self._fh

    def write(self, record: dict[str, Any]) -> None:
        try:
            self._open().write(json.dumps(redact(record), default=str, separators=(",", ":")) + "\n")
        except (OSError, ValueError, TypeError) as exc:
            self.write_failures += 1
            if self.write_failures == 1:
                logger.warning("voice event log %s unwritable: %s", self.path, exc)

    def log(self, name: str, **fields: Any) -> None:
        self.write({"log": name, "at_ms": int(time.time() * 1000), **fields})

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            finally:
                self._fh = None
