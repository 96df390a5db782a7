"""With content capture off, what a request sends the model never rides out as its settings.

Every SDK's request params reach OpenInference's ``llm.invocation_parameters`` whatever the capture
mode says; those holding content (a predicted answer, an output schema, a prompt's variables, an
MCP server's token, an end user's id) must stay out of it, and out of every span, log record and
metric point, while the settings themselves (temperature, a reasoning effort, a task type) stay.
Real SDK clients over mock transports (boto3 against a loopback server), a real OTel SDK pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import genai_support as g
import pytest
from bedrock_support import BedrockServer, converse_body, raw_reply
from bedrock_support import json_reply as bedrock_reply
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from otel_support import Pipeline, span_path  # noqa: F401  (every test here runs on both span paths)

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import CAPTURE_ENV, OTelExporter

pytestmark = pytest.mark.usefixtures("span_path")

USER = [{"role": "user", "content": "hi"}]


class Sinks(Pipeline):
    """Spans and metrics (``Pipeline``) and log records, everything one exporter writes, as one text."""

    def __init__(self) -> None:
        super().__init__()
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))

    def invocation(self, name: str) -> dict[str, Any]:
        return json.loads(self.one(name).attributes["llm.invocation_parameters"])

    def everything(self) -> str:
        spans = [
            (s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in self.finished()
        ]
        logs = [(r.log_record.body, dict(r.log_record.attributes or {})) for r in self.logs.get_finished_logs()]
        metrics = self.reader.get_metrics_data()
        return repr(spans) + repr(logs) + (metrics.to_json() if metrics is not None else "")


@pytest.fixture
def sinks(relay_home: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sinks]:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)  # the default: no content
    out = Sinks()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(
        out.tracer_provider, out.meter_provider, logger_provider=out.logger_provider,
        conventions=("gen_ai", "openinference"),
    ).attach(host)  # fmt: skip
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    try:
        yield out
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        exporter.detach()


def _responses_body() -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-r", "status": "completed",
            "output": [], "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}}  # fmt: skip


def _anthropic_body() -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-t", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip


def test_openai_chat_prediction_schema_and_end_user_are_not_settings(sinks: Sinks) -> None:
    s = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")), max_retries=0)
    adapters.complete(s.client, {
        "model": "gpt-c", "messages": USER, "temperature": 0.1, "reasoning_effort": "low",
        "prediction": {"type": "content", "content": "private predicted answer"},
        "functions": [{"name": "private_fn", "description": "private tool description", "parameters": {}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "private_schema", "schema": {}}},
        "user": "private-user-42", "safety_identifier": "private-hash",
        "web_search_options": {"search_context_size": "low",
                               "user_location": {"type": "approximate", "approximate": {"city": "private-city"}}},
    })  # fmt: skip
    assert "private" not in sinks.everything()
    assert sinks.invocation("chat gpt-c") == {
        "temperature": 0.1, "reasoning_effort": "low", "response_format": {"type": "json_schema"},
        "web_search_options": {"search_context_size": "low"},
    }  # fmt: skip


def test_openai_responses_prompt_variables_and_output_schema_are_not_settings(sinks: Sinks) -> None:
    s = t.scripted_openai(t.json_reply(_responses_body()), max_retries=0)
    adapters.instrument(s.client).responses.create(
        model="gpt-r", input="hi", temperature=0.2,
        prompt={"id": "pmpt_1", "version": "2", "variables": {"name": "private variable"}},
        text={"format": {"type": "json_schema", "name": "private_format", "schema": {}}, "verbosity": "low"},
    )  # fmt: skip
    assert "private" not in sinks.everything()
    assert sinks.invocation("chat gpt-r") == {
        "temperature": 0.2, "prompt": {"id": "pmpt_1", "version": "2"}, "text": {"verbosity": "low"}}  # fmt: skip


def test_openai_embeddings_end_user_is_not_a_setting(sinks: Sinks) -> None:
    body = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1]}], "model": "emb",
            "usage": {"prompt_tokens": 1, "total_tokens": 1}}  # fmt: skip
    s = t.scripted_openai(t.json_reply(body), max_retries=0)
    adapters.instrument(s.client).embeddings.create(model="emb", input="hi", dimensions=4, user="private-user")
    assert "private" not in sinks.everything()
    assert sinks.invocation("embeddings emb") == {"dimensions": 4}


def test_anthropic_mcp_servers_and_user_id_are_not_settings(sinks: Sinks) -> None:
    s = t.scripted_anthropic(t.json_reply(_anthropic_body()), max_retries=0)
    adapters.instrument(s.client).beta.messages.create(
        model="claude-t", max_tokens=5, messages=USER, betas=["mcp-client-2025-04-04"],
        metadata={"user_id": "private-user-id"},
        mcp_servers=[{"type": "url", "name": "srv", "url": "https://mcp.example/private",
                      "authorization_token": "private-mcp-token"}],
    )  # fmt: skip
    assert "private" not in sinks.everything()
    assert sinks.invocation("chat claude-t") == {"max_tokens": 5, "betas": ["mcp-client-2025-04-04"]}


def test_gemini_response_schema_and_embedding_title_are_not_settings(sinks: Sinks) -> None:
    from google.genai import types

    script = t.Script()
    script.add(t.json_reply(g.response_body("ok")), t.json_reply(g.embed_body()))
    client = adapters.instrument(g.gemini_client(script))
    client.models.generate_content(model=g.MODEL, contents="hi", config=types.GenerateContentConfig(
        temperature=0.1, response_mime_type="application/json",
        response_schema={"type": "OBJECT", "description": "private schema"},
    ))  # fmt: skip
    client.models.embed_content(
        model="emb-g",
        contents="hi",
        config=types.EmbedContentConfig(title="private title", task_type="RETRIEVAL_DOCUMENT"),
    )
    assert "private" not in sinks.everything()
    assert sinks.invocation(f"generate_content {g.MODEL}") == {
        "temperature": 0.1,
        "response_mime_type": "application/json",
    }
    assert sinks.invocation("embeddings emb-g") == {"task_type": "RETRIEVAL_DOCUMENT"}


@pytest.fixture()
def bedrock_server() -> Iterator[BedrockServer]:
    server = BedrockServer()
    yield server
    server.close()


def test_bedrock_prompt_variables_and_cohere_documents_are_not_settings(sinks: Sinks, bedrock_server) -> None:
    client = adapters.instrument(bedrock_server.client())
    bedrock_server.replies += [bedrock_reply(converse_body()), raw_reply({"text": "ok", "finish_reason": "COMPLETE"})]
    client.converse(modelId="amazon.nova-lite-v1:0", messages=[{"role": "user", "content": [{"text": "hi"}]}],
                    promptVariables={"name": {"text": "private variable"}}, requestMetadata={"team": "a"})  # fmt: skip
    client.invoke_model(modelId="cohere.command-r-v1:0", body=json.dumps({
        "message": "hi", "preamble": "private preamble", "documents": [{"text": "private document"}],
        "tools": [{"name": "private_tool"}], "tool_results": [{"outputs": [{"v": "private result"}]}],
        "temperature": 0.1,
    }))  # fmt: skip
    adapters.uninstrument(client)
    assert "private" not in sinks.everything()
    assert sinks.invocation("chat amazon.nova-lite-v1:0") == {"requestMetadata": {"team": "a"}}
    assert sinks.invocation("chat cohere.command-r-v1:0") == {"temperature": 0.1}


def test_the_images_a_llama_vision_body_sends_are_not_settings(sinks: Sinks, bedrock_server) -> None:
    # Llama 3.2 vision on invoke_model: the prompt names an image, sent beside it as base64 in "images".
    client = adapters.instrument(bedrock_server.client())
    bedrock_server.replies.append(raw_reply({"generation": "a cat", "stop_reason": "stop"}))
    image = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABprivateimagebytes"
    client.invoke_model(modelId="us.meta.llama3-2-11b-instruct-v1:0", body=json.dumps({
        "prompt": "<|image|>What is in it?", "images": [image], "max_gen_len": 9, "temperature": 0.1,
    }))  # fmt: skip
    adapters.uninstrument(client)
    assert "private" not in sinks.everything()
    assert sinks.invocation("chat us.meta.llama3-2-11b-instruct-v1:0") == {"max_tokens": 9, "temperature": 0.1}
