"""LangChain agents (``create_agent``) under ``RelayCallbackHandler`` and ``RelayMiddleware``.

Real LangChain, a real ``ChatOpenAI`` whose own OpenAI client talks to the scripted mock transport
(no network), and LangChain's fake chat model where the provider does not matter.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import GuardrailRejected, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests import framework_support
from tests.framework_support import attempts, logical_calls, need, outline, tool_call_body

langchain_openai = need("langchain_openai")
agents_mod = need("langchain.agents")
middleware_mod = need("langchain.agents.middleware")
tools_mod = need("langchain_core.tools")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402

RAN: list[str] = []


@tools_mod.tool
def weather(city: str) -> str:
    """The weather of a city."""
    RAN.append(city)
    if city == "Atlantis":
        raise RuntimeError("no such city")
    return f"sunny in {city}"


@tools_mod.tool
def forecast(city: str) -> str:
    """Tomorrow's weather of a city."""
    RAN.append(city)
    raise tools_mod.ToolException(f"no forecast for {city}")


forecast.handle_tool_error = True  # the tool answers its ToolException as an error message


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RAN.clear()
    yield
    adapters.uninstrument()


def chat_model(script: t.Script, **options: Any) -> Any:
    """A real ChatOpenAI building its own OpenAI clients over the scripted transport."""
    return langchain_openai.ChatOpenAI(
        model="gpt-test",
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        http_client=httpx2.Client(transport=script.transport()),
        http_async_client=httpx2.AsyncClient(transport=script.transport()),
        max_retries=0,
        **options,
    )


def tool_then_answer(tool: str = "weather", city: str = "Paris") -> t.Script:
    return t.Script(
        [
            t.json_reply(tool_call_body(tool, {"city": city})),
            t.json_reply(t.chat_completion_body("Done.", usage=t.chat_usage(30, 3))),
        ]
    )


def run(agent: Any, question: str, *, use_async: bool = False, **config: Any) -> Any:
    inputs = {"messages": [{"role": "user", "content": question}]}
    if use_async:
        return asyncio.run(agent.ainvoke(inputs, config=config))
    return agent.invoke(inputs, config=config)


otel_spans = framework_support.otel_spans  # the fixture, under its name here


def client_spans(memory: InMemorySpanExporter) -> list[Any]:
    return [s for s in memory.get_finished_spans() if s.name.startswith("chat ")]


# An agent's tool round under the callback handler: each model call one logical call of one attempt.
AGENT_TREE = [
    "agent helper success",
    "  function model success",
    "    function logical_llm_call success",
    "      llm openai success",
    "  function tools success",
    "    tool weather success",
    "  function model success",
    "    function logical_llm_call success",
    "      llm openai success",
]


# -- RelayCallbackHandler ------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_callback_handler_tree_joins_the_instrumented_attempts(relay_turn, relay_events, otel_spans, use_async) -> None:
    adapters.instrument()
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], name="helper")
    result = run(agent, "Weather in Paris?", use_async=use_async, callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done."
    assert outline(relay_events) == AGENT_TREE
    # One attempt per provider call, the SDK's own (tokens and all), never a second one or a second span.
    tried = attempts(relay_events)
    assert len(tried) == len(script.requests) == 2
    assert tried[1].annotated_response.usage.input_tokens == 30
    assert len(client_spans(otel_spans)) == 2
    tool_end = relay_events.ends(relay_kind=cv.TOOL)[0]
    start = relay_events.starts(uuid=tool_end.uuid)[0]
    assert start.input == {"city": "Paris"}
    assert tool_end.output["content"] == "sunny in Paris"


def test_callback_handler_records_attempts_without_instrument(relay_turn, relay_events) -> None:
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], name="helper")
    run(agent, "Weather in Paris?", callbacks=[RelayCallbackHandler()])
    tried = attempts(relay_events)
    assert [a.name for a in tried] == ["openai", "openai"]
    assert [a.outcome for a in tried] == ["success", "success"]
    assert tried[1].annotated_response.usage.input_tokens == 30
    assert tried[0].annotated_response.tool_calls[0]["name"] == "weather"
    assert tried[1].model_name == "gpt-test"
    assert [c.outcome for c in logical_calls(relay_events)] == ["success", "success"]


def test_callback_handler_with_the_models_own_client_instrumented_records_each_call_once(
    relay_turn, relay_events
) -> None:
    """``instrument(client)`` on the model's client, not the SDK's classes: the client's own attempts are the
    model calls' attempts, under the agent, never beside an attempt the handler made up from its callbacks."""
    script = tool_then_answer()
    model = chat_model(script)
    adapters.instrument(model.root_client)
    agent = agents_mod.create_agent(model, [weather], name="helper")
    run(agent, "Weather in Paris?", callbacks=[RelayCallbackHandler()])
    assert outline(relay_events) == AGENT_TREE
    tried = attempts(relay_events)
    assert len(tried) == len(script.requests) == 2
    assert tried[1].annotated_response.usage.input_tokens == 30


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_callback_handler_with_another_client_instrumented_records_what_it_saw(
    relay_turn, relay_events, use_async
) -> None:
    """Some other client instrumented: the handler learns only at the call's end that no SDK attempt joined,
    and records the attempt it saw then, with the time it began."""
    adapters.instrument(t.openai_client(t.Script([])))
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], name="helper")
    run(agent, "Weather in Paris?", use_async=use_async, callbacks=[RelayCallbackHandler()])
    assert outline(relay_events)[2:4] == ["    function logical_llm_call success", "      llm openai success"]
    tried = attempts(relay_events)
    assert len(tried) == len(logical_calls(relay_events)) == len(script.requests) == 2
    assert tried[1].annotated_response.usage.input_tokens == 30
    first_start = relay_events.starts(uuid=tried[0].uuid)[0]
    tool_start = relay_events.starts(relay_kind=cv.TOOL)[0]
    assert first_start.timestamp < tried[0].timestamp <= tool_start.timestamp  # when it began, not when recorded


def test_callback_handler_on_a_fake_chat_model_chain(relay_turn, relay_events) -> None:
    fake = need("langchain_core.language_models.fake_chat_models")
    runnables = need("langchain_core.runnables")
    model = fake.GenericFakeChatModel(messages=iter(["a fake answer"]))
    chain = runnables.RunnableLambda(lambda text: f"Q: {text}").with_config(run_name="prepare") | model
    out = chain.invoke("hi", config={"callbacks": [RelayCallbackHandler()]})
    assert out.content == "a fake answer"
    assert outline(relay_events) == [
        "agent RunnableSequence success",
        "  function prepare success",
        "  function logical_llm_call success",
        "    llm genericfakechatmodel success",  # its LangSmith provider name
    ]
    assert attempts(relay_events)[0].annotated_response.output_text == "a fake answer"


def test_two_callback_handlers_record_a_run_once(relay_turn, relay_events) -> None:
    """Two relay handlers on one run (two layers each adding theirs): one record, with one attempt."""
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], name="helper")
    run(agent, "Weather in Paris?", callbacks=[RelayCallbackHandler(), RelayCallbackHandler()])
    assert outline(relay_events)[0] == "agent helper success" and len(relay_events.starts(name="helper")) == 1
    assert len(logical_calls(relay_events)) == len(attempts(relay_events)) == 2
    assert len(relay_events.ends(relay_kind=cv.TOOL)) == 1


def test_chat_model_callbacks_take_keywords_a_later_langchain_adds(relay_turn, relay_events) -> None:
    """The chat model callbacks name the keywords LangChain passes them (cheaper than ``**kwargs``); one it
    adds later still lands in ``**kwargs``, and the call is recorded all the same."""
    import uuid

    messages_mod = need("langchain_core.messages")
    outputs = need("langchain_core.outputs")
    handler = RelayCallbackHandler()
    run_id = uuid.uuid4()
    handler.on_chat_model_start(
        {"name": "Fake"},
        [[messages_mod.HumanMessage(content="hello")]],
        run_id=run_id,
        metadata={"ls_provider": "openai", "ls_model_name": "m-1"},
        invocation_params={},
        options={},
        name="fake",
        batch_size=1,
        a_later_keyword=True,
    )
    answer = messages_mod.AIMessage(content="hi", response_metadata={"model_name": "m-1"})
    result = outputs.LLMResult(generations=[[outputs.ChatGeneration(message=answer)]])
    handler.on_llm_end(result, run_id=run_id, parent_run_id=None, tags=[], another_later_keyword=1)
    assert outline(relay_events) == ["function logical_llm_call success", "  llm openai success"]
    (tried,) = attempts(relay_events)
    assert tried.annotated_response.output_text == "hi" and tried.model_name == "m-1"
    assert relay_events.starts(uuid=tried.uuid)[0].input["content"]["messages"][0].content == "hello"


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(lambda outputs: outputs.LLMResult(generations=[[]]), id="no-generation"),
        pytest.param(lambda outputs: outputs.LLMResult(generations=[]), id="no-prompt"),
        pytest.param(lambda outputs: object(), id="no-llm-result"),
        pytest.param(lambda outputs: outputs.LLMResult(generations=[[outputs.Generation(text="t")]]), id="no-message"),
    ],
)
def test_a_model_end_with_no_chat_answer_in_it_still_ends_the_call_with_no_answer(
    relay_turn, relay_events, odd
) -> None:
    """The handler reads the answer straight from the ``LLMResult`` LangChain makes; whatever else an end reports
    (no generation, a text generation, no result at all) ends the attempt and its call all the same, with no
    answer recorded and nothing counted as the handler's failure."""
    import uuid

    messages_mod = need("langchain_core.messages")
    outputs = need("langchain_core.outputs")
    handler = RelayCallbackHandler()
    run_id = uuid.uuid4()
    handler.on_chat_model_start(
        {"name": "Fake"}, [[messages_mod.HumanMessage(content="hello")]], run_id=run_id,
        metadata={"ls_provider": "openai", "ls_model_name": "m-1"},
    )  # fmt: skip
    handler.on_llm_end(odd(outputs), run_id=run_id)
    assert outline(relay_events) == ["function logical_llm_call success", "  llm openai success"]
    (tried,) = attempts(relay_events)
    answer = tried.annotated_response
    assert answer.output_text is None and answer.tool_calls == [] and answer.usage.output_tokens is None
    (call,) = logical_calls(relay_events)
    assert call.output["model"] == "m-1" and call.output["outcome"] == "success"
    relay, _turn = relay_turn
    assert not relay.diagnostics().get("subscriber_errors")


def test_a_model_run_whose_start_failed_is_recorded_by_no_other_relay_handler(
    relay_turn, relay_events, monkeypatch
) -> None:
    """A chat model run whose logical call failed to open (counted) stays followed: a second relay handler on the
    run does not open it again, and its end finds no call to end. The handler's run is its call, made only once
    the call opened, so the failed start leaves a run with no call in its place."""
    import uuid

    from relay_runtime.integrations import frameworks
    from relay_runtime.integrations.langchain import callbacks

    messages_mod = need("langchain_core.messages")
    outputs = need("langchain_core.outputs")

    def refused(*args: Any) -> Any:
        raise RuntimeError("no call today")

    monkeypatch.setattr(frameworks, "new_call", refused)
    first, second = RelayCallbackHandler(), RelayCallbackHandler()
    run_id = uuid.uuid4()
    for handler in (first, second):
        handler.on_chat_model_start({"name": "Fake"}, [[messages_mod.HumanMessage(content="hello")]], run_id=run_id)
    assert run_id.int in callbacks._RUNS and callbacks._RUNS[run_id.int].call is None
    answer = messages_mod.AIMessage(content="hi")
    result = outputs.LLMResult(generations=[[outputs.ChatGeneration(message=answer)]])
    for handler in (first, second):
        handler.on_llm_end(result, run_id=run_id)
    assert run_id.int not in callbacks._RUNS
    assert not logical_calls(relay_events)
    relay, _turn = relay_turn
    assert relay.diagnostics().get("subscriber_errors") == 1  # the first handler's start, once


def test_the_runs_relay_handlers_follow_are_bounded(monkeypatch) -> None:
    """Runs whose end never comes (an abandoned stream) do not pile up: the oldest are forgotten."""
    import uuid

    from relay_runtime.integrations.langchain import callbacks

    monkeypatch.setattr(callbacks, "_RUNS", {})
    monkeypatch.setattr(callbacks, "_MAX_RUNS", 3)
    handler = RelayCallbackHandler()
    ids = [uuid.uuid4() for _ in range(5)]
    for run_id in ids:
        handler._follow(run_id, None)  # type: ignore[arg-type]
    assert list(callbacks._RUNS) == [run_id.int for run_id in ids[2:]]  # keyed by the ids' ints


def test_callback_handler_records_a_failed_chain(relay_turn, relay_events) -> None:
    runnables = need("langchain_core.runnables")

    def boom(_: Any) -> Any:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        runnables.RunnableLambda(boom).invoke("x", config={"callbacks": [RelayCallbackHandler()], "run_name": "boom"})
    (end,) = [e for e in relay_events.ends() if e.name == "boom"]
    assert (end.outcome, end.error_type, end.error_message) == ("failed", "ValueError", "bad input")


def test_callback_handler_records_nothing_without_a_turn(relay_home, relay_events) -> None:
    fake = need("langchain_core.language_models.fake_chat_models")
    model = fake.GenericFakeChatModel(messages=iter(["x"]))
    assert model.invoke("hi", config={"callbacks": [RelayCallbackHandler()]}).content == "x"
    assert relay_events.events == []


# -- RelayMiddleware -----------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("instrumented", [False, True], ids=["alone", "with-instrument"])
def test_middleware_model_and_tool_calls_are_managed(
    relay_turn, relay_events, otel_spans, use_async, instrumented
) -> None:
    relay, _turn = relay_turn
    if instrumented:
        adapters.instrument()
    seen: list[Any] = []

    def count(name: str, request: Any, annotated: Any) -> Any:
        seen.append(annotated.model)
        return relay.LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("count", 0, False, count)
    relay.intercepts.register_tool_request("args", 0, False, lambda name, args: {**args, "city": args["city"].upper()})
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], middleware=[RelayMiddleware()], name="helper")
    result = run(agent, "Weather in Paris?", use_async=use_async, callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done."
    assert RAN == ["PARIS"]  # the intercept's arguments reached the tool
    assert seen == ["gpt-test", "gpt-test"]  # intercepts ran once per provider call, with or without instrument()
    assert outline(relay_events) == AGENT_TREE
    assert len(attempts(relay_events)) == 2
    assert len(client_spans(otel_spans)) == 2  # one GenAI client span per provider call
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert tool.output.content == "sunny in PARIS"
    # The model's request carried the tool's answer and its id.
    assert script.bodies()[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call-1", "content": "sunny in PARIS"}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_middleware_guardrail_refuses_a_tool_call(relay_turn, relay_events, use_async) -> None:
    relay, _turn = relay_turn

    def no_paris(name: str, args: Any) -> Any:
        if args.get("city") == "Paris":
            raise GuardrailRejected("geo-fence", "Paris is off limits")
        return args

    relay.intercepts.register_tool_request("geo-fence", 0, False, no_paris)
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], middleware=[RelayMiddleware()])
    result = run(agent, "Weather in Paris?", use_async=use_async)
    assert RAN == []  # the tool never ran
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type) == ("failed", "GuardrailRejected")
    assert "Paris is off limits" in tool.error_message
    # The agent saw a tool error carrying the reason, and went on with it.
    refusal = result["messages"][2]
    assert (refusal.type, refusal.status) == ("tool", "error")
    assert refusal.content == "Tool call refused: Paris is off limits"
    assert script.bodies()[1]["messages"][-1]["content"] == "Tool call refused: Paris is off limits"
    assert result["messages"][-1].content == "Done."


def test_middleware_tool_error_handled_by_the_tool(relay_turn, relay_events) -> None:
    script = tool_then_answer("forecast")
    agent = agents_mod.create_agent(chat_model(script), [forecast], middleware=[RelayMiddleware()])
    result = run(agent, "Forecast for Paris?")
    assert RAN == ["Paris"]
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type, tool.error_message) == ("failed", "tool_error", "no forecast for Paris")
    assert result["messages"][2].content == "no forecast for Paris"
    assert result["messages"][-1].content == "Done."


def test_middleware_tool_error_unhandled_propagates(relay_turn, relay_events) -> None:
    script = tool_then_answer(city="Atlantis")
    agent = agents_mod.create_agent(chat_model(script), [weather], middleware=[RelayMiddleware()])
    with pytest.raises(RuntimeError, match="no such city"):
        run(agent, "Weather in Atlantis?")
    (tool,) = relay_events.ends(relay_kind=cv.TOOL)
    assert (tool.outcome, tool.error_type) == ("failed", "RuntimeError")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_middleware_retries_inside_are_attempts_of_one_logical_call(relay_turn, relay_events, use_async) -> None:
    adapters.instrument()
    script = t.Script([t.error(500), t.json_reply(t.chat_completion_body("Recovered."))])
    retry = middleware_mod.ModelRetryMiddleware(max_retries=1, initial_delay=0, jitter=False)
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware(), retry])
    result = run(agent, "Hi", use_async=use_async)
    assert result["messages"][-1].content == "Recovered."
    first, second = attempts(relay_events)
    assert (first.outcome, second.outcome) == ("failed", "success")
    assert (first.metadata[cv.RETRY_COUNT], second.metadata[cv.RETRY_COUNT]) == (0, 1)
    assert first.metadata[cv.API_REQUEST_ID] == second.metadata[cv.API_REQUEST_ID]
    (call,) = logical_calls(relay_events)
    assert call.outcome == "success"
    assert call.uuid == first.parent_uuid == second.parent_uuid


def test_middleware_failed_model_call_fails_its_logical_call(relay_turn, relay_events) -> None:
    script = t.Script([t.error(400)])
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware()])
    with pytest.raises(Exception, match=r"400|scripted failure"):
        run(agent, "Hi")
    (attempt,) = attempts(relay_events)
    (call,) = logical_calls(relay_events)
    assert (attempt.outcome, call.outcome) == ("failed", "failed")


def test_middleware_execution_intercept_retries_are_attempts(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    def twice(name: str, request: Any, next_: Any) -> Any:
        try:
            return next_(request)
        except Exception:
            return next_(request)

    relay.intercepts.register_llm_execution("retry-once", 0, twice)
    script = t.Script([t.error(500), t.json_reply(t.chat_completion_body("Second time."))])
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware()])
    assert run(agent, "Hi")["messages"][-1].content == "Second time."
    assert [a.outcome for a in attempts(relay_events)] == ["failed", "success"]
    assert [c.outcome for c in logical_calls(relay_events)] == ["success"]


def test_middleware_request_intercept_edits_reach_the_model(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn

    def cool(name: str, request: Any, annotated: Any) -> Any:
        annotated.params["temperature"] = 0.25
        annotated.messages[-1] = {"role": "user", "content": "Edited question"}
        return relay.LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("cool", 0, False, cool)
    script = t.Script([t.json_reply(t.chat_completion_body("ok"))])
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware()])
    run(agent, "Original question")
    (body,) = script.bodies()
    assert body["temperature"] == 0.25
    assert body["messages"][-1] == {"role": "user", "content": "Edited question"}


def test_middleware_llm_guardrail_refuses_the_model_call(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    relay.intercepts.register_llm_guardrail("never", 0, lambda name, req, ann: "no model calls today")
    script = t.Script([])
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware()])
    with pytest.raises(GuardrailRejected, match=r"no model calls today"):
        run(agent, "Hi")
    assert script.requests == []
    (attempt,) = attempts(relay_events)
    assert (attempt.outcome, attempt.error_type) == ("failed", "GuardrailRejected")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_middleware_streamed_agent_is_one_attempt_per_call(relay_turn, relay_events, otel_spans, use_async) -> None:
    adapters.instrument()
    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["Hel", "lo"], usage=t.chat_usage(9, 2))))])
    model = chat_model(script, streaming=True, stream_usage=True)
    agent = agents_mod.create_agent(model, [], middleware=[RelayMiddleware()], name="streamer")
    inputs = {"messages": [{"role": "user", "content": "Hi"}]}
    config = {"callbacks": [RelayCallbackHandler()]}

    async def astream() -> list[Any]:
        return [item async for item in agent.astream(inputs, config=config, stream_mode="messages")]

    items = asyncio.run(astream()) if use_async else list(agent.stream(inputs, config=config, stream_mode="messages"))
    text = "".join(chunk.content for chunk, _meta in items if isinstance(chunk.content, str))
    assert "Hello" in text
    (attempt,) = attempts(relay_events)
    assert attempt.outcome == "success"
    assert attempt.annotated_response.output_text == "Hello"
    assert attempt.annotated_response.usage.output_tokens == 2
    assert len(client_spans(otel_spans)) == 1


def test_middleware_without_a_turn_runs_the_agent_untouched(relay_home, relay_events) -> None:
    script = tool_then_answer()
    agent = agents_mod.create_agent(chat_model(script), [weather], middleware=[RelayMiddleware()])
    assert run(agent, "Weather in Paris?")["messages"][-1].content == "Done."
    assert RAN == ["Paris"]
    assert relay_events.events == []


def test_missing_langchain_names_the_extra(monkeypatch) -> None:
    from relay_runtime.integrations import langchain as integration

    monkeypatch.setitem(sys.modules, "langchain", None)
    with pytest.raises(ImportError, match=r"pip install 'relay-runtime\[langchain\]'"):
        integration.RelayMiddleware  # noqa: B018


def test_middleware_on_chat_anthropic(relay_turn, relay_events, otel_spans) -> None:
    """The same agent over a real ChatAnthropic, whose Anthropic client answers from the script."""
    langchain_anthropic = need("langchain_anthropic")
    adapters.instrument()
    use = {"id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    script = t.Script(
        [
            t.json_reply(t.anthropic_message_body("", stop_reason="tool_use", tool_use=use)),
            t.json_reply(t.anthropic_message_body("Done.")),
        ]
    )
    model = langchain_anthropic.ChatAnthropic(model="claude-test", api_key=t.TEST_KEY, max_retries=0)
    model.__dict__["_client"] = t.anthropic_client(script, max_retries=0)  # its cached client, on the script
    agent = agents_mod.create_agent(model, [weather], middleware=[RelayMiddleware()], name="helper")
    result = run(agent, "Weather in Paris?", callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done."
    assert RAN == ["Paris"]
    tried = attempts(relay_events)
    assert [a.name for a in tried] == ["anthropic", "anthropic"]
    assert tried[0].annotated_response.tool_calls[0]["name"] == "weather"
    assert len(client_spans(otel_spans)) == 2
    assert script.bodies()[1]["messages"][-1]["content"][0]["tool_use_id"] == "toolu_1"


def test_middleware_attempt_after_its_logical_call_closed_is_still_recorded(relay_turn, relay_events) -> None:
    """A provider call the model makes after its logical call was closed (as the end of the turn closes
    it) is still one attempt, under a logical call with the same id, and the agent gets its answer."""
    from relay_runtime import logical_calls as closing
    from relay_runtime.integrations.langchain import models

    class ClosesFirst(middleware_mod.AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            call = models.middleware_call.get()
            assert closing.close_logical_call(call.turn, call.logical, "success")
            return handler(request)

    script = t.Script([t.json_reply(t.chat_completion_body("Late."))])
    agent = agents_mod.create_agent(chat_model(script), [], middleware=[RelayMiddleware(), ClosesFirst()])
    assert run(agent, "Hi")["messages"][-1].content == "Late."
    (attempt,) = attempts(relay_events)
    (first,) = logical_calls(relay_events)  # the late one stays open until the turn ends
    call_id = first.metadata[cv.API_REQUEST_ID]
    late = relay_turn[1].logical_llm_calls[call_id]
    assert attempt.outcome == "success" and attempt.metadata[cv.API_REQUEST_ID] == call_id
    assert attempt.parent_uuid == late.scope.uuid != first.uuid


@tools_mod.tool
def find_user(email: str) -> str:
    """A user by e-mail."""
    RAN.append(email)
    return f"Jane, reach her at {email}"


@pytest.mark.parametrize("how", ["middleware", "callback-handler", "both"])
def test_a_redaction_policy_reaches_every_record_of_an_agent_run(relay_turn, relay_events, otel_spans, how) -> None:
    """LangChain's own objects in the records (a ``ChatResult`` whose ``AIMessage`` holds the tool calls in
    a field declared ``BaseMessage``, message lists, tool inputs) are redacted like the SDK's: the
    e-mail reaches the model and the tool, never an event, a span or a JSONL line."""
    from relay_runtime.events import FIELDS
    from relay_runtime.jsonl import event_json
    from relay_runtime.redaction import RedactionPolicy, Rule

    email = "jane.doe@example.com"
    relay, _turn = relay_turn
    relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    script = t.Script(
        [t.json_reply(tool_call_body("find_user", {"email": email})), t.json_reply(t.chat_completion_body("Done."))]
    )
    middleware = [RelayMiddleware()] if how != "callback-handler" else []
    callbacks = [RelayCallbackHandler()] if how != "middleware" else []
    agent = agents_mod.create_agent(chat_model(script), [find_user], middleware=middleware, name="helper")
    result = run(agent, f"Who is {email}?", callbacks=callbacks)
    assert email in RAN and email in script.requests[0].content.decode()  # the tool and model saw it
    assert result["messages"][-1].content == "Done."
    leaked = [(e.kind, e.name, f) for e in relay_events.events for f in FIELDS if email in repr(getattr(e, f))]
    assert not leaked
    assert not [e.name for e in relay_events.events if email in event_json(e)]
    spans = otel_spans.get_finished_spans()
    assert spans and email not in repr([(s.name, dict(s.attributes or {}), s.events) for s in spans])
    assert any("[REDACTED:email]" in event_json(e) for e in relay_events.events if e.scope_type == "tool")


@pytest.mark.parametrize("how", ["middleware", "callback-handler", "callback-handler-over-instrument"])
def test_the_agents_own_tool_calls_are_in_the_next_calls_captured_input(relay_turn, relay_events, how) -> None:
    """The conversation a LangChain model call sends holds the agent's earlier tool calls: with content
    captured, the span says which tool was called with what (it said ``"name": null, "arguments": null``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from relay_runtime.integrations.otel import OTelExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    relay, _turn = relay_turn
    exporter = OTelExporter(provider, capture_content=True).attach(relay)
    try:
        if how == "callback-handler-over-instrument":
            adapters.instrument()
        middleware = [RelayMiddleware()] if how == "middleware" else []
        agent = agents_mod.create_agent(chat_model(tool_then_answer()), [weather], middleware=middleware, name="a")
        callbacks = [RelayCallbackHandler()] if how != "middleware" else []
        assert run(agent, "Weather in Paris?", callbacks=callbacks)["messages"][-1].content == "Done."
    finally:
        exporter.detach()
    second = client_spans(memory)[-1]
    # The handler alone witnesses the call after the fact: what the span's start could not say is said at its end.
    assert second.name == "chat gpt-test" and second.attributes["gen_ai.provider.name"] == "openai"
    messages = json.loads(second.attributes["gen_ai.input.messages"])
    calls = [p for m in messages for p in m["parts"] if p["type"] == "tool_call"]
    assert calls == [{"type": "tool_call", "id": "call-1", "name": "weather", "arguments": {"city": "Paris"}}]
    answers = [p for m in messages for p in m["parts"] if p["type"] == "tool_call_response"]
    assert [(a["id"], a["response"]) for a in answers] == [("call-1", "sunny in Paris")]
