"""The value scrub: a client's key, whole or as any run of 8+ of its characters (a provider's masked echo),
never reaches events, spans, journal rows, library log lines or recorded exception messages."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from journal_support import run_turn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import Recorder, Relay, adapters, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.events import FIELDS, SCOPE_END
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.secret_runs import SecretRuns

KEY = "sk-live-abcdefghijklmnop0123456789"
MASKED = f"{KEY[:16]}****{KEY[-4:]}"  # what providers echo of a wrong key


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


def _runs_of(secret: str) -> list[str]:
    return [secret[i : i + 8] for i in range(len(secret) - 7)]


def _assert_clean(text: str) -> None:
    for run in _runs_of(KEY):
        assert run not in text, run


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        (f"bad key {KEY}.", "bad key [redacted]."),
        (f"bad key {MASKED}.", f"bad key [redacted]****{KEY[-4:]}."),  # four shown characters are no run
        (f"mid {KEY[5:14]} end", "mid [redacted] end"),
        (f"short {KEY[:7]} kept", f"short {KEY[:7]} kept"),
        ("nothing here", "nothing here"),
        (f"{KEY}{KEY}", "[redacted][redacted]"),
    ],
)
def test_whole_keys_and_runs_of_8_are_blanked(text: str, scrubbed: str) -> None:
    redaction.remember_secret(KEY)
    assert redaction.scrub_text(text) == scrubbed


def test_bytes_are_scrubbed_in_utf8_and_utf16_in_their_own_encoding() -> None:
    runs = SecretRuns([KEY], "[redacted]")
    for encoding in ("utf-8", "utf-16-le", "utf-16-be", "latin-1"):
        data = f"x {MASKED} y".encode(encoding)
        clean = runs.bytes(data)
        assert clean.decode(encoding) == f"x [redacted]****{KEY[-4:]} y", encoding
    assert runs.bytes(b"\xff\xfe no key \x80") == b"\xff\xfe no key \x80"


def _masked_401(request: httpx2.Request) -> httpx2.Response:
    body = {"error": {"message": f"Incorrect API key provided: {MASKED}.", "type": "invalid_request_error"}}
    return httpx2.Response(401, json=body)


def _client() -> openai.OpenAI:
    http = httpx2.Client(transport=httpx2.MockTransport(_masked_401))
    return openai.OpenAI(api_key=KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)


class Echoes:
    """A subscriber that fails with the provider's error: the relay logs what it swallowed."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def __call__(self, event: Any) -> None:
        attempt_end = event.kind == SCOPE_END and (event.metadata or {}).get("relay.kind") == cv.ATTEMPT
        if attempt_end and self.errors:
            raise self.errors[-1]


def test_a_masked_echo_of_the_key_reaches_no_sink(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    recorder = Recorder()
    echoes = Echoes()
    client = _client()
    caught: list[openai.AuthenticationError] = []

    def body() -> None:
        host = session.active_turn().host
        exporter = OTelExporter(provider, capture_content=True).attach(host)
        host.relay.subscribers.register(recorder, name="recorder")
        host.relay.subscribers.register(echoes, name="echoes")
        try:
            for _ in range(2):  # the second attempt's end makes the subscriber fail with the first error
                with pytest.raises(openai.AuthenticationError) as failure:
                    adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                caught.append(failure.value)
                echoes.errors.append(failure.value)
        finally:
            host.relay.subscribers.deregister("recorder")
            host.relay.subscribers.deregister("echoes")
            exporter.detach()

    with caplog.at_level(logging.WARNING, logger="relay_runtime"):
        result = run_turn(tmp_path, body, outcome="failed")

    assert MASKED in str(caught[0])  # the caller's own exception is the provider's, untouched
    ends = recorder.ends(relay_kind=cv.ATTEMPT)
    assert ends and ends[0].error_message is not None and "Incorrect API key provided: [redacted]" in (
        ends[0].error_message
    )
    _assert_clean(" ".join(repr(getattr(e, name)) for e in recorder for name in FIELDS))  # events, their errors
    spans = exported.get_finished_spans()
    assert any(s.status.description and "[redacted]" in s.status.description for s in spans)
    dumped = [(s.name, dict(s.attributes or {}), s.status.description, [dict(e.attributes or {}) for e in s.events])
              for s in spans]  # fmt: skip
    _assert_clean(repr(dumped))
    journal = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "AuthenticationError" in journal and result.rows
    _assert_clean(journal)
    logged = [r for r in caplog.records if r.name.startswith("relay_runtime")]
    assert any("AuthenticationError" in r.getMessage() for r in logged)  # the swallowed failure was logged
    _assert_clean("\n".join(r.getMessage() + (r.exc_text or "") for r in logged))
    _assert_clean(caplog.text)


def test_library_log_lines_and_their_tracebacks_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    redaction.remember_secret(KEY)
    logger = logging.getLogger("relay_runtime.integrations.some_module")
    with caplog.at_level(logging.WARNING):
        try:
            raise RuntimeError(f"upstream said {MASKED}")
        except RuntimeError:
            logger.exception("call failed with %s", KEY)
        logging.getLogger("someone_else").warning("their %s", KEY)  # not the library's: untouched
    library = [r for r in caplog.records if r.name.startswith("relay_runtime")]
    assert library[0].getMessage() == "call failed with [redacted]"
    assert "upstream said [redacted]****" in (library[0].exc_text or "")
    assert f"their {KEY}" in caplog.text


def test_a_key_in_a_tools_arguments_and_result_never_reaches_captured_content() -> None:
    """Content capture on: a remembered client key in a tool's arguments or result (an MCP tool call
    carries both) is cut out of the exported span, whole and as any run of 8 of its characters."""
    redaction.remember_secret(KEY)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    relay = Relay()
    exporter = OTelExporter(provider, capture_content=True).attach(relay)
    args = {"query": f"use {KEY}", KEY: "as a key", "nested": [{"masked": MASKED}]}
    result = relay.tools.execute("lookup", args, lambda a: {"echo": f"got {KEY[3:20]}"})
    exporter.shutdown()
    assert result == {"echo": f"got {KEY[3:20]}"}  # the caller's own values are untouched
    (span,) = spans.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert "gen_ai.tool.call.arguments" in attributes and "gen_ai.tool.call.result" in attributes
    for value in attributes.values():
        _assert_clean(str(value))
