"""A non-streamed answer's reasoning is its ATIF step's ``reasoning_content``, through the redaction policy.

The trajectory took reasoning from stream chunk marks only: an answer given whole (an Anthropic ``thinking``
block, an OpenAI-compatible message's ``reasoning_content``, a Gemini part marked ``thought``, a Responses API
reasoning summary, a Bedrock ``reasoningContent`` block) left its step without the reasoning it said, an
incomplete record. What a rule on ``/response/reasoning`` makes of it is what the step carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bedrock_support import MODEL as BEDROCK_MODEL
from bedrock_support import BedrockServer, converse_body
from bedrock_support import json_reply as bedrock_reply

from relay_runtime import adapters, session
from relay_runtime.adapters import google_genai, testing
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter, atif_from_journal, validate_atif
from relay_runtime.redaction import RedactionPolicy, Rule
from tests import genai_support
from tests.test_leaks_reasoning import ANSWER, ASK, EMAIL, THOUGHT, _anthropic, _openai_compatible


@pytest.fixture(autouse=True)
def clean_sessions() -> Iterator[None]:
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def _responses() -> None:
    body = testing.responses_body(ANSWER)
    summary = [{"type": "summary_text", "text": THOUGHT}]
    body["output"].insert(0, {"id": "rs_1", "type": "reasoning", "summary": summary})
    scripted = testing.scripted_openai(testing.json_reply(body))
    adapters.complete(scripted.client, {"model": "gpt-x", "input": "balance?"}, api_mode="responses")


def _gemini() -> None:
    script = testing.Script([testing.json_reply(genai_support.response_body(ANSWER, thought=THOUGHT))])
    client = google_genai.instrument_client(genai_support.gemini_client(script))
    client.models.generate_content(model=genai_support.MODEL, contents="balance?")


def _bedrock() -> None:
    server = BedrockServer()
    body = converse_body(ANSWER)
    body["output"]["message"]["content"].insert(0, {"reasoningContent": {"reasoningText": {"text": THOUGHT}}})
    server.replies.append(bedrock_reply(body))
    client = adapters.instrument(server.client())
    try:
        client.converse(modelId=BEDROCK_MODEL, messages=[{"role": "user", "content": [{"text": "balance?"}]}])
    finally:
        adapters.uninstrument(client)
        server.close()


CALLS = [_anthropic, _openai_compatible, _responses, _gemini, _bedrock]


def _run(tmp_path: Path, call: Callable[[], None], policy: RedactionPolicy | None = None) -> tuple[Any, Any]:
    coordinator = session.SESSION_COORDINATOR
    if policy is not None:
        coordinator.redaction.use(policy)
    atif = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(session_dir=tmp_path).attach(coordinator)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="s", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    call()
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    assert journal.close()
    return atif.export(), atif_from_journal("s", session_dir=tmp_path)


@pytest.mark.parametrize("call", CALLS)
def test_a_whole_answers_reasoning_is_its_steps_reasoning_content(tmp_path: Path, call: Callable[[], None]) -> None:
    live, rebuilt = _run(tmp_path, call)
    step = live["steps"][-1]
    assert step["source"] == "agent" and step["message"] == ANSWER
    assert step.get("reasoning_content") == THOUGHT
    assert validate_atif(live) == [] and rebuilt["steps"][-1]["reasoning_content"] == THOUGHT


@pytest.mark.parametrize("call", CALLS)
def test_the_steps_reasoning_is_what_the_policy_made_of_it(tmp_path: Path, call: Callable[[], None]) -> None:
    policy = RedactionPolicy([Rule("redact", detector="email", paths=["/response/reasoning"])])
    live, rebuilt = _run(tmp_path, call, policy)
    step = live["steps"][-1]
    reasoning = step.get("reasoning_content") or ""
    assert "check the ledger" in reasoning and EMAIL not in reasoning
    assert rebuilt["steps"][-1]["reasoning_content"] == reasoning


@pytest.mark.parametrize("call", CALLS)
def test_reasoning_a_rule_removes_is_in_no_step(tmp_path: Path, call: Callable[[], None]) -> None:
    policy = RedactionPolicy([Rule("remove", paths=["/response/reasoning"])])
    live, rebuilt = _run(tmp_path, call, policy)
    assert "ledger" not in repr(live) and "ledger" not in repr(rebuilt)
    assert live["steps"][-1]["message"] == ANSWER


def test_an_answer_echoing_the_clients_key_in_its_model_and_id_is_scrubbed_live_as_in_the_journal(
    tmp_path: Path,
) -> None:
    # The live exporter wrote the answer's model and id as the provider gave them; the journal's rows scrub every
    # string for the keys the relay remembered, so the two trajectories of one run differed, the live one leaking.
    key = testing.TEST_KEY

    def echoing() -> None:
        body = testing.chat_completion_body(ANSWER, model=f"gpt-x-{key}", id=f"chatcmpl-{key}")
        scripted = testing.scripted_openai(testing.json_reply(body))
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": ASK})

    live, rebuilt = _run(tmp_path, echoing)
    assert key[:12] not in repr(live)
    assert rebuilt == live
