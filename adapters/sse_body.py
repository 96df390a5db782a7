"""The events of a streamed body its caller reads raw (``iter_lines``, ``iter_bytes``, ``iter_text``, ``read``).

The SDK never decodes them, so the attempt would end knowing nothing of the answer, its usage or
its cost. They are decoded here from what the caller reads, as server-sent events, each event as
soon as it is whole: the JSON of its ``data:`` field is one chunk, which the managed stream reads
as it reads the SDK's own chunks (the accumulators read fields by name, dicts as objects). Only
the event being read is held, however long the body.
"""

from __future__ import annotations

import json
from typing import Any

_HELD = 16 << 20  # characters of one unfinished event: past it the event is dropped, not the process's memory
# Events the SDKs' own streams skip (Anthropic's keep-alive): read raw, each would be one more chunk of nothing, and
# the first chunk's time a ping's.
_SKIPPED = frozenset({"ping"})


class SseFeed:
    """``feed`` each part the caller read, then ``end()``; each returns the events completed by it."""

    __slots__ = ("_data", "_event", "_lines", "_partial", "_size")

    def __init__(self, name: str) -> None:
        self._lines = name == "iter_lines"  # parts are whole lines, their line breaks removed
        self._partial = ""  # the text after the last line break (bytes and text parts break anywhere)
        self._data: list[str] = []  # the ``data:`` values of the event being read
        self._size = 0
        self._event = ""  # the ``event:`` name of the event being read

    def feed(self, part: Any) -> list[dict[str, Any]]:
        if isinstance(part, bytes | bytearray):
            # A character split between two parts is decoded whole: ``errors`` would replace each half.
            part = bytes(part).decode("utf-8", "surrogateescape")
        if not isinstance(part, str):
            return []
        events: list[dict[str, Any]] = []
        if self._lines:
            self._line(part, events)
            return events
        # Lines end at "\r\n", "\n" or "\r" (as the SDKs' decoders read them), not where ``splitlines`` also breaks
        # (U+2028 and the like, which JSON written unescaped may hold inside a string; JSON holds no raw "\r"). A
        # "\r" ending the part waits for the next: it may be the first half of a "\r\n".
        text = self._partial + part
        cr = text.endswith("\r")
        lines = (text[:-1] if cr else text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._partial = lines.pop() + ("\r" if cr else "")
        if len(self._partial) > _HELD:
            self._partial = ""
        for line in lines:
            self._line(line, events)
        return events

    def end(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._partial:
            self._line(self._partial.rstrip("\r"), events)
            self._partial = ""
        self._line("", events)  # the last event, even without its blank line
        return events

    def _line(self, line: str, events: list[dict[str, Any]]) -> None:
        if not line:
            if self._data and self._event not in _SKIPPED:
                _decoded("\n".join(self._data), events)
            self._data = []
            self._size = 0
            self._event = ""
            return
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._event = value
            return
        if field != "data":
            return  # an id, a comment: the accumulators read the data's own "type"
        self._size += len(value)
        if self._size > _HELD:
            self._data = []
            return
        self._data.append(value)


def _decoded(payload: str, events: list[dict[str, Any]]) -> None:
    if payload == "[DONE]":
        return
    try:
        event = json.loads(payload.encode("utf-8", "surrogateescape"))
    except ValueError:
        return
    if isinstance(event, dict):
        events.append(event)
