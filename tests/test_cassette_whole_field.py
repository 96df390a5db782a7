"""Whole-field redaction rules on the answer (``/response/text``, ``/response/tool_calls/*/arguments``,
``/response/reasoning``) reach a cassette's stored HTTP bodies and stream events (issue 25, item 1): the file
holds what the policy made of those fields, and a replay through the SDK parses and returns that."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.redaction import RedactionPolicy, Rule

TEXT = "The launch code is Zanzibar-Oscar"
CITY = "Timbuktu-Nord"
THOUGHT = "Ponder the Zanzibar-Oscar launch"
ARGS = json.dumps({"city": CITY, "days": 3})
CHAT = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-x", "input": "hi"}
ANTHROPIC = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
TEXT_RULE = Rule("redact", name="text", paths=["/response/text"])
REMOVE_ARGS = Rule("remove", name="args", paths=["/response/tool_calls/*/arguments"])
REDACT_ARGS = Rule("redact", name="args", paths=["/response/tool_calls/*/arguments"])
HASH_REASONING = Rule("hash", name="thought", paths=["/response/reasoning"])


@pytest.fixture
def under() -> Iterator[Any]:
    coordinator = session.SESSION_COORDINATOR

    def use(*rules: Rule) -> RedactionPolicy:
        policy = RedactionPolicy(rules, hash_key="cassette-test-key-0123")
        coordinator.redaction.use(policy)
        return policy

    yield use
    coordinator.redaction.use(None)


def _assert_no_originals(path: Path, *values: str) -> str:
    """The raw file holds none of ``values``, nor any word of them, as written or JSON-escaped either way."""
    raw = path.read_bytes().decode("utf-8")
    for value in values:
        for form in {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=True)[1:-1], *value.split()}:
            if len(form) >= 5:
                assert form not in raw, f"{form!r} is in the cassette"
    return raw


def _chat_call(tool: bool = True) -> list[dict[str, Any]]:
    return [{"id": "call_1", "name": "weather", "arguments": ARGS}] if tool else []


def test_a_chat_completion_body_holds_the_redacted_text_and_no_removed_arguments(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE, REMOVE_ARGS)
    body = testing.chat_completion_body(TEXT, tool_calls=_chat_call())
    live = testing.scripted_openai(testing.json_reply(body))
    cassette = tmp_path / "chat.json"
    with cassettes.use(cassette, mode="record"):
        answer = adapters.complete(live.client, CHAT)
    assert answer.choices[0].message.content == TEXT  # the caller still gets the provider's answer

    _assert_no_originals(cassette, TEXT, CITY, ARGS)
    stored = json.loads(cassette.read_text())["calls"][0]["http"][0]["body"]
    message = stored["choices"][0]["message"]
    assert message["content"] == "[REDACTED]"
    assert message["tool_calls"][0]["function"] == {"name": "weather", "arguments": "{}"}  # removed: still JSON
    assert stored["choices"][0]["finish_reason"] == "stop"

    with cassettes.use(cassette, mode="replay"):
        replayed = adapters.complete(testing.scripted_openai().client, CHAT)
    assert replayed.choices[0].message.content == "[REDACTED]"
    (call,) = replayed.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("weather", {})


def test_a_chat_stream_holds_the_redacted_text_in_its_first_piece_and_redacted_arguments(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE, REDACT_ARGS)
    pieces = ["The launch ", "code is Zanz", "ibar-Oscar"]
    chunks = testing.chat_chunks(pieces, tool_call=_chat_call()[0], usage=testing.chat_usage())
    live = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    cassette = tmp_path / "chat-stream.json"
    with cassettes.use(cassette, mode="record"):
        read = [c.choices[0].delta.content or "" for c in adapters.stream(live.client, CHAT) if c.choices]
    assert "".join(read) == TEXT

    _assert_no_originals(cassette, TEXT, CITY, ARGS, "Zanz", "ibar-Oscar", "Timbu")
    events = json.loads(cassette.read_text())["calls"][0]["http"][0]["events"]
    texts = [
        e["data"]["choices"][0]["delta"].get("content")
        for e in events
        if isinstance(e["data"], dict) and e["data"]["choices"]
    ]
    assert [t for t in texts if t] == ["[REDACTED]"]  # in the first piece, the others blanked

    with cassettes.use(cassette, mode="replay"):
        stream = adapters.stream(testing.scripted_openai().client, CHAT)
        chunks_back = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks_back if c.choices)
    arguments = "".join(
        t.function.arguments or "" for c in chunks_back if c.choices for t in c.choices[0].delta.tool_calls or ()
    )
    assert text == "[REDACTED]"
    assert json.loads(arguments) == {"city": "[REDACTED]", "days": "[REDACTED]"}
    end = relay_events.ends(scope_type="llm")[-1]
    assert end.outcome == "success"  # the replayed stream ended as a whole answer


def test_an_anthropic_answer_and_stream_hold_redacted_text_input_and_hashed_thinking(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE, REDACT_ARGS, HASH_REASONING)
    tool = {"id": "tu_1", "name": "weather", "input": {"city": CITY, "days": 3}}
    redacted_input = {"city": "[REDACTED]", "days": "[REDACTED]"}  # as the events record it
    body = testing.anthropic_message_body("The launch code ", tool_use=tool)
    body["content"] = [
        {"type": "thinking", "thinking": THOUGHT, "signature": "sig"},
        *body["content"],
        {"type": "text", "text": "is Zanzibar-Oscar"},  # the answer's text in two blocks
    ]
    events = testing.anthropic_events(["The launch ", "code is Zanzibar-Oscar"], thinking=THOUGHT, tool_use=tool)
    live = testing.scripted_anthropic(testing.json_reply(body), testing.sse_reply(testing.typed_sse(events)))
    whole, streamed = tmp_path / "anthropic.json", tmp_path / "anthropic-stream.json"
    with cassettes.use(whole, mode="record"):
        adapters.complete(live.client, ANTHROPIC)
    with cassettes.use(streamed, mode="record"):
        list(adapters.stream(live.client, ANTHROPIC))

    for path in (whole, streamed):
        _assert_no_originals(path, TEXT, CITY, THOUGHT)
    with cassettes.use(whole, mode="replay"):
        message = adapters.complete(testing.scripted_anthropic().client, ANTHROPIC)
    thinking, first, used, second = message.content
    assert (first.text, second.text, used.input) == ("[REDACTED]", "", redacted_input)
    assert thinking.thinking.startswith("[hash:") and thinking.signature == "sig"
    with cassettes.use(streamed, mode="replay"):
        got = list(adapters.stream(testing.scripted_anthropic().client, ANTHROPIC))
    assert relay_events.ends(scope_type="llm")[-1].outcome == "success"
    deltas = [e.delta for e in got if e.type == "content_block_delta"]
    assert "".join(d.text for d in deltas if d.type == "text_delta") == "[REDACTED]"
    # The input's JSON fragments still join into JSON, as the SDK reads it.
    assert json.loads("".join(d.partial_json for d in deltas if d.type == "input_json_delta")) == redacted_input
    assert [d.thinking for d in deltas if d.type == "thinking_delta"] == [thinking.thinking]  # one hash, as stored


def test_a_responses_stream_holds_no_original_in_its_deltas_nor_in_the_copies_at_its_end(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE, REMOVE_ARGS)
    call = {"call_id": "c1", "name": "weather", "arguments": ARGS}
    events = testing.responses_events(["The launch ", "code is Zanzibar-Oscar"], function_call=call)
    events.insert(-1, {"type": "response.output_text.done", "sequence_number": 90, "item_id": "msg_1",
                       "output_index": 0, "content_index": 0, "text": TEXT, "logprobs": []})  # fmt: skip
    live = testing.scripted_openai(testing.sse_reply(testing.typed_sse(events)))
    cassette = tmp_path / "responses.json"
    with cassettes.use(cassette, mode="record"):
        list(adapters.stream(live.client, RESPONSES, api_mode="responses"))

    _assert_no_originals(cassette, TEXT, CITY, ARGS)
    with cassettes.use(cassette, mode="replay"):
        got = list(adapters.stream(testing.scripted_openai().client, RESPONSES, api_mode="responses"))
    assert relay_events.ends(scope_type="llm")[-1].outcome == "success"
    # What the caller reads, as the SDK parsed it (the events' records are redacted once more).
    assert "".join(e.delta for e in got if e.type == "response.output_text.delta") == "[REDACTED]"
    assert [e.text for e in got if e.type == "response.output_text.done"] == ["[REDACTED]"]
    (completed,) = [e.response for e in got if e.type == "response.completed"]
    assert completed.output_text == "[REDACTED]"
    (function_call,) = [item for item in completed.output if item.type == "function_call"]
    assert function_call.arguments == "{}"


def test_an_answer_no_attempt_read_is_not_written_as_the_provider_gave_it(tmp_path: Path, under: Any) -> None:
    # No turn and nothing attached: the call runs unmanaged, with no attempt whose end reads the answer.
    under(TEXT_RULE)
    live = testing.scripted_openai(testing.json_reply(testing.chat_completion_body(TEXT)))
    cassette = tmp_path / "unread.json"
    with (
        pytest.raises(cassettes.CassetteError, match="no end of its LLM attempt was read"),
        cassettes.use(cassette, mode="record"),
    ):
        adapters.complete(live.client, CHAT)
    assert not cassette.exists()


def test_a_one_word_answer_leaves_the_answers_vocabulary_alone() -> None:
    from relay_runtime.cassettes.answers import rewritten  # here: the other tests run on code without it

    body = testing.chat_completion_body("stop")
    call = {"request": {"model": "m"}, "http": [{"status": 200, "body": body}]}
    out = rewritten(call, ({"stop": "[REDACTED]"}, []))
    choice = out["http"][0]["body"]["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("[REDACTED]", "stop")
    assert call["http"][0]["body"]["choices"][0]["message"]["content"] == "stop"  # the recording is not changed


def test_a_stream_still_open_when_the_cassette_is_saved_is_not_written_unredacted(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE)
    chunks = testing.chat_chunks(["The launch ", "code is Zanzibar-Oscar"])
    live = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    cassette = tmp_path / "open.json"
    with (
        pytest.raises(cassettes.CassetteError, match="read each stream to its end"),
        cassettes.use(cassette, mode="record"),
    ):
        stream = adapters.stream(live.client, CHAT)
        next(iter(stream))  # its attempt has not ended: what the rules make of its text is not known yet
    assert not cassette.exists()
    stream.close()  # its end comes after the save: nothing waits for it any more
    assert relay_events.ends(scope_type="llm")[-1].outcome == "cancelled"


def test_a_long_value_is_replaced_wherever_it_stands_a_short_one_only_where_it_is_a_whole_field() -> None:
    from relay_runtime.cassettes.answers import rewritten

    events = [
        {"data": {"delta": "Opening. The launch "}},
        {"data": {"delta": "code is Zanzibar-Oscar"}},
        {"data": {"delta": " Yes"}},
        {"data": {"note": "Yes"}},
    ]
    call = {"request": {}, "http": [{"status": 200, "events": events}]}
    out = rewritten(call, ({TEXT: "[REDACTED]", "Yes": "[R]"}, []))
    assert [e["data"] for e in out["http"][0]["events"]] == [
        {"delta": "Opening. [REDACTED]"},
        {"delta": ""},
        {"delta": " Yes"},  # inside a longer text: three letters, not the field
        {"note": "[R]"},
    ]


def test_an_anthropic_stream_whose_blocks_open_with_text_holds_none_of_it(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE, Rule("redact", name="thought", paths=["/response/reasoning"]))
    events = testing.anthropic_events(["code is ", "Zanzibar-Oscar"], thinking="the Zanzibar-Oscar launch")
    for event in events:  # each block's start already carries the opening of its text, before its deltas
        block = event.get("content_block") or {}
        if block.get("type") in ("text", "thinking"):
            block[block["type"]] = "The launch " if block["type"] == "text" else "Ponder "
    live = testing.scripted_anthropic(testing.sse_reply(testing.typed_sse(events)))
    cassette = tmp_path / "opening.json"
    with cassettes.use(cassette, mode="record"):
        list(adapters.stream(live.client, ANTHROPIC))

    _assert_no_originals(cassette, TEXT, THOUGHT, "The launch", "Ponder")
    with cassettes.use(cassette, mode="replay"):
        got = list(adapters.stream(testing.scripted_anthropic().client, ANTHROPIC))
    assert relay_events.ends(scope_type="llm")[-1].outcome == "success"
    opening = [e.content_block for e in got if e.type == "content_block_start"]
    deltas = [e.delta for e in got if e.type == "content_block_delta"]
    text = "".join(b.text for b in opening if b.type == "text") + "".join(
        d.text for d in deltas if d.type == "text_delta"
    )
    thinking = "".join(b.thinking for b in opening if b.type == "thinking") + "".join(
        d.thinking for d in deltas if d.type == "thinking_delta"
    )
    assert (text, thinking) == ("[REDACTED]", "[REDACTED]")  # as the SDK joins a block: its start, then deltas
