"""OpenAI embeddings as attempts: real openai clients over the mock transport, spans through a real
OTel pipeline, prices and budgets, intercepts on the inputs, cassettes recorded and replayed offline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from otel_support import Pipeline

from relay_runtime import (
    AnnotatedLLMRequest,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Recorder,
    adapters,
    cassettes,
    cost,
    session,
)
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from tests.cassette_support import Offline

MODEL = "text-embedding-test"


@pytest.fixture
def traced(relay_host: session.Host, relay_turn: Any) -> Iterator[Pipeline]:
    out = Pipeline()
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(relay_host)
    try:
        yield out
    finally:
        exporter.detach()


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def embed(client: Any, text: Any = "hello world", **kwargs: Any) -> Any:
    return client.embeddings.create(model=MODEL, input=text, **kwargs)


def test_an_instrumented_embeddings_call_is_an_embeddings_attempt_on_its_span(
    traced: Pipeline, relay_events: Recorder
) -> None:
    script = t.Script([t.json_reply(t.embeddings_body(base64_encoded=True))])  # as the SDK asks by default
    client = adapters.instrument(t.openai_client(script))
    answer = embed(client)
    assert answer.data[0].embedding == pytest.approx([0.1, -0.2, 0.3, 0.4])  # the SDK decoded it, as bare
    assert script.bodies()[0]["input"] == "hello world"
    (span,) = [s for s in traced.finished() if s.name == f"embeddings {MODEL}"]
    attrs = span.attributes or {}
    assert attrs["gen_ai.operation.name"] == "embeddings"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == MODEL
    assert attrs["gen_ai.usage.input_tokens"] == 8
    assert "gen_ai.usage.output_tokens" not in attrs
    assert attrs["gen_ai.embeddings.dimension.count"] == 4
    (start,) = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert start.annotated_request.operation == "embeddings"
    assert start.annotated_request.messages == ["hello world"]
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    assert end.annotated_response.usage.input_tokens == 8 and end.annotated_response.embedding_dimensions == 4


def test_async_a_batch_base64_asked_by_the_caller_and_a_named_endpoint(relay_turn: Any, relay_events: Recorder):
    vectors = [[0.5] * 6, [0.25] * 6]
    script = t.Script([t.json_reply(t.embeddings_body(vectors, base64_encoded=True, prompt_tokens=3))])
    aclient = adapters.instrument(t.async_openai_client(script, base_url="https://api.mistral.ai/v1"))
    answer = asyncio.run(aclient.embeddings.create(model=MODEL, input=["a", "b"], encoding_format="base64"))
    assert isinstance(answer.data[0].embedding, str)  # the caller asked for base64 and keeps it
    (end,) = attempts(relay_events)
    assert end.annotated_response.embedding_dimensions == 6  # read from the float32s the base64 holds
    assert end.annotated_response.usage.input_tokens == 3
    assert end.provider == "mistral_ai" and end.annotated_request.messages == ["a", "b"]


def test_instrument_of_the_sdk_classes_traces_embeddings_and_uninstrument_puts_them_back(
    relay_turn: Any, relay_events: Recorder
) -> None:
    script = t.Script([t.json_reply(t.embeddings_body())] * 2)
    client = t.openai_client(script)
    wrapped = adapters.instrument()
    try:
        assert "openai.resources.embeddings.Embeddings.create" in wrapped
        assert "openai.resources.embeddings.AsyncEmbeddings.create" in wrapped
        embed(client)
    finally:
        adapters.uninstrument()
    embed(client)  # after uninstrument: straight to the SDK
    assert len(script.requests) == 2 and len(attempts(relay_events)) == 1


def test_sdk_retries_and_a_provider_error_are_recorded_on_the_attempt(relay_turn: Any, relay_events: Recorder):
    script = t.Script([t.error(500), t.json_reply(t.embeddings_body()), t.error(400, "bad input")])
    client = adapters.instrument(t.openai_client(script))
    embed(client)
    with pytest.raises(openai.BadRequestError):
        embed(client)
    ok, failed = attempts(relay_events)
    assert ok.outcome == "success" and ok.metadata[cv.SDK_RETRIES] == 1
    assert failed.outcome == "failed" and failed.error_type == "BadRequestError"


def test_intercepts_edit_the_inputs_and_are_told_embeddings_take_no_sampling_params(relay_turn: Any) -> None:
    relay, _turn = relay_turn
    seen: list[tuple[bool, bool]] = []

    def redact(_name: str, request: LLMRequest, req: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        seen.append((req.accepts("temperature"), req.accepts("max_tokens")))
        req.messages = [m.replace("secret-42", "[redacted]") for m in req.messages]
        return LLMRequestInterceptOutcome(request, req)

    relay.intercepts.register_llm_request("redact", 1, False, redact)
    script = t.Script([t.json_reply(t.embeddings_body())] * 2)
    client = adapters.instrument(t.openai_client(script))
    embed(client, "my code is secret-42")
    embed(client, ["one secret-42", "two"])
    assert [b["input"] for b in script.bodies()] == ["my code is [redacted]", ["one [redacted]", "two"]]
    assert seen == [(False, False)] * 2


PRICES = {"openai": {MODEL: {"input": 0.5, "output": 1000.0}}}  # an output rate no embedding is billed at


def test_cost_is_input_only_and_a_budget_estimates_no_output(relay_host: session.Host, relay_events: Recorder):
    # 11 characters of input at most ~11 tokens: 5.5e-6 at worst; assumed output tokens at 1000.0
    # per million would be far over the limit, so the call goes only if none are assumed.
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(2e-5, per="turn", name="tight"))
    script = t.Script([t.json_reply(t.embeddings_body(prompt_tokens=3))])
    client = adapters.instrument(t.openai_client(script))
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="s", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="t")
    try:
        embed(client)
        with pytest.raises(BudgetExceeded):
            embed(client, "x" * 400)  # its input alone is over the limit: refused before sending
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    ok, refused = attempts(relay_events)
    assert ok.cost.amount == pytest.approx(3 * 0.5e-6)
    assert refused.error_type == "BudgetExceeded" and len(script.requests) == 1
    assert "cost.assumed_output_tokens" not in relay_host.relay.diagnostics()


@pytest.mark.parametrize("style", ["sync", "async"])
def test_a_cassette_records_and_replays_embeddings_offline(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, style: str
) -> None:
    path = tmp_path / "embeddings.json"
    live = t.scripted_openai(t.error(500), t.json_reply(t.embeddings_body(base64_encoded=True)))

    def run(client: Any, aclient: Any) -> Any:
        kwargs = {"model": MODEL, "input": "hello"}
        if style == "sync":
            return adapters.complete(client, kwargs, api_mode="embeddings")
        return asyncio.run(adapters.acomplete(aclient, kwargs, api_mode="embeddings"))

    with cassettes.use(path, mode="record"):
        recorded = run(live.client, live.aclient)
    assert t.TEST_KEY not in path.read_text()
    offline = Offline()
    with cassettes.use(path):
        replayed = run(*offline.clients("openai"))
    assert offline.requests == []
    assert replayed.model_dump() == recorded.model_dump()
    assert replayed.data[0].embedding == pytest.approx([0.1, -0.2, 0.3, 0.4])
    first, second = attempts(relay_events)
    assert first.metadata[cv.SDK_RETRIES] == second.metadata[cv.SDK_RETRIES] == 1  # the 500 retried on replay too
    assert second.annotated_response.embedding_dimensions == 4 and second.outcome == "success"


def test_a_trajectory_makes_no_step_of_an_embeddings_call(relay_host: session.Host) -> None:
    from relay_runtime.integrations.trajectory import AtifExporter

    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    script = t.Script([t.json_reply(t.embeddings_body()), t.json_reply(t.chat_completion_body("the answer"))])
    client = adapters.instrument(t.openai_client(script))
    coordinator = session.SESSION_COORDINATOR
    relay_host.retain_managed_execution("test")
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="traj", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="t")
    try:
        embed(client, "what the retriever looks up")
        client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "the question"}])
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        relay_host.release_managed_execution("test")
    steps = exporter.export()["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", "the question"), ("agent", "the answer")]
