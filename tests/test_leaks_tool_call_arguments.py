"""The tool calls a model made hold no value its tool's own record blanks.

A tool's arguments are recorded with credential-keyed values blanked (``{"password": "[redacted]"}``), and the
OTel content capture blanks them in the answer's tool calls too; but the answer's tool calls reached the event's
annotation, the journal's ``tool_call`` row and the ATIF step (live and rebuilt) as the model wrote them. A model
that read a password from one tool's result (blanked in that result's records) and passed it to the next tool
put it back in every one of those records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter, atif_from_journal
from relay_runtime.recorder import Recorder
from relay_runtime.redaction import RedactionPolicy, Rule

PASSWORD = "pw-from-the-vault-Zx9Qw8"
TOKEN = "ghp_toolcallToken0123456789"
EMAIL = "ada.lovelace@example.com"


@pytest.fixture(autouse=True)
def clean_sessions() -> Iterator[None]:
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def _ask(arguments: Any, shape: str) -> None:
    """An answer asking for ``login(arguments)`` (the answer's text names an e-mail address), from a scripted client."""
    if shape == "anthropic":
        use = {"id": "toolu_1", "name": "login", "input": arguments}
        first = t.anthropic_message_body(f"Logging in as {EMAIL}.", tool_use=use, stop_reason="tool_use")
        scripted = t.scripted_anthropic(t.json_reply(first))
        adapters.complete(
            scripted.client, {"model": "c", "max_tokens": 64, "messages": [{"role": "user", "content": "go"}]}
        )
        return
    call = {"id": "call_1", "name": "login", "arguments": json.dumps(arguments)}
    ask = {"model": "gpt-x", "messages": [{"role": "user", "content": "log in"}]}
    if shape == "openai-streamed":
        chunks = t.chat_chunks([f"Logging in as {EMAIL}."], tool_call=call, finish_reason="tool_calls")
        scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
        for _chunk in adapters.stream(scripted.client, ask):
            pass
        return
    first = t.chat_completion_body(f"Logging in as {EMAIL}.", tool_calls=[call], finish_reason="tool_calls")
    adapters.complete(t.scripted_openai(t.json_reply(first)).client, ask)


@pytest.mark.parametrize("policy", [False, True], ids=["no-policy", "a-policy-changing-the-text"])
@pytest.mark.parametrize("shape", ["openai", "openai-streamed", "anthropic"])
def test_a_models_tool_call_is_recorded_with_its_credential_arguments_blanked(
    tmp_path: Path, shape: str, policy: bool
) -> None:
    coordinator = session.SESSION_COORDINATOR
    if policy:  # the policy reads the answer's text and tool calls alone, and builds the view from them
        coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    atif = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="s", platform="t")
    recorder = Recorder()
    lease.host.relay.subscribers.register(recorder, name="test.recorder")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    arguments = {"user": "ada", "password": PASSWORD, "options": {"github_token": TOKEN, "retries": 2}}
    _ask(arguments, shape)
    lease.host.relay.tools.execute("login", arguments, lambda given: "ok", tool_call_id="call_1")
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    assert journal.close()

    (asked,) = recorder.ends(relay_kind=cv.ATTEMPT)[0].annotated_response.tool_calls
    recorded = asked["arguments"] if shape == "anthropic" else json.loads(asked["arguments"])
    assert recorded == {
        "user": "ada", "password": redaction.REDACTED, "options": {"github_token": redaction.REDACTED, "retries": 2}
    }  # fmt: skip
    assert recorder.starts(name="login")[0].input["password"] == redaction.REDACTED  # as the tool's own record
    texts = {
        "events": repr([e.annotated_response for e in recorder.ends(relay_kind=cv.ATTEMPT)]),
        "journal": "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file()),
        "atif": json.dumps(atif.export()),
        "atif rebuilt": json.dumps(atif_from_journal("s", session_dir=tmp_path)),
    }
    for where, text in texts.items():
        for secret in (PASSWORD, TOKEN) + ((EMAIL,) if policy else ()):
            assert secret not in text, f"{secret!r} is in {where}"
    assert arguments["password"] == PASSWORD  # the tool got its arguments as they were
