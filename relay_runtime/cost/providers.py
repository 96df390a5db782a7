"""The provider id a call is priced under: genai-prices' ids, not the GenAI conventions' names.

The conventions name a provider ``mistral_ai`` or ``aws.bedrock``; genai-prices (and so a price
mapping written to match it) says ``mistral`` and ``aws``. A codec named for an endpoint carries
its own ``price_provider`` (OpenRouter's calls speak OpenAI's API and are priced as OpenRouter's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMBEDDINGS = "embeddings"  # the codec operation whose answer has no output tokens

# The conventions' provider names -> genai-prices' provider ids, where they differ.
PRICE_IDS: Mapping[str, str] = {
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "mistral_ai": "mistral",
    "x_ai": "x-ai",
    "aws.bedrock": "aws",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
}


def price_provider(codec: Any, fallback: str) -> str:
    """The id a call's price is looked up under; ``fallback`` (the attempt's name) when it has no codec."""
    if codec is None:
        return PRICE_IDS.get(fallback, fallback)
    named = getattr(codec, "price_provider", None)
    if type(named) is str:
        return named
    provider: str = codec.provider
    return PRICE_IDS.get(provider, provider)
