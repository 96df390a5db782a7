"""relay-runtime: scopes, managed LLM calls, intercepts and lifecycle events for agent code."""

from __future__ import annotations

from .attempt import current_attempt
from .codec import IncompleteStream
from .events import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event
from .intercepts import GuardrailRejected
from .recorder import Recorder
from .relay import Relay, default_relay
from .scopes import ScopeHandle, ScopeOrderError
from .settings import configure
from .threads import ContextExecutor, propagate_to_thread
from .types import (
    AnnotatedLLMRequest,
    AnnotatedLLMResponse,
    ChunkDelta,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Outcome,
    ScopeType,
    TokenUsage,
)

__all__ = [
    "CHUNK_MARK",
    "MARK",
    "SCOPE_END",
    "SCOPE_START",
    "AnnotatedLLMRequest",
    "AnnotatedLLMResponse",
    "ChunkDelta",
    "ContextExecutor",
    "Event",
    "GuardrailRejected",
    "IncompleteStream",
    "LLMRequest",
    "LLMRequestInterceptOutcome",
    "Outcome",
    "Recorder",
    "Relay",
    "ScopeHandle",
    "ScopeOrderError",
    "ScopeType",
    "TokenUsage",
    "configure",
    "current_attempt",
    "default_relay",
    "propagate_to_thread",
]
