"""A streamed tool call's arguments reach no sink a chunk at a time when a rule acts on them.

An SDK's stream chunk carries a tool call's arguments as JSON fragments. A rule aimed at them (remove the
arguments, redact one argument, a pattern in them) acts on the end event's whole arguments, and no text is
held back for it (no rule reads the answer's text): a chunk mark's SDK chunk went out as it came, fragments
and all, to every subscriber and to a JSONL file of chunks. Now such chunks keep only their kind, as chunks
whose text is held back do.

Through the real path: the openai SDK streaming over its scripted transport, under the policy, watched
by a recorder and a JSONL writer that both take chunks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.conventions import CHUNK
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.sink_texts import SinkTexts

PIN = "Hunter2Tiger7Lily"
ARGUMENTS = json.dumps({"account": "acct-17", "pin": PIN})
TOOLS = [{"type": "function", "function": {"name": "unlock", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    "rule",
    [
        Rule("remove", paths=["/response/tool_calls/*/arguments"]),
        Rule("redact", paths=["/response/tool_calls/*/arguments/pin"]),
        Rule("regex_replace", pattern=r"\bHunter\w+", replacement="[pin]", paths=["/response/tool_calls"]),
    ],
    ids=["remove-arguments", "redact-one-argument", "pattern-in-tool-calls"],
)
def test_a_streamed_tool_calls_arguments_reach_no_sink_in_pieces(
    relay_turn: Any, tmp_path: Path, rule: Rule
) -> None:
    relay, _turn = relay_turn
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([rule]))
    chunks = testing.chat_chunks(
        ["Unlocking ", "now."], tool_call={"id": "call_1", "name": "unlock", "arguments": ARGUMENTS},
        finish_reason="tool_calls",
    )  # fmt: skip
    scripted = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    with SinkTexts(relay, tmp_path) as sinks:
        stream = adapters.stream(
            scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "unlock"}], "tools": TOOLS}
        )
        deltas = [c.choices[0].delta for c in stream if c.choices]
    got = "".join(d.tool_calls[0].function.arguments or "" for d in deltas if d.tool_calls)
    assert got == ARGUMENTS  # the caller gets the arguments as streamed
    events, texts = sinks.events, sinks.texts()
    pieces = [ARGUMENTS[i : i + 6] for i in range(ARGUMENTS.index(PIN), ARGUMENTS.index(PIN) + len(PIN) - 5)]
    for where, text in texts.items():
        for piece in pieces:
            assert piece not in text, f"{piece!r}, a piece of the pin, is in {where}"
    # The chunks are still there, with their kind and the answer's text; the end names the tool.
    marks = events.marks(name=CHUNK)
    assert len(marks) >= 3
    assert all(m.data["chunk"] in (None, {"object": "chat.completion.chunk"}) for m in marks)
    assert "".join(m.data["delta"].text for m in marks if m.data.get("delta")) == "Unlocking now."
    assert "chat.completion.chunk" in texts["jsonl"] and "Unlocking " in texts["jsonl"]
    (end,) = events.ends(scope_type="llm")
    assert end.annotated_response.tool_calls[0]["name"] == "unlock"
