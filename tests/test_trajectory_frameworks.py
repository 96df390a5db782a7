"""A LangChain agent's trajectory holds what the user said, however its model calls are recorded.

A LangChain model's request holds LangChain's own messages (a ``HumanMessage`` records as
``{"type": "human", "content": ...}``, with no ``role``): the trajectory of an agent under
``RelayMiddleware`` had the agent act with nobody having asked it anything, and under the callback
handler alone (its attempts witnessed from the callbacks) the attempts' starts held no request at all.
A real ``ChatOpenAI`` over the scripted transport, a real agent with a tool, the ATIF exporter live.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.integrations.trajectory.validate import validate_atif
from tests.framework_support import need

need("langchain.agents")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402
from tests.test_frameworks_langchain import agents_mod, chat_model, run, tool_then_answer, weather  # noqa: E402

QUESTION = "Weather in Paris?"


@pytest.fixture
def atif(relay_host: session.Host) -> Any:
    exporter = AtifExporter().attach(relay_host)
    yield exporter
    exporter.detach()
    adapters.uninstrument()


@pytest.mark.parametrize("how", ["middleware", "callback-handler", "callback-handler-over-instrument"])
def test_the_user_step_is_in_a_langchain_agents_trajectory(atif: Any, relay_turn: Any, how: str) -> None:
    if how == "middleware":
        middleware, callbacks = [RelayMiddleware()], []
    else:
        if how == "callback-handler-over-instrument":
            adapters.instrument()
        middleware, callbacks = [], [RelayCallbackHandler()]
    agent = agents_mod.create_agent(chat_model(tool_then_answer()), [weather], middleware=middleware, name="a")
    assert run(agent, QUESTION, callbacks=callbacks)["messages"][-1].content == "Done."
    trajectory = atif.export()
    assert validate_atif(trajectory) == []
    steps = [(s["source"], s.get("message")) for s in trajectory["steps"]]
    assert steps == [("user", QUESTION), ("agent", ""), ("agent", "Done.")]
    assert trajectory["steps"][1]["tool_calls"][0]["function_name"] == "weather"
