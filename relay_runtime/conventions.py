"""Names the session layer writes onto scopes, which every consumer reads.

Consumers (exporters, the journal, the voice relay) recognise what a scope is
by ``event.metadata[KIND]``, never by its display name.
"""

from __future__ import annotations

KIND = "relay.kind"

CONVERSATION = "conversation"  # AGENT scope: one per leased (profile_key, session_id)
TURN = "turn"  # FUNCTION scope: begin_turn .. end_turn
LOGICAL_CALL = "logical_llm_call"  # FUNCTION scope keyed by api_request_id
ATTEMPT = "llm_attempt"  # LLM scope: one physical provider call
TOOL = "tool"  # TOOL scope

# Metadata keys.
SESSION_ID = "session_id"
PROFILE_KEY = "profile_key"  # the profile's resolved home path: in-process only, never exported
PROFILE_ID = "profile_id"  # a short stable hash of the profile key, safe to export
AGENT_NAME = "agent_name"
PLATFORM = "platform"
PARENT_SESSION_ID = "parent_session_id"
TURN_ID = "turn_id"
TASK_ID = "task_id"
API_REQUEST_ID = "api_request_id"
CALL_ROLE = "call_role"
RETRY_COUNT = "retry_count"
SDK_RETRIES = "sdk_retries"
# HTTP requests the SDK sent within one of its tries, beyond the first (a middleware's fallback
# hop, a resend after a token refresh): they carry the same x-stainless-retry-count.
SDK_RESENDS = "relay.sdk_resends"
# False on an attempt whose SDK call refused before sending anything (its own argument checks,
# an auth deadline): no provider was called.
SENT = "relay.sent"
API_MODE = "api_mode"
SERVER_ADDRESS = "server_address"
# The OpenAI-compatible endpoint a call reached when its provider name does not say it (OpenRouter,
# vLLM, ...: ``gen_ai.provider.name`` stays ``openai``); exported as ``relay.provider.endpoint``.
PROVIDER_ENDPOINT = "provider_endpoint"
CLOUD_REGION = "cloud_region"  # the cloud region a provider endpoint is in (Bedrock's AWS region)
# The agent framework whose run a scope records (``langchain``, ``langgraph``, ``openai_agents``): agent,
# graph node, chain, retriever and guardrail scopes opened by ``relay_runtime.integrations`` for a framework.
FRAMEWORK = "relay.framework"
# On a logical call an execution intercept answered with a fallback after its provider failed: its name.
FALLBACK = "relay.fallback"
TOOL_CALL_ID = "tool_call_id"  # on a TOOL scope: the provider's id of the tool call it answers
# On the end of a TOOL scope whose result was a generator (``tool_streams``): how many items the caller read
# from it; its output holds the first ``tool_streams.RECORDED_ITEMS`` of them.
TOOL_STREAMED_ITEMS = "relay.tool.streamed_items"
# On a TOOL scope a framework opened for a call of an MCP server's tool that it names otherwise (the
# Agents SDK's server-prefixed names): the tool's name on the server, so the MCP client's request for
# it recognises the call and annotates that scope instead of opening a second one inside it.
MCP_TOOL = "relay.mcp_tool"
# The metadata keys whose values sinks key and join records by (a journal's run, a span's conversation,
# a trajectory's session): a redaction rule that changes one records a pseudonym in its place, never a
# placeholder two users would share (``RedactionPolicy.identifier``).
IDENTIFIERS = (SESSION_ID, PARENT_SESSION_ID, TURN_ID, TASK_ID, API_REQUEST_ID, TOOL_CALL_ID)

# Mark names.
CHUNK = "llm.chunk"  # data: ChunkMark
TOOL_CALL = "llm.tool_call"
# Under a logical call (else under its failed attempt), before its end: the answer an execution intercept gave
# in place of the provider's, which failed (a fallback). data: {"intercept": <its name>}; the answer's
# annotation is the mark's ``annotated_response``, as an attempt's end carries the provider's.
FALLBACK_ANSWER = "llm.fallback"

# Span hints: set by an integration that knows the conventions of what it traces (MCP names its
# spans ``tools/call add`` and sets ``mcp.*`` attributes). A mapping with any of ``name`` (the
# span's name), ``kind`` (``client`` / ``server`` / ``internal`` / ``producer`` / ``consumer``) and
# ``attributes`` (convention attributes, exported as they are; on the end event they are set last),
# ``duration_metric`` (a duration histogram the scope's length is recorded in, with those of the
# span's final attributes that ``metric_keys`` names). Hints once given are not changed in place:
# an end that adds attributes gives new hints (the same object at the end as at the start tells an
# exporter that what the start set still holds).
SPAN_HINTS = "relay.span"
# A measure that is no scope (an MCP session's length): a mark with data {"name", "seconds", "attributes"}.
METRIC = "relay.metric"
