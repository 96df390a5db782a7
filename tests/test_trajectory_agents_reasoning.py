"""An OpenAI Agents SDK model call's reasoning is in its trajectory under the trace processor alone too.

Without ``adapters.instrument()`` each model call is an attempt the processor records from the SDK's
``response`` span. Its end held the answer's annotation only, not the answer: the reasoning a Responses
answer gives as a ``reasoning`` item (which the view has no field for) was in the trajectory of an
instrumented run and missing from the same run's under the processor alone, where the agent's steps read as
if it had answered without thinking. Real ``openai-agents`` on the scripted mock transport, ATIF live.
"""

from __future__ import annotations

import pytest

from relay_runtime import session
from relay_runtime.adapters import testing as t
from tests.framework_support import need

need("agents")

from tests import test_trajectory_agents as runs  # noqa: E402
from tests.test_frameworks_agents import sdk_tracing  # noqa: E402, F401

THOUGHTS = ("The user asks about Paris weather: call the tool.", "The tool answered: say so.")


def thinking_replies(api: str) -> tuple[t.Reply, t.Reply]:
    bodies = [t.responses_body("", function_call={"call_id": "call-1", "name": "weather", "arguments": runs.ARGUMENTS}),
              t.responses_body("Done.", usage=t.responses_usage(30, 3))]  # fmt: skip
    for body, thought in zip(bodies, THOUGHTS, strict=True):
        item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": thought}]}
        body["output"].insert(0, item)
    return t.json_reply(bodies[0]), t.json_reply(bodies[1])


def test_a_processor_only_runs_trajectory_has_each_steps_reasoning_as_under_instrument(
    relay_host: session.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "replies", thinking_replies)
    alone, _ = runs.conversation(relay_host, "alone", instrumented=False, api="responses")
    managed, _ = runs.conversation(relay_host, "managed", instrumented=True, api="responses")
    agent_steps = [s for s in managed["steps"] if s["source"] == "agent"]
    assert [s.get("reasoning_content") for s in agent_steps] == list(THOUGHTS)
    assert runs.steps(alone) == runs.steps(managed)
