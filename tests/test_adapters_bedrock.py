"""Amazon Bedrock through a real boto3 ``bedrock-runtime`` client, against a loopback server speaking
Bedrock's JSON and its binary event stream: converse and converse_stream as managed attempts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import botocore.eventstream
import botocore.exceptions
import pytest
from bedrock_support import (
    ACCESS_KEY,
    MODEL,
    REGION,
    SECRET_KEY,
    SESSION_TOKEN,
    USAGE,
    BedrockServer,
    anthropic_stream_events,
    chunks,
    converse_body,
    error_reply,
    event,
    json_reply,
    stream_exception,
    stream_reply,
    text_events,
    tool_events,
)
from otel_support import Pipeline

from relay_runtime import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome, Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import bedrock
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.neutral import UnsupportedParamError

MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]


@pytest.fixture()
def bedrock_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[BedrockServer]:
    import botocore.retries.standard as standard

    # botocore waits up to seconds between retries: no waiting here, the count is what is tested.
    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)
    server = BedrockServer()
    yield server
    server.close()


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def only(events: Recorder) -> Any:
    found = attempts(events)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture()
def client(bedrock_server: BedrockServer) -> Iterator[Any]:
    made = adapters.instrument(bedrock_server.client())
    yield made
    adapters.uninstrument(made)


def test_converse_is_one_attempt_with_usage_stop_reason_address_and_region(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    response = client.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"maxTokens": 50})
    assert response["output"]["message"]["content"] == [{"text": "hello"}]
    end = only(relay_events)
    assert end.outcome == "success"
    assert end.provider == "aws.bedrock" and end.model_name == MODEL
    annotated = end.annotated_response
    assert annotated.finish_reasons == ["end_turn"] and annotated.output_text == "hello"
    usage = annotated.usage
    # Bedrock counts inputTokens apart from the cache: the annotation's input is the whole prompt.
    assert (usage.input_tokens, usage.output_tokens) == (1600, 20)
    assert (usage.cache_read_tokens, usage.cache_creation_tokens) == (1000, 500)
    assert end.annotated_request.params == {"max_tokens": 50}
    port = bedrock_server.httpd.server_address[1]
    assert end.metadata[cv.SERVER_ADDRESS] == f"127.0.0.1:{port}"
    assert end.metadata[cv.CLOUD_REGION] == REGION
    assert end.metadata[cv.SDK_RETRIES] == 0
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_converse_stream_yields_botocores_events_and_records_the_whole_message(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    bedrock_server.replies.append(stream_reply(text_events(["Hel", "lo", "!"])))
    response = client.converse_stream(modelId=MODEL, messages=MESSAGES)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert isinstance(response["stream"], botocore.eventstream.EventStream)  # the managed stream stands for it
    events = list(response["stream"])
    assert [next(iter(e)) for e in events] == [
        "messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockDelta", "contentBlockStop",
        "messageStop", "metadata",
    ]  # fmt: skip
    end = only(relay_events)
    assert end.outcome == "success", (end.error_type, end.error_message)
    assert end.annotated_request.stream is True
    assert end.annotated_response.output_text == "Hello!"
    assert end.annotated_response.finish_reasons == ["end_turn"]
    assert end.annotated_response.usage.cache_read_tokens == 1000
    assert end.output["output"]["message"]["content"] == [{"text": "Hello!"}]


def test_a_stream_without_message_stop_is_an_incomplete_stream(relay_turn, relay_events, client, bedrock_server):
    bedrock_server.replies.append(stream_reply(text_events(["cut ", "sho"], stop=False)))
    response = client.converse_stream(modelId=MODEL, messages=MESSAGES)
    texts = [e["contentBlockDelta"]["delta"]["text"] for e in response["stream"] if "contentBlockDelta" in e]
    assert texts == ["cut ", "sho"]  # the caller's iteration ends as the provider's stream did
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "IncompleteStream"
    assert end.annotated_response.output_text == "cut sho"


def test_an_exception_event_mid_stream_fails_the_attempt_with_its_code(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    body = event("messageStart", {"role": "assistant"}) + stream_exception("throttlingException", "slow down")
    bedrock_server.replies.append(stream_reply(body))
    response = client.converse_stream(modelId=MODEL, messages=MESSAGES)
    with pytest.raises(botocore.exceptions.EventStreamError):
        list(response["stream"])
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "throttlingException"


def test_closing_a_stream_early_cancels_the_attempt(relay_turn, relay_events, client, bedrock_server) -> None:
    bedrock_server.replies.append(stream_reply(text_events(["a", "b", "c"])))
    stream = client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    next(iter(stream))
    stream.close()
    assert only(relay_events).outcome == "cancelled"


def test_a_provider_error_is_raised_and_recorded_with_its_type(relay_turn, relay_events, client, bedrock_server):
    bedrock_server.replies.append(error_reply(400, "ValidationException", "messages: bad"))
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.converse(modelId=MODEL, messages=MESSAGES)
    assert type(caught.value).__name__ == "ValidationException"
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "ValidationException"
    assert end.metadata[cv.SDK_RETRIES] == 0


def test_botocores_retries_on_throttling_are_counted_on_the_attempt(relay_turn, relay_events, bedrock_server) -> None:
    client = adapters.instrument(bedrock_server.client(retries=3))
    throttled = error_reply(429, "ThrottlingException", "Too many requests")
    bedrock_server.replies += [throttled, throttled, json_reply(converse_body("at last"))]
    assert client.converse(modelId=MODEL, messages=MESSAGES)["output"]["message"]["content"][0]["text"] == "at last"
    end = only(relay_events)
    assert end.outcome == "success" and end.metadata[cv.SDK_RETRIES] == 2
    assert len(bedrock_server.seen) == 3


def test_throttling_past_the_retries_fails_as_throttling(relay_turn, relay_events, bedrock_server) -> None:
    client = adapters.instrument(bedrock_server.client(retries=2))
    bedrock_server.replies += [error_reply(429, "ThrottlingException", "Too many requests")] * 3
    with pytest.raises(botocore.exceptions.ClientError):
        client.converse(modelId=MODEL, messages=MESSAGES)
    end = only(relay_events)
    assert end.error_type == "ThrottlingException" and end.metadata[cv.SDK_RETRIES] == 2


def test_a_call_botocore_refuses_before_sending_is_marked_unsent(relay_turn, relay_events, client, bedrock_server):
    with pytest.raises(botocore.exceptions.ParamValidationError):
        client.converse(modelId=MODEL, messages="not a list")
    end = only(relay_events)
    assert end.outcome == "failed" and end.metadata[cv.SENT] is False
    assert bedrock_server.seen == []


def test_a_call_whose_credentials_cannot_be_refreshed_is_recorded_failed_and_unsent(
    relay_turn, relay_events, client, bedrock_server
):
    # An SSO session that expired: botocore raises while signing. The relay read the credentials first, outside
    # the attempt, so the call failed with no record of it.
    import datetime

    import botocore.credentials

    def refresh() -> dict[str, str]:
        raise botocore.exceptions.TokenRetrievalError(provider="sso", error_msg="the session has expired")

    expired = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)).isoformat()
    metadata = {"access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "token": SESSION_TOKEN, "expiry_time": expired}
    client._request_signer._credentials = botocore.credentials.RefreshableCredentials.create_from_metadata(
        metadata, refresh, "sso"
    )
    with pytest.raises(botocore.exceptions.TokenRetrievalError):
        client.converse(modelId=MODEL, messages=MESSAGES)
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "TokenRetrievalError" and end.metadata[cv.SENT] is False
    assert bedrock_server.seen == []


def test_tool_use_is_annotated_as_tool_calls_in_both_calls(relay_turn, relay_events, client, bedrock_server) -> None:
    tool = {"toolUseId": "tu-0", "name": "weather", "input": {"city": "Lyon"}}
    bedrock_server.replies += [json_reply(converse_body("Looking.", stop="tool_use", tool=tool)),
                               stream_reply(tool_events())]  # fmt: skip
    tools = {"tools": [{"toolSpec": {"name": "weather", "inputSchema": {"json": {"type": "object"}}}}]}
    client.converse(modelId=MODEL, messages=MESSAGES, toolConfig=tools)
    list(client.converse_stream(modelId=MODEL, messages=MESSAGES, toolConfig=tools)["stream"])
    whole, streamed = attempts(relay_events)
    assert whole.annotated_request.tools == tools["tools"]
    assert whole.annotated_response.tool_calls == [{"id": "tu-0", "name": "weather", "arguments": {"city": "Lyon"}}]
    assert whole.annotated_response.finish_reasons == ["tool_use"]
    assert streamed.annotated_response.tool_calls == [{"id": "tu-1", "name": "weather", "arguments": {"city": "Paris"}}]
    assert streamed.annotated_response.finish_reasons == ["tool_use"]
    assert streamed.output["output"]["message"]["content"][1]["toolUse"]["input"] == {"city": "Paris"}


def test_cost_prices_every_token_category_from_genai_prices(relay_host, relay_turn, relay_events, client) -> None:
    cost.attach(relay_host, PriceCatalog.default())
    client.converse(modelId=MODEL, messages=MESSAGES)
    end = only(relay_events)
    # genai-prices (provider aws): $3 input, $0.30 cache read, $3.75 cache write, $15 output per million.
    expected = (100 * 3 + 1000 * 0.3 + 500 * 3.75 + 20 * 15) / 1e6
    assert end.cost.amount == pytest.approx(expected)


def test_cache_writes_kept_an_hour_are_counted_and_priced_at_their_own_rate(
    relay_host, relay_turn, relay_events, client, bedrock_server
) -> None:
    cost.attach(relay_host, PriceCatalog.default())
    model = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    usage = {**USAGE, "cacheDetails": [{"ttl": "1h", "inputTokens": 300}, {"ttl": "5m", "inputTokens": 200}]}
    bedrock_server.replies += [json_reply(converse_body(usage=usage)), stream_reply(text_events(["hi"], usage=usage))]
    client.converse(modelId=model, messages=MESSAGES)
    list(client.converse_stream(modelId=model, messages=MESSAGES)["stream"])
    # genai-prices (aws): $3.30 input, $0.33 cache read, $4.125 5-minute and $6.60 1-hour cache write, $16.50 output.
    expected = (100 * 3.3 + 1000 * 0.33 + 200 * 4.125 + 300 * 6.6 + 20 * 16.5) / 1e6
    whole, streamed = attempts(relay_events)
    for end in (whole, streamed):
        assert end.annotated_response.usage.cache_creation_tokens == 500
        assert end.annotated_response.usage.cache_creation_1h_tokens == 300
        assert end.cost.amount == pytest.approx(expected)


def _intercept(relay: Any, edit: Any) -> None:
    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        return LLMRequestInterceptOutcome(edit(request, annotated), annotated)

    relay.intercepts.register_llm_request("bedrock-edit", 1, False, intercept)


def test_intercepts_rewrite_the_request_through_the_neutral_view(relay_turn, relay_events, client, bedrock_server):
    relay, _turn = relay_turn

    def edit(request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequest:
        annotated.params["max_tokens"] = 7
        annotated.params["stop"] = "END"
        annotated.system = "Be brief."
        annotated.model = "amazon.nova-lite-v1:0"
        annotated.tool_choice = None
        return request.replace(headers={"x-relay-tag": "edited"})

    _intercept(relay, edit)
    try:
        client.converse(modelId=MODEL, messages=MESSAGES, inferenceConfig={"temperature": 0.5})
    finally:
        relay.intercepts.deregister_llm_request("bedrock-edit")
    seen = bedrock_server.seen[0]
    assert seen.path.startswith("/model/amazon.nova-lite-v1%3A0/converse") or "amazon.nova-lite-v1" in seen.path
    assert seen.body["inferenceConfig"] == {"temperature": 0.5, "maxTokens": 7, "stopSequences": ["END"]}
    assert seen.body["system"] == [{"text": "Be brief."}]
    assert seen.headers["x-relay-tag"] == "edited"
    assert "x-relay-tag" in seen.headers["Authorization"]  # signed with the rest
    assert only(relay_events).outcome == "success"


def test_a_stream_an_execution_intercept_serves_without_calling_bedrock_reaches_the_caller(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    """A stream execution intercept may answer from elsewhere (a cache) and never open the provider's stream:
    the caller gets its events in the response's stream, and the attempt records them, not an IndexError."""
    relay, _turn = relay_turn
    served = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "cached"}, "contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
    ]
    relay.intercepts.register_llm_stream_execution("cache", 0, lambda name, request, next_call: iter(served))
    try:
        response = client.converse_stream(modelId=MODEL, messages=MESSAGES)
        assert list(response["stream"]) == served
    finally:
        relay.intercepts.deregister_llm_stream_execution("cache")
    assert bedrock_server.seen == []
    end = only(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "cached"


def test_a_param_converse_cannot_take_is_refused_before_sending(relay_turn, relay_events, client, bedrock_server):
    relay, _turn = relay_turn

    def edit(request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequest:
        annotated.params["seed"] = 3
        return request

    _intercept(relay, edit)
    try:
        with pytest.raises(UnsupportedParamError, match="seed"):
            client.converse(modelId=MODEL, messages=MESSAGES)
    finally:
        relay.intercepts.deregister_llm_request("bedrock-edit")
    assert bedrock_server.seen == []


def test_no_credential_reaches_events_or_spans(relay_home, bedrock_server) -> None:
    pipeline = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    recorder = Recorder()
    name = host.relay.subscribers.register(recorder, name="bedrock-secrets", chunks=True)
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    client = adapters.instrument(bedrock_server.client())
    # A provider that echoes the caller's secret in its error, and a stream.
    bedrock_server.replies += [error_reply(403, "AccessDeniedException", f"bad signature for {SECRET_KEY}"),
                               stream_reply(text_events(["ok"]))]  # fmt: skip
    try:
        with pytest.raises(botocore.exceptions.ClientError):
            client.converse(modelId=MODEL, messages=MESSAGES)
        list(client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"])
        client.converse(modelId=MODEL, messages=MESSAGES)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
        host.relay.subscribers.deregister(name)
    assert "Authorization" in bedrock_server.seen[0].headers  # the requests were signed with them
    records = [repr(vars(e)) if hasattr(e, "__dict__") else repr([getattr(e, s, None) for s in e.__slots__])
               for e in recorder.events]  # fmt: skip
    records += [repr(dict(s.attributes or {})) + repr([ev.attributes for ev in s.events]) for s in pipeline.finished()]
    assert len(attempts(recorder)) == 3 and pipeline.finished()
    for record in records:
        for secret in (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, "X-Amz-Security-Token", "AWS4-HMAC-SHA256"):
            assert secret not in record
    spans = [s for s in pipeline.finished() if s.attributes.get("gen_ai.provider.name") == "aws.bedrock"]
    assert len(spans) == 3
    assert all(s.attributes["cloud.region"] == REGION and s.attributes["server.address"] == "127.0.0.1"
               for s in spans)  # fmt: skip


def test_instrument_without_a_client_traces_clients_made_after(relay_turn, relay_events, bedrock_server) -> None:
    done = adapters.instrument()
    try:
        assert any("botocore" in name for name in done)
        made_after = bedrock_server.client()
        made_after.converse(modelId=MODEL, messages=MESSAGES)
        adapters.instrument(made_after)  # both on: still one attempt per call
        made_after.converse(modelId=MODEL, messages=MESSAGES)
    finally:
        adapters.uninstrument()
    assert len(attempts(relay_events)) == 2
    bedrock_server.client().converse(modelId=MODEL, messages=MESSAGES)
    assert len(attempts(relay_events)) == 2  # undone
    assert not bedrock.classes_instrumented()


def test_uninstrument_client_restores_it_and_other_clients_are_untouched(
    relay_turn, relay_events, bedrock_server
) -> None:
    mine, other = bedrock_server.client(), bedrock_server.client()
    adapters.instrument(mine)
    assert adapters.instrument(mine) is mine
    other.converse(modelId=MODEL, messages=MESSAGES)
    assert attempts(relay_events) == []
    mine.converse(modelId=MODEL, messages=MESSAGES)
    adapters.uninstrument(mine)
    assert "_make_api_call" not in vars(mine)
    mine.converse(modelId=MODEL, messages=MESSAGES)
    assert len(attempts(relay_events)) == 1


def test_without_a_turn_the_call_goes_straight_through(relay_events, client) -> None:
    response = client.converse(modelId=MODEL, messages=MESSAGES)
    assert response["stopReason"] == "end_turn"
    assert attempts(relay_events) == []


def test_threads_sharing_one_client_each_get_their_own_attempt_and_retry_count(
    relay_turn, relay_events, bedrock_server
) -> None:
    from relay_runtime.threads import ContextExecutor

    client = adapters.instrument(bedrock_server.client(retries=8))
    throttled = error_reply(429, "ThrottlingException", "Too many requests")
    # Eight throttles shared among the calls in arrival order (whichever call gets them): with eight
    # retries each, every call succeeds in the end.
    bedrock_server.replies += [throttled] * 8
    with ContextExecutor(max_workers=8) as pool:
        replies = list(pool.map(lambda i: client.converse(modelId=MODEL, messages=MESSAGES), range(8)))
    assert all(r["stopReason"] == "end_turn" for r in replies)
    ends = attempts(relay_events)
    assert len(ends) == 8 and all(e.outcome == "success" for e in ends)
    # 16 HTTP tries in all, 8 of them retries, each counted on the attempt that made it.
    assert len(bedrock_server.seen) == 16
    assert sum(e.metadata[cv.SDK_RETRIES] for e in ends) == 8
    assert len({e.metadata[cv.API_REQUEST_ID] for e in ends}) == 8


def _session(client: Any) -> list[Any]:
    """One converse after a throttled try, a converse_stream, and a provider error: what the caller saw."""
    seen: list[Any] = [client.converse(modelId=MODEL, messages=MESSAGES)["output"]]
    seen.append(list(client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]))
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "bad"}]}])
    seen.append((type(caught.value).__name__, caught.value.response["Error"]["Message"]))
    return seen


def test_a_cassette_records_and_replays_offline_without_credentials(relay_turn, relay_events, bedrock_server, tmp_path):
    from relay_runtime import cassettes

    path = tmp_path / "bedrock.json"
    bedrock_server.replies += [
        error_reply(429, "ThrottlingException", "Too many requests"),
        json_reply(converse_body("recorded")),
        stream_reply(text_events(["re", "corded"])),
        error_reply(400, "ValidationException", f"no such thing (key {SECRET_KEY})"),
    ]
    with cassettes.use(path, mode="record"):
        live = _session(adapters.instrument(bedrock_server.client(retries=2)))
    text = path.read_text()
    for secret in (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, "AWS4-HMAC-SHA256", "X-Amz-Security-Token"):
        assert secret not in text
    bedrock_server.close()  # nothing answers now: the replay is offline
    offline = adapters.instrument(BedrockServer.client(bedrock_server, retries=2))
    with cassettes.use(path, mode="replay"):
        replayed = _session(offline)
    assert replayed[0] == live[0] and replayed[1] == live[1]
    assert replayed[2][0] == "ValidationException" and SECRET_KEY not in replayed[2][1]
    ends = attempts(relay_events)
    assert [e.outcome for e in ends] == ["success", "success", "failed"] * 2
    assert [e.metadata[cv.SDK_RETRIES] for e in ends] == [1, 0, 0] * 2  # botocore retried the replayed 429 too
    assert ends[4].annotated_response.output_text == "recorded"


# Every place botocore looks for credentials: with all of these gone, a live call is NoCredentialsError.
_AWS_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)  # fmt: skip


def test_a_cassette_replays_where_there_are_no_aws_credentials(relay_turn, bedrock_server, tmp_path, monkeypatch):
    import boto3

    from relay_runtime import cassettes

    path = tmp_path / "bedrock.json"
    bedrock_server.replies.append(json_reply(converse_body("recorded")))
    with cassettes.use(path, mode="record"):
        live = adapters.instrument(bedrock_server.client()).converse(modelId=MODEL, messages=MESSAGES)["output"]
    assert bedrock_server.seen[0].headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")  # recording signs
    text = path.read_text()
    for secret in (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, "AWS4-HMAC-SHA256", "Signature="):
        assert secret not in text
    bedrock_server.close()
    # A CI machine: no credential in the environment, no ~/.aws files, no instance metadata to ask.
    for name in _AWS_CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-such-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-such-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = adapters.instrument(
        boto3.Session().client("bedrock-runtime", region_name=REGION, endpoint_url=bedrock_server.url)
    )
    assert client._request_signer._credentials is None
    with cassettes.use(path, mode="replay"):
        assert client.converse(modelId=MODEL, messages=MESSAGES)["output"] == live
    # Signing is left out only while a tape replays: live, and recording, the same client still signs (and fails).
    with pytest.raises(botocore.exceptions.NoCredentialsError):
        client.converse(modelId=MODEL, messages=MESSAGES)
    with pytest.raises(botocore.exceptions.NoCredentialsError), cassettes.use(tmp_path / "new.json", mode="record"):
        client.converse(modelId=MODEL, messages=MESSAGES)


def test_a_streamed_answer_is_stored_as_events_the_redaction_policy_reads(
    relay_turn, relay_events, bedrock_server, tmp_path
):
    # Stored as the event stream's base64, the answer held what the model streamed, an e-mail
    # split across three events included, whole in the cassette.
    import base64
    import json

    from relay_runtime import cassettes
    from relay_runtime.redaction import RedactionPolicy, Rule

    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    email = "jane.doe@example.com"
    pieces = ["mail ", email[:6], email[6:13], email[13:], " now"]
    bedrock_server.replies += [
        stream_reply(text_events(pieces)),
        stream_reply(chunks(*anthropic_stream_events(pieces))),
    ]
    invoke_body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": MESSAGES})

    def session_(client: Any) -> list[str]:
        said = client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
        texts = ["".join(e["contentBlockDelta"]["delta"]["text"] for e in said if "contentBlockDelta" in e)]
        body = client.invoke_model_with_response_stream(modelId=MODEL, body=invoke_body)["body"]
        events = [json.loads(e["chunk"]["bytes"]) for e in body]
        texts.append("".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta"))
        return texts

    path = tmp_path / "bedrock.json"
    with cassettes.use(path, mode="record"):
        live = session_(adapters.instrument(bedrock_server.client()))
    assert live == ["mail " + email + " now"] * 2  # the caller hears the real answer
    stored = path.read_text()
    assert "[REDACTED:email]" in stored
    for piece in pieces[1:4]:
        assert piece not in stored
    for blob in [stored.encode()] + [base64.b64decode(b) for b in re.findall(r'"base64": "([^"]*)"', stored)]:
        assert email.encode() not in blob and b"jane.do" not in blob
    bedrock_server.close()
    with cassettes.use(path, mode="replay"):
        replayed = session_(adapters.instrument(BedrockServer.client(bedrock_server)))
    assert [text.replace(" ", "") for text in replayed] == ["mail[REDACTED:email]now"] * 2
    assert [e.outcome for e in attempts(relay_events)] == ["success"] * 4


def test_a_text_document_sent_as_bytes_is_stored_redacted_and_still_replays(
    relay_turn, relay_events, bedrock_server, tmp_path
):
    # Converse takes a document's text as bytes; the cassette stores bytes as base64, which no rule read.
    import base64

    from relay_runtime import cassettes
    from relay_runtime.redaction import RedactionPolicy, Rule

    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    email = "jane.doe@example.com"
    document = {"format": "txt", "name": "notes", "source": {"bytes": f"Write to {email} today".encode()}}
    image = {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n\x00\xff"}}  # binary: stored as it is
    messages = [{"role": "user", "content": [{"text": "Summarize"}, {"document": document}, {"image": image}]}]
    bedrock_server.replies.append(json_reply(converse_body("summarized")))
    path = tmp_path / "bedrock.json"
    with cassettes.use(path, mode="record"):
        adapters.instrument(bedrock_server.client()).converse(modelId=MODEL, messages=messages)
    assert bedrock_server.seen[0].body["messages"][0]["content"][1]["document"]["source"]["bytes"] == (
        base64.b64encode(document["source"]["bytes"]).decode()
    )  # sent as given
    stored = path.read_text()
    blobs = [base64.b64decode(b) for b in re.findall(r'"base64": "([^"]*)"', stored)]
    assert b"[REDACTED:email]" in b"".join(blobs) and image["source"]["bytes"] in blobs
    assert email not in stored and not [b for b in blobs if email.encode() in b]
    bedrock_server.close()
    with cassettes.use(path, mode="replay"):
        replayed = adapters.instrument(bedrock_server.client()).converse(modelId=MODEL, messages=messages)
    assert replayed["output"]["message"]["content"][0]["text"] == "summarized"
    assert [e.outcome for e in attempts(relay_events)] == ["success"] * 2
