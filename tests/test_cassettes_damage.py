"""A bad cassette is a clear ``CassetteError`` naming the file, the entry and what is wrong; a name no file system
can hold is refused before any call; a miss on a big cassette diffs only the few closest recordings."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Offline, drop_body_then, set_field

pytest_plugins = ["pytester"]


def _each_event(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda exchange: [event.__setitem__(field, value) for event in exchange["events"]]


# What was seen to raise raw AttributeError / KeyError / JSONDecodeError / OverflowError / InvalidURL.
ANSWER_DAMAGE = {
    "body a list": (set_field("body", [1, 2]), "body must be an object"),
    "body a string": (set_field("body", "x"), "body must be an object"),
    "no body": (drop_body_then(), "has no body"),
    "text that is no JSON": (drop_body_then("text", "{nope"), "text is not the JSON"),
    "latency past the clock": (set_field("latency_ms", 1e308), "latency_ms 1e+308 is not a number of milliseconds"),
    "status a float": (set_field("status", 200.0), "status 200.0 is not an HTTP status"),
    "no status nor error": (lambda e: e.pop("status"), "neither a status nor a recorded error"),
    "path no path": (set_field("path", "http://[::1"), "must be a string beginning with '/'"),
}
STREAM_DAMAGE = {
    "data broken JSON": (_each_event("data", "{bad"), "events[0].data is JSON text that does not parse"),
    "event time past the clock": (_each_event("at_ms", 1e308), "events[0].at_ms 1e+308"),
    "empty events": (set_field("events", [{}, {}]), "events[0] has neither data nor an event name"),
    "events not objects": (set_field("events", [1, 2]), "events[0] must be an object"),
}


def _recorded(tmp_path: Path, api_name: str, stream: bool) -> Path:
    api = APIS[api_name]
    live = api.scripted(api.stream_reply(["a", "b"]) if stream else api.reply("hi"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        if stream:
            list(adapters.stream(live.client, api.kwargs, api_mode=api.api_mode))
        else:
            adapters.complete(live.client, api.kwargs, api_mode=api.api_mode)
    return path


def _damaged_replay(path: Path, api_name: str, stream: bool, edit: Callable[[dict[str, Any]], None], timing: str):
    document = json.loads(path.read_text())
    edit(document["calls"][0]["http"][0])
    path.write_text(json.dumps(document))
    api = APIS[api_name]
    offline = Offline()
    client, _ = offline.clients(api.sdk)
    with pytest.raises(cassettes.CassetteError) as failure, cassettes.use(path, timing=timing):
        if stream:
            list(adapters.stream(client, api.kwargs, api_mode=api.api_mode))
        else:
            adapters.complete(client, api.kwargs, api_mode=api.api_mode)
    assert offline.requests == []
    return failure.value


@pytest.mark.parametrize("timing", ["instant", "recorded"])
@pytest.mark.parametrize("damage", sorted(ANSWER_DAMAGE))
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_damaged_answer_is_a_cassette_error_naming_file_entry_and_problem(tmp_path, api_name, damage, timing):
    edit, problem = ANSWER_DAMAGE[damage]
    path = _recorded(tmp_path, api_name, stream=False)
    error = _damaged_replay(path, api_name, False, edit, timing)
    assert type(error) is cassettes.CassetteError
    assert f"cassette {path}: call #1: http[0] is damaged: " in str(error) and problem in str(error), str(error)


@pytest.mark.parametrize("timing", ["instant", "recorded"])
@pytest.mark.parametrize("damage", sorted(STREAM_DAMAGE))
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_damaged_stream_is_a_cassette_error_naming_file_entry_and_problem(tmp_path, api_name, damage, timing):
    edit, problem = STREAM_DAMAGE[damage]
    path = _recorded(tmp_path, api_name, stream=True)
    error = _damaged_replay(path, api_name, True, edit, timing)
    assert f"cassette {path}: call #1: http[0] is damaged: " in str(error) and problem in str(error), str(error)


def test_a_call_whose_tries_are_no_list_is_named(tmp_path) -> None:
    path = _recorded(tmp_path, "chat", stream=False)
    document = json.loads(path.read_text())
    document["calls"][0]["http"] = 5
    path.write_text(json.dumps(document))
    client, _ = Offline().clients("openai")
    with pytest.raises(cassettes.CassetteError, match=r"call #1: 'http' must be a list, not int"), cassettes.use(path):
        adapters.complete(client, APIS["chat"].kwargs)


@pytest.mark.parametrize(
    ("name", "problem"),
    [("x" * 300 + ".json", "a file name is at most 255"), ("a\0b.json", "NUL"), ("d/" * 2100 + "c.json", "4096")],
)
def test_a_name_no_file_system_can_hold_is_refused_at_use(tmp_path, name, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        cassettes.use(tmp_path / name, mode="record")
    assert not list(tmp_path.iterdir())


def test_a_marker_name_too_long_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_long=f"""
import pytest

@pytest.mark.relay_cassette("{"n" * 200}")
def test_it():
    pass
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new")
    result.stdout.fnmatch_lines(["*relay_cassette name is 200 characters long; at most 120*"])
    assert result.ret != 0


def test_a_miss_on_a_big_cassette_diffs_only_the_closest_few(tmp_path, monkeypatch) -> None:
    def ask(n: int, extra: str = "") -> dict[str, Any]:
        history = [{"role": "user", "content": f"task {n} step {i}: {'data ' * 20}"} for i in range(6)]
        history[3]["content"] += extra
        return {"model": "m", "messages": history}

    script = t.Script([t.json_reply(t.chat_completion_body("ok")) for _ in range(60)])
    client = t.openai_client(script)
    path = tmp_path / "big.json"
    with cassettes.use(path, mode="record"):
        for n in range(60):
            adapters.complete(client, ask(n))
    diffed: list[int] = []
    ratio = difflib.SequenceMatcher.ratio

    def counted(self: difflib.SequenceMatcher[str]) -> float:
        diffed.append(1)
        return ratio(self)

    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", counted)
    with pytest.raises(cassettes.CassetteMiss) as miss, cassettes.use(path):
        adapters.complete(client, ask(41, extra=" changed"))
    assert "closest recorded call (#42 of 60)" in str(miss.value)
    assert '+      "content": "task 41 step 3:' in str(miss.value)
    assert len(diffed) <= 4  # not one line diff per recording
