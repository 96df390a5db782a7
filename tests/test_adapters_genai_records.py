"""What ``google-genai`` calls leave on record: cassettes recorded and replayed offline with no credential in
them, spans through a real OTel pipeline named by the GenAI conventions, cost, and trajectories."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from genai_support import (
    BASE,
    GEMINI_KEY,
    MODEL,
    VERTEX_TOKEN,
    api_error,
    embed_body,
    gemini_client,
    response_body,
    stream_frames,
    usage,
    vertex_client,
)
from otel_support import Pipeline

from relay_runtime import Recorder, cassettes, cost, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import google_genai
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.jsonl import JsonlWriter

genai_errors = pytest.importorskip("google.genai.errors")


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


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


def _session(client: Any) -> list[Any]:
    """A retried call, a stream, an automatic function call, embeddings and an error echoing the key."""
    seen: list[Any] = [client.models.generate_content(model=MODEL, contents="first").text]
    seen.append([c.text for c in client.models.generate_content_stream(model=MODEL, contents="second")])
    seen.append(client.models.generate_content(model=MODEL, contents="weather?", config={"tools": [get_weather]}).text)
    seen.append(len(client.models.embed_content(model="gemini-embedding-001", contents=["a"]).embeddings[0].values))
    with pytest.raises(genai_errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="bad")
    seen.append((caught.value.code, caught.value.message))
    return seen


def _live_replies(script: t.Script, key: str) -> None:
    call = {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}}
    script.add(
        api_error(503, "UNAVAILABLE"), t.json_reply(response_body("recorded", usage_metadata=usage())),
        t.sse_reply(stream_frames(["re", "corded"])),
        t.json_reply(response_body(None, calls=[call])), t.json_reply(response_body("It is sunny.")),
        t.json_reply(embed_body(dims=8)),
        api_error(400, "INVALID_ARGUMENT", f"API key not valid: {key}"),
    )  # fmt: skip


def test_a_cassette_records_and_replays_offline_without_the_key(relay_turn, relay_events, tmp_path: Path) -> None:
    path = tmp_path / "genai.json"
    script = t.Script()
    _live_replies(script, GEMINI_KEY)
    with cassettes.use(path, mode="record"):
        live = _session(google_genai.instrument_client(gemini_client(script, retries=2)))
    text = path.read_text()
    for run in range(len(GEMINI_KEY) - 7):  # neither the key nor any run of 8 of its characters
        assert GEMINI_KEY[run : run + 8] not in text
    offline_script = t.Script()  # answers nothing: a request reaching it fails the test
    offline = google_genai.instrument_client(gemini_client(offline_script, retries=2, key="AIza-another-key-000000"))
    with cassettes.use(path, mode="replay"):
        replayed = _session(offline)
    assert offline_script.requests == []
    assert replayed[:4] == live[:4] == ["recorded", ["re", "corded"], "It is sunny.", 8]
    assert replayed[4][0] == live[4][0] == 400 and GEMINI_KEY not in replayed[4][1]
    ends = attempts(relay_events)
    assert [e.outcome for e in ends] == ["success"] * 5 + ["failed"] + ["success"] * 5 + ["failed"]
    assert [e.metadata[cv.SDK_RETRIES] for e in ends][:6] == [1, 0, 0, 0, 0, 0]  # the SDK retried the 503
    assert [e.metadata[cv.SDK_RETRIES] for e in ends][6:] == [1, 0, 0, 0, 0, 0]  # and its replay
    assert ends[7].annotated_response.output_text == "recorded"


def test_an_async_replay_needs_no_transport_whatever_http_client_the_sdk_picks(
    relay_turn, relay_events, tmp_path: Path
) -> None:
    from google import genai

    path = tmp_path / "genai-async.json"
    script = t.Script([t.json_reply(response_body("async")), t.sse_reply(stream_frames(["a", "b"]))])

    async def run(client: Any) -> list[Any]:
        first = await client.aio.models.generate_content(model=MODEL, contents="hi")
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="more")
        return [first.text, [c.text async for c in stream]]

    with cassettes.use(path, mode="record"):
        live = asyncio.run(run(google_genai.instrument_client(gemini_client(script))))
    # No transport given: the SDK would use aiohttp against an unreachable host.
    bare = google_genai.instrument_client(genai.Client(api_key="AIza-offline-000000", http_options={"base_url": BASE}))
    with cassettes.use(path, mode="replay"):
        assert asyncio.run(run(bare)) == live == ["async", ["a", "b"]]
    assert [e.outcome for e in attempts(relay_events)] == ["success"] * 4


def test_a_stream_broken_off_while_recording_replays_broken_off(relay_turn, relay_events, tmp_path: Path) -> None:
    import httpx2

    path = tmp_path / "cut.json"
    script = t.Script([t.sse_reply(stream_frames(["par", "tial"]), fail_with=httpx2.ReadError("reset"))])

    def read(client: Any) -> list[str]:
        seen: list[str] = []
        with pytest.raises(httpx2.ReadError):
            for chunk in client.models.generate_content_stream(model=MODEL, contents="hi"):
                seen.append(chunk.text)
        return seen

    with cassettes.use(path, mode="record"):
        assert read(google_genai.instrument_client(gemini_client(script))) == ["par", "tial"]
    with cassettes.use(path, mode="replay"):
        assert read(google_genai.instrument_client(gemini_client(t.Script()))) == ["par", "tial"]
    assert [(e.outcome, e.error_type) for e in attempts(relay_events)] == [("failed", "ReadError")] * 2


def test_an_error_the_api_writes_mid_stream_as_bare_json_replays_as_that_error(
    relay_turn, relay_events, tmp_path: Path
) -> None:
    # Past the 200, the API writes an error as JSON lines without SSE's "data:"; the SDK reads it and raises.
    path = tmp_path / "error-mid-stream.json"
    error = {"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}
    frames = [stream_frames(["par"], finish=None)[0], json.dumps(error, indent=2).encode() + b"\n"]
    script = t.Script([t.sse_reply(frames)])

    def read(client: Any) -> list[str]:
        seen: list[str] = []
        with pytest.raises(genai_errors.ServerError, match="Internal error encountered"):
            for chunk in client.models.generate_content_stream(model=MODEL, contents="hi"):
                seen.append(chunk.text)
        return seen

    with cassettes.use(path, mode="record"):
        assert read(google_genai.instrument_client(gemini_client(script))) == ["par"]
    with cassettes.use(path, mode="replay"):
        assert read(google_genai.instrument_client(gemini_client(t.Script()))) == ["par"]
    assert [(e.outcome, e.error_type) for e in attempts(relay_events)] == [("failed", "INTERNAL")] * 2


def test_vertex_bearer_tokens_reach_no_cassette_event_or_span(traced: Pipeline, relay_events, tmp_path) -> None:
    path = tmp_path / "vertex.json"
    script = t.Script([api_error(403, "PERMISSION_DENIED", f"token {VERTEX_TOKEN} lacks a role"),
                       t.json_reply(response_body("ok"))])  # fmt: skip
    client = google_genai.instrument_client(vertex_client(script))
    with cassettes.use(path, mode="record"):
        with pytest.raises(genai_errors.ClientError):
            client.models.generate_content(model=MODEL, contents="hi")
        client.models.generate_content(model=MODEL, contents="hi")
    assert script.requests[0].headers["authorization"] == f"Bearer {VERTEX_TOKEN}"  # sent with it
    records = [path.read_text()]
    records += [repr([getattr(e, s, None) for s in e.__slots__]) for e in relay_events.events]
    records += [repr(dict(s.attributes or {})) + repr([ev.attributes for ev in s.events]) for s in traced.finished()]
    for record in records:
        assert VERTEX_TOKEN[6:20] not in record


def test_a_key_in_a_requests_http_options_reaches_the_provider_and_no_event_line(
    relay_host: session.Host, relay_turn: Any, tmp_path: Path
) -> None:
    from google.genai import types

    key = "AIzaSyPerRequest-Qx2Lm9Zr4Tn6Ws1Kd8Hy3"
    script = t.Script([t.json_reply(response_body("ok")), t.sse_reply(stream_frames(["o", "k"])),
                       t.json_reply(embed_body(dims=3))])  # fmt: skip
    client = google_genai.instrument_client(gemini_client(script))
    options = types.HttpOptions(headers={"x-goog-api-key": key})
    lines = tmp_path / "events.jsonl"
    writer = JsonlWriter(lines)
    name = relay_host.relay.subscribers.register(writer, name="jsonl")
    try:
        client.models.generate_content(
            model=MODEL, contents="hi", config=types.GenerateContentConfig(http_options=options, temperature=0.2)
        )
        list(client.models.generate_content_stream(model=MODEL, contents="hi", config={"http_options": options}))
        client.models.embed_content(
            model="gemini-embedding-001", contents="hi", config=types.EmbedContentConfig(http_options=options)
        )
    finally:
        relay_host.relay.subscribers.deregister(name)
        writer.close()
    assert [r.headers["x-goog-api-key"] for r in script.requests] == [key] * 3  # sent with it, every time
    written = lines.read_text()
    assert written.count('"temperature":0.2') >= 1  # the rest of the config is on record
    assert key not in written


def test_a_body_extra_in_http_options_is_on_the_record_and_a_cassette_tells_one_extra_from_another(
    relay_turn, relay_events, tmp_path: Path
) -> None:
    # The SDK merges ``http_options.extra_body`` into the JSON it sends: it changes the answer as a param does.
    path = tmp_path / "extra.json"

    def ask(client: Any, budget: int) -> str:
        extra = {"generationConfig": {"thinkingConfig": {"thinkingBudget": budget}}}
        config = {"http_options": {"extra_body": extra}}
        return client.models.generate_content(model=MODEL, contents="hi", config=config).text

    script = t.Script([t.json_reply(response_body("thought a little"))])
    with cassettes.use(path, mode="record"):
        assert ask(google_genai.instrument_client(gemini_client(script)), 16) == "thought a little"
    assert json.loads(script.requests[0].content)["generationConfig"] == {"thinkingConfig": {"thinkingBudget": 16}}
    (start,) = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert start.input["content"]["extra_body"] == {"generationConfig": {"thinkingConfig": {"thinkingBudget": 16}}}
    offline = google_genai.instrument_client(gemini_client(t.Script()))
    with cassettes.use(path, mode="replay"):
        assert ask(offline, 16) == "thought a little"
    with pytest.raises(cassettes.CassetteMiss), cassettes.use(path, mode="replay"):
        ask(offline, 4096)  # another request: not given the answer to the one recorded


def test_spans_carry_the_conventions_provider_and_operation_names(traced: Pipeline, relay_events) -> None:
    script = t.Script([t.json_reply(response_body("g", usage_metadata=usage())),
                       t.json_reply(response_body("v")), t.json_reply(embed_body(dims=3))])  # fmt: skip
    gemini = google_genai.instrument_client(gemini_client(script))
    vertex = google_genai.instrument_client(vertex_client(script))
    gemini.models.generate_content(model=MODEL, contents="hi")
    vertex.models.generate_content(model=MODEL, contents="hi")
    gemini.models.embed_content(model="gemini-embedding-001", contents="hi")
    spans = [(s.name, dict(s.attributes or {})) for s in traced.finished()
             if "gen_ai.operation.name" in (s.attributes or {})]  # fmt: skip
    names = sorted((a["gen_ai.provider.name"], a["gen_ai.operation.name"]) for _n, a in spans)
    assert names == [("gcp.gemini", "embeddings"), ("gcp.gemini", "generate_content"),
                     ("gcp.vertex_ai", "generate_content")]  # fmt: skip
    gemini_span = next(a for _n, a in spans if a["gen_ai.provider.name"] == "gcp.gemini"
                       and a["gen_ai.operation.name"] == "generate_content")  # fmt: skip
    assert gemini_span["gen_ai.usage.input_tokens"] == 12 and gemini_span["gen_ai.response.finish_reasons"] == ("stop",)
    embedding = next(a for _n, a in spans if a["gen_ai.operation.name"] == "embeddings")
    assert embedding["gen_ai.embeddings.dimension.count"] == 3
    assert sorted(n for n, _a in spans)[1:] == [f"generate_content {MODEL}"] * 2


def test_cost_prices_every_token_category_under_google(relay_host, relay_turn, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.default())
    full = usage(prompt=100, candidates=20, cachedContentTokenCount=60, thoughtsTokenCount=30)
    script = t.Script([t.json_reply(response_body("x", usage_metadata=full)),
                       t.json_reply({**embed_body(), "usageMetadata": {"promptTokenCount": 40}})])  # fmt: skip
    client = google_genai.instrument_client(gemini_client(script))
    client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    client.models.embed_content(model="gemini-embedding-001", contents="hi")
    generated, embedded = attempts(relay_events)
    # genai-prices (provider google): $0.30 input, $0.03 cache read, $2.50 output (thoughts included) per million.
    assert generated.cost.amount == pytest.approx((40 * 0.3 + 60 * 0.03 + 50 * 2.5) / 1e6)
    assert embedded.cost.amount == pytest.approx(40 * 0.15 / 1e6)  # input only


def test_images_read_from_the_cache_are_priced_once_as_a_cache_read(relay_host, relay_turn, relay_events) -> None:
    # A catalog with a rate for images: counted among the images and the cache reads, they priced the prompt's
    # parts at more than the prompt, and the call went unpriced.
    prices = {"input": 0.3, "output": 2.5, "cache_read": 0.03, "input_image": 0.5}
    cost.attach(relay_host, PriceCatalog.from_mapping({"google": {"gemini-2.5-flash": prices}}))
    # A repeated image prompt: 800 of its 1000 image tokens came from Gemini's (implicit) cache.
    cached = usage(prompt=1200, candidates=20, cachedContentTokenCount=800,
                   promptTokensDetails=[{"modality": "IMAGE", "tokenCount": 1000},
                                        {"modality": "TEXT", "tokenCount": 200}],
                   cacheTokensDetails=[{"modality": "IMAGE", "tokenCount": 800}])  # fmt: skip
    script = t.Script([t.json_reply(response_body("x", usage_metadata=cached))])
    client = google_genai.instrument_client(gemini_client(script))
    client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    (end,) = attempts(relay_events)
    read = end.annotated_response.usage
    assert (read.input_tokens, read.cache_read_tokens, read.input_image_tokens) == (1200, 800, 200)
    assert end.cost.amount == pytest.approx((200 * 0.3 + 200 * 0.5 + 800 * 0.03 + 20 * 2.5) / 1e6)


def test_cached_audio_is_priced_once_at_its_cache_rate_as_genai_prices_prices_it(
    relay_host, relay_turn, relay_events
) -> None:
    genai_prices = pytest.importorskip("genai_prices")
    cost.attach(relay_host, PriceCatalog.default())
    # 1000 prompt tokens, 800 of them audio, 600 of those read from the cache: Gemini counts the cached
    # audio among the prompt's audio and among the cached tokens (cacheTokensDetails says which they are).
    details = [{"modality": "AUDIO", "tokenCount": 800}, {"modality": "TEXT", "tokenCount": 200}]
    metadata = usage(prompt=1000, candidates=50, cachedContentTokenCount=600, promptTokensDetails=details,
                     cacheTokensDetails=[{"modality": "AUDIO", "tokenCount": 600}])  # fmt: skip
    body = response_body("x", usage_metadata=metadata, model="gemini-2.5-flash")
    client = google_genai.instrument_client(gemini_client(t.Script([t.json_reply(body)])))
    client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    (generated,) = attempts(relay_events)
    expected = float(genai_prices.extract_usage(body, provider_id="google").calc_price().total_price)
    assert generated.cost.amount == pytest.approx(expected, rel=1e-9)
    assert generated.cost.breakdown["cache_read_audio"] == pytest.approx(600 * 0.1 / 1e6)


def test_a_trajectory_makes_no_step_of_an_embed_content_call(relay_host: session.Host) -> None:
    from relay_runtime.integrations.trajectory import AtifExporter

    exporter = AtifExporter().attach(session.SESSION_COORDINATOR)
    script = t.Script([t.json_reply(embed_body()), t.json_reply(response_body("the answer"))])
    client = google_genai.instrument_client(gemini_client(script))
    coordinator = session.SESSION_COORDINATOR
    relay_host.retain_managed_execution("test")
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="traj", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="t")
    try:
        client.models.embed_content(model="gemini-embedding-001", contents="what the retriever looks up")
        question = [{"role": "user", "parts": [{"text": "the question"}]}]
        client.models.generate_content(model=MODEL, contents=question)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        relay_host.release_managed_execution("test")
        exporter.detach()
    steps = exporter.export()["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", "the question"), ("agent", "the answer")]


def test_a_response_the_codec_cannot_read_is_recorded_and_counted_never_raised(
    relay_host, relay_turn, relay_events, monkeypatch
) -> None:
    from relay_runtime.adapters.google_genai import codec

    script = t.Script([t.json_reply(response_body("fine"))])
    client = google_genai.instrument_client(gemini_client(script))

    def unreadable(self: Any, response: Any) -> Any:
        raise ValueError("a shape this codec does not know")

    monkeypatch.setattr(codec.GenerateContentCodec, "annotate_response", unreadable)
    assert client.models.generate_content(model=MODEL, contents="hi").text == "fine"
    (end,) = attempts(relay_events)
    assert end.outcome == "success" and end.output is not None
    assert end.annotated_response is None  # read when an observer asks: the failure is counted then
    assert relay_host.relay.diagnostics()["decode_errors"] == 1


def test_the_codec_reads_odd_shapes_without_raising() -> None:
    from relay_runtime.adapters.google_genai.codec import GenerateContentCodec

    codec = GenerateContentCodec("gcp.gemini", True)
    for odd in (None, {}, {"candidates": "no"}, {"candidates": [None, {"content": 3}]}, {"usage_metadata": [1]}):
        assert codec.annotate_response(odd).output_text is None
        accumulator = codec.accumulator()
        accumulator.add(odd)
        assert accumulator.finish()[1].output_text is None and accumulator.terminated is False


def test_a_turn_ended_while_its_call_is_in_flight_closes_that_logical_call_once(
    relay_host: session.Host, relay_events: Recorder
) -> None:
    """The end of the turn closes the public call's logical call; the call's own close, when the SDK returns,
    finds it closed and records nothing more."""
    coordinator = session.SESSION_COORDINATOR
    relay_host.retain_managed_execution("test")
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="late", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="t")

    class EndsTheTurn:
        def response(self) -> Any:
            coordinator.end_turn(turn, outcome="cancelled")  # while the provider answers
            return t.json_reply(response_body("late")).response()

    client = google_genai.instrument_client(gemini_client(t.Script([EndsTheTurn()])))
    try:
        assert client.models.generate_content(model=MODEL, contents="hi").text == "late"
    finally:
        coordinator.release_conversation(lease)
        relay_host.release_managed_execution("test")
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert call.outcome == "cancelled" and attempt.outcome == "cancelled"
    assert turn.logical_llm_calls == {}
