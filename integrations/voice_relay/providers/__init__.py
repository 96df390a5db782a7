"""Realtime voice providers: `stub` (offline), OpenAI Realtime and xAI realtime over websockets."""

from __future__ import annotations

from .openai_realtime import OpenAIRealtimeProvider
from .stub import StubProvider
from .xai_realtime import XAIRealtimeProvider


def default_providers() -> dict[str, object]:
    return {
        "stub": StubProvider(),
        "openai_realtime": OpenAIRealtimeProvider(),
        "xai_realtime": XAIRealtimeProvider(),
    }


__all__ = ["OpenAIRealtimeProvider", "StubProvider", "XAIRealtimeProvider", "default_providers"]
