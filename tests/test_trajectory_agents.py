"""An OpenAI Agents SDK run's trajectory holds what the user said, also under the trace processor alone.

Without ``adapters.instrument()`` each model call is an attempt the processor records from the SDK's
``response`` span, which holds the request only once the call is over. The attempt was recorded when the
span began, its start holding no request: the trajectory of a processor-only run had the agent act with
nobody having asked it anything, and the journal no prompt. With the processor alone (no tool wrapped),
the tools' ``function`` spans were scopes no trajectory took for tool calls: their results were missing.
Real ``openai-agents`` with an ``AsyncOpenAI`` client on the scripted mock transport, the ATIF exporter live.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations import openai_agents
from relay_runtime.integrations.openai_agents.processor import RelayTraceProcessor
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.integrations.trajectory.validate import validate_atif
from tests.framework_support import attempts, need

agents = need("agents")

from tests.test_frameworks_agents import helper, scripted, sdk_tracing  # noqa: E402, F401

QUESTION = "Weather in Paris?"
ARGUMENTS = json.dumps({"city": "Paris", "api_key": "sk-in-a-tool-argument-QwErTy"})


def replies(api: str) -> tuple[t.Reply, t.Reply]:
    if api == "chat":  # a Chat Completions model: its calls are ``generation`` spans
        call = {"id": "call-1", "name": "weather", "arguments": ARGUMENTS}
        return (
            t.json_reply(t.chat_completion_body(None, finish_reason="tool_calls", tool_calls=[call])),
            t.json_reply(t.chat_completion_body("Done.")),
        )
    call = {"call_id": "call-1", "name": "weather", "arguments": ARGUMENTS}
    return (
        t.json_reply(t.responses_body("", function_call=call)),
        t.json_reply(t.responses_body("Done.", usage=t.responses_usage(30, 3))),
    )


def run(*, sensitive: bool = True, api: str = "responses") -> t.Scripted:
    s = scripted(*replies(api))
    agent = helper()
    if api == "chat":
        agent = agent.clone(model=agents.OpenAIChatCompletionsModel("gpt-test", s.aclient))
    config = agents.RunConfig(trace_include_sensitive_data=sensitive)
    assert agents.Runner.run_sync(agent, QUESTION, run_config=config).final_output == "Done."
    return s


def conversation(
    host: session.Host, session_id: str, *, instrumented: bool, api: str
) -> tuple[dict[str, Any], list[Any]]:
    """The ATIF trajectory of one run in a conversation of its own, and its attempts' start events."""
    events = Recorder()
    exporter = AtifExporter().attach(host)
    name = host.relay.subscribers.register(events, name="test.starts")
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=session_id, platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id=f"{session_id}-turn", task_id="task")
    host.retain_managed_execution("test")
    try:
        if instrumented:
            adapters.instrument()
        openai_agents.instrument()
        run(api=api)
    finally:
        host.release_managed_execution("test")
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        openai_agents.uninstrument()
        adapters.uninstrument()
        host.relay.subscribers.deregister(name)
    trajectory = exporter.export()
    exporter.detach()
    return trajectory, events.starts(relay_kind=cv.ATTEMPT)


def steps(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps without what differs between two runs (ids, times)."""
    out = []
    for step in trajectory["steps"]:
        step = {k: v for k, v in step.items() if k not in ("timestamp", "extra")}
        for result in (step.get("observation") or {}).get("results", []):
            result.pop("extra", None)
        out.append(step)
    return out


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_processor_only_runs_trajectory_has_the_user_step_as_under_instrument(
    relay_host: session.Host, api: str
) -> None:
    alone, alone_starts = conversation(relay_host, "alone", instrumented=False, api=api)
    managed, managed_starts = conversation(relay_host, "managed", instrumented=True, api=api)
    assert validate_atif(alone) == []
    assert (alone["steps"][0]["source"], alone["steps"][0]["message"]) == ("user", QUESTION)
    # A generation span's answer is read as a Chat Completions answer (it read none: the last agent step was
    # empty and the tool call's result an orphan step).
    assert [(s["source"], s.get("message")) for s in alone["steps"]] == [
        ("user", QUESTION), ("agent", ""), ("agent", "Done.")
    ]  # fmt: skip
    assert alone["steps"][1]["tool_calls"][0]["function_name"] == "weather"
    # The model's tool call is recorded as the tool's own scope records its arguments, whoever recorded the answer.
    assert alone["steps"][1]["tool_calls"][0]["arguments"] == {"city": "Paris", "api_key": "[redacted]"}
    assert steps(alone) == steps(managed)
    # Each attempt's start holds the conversation as the managed attempt's start does, the tool call's
    # arguments (and the credential-named key in them) as the SDK sent them.
    key = "messages" if api == "chat" else "input"
    assert [e.input["content"][key] for e in alone_starts] == [e.input["content"][key] for e in managed_starts]


def test_an_observed_attempts_start_holds_the_request_and_the_time_its_span_began(
    relay_turn: Any, relay_events: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrived: list[int] = []
    handler = t.Script.handler

    def timed(self: t.Script, request: Any) -> Any:
        arrived.append(time.time_ns())
        return handler(self, request)

    monkeypatch.setattr(t.Script, "handler", timed)  # before the client's transport binds it
    openai_agents.instrument()
    s = run()
    starts = relay_events.starts(relay_kind=cv.ATTEMPT)
    ends = attempts(relay_events)
    assert len(starts) == len(ends) == len(s.script.requests) == 2
    sent = [body["input"] for body in s.script.bodies()]
    assert [e.input["content"]["input"] for e in starts] == sent
    assert sent[0] == [{"role": "user", "content": QUESTION}]
    for start, end, at in zip(starts, ends, arrived, strict=True):
        assert start.timestamp < at < end.timestamp  # it began before the request went, not when its span ended
    assert ends[0].annotated_request.messages == [{"role": "user", "content": QUESTION}]


def test_without_sensitive_data_in_traces_an_observed_attempt_records_no_request(
    relay_turn: Any, relay_events: Any
) -> None:
    openai_agents.instrument()
    run(sensitive=False)
    starts = relay_events.starts(relay_kind=cv.ATTEMPT)
    assert len(starts) == len(attempts(relay_events)) == 2
    assert [e.input for e in starts] == [None, None]
    assert [e.annotated_request for e in attempts(relay_events)] == [None, None]
    assert QUESTION not in repr([(e.input, e.output, e.annotated_request) for e in relay_events])


@pytest.fixture
def atif(relay_host: session.Host) -> Any:
    exporter = AtifExporter().attach(relay_host)  # before the turn begins: it follows the turn from its start
    yield exporter
    exporter.detach()


def test_with_the_processor_alone_each_tool_result_answers_the_call_it_ran_for(atif: Any, relay_turn: Any) -> None:
    # Two calls of one tool at once; the first call's tool ends last. The function spans hold no call id,
    # and their arguments only from after their start.
    @agents.function_tool
    async def forecast(city: str) -> str:
        """Tomorrow's weather of a city."""
        await asyncio.sleep(0.2 if city == "Paris" else 0)
        return f"rain in {city}"

    agents.add_trace_processor(RelayTraceProcessor())  # no tool wrapped: the function spans are the witnesses
    paris = {"call_id": "c1", "name": "forecast", "arguments": json.dumps({"city": "Paris"})}
    lyon = {"type": "function_call", "id": "fc-2", "call_id": "c2", "name": "forecast", "status": "completed",
            "arguments": json.dumps({"city": "Lyon"})}  # fmt: skip
    both = t.responses_body("", function_call=paris)
    both["output"].append(lyon)
    scripted(t.json_reply(both), t.json_reply(t.responses_body("Done.")))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[forecast])
    assert agents.Runner.run_sync(agent, QUESTION).final_output == "Done."
    trajectory = atif.export()
    assert validate_atif(trajectory) == []
    assert [s["source"] for s in trajectory["steps"]] == ["user", "agent", "agent"]
    results = trajectory["steps"][1]["observation"]["results"]
    assert [(r["source_call_id"], r["content"]) for r in results] == [("c2", "rain in Lyon"), ("c1", "rain in Paris")]


def test_a_generation_spans_usage_is_read_with_its_cache_writes_as_the_managed_attempt_reads_it(
    relay_host: session.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Chat Completions model's ``generation`` span holds the answer's usage details as the SDK normalised them
    # (cached and cache-write tokens in, reasoning tokens out): the observed attempt read the cached tokens and
    # the reasoning alone, and its cache writes went uncounted and unpriced.
    usage = {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109,
             "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 30},
             "completion_tokens_details": {"reasoning_tokens": 4}}  # fmt: skip
    answered = t.json_reply(t.chat_completion_body("Done.", usage=usage))
    monkeypatch.setattr(sys.modules[__name__], "replies", lambda api: (answered, answered))
    got = []
    for instrumented in (False, True):
        events = Recorder()
        name = relay_host.relay.subscribers.register(events, name="test.ends")
        try:
            conversation(relay_host, f"usage-{instrumented}", instrumented=instrumented, api="chat")
        finally:
            relay_host.relay.subscribers.deregister(name)
        (end,) = attempts(events)
        got.append(end.annotated_response.usage)
    alone, managed = got
    assert (managed.cache_read_tokens, managed.cache_creation_tokens, managed.reasoning_tokens) == (20, 30, 4)
    assert alone == managed
