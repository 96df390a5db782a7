"""Codecs: decode -> edit -> apply overlays only the edit; annotations; accumulators over real SDK streams."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx2
import pytest

from relay_runtime.adapters.anthropic_messages import AnthropicMessagesCodec
from relay_runtime.adapters.openai_chat import OpenAIChatCodec
from relay_runtime.adapters.openai_responses import OpenAIResponsesCodec
from relay_runtime.adapters.testing import (
    anthropic_events,
    anthropic_message_body,
    anthropic_usage,
    chat_chunks,
    chat_completion_body,
    chat_usage,
    json_reply,
    openai_chat_sse,
    responses_body,
    responses_events,
    responses_usage,
    scripted_anthropic,
    scripted_openai,
    sse_reply,
    typed_sse,
)
from relay_runtime.codec import LLMCodec, StreamAccumulator
from relay_runtime.types import REMOVED, AnnotatedLLMResponse, TokenUsage

CODECS = [OpenAIChatCodec(), OpenAIResponsesCodec(), AnthropicMessagesCodec()]


def _transport_values() -> dict[str, object]:
    return {
        "timeout": httpx2.Timeout(3.0),
        "extra_headers": {"x-trace": "1"},
        "extra_body": {"vendor": {"nested": [1, 2]}},
        "extra_query": {"q": "1"},
    }


# -- decode / apply -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: type(c).__name__)
def test_codecs_satisfy_the_core_protocol(codec: LLMCodec) -> None:
    assert isinstance(codec, LLMCodec)
    assert isinstance(codec.accumulator(), StreamAccumulator)


def test_chat_round_trip_overlays_only_the_changed_param() -> None:
    codec = OpenAIChatCodec()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    kwargs = {
        "model": "gpt-x",
        "messages": messages,
        "temperature": 1.0,
        "max_completion_tokens": 64,
        "tools": tools,
        "tool_choice": "auto",
        "stop": ["\n"],
        **_transport_values(),
    }
    annotated = codec.decode(kwargs)
    assert annotated.model == "gpt-x"
    assert annotated.system == "be brief"
    assert annotated.messages == messages
    assert annotated.params == {"temperature": 1.0, "max_tokens": 64, "stop": ["\n"]}
    assert annotated.provider_params == {}
    assert annotated.tools == tools and annotated.tool_choice == "auto"
    assert (annotated.provider, annotated.operation, annotated.stream) == ("openai", "chat", False)

    before = annotated.snapshot()
    annotated.params["temperature"] = 0.25
    out = codec.apply(kwargs, annotated.changes_since(before))

    assert out == {**kwargs, "temperature": 0.25}
    assert out is not kwargs and kwargs["temperature"] == 1.0  # the caller's kwargs are untouched
    for key in ("messages", "tools", "timeout", "extra_headers", "extra_body", "extra_query", "stop"):
        assert out[key] is kwargs[key], key


def test_chat_apply_removes_params_and_rewrites_system() -> None:
    codec = OpenAIChatCodec()
    kwargs = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": 0.5, "seed": 3}
    out = codec.apply(kwargs, {"params": {"top_p": REMOVED, "temperature": 0.1}, "system": "new sys"})
    assert "top_p" not in out and out["temperature"] == 0.1 and out["seed"] == 3
    assert out["messages"] == [{"role": "system", "content": "new sys"}, {"role": "user", "content": "hi"}]
    again = codec.apply(out, {"system": "other"})
    assert again["messages"][0] == {"role": "system", "content": "other"} and len(again["messages"]) == 2
    assert codec.apply(again, {"system": None})["messages"] == [{"role": "user", "content": "hi"}]


def test_responses_round_trip_maps_input_and_instructions() -> None:
    codec = OpenAIResponsesCodec()
    kwargs = {
        "model": "gpt-x",
        "input": "hello",
        "instructions": "sys",
        "max_output_tokens": 99,
        "reasoning": {"effort": "low"},
        **_transport_values(),
    }
    annotated = codec.decode(kwargs)
    assert annotated.messages == [{"role": "user", "content": "hello"}]
    assert annotated.system == "sys"
    assert annotated.params == {"max_tokens": 99}
    assert annotated.provider_params == {"reasoning": {"effort": "low"}}
    assert annotated.operation == "responses"

    before = annotated.snapshot()
    annotated.system = "changed"
    annotated.params["max_tokens"] = 10
    out = codec.apply(kwargs, annotated.changes_since(before))
    assert out == {**kwargs, "instructions": "changed", "max_output_tokens": 10}
    assert out["input"] == "hello"  # messages untouched: the string input stays a string
    assert out["reasoning"] is kwargs["reasoning"] and out["timeout"] is kwargs["timeout"]

    before = annotated.snapshot()
    annotated.messages.append({"role": "user", "content": "more"})
    out = codec.apply(kwargs, annotated.changes_since(before))
    assert out["input"] == [{"role": "user", "content": "hello"}, {"role": "user", "content": "more"}]


def test_anthropic_round_trip_keeps_system_and_removes_on_none() -> None:
    codec = AnthropicMessagesCodec()
    system = [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    kwargs = {
        "model": "claude-x",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "system": system,
        "thinking": {"type": "enabled", "budget_tokens": 50},
        "stream": True,
        **_transport_values(),
    }
    annotated = codec.decode(kwargs)
    assert annotated.system is system
    assert annotated.params == {"max_tokens": 100}
    assert annotated.provider_params == {"thinking": {"type": "enabled", "budget_tokens": 50}}
    assert annotated.stream is True and annotated.provider == "anthropic"

    before = annotated.snapshot()
    annotated.model = "claude-y"
    annotated.system = None
    del annotated.provider_params["thinking"]
    out = codec.apply(kwargs, annotated.changes_since(before))
    assert out["model"] == "claude-y" and "system" not in out and "thinking" not in out
    assert out["messages"] is kwargs["messages"] and out["extra_body"] is kwargs["extra_body"]
    assert out["max_tokens"] == 100 and out["stream"] is True


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: type(c).__name__)
def test_apply_names_bad_changes(codec: LLMCodec) -> None:
    with pytest.raises(ValueError, match="structural or transport field"):
        codec.apply({"model": "m"}, {"params": {"timeout": 3}})
    with pytest.raises(ValueError, match="unknown annotated request field 'colour'"):
        codec.apply({"model": "m"}, {"colour": "red"})
    with pytest.raises(TypeError, match="params changes must be a mapping"):
        codec.apply({"model": "m"}, {"params": ["temperature"]})


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: type(c).__name__)
def test_unchanged_request_applies_to_equal_kwargs(codec: LLMCodec) -> None:
    kwargs = {"model": "m", "messages": [], "input": [], "temperature": 0.3, **_transport_values()}
    annotated = codec.decode(kwargs)
    assert annotated.changes_since(annotated.snapshot()) == {}
    assert codec.apply(kwargs, {}) == kwargs


# -- annotate_response -----------------------------------------------------------------------


def test_chat_annotation_reads_usage_cache_and_reasoning_tokens() -> None:
    scripted = scripted_openai(
        json_reply(
            chat_completion_body(
                None,
                model="gpt-served",
                id="cc-9",
                finish_reason="tool_calls",
                tool_calls=[{"id": "call_1", "name": "lookup", "arguments": '{"q": "x"}'}],
                usage={
                    **chat_usage(100, 40, cached=60, reasoning=25),
                    "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 7},
                },
            )
        )
    )
    response = scripted.client.chat.completions.create(model="gpt-asked", messages=[])
    annotation = OpenAIChatCodec().annotate_response(response)
    assert annotation.model == "gpt-served" and annotation.id == "cc-9"
    assert annotation.finish_reasons == ["tool_calls"]
    assert annotation.usage == TokenUsage(100, 40, cache_read_tokens=60, cache_creation_tokens=7, reasoning_tokens=25)
    assert annotation.output_text is None
    assert annotation.tool_calls == [{"id": "call_1", "name": "lookup", "arguments": '{"q": "x"}'}]


def test_responses_annotation_reads_output_function_calls_and_usage() -> None:
    scripted = scripted_openai(
        json_reply(
            responses_body(
                "the answer",
                model="gpt-r",
                id="resp_7",
                function_call={"call_id": "call_9", "name": "f", "arguments": "{}"},
                usage=responses_usage(50, 30, cached=20, reasoning=11),
            )
        )
    )
    response = scripted.client.responses.create(model="gpt-r", input="q")
    annotation = OpenAIResponsesCodec().annotate_response(response)
    assert (annotation.model, annotation.id, annotation.output_text) == ("gpt-r", "resp_7", "the answer")
    assert annotation.finish_reasons == ["completed"]
    assert annotation.usage == TokenUsage(50, 30, cache_read_tokens=20, cache_creation_tokens=0, reasoning_tokens=11)
    assert annotation.tool_calls == [{"id": "call_9", "name": "f", "arguments": "{}"}]


def test_responses_annotation_reports_the_incomplete_reason() -> None:
    body = {
        **responses_body("cut"),
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert OpenAIResponsesCodec().annotate_response(body).finish_reasons == ["max_output_tokens"]


def test_anthropic_annotation_reads_cache_and_thinking_tokens() -> None:
    usage = {
        **anthropic_usage(10, 80, cache_read=500, cache_creation=40),
        "output_tokens_details": {"thinking_tokens": 33},
    }
    scripted = scripted_anthropic(
        json_reply(
            anthropic_message_body(
                "hi",
                model="claude-served",
                id="msg_5",
                stop_reason="tool_use",
                tool_use={"id": "tu_1", "name": "search", "input": {"q": "x"}},
                usage=usage,
            )
        )
    )
    response = scripted.client.messages.create(model="claude-asked", max_tokens=10, messages=[])
    annotation = AnthropicMessagesCodec().annotate_response(response)
    assert (annotation.model, annotation.id, annotation.output_text) == ("claude-served", "msg_5", "hi")
    assert annotation.finish_reasons == ["tool_use"]
    assert annotation.usage == TokenUsage(10, 80, cache_read_tokens=500, cache_creation_tokens=40, reasoning_tokens=33)
    assert annotation.tool_calls == [{"id": "tu_1", "name": "search", "arguments": {"q": "x"}}]


@pytest.mark.parametrize(
    "response",
    [
        SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="ok"))]),
        SimpleNamespace(choices=[]),
        SimpleNamespace(),
        {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": None},
        {"choices": "not a list", "usage": {"prompt_tokens": "many"}},
        None,
        42,
    ],
)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: type(c).__name__)
def test_annotation_tolerates_duck_typed_and_partial_responses(codec: LLMCodec, response: object) -> None:
    annotation = codec.annotate_response(response)
    assert isinstance(annotation, AnnotatedLLMResponse)
    assert annotation.usage.input_tokens is None


def test_chat_annotation_of_a_duck_typed_response_keeps_its_text() -> None:
    response = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="ok"))])
    annotation = OpenAIChatCodec().annotate_response(response)
    assert annotation.output_text == "ok" and annotation.finish_reasons == [] and annotation.usage == TokenUsage()
    as_dict = OpenAIChatCodec().annotate_response(
        {"model": "m", "choices": [{"message": {"content": "dict"}, "finish_reason": "length"}]}
    )
    assert (as_dict.model, as_dict.output_text, as_dict.finish_reasons) == ("m", "dict", ["length"])


# -- accumulators over real SDK streams ------------------------------------------------------


def _fold(codec: LLMCodec, chunks: object) -> tuple[list[object], object, AnnotatedLLMResponse]:
    acc = codec.accumulator()
    deltas = [acc.add(c) for c in chunks]  # type: ignore[attr-defined]
    final, annotation = acc.finish()
    return deltas, final, annotation


def test_chat_accumulator_rebuilds_text_tool_calls_and_usage_from_sse() -> None:
    from openai.types.chat import ChatCompletion

    chunks = chat_chunks(
        ["Hel", "lo"],
        model="gpt-s",
        finish_reason="tool_calls",
        tool_call={"id": "call_1", "name": "f", "arguments": '{"city": "Paris"}'},
        usage=chat_usage(9, 4, cached=2, reasoning=1),
    )
    scripted = scripted_openai(sse_reply(openai_chat_sse(chunks)))
    stream = scripted.client.chat.completions.create(
        model="gpt-s", messages=[], stream=True, stream_options={"include_usage": True}
    )
    deltas, final, annotation = _fold(OpenAIChatCodec(), stream)

    texts = [d.text for d in deltas if d is not None]  # type: ignore[attr-defined]
    assert "".join(texts) == "Hello"
    assert deltas[0] is not None and deltas[0].model == "gpt-s"  # type: ignore[attr-defined]
    assert deltas[-1] is None  # the usage-only chunk says nothing
    assert isinstance(final, ChatCompletion)
    assert final.choices[0].message.content == "Hello"
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.id, call.function.name, call.function.arguments) == (  # type: ignore[union-attr]
        "call_1",
        "f",
        '{"city": "Paris"}',
    )
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert annotation.finish_reasons == ["tool_calls"]
    assert annotation.usage == TokenUsage(9, 4, cache_read_tokens=2, reasoning_tokens=1)
    assert annotation.tool_calls == [{"id": "call_1", "name": "f", "arguments": '{"city": "Paris"}'}]
    assert OpenAIChatCodec().annotate_response(final) == annotation


def test_chat_accumulator_reads_openai_compatible_reasoning_deltas() -> None:
    chunks = [
        {"id": "c", "model": "ds", "choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]},
        {
            "id": "c",
            "model": "ds",
            "choices": [{"index": 0, "delta": {"content": "answer"}, "finish_reason": "stop"}],
        },
    ]
    deltas, final, annotation = _fold(OpenAIChatCodec(), chunks)
    assert deltas[0].reasoning == "think " and deltas[1].text == "answer"  # type: ignore[union-attr]
    assert final.choices[0].message.reasoning_content == "think "  # type: ignore[attr-defined]
    assert annotation.output_text == "answer" and annotation.usage == TokenUsage()


@pytest.mark.asyncio
async def test_responses_accumulator_over_async_sdk_stream() -> None:
    from openai.types.responses import Response

    events = responses_events(
        ["Bon", "jour"],
        model="gpt-r",
        function_call={"call_id": "call_2", "name": "g", "arguments": '{"n": 1}'},
        usage=responses_usage(5, 6, reasoning=3),
    )
    scripted = scripted_openai(sse_reply(typed_sse(events)))
    acc = OpenAIResponsesCodec().accumulator()
    deltas = []
    stream = await scripted.aclient.responses.create(model="gpt-r", input="hi", stream=True)
    async for event in stream:
        deltas.append(acc.add(event))
    final, annotation = acc.finish()

    assert deltas[0].model == "gpt-r"  # type: ignore[union-attr]
    assert "".join(d.text for d in deltas if d is not None) == "Bonjour"
    assert isinstance(final, Response) and final.output_text == "Bonjour"
    assert annotation.usage == TokenUsage(5, 6, cache_read_tokens=0, cache_creation_tokens=0, reasoning_tokens=3)
    assert annotation.tool_calls == [{"id": "call_2", "name": "g", "arguments": '{"n": 1}'}]


def test_responses_accumulator_without_a_terminal_event_rebuilds_from_deltas() -> None:
    events = responses_events(["a", "b"], function_call={"call_id": "c", "name": "f", "arguments": '{"k": 2}'})
    scripted = scripted_openai(sse_reply(typed_sse(events[:-1])))
    stream = scripted.client.responses.create(model="gpt-test", input="hi", stream=True)
    _deltas, final, annotation = _fold(OpenAIResponsesCodec(), stream)
    assert final.output_text == "ab"  # type: ignore[attr-defined]
    assert annotation.output_text == "ab" and annotation.finish_reasons == []
    assert annotation.tool_calls == [{"id": "c", "name": "f", "arguments": '{"k": 2}'}]


@pytest.mark.asyncio
async def test_anthropic_accumulator_rebuilds_message_from_async_sdk_stream() -> None:
    from anthropic.types import Message

    events = anthropic_events(
        ["Hi ", "there"],
        model="claude-s",
        thinking="let me see",
        tool_use={"id": "tu_1", "name": "calc", "input": {"x": [1, 2]}},
        stop_reason="tool_use",
        input_usage=anthropic_usage(70, 1, cache_read=64, cache_creation=3),
        output_tokens=21,
    )
    scripted = scripted_anthropic(sse_reply(typed_sse(events)))
    acc = AnthropicMessagesCodec().accumulator()
    deltas = []
    stream = await scripted.aclient.messages.create(model="claude-s", max_tokens=50, messages=[], stream=True)
    async for event in stream:
        deltas.append(acc.add(event))
    final, annotation = acc.finish()

    said = [d for d in deltas if d is not None]
    assert said[0].model == "claude-s"
    assert "".join(d.reasoning for d in said) == "let me see" and "".join(d.text for d in said) == "Hi there"
    assert isinstance(final, Message)
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].signature == "sig"  # type: ignore[union-attr]
    assert final.content[2].input == {"x": [1, 2]}  # type: ignore[union-attr]
    assert annotation.finish_reasons == ["tool_use"] and annotation.output_text == "Hi there"
    assert annotation.usage == TokenUsage(70, 21, cache_read_tokens=64, cache_creation_tokens=3)
    assert annotation.tool_calls == [{"id": "tu_1", "name": "calc", "arguments": {"x": [1, 2]}}]
    assert AnthropicMessagesCodec().annotate_response(final) == annotation


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: type(c).__name__)
def test_accumulators_ignore_foreign_chunks(codec: LLMCodec) -> None:
    deltas, _final, annotation = _fold(codec, [{"delta": "one"}, SimpleNamespace(), None, "text"])
    assert deltas == [None, None, None, None]
    assert annotation.output_text is None and annotation.tool_calls == []
