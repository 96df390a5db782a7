# ruff: noqa: F811 - the fixtures imported from redis_support are parameters of the tests below
"""An execution intercept that catches its provider's error and answers in its place (a cached or canned
answer): the answer the agent got is the call's answer in every record, the live ATIF, the journal's rows
(a token row, the summary's last_assistant_text) and the ATIF rebuilt from the journal alike."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion
from redis_support import journal_store, redis_server  # noqa: F401 - fixtures

from relay_runtime import LLMRequest, Recorder, adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.run_journal import JournalSubscriber, latest_run_summary
from relay_runtime.integrations.trajectory import AtifExporter, atif_from_journal, validate_atif

MODEL = "gpt-4o-mini"
CACHED = ChatCompletion.model_validate(testing.chat_completion_body("from the cache", model="cache-model"))


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def fallback(name: str, request: LLMRequest, call_next: Any) -> Any:
    try:
        return call_next(request)
    except openai.APIStatusError:
        return CACHED


async def fallback_async(name: str, request: LLMRequest, call_next: Any) -> Any:
    try:
        return await call_next(request)
    except openai.APIStatusError:
        return CACHED


def one_turn(scripted: Any, sid: str, intercept: Any, *, mode: str = "sync", content: str = "q", events: Any = None):
    """One call through ``scripted``'s client in a turn of its own (session ``sid``, turn ``run-<sid>``), with
    ``intercept`` registered as the relay's execution intercept ``cache`` (and ``events`` subscribed): the call's
    reply."""
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id=sid, platform="t")
    relay = lease.host.relay
    if events is not None:
        relay.subscribers.register(events, name="test.events")
    relay.intercepts.register_llm_execution("cache", 0, intercept)
    turn = coordinator.begin_turn(lease, turn_id=f"run-{sid}", task_id="t")
    try:
        kwargs = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
        if mode == "async":
            reply = asyncio.run(adapters.acomplete(scripted.aclient, kwargs))
        else:
            reply = adapters.complete(scripted.client, kwargs)
        coordinator.end_turn(turn, outcome="success")
    finally:
        coordinator.release_conversation(lease)
        if events is not None:
            relay.subscribers.deregister("test.events")
        scripted.client.close()
    return reply


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fallback_answer_is_the_calls_answer_live_in_the_journal_and_rebuilt(mode, journal_store):
    coordinator = session.SESSION_COORDINATOR
    atif = AtifExporter(model_name=MODEL).attach(coordinator)
    journal = JournalSubscriber(store=journal_store).attach(coordinator)
    scripted = testing.scripted_openai(testing.error(503, "model overloaded"), max_retries=0)
    intercept = fallback_async if mode == "async" else fallback
    assert one_turn(scripted, "fb", intercept, mode=mode, content="what is cached?") is CACHED  # the fallback
    assert journal.close()
    live = atif.export("fb")
    (step,) = [s for s in live["steps"] if s["source"] == "agent"]
    assert step["message"] == "from the cache"
    assert step["extra"]["fallback"] == "cache" and step["model_name"] == "cache-model"
    assert step["extra"]["error"]["type"] == "InternalServerError"  # the provider's failure stays on record
    assert validate_atif(live) == []
    # The journal holds the answer too: its token row, and the run's last assistant text.
    rows = journal_store.read("fb", "run-fb")["events"]
    assert [r["payload"]["text"] for r in rows if r["event"] == "token"] == ["from the cache"]
    summary = journal_store.summary("fb", "run-fb")
    assert summary["last_assistant_text"] == "from the cache" and summary["terminal_state"] == "completed"
    # Rebuilt from the journal, the trajectory is the live one.
    assert atif_from_journal("fb", "run-fb", store=journal_store, model_name=MODEL) == live


def test_a_fallback_answer_reaches_the_records_through_the_redaction_policy(tmp_path):
    from relay_runtime.redaction import RedactionPolicy, Rule

    email = "jane.doe@example.com"
    secret = ChatCompletion.model_validate(testing.chat_completion_body(f"mail {email}", model="cache-model"))

    def answer_with_secret(name: str, request: LLMRequest, call_next: Any) -> Any:
        try:
            return call_next(request)
        except openai.APIStatusError:
            return secret

    coordinator = session.SESSION_COORDINATOR
    coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    atif = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    scripted = testing.scripted_openai(testing.error(500), max_retries=0)
    one_turn(scripted, "rd", answer_with_secret)
    assert journal.close()
    (step,) = [s for s in atif.export("rd")["steps"] if s["source"] == "agent"]
    assert step["message"] == "mail [REDACTED:email]"
    written = "".join(p.read_text() for p in tmp_path.rglob("*.jsonl"))
    assert "mail [REDACTED:email]" in written and email not in written


def keep_the_first(name: str, request: LLMRequest, call_next: Any) -> Any:
    first = call_next(request)
    call_next(request)  # a second opinion, weighed and not taken
    return first


async def keep_the_first_async(name: str, request: LLMRequest, call_next: Any) -> Any:
    first = await call_next(request)
    await call_next(request)
    return first


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_intercept_keeping_an_earlier_calls_answer_leaves_each_attempt_its_own(mode, tmp_path):
    """An intercept that asks twice and keeps the first answer: the second attempt was recorded with the first
    call's answer (its own, which its provider gave and was billed for, was in no record), and the trajectory's
    step said the second answer, which the agent never got. Each attempt now holds its own answer; the answer the
    agent got is the call's, as a fallback's is."""
    coordinator = session.SESSION_COORDINATOR
    atif = AtifExporter(model_name=MODEL).attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    scripted = testing.scripted_openai(
        testing.json_reply(testing.chat_completion_body("first opinion", model=MODEL, id="c-1")),
        testing.json_reply(testing.chat_completion_body("second opinion", model=MODEL, id="c-2")),
        max_retries=0,
    )
    events = Recorder()
    intercept = keep_the_first_async if mode == "async" else keep_the_first
    reply = one_turn(scripted, "op", intercept, mode=mode, content="which?", events=events)
    assert reply.id == "c-1"  # the agent got the first answer
    assert journal.close()
    attempts = [e for e in events.ends() if e.scope_type == "llm"]
    assert [(e.outcome, e.annotated_response.id, e.annotated_response.output_text) for e in attempts] == [
        ("success", "c-1", "first opinion"),
        ("success", "c-2", "second opinion"),
    ]
    live = atif.export("op")
    (step,) = [s for s in live["steps"] if s["source"] == "agent"]
    assert step["message"] == "first opinion" and step["extra"]["attempts"] == 2
    assert validate_atif(live) == []
    # Rebuilt from the journal, the trajectory is the live one.
    assert atif_from_journal("op", "run-op", session_dir=tmp_path, model_name=MODEL) == live


def keep_the_second(name: str, request: LLMRequest, call_next: Any) -> Any:
    call_next(request)
    return call_next(request)


@pytest.mark.parametrize(
    ("intercept", "answer"), [(keep_the_second, "second opinion"), (keep_the_first, "first opinion")]
)
def test_the_journal_says_the_answer_the_agent_got_of_a_call_answered_twice(intercept, answer, tmp_path):
    """Both answers of a call asked twice were the run's text (``first opinionsecond opinion``), as if the agent
    had said both; the journal's last assistant text is now the one the agent got."""
    coordinator = session.SESSION_COORDINATOR
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    scripted = testing.scripted_openai(
        testing.json_reply(testing.chat_completion_body("first opinion", model=MODEL)),
        testing.json_reply(testing.chat_completion_body("second opinion", model=MODEL)),
        max_retries=0,
    )
    assert one_turn(scripted, "tw", intercept, content="which?").choices[0].message.content == answer
    assert journal.close()
    assert latest_run_summary("tw", "run-tw", session_dir=tmp_path)["last_assistant_text"] == answer
