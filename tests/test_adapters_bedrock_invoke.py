"""Amazon Bedrock ``invoke_model`` / ``invoke_model_with_response_stream`` with a real boto3 client against a
loopback server: Anthropic and Meta model bodies, Titan and Cohere embeddings."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from bedrock_support import BedrockServer, anthropic_stream_events, chunks, error_reply, raw_reply, stream_reply
from journal_support import run_turn
from otel_support import Pipeline

from relay_runtime import (
    CHUNK_MARK,
    AnnotatedLLMRequest,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Recorder,
    adapters,
    cassettes,
    session,
)
from relay_runtime import conventions as cv
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.jsonl import JsonlWriter

CLAUDE = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
LLAMA = "meta.llama3-70b-instruct-v1:0"


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


def only(events: Recorder) -> Any:
    found = events.ends(relay_kind=cv.ATTEMPT)
    assert len(found) == 1, found
    return found[0]


def anthropic_body(**extra: Any) -> str:
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "hi"}], **extra})  # fmt: skip


def test_invoke_model_with_an_anthropic_body(relay_turn, relay_events, client, bedrock_server) -> None:
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-3-5-sonnet-20241022",
              "content": [{"type": "text", "text": "Checking."},
                          {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}}],
              "stop_reason": "tool_use",
              "usage": {"input_tokens": 50, "output_tokens": 12, "cache_read_input_tokens": 300,
                        "cache_creation_input_tokens": 20}}  # fmt: skip
    bedrock_server.replies.append(raw_reply(answer))
    response = client.invoke_model(modelId=CLAUDE, body=anthropic_body(temperature=0.3))
    assert json.loads(response["body"].read()) == answer  # the caller reads the body as ever
    end = only(relay_events)
    assert end.outcome == "success" and end.provider == "aws.bedrock" and end.model_name == CLAUDE
    assert end.annotated_request.messages == [{"role": "user", "content": "hi"}]
    assert end.annotated_request.params == {"max_tokens": 64, "temperature": 0.3}
    assert end.annotated_request.provider_params["anthropic_version"] == "bedrock-2023-05-31"
    annotated = end.annotated_response
    assert annotated.tool_calls == [{"id": "tu_1", "name": "weather", "arguments": {"city": "Oslo"}}]
    assert annotated.finish_reasons == ["tool_use"] and annotated.output_text == "Checking."
    usage = annotated.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) == (
        370, 12, 300, 20)  # fmt: skip
    assert end.metadata[cv.SDK_RETRIES] == 0


def test_invoke_model_with_a_meta_body(relay_turn, relay_events, client, bedrock_server) -> None:
    bedrock_server.replies.append(raw_reply({"generation": "Bonjour", "prompt_token_count": 9,
                                             "generation_token_count": 3, "stop_reason": "stop"}))  # fmt: skip
    client.invoke_model(modelId=LLAMA, body=json.dumps({"prompt": "Say hi", "max_gen_len": 20}))
    end = only(relay_events)
    assert end.annotated_request.messages == [{"role": "user", "content": "Say hi"}]
    assert end.annotated_request.params == {"max_tokens": 20}
    assert end.annotated_response.output_text == "Bonjour"
    assert end.annotated_response.finish_reasons == ["stop"]
    assert (end.annotated_response.usage.input_tokens, end.annotated_response.usage.output_tokens) == (9, 3)


def test_a_cohere_chat_body_is_recorded_as_its_history_then_its_new_message(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    bedrock_server.replies.append(raw_reply({"text": "Lyon, then.", "finish_reason": "COMPLETE"}))
    history = [{"role": "USER", "message": "Where should we meet?"}, {"role": "CHATBOT", "message": "Paris?"}]
    body = {"message": "Not Paris.", "chat_history": history, "temperature": 0.1}
    client.invoke_model(modelId="cohere.command-r-plus-v1:0", body=json.dumps(body))
    assert only(relay_events).annotated_request.messages == [*history, "Not Paris."]  # in the order they were said


def test_a_cohere_preamble_is_the_system_prompt_a_rule_on_the_system_redacts(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/system"])]))
    bedrock_server.replies.append(raw_reply({"text": "ok", "finish_reason": "COMPLETE"}))
    preamble = "You answer for Acme's internal pricing desk"
    client.invoke_model(modelId="cohere.command-r-v1:0", body=json.dumps({"message": "hi", "preamble": preamble}))
    assert bedrock_server.seen[0].body["preamble"] == preamble  # sent as given
    (start,) = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert start.annotated_request.system == "[REDACTED]" and start.annotated_request.messages == ["hi"]
    assert "pricing desk" not in repr([(e.input, e.annotated_request) for e in relay_events if e.scope_type == "llm"])


def test_a_body_given_as_a_file_is_read_as_its_prompt_and_a_cassette_replays_each_prompts_answer(
    relay_turn, relay_events, client, bedrock_server, tmp_path
) -> None:
    def answer(text: str) -> dict[str, Any]:
        return {"id": "m", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip

    def asked(question: str) -> io.BytesIO:  # boto3 takes the body as bytes or a seekable file
        return io.BytesIO(json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9,
                                      "messages": [{"role": "user", "content": question}]}).encode())  # fmt: skip

    def text_of(response: Any) -> str:
        return str(json.loads(response["body"].read())["content"][0]["text"])

    bedrock_server.replies += [raw_reply(answer("Paris")), raw_reply(answer("Rome"))]
    path = tmp_path / "files.json"
    with cassettes.use(path, mode="record"):
        assert text_of(client.invoke_model(modelId=CLAUDE, body=asked("France?"))) == "Paris"
        assert text_of(client.invoke_model(modelId=CLAUDE, body=asked("Italy?"))) == "Rome"
    assert bedrock_server.seen[1].body["messages"][0]["content"] == "Italy?"  # sent as given
    with cassettes.use(path, mode="replay"):
        assert text_of(client.invoke_model(modelId=CLAUDE, body=asked("Italy?"))) == "Rome"
    recorded = [end.annotated_request.messages for end in relay_events.ends(relay_kind=cv.ATTEMPT)]
    assert recorded == [[{"role": "user", "content": q}] for q in ("France?", "Italy?", "Italy?")]


def test_credentials_inside_a_json_body_reach_no_event_line_or_journal_row(tmp_path) -> None:
    token, key, tool_key = "mcp-tok-Qx2Lm9Zr4Tn6Ws1Kd8Hy3", "gw-key-Vb7Zt2LwX9vRk4PsN8", "sk-tool-Hc3JdF6aEuB1gQm7"
    body = {
        "anthropic_version": "bedrock-2023-05-31", "max_tokens": 9, "gateway": {"api_key": key},
        "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "docs",
                         "authorization_token": token}],
        "messages": [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "env", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                          "content": f"api_key={tool_key}"}]},
        ],
    }  # fmt: skip
    server = BedrockServer()
    answer = {"id": "m", "type": "message", "role": "assistant", "content": [], "stop_reason": "end_turn",
              "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    server.replies.append(raw_reply(answer))
    client = adapters.instrument(server.client())
    lines = tmp_path / "events.jsonl"
    writers: list[JsonlWriter] = []

    def body_of_turn() -> None:
        writers.append(JsonlWriter(lines))
        session.active_turn().host.relay.subscribers.register(writers[0], name="jsonl")
        client.invoke_model(modelId=CLAUDE, body=json.dumps(body))

    try:
        run_turn(tmp_path, body_of_turn)
    finally:
        server.close()
    writers[0].close()
    assert server.seen[0].body == body  # sent as given
    written = lines.read_text()
    journal = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p != lines)
    assert "https://mcp.example/sse" in written  # the rest of the body is on record
    for secret in (token, key, tool_key):
        assert secret not in written and secret not in journal


def test_a_prompt_a_path_rule_redacts_leaves_no_trace_in_a_json_body_that_escapes_its_non_ascii_text(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    # json.dumps writes "Müller" as "M\u00fcller": the body's text is not the value the rule redacted in the view.
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/messages", "/request/system"])]))
    system, prompt = "Du hilfst Frau Müller", "Schreib an Jürgen Weiß, Hauptstraße 5"
    answer = {"id": "m", "type": "message", "role": "assistant", "content": [], "stop_reason": "end_turn",
              "usage": {"input_tokens": 5, "output_tokens": 1}}  # fmt: skip
    bedrock_server.replies += [raw_reply(answer), raw_reply({"generation": "ok", "stop_reason": "stop"})]
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9, "system": system,
            "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
    client.invoke_model(modelId=CLAUDE, body=json.dumps(body))
    client.invoke_model(modelId=LLAMA, body=json.dumps({"prompt": prompt, "max_gen_len": 9}).encode())
    assert [seen.body["messages"][0]["content"] if i == 0 else seen.body["prompt"]
            for i, seen in enumerate(bedrock_server.seen)] == [prompt, prompt]  # fmt: skip  # sent as given
    recorded = repr([(e.input, e.annotated_request) for e in relay_events if e.scope_type == "llm"])
    for text in (system, prompt):
        for word in text.split():
            if len(word) > 4:
                assert word not in recorded and json.dumps(word)[1:-1] not in recorded


def test_a_prompt_a_path_rule_redacts_leaves_no_trace_in_an_error_that_echoes_the_json_body(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder, client: Any, bedrock_server: BedrockServer
) -> None:
    # A gateway refusing the body quotes it as it came: the JSON text, "Weiß" written "Wei\u00df".
    from botocore.exceptions import ClientError

    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/messages"])]))
    body = json.dumps({"prompt": "Schreib an Jürgen Weiß", "max_gen_len": 9})
    bedrock_server.replies.append(error_reply(400, "ValidationException", f"Malformed input request: {body}"))
    with pytest.raises(ClientError) as caught:
        client.invoke_model(modelId=LLAMA, body=body)
    assert "J\\u00fcrgen" in str(caught.value)  # the caller's error as the gateway wrote it
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.error_message is not None and "Malformed input request" in end.error_message
    assert "rgen" not in end.error_message and "Schreib" not in end.error_message


def test_titan_and_cohere_embeddings_are_embeddings_attempts(relay_turn, relay_events, client, bedrock_server):
    bedrock_server.replies += [
        raw_reply({"embedding": [0.1, 0.2, 0.3], "inputTextTokenCount": 5}),
        # Cohere's body has no token count: Bedrock's response headers have it.
        raw_reply({"id": "e1", "embeddings": [[0.1, 0.2]], "texts": ["a b"]},
                  **{"X-Amzn-Bedrock-Input-Token-Count": "2"}),
    ]  # fmt: skip
    client.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "hello there"}))
    client.invoke_model(modelId="cohere.embed-english-v3", body=json.dumps({"texts": ["a b"], "input_type": "x"}))
    titan, cohere = relay_events.ends(relay_kind=cv.ATTEMPT)
    for end, tokens in ((titan, 5), (cohere, 2)):
        assert end.outcome == "success"
        assert end.annotated_request.operation == "embeddings"
        assert end.annotated_response.usage.input_tokens == tokens
        assert end.annotated_response.usage.output_tokens is None
    # The inputs are the request's messages, as an OpenAI or Gemini embeddings request's are.
    assert titan.annotated_request.messages == ["hello there"] and not titan.annotated_request.provider_params
    assert cohere.annotated_request.messages == ["a b"]
    assert cohere.annotated_request.provider_params == {"input_type": "x"}
    assert titan.annotated_response.embedding_dimensions == 3
    assert cohere.annotated_response.embedding_dimensions == 2


def test_no_body_content_reaches_span_params_with_content_capture_off(relay_home, bedrock_server) -> None:
    # OpenInference's llm.invocation_parameters shows a request's params whatever content capture says:
    # an embeddings input or another family's prompt must not be among them.
    pipeline = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(
        pipeline.tracer_provider, pipeline.meter_provider, conventions=("gen_ai", "openinference")
    ).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    client = adapters.instrument(bedrock_server.client())
    bedrock_server.replies += [
        raw_reply({"embedding": [0.5], "inputTextTokenCount": 3}),
        raw_reply({"embeddings": [[0.5]], "texts": ["x"]}),
        raw_reply({"outputs": [{"text": "ok", "stop_reason": "stop"}]}),
        raw_reply({"output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}}}),
    ]  # fmt: skip
    bodies = [
        ("amazon.titan-embed-text-v2:0", {"inputText": "titan-private-input"}),
        ("cohere.embed-english-v3", {"texts": ["cohere-private-input"], "input_type": "search_query"}),
        ("mistral.mistral-large-2402-v1:0", {"prompt": "mistral-private-prompt", "max_tokens": 9}),
        ("amazon.nova-lite-v1:0", {"system": [{"text": "nova-private-system"}],
                                   "messages": [{"role": "user", "content": [{"text": "nova-private-message"}]}]}),
    ]  # fmt: skip
    try:
        for model, body in bodies:
            client.invoke_model(modelId=model, body=json.dumps(body))
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
    spans = [s for s in pipeline.finished() if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    assert len(spans) == 4
    shown = repr([dict(s.attributes or {}) for s in pipeline.finished()])
    assert "private" not in shown
    assert '"input_type": "search_query"' in shown and '"max_tokens": 9' in shown  # params are still shown


def test_cohere_embeddings_by_type_give_their_dimension(relay_turn, relay_events, client, bedrock_server):
    bedrock_server.replies.append(raw_reply({"id": "e2", "embeddings": {"int8": [[1, 2, 3, 4]]}, "texts": ["a"]}))
    body = {"texts": ["a"], "input_type": "x", "embedding_types": ["int8"]}
    client.invoke_model(modelId="cohere.embed-english-v3", body=json.dumps(body))
    (cohere,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert cohere.annotated_response.embedding_dimensions == 4


def test_an_anthropic_response_stream(relay_turn, relay_events, client, bedrock_server) -> None:
    bedrock_server.replies.append(stream_reply(chunks(*anthropic_stream_events(["Hi", " there"]))))
    response = client.invoke_model_with_response_stream(modelId=CLAUDE, body=anthropic_body())
    events = [json.loads(part["chunk"]["bytes"]) for part in response["body"]]
    assert events[-1]["type"] == "message_stop"
    end = only(relay_events)
    assert end.outcome == "success" and end.annotated_request.stream is True
    assert end.annotated_response.output_text == "Hi there"
    assert end.annotated_response.finish_reasons == ["end_turn"]
    assert (end.annotated_response.usage.input_tokens, end.annotated_response.usage.output_tokens) == (240, 6)


def test_an_anthropic_response_stream_without_message_stop_is_incomplete(
    relay_turn, relay_events, client, bedrock_server
) -> None:
    bedrock_server.replies.append(stream_reply(chunks(*anthropic_stream_events(["Hi"], stop=False))))
    response = client.invoke_model_with_response_stream(modelId=CLAUDE, body=anthropic_body())
    assert len(list(response["body"])) == 3
    end = only(relay_events)
    assert end.outcome == "failed" and end.error_type == "IncompleteStream"
    assert end.annotated_response.output_text == "Hi"


def test_a_meta_response_stream(relay_turn, relay_events, client, bedrock_server) -> None:
    bedrock_server.replies.append(stream_reply(chunks(
        {"generation": "Bon", "prompt_token_count": 4, "generation_token_count": 1, "stop_reason": None},
        {"generation": "jour", "prompt_token_count": None, "generation_token_count": 2, "stop_reason": "stop",
         "amazon-bedrock-invocationMetrics": {"inputTokenCount": 4, "outputTokenCount": 2}},
    )))  # fmt: skip
    list(client.invoke_model_with_response_stream(modelId=LLAMA, body=json.dumps({"prompt": "hi"}))["body"])
    end = only(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "Bonjour"
    assert end.annotated_response.finish_reasons == ["stop"]
    assert (end.annotated_response.usage.input_tokens, end.annotated_response.usage.output_tokens) == (4, 2)


def test_intercepts_rewrite_the_model_body(relay_turn, relay_events, client, bedrock_server) -> None:
    relay, _turn = relay_turn

    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        annotated.params["max_tokens"] = 5
        annotated.params["stop"] = "END"
        annotated.system = "Be brief."
        return LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("invoke-edit", 1, False, intercept)
    bedrock_server.replies.append(raw_reply({"content": [], "stop_reason": "end_turn", "usage": {}}))
    try:
        client.invoke_model(modelId=CLAUDE, body=anthropic_body())
    finally:
        relay.intercepts.deregister_llm_request("invoke-edit")
    sent = bedrock_server.seen[0].body
    assert sent["max_tokens"] == 5 and sent["stop_sequences"] == ["END"] and sent["system"] == "Be brief."
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_intercepts_rewrite_embeddings_inputs_as_messages(relay_turn, client, bedrock_server) -> None:
    relay, _turn = relay_turn

    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        annotated.messages = [m.replace("secret", "[x]") for m in annotated.messages]
        return LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("embed-edit", 1, False, intercept)
    bedrock_server.replies += [raw_reply({"embedding": [0.5], "inputTextTokenCount": 3}),
                               raw_reply({"embeddings": [[0.5]], "texts": ["x"]})]  # fmt: skip
    try:
        client.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "a secret"}))
        client.invoke_model(modelId="cohere.embed-english-v3", body=json.dumps({"texts": ["secret", "b"]}))
    finally:
        relay.intercepts.deregister_llm_request("embed-edit")
    assert bedrock_server.seen[0].body == {"inputText": "a [x]"}
    assert bedrock_server.seen[1].body == {"texts": ["[x]", "b"]}


def test_spans_name_the_provider_and_operation_as_the_conventions_do(relay_home, bedrock_server) -> None:
    pipeline = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    client = adapters.instrument(bedrock_server.client())
    bedrock_server.replies += [raw_reply({"embedding": [0.5], "inputTextTokenCount": 3}),
                               raw_reply({"generation": "ok", "stop_reason": "stop"})]  # fmt: skip
    try:
        client.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "hey"}))
        client.invoke_model(modelId=LLAMA, body=json.dumps({"prompt": "hi"}))
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()
    embed = pipeline.one("embeddings amazon.titan-embed-text-v2:0")
    chat = pipeline.one(f"chat {LLAMA}")
    for span in (embed, chat):
        assert span.attributes["gen_ai.provider.name"] == "aws.bedrock"
        assert span.attributes["cloud.region"] == "eu-west-3"
    assert embed.attributes["gen_ai.operation.name"] == "embeddings"
    assert embed.attributes["gen_ai.usage.input_tokens"] == 3
    assert embed.attributes["gen_ai.embeddings.dimension.count"] == 1
    assert chat.attributes["gen_ai.operation.name"] == "chat"


def test_instrument_without_a_client_traces_streams_and_invoke_model(relay_turn, relay_events, bedrock_server) -> None:
    adapters.instrument()
    try:
        client = bedrock_server.client()  # never instrumented itself: the class wrapper sees it
        bedrock_server.replies += [raw_reply({"embedding": [0.5], "inputTextTokenCount": 3}),
                                   stream_reply(chunks(*anthropic_stream_events(["ok"])))]  # fmt: skip
        client.invoke_model(modelId="amazon.titan-embed-text-v2:0", body=json.dumps({"inputText": "hey"}))
        list(client.invoke_model_with_response_stream(modelId=CLAUDE, body=anthropic_body())["body"])
    finally:
        adapters.uninstrument()
    embed, streamed = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert embed.annotated_request.operation == "embeddings" and embed.outcome == "success"
    assert streamed.annotated_response.output_text == "ok" and streamed.outcome == "success"


NOVA = "us.amazon.nova-lite-v1:0"


@pytest.mark.parametrize(
    ("model", "answer", "said", "finish", "tokens"),
    [
        (NOVA, {"output": {"message": {"role": "assistant", "content": [{"text": "Bon"}, {"text": "jour"}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 307,
                          "cacheReadInputTokenCount": 300, "cacheWriteInputTokenCount": 0}},
         "Bonjour", ["end_turn"], (305, 2, 300)),
        ("mistral.mistral-large-2402-v1:0", {"outputs": [{"text": "Bonjour", "stop_reason": "stop"}]},
         "Bonjour", ["stop"], (11, 4, None)),
        ("amazon.titan-text-express-v1", {"inputTextTokenCount": 6,
                                          "results": [{"tokenCount": 3, "outputText": "Bonjour",
                                                       "completionReason": "FINISH"}]},
         "Bonjour", ["FINISH"], (6, 3, None)),
        ("cohere.command-r-v1:0", {"text": "Bonjour", "finish_reason": "COMPLETE",
                                   "meta": {"billed_units": {"input_tokens": 7, "output_tokens": 2}}},
         "Bonjour", ["COMPLETE"], (7, 2, None)),
        ("ai21.jamba-1-5-mini-v1:0", {"model": "jamba-1.5-mini", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Bonjour"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}},
         "Bonjour", ["stop"], (8, 2, None)),
    ],
)  # fmt: skip
def test_the_answers_of_other_families_are_recorded_by_their_bodys_shape(
    relay_turn, relay_events, client, bedrock_server, model, answer, said, finish, tokens
) -> None:
    """Nova, Mistral, Titan text, Cohere Command R and AI21 Jamba answer in bodies of their own: the attempt
    records the answer's text, why it stopped and its tokens (a cache read priced as one), where it recorded
    only Bedrock's header counts; a body with no counts of its own keeps the headers'."""
    headers = {"X-Amzn-Bedrock-Input-Token-Count": "11", "X-Amzn-Bedrock-Output-Token-Count": "4"}
    bedrock_server.replies.append(raw_reply(answer, **headers))
    response = client.invoke_model(modelId=model, body=json.dumps({"prompt": "Say hi"}))
    assert json.loads(response["body"].read()) == answer  # the caller reads the body as ever
    end = only(relay_events)
    annotated = end.annotated_response
    assert (annotated.output_text, annotated.finish_reasons) == (said, finish)
    usage = annotated.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == tokens
    assert annotated.id == "req-1"


def test_a_nova_tool_use_is_a_tool_call(relay_turn, relay_events, client, bedrock_server) -> None:
    use = {"toolUse": {"toolUseId": "tu_1", "name": "weather", "input": {"city": "Oslo"}}}
    answer = {"output": {"message": {"role": "assistant", "content": [use]}}, "stopReason": "tool_use",
              "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}}  # fmt: skip
    bedrock_server.replies.append(raw_reply(answer))
    messages = [{"role": "user", "content": [{"text": "Weather in Oslo?"}]}]
    client.invoke_model(modelId=NOVA, body=json.dumps({"messages": messages}))
    annotated = only(relay_events).annotated_response
    assert annotated.tool_calls == [{"id": "tu_1", "name": "weather", "arguments": {"city": "Oslo"}}]
    assert annotated.finish_reasons == ["tool_use"]


_METRICS = {"amazon-bedrock-invocationMetrics": {"inputTokenCount": 4, "outputTokenCount": 2}}


@pytest.mark.parametrize(
    ("model", "events", "finish"),
    [
        (NOVA, [{"messageStart": {"role": "assistant"}},
                {"contentBlockDelta": {"delta": {"text": "Bon"}, "contentBlockIndex": 0}},
                {"contentBlockDelta": {"delta": {"text": "jour"}, "contentBlockIndex": 0}},
                {"contentBlockStop": {"contentBlockIndex": 0}}, {"messageStop": {"stopReason": "end_turn"}},
                {"metadata": {"usage": {"inputTokens": 4, "outputTokens": 2}}, **_METRICS}], "end_turn"),
        ("mistral.mistral-large-2402-v1:0", [{"outputs": [{"text": "Bon", "stop_reason": None}]},
                                             {"outputs": [{"text": "jour", "stop_reason": "stop"}], **_METRICS}],
         "stop"),
        ("amazon.titan-text-express-v1", [{"outputText": "Bon", "completionReason": None},
                                          {"outputText": "jour", "completionReason": "FINISH", **_METRICS}], "FINISH"),
        ("ai21.jamba-1-5-mini-v1:0", [{"choices": [{"delta": {"content": "Bon"}, "finish_reason": None}]},
                                      {"choices": [{"delta": {"content": "jour"}, "finish_reason": "stop"}],
                                       **_METRICS}], "stop"),
        ("cohere.command-r-v1:0", [{"is_finished": False, "event_type": "text-generation", "text": "Bon"},
                                   {"is_finished": False, "event_type": "text-generation", "text": "jour"},
                                   {"is_finished": True, "event_type": "stream-end", "finish_reason": "COMPLETE",
                                    **_METRICS}], "COMPLETE"),
    ],
)  # fmt: skip
def test_the_streams_of_other_families_record_their_text_as_it_streams(
    relay_turn, relay_events, client, bedrock_server, model, events, finish
) -> None:
    bedrock_server.replies.append(stream_reply(chunks(*events)))
    list(client.invoke_model_with_response_stream(modelId=model, body=json.dumps({"prompt": "hi"}))["body"])
    end = only(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "Bonjour"
    assert end.annotated_response.finish_reasons == [finish]
    assert (end.annotated_response.usage.input_tokens, end.annotated_response.usage.output_tokens) == (4, 2)
    marks = [m.data["delta"].text for m in relay_events.marks(name=CHUNK_MARK) if m.data.get("delta") is not None]
    assert "".join(t or "" for t in marks) == "Bonjour"


@pytest.mark.parametrize(
    "answer",
    [{"output": "not a message"}, {"output": {"message": {"content": "text, not blocks"}}}, {"outputs": "x"},
     {"outputs": [None, 5, {"text": 7}]}, {"results": 5}, {"choices": [None, "x", {"message": "y"}]},
     {"text": 5, "finish_reason": ["x"]}, {"generations": {"text": "a dict, not a list"}},
     {"output": {"message": {"content": [{"text": "ok"}]}}, "usage": ["not", "a", "dict"]}],
)  # fmt: skip
def test_an_other_familys_answer_of_an_odd_shape_is_recorded_as_far_as_it_reads(
    relay_turn, relay_events, client, bedrock_server, answer
) -> None:
    """A body of one of those shapes with the wrong types in it (a proxy's, a new model's) costs the record what
    it cannot read, never the call: the caller gets the body as ever and the attempt ends a success."""
    bedrock_server.replies.append(raw_reply(answer, **{"X-Amzn-Bedrock-Input-Token-Count": "3"}))
    response = client.invoke_model(modelId=NOVA, body=json.dumps({"prompt": "hi"}))
    assert json.loads(response["body"].read()) == answer
    end = only(relay_events)
    assert end.outcome == "success"
    annotated = end.annotated_response
    assert annotated.output_text in (None, "ok")
    assert annotated.usage.input_tokens == 3  # the headers' count, where the body gave none it could read
