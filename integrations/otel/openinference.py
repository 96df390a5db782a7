"""OpenInference's vocabulary (``openinference.*``, ``llm.*``), which Arize Phoenix and similar backends read natively.

Written beside the GenAI conventions' attributes when the exporter is asked for it; pure
functions of an event, like ``attributes``.
"""

from __future__ import annotations

import json
from typing import Any

from relay_runtime.events import Event
from relay_runtime.redaction import scrub_repeated

from .attributes import (
    AGENT,
    ATTEMPT,
    CONVERSATION,
    LOGICAL_CALL,
    SCOPE,
    TOOL,
    TURN,
    agent_name,
    attempt_identity,
    input_tokens_total,
    provider_of,
)

_OI_KIND = {
    CONVERSATION: "AGENT",
    AGENT: "AGENT",
    TURN: "CHAIN",
    LOGICAL_CALL: "CHAIN",
    ATTEMPT: "LLM",
    TOOL: "TOOL",
    SCOPE: "CHAIN",
}
_OI_SCOPE_TYPES = {"retriever": "RETRIEVER"}


def start_attributes(event: Event, role: str, conversation_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"openinference.span.kind": _OI_SCOPE_TYPES.get(event.scope_type or "", _OI_KIND[role])}
    if conversation_id:
        out["session.id"] = conversation_id
    if role == ATTEMPT:
        _, provider, model = attempt_identity(event, event.annotated_request)
        if provider:
            out["llm.provider"] = provider
            out["llm.system"] = provider
        if model:
            out["llm.model_name"] = model
        req = event.annotated_request
        if req is not None and (req.params or req.provider_params):
            # Settings only: a provider param holding content (a predicted answer, an output schema) goes
            # out with the messages, as content capture says, never here.
            params = {k: v for k, v in req.settings().items() if _json_safe(v)}
            if params:
                out["llm.invocation_parameters"] = json.dumps(params, sort_keys=True, default=str)
    elif role == TOOL:
        out["tool.name"] = event.name
    elif role in (CONVERSATION, AGENT):
        out["agent.name"] = agent_name(event)
    return out


def end_attributes(event: Event, role: str) -> dict[str, Any]:
    if role != ATTEMPT:
        return {}
    out: dict[str, Any] = {}
    resp = event.annotated_response
    if resp is None:
        return out
    if resp.model:
        out["llm.model_name"] = scrub_repeated(resp.model)
    usage = resp.usage
    if usage is None:
        return out
    prompt = input_tokens_total(provider_of(event), usage)
    if prompt is not None:
        out["llm.token_count.prompt"] = prompt
    if usage.output_tokens is not None:
        out["llm.token_count.completion"] = usage.output_tokens
    if prompt is not None and usage.output_tokens is not None:
        out["llm.token_count.total"] = prompt + usage.output_tokens
    if usage.cache_read_tokens is not None:
        out["llm.token_count.prompt_details.cache_read"] = usage.cache_read_tokens
    if usage.cache_creation_tokens is not None:
        out["llm.token_count.prompt_details.cache_write"] = usage.cache_creation_tokens
    if usage.reasoning_tokens is not None:
        out["llm.token_count.completion_details.reasoning"] = usage.reasoning_tokens
    return out


def _json_safe(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, list, tuple, dict))
