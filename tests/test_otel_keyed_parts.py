# ruff: noqa: F811 - the bedrock_server fixture imported from test_adapters_bedrock is a parameter of a test below
"""With content capture on, a Gemini or Bedrock Converse call's spans hold its messages, system instruction and
tools in the conventions' schema, as an OpenAI or Anthropic call's do.

Their request views keep the provider's own shape, blocks named by the key they hold (``{"text"}``,
``{"function_call"}``, ``{"toolUse"}``, ...) rather than by a ``type``: every message was exported with no
parts, a Gemini answer's turn under the role ``model``, and neither the system instruction nor the tools at all.
A real google-genai client on a mock transport and a real boto3 client against a loopback Bedrock server, a
real OTel SDK pipeline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter
from tests import genai_support as g
from tests.framework_support import need
from tests.otel_support import Pipeline

need("google.genai")
need("boto3")

from tests.bedrock_support import BedrockServer, converse_body, json_reply  # noqa: E402
from tests.test_adapters_bedrock import bedrock_server  # noqa: E402, F401

WEATHER = {"name": "weather", "description": "The weather in a city.", "parameters": {"type": "object"}}
EXPECTED_TOOLS = [{"type": "function", **WEATHER}]


def exported(call: Any) -> dict[str, Any]:
    """The content attributes of the one LLM attempt span ``call()`` makes, parsed."""
    coordinator = session.SESSION_COORDINATOR
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider, capture_content=True).attach(coordinator)
    try:
        call()
    finally:
        exporter.shutdown()
    (span,) = [s for s in pipeline.finished() if "gen_ai.input.messages" in (s.attributes or {})]
    return {k: json.loads(v) for k, v in span.attributes.items() if k.startswith(("gen_ai.input", "gen_ai.output",
            "gen_ai.system", "gen_ai.tool.definitions"))}  # fmt: skip


def test_a_gemini_calls_messages_system_instruction_and_tools_are_exported(relay_turn: Any) -> None:
    script = t.Script([t.json_reply(g.response_body("Sunny.", thought="Look it up."))])
    client = adapters.instrument(g.gemini_client(script))
    image = {"inline_data": {"mime_type": "image/png", "data": "iVBORw0K"}}
    call = {"function_call": {"name": "weather", "args": {"city": "Paris"}}}
    contents = [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}, image]},
        {"role": "model", "parts": [{"text": "I should ask.", "thought": True}, call]},
        {"role": "user", "parts": [{"function_response": {"name": "weather", "response": {"sky": "clear"}}}]},
    ]
    config = {"system_instruction": "Be brief.", "tools": [{"function_declarations": [WEATHER]}]}
    content = exported(lambda: client.models.generate_content(model="gemini-test", contents=contents, config=config))
    assert content["gen_ai.input.messages"] == [
        {"role": "user", "parts": [
            {"type": "text", "content": "Weather in Paris?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0K"},
        ]},
        {"role": "assistant", "parts": [
            {"type": "reasoning", "content": "I should ask."},
            {"type": "tool_call", "id": None, "name": "weather", "arguments": {"city": "Paris"}},
        ]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": None, "response": {"sky": "clear"}}]},
    ]  # fmt: skip
    assert content["gen_ai.system_instructions"] == [{"type": "text", "content": "Be brief."}]
    # The SDK made its own Schema of the parameters: its fields that are set, its type as the API names it.
    assert content["gen_ai.tool.definitions"] == [{**EXPECTED_TOOLS[0], "parameters": {"type": "OBJECT"}}]
    assert content["gen_ai.output.messages"][0]["parts"] == [
        {"type": "reasoning", "content": "Look it up."},
        {"type": "text", "content": "Sunny."},
    ]


def test_a_bedrock_converse_calls_messages_system_and_tools_are_exported(
    relay_turn: Any, bedrock_server: BedrockServer
) -> None:
    bedrock_server.replies.append(json_reply(converse_body("Sunny.")))
    client = adapters.instrument(bedrock_server.client())
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "clear"}], "status": "success"}}
    messages = [
        {"role": "user", "content": [{"text": "Weather in Paris?"}, image]},
        {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "I should ask.", "signature": "c2ln"}}},
            {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}},
        ]},
        {"role": "user", "content": [result]},
    ]  # fmt: skip
    spec = {"toolSpec": {"name": WEATHER["name"], "description": WEATHER["description"],
                         "inputSchema": {"json": WEATHER["parameters"]}}}  # fmt: skip
    content = exported(lambda: client.converse(
        modelId="anthropic.claude-test", messages=messages, system=[{"text": "Be brief."}],
        toolConfig={"tools": [spec]},
    ))  # fmt: skip
    assert content["gen_ai.input.messages"] == [
        {"role": "user", "parts": [
            {"type": "text", "content": "Weather in Paris?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw=="},
        ]},
        {"role": "assistant", "parts": [
            {"type": "reasoning", "content": "I should ask."},
            {"type": "tool_call", "id": "t1", "name": "weather", "arguments": {"city": "Paris"}},
        ]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "t1", "response": "clear"}]},
    ]  # fmt: skip
    assert content["gen_ai.system_instructions"] == [{"type": "text", "content": "Be brief."}]
    assert content["gen_ai.tool.definitions"] == EXPECTED_TOOLS
    assert content["gen_ai.output.messages"][0]["parts"] == [{"type": "text", "content": "Sunny."}]


@pytest.mark.parametrize(
    ("block", "part"),
    [
        ({"fileData": {"fileUri": "gs://b/cat.png", "mimeType": "image/png"}},
         {"type": "uri", "modality": "image", "uri": "gs://b/cat.png"}),
        ({"document": {"format": "pdf", "name": "r", "source": {"s3Location": {"uri": "s3://b/r.pdf"}}}},
         {"type": "uri", "modality": "file", "uri": "s3://b/r.pdf"}),
        ({"toolResult": {"toolUseId": "t2", "content": [{"json": {"sky": "clear"}}]}},
         {"type": "tool_call_response", "id": "t2", "response": {"sky": "clear"}}),
        ({"cachePoint": {"type": "default"}}, None),
    ],
    ids=["gemini-file-uri", "converse-document-in-s3", "converse-json-result", "converse-cache-point"],
)  # fmt: skip
def test_other_keyed_blocks_map_onto_the_schema(block: dict[str, Any], part: dict[str, Any] | None) -> None:
    from relay_runtime.integrations.otel.content import input_messages

    expected = [part] if part is not None else []
    assert input_messages([{"role": "user", "content": [block]}]) == [{"role": "user", "parts": expected}]


def test_a_text_or_part_given_as_a_whole_message_is_the_users() -> None:
    from google.genai import types

    from relay_runtime.integrations.otel.content import input_messages

    # Gemini's ``contents`` may be bare texts and parts: the SDK sends them as the user's message. A roleless
    # item of another kind (a Responses API call sent back) stays the model's.
    given = [types.Part(text="Weather in Paris?"), "And Lisbon?",
             {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}]  # fmt: skip
    assert [m["role"] for m in input_messages(given)] == ["user", "user", "assistant"]
    assert input_messages(given)[0]["parts"] == [{"type": "text", "content": "Weather in Paris?"}]
