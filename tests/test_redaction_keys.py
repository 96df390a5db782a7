"""A mapping's keys are text every sink writes (a dict of users keyed by e-mail): the rules that find values
read them too, in scopes, tools, metadata, JSON text and the SDK's own kwargs. They once passed whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_runtime import Recorder, Relay, ScopeType, adapters
from relay_runtime.adapters import testing
from relay_runtime.jsonl import event_json
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_policy import RULES_KEY

EMAIL = "jane.doe@example.com"
OTHER = "bob.stone@example.org"
REDACTED = "[REDACTED:email]"
POLICIES = {
    "detectors": lambda: RedactionPolicy([Rule("redact", detector="email")]),
    "paths": lambda: RedactionPolicy(
        [
            Rule("redact", detector="email", paths=["/input", "/tool/result"], name="in-data"),
            Rule("redact", detector="email", paths=["/metadata/*"], name="in-metadata"),
        ]
    ),
}


def _relay(policy: RedactionPolicy) -> tuple[Relay, Recorder]:
    relay = Relay()
    seen = Recorder()
    relay.subscribers.register(seen)
    relay.redaction.use(policy)
    return relay, seen


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_keys_of_inputs_tool_results_and_metadata_are_redacted_in_order(policy: Any) -> None:
    relay, seen = _relay(policy())
    users = {"first": 0, EMAIL: {"n": 1}, "last": 2}
    with relay.scope.scope("step", ScopeType.FUNCTION, input={"users": users}, metadata={EMAIL: "seen"}):
        pass
    relay.tools.execute("lookup", {"q": 1}, lambda args: {EMAIL: "found"})
    step, _, _, tool_end = seen.events
    assert list(step.input["users"]) == ["first", REDACTED, "last"]  # the entry keeps its place
    assert step.input["users"][REDACTED] == {"n": 1}
    assert step.metadata[REDACTED] == "seen" and tool_end.output == {REDACTED: "found"}
    assert sum(tool_end.metadata[RULES_KEY].values()) == 1
    assert not [e for e in seen.events if EMAIL in event_json(e)]
    assert EMAIL in users  # the caller's data is left as it was


CARD = 4111111111111111


@pytest.mark.parametrize("paths", [(), ("/tool/result",)], ids=["anywhere", "at-a-path"])
def test_a_big_number_keying_a_dict_is_read_as_the_text_every_sink_writes(paths: tuple[str, ...]) -> None:
    """A card number as an int key (accounts by number): JSON writes it as text, so the rules read it so."""
    relay, seen = _relay(RedactionPolicy([Rule("redact", detector="credit_card", paths=list(paths))]))
    accounts = {CARD: "visa", 42: "small", 1234567890123: "no card"}
    relay.tools.execute("accounts", {"q": 1}, lambda args: accounts)
    tool_end = seen.events[-1]
    assert list(tool_end.output) == ["[REDACTED:credit_card]", 42, 1234567890123]
    assert str(CARD) not in event_json(tool_end)
    assert CARD in accounts  # the tool's caller gets its data as it was


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_a_tuple_keying_a_dict_is_read_as_the_text_a_sink_prints_for_it(policy: Any) -> None:
    """A pair keying a dict (an address and a day), a frozenset of addresses: JSON cannot write such keys, and a
    sink that prints the mapping instead (the journal's record of what it cannot encode, a log line) writes the
    address in the key. Such a key is read as printed; only a key holding a value found becomes its text."""
    relay, seen = _relay(policy())
    visits = {(EMAIL, 3): "tuesday", (7, "plain"): "kept", frozenset({OTHER}): "group"}
    relay.tools.execute("visits", {"q": 1}, lambda args: visits)
    tool_end = seen.events[-1]
    assert tool_end.output == {
        f"('{REDACTED}', 3)": "tuesday",
        (7, "plain"): "kept",
        f"frozenset({{'{REDACTED}'}})": "group",
    }
    assert EMAIL not in repr(tool_end.output) and OTHER not in repr(tool_end.output)
    assert (EMAIL, 3) in visits  # the tool's caller gets its data as it was


def test_keys_that_become_one_are_told_apart_and_none_is_lost() -> None:
    relay, seen = _relay(POLICIES["detectors"]())
    with relay.scope.scope("step", ScopeType.FUNCTION, input={EMAIL: 1, OTHER: 2, REDACTED: 3}):
        pass
    assert seen.events[0].input == {REDACTED: 1, f"{REDACTED}#2": 2, f"{REDACTED}#3": 3}


def test_hashed_keys_stay_distinct_and_whole_string_rules_leave_keys_alone() -> None:
    relay, seen = _relay(
        RedactionPolicy([Rule("hash", detector="email"), Rule("redact", paths=["/input/note"])], hash_key="k" * 32)
    )
    with relay.scope.scope("step", ScopeType.FUNCTION, input={EMAIL: 1, OTHER: 2, "note": "whole"}):
        pass
    keys = list(seen.events[0].input)
    assert len(keys) == 3 and all(k.startswith("[email:") for k in keys[:2]) and keys[0] != keys[1]
    assert keys[2] == "note" and seen.events[0].input["note"] == "[REDACTED]"


def test_keys_in_json_text_and_in_the_sdks_own_kwargs(relay_turn, relay_events, scripted_openai) -> None:  # type: ignore[no-untyped-def]
    relay, _ = relay_turn
    relay.redaction.use(POLICIES["detectors"]())
    scripted_openai.add(testing.json_reply(testing.chat_completion_body("ok")))
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({EMAIL: "x"})}}
    messages = [
        {"role": "user", "content": "who?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    adapters.complete(scripted_openai.client, {"model": "m", "messages": messages, "metadata": {EMAIL: "v"}})
    sent = json.loads(scripted_openai.script.requests[0].content)
    assert EMAIL in sent["metadata"]  # the provider gets the request as it was
    start = relay_events.starts(relay_kind="llm_attempt")[0]
    assert EMAIL not in event_json(start) and EMAIL not in repr(start.input)
    assert start.metadata[RULES_KEY]["redact:email"] >= 2


def test_a_cassette_stores_keys_redacted_and_replays_under_the_same_policy(
    relay_turn, scripted_openai, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from relay_runtime import cassettes
    from tests.cassette_support import Offline

    relay, _ = relay_turn
    relay.redaction.use(POLICIES["detectors"]())
    body = testing.chat_completion_body("ok")
    body["metadata"] = {EMAIL: "echoed"}  # a provider echoing the request's metadata
    scripted_openai.add(testing.json_reply(body))
    kwargs = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {EMAIL: "v"}}
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        adapters.complete(scripted_openai.client, kwargs)
    assert EMAIL not in path.read_text() and REDACTED in path.read_text()
    offline, _ = Offline().clients("openai")
    with cassettes.use(path, mode="replay"):  # the live request's keys are redacted the same way to match
        replayed = adapters.complete(offline, kwargs)
    assert replayed.choices[0].message.content == "ok"
