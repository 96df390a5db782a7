"""A scope's content on its span, and the start of an attempt witnessed late: the ``OTelExporter`` methods that
write what a scope was given or answered (``_late_start``, ``_content_attributes``), out of ``exporter.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay_runtime.events import Event

from . import attributes as A
from . import openinference as OI
from .marks import CONTENT_ERRORS
from .spans import OpenSpan

if TYPE_CHECKING:
    from .exporter import OTelExporter


def late_start(self: OTelExporter, record: OpenSpan, event: Event) -> dict[str, Any]:
    """What the start of an attempt witnessed after the fact could not say (its provider, request model and
    request; its content when captured inline), said by its end event, which knows them; the span renamed."""
    name, attributes = A.span_start(event, record.role, record.conversation_id)
    if self._oi:
        attributes.update(OI.start_attributes(event, record.role, record.conversation_id))
    record.span.update_name(name)
    if self._content is not None and self._store is None:
        content = self._content
        content_attributes(self, content.attempt_start, content.tool_start, event, record.role, attributes)
    return attributes


def content_attributes(
    self: OTelExporter,
    for_attempt: Callable[[Event, dict[str, Any]], None],
    for_tool: Callable[[Event, dict[str, Any]], None],
    event: Event,
    role: str,
    out: dict[str, Any],
) -> None:
    """Content goes in whole or not at all: a failing redaction hook drops it, and is counted."""
    recorder = for_attempt if role == A.ATTEMPT else for_tool if role == A.TOOL else None
    if recorder is None:
        return
    content: dict[str, Any] = {}
    try:
        recorder(event, content)
    except Exception:
        self.count(CONTENT_ERRORS)
        return
    out.update(content)


def no_content(event: Event, out: dict[str, Any]) -> None:
    """An attempt's start records no content when it goes to a content store at the end."""
