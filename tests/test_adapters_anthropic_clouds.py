"""The anthropic SDK's cloud clients, ``AnthropicBedrock`` and ``AnthropicVertex``, named for the cloud they call.

A call through them reaches AWS Bedrock or Google Vertex AI, not Anthropic: recorded as ``anthropic`` it was
exported with the wrong ``gen_ai.provider.name`` and looked up in Anthropic's price list under a Bedrock model
id, which it does not hold, so it cost nothing and no budget counted it. Real clients over the mock
transport, spans through a real OTel SDK pipeline, prices from genai-prices.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import otel_support
import pytest
from otel_support import Pipeline

from relay_runtime import Recorder, adapters, cassettes, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import endpoints
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.jsonl import event_json

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_TOKEN = "FwoGZXIvYXdzEXAMPLEsessionTOKENvalue0123456789"
VERTEX_TOKEN = "ya29.a0AfB_byEXAMPLEaccessTOKEN0123456789abcdef"
BEDROCK_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
VERTEX_MODEL = "claude-3-5-haiku@20241022"
# 100 fresh input tokens beside 400 read from the cache and 50 written to it, as Anthropic counts them.
USAGE = t.anthropic_usage(100, 20, cache_read=400, cache_creation=50)


def bedrock(script: t.Script) -> Any:
    return anthropic.AnthropicBedrock(
        aws_access_key=AWS_KEY_ID, aws_secret_key=AWS_SECRET, aws_session_token=AWS_TOKEN, aws_region="eu-west-3",
        open_telemetry=False, http_client=httpx2.Client(transport=script.transport()),
    )  # fmt: skip


def vertex(script: t.Script) -> Any:
    return anthropic.AnthropicVertex(
        region="us-east5", project_id="proj-1", access_token=VERTEX_TOKEN,
        open_telemetry=False, http_client=httpx2.Client(transport=script.transport()),
    )  # fmt: skip


# (client factory, model, gen_ai.provider.name, genai-prices id, server.address)
CLOUDS = {
    "bedrock": (bedrock, BEDROCK_MODEL, "aws.bedrock", "aws", "bedrock-runtime.eu-west-3.amazonaws.com"),
    "vertex": (vertex, VERTEX_MODEL, "gcp.vertex_ai", "google", "us-east5-aiplatform.googleapis.com"),
}


traced = otel_support.traced


def _attempt(pipeline: Pipeline, events: Recorder) -> tuple[Any, dict[str, Any]]:
    (end,) = events.ends(relay_kind=cv.ATTEMPT)
    (span,) = [s for s in pipeline.finished() if s.attributes and "gen_ai.provider.name" in s.attributes]
    return end, dict(span.attributes or {})


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_a_cloud_client_is_named_priced_and_counted_as_the_cloud_it_calls(
    relay_host: session.Host, traced: tuple[Pipeline, Recorder], cloud: str
) -> None:
    make, model, provider, price_id, address = CLOUDS[cloud]
    pipeline, events = traced
    cost.attach(relay_host, PriceCatalog.default())
    script = t.Script([t.json_reply(t.anthropic_message_body("hi", model=model, usage=USAGE))])
    client = adapters.instrument(make(script))
    answer = client.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert answer.content[0].text == "hi"
    end, attributes = _attempt(pipeline, events)
    assert end.provider == provider and end.metadata[cv.SERVER_ADDRESS] == address
    assert attributes["gen_ai.provider.name"] == provider
    # The whole prompt is the input, as the same call through boto3 (or any other provider) counts it.
    assert end.annotated_response.usage.input_tokens == 550
    assert attributes["gen_ai.usage.input_tokens"] == 550
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 400
    # Priced from the cloud's own list: 100 fresh tokens, 400 cache reads and 50 cache writes, 20 out.
    entry = PriceCatalog.default().entry(price_id, model)
    assert entry is not None and entry.cache_read is not None and entry.cache_write is not None
    expected = (100 * entry.input + 400 * entry.cache_read + 50 * entry.cache_write + 20 * entry.output) * 1e-6
    assert end.cost.provider == price_id
    assert end.cost.amount == pytest.approx(expected)
    assert expected > 0


def test_a_vertex_stream_counts_the_whole_prompt_too(
    relay_host: session.Host, traced: tuple[Pipeline, Recorder]
) -> None:
    pipeline, events = traced
    cost.attach(relay_host, PriceCatalog.default())
    frames = t.typed_sse(t.anthropic_events(["he", "llo"], model=VERTEX_MODEL, input_usage=USAGE, output_tokens=20))
    script = t.Script([t.sse_reply(frames)])
    client = adapters.instrument(vertex(script))
    stream = client.messages.create(
        model=VERTEX_MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert [e.type for e in stream][-1] == "message_stop"
    end, attributes = _attempt(pipeline, events)
    assert end.provider == "gcp.vertex_ai"
    assert end.annotated_response.usage.input_tokens == 550
    assert attributes["gen_ai.usage.input_tokens"] == 550
    assert end.cost.amount is not None and end.cost.amount > 0


def test_the_credentials_the_clients_sign_with_reach_no_record(traced: tuple[Pipeline, Recorder]) -> None:
    pipeline, events = traced
    script = t.Script(
        [
            t.json_reply(t.anthropic_message_body("a", model=BEDROCK_MODEL)),
            t.json_reply(t.anthropic_message_body("b", model=VERTEX_MODEL)),
        ]
    )
    adapters.instrument(bedrock(script)).messages.create(
        model=BEDROCK_MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    adapters.instrument(vertex(script)).messages.create(
        model=VERTEX_MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    sent = " ".join(json.dumps(dict(r.headers)) for r in script.requests)
    assert AWS_KEY_ID in sent and AWS_TOKEN in sent and VERTEX_TOKEN in sent  # what signing put on the wire
    recorded = [event_json(e) for e in events.events]
    recorded += [repr((s.name, dict(s.attributes or {}), s.events)) for s in pipeline.finished()]
    for secret in (AWS_KEY_ID, AWS_SECRET, AWS_TOKEN, VERTEX_TOKEN):
        assert not [r for r in recorded if secret in r], secret


def test_a_cassette_recorded_through_a_signed_bedrock_client_replays_the_answer_as_it_came(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    # A SigV4 Authorization is mostly public text (the signed header names, the region, the service):
    # taken whole as a secret, its runs of 8 were cut from the answer, and the replay said something else.
    answer = "Deploy to eu-west-3 and send content-type application/json to the bedrock endpoint"
    path = tmp_path / "bedrock.json"
    live_script = t.Script([t.json_reply(t.anthropic_message_body(answer, model=BEDROCK_MODEL))])

    def ask(script: t.Script) -> str:
        client = adapters.instrument(bedrock(script))
        message = client.messages.create(model=BEDROCK_MODEL, max_tokens=8, messages=[{"role": "user", "content": "?"}])
        return str(message.content[0].text)

    with cassettes.use(path, mode="record"):
        assert ask(live_script) == answer
    authorization = live_script.requests[0].headers["authorization"]
    signature = authorization.rpartition("Signature=")[2]
    stored = path.read_text()
    for secret in (AWS_KEY_ID, AWS_SECRET, AWS_TOKEN, signature):
        assert secret[:8] not in stored and secret[-8:] not in stored
    with cassettes.use(path, mode="replay"):
        assert ask(t.Script()) == answer
    assert [e.annotated_response.output_text for e in relay_events.ends(relay_kind=cv.ATTEMPT)] == [answer] * 2


def test_a_failed_signed_call_leaves_the_words_of_its_signature_in_later_records(
    relay_turn: Any, relay_events: Recorder
) -> None:
    # The credentials a failed call was sent with are remembered, and blanked in every record after it: of a
    # SigV4 Authorization only the key id and the signature, not its region and signed header names.
    said = "model not served in eu-west-3 for this content-type"
    script = t.Script([t.error(400, "bad request"), t.error(400, said)])
    client = adapters.instrument(bedrock(script).with_options(max_retries=0))
    for _ in range(2):
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(model=BEDROCK_MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    first, second = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert said in second.error_message
    signature = script.requests[0].headers["authorization"].rpartition("Signature=")[2]
    assert signature not in event_json(first) and AWS_KEY_ID not in event_json(first)


def test_a_gateway_the_caller_names_counts_the_whole_prompt_and_anthropic_keeps_its_own_count(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder
) -> None:
    cost.attach(
        relay_host,
        PriceCatalog.from_mapping(
            {
                "my-gateway": {"claude-test": {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.25}},
                "anthropic": {"claude-test": {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.25}},
            }
        ),
    )
    script = t.Script([t.json_reply(t.anthropic_message_body("x", usage=USAGE))] * 2)
    adapters.instrument(t.anthropic_client(script), provider="my-gateway").messages.create(
        model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    adapters.instrument(t.anthropic_client(script)).messages.create(
        model="claude-test", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    gateway, own = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert (gateway.provider, own.provider) == ("my-gateway", "anthropic")
    assert gateway.annotated_response.usage.input_tokens == 550  # the whole prompt under another name
    assert own.annotated_response.usage.input_tokens == 100  # Anthropic's own count, as its API gives it
    expected = (100 * 1.0 + 400 * 0.1 + 50 * 1.25 + 20 * 2.0) * 1e-6  # the same bill either way
    assert gateway.cost.amount == pytest.approx(expected)
    assert own.cost.amount == pytest.approx(expected)


@pytest.mark.parametrize(
    ("host", "provider"),
    [
        ("bedrock-runtime.us-east-1.amazonaws.com", "aws.bedrock"),
        ("bedrock-runtime-fips.us-gov-west-1.amazonaws.com", "aws.bedrock"),
        ("us-east5-aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("BEDROCK-RUNTIME.EU-WEST-3.AMAZONAWS.COM", "aws.bedrock"),
        ("bedrock-runtime.us-east-1.amazonaws.com.evil.example", None),  # a look-alike is nobody known
        ("evil-bedrock-runtime.us-east-1.amazonaws.com", None),
        ("s3.us-east-1.amazonaws.com", None),
        ("aiplatform.googleapis.com.evil.example", None),
        ("generativelanguage.googleapis.com", "gcp.gemini"),  # the Gemini API, not Vertex AI
    ],
)
def test_the_clouds_hosts_are_known_exactly(host: str, provider: str | None) -> None:
    found = endpoints.of_url(host, 443)
    assert (found.provider if found is not None else None) == provider
