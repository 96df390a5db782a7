"""Codec for OpenAI embeddings (``client.embeddings.create``), and so for every OpenAI-compatible one.

The inputs are the request's ``messages`` (a string input is one message), so intercepts and
redaction see the text that is sent; the other arguments (``dimensions``, ``encoding_format``,
``user``) are provider params. An answer has input tokens only, and the length of its vectors.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from relay_runtime import neutral
from relay_runtime.codec import CountingAccumulator
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, TokenUsage

from .common import FieldMap, apply_common, as_int, as_list, as_str, decode_common, get

EMBEDDINGS = "embeddings"
_FIELDS = FieldMap.of("input", None, neutral.OPENAI_EMBEDDINGS)


def _dimensions(data: Any) -> int | None:
    """The length of the first vector: a list of floats, or base64 of float32s (``encoding_format="base64"``)."""
    first = data[0] if data else None
    vector = get(first, "embedding")
    if isinstance(vector, list):
        return len(vector)
    if isinstance(vector, str):
        try:
            return len(base64.b64decode(vector, validate=True)) // 4
        except (binascii.Error, ValueError):
            return None
    return None


class OpenAIEmbeddingsCodec:
    provider = "openai"
    price_provider = "openai"  # its id in genai-prices (see relay_runtime.cost.providers)
    endpoint: str | None = None  # a compatible endpoint it reaches (see adapters.endpoints)
    operation = EMBEDDINGS
    spelling = neutral.OPENAI_EMBEDDINGS

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        annotated = decode_common(content, _FIELDS, self.provider, self.operation)
        text = content.get("input")
        if isinstance(text, str):
            annotated.messages = [text]
        return annotated

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        kwargs = apply_common(content, changes, _FIELDS)
        edited = kwargs.get("input")
        if "messages" in changes and isinstance(content.get("input"), str) and isinstance(edited, list):
            if len(edited) != 1 or not isinstance(edited[0], str):
                raise ValueError(f"an embeddings request sent one string; intercepts left {len(edited)} inputs")
            kwargs["input"] = edited[0]  # sent as it came: one string, one vector
        return kwargs

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        usage = get(response, "usage")
        return AnnotatedLLMResponse(
            model=as_str(get(response, "model")),
            usage=TokenUsage(input_tokens=as_int(get(usage, "prompt_tokens"))),
            embedding_dimensions=_dimensions(as_list(get(response, "data"))),
        )

    def accumulator(self) -> CountingAccumulator:
        return CountingAccumulator()  # embeddings do not stream
