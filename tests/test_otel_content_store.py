"""Message content by reference: written to a store once per call; spans and the details event carry references."""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import span_path  # noqa: F401  (every test here runs on both span paths)

import relay_runtime.integrations.otel.exporter as exporter_module
from relay_runtime import adapters
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import DETAILS_EVENT, OTelExporter
from relay_runtime.integrations.otel.content_store import UPLOAD_ENV, ContentStore
from relay_runtime.redaction import RedactionPolicy, Rule

pytestmark = pytest.mark.usefixtures("span_path")

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
LONG = "Tell me about this ticket, jane@example.com. " + "The export fails every night. " * 200


def _call(relay: Any, scripted: Any, exporter: OTelExporter, text: str = LONG) -> None:
    scripted.add(testing.json_reply(testing.chat_completion_body("It times out.")))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages, "tools": TOOLS})


def _exporter(relay: Any, **options: Any) -> tuple[OTelExporter, InMemorySpanExporter, InMemoryLogRecordExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    loggers = LoggerProvider()
    loggers.add_log_record_processor(SimpleLogRecordProcessor(logs))
    exporter = OTelExporter(provider, logger_provider=loggers, **options).attach(relay)
    return exporter, spans, logs


def _read(url: str) -> Any:
    with fsspec.open(url, "r") as file:
        return json.loads(file.read())


def test_spans_carry_references_and_the_store_holds_the_redacted_content(
    relay_turn, scripted_openai, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    store = tmp_path / "genai"
    exporter, spans, logs = _exporter(relay, capture_content="SPAN_AND_EVENT", content_store=f"file://{store}")
    _call(relay, scripted_openai, exporter)
    _call(relay, scripted_openai, exporter, "A second question.")
    exporter.shutdown()
    attempts = [s for s in spans.get_finished_spans() if s.name == "chat gpt-x"]
    assert len(attempts) == 2
    first = dict(attempts[0].attributes)
    for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"):
        assert key not in first  # the text does not ride in telemetry
    inputs = _read(first["gen_ai.input.messages_ref"])
    assert first["gen_ai.input.messages_ref"].endswith("_inputs.json")
    assert inputs[1]["parts"][0]["content"].startswith("Tell me about this ticket, [REDACTED:email].")
    assert _read(first["gen_ai.output.messages_ref"])[0]["parts"] == [{"type": "text", "content": "It times out."}]
    assert _read(first["gen_ai.system_instructions_ref"]) == [{"type": "text", "content": "Be brief."}]
    assert _read(first["gen_ai.tool.definitions_ref"])[0]["name"] == "lookup"
    second = dict(attempts[1].attributes)
    # Instructions and tools are named by their content: written once, shared by both calls.
    assert second["gen_ai.system_instructions_ref"] == first["gen_ai.system_instructions_ref"]
    assert second["gen_ai.input.messages_ref"] != first["gen_ai.input.messages_ref"]
    written = sorted(p.name for p in store.iterdir())
    assert len(written) == 6  # two inputs, two outputs, one system instruction, one tool definition
    assert "jane@example.com" not in "".join(p.read_text() for p in store.iterdir())
    (record, _) = [r.log_record for r in logs.get_finished_logs() if r.log_record.event_name == DETAILS_EVENT]
    assert record.attributes["gen_ai.input.messages_ref"] == first["gen_ai.input.messages_ref"]
    assert "gen_ai.input.messages" not in record.attributes


def test_any_fsspec_url_and_the_util_genai_environment_variable(relay_turn, scripted_openai, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    monkeypatch.setenv(UPLOAD_ENV, "memory://relay-genai/calls")
    exporter, spans, _ = _exporter(relay, capture_content=True)
    _call(relay, scripted_openai, exporter, "hello")
    exporter.shutdown()
    (attempt,) = [s for s in spans.get_finished_spans() if s.name == "chat gpt-x"]
    ref = attempt.attributes["gen_ai.input.messages_ref"]
    assert ref.startswith("memory://") and "/relay-genai/calls/" in ref
    assert _read(ref)[1] == {"role": "user", "parts": [{"type": "text", "content": "hello"}]}


def test_no_content_mode_writes_nothing(relay_turn, scripted_openai, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    exporter, spans, _ = _exporter(relay, capture_content=False, content_store=f"file://{tmp_path / 'none'}")
    _call(relay, scripted_openai, exporter, "hello")
    exporter.shutdown()
    assert not (tmp_path / "none").exists()
    assert not any(k.endswith("_ref") for s in spans.get_finished_spans() for k in s.attributes)


def test_a_bad_store_is_a_clear_error(relay_turn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="content_store 'nosuchproto://x' is not a URL fsspec can open"):
        OTelExporter(TracerProvider(), capture_content=True, content_store="nosuchproto://x")


class GatedFileSystem(MemoryFileSystem):
    """An in-memory store whose writes wait for ``gate``: a slow bucket."""

    protocol = "gated"
    gate = threading.Event()
    writing = threading.Event()

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            self.writing.set()
            self.gate.wait(10)
        return super()._open(path, mode, *args, **kwargs)


def test_content_the_queue_drops_gets_no_reference(relay_turn, scripted_openai, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    fsspec.register_implementation("gated", GatedFileSystem, clobber=True)
    GatedFileSystem.gate.clear()
    GatedFileSystem.writing.clear()
    monkeypatch.setattr(exporter_module, "ContentStore", functools.partial(ContentStore, queue_size=2))
    exporter, spans, _ = _exporter(relay, capture_content=True, content_store="gated://slow/calls")

    def ask(text: str) -> None:
        scripted_openai.add(testing.json_reply(testing.chat_completion_body("ok")))
        adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": [{"role": "user", "content": text}]})

    ask("first")  # its inputs are being written (and wait), its outputs queued
    assert GatedFileSystem.writing.wait(10)
    ask("second")  # inputs fill the queue, outputs are dropped
    ask("third")  # both dropped
    GatedFileSystem.gate.set()
    exporter.shutdown()
    assert exporter.diagnostics()["otel.content_store.dropped"] == 3
    refs = [
        v
        for s in spans.get_finished_spans()
        if s.name == "chat gpt-x"
        for k, v in s.attributes.items()
        if k.endswith("_ref")
    ]
    assert len(refs) == 3
    for ref in refs:  # every reference on a span leads to content
        assert _read(ref)


def test_force_flush_waits_for_the_content_its_spans_point_at(relay_turn, scripted_openai) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    fsspec.register_implementation("gated", GatedFileSystem, clobber=True)
    GatedFileSystem.gate.clear()
    exporter, spans, _ = _exporter(relay, capture_content=True, content_store="gated://slow/flush")
    _call(relay, scripted_openai, exporter, "hello")
    assert exporter.force_flush(timeout_millis=200) is False  # the store has not written it yet: not flushed
    GatedFileSystem.gate.set()
    assert exporter.force_flush(timeout_millis=10_000) is True
    (attempt,) = [s for s in spans.get_finished_spans() if s.name == "chat gpt-x"]
    assert _read(attempt.attributes["gen_ai.input.messages_ref"])[1]["parts"][0]["content"] == "hello"
    exporter.shutdown()
