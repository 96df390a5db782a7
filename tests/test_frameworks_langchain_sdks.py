"""``RelayMiddleware`` over chat models whose code calls a google-genai SDK client that ``adapters.instrument()``
traces too (on the classes, or that one client): the middleware makes each provider call an attempt itself, so
the SDK call inside must pass straight through. One provider request, one attempt of one logical call; never a
second logical call or attempt, whose tokens and cost would count twice.

The Gemini model is a small real LangChain chat model (langchain-google-genai is not installed here) over a
real google-genai client on httpx2's mock transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from genai_support import MODEL as GEMINI_MODEL
from genai_support import gemini_client, response_body, stream_frames, usage

from relay_runtime import Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests.framework_support import attempts, logical_calls, need, outline

agents_mod = need("langchain.agents")
chat_models = need("langchain_core.language_models.chat_models")
messages_mod = need("langchain_core.messages")
outputs_mod = need("langchain_core.outputs")
tools_mod = need("langchain_core.tools")
need("google.genai")

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402

RAN: list[str] = []


@tools_mod.tool
def weather(city: str) -> str:
    """The weather of a city."""
    RAN.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RAN.clear()
    yield
    adapters.uninstrument()


class _ToolsBound(chat_models.BaseChatModel):
    """What every model here shares: ``create_agent`` binds its tools, which the scripted provider ignores."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


class ChatGemini(_ToolsBound):
    """A chat model on a google-genai client, as langchain-google-genai's ``ChatGoogleGenerativeAI`` is."""

    client: Any
    model: str = GEMINI_MODEL

    @property
    def _llm_type(self) -> str:
        return "gemini-test"

    def _generate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:  # fmt: skip
        response = self.client.models.generate_content(model=self.model, contents=_gemini_contents(messages))
        return _result(_gemini_message(response))

    async def _agenerate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> Any:  # fmt: skip
        response = await self.client.aio.models.generate_content(model=self.model, contents=_gemini_contents(messages))
        return _result(_gemini_message(response))

    def _stream(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                **kwargs: Any) -> Iterator[Any]:  # fmt: skip
        for chunk in self.client.models.generate_content_stream(model=self.model, contents=_gemini_contents(messages)):
            yield outputs_mod.ChatGenerationChunk(message=messages_mod.AIMessageChunk(content=chunk.text or ""))

    async def _astream(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                       **kwargs: Any) -> AsyncIterator[Any]:  # fmt: skip
        stream = await self.client.aio.models.generate_content_stream(
            model=self.model, contents=_gemini_contents(messages)
        )
        async for chunk in stream:
            yield outputs_mod.ChatGenerationChunk(message=messages_mod.AIMessageChunk(content=chunk.text or ""))


def _gemini_contents(messages: list[Any]) -> list[dict[str, Any]]:
    contents = []
    for message in messages:
        if isinstance(message, messages_mod.ToolMessage):
            answer = {"name": message.name, "response": {"result": message.content}}
            contents.append({"role": "user", "parts": [{"function_response": answer}]})
        elif isinstance(message, messages_mod.AIMessage):
            calls = [{"function_call": {"name": c["name"], "args": c["args"]}} for c in message.tool_calls]
            contents.append({"role": "model", "parts": calls or [{"text": message.content}]})
        else:
            contents.append({"role": "user", "parts": [{"text": message.content}]})
    return contents


def _gemini_message(response: Any) -> Any:
    parts = response.candidates[0].content.parts
    text = "".join(p.text for p in parts if p.text)
    calls = [{"name": c.name, "args": c.args, "id": f"call-{i}"} for i, c in enumerate(response.function_calls or ())]
    return messages_mod.AIMessage(content=text, tool_calls=calls)


def _result(message: Any) -> Any:
    return outputs_mod.ChatResult(generations=[outputs_mod.ChatGeneration(message=message)])


def run(agent: Any, use_async: bool) -> Any:
    inputs = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}
    config = {"callbacks": [RelayCallbackHandler()]}
    if use_async:
        return asyncio.run(agent.ainvoke(inputs, config=config))
    return agent.invoke(inputs, config=config)


def instrumented(client: Any, how: str) -> Any:
    if how == "classes":
        adapters.instrument()
        return client
    return adapters.instrument(client)


def assert_one_attempt_per_provider_call(events: Recorder, provider: str, requests: int) -> None:
    """The agent's two model calls (the tool call, then the answer), each one logical call with one attempt:
    the middleware's, nested as for any chat model."""
    assert outline(events) == [
        "agent helper success",
        "  function model success",
        "    function logical_llm_call success",
        f"      llm {provider} success",
        "  function tools success",
        "    tool weather success",
        "  function model success",
        "    function logical_llm_call success",
        f"      llm {provider} success",
    ]
    tried = attempts(events)
    assert len(tried) == requests == 2
    assert len(logical_calls(events)) == 2
    assert [a.metadata[cv.RETRY_COUNT] for a in tried] == [0, 0]
    assert len({a.metadata[cv.API_REQUEST_ID] for a in tried}) == 2


HOW = pytest.mark.parametrize("how", ["classes", "client"], ids=["instrument-classes", "instrument-client"])
USE_ASYNC = pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])


@USE_ASYNC
@HOW
def test_middleware_over_a_google_genai_model_is_one_attempt_per_provider_call(
    relay_turn, relay_events, use_async, how
) -> None:
    call = {"name": "weather", "args": {"city": "Paris"}}
    script = t.Script([
        t.json_reply(response_body(None, calls=[call], usage_metadata=usage(20, 4))),
        t.json_reply(response_body("Sunny.", usage_metadata=usage(30, 2))),
    ])  # fmt: skip
    model = ChatGemini(client=instrumented(gemini_client(script), how))
    agent = agents_mod.create_agent(model, [weather], middleware=[RelayMiddleware()], name="helper")
    assert run(agent, use_async)["messages"][-1].content == "Sunny."
    assert RAN == ["Paris"]
    assert_one_attempt_per_provider_call(relay_events, "gemini", len(script.requests))
    # The tool's answer reached the provider: the second request is the agent's, not a replay.
    assert script.bodies()[1]["contents"][-1]["parts"][0]["functionResponse"]["name"] == "weather"


@USE_ASYNC
@HOW
def test_middleware_over_a_streamed_google_genai_model_is_one_attempt(relay_turn, relay_events, use_async, how) -> None:
    script = t.Script([t.sse_reply(stream_frames(["Hel", "lo"]))])
    model = ChatGemini(client=instrumented(gemini_client(script), how))
    agent = agents_mod.create_agent(model, [], middleware=[RelayMiddleware()], name="streamer")
    inputs = {"messages": [{"role": "user", "content": "Hi"}]}

    async def astream() -> list[Any]:
        return [item async for item in agent.astream(inputs, stream_mode="messages")]

    items = asyncio.run(astream()) if use_async else list(agent.stream(inputs, stream_mode="messages"))
    assert "".join(chunk.content for chunk, _meta in items) == "Hello"
    assert len(script.requests) == 1
    (attempt,) = attempts(relay_events)
    (call,) = logical_calls(relay_events)
    assert attempt.name == "gemini" and attempt.outcome == "success"
    assert attempt.metadata[cv.API_REQUEST_ID] == call.metadata[cv.API_REQUEST_ID]
    assert attempt.annotated_response.output_text == "Hello"
