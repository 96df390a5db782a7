"""A whole-field rule on the answer's text reaches an answer the SDK holds in several text blocks.

The view joins an answer's text blocks into one string (an Anthropic answer citing its sources is cut into a
block per citation; an OpenAI Responses message may hold several parts): a rule on ``/response/text``
replaced that string, and the walk through the SDK's answer object looked for it whole, so each block kept
its piece of the answer in the attempt's recorded output. The real SDK clients over a scripted transport.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, session
from relay_runtime.adapters import testing
from relay_runtime.redaction import RedactionPolicy, Rule

PIECES = ("The meeting with ", "Jane Doe", " is on Tuesday at the Lisbon office.")
ANSWER = "".join(PIECES)
KEY = b"a-hash-key-of-32-bytes-for-tests!"


def anthropic_blocks() -> dict[str, Any]:
    body = testing.anthropic_message_body(PIECES[0])
    body["content"] = [{"type": "text", "text": piece} for piece in PIECES]
    return body


def responses_parts() -> dict[str, Any]:
    body = testing.responses_body(PIECES[0])
    body["output"][0]["content"] = [{"type": "output_text", "text": piece, "annotations": []} for piece in PIECES]
    return body


def ask_anthropic() -> None:
    scripted = testing.scripted_anthropic(testing.json_reply(anthropic_blocks()))
    adapters.instrument(scripted.client).messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "When do I meet Jane?"}]
    )


def ask_responses() -> None:
    scripted = testing.scripted_openai(testing.json_reply(responses_parts()))
    adapters.instrument(scripted.client).responses.create(model="gpt-test", input="When do I meet Jane?")


ASK = {"anthropic": ask_anthropic, "openai-responses": ask_responses}


def recorded_texts(output: Any) -> list[str]:
    """The texts of the answer object's blocks, as the attempt's end recorded them."""
    if hasattr(output, "output"):  # a Responses API answer
        return [part.text for item in output.output for part in item.content]
    return [block.text for block in output.content]


def answered(relay_events: Recorder, policy: RedactionPolicy, provider: str) -> Any:
    session.SESSION_COORDINATOR.redaction.use(policy)
    try:
        ASK[provider]()
    finally:
        session.SESSION_COORDINATOR.redaction.use(None)
    (end,) = relay_events.ends(scope_type="llm")
    return end


@pytest.mark.parametrize("provider", list(ASK))
def test_a_rule_redacting_the_answers_text_redacts_each_of_its_blocks(
    relay_turn: Any, relay_events: Recorder, provider: str
) -> None:
    end = answered(relay_events, RedactionPolicy([Rule("redact", paths=["/response/text"])]), provider)
    assert end.annotated_response.output_text == "[REDACTED]"
    # Still the SDK's own object, its blocks where they were: the replacement in the first, the others empty.
    assert recorded_texts(end.output) == ["[REDACTED]", "", ""]
    assert not any(piece in repr(end.output) for piece in PIECES)


@pytest.mark.parametrize("provider", list(ASK))
def test_a_rule_removing_the_answers_text_empties_each_of_its_blocks(
    relay_turn: Any, relay_events: Recorder, provider: str
) -> None:
    end = answered(relay_events, RedactionPolicy([Rule("remove", paths=["/response/text"])]), provider)
    assert end.annotated_response.output_text is None
    assert recorded_texts(end.output) == ["", "", ""]


def test_a_hashed_answer_keeps_its_one_token_in_the_first_block(relay_turn: Any, relay_events: Recorder) -> None:
    policy = RedactionPolicy([Rule("hash", paths=["/response/text"])], hash_key=KEY)
    end = answered(relay_events, policy, "anthropic")
    token = end.annotated_response.output_text
    assert token != ANSWER and token == policy.redact_text(ANSWER, "/response/text")
    assert recorded_texts(end.output) == [token, "", ""]
    assert hashlib.sha256(ANSWER.encode()).hexdigest()[:8] not in token  # keyed, not a bare digest


def test_a_detector_rule_changes_the_value_in_its_own_block_and_leaves_the_others(
    relay_turn: Any, relay_events: Recorder
) -> None:
    # Values a detector finds are replaced where they stand: the blocks keep their text around them.
    end = answered(relay_events, RedactionPolicy([Rule("redact", pattern=r"Jane Doe")]), "anthropic")
    assert recorded_texts(end.output) == [PIECES[0], "[REDACTED]", PIECES[2]]
    assert end.annotated_response.output_text == PIECES[0] + "[REDACTED]" + PIECES[2]


def test_a_streamed_answer_of_several_text_blocks_is_redacted_in_each_of_them(
    relay_turn: Any, relay_events: Recorder
) -> None:
    # The attempt's end holds the stream folded into the SDK's message: one block per text block streamed.
    events = testing.anthropic_events(list(PIECES[:2]))
    stop = next(i for i, e in enumerate(events) if e["type"] == "content_block_stop")
    events[stop + 1 : stop + 1] = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": PIECES[2]}},
        {"type": "content_block_stop", "index": 1},
    ]
    scripted = testing.scripted_anthropic(testing.sse_reply(testing.typed_sse(events)))
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", paths=["/response/text"])]))
    try:
        client = adapters.instrument(scripted.client)
        asked = [{"role": "user", "content": "?"}]
        with client.messages.stream(model="claude-test", max_tokens=64, messages=asked) as stream:
            assert "".join(stream.text_stream) == ANSWER  # the caller gets the answer as it came
    finally:
        session.SESSION_COORDINATOR.redaction.use(None)
    (end,) = relay_events.ends(scope_type="llm")
    assert recorded_texts(end.output) == ["[REDACTED]", ""]
    assert not any(piece in repr(end.output) for piece in PIECES)
