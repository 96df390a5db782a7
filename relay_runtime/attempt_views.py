"""What observers see of an LLM attempt: its request and response read by the codec, redacted.

Built lazily (``events.Deferred``) when a subscriber first reads them, so a codec that cannot
read a request or an answer costs the view, never the call: the failure is counted
(``bookkeeping_errors`` and ``decode_errors``) and the view is None.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import conventions as cv
from .codec import Content, LLMCodec
from .conversation_urls import recorded as recorded_conversation
from .events import MARK, Deferred, new_event
from .ids import new_id
from .redaction import REDACTED, redacted_annotation, redacted_request
from .tool_results import calls_blanked
from .types import AnnotatedLLMRequest, AnnotatedLLMResponse

if TYPE_CHECKING:
    from .relay import Relay
    from .scopes import ScopeHandle

_SDK_RETRIES = cv.SDK_RETRIES

# A request or response the codec could not read: the call goes on, its record lacks what was unread.
DECODE_ERRORS = "decode_errors"


def recorded_request(headers: Mapping[str, Any], content: Mapping[str, Any], relay: Relay) -> dict[str, Any]:
    """An attempt's request as its start event records it: headers and kwargs with credentials blanked
    (``redaction.redacted_request``), its tools' results and its addresses' credentials too (``conversation_urls``).

    Made on first read (``events.Recorded``): most subscribers never read an attempt's input, and the
    walk of a conversation's items is a good part of what recording a call costs. A request that cannot
    be walked is counted (``bookkeeping_errors``) and recorded withheld, never as it was sent.
    """
    try:
        return redacted_request(headers, recorded_conversation(content))
    except Exception as exc:
        relay.diag.failure("bookkeeping_errors", exc, "recording an attempt's request")
        return {"headers": {}, "content": REDACTED}


def recorded_view(codec: LLMCodec, content: Mapping[str, Any]) -> AnnotatedLLMRequest | None:
    """The request's neutral view as observers see it: of its conversation as the start event records it
    (``conversation_urls``), credentials left in its params blanked. Raises what the codec raises."""
    return redacted_annotation(codec.decode(recorded_conversation(content)))


def decode_for_observers(
    relay: Relay, name: str, codec: LLMCodec, content: Mapping[str, Any]
) -> AnnotatedLLMRequest | None:
    try:
        return recorded_view(codec, content)  # read only when an observer reads the view
    except Exception as exc:
        relay.diag.failure("bookkeeping_errors", exc, f"decoding the request of {name!r}")
        relay.diag.count(DECODE_ERRORS)
        return None


def annotate_for_observers(
    relay: Relay,
    name: str,
    codec: LLMCodec,
    response: Any,
    time_to_first_chunk_ns: int | None,
    metadata: dict[str, Any] | None = None,
) -> AnnotatedLLMResponse | None:
    try:
        annotation = codec.annotate_response(response)
    except Exception as exc:
        relay.diag.failure("bookkeeping_errors", exc, f"annotating the response of {name!r}")
        relay.diag.count(DECODE_ERRORS)
        return None
    recorded_answer(annotation)
    if time_to_first_chunk_ns is not None:
        annotation.time_to_first_chunk_ns = time_to_first_chunk_ns
    if metadata:
        annotation.sdk_retries = metadata.get(_SDK_RETRIES)
    return annotation


def recorded_answer(annotation: AnnotatedLLMResponse | None) -> AnnotatedLLMResponse | None:
    """``annotation`` (built for the records: the relay's own) as they hold it: the tool calls it asked for with their
    arguments as the tools' own scopes record them (``tool_results.calls_blanked``), as the OTel content capture
    writes them; the journal's rows and the trajectories take them from here."""
    if annotation is not None and annotation.tool_calls:
        annotation.tool_calls = calls_blanked(annotation.tool_calls)
    return annotation


def content_blanked(read: Callable[[Any], Content | None], response: Any) -> Content | None:
    """What ``read`` (a codec's ``content_reader``) gives of ``response`` for a redaction policy to read first, its
    tool calls as ``annotate_for_observers`` records them: a policy that changes the text puts these in the view."""
    found = read(response)
    if found is None or not found[1]:
        return found
    return found[0], calls_blanked(found[1])


def mark_fallback(
    relay: Relay, name: str, codec: LLMCodec | None, intercept: str, response: Any, owner: ScopeHandle
) -> None:
    """The answer execution intercept ``intercept`` gave in place of the provider's (which failed), as a mark under
    ``owner`` (its logical call, else the failed attempt): no attempt's end carries it, and it is what the caller
    got. Its annotation is read only by an observer that reads it; the relay's own failure here is counted."""
    subs = relay.subscribers
    if not subs.mark:
        return
    try:
        view = None
        if codec is not None and response is not None:
            view = Deferred(annotate_for_observers, relay, name, codec, response, None)
        event = new_event(
            MARK, new_id(), owner.uuid, owner.trace_id, cv.FALLBACK_ANSWER, None, time.time_ns(),
            data={"intercept": intercept}, provider=name, annotated_response=view,
        )  # fmt: skip
    except Exception as exc:
        relay.diag.failure("bookkeeping_errors", exc, f"recording the fallback answer of {name!r}")
        return
    subs.deliver(subs.mark, event)
