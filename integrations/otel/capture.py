"""Content capture modes, and the ``gen_ai.client.inference.operation.details`` event.

``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (or ``capture_content=``) takes
``false`` / ``true`` or one of the GenAI instrumentations' modes: ``NO_CONTENT``,
``SPAN_ONLY`` (``true``), ``EVENT_ONLY``, ``SPAN_AND_EVENT``. The mode names are
accepted whether or not ``OTEL_SEMCONV_STABILITY_OPT_IN`` is set (util-genai only
reads them under the opt-in; here they always mean what they say).

With an event mode, each LLM attempt's end emits one OTel log record named
``gen_ai.client.inference.operation.details``, in the attempt span's context, whose
attributes hold the same structured content the span attributes would (messages as
lists of ``{"role", "parts"}``, not JSON text), plus the operation's identity.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from relay_runtime.events import Event

from . import attributes as A
from .content import (
    CAPTURE_ENV,
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

NO_CONTENT = "NO_CONTENT"
SPAN_ONLY = "SPAN_ONLY"
EVENT_ONLY = "EVENT_ONLY"
SPAN_AND_EVENT = "SPAN_AND_EVENT"
MODES = (NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT)
DETAILS_EVENT = "gen_ai.client.inference.operation.details"

_SPELLINGS = {"false": NO_CONTENT, "0": NO_CONTENT, "no": NO_CONTENT, "": NO_CONTENT,
              "true": SPAN_ONLY, "1": SPAN_ONLY, "yes": SPAN_ONLY}  # fmt: skip


def capture_mode(value: Any, *, source: str = "capture_content") -> str:
    """One of ``MODES`` for ``value`` (a bool, ``"true"`` / ``"false"``, or a mode name, any case)."""
    if value is True:
        return SPAN_ONLY
    if value is False or value is None:
        return NO_CONTENT
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in MODES:
            return text.upper()
        spelled = _SPELLINGS.get(text.lower())
        if spelled is not None:
            return spelled
    raise ValueError(f"{source} must be true, false or one of {', '.join(MODES)}; got {value!r}")


def mode_from_env() -> str:
    """The environment's mode; a value that names none is logged once and captures nothing (a typo in a
    deployment's environment must not stop the application: ``capture_content=`` is checked strictly)."""
    try:
        return capture_mode(os.environ.get(CAPTURE_ENV, ""), source=CAPTURE_ENV)
    except ValueError as exc:
        logging.getLogger("relay_runtime").warning("%s; no message content is captured", exc)
        return NO_CONTENT


def on_spans(mode: str) -> bool:
    return mode in (SPAN_ONLY, SPAN_AND_EVENT)


def as_events(mode: str) -> bool:
    return mode in (EVENT_ONLY, SPAN_AND_EVENT)


class DetailsEvents:
    """Emits the operation details event of each attempt through an OTel ``Logger``."""

    def __init__(self, logger_provider: Any, recorder: ContentRecorder, version: str, name: str) -> None:
        if logger_provider is None:
            from opentelemetry._logs import get_logger_provider

            logger_provider = get_logger_provider()
        self.logger_provider = logger_provider
        self._logger = logger_provider.get_logger(name, version)
        self._recorder = recorder

    def attempt_end(self, event: Event, span: Any, refs: dict[str, str] | None = None) -> None:
        """Emit the event; with ``refs`` (content written to a store) they stand in for the content."""
        self.prepare(event, span, refs)()

    def prepare(self, event: Event, span: Any, refs: dict[str, str] | None = None) -> Callable[[], None]:
        """The event built now, to emit later: with its span, when a tail sampler keeps that."""
        from opentelemetry.trace import set_span_in_context

        attributes: dict[str, Any] = {}
        op, provider, model = A.attempt_identity(event, event.annotated_request)
        attributes["gen_ai.operation.name"] = op
        if provider:
            attributes["gen_ai.provider.name"] = provider
        if model:
            attributes["gen_ai.request.model"] = model
        resp = event.annotated_response
        if resp is not None:
            if resp.model:
                attributes["gen_ai.response.model"] = resp.model
            if resp.id:
                attributes["gen_ai.response.id"] = resp.id
            if resp.finish_reasons:
                attributes["gen_ai.response.finish_reasons"] = [str(r) for r in resp.finish_reasons]
        req = event.annotated_request
        structured = self._recorder.structured
        if refs is not None:
            attributes.update(refs)
            req = None
        if req is not None:
            for key, value in (
                (INPUT_MESSAGES, input_messages(req.messages)),
                (SYSTEM_INSTRUCTIONS, system_instructions(req.system) if req.system else None),
                (TOOL_DEFINITIONS, tool_definitions(req.tools) if req.tools else None),
            ):
                kept = structured(key, value) if value else None
                if kept is not None:
                    attributes[key] = kept
        output = structured(OUTPUT_MESSAGES, output_messages(event)) if refs is None else None
        if output is not None:
            attributes[OUTPUT_MESSAGES] = output
        if event.outcome == "failed":
            attributes["error.type"] = event.error_type or "_OTHER"
        return functools.partial(
            self._logger.emit,
            timestamp=event.timestamp,
            context=set_span_in_context(span) if span is not None else None,
            event_name=DETAILS_EVENT,
            attributes=attributes,
        )
