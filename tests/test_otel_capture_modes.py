"""Content capture modes: span attributes and/or the ``gen_ai.client.inference.operation.details`` log record."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import adapters
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import CAPTURE_ENV, DETAILS_EVENT, OTelExporter
from relay_runtime.redaction import RedactionPolicy, Rule

pytestmark = pytest.mark.usefixtures("span_path")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture, and the weather in Paris?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "rainy"},
]


class Sinks:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))

    def attempt(self) -> Any:
        (span,) = [s for s in self.spans.get_finished_spans() if s.name.startswith("chat ")]
        return span

    def details(self) -> list[Any]:
        return [r.log_record for r in self.logs.get_finished_logs() if r.log_record.event_name == DETAILS_EVENT]


def _run(relay: Any, scripted: Any, sinks: Sinks, **options: Any) -> None:
    exporter = OTelExporter(sinks.tracer_provider, logger_provider=sinks.logger_provider, **options).attach(relay)
    scripted.add(testing.json_reply(testing.chat_completion_body("It is a cat; rainy in Paris.")))
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": MESSAGES, "tools": TOOLS})
    relay.tools.execute("get_weather", {"city": "Paris"}, lambda args: {"forecast": "rain"})
    exporter.detach()


CONTENT_KEYS = (
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.definitions",
)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "on_span", "as_event"),
    [
        (False, False, False),
        (True, True, False),
        ("NO_CONTENT", False, False),
        ("SPAN_ONLY", True, False),
        ("EVENT_ONLY", False, True),
        ("SPAN_AND_EVENT", True, True),
        ("span_and_event", True, True),
        ("true", True, False),
    ],
)
@pytest.mark.parametrize("via", ["argument", "environment"])
def test_each_mode_puts_content_where_it_says(
    relay_turn, scripted_openai, monkeypatch, value, on_span, as_event, via
) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    sinks = Sinks()
    if via == "environment":
        monkeypatch.setenv(CAPTURE_ENV, str(value).lower() if isinstance(value, bool) else value)
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)  # mode names work without it
        _run(relay, scripted_openai, sinks)
    else:
        monkeypatch.delenv(CAPTURE_ENV, raising=False)
        _run(relay, scripted_openai, sinks, capture_content=value)
    attrs = dict(sinks.attempt().attributes)
    assert all((key in attrs) == on_span for key in CONTENT_KEYS)
    tool = next(s for s in sinks.spans.get_finished_spans() if s.name == "execute_tool get_weather")
    assert ("gen_ai.tool.call.arguments" in tool.attributes) == on_span
    assert ("gen_ai.tool.call.result" in tool.attributes) == on_span
    assert len(sinks.details()) == (1 if as_event else 0)


def test_the_details_event_holds_structured_content_in_the_attempt_span(relay_turn, scripted_openai) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    sinks = Sinks()
    _run(relay, scripted_openai, sinks, capture_content="SPAN_AND_EVENT")
    (record,) = sinks.details()
    span = sinks.attempt()
    assert record.trace_id == span.context.trace_id and record.span_id == span.context.span_id
    a = record.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "gpt-x"
    assert a["gen_ai.provider.name"] == "openai" and list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    messages = _plain(a["gen_ai.input.messages"])
    assert messages == json.loads(span.attributes["gen_ai.input.messages"])  # the same content as on the span
    assert messages[1] == {
        "role": "user",
        "parts": [
            {"type": "text", "content": "What is in this picture, and the weather in Paris?"},
            {"type": "uri", "modality": "image", "uri": "https://example.com/cat.png"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0KGgo="},
        ],
    }
    assert messages[2] == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
    }
    response = {"type": "tool_call_response", "id": "call_1", "response": "rainy"}
    assert messages[3] == {"role": "tool", "parts": [response]}
    answer = {"type": "text", "content": "It is a cat; rainy in Paris."}
    assert _plain(a["gen_ai.output.messages"]) == [{"role": "assistant", "parts": [answer], "finish_reason": "stop"}]
    assert _plain(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert _plain(a["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "get_weather", "description": "The weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]  # fmt: skip


def test_the_event_carries_what_the_redaction_policy_left(relay_turn, scripted_openai) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    sinks = Sinks()
    exporter = OTelExporter(sinks.tracer_provider, logger_provider=sinks.logger_provider, capture_content="EVENT_ONLY")
    exporter.attach(relay)
    scripted_openai.add(testing.json_reply(testing.chat_completion_body("mail bob@example.com")))
    messages = [{"role": "user", "content": "I am jane@example.com"}]
    adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": messages})
    (record,) = sinks.details()
    dumped = json.dumps(_plain(dict(record.attributes)))
    assert "jane@example.com" not in dumped and "bob@example.com" not in dumped
    assert "[REDACTED:email]" in dumped


def test_a_bad_mode_is_a_clear_error_and_a_bad_environment_a_warning(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="capture_content must be true, false or one of NO_CONTENT, SPAN_ONLY"):
        OTelExporter(TracerProvider(), capture_content="SPANS")
    monkeypatch.setenv(CAPTURE_ENV, "SPANZ")
    with caplog.at_level(logging.WARNING, logger="relay_runtime"):
        exporter = OTelExporter(TracerProvider())
    assert exporter.capture_mode == "NO_CONTENT"
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT must be" in caplog.text


def _plain(value: Any) -> Any:
    """Log attributes come back as tuples and mapping proxies: plain lists and dicts to compare."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    return value
