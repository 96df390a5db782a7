"""ATOF writes each provider's conversation as the other records hold it (``redaction.CONVERSATION_KWARGS``).

The exporter walks an attempt's request kwargs by the key rule but for the conversation, which is recorded as
it was sent (a tool may well take a ``password``). Its own list of conversation kwargs named OpenAI's and
Anthropic's alone: a Gemini conversation (``contents``) and Converse's tools (``toolConfig``) were walked, so a
model's call ``login(password=...)`` and a tool's ``password`` property were written "[redacted]" in ATOF
alone, the property's schema lost. Real SDK clients on the scripted transports.
"""

from __future__ import annotations

import io
import json
from typing import Any

from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.trajectory import AtofExporter

SCHEMA = {"type": "object", "properties": {"password": {"type": "string"}}}


def test_a_gemini_and_a_converse_conversation_are_written_as_the_events_hold_them(
    relay_turn: Any, relay_host: Any, relay_events: Any
) -> None:
    from bedrock_support import MODEL, BedrockServer, converse_body, json_reply
    from genai_support import gemini_client, response_body

    out = io.StringIO()
    exporter = AtofExporter(stream=out).attach(relay_host)
    script = t.Script([t.json_reply(response_body("ok"))])
    gemini = adapters.instrument(gemini_client(script))
    said = {"role": "model", "parts": [{"function_call": {"name": "login", "args": {"password": "hunter2"}}}]}
    gemini.models.generate_content(model="gemini-test-flash", contents=[{"role": "user", "parts": [{"text": "hi"}]},
                                                                        said])  # fmt: skip
    server = BedrockServer()
    server.replies.append(json_reply(converse_body("ok")))
    bedrock = adapters.instrument(server.client())
    try:
        bedrock.converse(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "hi"}]}],
            toolConfig={"tools": [{"toolSpec": {"name": "login", "inputSchema": {"json": SCHEMA}}}]},
        )
    finally:
        adapters.uninstrument(bedrock)
        server.close()
    assert exporter.shutdown()
    written = [json.loads(line) for line in out.getvalue().splitlines()]
    requests = {e["uuid"]: e["data"]["content"] for e in written
                if e["scope_category"] == "start" and e["category"] == "llm"}  # fmt: skip
    starts = [e for e in relay_events.starts() if e.scope_type == "llm"]
    assert len(starts) == 2
    for start in starts:
        content = requests[start.uuid]
        for key in ("contents", "toolConfig"):
            if key in start.input["content"]:
                assert content[key] == json.loads(json.dumps(start.input["content"][key], default=str)), key
    gemini_request, converse_request = (requests[s.uuid] for s in starts)
    assert gemini_request["contents"][1]["parts"][0]["function_call"]["args"] == {"password": "hunter2"}
    assert converse_request["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"] == SCHEMA
