"""A damaged Bedrock or Gemini cassette is a clear ``CassetteError`` naming the file, the entry and what is wrong,
as an OpenAI or Anthropic one is (test_cassettes_damage): never a raw error from inside botocore or google-genai
(AttributeError, binascii.Error, JSONDecodeError, TypeError, APIError, ReadError), nor an answer played wrong."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t
from tests import genai_support as genai
from tests.bedrock_support import MODEL, BedrockServer, converse_body, json_reply, stream_reply, text_events
from tests.cassette_support import Edit, drop_body_then, set_field

MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]


def _no_status_error_text(exchange: dict[str, Any]) -> None:
    exchange.pop("status", None)
    exchange["error"] = "boom"


def _each_event(edit: Callable[[Any], Any]) -> Edit:
    return lambda exchange: [edit(event) for event in exchange["events"]]


def _payload_base64(event: dict[str, Any]) -> None:
    event.pop("json", None)
    event["base64"] = "!!not base64!!"


# Each was seen played as a raw error from inside the SDK, or as a wrong answer with no error at all.
ANSWER_DAMAGE: dict[str, tuple[Edit, str]] = {
    "no status, error a string": (_no_status_error_text, "error must be an object"),
    "headers a list": (set_field("headers", [1]), "headers must be an object of strings"),
    "a header value an object": (set_field("headers", {"content-type": {"x": 1}}), "headers must be an object of"),
    "no body": (drop_body_then(), "a 2xx JSON answer has no body"),
    "body a string": (set_field("body", "x"), "a 2xx JSON answer's body must be an object"),
    "base64 junk": (drop_body_then("base64", "!!not base64!!"), "base64 is not base64"),
    "status -1": (set_field("status", -1), "status -1 is not an HTTP status"),
    "status 99999": (set_field("status", 99999), "status 99999 is not an HTTP status"),
    "events not a list": (drop_body_then("events", "x"), "events must be a list"),
    "events junk items": (drop_body_then("events", [1, "x", None]), "events[0] must be"),
}
# A stream's events, in each provider's own shape: Bedrock's event-stream messages, Gemini's chunks.
BEDROCK_STREAM_DAMAGE: dict[str, tuple[Edit, str]] = {
    "an event no object": (set_field("events", ["x"]), "events[0] must be an object"),
    "event headers a list": (_each_event(lambda e: e.__setitem__("headers", [])), "events[0].headers must be"),
    "event header name too long": (
        _each_event(lambda e: e.__setitem__("headers", {"n" * 300: "v"})),
        "events[0].headers must be an object of strings (names up to 255 bytes)",
    ),
    "event headers empty": (_each_event(lambda e: e.__setitem__("headers", {})), "events[0].headers has no :message"),
    "event payload a string": (_each_event(lambda e: e.__setitem__("json", "x")), "events[0].json must be an object"),
    "event payload base64 junk": (_each_event(_payload_base64), "events[0].base64 is not base64"),
}
GEMINI_STREAM_DAMAGE: dict[str, tuple[Edit, str]] = {
    "a chunk no JSON": (set_field("events", ["{nope"]), "events[0] must be a JSON object"),
    "a chunk a number": (set_field("events", [1, 2]), "events[0] must be a JSON object"),
    "a later chunk a list": (lambda e: e["events"].append([1]), "events[2] must be a JSON object"),
}


def _damage(path: Path, edit: Edit) -> None:
    document = json.loads(path.read_text())
    edit(document["calls"][0]["http"][0])
    path.write_text(json.dumps(document))


def _assert_named(error: BaseException, path: Path, problem: str) -> None:
    assert type(error) is cassettes.CassetteError, repr(error)
    assert f"cassette {path}: call #1: http[0] is damaged: {problem}" in str(error), str(error)


# -- Bedrock: a real boto3 client, recorded against the loopback server, replayed with it closed ----------


@pytest.fixture()
def bedrock_server() -> Iterator[BedrockServer]:
    server = BedrockServer()
    yield server
    server.close()


def _bedrock_call(client: Any, stream: bool) -> Any:
    if stream:
        return list(client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"])
    return client.converse(modelId=MODEL, messages=MESSAGES)["output"]


def _bedrock_damaged(server: BedrockServer, path: Path, stream: bool, edit: Edit) -> BaseException:
    server.replies.append(stream_reply(text_events(["re", "corded"])) if stream else json_reply(converse_body("hi")))
    with cassettes.use(path, mode="record"):
        _bedrock_call(adapters.instrument(server.client()), stream)
    _damage(path, edit)
    offline = adapters.instrument(server.client())
    server.close()  # nothing answers now: a try that got past the tape would fail otherwise
    with pytest.raises(Exception) as failure, cassettes.use(path, mode="replay"):
        _bedrock_call(offline, stream)
    return failure.value


@pytest.mark.parametrize("damage", sorted(ANSWER_DAMAGE))
def test_a_damaged_bedrock_answer_is_a_cassette_error(relay_turn, bedrock_server, tmp_path, damage) -> None:
    edit, problem = ANSWER_DAMAGE[damage]
    path = tmp_path / "bedrock.json"
    _assert_named(_bedrock_damaged(bedrock_server, path, False, edit), path, problem)


@pytest.mark.parametrize("damage", sorted(BEDROCK_STREAM_DAMAGE))
def test_a_damaged_bedrock_stream_is_a_cassette_error(relay_turn, bedrock_server, tmp_path, damage) -> None:
    edit, problem = BEDROCK_STREAM_DAMAGE[damage]
    path = tmp_path / "bedrock.json"
    _assert_named(_bedrock_damaged(bedrock_server, path, True, edit), path, problem)


# -- Gemini: a real google-genai client over a scripted transport, replayed over one that answers nothing --


def _gemini_call(client: Any, stream: bool) -> Any:
    if stream:
        return [chunk.text for chunk in client.models.generate_content_stream(model=genai.MODEL, contents="hi")]
    return client.models.generate_content(model=genai.MODEL, contents="hi").text


def _gemini_damaged(path: Path, stream: bool, edit: Edit) -> BaseException:
    reply = t.sse_reply(genai.stream_frames(["re", "corded"])) if stream else t.json_reply(genai.response_body("hi"))
    with cassettes.use(path, mode="record"):
        _gemini_call(adapters.instrument(genai.gemini_client(t.Script([reply]))), stream)
    _damage(path, edit)
    offline_script = t.Script()  # answers nothing: a try that got past the tape fails the test
    offline = adapters.instrument(genai.gemini_client(offline_script))
    with pytest.raises(Exception) as failure, cassettes.use(path, mode="replay"):
        _gemini_call(offline, stream)
    assert offline_script.requests == []
    return failure.value


@pytest.mark.parametrize("damage", sorted(ANSWER_DAMAGE))
def test_a_damaged_gemini_answer_is_a_cassette_error(relay_turn, tmp_path, damage) -> None:
    edit, problem = ANSWER_DAMAGE[damage]
    path = tmp_path / "genai.json"
    _assert_named(_gemini_damaged(path, False, edit), path, problem)


@pytest.mark.parametrize("damage", sorted(GEMINI_STREAM_DAMAGE))
def test_a_damaged_gemini_stream_is_a_cassette_error(relay_turn, tmp_path, damage) -> None:
    edit, problem = GEMINI_STREAM_DAMAGE[damage]
    path = tmp_path / "genai.json"
    _assert_named(_gemini_damaged(path, True, edit), path, problem)


def test_undamaged_recordings_still_replay(relay_turn, bedrock_server, tmp_path) -> None:
    # The checks are no stricter than what is recorded: each provider's answer and stream replay as recorded.
    for stream in (False, True):
        path = tmp_path / f"bedrock-{stream}.json"
        bedrock_server.replies.append(stream_reply(text_events(["a", "b"])) if stream else json_reply(converse_body()))
        with cassettes.use(path, mode="record"):
            live = _bedrock_call(adapters.instrument(bedrock_server.client()), stream)
        with cassettes.use(path, mode="replay"):
            assert _bedrock_call(adapters.instrument(bedrock_server.client()), stream) == live
        path = tmp_path / f"genai-{stream}.json"
        reply = t.sse_reply(genai.stream_frames(["a", "b"])) if stream else t.json_reply(genai.response_body("ab"))
        with cassettes.use(path, mode="record"):
            live = _gemini_call(adapters.instrument(genai.gemini_client(t.Script([reply]))), stream)
        with cassettes.use(path, mode="replay"):
            assert _gemini_call(adapters.instrument(genai.gemini_client(t.Script())), stream) == live
