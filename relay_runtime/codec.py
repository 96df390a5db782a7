"""The contract between the core and a provider adapter.

The core never imports a provider SDK: an adapter hands it a codec, and the
core asks the codec for the neutral view of a request, for the kwargs after
intercepts edited that view, and for what a response or a stream said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from .types import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta


class IncompleteStream(Exception):
    """The provider's stream ended without its terminal marker: the answer may be cut short.

    Recorded as the attempt's error (error type ``IncompleteStream``), never raised to the caller,
    whose iteration ends as the provider's stream did.
    """


@runtime_checkable
class StreamAccumulator(Protocol):
    """Optionally also ``failure``: an exception, set when the provider ended the stream saying the
    response failed (no SDK exception); the attempt then ends failed with it, its response still recorded.

    And optionally ``terminated``: False when the stream ends without the provider's terminal marker
    (the attempt then ends failed with ``IncompleteStream``); an accumulator without it is taken at its word.
    """

    def add(self, chunk: Any) -> ChunkDelta | None:
        """Fold one provider chunk in; return what it said, or None for a chunk with no content."""

    def finish(self) -> tuple[Any, AnnotatedLLMResponse | None]:
        """The final response rebuilt from every chunk seen, and its annotation: None when the codec's
        ``annotate_response`` reads the same one from that response, which the attempt then annotates only
        when an observer or a budget reads it (as it does a whole answer)."""


@runtime_checkable
class LLMCodec(Protocol):
    """Optionally also ``response_content(response) -> (output_text, tool_calls)``: what
    ``annotate_response`` would read as those two, alone. A redaction policy reads only them, and
    with it the whole annotation is built only when a subscriber asks (or the policy changed them).
    Taken only from the class that also defines ``annotate_response``, so a subclass that reads
    responses its own way is never judged by its parent's reader.
    """

    provider: str
    operation: str

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        """SDK kwargs -> the neutral view."""

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        """Overlay only the changed neutral fields (``AnnotatedLLMRequest.changes_since``) onto kwargs."""

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        """What a non-streamed response says: model, id, finish reasons, usage, text."""

    def accumulator(self) -> StreamAccumulator:
        """A fresh accumulator for one stream."""


class CountingAccumulator:
    """Used when no codec is given: remembers the chunks' count and the last chunk only."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last: Any = None

    def add(self, chunk: Any) -> ChunkDelta | None:
        self.count += 1
        self.last = chunk
        return None

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        return self.last, AnnotatedLLMResponse()


Content = tuple[str | None, list[dict[str, Any]]]  # a response's output_text and tool_calls
_readers: dict[type, bool] = {}
_READ_BY = ("response_content", "annotate_response")


def content_reader(codec: Any) -> Callable[[Any], Content | None] | None:
    """``codec.response_content`` as a reader that answers None where it fails (the whole annotation is
    then built instead, and counts its failure), if the class that defines it also defines
    ``annotate_response``; else None."""
    kind = type(codec)
    fits = _readers.get(kind)
    if fits is None:
        owners = [next((c for c in kind.__mro__ if name in c.__dict__), None) for name in _READ_BY]
        fits = _readers[kind] = owners[0] is not None and owners[0] is owners[1]
    if not fits:
        return None
    read = codec.response_content

    def content(response: Any) -> Content | None:
        try:
            return read(response)
        except Exception:
            return None

    return content
