"""Per-session JSONL log of everything the relay sent or decided, with audio redacted.

Bounded: a string that came from a client or provider is clipped before it is echoed, each string
field of a record is clipped, and the bytes one session's log may take stop at a cap (one file per
session, never rotated). Past the cap, records are dropped and counted; one notice at the first
drop and a tally at close are written from a reserve kept under the cap.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import IO, Any

from relay_runtime.clipping import head

from .log_redaction import LogRedaction

logger = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
_REDACTED_KEYS = frozenset({"audio", "pcm"})
_SECRET_KEYS = frozenset({"resume_token", "token", "authorization", "bearer_token", "api_key"})
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Kept free under the cap for the "capped" notice and the closing tally.
_RESERVE_BYTES = 1024
# Longest string field a record keeps (agent answers are the long ones; audio is redacted).
MAX_FIELD_CHARS = 16 * 1024
ECHO_CHARS = 64


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to `limit` characters plus a count of the rest, for echoing what a peer sent."""
    if len(text) <= limit:
        return text
    kept = head(text, limit)  # no value cut in two: its first half would pass the redaction policy
    return f"{kept}…(+{len(text) - len(kept)} chars)"


def validate_session_id(session_id: str) -> str:
    """Session ids become file names: refuse anything but url-safe characters."""
    # fullmatch: with match and "$", a trailing newline would slip through into the file name.
    if not isinstance(session_id, str) or not _SAFE_ID.fullmatch(session_id):
        raise ValueError(f"invalid voice session id {session_id!r}")
    return session_id


def redact(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without its audio and secrets (their size and a marker stand for them)."""
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


def _clipped(record: dict[str, Any]) -> dict[str, Any]:
    # After the redaction policy: clipped first, a value cut in two would no longer be found.
    return {k: clip(v, MAX_FIELD_CHARS) if isinstance(v, str) else v for k, v in record.items()}


class EventLog:
    """Append-only; write failures are logged once and counted, never raised into the session."""

    def __init__(
        self, path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, redaction: LogRedaction | None = None
    ) -> None:
        if max_bytes < 2 * _RESERVE_BYTES:
            raise ValueError(f"event log cap must be at least {2 * _RESERVE_BYTES} bytes, got {max_bytes}")
        self.path = path
        self.max_bytes = max_bytes
        self.written_bytes = 0
        self.dropped_records = 0
        self.dropped_bytes = 0
        self.write_failures = 0
        self._fh: IO[str] | None = None
        self.redaction = redaction  # the redaction policy's view of each record, when one is in force

    def _open(self) -> IO[str]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Line buffered: each record is on disk as soon as it is written, for tails and tests.
            self._fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        return self._fh

    def write(self, record: dict[str, Any]) -> None:
        record = redact(record)
        if self.redaction is None:
            self._write(record)
            return
        try:
            for written in self.redaction.records(record):
                self._write(written)
        except Exception as exc:  # the policy failed: the record's content is not written
            self._failed(exc)

    def _write(self, record: dict[str, Any]) -> None:
        try:
            line = json.dumps(_clipped(record), default=str, separators=(",", ":")) + "\n"
        except (ValueError, TypeError) as exc:
            self._failed(exc)
            return
        size = len(line)  # json.dumps escapes everything past ASCII: characters are bytes
        if self.written_bytes + size > self.max_bytes - _RESERVE_BYTES:
            self.dropped_records += 1
            self.dropped_bytes += size
            if self.dropped_records == 1:
                notice = self._notice("voice.event_log.capped")
                self._append(notice, len(notice))
            return
        self._append(line, size)

    def _notice(self, name: str) -> str:
        # Small and fixed in shape, so it always fits the reserve.
        return json.dumps({"log": name, "at_ms": int(time.time() * 1000), "max_bytes": self.max_bytes,
                           "dropped_records": self.dropped_records, "dropped_bytes": self.dropped_bytes}) + "\n"

    def _append(self, line: str, size: int) -> None:
        try:
            self._open().write(line)
        except (OSError, ValueError) as exc:
            self._failed(exc)
            return
        self.written_bytes += size

    def _failed(self, exc: Exception) -> None:
        self.write_failures += 1
        if self.write_failures == 1:
            logger.warning("voice event log %s unwritable: %s", self.path, exc)

    def log(self, name: str, **fields: Any) -> None:
        self.write({"log": name, "at_ms": int(time.time() * 1000), **fields})

    def close(self) -> None:
        if self.redaction is not None and self._fh is not None:
            try:
                for written in self.redaction.close():
                    self._write(written)
            except Exception as exc:
                self._failed(exc)
        if self.dropped_records and self._fh is not None:
            notice = self._notice("voice.event_log.dropped")
            self._append(notice, len(notice))
        if self._fh is not None:
            try:
                self._fh.close()
            finally:
                self._fh = None
