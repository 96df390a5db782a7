"""What the SDK sends beside the view (``extra_body``, ``extra_query``) is read as ``/request/params`` in events
as it is in cassettes: a path rule on a param reaches it in every sink, and in the recorded URL's query."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.jsonl import event_json
from relay_runtime.redaction import RedactionPolicy, Rule
from relay_runtime.redaction_policy import RedactionPathWarning

ACCOUNT = "ACCT-7731-ZULU"


def _call(client: Any, extra: dict[str, Any]) -> None:
    adapters.complete(client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], **extra})


@pytest.mark.parametrize("extra", ["extra_body", "extra_query"])
def test_a_path_rule_on_a_param_sent_beside_the_view_reaches_events_and_the_cassette(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path, extra: str
) -> None:
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/params/account_id"])]))
    reply = testing.json_reply(testing.chat_completion_body("ok"))
    scripted = testing.scripted_openai(reply, reply)
    cassette = tmp_path / "cassette.json"
    sent = {extra: {"account_id": ACCOUNT, "region": "eu"}}
    with cassettes.use(cassette, mode="record"):
        _call(scripted.client, sent)

    start = relay_events.starts(scope_type="llm")[0]
    assert start.input["content"][extra] == {"account_id": "[REDACTED]", "region": "eu"}
    assert ACCOUNT not in event_json(start)
    stored = cassette.read_text()
    assert ACCOUNT not in stored
    assert json.loads(stored)["calls"][0]["request"][extra]["account_id"] == "[REDACTED]"
    wire = scripted.script.requests[0]
    assert ACCOUNT in str(wire.url) + wire.content.decode()  # the provider got the value
    with cassettes.use(cassette, mode="replay"):
        _call(scripted.client, sent)  # what was stored replays
    assert len(scripted.script.requests) == 1


def test_the_recorded_query_keeps_the_parameters_no_rule_changed(relay_turn: Any, tmp_path: Path) -> None:
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/params/account_id"])]))
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        _call(scripted.client, {"extra_query": {"account_id": ACCOUNT, "region": "eu west", "n": 3}})
    (http,) = json.loads(cassette.read_text())["calls"][0]["http"]
    assert http["path"] == "/v1/chat/completions?account_id=%5BREDACTED%5D&region=eu+west&n=3"


def test_a_path_through_extra_body_is_a_warning_naming_the_param_path() -> None:
    with pytest.warns(RedactionPathWarning, match="did you mean /request/params/account_id"):
        RedactionPolicy([Rule("redact", paths=["/request/params/extra_body/account_id"])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RedactionPolicy([Rule("redact", paths=["/request/params/account_id"])])
