"""OpenInference's flattened messages carry the tool results a request sends back, in every provider's shape.

``llm.input_messages.{i}.message.*`` were read from the conventions' messages for their text parts and tool
calls alone: a tool's result (OpenAI's ``tool`` message, a Responses ``function_call_output`` item, Anthropic's
``tool_result`` block, Converse's ``toolResult``, Gemini's ``function_response``) is a ``tool_call_response``
part there, so its message was exported with a role and nothing else: Phoenix showed every result empty.
Real SDK clients on the scripted transports, an OTel exporter with content capture and both vocabularies.
"""

from __future__ import annotations

import json
from typing import Any

from otel_support import Pipeline

from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter

ASK = {"role": "user", "content": "Weather in Paris?"}


def _results(pipeline: Pipeline) -> list[tuple[str | None, str | None]]:
    """Each attempt span's last input message as OpenInference has it: its content and the call it answers."""
    out = []
    for span in pipeline.finished():
        a = dict(span.attributes or {})
        roles = [k for k in a if k.startswith("llm.input_messages.") and k.endswith(".message.role")]
        if not roles:
            continue
        last = max(int(k.split(".")[2]) for k in roles)
        base = f"llm.input_messages.{last}.message"
        out.append((a.get(f"{base}.content"), a.get(f"{base}.tool_call_id")))
    return out


def test_a_tool_result_is_the_content_of_its_message_in_every_shape(relay_turn: Any, relay_host: Any) -> None:
    from bedrock_support import MODEL, BedrockServer, converse_body, json_reply
    from genai_support import gemini_client, response_body

    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, capture_content=True, conventions=("gen_ai", "openinference"))
    exporter.attach(relay_host.relay)
    bodies = [t.chat_completion_body("Sunny."), t.responses_body("Sunny."), t.anthropic_message_body("Sunny."),
              response_body("Sunny.")]  # fmt: skip
    script = t.Script([t.json_reply(body) for body in bodies])
    openai = adapters.instrument(t.openai_client(script))
    call = {"id": "c-1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    openai.chat.completions.create(model="gpt-test", messages=[
        ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c-1", "content": "sunny in Paris"}])  # fmt: skip
    openai.responses.create(model="gpt-test", input=[
        ASK, {"type": "function_call", "call_id": "c-2", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c-2", "output": "sunny in Paris"}])  # fmt: skip
    adapters.instrument(t.anthropic_client(script)).messages.create(model="claude-test", max_tokens=16, messages=[
        ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "tu-3", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu-3",
                                      "content": [{"type": "text", "text": "sunny in Paris"}]}]}])  # fmt: skip
    gemini = adapters.instrument(gemini_client(script))  # kept: the SDK closes its HTTP client with the object
    gemini.models.generate_content(model="gemini-test-flash", contents=[
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"function_call": {"id": "fc-4", "name": "weather", "args": {}}}]},
        {"role": "user", "parts": [{"function_response": {"id": "fc-4", "name": "weather",
                                                          "response": {"sky": "sunny"}}}]}])  # fmt: skip
    server = BedrockServer()
    server.replies.append(json_reply(converse_body("Sunny.")))
    bedrock = adapters.instrument(server.client())
    try:
        use = {"toolUse": {"toolUseId": "t-5", "name": "weather", "input": {}}}
        bedrock.converse(modelId=MODEL, messages=[
            {"role": "user", "content": [{"text": "Weather in Paris?"}]}, {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t-5",
                                                         "content": [{"text": "sunny in Paris"}]}}]}])  # fmt: skip
    finally:
        adapters.uninstrument(bedrock)
        server.close()
    assert sorted(_results(pipeline), key=str) == sorted([
        ("sunny in Paris", "c-1"), ("sunny in Paris", "c-2"), ("sunny in Paris", "tu-3"),
        (json.dumps({"sky": "sunny"}), "fc-4"), ("sunny in Paris", "t-5")], key=str)  # fmt: skip
