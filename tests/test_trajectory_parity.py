"""Runs NeMo Relay's ATIF exporter records differently from ours unless we take care: tool calls whose
arguments are no JSON object, Anthropic's cache tokens, and a conversation that interleaves other calls.

Each scenario goes through our relay (a real SDK client on the mock transport) and through NeMo
Relay's ``llm.execute`` with the same provider bodies; the steps must say the same thing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from trajectory_support import MODEL, nemo_or_skip

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.trajectory import AtifExporter, validate_atif

CLAUDE = "claude-sonnet-4-5"
Call = tuple[dict[str, Any], dict[str, Any]]  # the request's kwargs, the provider's answer


@pytest.fixture(autouse=True)
def clean_sessions():
    session.reset_for_tests()
    yield
    session.reset_for_tests()


def _ours(calls: list[Call], *, provider: str = "openai") -> dict[str, Any]:
    """The calls, in order, as one turn through our relay; the live ATIF trajectory."""
    coordinator = session.SESSION_COORDINATOR
    exporter = AtifExporter().attach(coordinator)
    make: Callable[..., Any] = testing.scripted_anthropic if provider == "anthropic" else testing.scripted_openai
    scripted = make(*(testing.json_reply(body) for _, body in calls), max_retries=0)
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="p", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    try:
        for kwargs, _ in calls:
            adapters.complete(scripted.client, kwargs)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    exporter.detach()
    return exporter.export()


def _nemo(calls: list[Call], *, provider: str = "openai") -> dict[str, Any]:
    """The same calls through NeMo Relay's ``llm.execute`` under one agent scope; its ATIF trajectory."""
    nr = nemo_or_skip()
    codec = nr.codecs.AnthropicMessagesCodec() if provider == "anthropic" else nr.codecs.OpenAIChatCodec()
    exporter = nr.AtifExporter("p", "agent", "0")
    exporter.register("parity-atif")

    async def body() -> None:
        with nr.scope.scope("conversation", nr.ScopeType.Agent):
            for kwargs, answer in calls:

                async def provider_call(request: Any, answer: Any = answer) -> Any:
                    return answer

                await nr.llm.execute(
                    provider, nr.LLMRequest({}, kwargs), provider_call, codec=codec, response_codec=codec,
                    model_name=kwargs["model"],
                )  # fmt: skip

    try:
        asyncio.run(body())
        nr.subscribers.flush()
        return exporter.export()
    finally:
        exporter.deregister("parity-atif")


def _said(trajectory: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(s["source"], s["message"], s.get("tool_calls"), (s.get("metrics") or {}).get("prompt_tokens"),
             (s.get("metrics") or {}).get("completion_tokens")) for s in trajectory["steps"]]  # fmt: skip


@pytest.mark.parametrize("arguments", ['{"city": "Par', "[1, 2]", "null", "5", ""])
def test_tool_call_arguments_that_are_no_json_object_are_an_object_as_nemo_writes_them(arguments):
    question = {"model": MODEL, "messages": [{"role": "user", "content": "weather?"}]}
    answer = testing.chat_completion_body(
        None, model=MODEL, tool_calls=[{"id": "call_1", "name": "weather", "arguments": arguments}]
    )
    ours, nemo = _ours([(question, answer)]), _nemo([(question, answer)])
    assert validate_atif(ours) == []  # ATIF's arguments are an object: a string or a list is no valid file
    assert ours["steps"][1]["tool_calls"] == nemo["steps"][1]["tool_calls"]
    expected = {"raw": arguments} if arguments in ('{"city": "Par', "") else {"value": json.loads(arguments)}
    assert ours["steps"][1]["tool_calls"][0]["arguments"] == expected


def test_an_anthropic_steps_prompt_tokens_count_its_cached_input_as_nemo_counts_them():
    # Anthropic's input_tokens leave out what was read from and written to the cache: 30 + 100 + 50 were sent.
    question = {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    usage = testing.anthropic_usage(30, 9, cache_read=100, cache_creation=50)
    answer = testing.anthropic_message_body("hello", model=CLAUDE, usage=usage)
    ours, nemo = _ours([(question, answer)], provider="anthropic"), _nemo([(question, answer)], provider="anthropic")
    assert _said(ours) == _said(nemo)
    assert ours["steps"][1]["metrics"]["prompt_tokens"] == 180
    assert ours["final_metrics"]["total_prompt_tokens"] == nemo["final_metrics"]["total_prompt_tokens"] == 180
    assert ours["steps"][1]["metrics"]["extra"]["total_tokens"] == 189


_AGENTS_SYSTEM = {"role": "system", "content": "You are the agent."}


def _loop_with_side_calls(side_system: dict[str, str]) -> tuple[list[Call], list[dict[str, Any]]]:
    """An agent's loop that asks for a tool, ten side calls (one per document, opening with ``side_system``), and
    the loop's next call; with the loop's last request."""
    loop: list[dict[str, Any]] = [_AGENTS_SYSTEM, {"role": "user", "content": "Summarize my files."}]
    asks = testing.chat_completion_body(None, model=MODEL, tool_calls=[{"id": "c1", "name": "docs", "arguments": "{}"}])
    calls: list[Call] = [({"model": MODEL, "messages": list(loop)}, asks)]
    for i in range(10):
        side = [side_system, {"role": "user", "content": f"document {i}"}]
        calls.append(({"model": MODEL, "messages": side}, testing.chat_completion_body(f"summary {i}", model=MODEL)))
    loop += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "docs", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ten summaries"},
    ]  # fmt: skip
    calls.append(({"model": MODEL, "messages": list(loop)}, testing.chat_completion_body("Done.", model=MODEL)))
    return calls, loop


def test_side_calls_between_two_calls_of_the_agents_loop_do_not_make_the_user_say_it_again(tmp_path):
    # The loop asks for a tool, the tool summarizes ten documents (an LLM call each, opening with another
    # system prompt), the loop goes on: the user asked once, whatever came between.
    from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber
    from relay_runtime.integrations.trajectory import atif_from_journal, atof_from_journal

    calls, loop = _loop_with_side_calls({"role": "system", "content": "Summarize."})
    store = FileStore(tmp_path)
    journal = JournalSubscriber(store=store).attach(session.SESSION_COORDINATOR)
    ours, nemo = _ours(calls), _nemo(calls)
    assert journal.close()
    said = [(s["source"], s["message"]) for s in ours["steps"]]
    assert said.count(("user", "Summarize my files.")) == 1
    assert said == [(s["source"], s["message"]) for s in nemo["steps"]]
    assert atif_from_journal("p", "r1", store=store) == ours
    # The last request, rebuilt from the journal's deltas, is what was sent; its row held only what was new.
    (last,) = [e for e in atof_from_journal("p", "r1", store=store) if e["category"] == "llm"][-2:-1]
    assert last["data"]["content"]["messages"] == loop
    rows = [r["payload"]["traj"] for r in store.read("p", "r1")["events"] if "traj" in r.get("payload", {})]
    assert [len(t["req"]["new"]) for t in rows if t["k"] == "attempt"][-1] == 2


def test_side_calls_opening_with_the_agents_own_system_prompt_do_not_make_the_user_say_it_again(tmp_path):
    # A fan-out of more side calls than a conversation's requests are compared with, each opening with the
    # loop's own system prompt: the loop's last request was no longer at hand, and its next one was written
    # against a side call's, the user's question in it as new.
    from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber
    from relay_runtime.integrations.trajectory import atif_from_journal, atof_from_journal

    calls, loop = _loop_with_side_calls(_AGENTS_SYSTEM)
    store = FileStore(tmp_path)
    journal = JournalSubscriber(store=store).attach(session.SESSION_COORDINATOR)
    ours = _ours(calls)
    assert journal.close()
    said = [(s["source"], s["message"]) for s in ours["steps"]]
    assert said.count(("user", "Summarize my files.")) == 1
    assert said[-2:] == [("agent", "summary 9"), ("agent", "Done.")]
    assert atif_from_journal("p", "r1", store=store) == ours
    (last,) = [e for e in atof_from_journal("p", "r1", store=store) if e["category"] == "llm"][-2:-1]
    assert last["data"]["content"]["messages"] == loop
    assert said == [(s["source"], s["message"]) for s in _nemo(calls)["steps"]]
