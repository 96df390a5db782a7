"""A text file that travels base64-encoded (an Anthropic document, an MCP blob resource, a data URL in an
OpenAI content part) is read by the policy as the text it is: what a rule changes in it is encoded
again in its place, in events, the JSONL sinks and cassettes. Each once passed every sink as its
encoding, which anyone can decode. So is JSON text (tool-call arguments) in every form a JSON parser
takes: a key given twice, whose first value ``json.loads`` drops, and a document after whitespace, whose
``\\u0040`` escapes hid an address from the rules when it was read as plain text."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, Relay, adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.jsonl import event_json
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_policy import RULES_KEY

EMAIL = "jane.doe@example.com"
REDACTED = "[REDACTED:email]"
CSV = f"name,email\nJane,{EMAIL}\n"
_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _policy() -> RedactionPolicy:
    return RedactionPolicy([Rule("redact", detector="email")])


def _tool_input(arguments: dict[str, Any], policy: RedactionPolicy | None = None) -> Any:
    """The start event of a tool call with ``arguments`` under ``policy`` (the e-mail rule by default)."""
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(policy or _policy())
    relay.tools.execute("attach", arguments, lambda args: "ok")
    return seen.events[0]


def _assert_no_email(where: str, text: str) -> None:
    """Neither the address nor any base64 run in ``text`` that decodes to text holding it."""
    assert EMAIL not in text, where
    for run in _BASE64.findall(text):
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4)).decode("utf-8", "replace")
        except ValueError:
            continue
        assert EMAIL not in decoded, f"{where}: the address is in the base64 {run[:24]}..."


def test_a_base64_text_document_sent_to_anthropic_is_redacted_in_events_and_the_cassette(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    session.SESSION_COORDINATOR.redaction.use(_policy())
    scripted = testing.scripted_anthropic(testing.json_reply(testing.anthropic_message_body("read it")))
    document = {"type": "document", "source": {"type": "base64", "media_type": "text/plain", "data": _b64(CSV)}}
    messages = [{"role": "user", "content": [document, {"type": "text", "text": "Who is in this file?"}]}]
    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        adapters.complete(scripted.client, {"model": "claude-x", "max_tokens": 64, "messages": messages})

    (start,) = relay_events.starts(scope_type="llm")
    assert start.metadata[RULES_KEY] == {"redact:email": 1}
    stored = start.input["content"]["messages"][0]["content"][0]["source"]["data"]
    assert base64.b64decode(stored).decode() == f"name,email\nJane,{REDACTED}\n"  # still base64, still the file
    _assert_no_email("the start event", event_json(start) + repr(start.annotated_request))
    _assert_no_email("the cassette", cassette.read_text())
    sent = json.loads(scripted.script.requests[0].content)
    assert sent["messages"][0]["content"][0]["source"]["data"] == _b64(CSV)  # the provider got the file as it was


def test_a_data_url_of_text_in_an_openai_content_part_is_redacted(relay_turn: Any, relay_events: Recorder) -> None:
    session.SESSION_COORDINATOR.redaction.use(_policy())
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    part = {"type": "file", "file": {"filename": "people.csv", "file_data": f"data:text/csv;base64,{_b64(CSV)}"}}
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": [part]}]})
    (start,) = relay_events.starts(scope_type="llm")
    url = start.input["content"]["messages"][0]["content"][0]["file"]["file_data"]
    head, _, payload = url.partition(",")
    assert head == "data:text/csv;base64" and REDACTED in base64.b64decode(payload).decode()
    _assert_no_email("the start event", event_json(start) + repr(start.annotated_request))


def test_base64_in_lines_is_read_too() -> None:
    """MIME base64 (``base64.encodebytes``: lines of 76 characters) is the same text."""
    wrapped = base64.encodebytes((CSV * 8).encode()).decode()
    assert "\n" in wrapped.strip()
    data = _tool_input({"file": {"mime_type": "text/csv", "data": wrapped}}).input["file"]["data"]
    assert base64.b64decode(data).decode() == f"name,email\nJane,{REDACTED}\n" * 8


def test_an_mcp_blob_resource_of_text_is_redacted_and_keeps_its_type() -> None:
    from mcp import types

    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(_policy())
    blob = types.BlobResourceContents(uri="file:///people.csv", mimeType="text/csv", blob=_b64(CSV))
    relay.tools.execute("read_resource", {"uri": "file:///people.csv"}, lambda args: blob)
    (end,) = [e for e in seen.events if e.output is not None]
    assert type(end.output) is types.BlobResourceContents
    assert base64.b64decode(end.output.blob).decode() == f"name,email\nJane,{REDACTED}\n"
    _assert_no_email("the tool's end event", event_json(end))
    assert blob.blob == _b64(CSV)  # the caller's object is left as it was


@pytest.mark.parametrize(
    "value",
    [
        {"mime_type": "image/png", "data": _b64(CSV)},  # binary by its type: not read as text
        {"media_type": "text/plain", "data": "not base64 at all!"},
        {"mimeType": "text/plain", "blob": base64.b64encode(b"\xff\xfe\x00 not utf-8").decode()},
        "data:image/png;base64," + _b64(CSV),
    ],
    ids=["image", "not-base64", "not-utf8", "image-data-url"],
)
def test_payloads_that_are_not_text_pass_as_they_are(value: Any) -> None:
    start = _tool_input({"file": value})
    assert start.input == {"file": value}
    assert RULES_KEY not in start.metadata


@pytest.mark.parametrize(("action", "expected"), [("redact", {"data": "[REDACTED]"}), ("remove", {})])
def test_a_rule_on_the_payload_itself_stands(action: str, expected: dict[str, str]) -> None:
    """A rule that removes or replaces the payload whole is not undone by reading the text inside it."""
    policy = RedactionPolicy([Rule(action, paths=["/tool/arguments/file/data"]), Rule("redact", detector="email")])
    start = _tool_input({"file": {"media_type": "text/plain", "data": _b64(CSV)}}, policy)
    assert start.input == {"file": {"media_type": "text/plain", **expected}}


def test_a_pattern_that_matches_inside_the_encoding_does_not_keep_the_text_from_being_read() -> None:
    """A pattern matching a few characters of the base64 (here the encoding of "nam") changes those and
    leaves the rest decodable: the payload is read as text all the same."""
    payload = _b64(CSV)
    assert payload.startswith("bmFt")
    policy = RedactionPolicy([Rule("regex_replace", pattern="bmFt", replacement="#"), Rule("redact", detector="email")])
    data = _tool_input({"file": {"mime_type": "text/csv", "data": payload}}, policy).input["file"]["data"]
    assert base64.b64decode(data).decode() == f"name,email\nJane,{REDACTED}\n"


def _model_tool_call(arguments: str, relay_events: Recorder, tmp_path: Path) -> Any:
    """The end event of a model's tool call with ``arguments`` through the OpenAI SDK (no address left in the
    event, nor in the cassette recorded)."""
    session.SESSION_COORDINATOR.redaction.use(_policy())
    call = {"id": "c1", "name": "send", "arguments": arguments}
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body(None, tool_calls=[call])))
    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "mail"}]})
    (end,) = relay_events.ends(scope_type="llm")
    _assert_no_email("the end event", event_json(end) + repr(end.annotated_response) + repr(end.output))
    _assert_no_email("the cassette", cassette.read_text())
    return end


def test_json_text_with_a_key_given_twice_is_read_whole(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    """``json.loads`` keeps the last value of a key given twice: the first was never read, and the text went out
    as it was. Each value is read (under the key, as a list, so a rule naming the key reaches each)."""
    arguments = f'{{"to": "{EMAIL}", "to": "support", "cc": "team"}}'
    end = _model_tool_call(arguments, relay_events, tmp_path)
    assert json.loads(end.annotated_response.tool_calls[0]["arguments"]) == {"to": [REDACTED, "support"], "cc": "team"}
    payload = _tool_input({"payload": arguments}).input["payload"]
    assert payload == f'{{"to": ["{REDACTED}", "support"], "cc": "team"}}'
    policy = RedactionPolicy([Rule("remove", paths=["/tool/arguments/payload/to"])])
    assert _tool_input({"payload": arguments}, policy).input == {"payload": '{"cc": "team"}'}


@pytest.mark.parametrize("space", [" ", "\n", "\r\n\t "])
def test_json_text_after_whitespace_is_read_as_json(
    space: str, relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    """Escapes (``\\u0040`` for the ``@``) hide an address from rules reading the text as it is written."""
    arguments = space + '{"to": "jane.doe\\u0040example.com"}'
    end = _model_tool_call(arguments, relay_events, tmp_path)
    assert json.loads(end.annotated_response.tool_calls[0]["arguments"]) == {"to": REDACTED}
    assert _tool_input({"payload": arguments}).input == {"payload": f'{{"to": "{REDACTED}"}}'}
    assert _tool_input({"payload": space + "not json"}).input == {"payload": space + "not json"}
