"""OpenAI chat streams report token usage only when asked: a managed stream that ends without it is
counted in ``relay.diagnostics()``, and ``include_usage=True`` (off by default) asks for it."""

from __future__ import annotations

import pytest

from relay_runtime import adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.dispatch import STREAMS_WITHOUT_USAGE

# The ``oa`` / ``an`` fixtures: scripted OpenAI and Anthropic clients.
pytest_plugins = ["adapters_support"]


def _chat_stream(usage: dict | None = None) -> t.Reply:
    return t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a", "b"], usage=usage)))


def test_a_chat_stream_without_usage_is_counted_and_asked_for_nothing_by_default(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    oa.add(_chat_stream())
    chunks = list(adapters.stream(oa.client, {"model": "m", "messages": []}))
    assert len(chunks) == 4  # role, two pieces, finish: no extra usage chunk the caller did not ask for
    assert "stream_options" not in oa.script.bodies()[0]
    assert relay.diagnostics().get(STREAMS_WITHOUT_USAGE) == 1
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert end.outcome == "success" and end.annotated_response.usage.input_tokens is None


def test_a_server_that_sends_usage_unasked_is_not_counted(relay_turn, oa) -> None:
    relay, _turn = relay_turn
    oa.add(_chat_stream(usage=t.chat_usage(4, 2)))
    list(adapters.stream(oa.client, {"model": "m", "messages": []}))
    assert STREAMS_WITHOUT_USAGE not in relay.diagnostics()


def test_include_usage_asks_for_usage_and_records_it(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    oa.add(_chat_stream(usage=t.chat_usage(9, 2)))
    kwargs = {"model": "m", "messages": [], "stream_options": {"include_obfuscation": False}}
    chunks = list(adapters.stream(oa.client, kwargs, include_usage=True))
    assert oa.script.bodies()[0]["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert kwargs["stream_options"] == {"include_obfuscation": False}  # the caller's dict is not edited
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 9  # the chunk the caller now sees
    end = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    usage = end.annotated_response.usage
    assert (usage.input_tokens, usage.output_tokens) == (9, 2)
    assert STREAMS_WITHOUT_USAGE not in relay.diagnostics()


@pytest.mark.asyncio
async def test_acomplete_stream_and_instrument_take_include_usage(relay_turn, relay_events, oa) -> None:
    relay, _turn = relay_turn
    oa.add(_chat_stream(usage=t.chat_usage(1, 1)), _chat_stream(usage=t.chat_usage(1, 1)))
    stream = await adapters.acomplete(oa.aclient, {"model": "m", "messages": [], "stream": True}, include_usage=True)
    _ = [c async for c in stream]
    adapters.instrument(oa.aclient, include_usage=True)
    try:
        stream = await oa.aclient.chat.completions.create(model="m", messages=[], stream=True)
        _ = [c async for c in stream]
    finally:
        adapters.uninstrument(oa.aclient)
    assert [b["stream_options"] for b in oa.script.bodies()] == [{"include_usage": True}] * 2
    assert [e.annotated_response.usage.input_tokens for e in relay_events.ends(relay_kind=cv.ATTEMPT)] == [1, 1]
    assert STREAMS_WITHOUT_USAGE not in relay.diagnostics()


def test_instrument_default_leaves_the_request_alone_and_counts(relay_turn, oa) -> None:
    relay, _turn = relay_turn
    oa.add(_chat_stream())
    adapters.instrument(oa.client)
    try:
        list(oa.client.chat.completions.create(model="m", messages=[], stream=True))
    finally:
        adapters.uninstrument(oa.client)
    assert "stream_options" not in oa.script.bodies()[0]
    assert relay.diagnostics()[STREAMS_WITHOUT_USAGE] == 1


def test_anthropic_and_responses_streams_always_carry_usage_and_are_not_counted(relay_turn) -> None:
    relay, _turn = relay_turn
    an = t.scripted_anthropic(t.sse_reply(t.typed_sse(t.anthropic_events(["x"]))))
    list(adapters.stream(an.client, {"model": "c", "max_tokens": 5, "messages": []}, include_usage=True))
    assert "stream_options" not in an.script.bodies()[0]
    assert STREAMS_WITHOUT_USAGE not in relay.diagnostics()
