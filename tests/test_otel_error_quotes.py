"""With content capture off, a provider's error quoting the prompt does not carry it into the span.

The span's status and its ``exception`` event carried the error's text whole: a 400 quoting the request
it refused (``Invalid prompt: '...' is too long``) exported the prompt the capture mode keeps out of every
other attribute. Real SDK clients over scripted transports, a real OTel SDK pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import CAPTURE_ENV, OTelExporter

pytestmark = pytest.mark.usefixtures("span_path")

PROMPT = "Please summarise the quarterly ledger of Jane Doe, account 88-1204, before Friday."
SYSTEM = "You are the private assistant of the treasury desk; never reveal the ledger."


@contextmanager
def _exported_turn(monkeypatch: pytest.MonkeyPatch, **exporter: Any) -> Iterator[tuple[Pipeline, Any]]:
    """A turn of the process's host, exported through a real OTel SDK pipeline (``OTelExporter(**exporter)``), the
    capture mode left to the exporter's arguments: the pipeline, and the turn's host, once the turn has ended."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    out = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    attached = OTelExporter(out.tracer_provider, out.meter_provider, **exporter).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    try:
        yield out, lease.host
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        attached.detach()


def _run(monkeypatch: pytest.MonkeyPatch, capture: bool, *replies: t.Reply, anthropic: bool = False) -> Pipeline:
    with _exported_turn(monkeypatch, capture_content=capture) as (out, _host):
        if anthropic:
            s = t.scripted_anthropic(*replies, max_retries=0)
            request: dict[str, Any] = {"model": "c", "max_tokens": 5, "system": SYSTEM,
                                       "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
        else:
            s = t.scripted_openai(*replies, max_retries=0)
            request = {"model": "m", "messages": [{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": PROMPT}]}  # fmt: skip
        with pytest.raises(Exception):  # noqa: B017 - the provider's error, whichever SDK raised it
            adapters.complete(s.client, request)
    return out


def _errors(out: Pipeline) -> list[str]:
    texts = []
    for span in out.finished():
        texts.append(span.status.description or "")
        texts.extend(str(e.attributes.get("exception.message")) for e in span.events if e.attributes)
    return [text for text in texts if text]


@pytest.mark.parametrize("anthropic", [False, True], ids=["openai", "anthropic"])
@pytest.mark.parametrize(
    "quote",
    [
        f"Invalid prompt: '{PROMPT}' was flagged",
        f"content too long: '{PROMPT[:40]}...'",  # a quote the provider cut after its head
        f"rejected content: '{PROMPT[:30]}...{PROMPT[-30:]}'",  # cut in its middle
        f"system prompt rejected: {SYSTEM}",
    ],
    ids=["whole", "head", "head-and-tail", "system"],
)
def test_an_error_quoting_the_prompt_does_not_export_it_without_capture(
    relay_home: Any, monkeypatch: pytest.MonkeyPatch, quote: str, anthropic: bool
) -> None:
    out = _run(monkeypatch, False, t.error(400, quote), anthropic=anthropic)
    errors = _errors(out)
    assert any("BadRequestError" in text for text in errors)
    for text in errors:
        for words in ("quarterly ledger", "Jane Doe", "88-1204", "before Friday", "treasury desk"):
            assert words not in text, text
    # What the message is for stays: what was wrong.
    assert any(quote.split(":")[0] in text and "[redacted]" in text for text in errors), errors


def test_an_error_quoting_nothing_of_the_prompt_is_kept_whole(relay_home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _run(monkeypatch, False, t.error(400, "max_tokens must be at most 4096 for this model"))
    assert any(text.endswith("max_tokens must be at most 4096 for this model") for text in _errors(out))


def test_with_capture_on_the_quote_is_kept(relay_home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _run(monkeypatch, True, t.error(400, f"Invalid prompt: '{PROMPT}' was flagged"))
    assert any(PROMPT in text for text in _errors(out))


def test_a_tools_error_quoting_its_arguments_does_not_export_them_without_capture(
    relay_home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lookup(args: Any) -> Any:
        raise LookupError(f"no ledger row for {args['customer']!r} in {args['book']}")

    with _exported_turn(monkeypatch) as (out, host), pytest.raises(LookupError):
        host.relay.tools.execute(
            "lookup", {"customer": "Jane Doe, account 88-1204", "book": "treasury"}, lookup, tool_call_id="c1"
        )
    errors = _errors(out)
    assert any(text.startswith("LookupError: no ledger row for '[redacted]'") for text in errors), errors
    assert not any("88-1204" in text for text in errors)


def test_an_answer_echoing_the_clients_key_in_its_model_and_id_exports_no_run_of_it(
    relay_home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The response's model and id were exported as the provider gave them (span attributes, OpenInference's
    # llm.model_name, the logical call's relay.model, the metrics' gen_ai.response.model label).
    key = t.TEST_KEY
    body = t.chat_completion_body("ok", model=f"gpt-x-{key}", id=f"chatcmpl-{key}")
    with _exported_turn(monkeypatch, conventions=("gen_ai", "openinference")) as (out, _host):
        adapters.complete(
            t.scripted_openai(t.json_reply(body)).client,
            {"model": "gpt-x", "messages": [{"role": "user", "content": "q"}]},
        )
    spans = repr(
        [(s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in out.finished()]
    )
    metrics = out.reader.get_metrics_data()
    exported = spans + (metrics.to_json() if metrics is not None else "")
    assert "gen_ai.response.model" in spans and "gpt-x-[redacted]" in spans
    for start in range(len(key) - 7):
        assert key[start : start + 8] not in exported, key[start : start + 8]
