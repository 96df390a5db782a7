"""Amazon Bedrock ``invoke_model`` with Anthropic's legacy Text Completions body (Claude 2, 2.1, Instant), through a
real boto3 client against the loopback server: the prompt's turns are the request's messages, the completion its
answer, and a stream ends with the chunk that carries a ``stop_reason``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from bedrock_support import BedrockServer, chunks, raw_reply, stream_reply
from otel_support import Pipeline

from relay_runtime import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome, Recorder, adapters, session
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter

CLAUDE_2 = "anthropic.claude-v2:1"
PROMPT = "\n\nHuman: Where is Lyon?\n\nAssistant:"


@pytest.fixture()
def bedrock_server() -> Iterator[BedrockServer]:
    server = BedrockServer()
    yield server
    server.close()


@pytest.fixture()
def client(bedrock_server: BedrockServer) -> Iterator[Any]:
    made = adapters.instrument(bedrock_server.client())
    yield made
    adapters.uninstrument(made)


def text_body(prompt: str = PROMPT, **extra: Any) -> str:
    return json.dumps({"prompt": prompt, "max_tokens_to_sample": 300, "anthropic_version": "bedrock-2023-05-31",
                       **extra})  # fmt: skip


def only(events: Recorder) -> Any:
    found = events.ends(relay_kind=cv.ATTEMPT)
    assert len(found) == 1, found
    return found[0]


def test_a_text_completion_body_is_a_conversation_and_its_completion_the_answer(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    answer = {"completion": " In France.", "stop_reason": "stop_sequence", "stop": "\n\nHuman:"}
    bedrock_server.replies.append(raw_reply(answer, **{"X-Amzn-Bedrock-Input-Token-Count": "14",
                                                       "X-Amzn-Bedrock-Output-Token-Count": "4"}))  # fmt: skip
    response = client.invoke_model(modelId=CLAUDE_2, body=text_body(temperature=0.5, stop_sequences=["END"]))
    assert json.loads(response["body"].read()) == answer  # the caller reads the body as ever
    end = only(relay_events)
    assert end.outcome == "success" and end.model_name == CLAUDE_2
    request = end.annotated_request
    assert request.messages == [{"role": "user", "content": "Where is Lyon?"}] and request.system is None
    assert request.params == {"max_tokens": 300, "temperature": 0.5, "stop": ["END"]}
    assert request.provider_params == {"anthropic_version": "bedrock-2023-05-31"}  # the prompt is no param
    assert end.annotated_response.output_text == " In France."
    assert end.annotated_response.finish_reasons == ["stop_sequence"]
    usage = end.annotated_response.usage
    assert (usage.input_tokens, usage.output_tokens) == (14, 4)


def test_a_prompt_s_system_text_turns_and_prefill_are_its_system_and_messages(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    bedrock_server.replies += [raw_reply({"completion": " Rhône.", "stop_reason": "max_tokens"})] * 2
    prompt = "You answer in one word.\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: Lyon's river?\n\nAssistant: The"
    client.invoke_model(modelId="anthropic.claude-instant-v1", body=text_body(prompt))
    # A prompt that is not in turns (no "\n\nHuman:") is one user message, whole.
    client.invoke_model(modelId="anthropic.claude-v2", body=text_body("Lyon's river?"))
    turns, whole = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert turns.annotated_request.system == "You answer in one word."
    assert turns.annotated_request.messages == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Lyon's river?"},
        {"role": "assistant", "content": "The"},  # the answer's start the caller wrote
    ]
    assert turns.annotated_response.finish_reasons == ["max_tokens"]
    assert whole.annotated_request.messages == [{"role": "user", "content": "Lyon's river?"}]


def test_a_messages_body_to_claude_2_is_still_read_as_messages(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    # Claude 2 and Instant on Bedrock take both APIs' bodies: the body says which.
    bedrock_server.replies.append(raw_reply({"id": "m", "type": "message", "role": "assistant",
                                             "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                                             "usage": {"input_tokens": 5, "output_tokens": 1}}))  # fmt: skip
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    client.invoke_model(modelId=CLAUDE_2, body=json.dumps(body))
    end = only(relay_events)
    assert end.annotated_request.messages == [{"role": "user", "content": "hi"}]
    assert end.annotated_request.params == {"max_tokens": 9} and end.annotated_response.output_text == "ok"


def test_the_prompt_reaches_no_span_with_content_capture_off(relay_home: Any, bedrock_server: BedrockServer) -> None:
    # OpenInference's llm.invocation_parameters shows a request's params whatever content capture says; the
    # output limit is a setting, shown as the conventions' max_tokens.
    pipeline = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(
        pipeline.tracer_provider, pipeline.meter_provider, conventions=("gen_ai", "openinference"),
        capture_content=False,
    ).attach(host)  # fmt: skip
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    client = adapters.instrument(bedrock_server.client())
    bedrock_server.replies.append(raw_reply({"completion": " private-answer", "stop_reason": "stop_sequence"}))
    try:
        client.invoke_model(modelId=CLAUDE_2, body=text_body("\n\nHuman: private-prompt\n\nAssistant:"))
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
    (span,) = [s for s in pipeline.finished() if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    shown = repr([dict(s.attributes or {}) for s in pipeline.finished()])
    assert "private" not in shown
    assert '"max_tokens": 300' in shown  # params are still shown
    assert span.attributes is not None and span.attributes["gen_ai.request.max_tokens"] == 300


def test_a_rule_on_the_request_messages_redacts_the_prompt(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/messages"])]))
    bedrock_server.replies.append(raw_reply({"completion": " Noted.", "stop_reason": "stop_sequence"}))
    prompt = "\n\nHuman: Schreib an Jürgen Weiß, Hauptstraße 5\n\nAssistant:"
    client.invoke_model(modelId=CLAUDE_2, body=text_body(prompt))
    assert bedrock_server.seen[0].body["prompt"] == prompt  # sent as given
    recorded = repr([(e.input, e.annotated_request) for e in relay_events if e.scope_type == "llm"])
    for word in ("Schreib", "Jürgen", "Hauptstraße", "J\\u00fcrgen"):
        assert word not in recorded


def test_a_stream_that_ends_with_a_stop_reason_is_a_success_with_its_usage(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    bedrock_server.replies.append(stream_reply(chunks(
        {"completion": " In", "stop_reason": None, "stop": None},
        {"completion": " France.", "stop_reason": None, "stop": None},
        {"completion": "", "stop_reason": "stop_sequence", "stop": "\n\nHuman:",
         "amazon-bedrock-invocationMetrics": {"inputTokenCount": 14, "outputTokenCount": 4,
                                              "invocationLatency": 420, "firstByteLatency": 200}},
    )))  # fmt: skip
    response = client.invoke_model_with_response_stream(modelId=CLAUDE_2, body=text_body())
    parts = [json.loads(part["chunk"]["bytes"])["completion"] for part in response["body"]]
    assert parts == [" In", " France.", ""]  # the caller's chunks as ever
    end = only(relay_events)
    assert end.outcome == "success" and end.error_type is None and end.annotated_request.stream is True
    assert end.annotated_request.messages == [{"role": "user", "content": "Where is Lyon?"}]
    assert end.annotated_response.output_text == " In France."
    assert end.annotated_response.finish_reasons == ["stop_sequence"]
    usage = end.annotated_response.usage
    assert (usage.input_tokens, usage.output_tokens) == (14, 4)


def test_a_stream_cut_before_its_stop_reason_is_incomplete(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    bedrock_server.replies.append(stream_reply(chunks(
        {"completion": " In", "stop_reason": None, "stop": None},
        {"completion": " Fra", "stop_reason": None, "stop": None},
    )))  # fmt: skip
    response = client.invoke_model_with_response_stream(modelId=CLAUDE_2, body=text_body())
    assert len(list(response["body"])) == 2
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "IncompleteStream"
    assert end.annotated_response.output_text == " In Fra" and end.annotated_response.finish_reasons == []


def test_intercepts_rewrite_the_prompt_and_its_output_limit(
    relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    relay, _turn = relay_turn

    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        annotated.params["max_tokens"] = 50
        annotated.system = "Be brief."
        annotated.messages = [{**m, "content": m["content"].replace("Lyon", "[city]")} for m in annotated.messages]
        return LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("text-edit", 1, False, intercept)
    bedrock_server.replies.append(raw_reply({"completion": " Where?", "stop_reason": "stop_sequence"}))
    try:
        client.invoke_model(modelId=CLAUDE_2, body=text_body(top_k=5))
    finally:
        relay.intercepts.deregister_llm_request("text-edit")
    sent = bedrock_server.seen[0].body
    assert sent["prompt"] == "Be brief.\n\nHuman: Where is [city]?\n\nAssistant:"
    assert sent["max_tokens_to_sample"] == 50 and "max_tokens" not in sent and sent["top_k"] == 5
