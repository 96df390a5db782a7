"""Opt-in content capture, the redaction hook, and credentials never exported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import LLMRequest, Relay, ScopeType
from relay_runtime.integrations.otel import CAPTURE_ENV, OTelExporter
from relay_runtime.integrations.otel.content import input_messages, scrub, system_instructions
from relay_runtime.types import AnnotatedLLMRequest, AnnotatedLLMResponse, TokenUsage

pytestmark = pytest.mark.usefixtures("span_path")

SECRET = "sk-live-0123456789abcdef"


class Codec:
    provider = "anthropic"
    operation = "chat"

    def decode(self, content: Any) -> AnnotatedLLMRequest:
        return AnnotatedLLMRequest(
            model=content["model"],
            messages=list(content["messages"]),
            system=content.get("system"),
            params={"max_tokens": content.get("max_tokens", 100)},
            provider=self.provider,
        )

    def apply(self, content: Any, changes: dict[str, Any]) -> dict[str, Any]:
        return {**content, **changes}

    def annotate_response(self, response: Any) -> AnnotatedLLMResponse:
        return AnnotatedLLMResponse(
            model=response["model"],
            id="msg_1",
            finish_reasons=["tool_use"],
            usage=TokenUsage(input_tokens=3, output_tokens=4),
            output_text=response["text"],
            tool_calls=[{"id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
        )

    def accumulator(self) -> Any:
        raise NotImplementedError


MESSAGES = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_0", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "rainy, 57F"}],
    },
]


def run_call(exporter_kwargs: dict[str, Any], *, messages: list[Any] = MESSAGES) -> list[Any]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    OTelExporter(provider, **exporter_kwargs).attach(relay)
    req = LLMRequest(
        {"x-api-key": SECRET, "authorization": f"Bearer {SECRET}"},
        {"model": "claude-test", "messages": messages, "system": "Be brief.", "api_key": SECRET},
    )
    relay.llm.execute("anthropic", req, lambda r: {"model": "claude-test-1", "text": "It is rainy."}, codec=Codec())
    relay.tools.execute("get_weather", {"city": "Paris", "api_key": SECRET}, lambda a: {"forecast": "rain"})
    return list(spans.get_finished_spans())


def _attrs(spans: list[Any], name: str) -> dict[str, Any]:
    (span,) = [s for s in spans if s.name == name]
    return dict(span.attributes)


def test_content_is_not_recorded_by_default(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    spans = run_call({})
    dumped = json.dumps([dict(s.attributes) for s in spans])
    for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"):
        assert key not in dumped
    assert "Paris" not in dumped and "rainy" not in dumped
    assert SECRET not in dumped


def test_capture_content_records_messages_in_the_conventions_schema(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    spans = run_call({"capture_content": True})
    a = _attrs(spans, "chat claude-test")
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Let me check."},
                {"type": "tool_call", "id": "toolu_0", "name": "get_weather", "arguments": {"city": "Paris"}},
            ],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "toolu_0", "response": "rainy, 57F"}]},
    ]
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(a["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "It is rainy."},
                {"type": "tool_call", "id": "toolu_1", "name": "get_weather", "arguments": {"city": "Paris"}},
            ],
            "finish_reason": "tool_use",
        }
    ]
    tool = _attrs(spans, "execute_tool get_weather")
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"city": "Paris", "api_key": "[redacted]"}
    assert json.loads(tool["gen_ai.tool.call.result"]) == {"forecast": "rain"}
    assert SECRET not in json.dumps([dict(s.attributes) for s in spans])


def test_env_variable_turns_capture_on(monkeypatch):
    monkeypatch.setenv(CAPTURE_ENV, "true")
    spans = run_call({})
    assert "gen_ai.input.messages" in _attrs(spans, "chat claude-test")
    monkeypatch.setenv(CAPTURE_ENV, "false")
    assert "gen_ai.input.messages" not in _attrs(run_call({}), "chat claude-test")


def test_redaction_hook_edits_or_drops_and_cannot_leak_credentials(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    seen: list[str] = []

    def redact(key: str, value: Any) -> Any:
        seen.append(key)
        if key == "gen_ai.system_instructions":
            return None
        if key == "gen_ai.input.messages":
            # A careless hook that puts a credential back: still scrubbed.
            return [{"role": "user", "parts": [{"type": "text", "content": "[hidden]"}], "token": SECRET}]
        return value

    spans = run_call({"capture_content": True, "redact": redact})
    a = _attrs(spans, "chat claude-test")
    assert "gen_ai.system_instructions" not in a
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "[hidden]"}], "token": "[redacted]"}
    ]
    assert set(seen) >= {"gen_ai.input.messages", "gen_ai.system_instructions", "gen_ai.output.messages"}
    assert SECRET not in json.dumps([dict(s.attributes) for s in spans])


def test_openinference_messages_when_capturing(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    spans = run_call({"capture_content": True, "conventions": ("gen_ai", "openinference")})
    a = _attrs(spans, "chat claude-test")
    assert a["llm.input_messages.0.message.role"] == "system"
    assert a["llm.input_messages.0.message.content"] == "Be brief."
    assert a["llm.input_messages.1.message.content"] == "Weather in Paris?"
    assert a["llm.input_messages.2.message.tool_calls.0.tool_call.function.name"] == "get_weather"
    assert a["llm.output_messages.0.message.role"] == "assistant"
    assert a["llm.output_messages.0.message.content"] == "It is rainy."
    assert a["output.value"] == "It is rainy."
    assert json.loads(_attrs(spans, "execute_tool get_weather")["output.value"]) == {"forecast": "rain"}


def test_openinference_output_value_is_what_the_hook_left(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)

    def hide_answers(key: str, value: Any) -> Any:
        if key == "gen_ai.output.messages":
            return [{"role": "assistant", "parts": [{"type": "text", "content": "[hidden]"}]}]
        return value

    conventions = ("gen_ai", "openinference")
    attempt = _attrs(
        run_call({"capture_content": True, "redact": hide_answers, "conventions": conventions}), "chat claude-test"
    )
    assert attempt["output.value"] == "[hidden]"
    assert "It is rainy." not in json.dumps(attempt)
    dropped = _attrs(
        run_call({"capture_content": True, "redact": lambda k, v: None, "conventions": conventions}), "chat claude-test"
    )
    assert "output.value" not in dropped and "It is rainy." not in json.dumps(dropped)


def test_mark_data_is_recorded_only_with_capture(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    for capture in (False, True):
        spans_out = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans_out))
        relay = Relay()
        OTelExporter(provider, capture_content=capture).attach(relay)
        with relay.scope.scope("work", ScopeType.FUNCTION):
            relay.scope.mark("note", {"text": "private", "password": "x"})
        (span,) = spans_out.get_finished_spans()
        (event,) = span.events
        if capture:
            assert event.attributes["relay.data.text"] == "private"
        else:
            assert "relay.data.text" not in event.attributes


def test_mark_data_passes_the_redaction_hook():
    seen: list[str] = []

    def hide_emails(key: str, value: Any) -> Any:
        seen.append(key)
        return {k: "[email]" if "@" in str(v) else v for k, v in value.items()}

    spans_out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans_out))
    relay = Relay()
    OTelExporter(provider, capture_content=True, redact=hide_emails).attach(relay)
    with relay.scope.scope("work", ScopeType.FUNCTION):
        relay.scope.mark("note", {"to": "jane@example.com", "n": 3})
    (span,) = spans_out.get_finished_spans()
    assert seen == ["relay.data"]
    assert dict(span.events[0].attributes) == {"relay.data.to": "[email]", "relay.data.n": 3}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ("just text", [{"role": "user", "parts": [{"type": "text", "content": "just text"}]}]),
        (
            [
                {"role": "system", "content": "sys"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            [
                {"role": "system", "parts": [{"type": "text", "content": "sys"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": 1}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]},
            ],
        ),
        (
            [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "fc1", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "fc1", "output": "done"},
            ],
            [
                {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "fc1", "name": "g", "arguments": {}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "fc1", "response": "done"}]},
            ],
        ),
        (
            [
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
                {"role": "assistant", "content": [{"type": "reasoning", "reasoning": "Say so."}, "It is 42."]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "Done.", "signature": "c2ln"}]},
            ],
            [
                {"role": "assistant", "parts": [{"type": "reasoning", "content": "Look it up."}]},
                {"role": "assistant", "parts": [{"type": "reasoning", "content": "Say so."},
                                                {"type": "text", "content": "It is 42."}]},
                {"role": "assistant", "parts": [{"type": "reasoning", "content": "Done."}]},
            ],
        ),
    ],
    ids=["string", "openai-chat", "openai-responses", "reasoning-items-and-blocks"],
)
def test_provider_message_shapes_map_onto_the_schema(messages, expected):
    assert input_messages(messages) == expected


def test_system_instructions_from_blocks_and_scrub():
    assert system_instructions([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == [
        {"type": "text", "content": "a"},
        {"type": "text", "content": "b"},
    ]
    assert scrub({"Authorization": "x", "nested": [{"OPENAI_API_KEY": "y", "ok": 1}], "my_token": "z"}) == {
        "Authorization": "[redacted]",
        "nested": [{"OPENAI_API_KEY": "[redacted]", "ok": 1}],
        "my_token": "[redacted]",
    }


def test_a_raising_redaction_hook_costs_attributes_never_the_span(monkeypatch):
    monkeypatch.delenv(CAPTURE_ENV, raising=False)

    def broken(key: str, value: Any) -> Any:
        raise RuntimeError("hook bug")

    spans = run_call({"capture_content": True, "redact": broken})
    names = sorted(s.name for s in spans)
    assert names == ["chat claude-test", "execute_tool get_weather"]
    assert all(s.end_time is not None for s in spans)
    attempt = _attrs(spans, "chat claude-test")
    assert "gen_ai.input.messages" not in attempt and "gen_ai.output.messages" not in attempt
    assert attempt["gen_ai.request.model"] == "claude-test"  # the rest of the span is intact
    assert attempt["gen_ai.usage.output_tokens"] == 4
