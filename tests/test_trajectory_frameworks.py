"""A LangChain agent's trajectory holds what the user said and how its tools ended, however it is recorded.

A LangChain model's request holds LangChain's own messages (a ``HumanMessage`` records as
``{"type": "human", "content": ...}``, with no ``role``): the trajectory of an agent under
``RelayMiddleware`` had the agent act with nobody having asked it anything, and under the callback
handler alone (its attempts witnessed from the callbacks) the attempts' starts held no request at all.
A tool's handled error reaches the callback handler as the tool's answer (an error ``ToolMessage``):
it was recorded as a success. LangChain's retries and fallbacks call the model again as a new chat model
run: the handler made each a model turn. A real ``ChatOpenAI`` over the scripted transport, real agents,
the ATIF exporter live.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.integrations.trajectory.validate import validate_atif
from relay_runtime.recorder import Recorder
from tests.framework_support import need

need("langchain.agents")
messages_mod = need("langchain_core.messages")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402
from tests.test_frameworks_langchain import (  # noqa: E402
    agents_mod,
    chat_model,
    forecast,
    middleware_mod,
    run,
    tool_then_answer,
    weather,
)

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


@pytest.mark.parametrize("how", ["middleware", "callback-handler"])
def test_a_user_message_given_as_a_list_with_bare_texts_is_the_user_step(atif: Any, relay_turn: Any, how: str) -> None:
    # LangChain's content list may hold bare strings beside blocks (``HumanMessage(content=["...", {...}])``),
    # which it sends as the user's text: read as blocks alone, the agent acted with nobody having asked.
    middleware, callbacks = ([RelayMiddleware()], []) if how == "middleware" else ([], [RelayCallbackHandler()])
    agent = agents_mod.create_agent(chat_model(tool_then_answer()), [weather], middleware=middleware, name="a")
    asked = messages_mod.HumanMessage(content=["Weather in ", {"type": "text", "text": "Paris?"}])
    agent.invoke({"messages": [asked]}, config={"callbacks": callbacks})
    first = atif.export()["steps"][0]
    assert (first["source"], first.get("message")) == ("user", QUESTION)


@pytest.mark.parametrize("how", ["middleware", "callback-handler"])
def test_a_tool_that_answers_its_error_as_a_message_is_a_failed_tool_in_the_trajectory(
    atif: Any, relay_turn: Any, relay_events: Recorder, how: str
) -> None:
    # ``handle_tool_error``: LangChain turns the tool's ToolException into a ToolMessage with status "error"
    # and reports it through ``on_tool_end``, as if the tool had answered.
    middleware, callbacks = ([RelayMiddleware()], []) if how == "middleware" else ([], [RelayCallbackHandler()])
    agent = agents_mod.create_agent(chat_model(tool_then_answer("forecast")), [forecast], middleware=middleware)
    assert run(agent, "Forecast for Paris?", callbacks=callbacks)["messages"][2].status == "error"
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type, tool.error_message) == ("failed", "tool_error", "no forecast for Paris")
    (result,) = atif.export()["steps"][1]["observation"]["results"]
    assert result["extra"]["outcome"] == "failed"
    assert result["extra"]["error"] == {"type": "tool_error", "message": "no forecast for Paris"}


@pytest.mark.parametrize("how", ["retry", "retry-async", "fallback", "retry-over-instrument"])
def test_a_model_call_retried_or_fallen_back_under_the_callback_handler_is_one_agent_step(
    atif: Any, relay_turn: Any, relay_events: Recorder, how: str
) -> None:
    # LangChain's own retry and fallback call the model again under the same model node: each call is a
    # chat model run of its own, which the handler recorded as a logical call (an agent step) of its own.
    if how == "retry-over-instrument":
        adapters.instrument()
    if how == "fallback":
        failing = chat_model(t.Script([t.error(500)]))
        helper = middleware_mod.ModelFallbackMiddleware(
            chat_model(t.Script([t.json_reply(t.chat_completion_body("Recovered."))]))
        )
    else:
        failing = chat_model(t.Script([t.error(500), t.json_reply(t.chat_completion_body("Recovered."))]))
        helper = middleware_mod.ModelRetryMiddleware(max_retries=1, initial_delay=0, jitter=False)
    agent = agents_mod.create_agent(failing, [], middleware=[helper])
    result = run(agent, QUESTION, use_async=how == "retry-async", callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Recovered."
    first, second = relay_events.ends(relay_kind=cv.ATTEMPT)
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert (first.outcome, second.outcome, call.outcome) == ("failed", "success", "success")
    assert first.parent_uuid == second.parent_uuid == call.uuid
    assert (first.metadata[cv.RETRY_COUNT], second.metadata[cv.RETRY_COUNT]) == (0, 1)
    trajectory = atif.export()
    assert validate_atif(trajectory) == []
    assert [(s["source"], s["message"]) for s in trajectory["steps"]] == [("user", QUESTION), ("agent", "Recovered.")]
    extra = trajectory["steps"][1]["extra"]
    assert extra["attempts"] == 2 and "outcome" not in extra
    assert [a["outcome"] for a in extra["failed_attempts"]] == ["failed"]


def test_a_model_call_fallen_back_with_with_fallbacks_is_one_agent_step(atif: Any, relay_turn: Any) -> None:
    # LangChain tells the fallback's chat model runs no parent run id: the scope they nest under says it.
    failing = chat_model(t.Script([t.error(500)]))
    backup = chat_model(t.Script([t.json_reply(t.chat_completion_body("Recovered."))]))
    chain = failing.with_fallbacks([backup])
    assert chain.invoke(QUESTION, config={"callbacks": [RelayCallbackHandler()]}).content == "Recovered."
    steps = atif.export()["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", QUESTION), ("agent", "Recovered.")]
    assert steps[1]["extra"]["attempts"] == 2


def test_a_model_call_whose_retry_fails_too_is_one_failed_agent_step(
    atif: Any, relay_turn: Any, relay_events: Recorder
) -> None:
    failing = chat_model(t.Script([t.error(500), t.error(500)]))
    helper = middleware_mod.ModelRetryMiddleware(max_retries=1, initial_delay=0, jitter=False, on_failure="error")
    agent = agents_mod.create_agent(failing, [], middleware=[helper])
    with pytest.raises(Exception, match="500"):
        run(agent, QUESTION, callbacks=[RelayCallbackHandler()])
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert [a.outcome for a in relay_events.ends(relay_kind=cv.ATTEMPT)] == ["failed", "failed"]
    # Closed when the model node gave up, before the node's own scope ended (not at the end of the turn).
    (node,) = [e for e in relay_events.ends() if e.name == "model"]
    assert call.outcome == "failed" and call.timestamp <= node.timestamp
    steps = atif.export()["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", QUESTION), ("agent", "")]
    assert (steps[1]["extra"]["attempts"], steps[1]["extra"]["outcome"]) == (2, "failed")
