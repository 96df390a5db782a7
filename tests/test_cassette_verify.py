# ruff: noqa: F811 - the under fixture imported from test_cassette_whole_field is a parameter of the tests below
"""A cassette checks, just before it writes a call, that its stored answers hold none of the values the policy's
whole-field rules changed (``cassettes.verify``): an answer's layout the rewrite does not know fails the save
closed, naming the call and the rule's kind but never the value, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cassettes
from relay_runtime.adapters import testing
from relay_runtime.redaction import Rule
from tests.test_cassette_whole_field import under  # noqa: F401

TEXT = "The launch code is Zanzibar-Öscar"  # not ASCII: JSON-escaped, \u00d6 stands for it
CHAT = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
TEXT_RULE = Rule("redact", name="text", paths=["/response/text"])


def _raw(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def test_a_stream_echoing_its_text_where_the_rewrite_does_not_look_is_not_written(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE)
    chunks = testing.chat_chunks(["The launch ", "code is Zanzibar-Öscar"])
    # A chunk of a shape the rewrite does not know: the text again, as JSON text inside a longer string.
    echo = {**chunks[-1], "choices": [], "debug": "log " + json.dumps({"said": "model: " + TEXT})}
    chunks.insert(-1, echo)
    live = testing.scripted_openai(testing.sse_reply(testing.openai_chat_sse(chunks)))
    cassette = tmp_path / "echo.json"
    with pytest.raises(cassettes.CassetteError) as raised, cassettes.use(cassette, mode="record"):
        read = [c.choices[0].delta.content or "" for c in adapters.stream(live.client, CHAT) if c.choices]
    assert "".join(read) == TEXT  # the caller still got the provider's answer
    assert not cassette.exists()
    message = str(raised.value)
    assert "call #1" in message and "redact" in message
    assert "Zanzibar" not in message and "\\u00d6" not in message


def test_a_short_value_fails_the_check_as_a_whole_field_not_inside_a_longer_string() -> None:
    # What the check sees when the rewrite missed a place: the call as stored, and what the rules changed.
    from relay_runtime.cassettes.verify import unhonoured  # here: the other tests run on code without it

    body = testing.chat_completion_body("Yes, and")
    body["choices"][0]["message"]["annotations"] = [{"quote": {"said": ["Y", "es"]}}]
    call = {"request": {"messages": ["Yes"]}, "http": [{"status": 200, "body": body}]}
    hashed = ({"Yes": "[hash:0123456789abcdef]"}, [])
    assert unhonoured(call, hashed) == "hash"  # the answer again, whole over its pieces
    del body["choices"][0]["message"]["annotations"]
    assert unhonoured(call, hashed) is None  # three letters inside a longer text, and in the request: not the field
    body["choices"][0]["message"]["tool_calls"] = [{"function": {"arguments": json.dumps({"say": "Yes"})}}]
    assert unhonoured(call, ({"Yes": ""}, [])) == "remove"  # a whole field of JSON text


def test_a_chat_completion_with_several_choices_is_not_written(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    # The answer's view reads the first choice only: what the rules make of the others is not known.
    under(TEXT_RULE)
    body = testing.chat_completion_body(TEXT)
    body["choices"].append({**body["choices"][0], "index": 1, "message": {"role": "assistant", "content": "Other"}})
    chunks = testing.chat_chunks(["The launch ", "code is Zanzibar-Öscar"])
    chunks.insert(2, {**chunks[1], "choices": [{"index": 1, "delta": {"content": "Other"}, "finish_reason": None}]})
    live = testing.scripted_openai(testing.json_reply(body), testing.sse_reply(testing.openai_chat_sse(chunks)))
    whole, streamed = tmp_path / "n2.json", tmp_path / "n2-stream.json"
    with pytest.raises(cassettes.CassetteError, match="more than one choice"), cassettes.use(whole, mode="record"):
        answer = adapters.complete(live.client, {**CHAT, "n": 2})
    assert [c.message.content for c in answer.choices] == [TEXT, "Other"]
    with pytest.raises(cassettes.CassetteError, match="more than one choice"), cassettes.use(streamed, mode="record"):
        list(adapters.stream(live.client, {**CHAT, "n": 2}))
    assert not whole.exists() and not streamed.exists()


def test_one_choice_under_the_same_rule_is_written_redacted(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, under: Any
) -> None:
    under(TEXT_RULE)
    live = testing.scripted_openai(testing.json_reply(testing.chat_completion_body(TEXT)))
    cassette = tmp_path / "n1.json"
    with cassettes.use(cassette, mode="record"):
        adapters.complete(live.client, CHAT)
    assert "Zanzibar" not in _raw(cassette)
    with cassettes.use(cassette, mode="replay"):
        replayed = adapters.complete(testing.scripted_openai().client, CHAT)
    assert replayed.choices[0].message.content == "[REDACTED]"


def test_the_check_reads_bodies_stored_as_bytes_and_leaves_a_choices_field_of_arguments_alone() -> None:
    import base64

    from relay_runtime.cassettes.verify import SEVERAL_CHOICES, unhonoured

    redacted = ({TEXT: "[REDACTED]", "  Yes": "[R]"}, [])
    latin = f'{{"text": "{TEXT}"}}'.encode() + b"\xff"  # not UTF-8: stored as base64, read by no rewrite
    call: dict[str, Any] = {"request": {}, "http": [{"status": 200, "base64": base64.b64encode(latin).decode()}]}
    assert unhonoured(call, redacted) == "redact"
    tool = {"type": "tool_use", "id": "t", "name": "pick", "input": {"choices": [{"index": 1}, {"index": 2}]}}
    body = {"type": "message", "content": [tool, {"type": "text", "text": "  [R]"}]}
    call = {"request": {}, "http": [{"status": 200, "body": body}]}
    assert unhonoured(call, redacted) is None  # an argument named choices is not the answer's choices
    assert unhonoured(call, ({}, [(tool["input"], {})])) == "remove"  # the arguments object, as the model gave it
    chunk = {"choices": [{"index": 1, "delta": {"content": "x"}}]}
    call = {"request": {}, "http": [{"status": 200, "events": [{"data": chunk}]}]}
    assert unhonoured(call, ({}, [])) == SEVERAL_CHOICES
    gemini = {"candidates": [{"content": {"parts": [{"text": "a"}]}}, {"content": {"parts": [{"text": "b"}]}}]}
    assert unhonoured({"request": {}, "http": [{"status": 200, "body": gemini}]}, ({}, [])) == SEVERAL_CHOICES
    text = json.dumps({"say": "  Yes"})
    call = {"request": {}, "http": [{"status": 200, "body": {"content": [{"text": " " + text}]}}]}
    assert unhonoured(call, redacted) == "redact, mask or regex_replace"  # JSON text opening after a space
