"""The reasoning a rule on ``/response/reasoning`` redacts reaches no sink in the answer object.

The view carries the answer's text and tool calls, not its reasoning: the rule acted on a stream's chunk
marks, while the attempt's end event carried the SDK's answer object with the reasoning whole (Anthropic's
``thinking`` block, an OpenAI-compatible server's ``reasoning_content``, a Gemini part marked ``thought``),
read there by pathless rules only. So a policy told to keep the model's reasoning out of the record wrote it
to every subscriber and JSONL file at the attempt's end, streamed or not.

Through the real paths: each SDK over its scripted transport, watched by a recorder and a JSONL writer
(which writes each event's output, the answer object).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import google_genai, testing
from relay_runtime.redaction import RedactionPolicy, Rule
from tests import genai_support
from tests.sink_texts import SinkTexts

EMAIL = "jane.doe@example.com"
THOUGHT = f"The user is {EMAIL}; I should check the ledger before answering."
ANSWER = "Your balance is fine."
ASK = [{"role": "user", "content": "balance?"}]


def _anthropic_streamed() -> None:
    events = testing.anthropic_events([ANSWER], thinking=THOUGHT)
    scripted = testing.scripted_anthropic(testing.sse_reply(testing.typed_sse(events)))
    for _ in adapters.stream(scripted.client, {"model": "claude-x", "max_tokens": 64, "messages": ASK}):
        pass


def _anthropic() -> None:
    body = testing.anthropic_message_body(ANSWER)
    body["content"].insert(0, {"type": "thinking", "thinking": THOUGHT, "signature": "sig"})
    scripted = testing.scripted_anthropic(testing.json_reply(body))
    adapters.complete(scripted.client, {"model": "claude-x", "max_tokens": 64, "messages": ASK})


def _openai_compatible() -> None:
    body = testing.chat_completion_body(ANSWER)
    body["choices"][0]["message"]["reasoning_content"] = THOUGHT  # as vLLM, DeepSeek and others send it
    scripted = testing.scripted_openai(testing.json_reply(body))
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": ASK})


def _gemini() -> None:
    script = testing.Script([testing.json_reply(genai_support.response_body(ANSWER, thought=THOUGHT))])
    client = google_genai.instrument_client(genai_support.gemini_client(script))
    client.models.generate_content(model=genai_support.MODEL, contents="balance?")


@pytest.mark.parametrize("call", [_anthropic_streamed, _anthropic, _openai_compatible, _gemini])
@pytest.mark.parametrize(
    ("rule", "gone"),
    [
        (Rule("remove", paths=["/response/reasoning"]), "check the ledger"),
        (Rule("redact", detector="email", paths=["/response/reasoning"]), EMAIL),
    ],
    ids=["remove-reasoning", "email-in-reasoning"],
)
def test_reasoning_a_rule_redacts_is_not_in_the_answer_object(
    relay_turn: Any, tmp_path: Path, call: Callable[[], None], rule: Rule, gone: str
) -> None:
    relay, _turn = relay_turn
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([rule]))
    with SinkTexts(relay, tmp_path) as sinks:
        call()
    events, texts = sinks.events, sinks.texts()
    for where, text in texts.items():
        assert gone not in text, f"{gone!r}, of the reasoning, is in {where}"
        assert ANSWER in text, where  # the answer is still recorded
    (end,) = events.ends(scope_type="llm")
    assert end.annotated_response.output_text == ANSWER
    assert ANSWER in repr(end.output)  # the answer object is still there, as its own type
