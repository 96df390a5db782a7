"""Pure functions from relay events to span names, kinds and attributes.

Nothing here touches a tracer: the exporter asks these functions what a scope
looks like in OpenTelemetry and keeps the spans itself. The OTel GenAI semantic
conventions (``gen_ai.*``) are written here, our own identity under ``relay.*``;
OpenInference's vocabulary, when asked, is in ``openinference.py``.

Content (messages, instructions, tool arguments) is never read here; see
``content.py``, which only runs when the user opted in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from relay_runtime import conventions as cv
from relay_runtime.cost import AttemptCost, CostRollup
from relay_runtime.events import Event
from relay_runtime.redaction import scrub_repeated, scrub_text
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse

# -- what a scope is ---------------------------------------------------------------------

CONVERSATION = cv.CONVERSATION
TURN = cv.TURN
LOGICAL_CALL = cv.LOGICAL_CALL
ATTEMPT = cv.ATTEMPT
TOOL = cv.TOOL
AGENT = "agent"  # an AGENT scope the session layer did not write
SCOPE = "scope"  # any other scope

GEN_AI = "gen_ai"
OPENINFERENCE = "openinference"
KNOWN_CONVENTIONS = frozenset({GEN_AI, OPENINFERENCE})

_BY_SCOPE_TYPE = {"llm": ATTEMPT, "tool": TOOL, "agent": AGENT}
# A ``relay.kind`` that names a role (a str; any other key finds nothing).
ROLE_BY_KIND: dict[Any, str] = {role: role for role in (CONVERSATION, TURN, LOGICAL_CALL, ATTEMPT, TOOL)}


def role_of(event: Event) -> str:
    """Which of our span shapes a scope gets: by ``relay.kind`` first, then by scope type."""
    md = event.metadata
    if md:
        kind = md.get(cv.KIND)
        if type(kind) is str:
            role = ROLE_BY_KIND.get(kind)
            if role is not None:
                return role
    return _BY_SCOPE_TYPE.get(event.scope_type or "", SCOPE)


# A provider call leaves the process; everything else is work inside it.
SPAN_KINDS: dict[str, SpanKind] = {
    role: SpanKind.CLIENT if role == ATTEMPT else SpanKind.INTERNAL
    for role in (CONVERSATION, TURN, LOGICAL_CALL, ATTEMPT, TOOL, AGENT, SCOPE)
}


# Codec operations that the GenAI conventions spell otherwise: the OpenAI Responses
# API is a chat operation there, and backends (Phoenix) key the LLM view off "chat".
_OPERATIONS = {"responses": "chat", "messages": "chat"}


def attempt_identity(event: Event, req: AnnotatedLLMRequest | None) -> tuple[str, str | None, str | None]:
    """``(operation, provider, request model)`` of an attempt; ``req`` is its ``annotated_request``."""
    if req is None:
        return "chat", event.provider, event.model_name
    op = req.operation
    return (
        _OPERATIONS.get(op, op) if op else "chat",
        req.provider or event.provider,
        req.model or event.model_name,
    )


def provider_of(event: Event) -> str | None:
    req = event.annotated_request
    if req is not None and req.provider:
        return req.provider
    return event.provider


def agent_name(event: Event) -> str:
    """The ``agent_name`` the caller gave the conversation (or the coordinator's default).

    Never derived from the profile key: that is a home directory's path, which is
    not exported (``relay.profile_id`` identifies the profile instead).
    """
    md = event.metadata
    name = md.get(cv.AGENT_NAME) if md else None
    if isinstance(name, str) and name:
        return name
    return event.name


def span_name(event: Event, role: str) -> str:
    """Low-cardinality names as the GenAI conventions spell them: ``{operation} {target}``."""
    if role == ATTEMPT:
        op, _, model = attempt_identity(event, event.annotated_request)
        return f"{op} {model}" if model else op
    if role == TOOL:
        return f"execute_tool {event.name}"
    if role in (CONVERSATION, AGENT):
        return f"invoke_agent {agent_name(event)}"
    return event.name


# -- gen_ai.* and relay.* ------------------------------------------------------------------

# AnnotatedLLMRequest.params keys -> the request attribute each maps to. Both the
# OpenAI and the Anthropic spelling of the output limit map to max_tokens.
REQUEST_PARAMS: dict[str, str] = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}

# Metadata keys copied under relay.* when present, on whichever scope carries them.
RELAY_METADATA: dict[str, str] = {
    key: f"relay.{key}"
    for key in (
        cv.API_REQUEST_ID,
        cv.CALL_ROLE,
        cv.RETRY_COUNT,
        cv.TURN_ID,
        cv.TASK_ID,
        cv.PLATFORM,
        cv.PARENT_SESSION_ID,
        cv.PROFILE_ID,
        cv.API_MODE,
    )
}
RELAY_METADATA[cv.PROVIDER_ENDPOINT] = "relay.provider.endpoint"
_RELAY_KEYS = RELAY_METADATA.keys()
_PRIMITIVES = frozenset({str, int, float, bool})
_STOP_KEYS = frozenset({"stop", "stop_sequences"})


def _scalar(value: Any) -> Any:
    """An attribute-safe value, or None to skip: OTel attributes hold primitives and lists of them."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def relay_attributes(md: Mapping[str, Any] | None, out: dict[str, Any]) -> None:
    # Walks the (few) metadata items rather than probing for every known key; a scope with none of them
    # (an integration's: a tool's kind and span hints) is told so in one C call.
    if not md or _RELAY_KEYS.isdisjoint(md):
        return
    for key, value in md.items():
        attr = RELAY_METADATA.get(key)
        if attr is not None and value != "" and type(value) in _PRIMITIVES:
            out[attr] = value


def request_attributes(req: AnnotatedLLMRequest | None, out: dict[str, Any]) -> None:
    if req is None:
        return
    params = req.params
    if params:
        for key, value in params.items():
            attr = REQUEST_PARAMS.get(key)
            if attr is None or value is None:
                continue
            if type(value) not in _PRIMITIVES:
                value = _scalar(value)
                if value is None:
                    continue
            elif key in _STOP_KEYS and isinstance(value, str):
                value = [value]
            out[attr] = value
    if req.stream:
        out["gen_ai.request.stream"] = True


def server_attributes(md: Mapping[str, Any] | None, out: dict[str, Any]) -> None:
    """``server.address`` / ``server.port`` from the adapter's ``server_address`` (host or host:port)."""
    address = md.get(cv.SERVER_ADDRESS) if md else None
    if not isinstance(address, str) or not address:
        return
    parsed = _SERVERS.get(address)
    if parsed is None:
        parsed = _parse_server(address)
    host, port = parsed
    out["server.address"] = host
    if port is not None:
        out["server.port"] = port
    region = md.get(cv.CLOUD_REGION) if md else None
    if isinstance(region, str) and region:
        out["cloud.region"] = region


def _parse_server(address: str) -> tuple[str, int | None]:
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and host and not host.endswith(":"):
        parsed: tuple[str, int | None] = (host.strip("[]"), int(port))
    else:
        parsed = (address, None)
    if len(_SERVERS) < 256:  # a process talks to few endpoints; past that, parse each time
        _SERVERS[address] = parsed
    return parsed


_SERVERS: dict[str, tuple[str, int | None]] = {}


def span_start(event: Event, role: str, conversation_id: str | None) -> tuple[str, dict[str, Any]]:
    """A span's name, and what is known when its scope starts (set at span creation, where
    samplers can see it). Together, so that an attempt's request is read once."""
    md = event.metadata
    if role == LOGICAL_CALL:
        # One per call and no gen_ai.* of its own: only our identity.
        out: dict[str, Any] = {}
        relay_attributes(md, out)
        return event.name, out
    if role == ATTEMPT:
        req = event.annotated_request
        op, provider, model = attempt_identity(event, req)
        out = {"gen_ai.operation.name": op}
        if provider:
            out["gen_ai.provider.name"] = provider
        if model:
            out["gen_ai.request.model"] = model
        name = f"{op} {model}" if model else op
        if req is not None:
            request_attributes(req, out)
        if md and cv.SERVER_ADDRESS in md:
            server_attributes(md, out)
        if conversation_id:
            out["gen_ai.conversation.id"] = conversation_id
        relay_attributes(md, out)
        return name, out
    return span_name(event, role), _other_start_attributes(event, role, conversation_id)


def _other_start_attributes(event: Event, role: str, conversation_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    md = event.metadata
    if role == TOOL:
        out["gen_ai.operation.name"] = "execute_tool"
        out["gen_ai.tool.name"] = event.name
        out["gen_ai.tool.type"] = "function"
        call_id = md.get("tool_call_id") if md else None
        if isinstance(call_id, str) and call_id:
            out["gen_ai.tool.call.id"] = call_id
    elif role in (CONVERSATION, AGENT):
        out["gen_ai.operation.name"] = "invoke_agent"
        out["gen_ai.agent.name"] = agent_name(event)
        model = md.get("model") if md else None
        if isinstance(model, str) and model:
            out["gen_ai.request.model"] = model
    if conversation_id:
        out["gen_ai.conversation.id"] = conversation_id
    relay_attributes(md, out)
    return out


def input_tokens_total(provider: str | None, usage: Any) -> int | None:
    """``gen_ai.usage.input_tokens`` as the conventions define it: every input token, cached or not.

    Anthropic reports cache reads and cache writes apart from ``input_tokens``; the
    Anthropic conventions say to add both in. Other providers already count them.
    """
    base = usage.input_tokens
    if base is None:
        return None
    if provider == "anthropic":
        return base + (usage.cache_read_tokens or 0) + (usage.cache_creation_tokens or 0)
    return int(base)


def response_attributes(provider: str | None, resp: AnnotatedLLMResponse | None, out: dict[str, Any]) -> None:
    if resp is None:
        return
    # The provider's words: one echoing the client's key (an id or model built from it) must not export it.
    if resp.model:
        out["gen_ai.response.model"] = scrub_repeated(resp.model)
    if resp.id:
        out["gen_ai.response.id"] = scrub_text(resp.id)
    if resp.finish_reasons:
        # A tuple, as the SDK keeps a sequence attribute: nothing to convert when the span ends.
        out["gen_ai.response.finish_reasons"] = tuple(map(str, resp.finish_reasons))
    usage = resp.usage
    if usage is not None:
        total_in = input_tokens_total(provider, usage)
        if total_in is not None:
            out["gen_ai.usage.input_tokens"] = total_in
        if usage.output_tokens is not None:
            out["gen_ai.usage.output_tokens"] = usage.output_tokens
        if usage.cache_read_tokens is not None:
            out["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_creation_tokens is not None:
            out["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_creation_tokens
        if usage.reasoning_tokens is not None:
            out["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
    if resp.time_to_first_chunk_ns is not None:
        out["gen_ai.response.time_to_first_chunk"] = resp.time_to_first_chunk_ns / 1e9
    if resp.sdk_retries is not None:
        out["relay.sdk_retries"] = resp.sdk_retries
    if resp.embedding_dimensions is not None:
        out["gen_ai.embeddings.dimension.count"] = resp.embedding_dimensions


def outcome_of(event: Event) -> str | None:
    if event.outcome:
        return event.outcome
    output = event.output
    if isinstance(output, dict):
        value = output.get("outcome")
        if isinstance(value, str):
            return value
    return None


def error_type(event: Event, outcome: str | None = None) -> str | None:
    """``error.type`` for a failed scope: the exception's class name, else ``_OTHER``.

    Cancellation (a closed stream, a cancelled task) is how a caller stops on
    purpose, so it is recorded as ``relay.outcome`` and not as an error.
    """
    if (outcome or outcome_of(event)) != "failed":
        return None
    return event.error_type or "_OTHER"


def end_attributes(event: Event, role: str) -> dict[str, Any]:
    outcome = event.outcome or outcome_of(event)  # the relay's own ends carry it: no call
    if outcome is None:
        out: dict[str, Any] = {}
    elif outcome == "failed":
        out = {"relay.outcome": outcome, "error.type": event.error_type or "_OTHER"}
    else:
        out = {"relay.outcome": outcome}
    md = event.metadata
    if event.cost is not None:
        cost_attributes(event.cost, out)
    if role == ATTEMPT:
        provider = provider_of(event)
        response_attributes(provider, event.annotated_response, out)
        if md:
            retries = md.get(cv.SDK_RETRIES)
            if isinstance(retries, int) and "relay.sdk_retries" not in out:
                out["relay.sdk_retries"] = retries
            resends = md.get(cv.SDK_RESENDS)
            if isinstance(resends, int):
                out[cv.SDK_RESENDS] = resends
            if md.get(cv.SENT) is False:  # the SDK refused before sending: no provider call happened
                out[cv.SENT] = False
    elif role == LOGICAL_CALL:
        output = event.output
        if isinstance(output, dict):
            for key, attr in _LOGICAL_OUTPUT:
                value = output.get(key)
                if isinstance(value, str) and value:
                    out[attr] = scrub_repeated(value)  # the answer's model, as its attempt's span writes it
        fallback = md.get(cv.FALLBACK) if md else None
        if isinstance(fallback, str) and fallback:  # answered by this execution intercept, its provider failed
            out[cv.FALLBACK] = fallback
    return out


_LOGICAL_OUTPUT = (("model", "relay.model"), ("provider", "relay.provider"))

# The cost of one provider call, as the GenAI conventions' cost proposal names it (not yet merged:
# open-telemetry/semantic-conventions-genai#443); everything else about cost is ours, under relay.cost.*.
COST_AMOUNT = "gen_ai.usage.cost.amount"
COST_CURRENCY = "gen_ai.usage.cost.currency"
COST_SOURCE = "gen_ai.usage.cost.source"


def cost_attributes(cost: Any, out: dict[str, Any]) -> None:
    """An attempt's cost (``gen_ai.usage.cost.*`` and its breakdown), or a scope's roll-up (``relay.cost.*``).

    The two never share a name, so a query summing ``gen_ai.usage.cost.amount``
    counts each provider call once, however deep the tree.
    """
    if isinstance(cost, AttemptCost):
        if cost.amount is not None:
            out[COST_AMOUNT] = cost.amount
            out[COST_CURRENCY] = cost.currency
            out[COST_SOURCE] = "local"
            for category, amount in cost.breakdown.items():
                out[f"relay.cost.{category}"] = amount
        else:
            out["relay.cost.unpriced"] = list(cost.missing)
        if cost.valid_from:
            out["relay.cost.valid_from"] = cost.valid_from
        if cost.wasted:
            out["relay.cost.wasted"] = True
        if cost.estimated:
            out["relay.cost.estimated"] = True
    elif isinstance(cost, CostRollup):
        out["relay.cost.rollup.total"] = cost.total
        out["relay.cost.rollup.wasted"] = cost.wasted
        out["relay.cost.rollup.attempts"] = cost.attempts
        if cost.currency:
            out["relay.cost.rollup.currency"] = cost.currency
        if cost.unpriced:
            out["relay.cost.rollup.unpriced_attempts"] = cost.unpriced
        if cost.carried:
            out["relay.cost.rollup.carried"] = cost.carried


def metric_key(
    event: Event, resp: AnnotatedLLMResponse | None
) -> tuple[str, str | None, str | None, str | None, str | None]:
    """What the gen_ai.client.* metrics' attributes are made of, as a hashable tuple:
    ``(operation, provider, request model, response model, server address)``; ``resp`` is the
    event's ``annotated_response``, which the caller has read already."""
    op, provider, model = attempt_identity(event, event.annotated_request)
    response_model = scrub_repeated(resp.model) if resp is not None and resp.model else None
    md = event.metadata
    address = md.get(cv.SERVER_ADDRESS) if md else None
    return op, provider, model, response_model, address if type(address) is str else None


def metric_attributes(key: tuple[str, str | None, str | None, str | None, str | None]) -> dict[str, Any]:
    """The attribute set the gen_ai.client.* metrics are recorded with (low cardinality only),
    before ``error.type`` (duration only) or ``gen_ai.token.type`` (token usage only)."""
    op, provider, model, response_model, address = key
    out: dict[str, Any] = {"gen_ai.operation.name": op}
    if provider:
        out["gen_ai.provider.name"] = provider
    if model:
        out["gen_ai.request.model"] = model
    if response_model:
        out["gen_ai.response.model"] = response_model
    if address:
        server_attributes({cv.SERVER_ADDRESS: address}, out)
    return out
