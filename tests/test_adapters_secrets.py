"""Credentials anywhere in a request, and the client's own key echoed back in an error, never reach
events, exported spans, the run journal or JSONL files; the caller still gets the provider's own error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from journal_support import run_turn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import LLMRequestInterceptOutcome, adapters, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.events import FIELDS
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.jsonl import JsonlWriter

SECRETS = {f"S{i}-{'x' * 12}" for i in range(1, 11)}


def _secret(n: int) -> str:
    return f"S{n}-{'x' * 12}"


def _leaky_kwargs() -> dict[str, Any]:
    """A chat request carrying a credential in every place the issue names, beside look-alikes that must stay."""
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "extra_headers": {
            "Authorization": f"Bearer {_secret(1)}",
            "X-Custom-Token": _secret(2),
            "Ocp-Apim-Subscription-Key": _secret(3),
            "x-client-SECRET-id": _secret(9),
            "X-Trace": "keep-header",
        },
        "extra_query": {"API_KEY": _secret(4), "q": "keep-query"},
        "extra_body": {
            "nested": {"Client_Secret": _secret(5), "list": [{"PassWord": _secret(6)}], "tokenizer": "keep-body"},
            "max_tokens_hint": 7,
        },
        "metadata": {"refresh_token": _secret(7), "user": "keep-meta"},
    }


def _assert_clean(text: str) -> None:
    for secret in (*SECRETS, t.TEST_KEY):
        assert secret not in text, secret


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


@pytest.fixture()
def oa() -> Iterator[t.Scripted]:
    scripted = t.scripted_openai(max_retries=0)
    yield scripted
    scripted.client.close()


def test_nested_credentials_never_reach_events_but_reach_the_provider(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn

    def add_cookie(_name, request, annotated):
        return LLMRequestInterceptOutcome(request.replace(headers={"Cookie": _secret(8)}), annotated)

    relay.intercepts.register_llm_request("cookie", 1, False, add_cookie)
    try:
        oa.add(t.json_reply(t.chat_completion_body("ok", usage=t.chat_usage(11, 3))))
        adapters.complete(oa.client, _leaky_kwargs())
    finally:
        relay.intercepts.deregister_llm_request("cookie")

    sent = oa.script.requests[0]
    wire = str(sent.url) + str(dict(sent.headers)) + sent.content.decode()
    for n in range(1, 10):
        assert _secret(n) in wire, n  # redaction is for the record only: the provider got every value

    records = " ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS)
    _assert_clean(records)
    start = relay_events.starts(relay_kind=cv.ATTEMPT)[0]
    content = start.input["content"]
    assert content["extra_headers"]["X-Trace"] == "keep-header"
    assert content["extra_headers"]["Authorization"] == redaction.REDACTED
    assert content["extra_query"] == {"API_KEY": redaction.REDACTED, "q": "keep-query"}
    nested = content["extra_body"]["nested"]
    assert nested["tokenizer"] == "keep-body" and nested["list"] == [{"PassWord": redaction.REDACTED}]
    assert content["extra_body"]["max_tokens_hint"] == 7 and content["max_tokens"] == 5
    assert start.input["headers"] == {"Cookie": redaction.REDACTED}
    assert start.annotated_request.provider_params["metadata"] == {
        "refresh_token": redaction.REDACTED,
        "user": "keep-meta",
    }
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert end.annotated_response.usage.input_tokens == 11  # usage counts are not "tokens" to hide


def test_header_and_body_lists_match_as_documented() -> None:
    for name in ("authorization", "Proxy-Authorization", "COOKIE", "api-key", "api_key", "X-Api-Key", "x-goog-api-key",
                 "ocp-apim-subscription-key", "x-auth-token", "tokenid", "x-my-secret-thing"):  # fmt: skip
        assert redaction.is_credential_header(name), name
        assert redaction.is_credential_header(name.encode()), name
    for name in ("content-type", "x-goog-user-project", "openai-organization", "x-stainless-retry-count"):
        assert not redaction.is_credential_header(name), name
    for key in ("api_key", "APIKEY", "access_token", "Refresh_Token", "client_secret", "secret", "password",
                "authorization"):  # fmt: skip
        assert redaction.is_credential_key(key), key
    for key in ("max_tokens", "input_tokens", "token", "secret_santa", "passwords", "tokenizer", "my_api_key"):
        assert not redaction.is_credential_key(key), key


def test_tool_schemas_in_the_conversation_are_not_blanked() -> None:
    tools = [{"type": "function", "function": {"parameters": {"properties": {"password": {"type": "string"}}}}}]
    content = {"model": "m", "tools": tools, "extra_body": {"password": "p" * 10}}
    cleaned = redaction.redact_kwargs(content)
    assert cleaned["tools"] is tools
    assert cleaned["extra_body"] == {"password": redaction.REDACTED}
    assert content["extra_body"] == {"password": "p" * 10}  # the caller's dicts are never edited
    numeric = redaction.redact_kwargs({"model": "m", "extra_query": {"Password": 1234}, "secret": 99})
    assert numeric == {"model": "m", "extra_query": {"Password": redaction.REDACTED}, "secret": redaction.REDACTED}
    plain = {"model": "m", "messages": [], "extra_body": {"n": 1}}
    assert redaction.redact_kwargs(plain) is plain  # nothing to hide: no copy


def test_a_bedrock_converse_tools_schemas_are_recorded_as_sent(relay_turn: Any, relay_events: Any) -> None:
    # Converse declares its tools under ``toolConfig`` (``toolSpec`` schemas; by its API nothing there reaches a
    # remote server): walked by the key rule, a tool taking a ``password`` was recorded with that property's schema
    # replaced by "[redacted]", where OpenAI's and Anthropic's ``tools`` are recorded as they were sent.
    from bedrock_support import MODEL, BedrockServer, converse_body, json_reply

    schema = {"type": "object", "properties": {"user": {"type": "string"}, "password": {"type": "string"}}}
    tool_config = {"tools": [{"toolSpec": {"name": "login", "inputSchema": {"json": schema}}}]}
    server = BedrockServer()
    server.replies.append(json_reply(converse_body("ok")))
    client = adapters.instrument(server.client())
    try:
        client.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}], toolConfig=tool_config)
    finally:
        adapters.uninstrument(client)
        server.close()
    (start,) = [e for e in relay_events.starts() if e.scope_type == "llm"]
    assert start.input["content"]["toolConfig"] == tool_config
    assert redaction.redact_kwargs({"toolConfig": tool_config, "password": "p" * 10})["password"] == redaction.REDACTED


def test_a_credential_nested_deeper_than_the_walk_goes_is_not_recorded() -> None:
    deep: Any = {"api_key": _secret(1)}
    for _ in range(100):
        deep = {"x": [deep]}
    loop: dict[str, Any] = {"n": 1}
    loop["self"] = loop
    cleaned = redaction.redact_kwargs({"model": "m", "extra_body": {"deep": deep, "loop": loop}, "max_tokens": 3})
    _assert_clean(repr(cleaned))
    assert cleaned["max_tokens"] == 3 and cleaned["extra_body"]["loop"]["n"] == 1


def _echoing_401() -> t.Reply:
    return t.error(401, f"Incorrect API key provided: {t.TEST_KEY}. You can find your API key at ...")


def test_key_echoed_in_a_401_is_scrubbed_from_the_record_not_from_the_callers_error(
    relay_turn, relay_events, oa
) -> None:
    oa.add(_echoing_401())
    with pytest.raises(openai.AuthenticationError) as caught:
        adapters.complete(oa.client, {"model": "m", "messages": []})
    assert t.TEST_KEY in str(caught.value)  # the provider's own object, untouched
    assert t.TEST_KEY in caught.value.body["message"]
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert end.error_type == "AuthenticationError"
    assert "Incorrect API key provided: [redacted]" in end.error_message
    _assert_clean(" ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS))


def test_spans_never_hold_the_key_or_nested_credentials(relay_home) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(provider, capture_content=True, conventions=("gen_ai", "openinference")).attach(host)
    lease = session.SESSION_COORDINATOR.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="t")
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    scripted = t.scripted_openai(max_retries=0)
    try:
        scripted.add(t.json_reply(t.chat_completion_body("ok")), _echoing_401())
        adapters.complete(scripted.client, _leaky_kwargs())
        with pytest.raises(openai.AuthenticationError):
            adapters.complete(scripted.client, {"model": "m", "messages": []})
    finally:
        session.SESSION_COORDINATOR.end_turn(turn, outcome="failed")
        session.SESSION_COORDINATOR.release_conversation(lease)
        exporter.detach()
    spans = exported.get_finished_spans()
    failed = [s for s in spans if s.status.description and "AuthenticationError" in s.status.description]
    assert failed, [s.name for s in spans]
    assert "[redacted]" in failed[0].status.description
    dumped = [
        (s.name, dict(s.attributes or {}), s.status.description, [(e.name, dict(e.attributes or {})) for e in s.events])
        for s in spans
    ]
    _assert_clean(repr(dumped))
    invocation = [a["llm.invocation_parameters"] for _, a, _, _ in dumped if "llm.invocation_parameters" in a]
    assert invocation and "[redacted]" in invocation[0]


def test_journal_and_jsonl_never_hold_the_key(tmp_path: Path) -> None:
    scripted = t.scripted_openai(max_retries=0)
    jsonl = tmp_path / "events.jsonl"
    writers: list[JsonlWriter] = []

    def body() -> None:
        writer = JsonlWriter(jsonl)
        writers.append(writer)
        relay = session.active_turn().host.relay
        relay.subscribers.register(writer, name="jsonl")
        scripted.add(t.json_reply(t.chat_completion_body("ok")), _echoing_401())
        adapters.complete(scripted.client, _leaky_kwargs())
        with pytest.raises(openai.AuthenticationError):
            adapters.complete(scripted.client, {"model": "m", "messages": []})

    result = run_turn(tmp_path, body, outcome="failed")
    writers[0].close()
    journal_text = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p != jsonl)
    assert "AuthenticationError" in journal_text and "[redacted]" in journal_text
    _assert_clean(journal_text)
    _assert_clean(json.dumps(result.rows))
    lines = jsonl.read_text()
    assert "Incorrect API key provided: [redacted]" in lines and "keep-query" in lines
    _assert_clean(lines)


def test_the_clients_key_under_any_header_name_never_reaches_events(relay_turn, relay_events, oa) -> None:
    # A key travels in a header whatever the header is called: a vendor's "*-api-key", or the
    # client's own key under a name no list knows, bare or after an auth scheme.
    oa.add(t.json_reply(t.chat_completion_body("ok")))
    kwargs = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "extra_headers": {
            "X-Goog-Api-Key": _secret(1),
            "X-Backup-Auth": f"Bearer {t.TEST_KEY}",
            "X-Backup": f"Bearer {t.TEST_KEY}",
            "X-Mirror": t.TEST_KEY.encode(),
            "X-Trace": "keep-header",
        },
    }
    adapters.complete(oa.client, kwargs)
    sent = oa.script.requests[0].headers
    assert sent["x-goog-api-key"] == _secret(1) and sent["x-backup"] == f"Bearer {t.TEST_KEY}"
    _assert_clean(" ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS))
    headers = relay_events.starts(relay_kind=cv.ATTEMPT)[0].input["content"]["extra_headers"]
    assert headers == {
        "X-Goog-Api-Key": redaction.REDACTED,
        "X-Backup-Auth": redaction.REDACTED,  # a name that says credential
        "X-Backup": f"Bearer {redaction.REDACTED}",  # a name that does not: the client's key in it is cut
        "X-Mirror": redaction.REDACTED,
        "X-Trace": "keep-header",
    }


def test_a_client_key_is_scrubbed_however_many_keys_came_before(relay_turn, relay_events, oa) -> None:
    # A server that makes a client per user sees many keys: the one in use is always remembered,
    # not only the first few hundred the process met.
    for n in range(1000):
        redaction.remember_secret(f"sk-user-{n:06d}-padding")
    key = "sk-user-latest-0123456789"
    oa.add(t.error(401, f"Incorrect API key provided: {key}."))
    with pytest.raises(openai.AuthenticationError):
        adapters.complete(oa.client.with_options(api_key=key), {"model": "m", "messages": []})
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert end.error_message is not None and "Incorrect API key provided: [redacted]" in end.error_message
    assert key not in " ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS)


def test_scope_inputs_and_outputs_hold_no_credentials(relay_turn, relay_events) -> None:
    """A tool's arguments, a scope's input and output and a mark's data are recorded with credential keys
    and remembered client keys blanked; the tool itself still gets (and returns) the values as they were."""
    relay, _turn = relay_turn
    redaction.remember_secret(_secret(4))
    got: list[Any] = []

    def login(args: dict[str, Any]) -> dict[str, Any]:
        got.append(args)
        return {"session": {"access_token": _secret(2)}, "user": "keep-out", "note": f"key {_secret(4)}"}

    args = {"user": "ada", "password": _secret(1)}
    result = relay.tools.execute("login", args, login)
    assert got == [{"user": "ada", "password": _secret(1)}] and got[0] is args
    assert result["session"]["access_token"] == _secret(2)

    with relay.scope.scope("step", input=[{"api_key": _secret(3)}, "keep-in"]) as step:
        relay.scope.mark("checkpoint", {"Client_Secret": _secret(5), "n": 1})
    relay.scope.end(relay.scope.push("late", attach=False), output=({"secret": _secret(6)},))
    assert step.ended

    records = " ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS)
    _assert_clean(records)
    assert relay_events.starts(name="login")[0].input == {"user": "ada", "password": redaction.REDACTED}
    assert relay_events.ends(name="login")[0].output["user"] == "keep-out"
    assert relay_events.starts(name="step")[0].input[1] == "keep-in"
    assert relay_events.ends(name="late")[0].output == ({"secret": redaction.REDACTED},)


def _remote_servers_calls() -> None:
    """A Responses call with an MCP tool and an Anthropic call with an MCP server, each carrying credentials."""
    answer = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "completed",
              "output": [], "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}}  # fmt: skip
    scripted = t.scripted_openai(t.json_reply(answer), max_retries=0)
    mcp_tool = {
        "type": "mcp", "server_label": "crm", "require_approval": "never", "authorization": _secret(1),
        "server_url": f"https://mcp.example/sse?api_key={_secret(2)}&region=eu",
        "headers": {"Authorization": f"Bearer {_secret(3)}", "X-Tenant": "keep-tenant"},
    }  # fmt: skip
    function_tool = {"type": "function", "name": "lookup", "parameters": {"properties": {"password": {}}}}
    adapters.instrument(scripted.client).responses.create(model="m", input="hi", tools=[mcp_tool, function_tool])
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
               "content": [{"type": "text", "text": "ok"}],
               "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
    claude = t.scripted_anthropic(t.json_reply(message), max_retries=0)
    adapters.instrument(claude.client).beta.messages.create(
        model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}], betas=["mcp-client-2025-04-04"],
        mcp_servers=[{"type": "url", "name": "crm", "url": f"https://mcp.example/sse?key={_secret(4)}",
                      "authorization_token": _secret(5)}],
    )  # fmt: skip
    sent = scripted.script.requests[0].content.decode() + claude.script.requests[0].content.decode()
    for n in range(1, 6):
        assert _secret(n) in sent, n  # the provider got every value


def test_remote_mcp_servers_credentials_never_reach_events(relay_turn, relay_events) -> None:
    # An MCP tool's headers, OAuth token and keyed URL (OpenAI Responses), an MCP server's
    # authorization_token (Anthropic): the tools are the conversation, not walked, and
    # authorization_token was no credential's name, so every sink held them whole.
    _remote_servers_calls()
    _assert_clean(" ".join(repr(getattr(e, name)) for e in relay_events for name in FIELDS))
    responses, messages = relay_events.starts(relay_kind=cv.ATTEMPT)
    tool, function_tool = responses.annotated_request.tools
    assert tool["headers"] == {"Authorization": redaction.REDACTED, "X-Tenant": "keep-tenant"}
    assert tool["authorization"] == redaction.REDACTED and tool["server_label"] == "crm"
    assert tool["server_url"] == f"https://mcp.example/sse?api_key={redaction.REDACTED}&region=eu"
    assert function_tool["parameters"] == {"properties": {"password": {}}}  # a schema is no credential
    assert responses.input["content"]["tools"][0]["headers"]["X-Tenant"] == "keep-tenant"
    (server,) = messages.annotated_request.provider_params["mcp_servers"]
    assert server["authorization_token"] == redaction.REDACTED
    assert server["url"] == f"https://mcp.example/sse?key={redaction.REDACTED}" and server["name"] == "crm"


def test_remote_mcp_servers_credentials_never_reach_the_journal_or_spans(tmp_path: Path) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    exporters: list[OTelExporter] = []

    def body() -> None:
        host = session.active_turn().host
        exporters.append(OTelExporter(provider, capture_content=True, conventions=("gen_ai", "openinference")))
        exporters[0].attach(host)
        _remote_servers_calls()

    result = run_turn(tmp_path, body)
    exporters[0].detach()
    journal_text = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "keep-tenant" in journal_text
    _assert_clean(journal_text)
    _assert_clean(json.dumps(result.rows))
    spans = exported.get_finished_spans()
    assert any("gen_ai.tool.definitions" in (s.attributes or {}) for s in spans)
    _assert_clean(repr([dict(s.attributes or {}) for s in spans]))
