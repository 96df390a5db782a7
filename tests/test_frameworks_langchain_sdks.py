"""``RelayMiddleware`` over chat models whose code calls a google-genai, Bedrock or Anthropic SDK client that
``adapters.instrument()`` traces too (on the classes, or that one client): the middleware makes each provider
call an attempt itself, so the SDK call inside must pass straight through. One provider request, one attempt
of one logical call; never a second logical call or attempt, whose tokens and cost would count twice.

The Gemini and Bedrock models are small real LangChain chat models (langchain-google-genai and
langchain-aws are not installed here) over real SDK clients: google-genai on httpx2's mock transport,
boto3 on a loopback server. The Anthropic one is LangChain's own ``ChatAnthropic``. With the handler alone
(no middleware) nothing is marked: the SDK's own attempts are the handler's model calls' attempts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest
from bedrock_support import MODEL as BEDROCK_MODEL
from bedrock_support import BedrockServer, converse_body, json_reply
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


class ChatBedrock(_ToolsBound):
    """A chat model on a boto3 ``bedrock-runtime`` client's ``converse``, as langchain-aws's ``ChatBedrockConverse``
    is (its async step is LangChain's own: the sync one on an executor)."""

    client: Any
    model: str = BEDROCK_MODEL

    @property
    def _llm_type(self) -> str:
        return "bedrock-test"

    def _generate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:  # fmt: skip
        response = self.client.converse(modelId=self.model, messages=_bedrock_messages(messages))
        blocks = response["output"]["message"]["content"]
        text = "".join(b.get("text", "") for b in blocks)
        calls = [{"name": b["toolUse"]["name"], "args": b["toolUse"]["input"], "id": b["toolUse"]["toolUseId"]}
                 for b in blocks if "toolUse" in b]  # fmt: skip
        return _result(messages_mod.AIMessage(content=text, tool_calls=calls))


def _bedrock_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if isinstance(message, messages_mod.ToolMessage):
            result = {"toolUseId": message.tool_call_id, "content": [{"text": message.content}]}
            out.append({"role": "user", "content": [{"toolResult": result}]})
        elif isinstance(message, messages_mod.AIMessage):
            uses = [{"toolUse": {"toolUseId": c["id"], "name": c["name"], "input": c["args"]}}
                    for c in message.tool_calls]  # fmt: skip
            out.append({"role": "assistant", "content": [{"text": message.content or "."}, *uses]})
        else:
            out.append({"role": "user", "content": [{"text": message.content}]})
    return out


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


@pytest.fixture()
def bedrock_server() -> Iterator[BedrockServer]:
    server = BedrockServer()
    yield server
    server.close()


@USE_ASYNC
@HOW
def test_middleware_over_a_bedrock_model_is_one_attempt_per_provider_call(
    relay_turn, relay_events, bedrock_server, use_async, how
) -> None:
    use = {"toolUseId": "tu-1", "name": "weather", "input": {"city": "Paris"}}
    bedrock_server.replies += [
        json_reply(converse_body("Looking.", stop="tool_use", tool=use)),
        json_reply(converse_body("Sunny.")),
    ]
    model = ChatBedrock(client=instrumented(bedrock_server.client(), how))
    agent = agents_mod.create_agent(model, [weather], middleware=[RelayMiddleware()], name="helper")
    assert run(agent, use_async)["messages"][-1].content == "Sunny."
    assert RAN == ["Paris"]
    assert_one_attempt_per_provider_call(relay_events, "bedrock", len(bedrock_server.seen))
    assert bedrock_server.seen[1].body["messages"][-1]["content"][0]["toolResult"]["toolUseId"] == "tu-1"


@USE_ASYNC
@HOW
def test_middleware_over_chat_anthropic_is_one_attempt_per_provider_call(
    relay_turn, relay_events, use_async, how
) -> None:
    langchain_anthropic = need("langchain_anthropic")
    use = {"id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    script = t.Script([
        t.json_reply(t.anthropic_message_body("", stop_reason="tool_use", tool_use=use)),
        t.json_reply(t.anthropic_message_body("Sunny.")),
    ])  # fmt: skip
    model = langchain_anthropic.ChatAnthropic(model="claude-test", api_key=t.TEST_KEY, max_retries=0)
    clients: dict[str, Callable[..., Any]] = {"_client": t.anthropic_client, "_async_client": t.async_anthropic_client}
    for cached, make in clients.items():  # its cached clients, on the script
        model.__dict__[cached] = instrumented(make(script, max_retries=0), how)
    agent = agents_mod.create_agent(model, [weather], middleware=[RelayMiddleware()], name="helper")
    assert run(agent, use_async)["messages"][-1].content == "Sunny."
    assert RAN == ["Paris"]
    assert_one_attempt_per_provider_call(relay_events, "anthropic", len(script.requests))


@USE_ASYNC
@HOW
def test_callback_handler_alone_joins_the_google_genai_attempts(relay_turn, relay_events, use_async, how) -> None:
    """Without the middleware nothing marks the model's code as inside an attempt: the SDK's own attempts are the
    attempts of the model calls the handler opened (joined, or witnessed and then dropped for them), one each."""
    call = {"name": "weather", "args": {"city": "Paris"}}
    script = t.Script([
        t.json_reply(response_body(None, calls=[call], usage_metadata=usage(20, 4))),
        t.json_reply(response_body("Sunny.", usage_metadata=usage(30, 2))),
    ])  # fmt: skip
    model = ChatGemini(client=instrumented(gemini_client(script), how))
    agent = agents_mod.create_agent(model, [weather], name="helper")
    assert run(agent, use_async)["messages"][-1].content == "Sunny."
    assert_one_attempt_per_provider_call(relay_events, "gcp.gemini", len(script.requests))
    assert [a.annotated_response.usage.input_tokens for a in attempts(relay_events)] == [20, 30]
