"""``stop_stream`` holds for every stream shape: tool-call arguments, several choices, Anthropic tool input,
Responses function arguments and reasoning all count in the running cost (real SDK clients, mock transport)."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog
from tests.test_cost import close, conversation, one

PRICES = {
    "openai": {"gpt-x": {"input": 1.0, "output": 4.0}},
    "anthropic": {"claude-x": {"input": 3.0, "output": 15.0}},
}
# About 100 output tokens of headroom at each provider's output rate: ~300 characters.
OPENAI_HEADROOM = 0.0004
ANTHROPIC_HEADROOM = 0.0015


def _budgeted(host: session.Host, limit: float) -> None:
    cost.attach(host, PriceCatalog.from_mapping(PRICES), Budget(limit, per="turn", on_exceed="stop_stream"))


def _chat_chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "c-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x", "choices": choices}


def _drain(stream: Any) -> tuple[int, BudgetExceeded | None]:
    seen = 0
    try:
        for _ in stream:
            seen += 1
    except BudgetExceeded as exc:
        return seen, exc
    return seen, None


def _stopped(events: Recorder) -> Any:
    attempt = one(events.ends(relay_kind=cv.ATTEMPT))
    assert attempt.outcome == "cancelled" and attempt.error_type == "BudgetExceeded"
    assert attempt.cost.estimated and attempt.cost.wasted
    return attempt


def test_tool_call_arguments_count_in_a_chat_streams_running_cost(relay_host, relay_events) -> None:
    _budgeted(relay_host, OPENAI_HEADROOM)
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write", "arguments": ""}}
    chunks = [_chat_chunk([{"index": 0, "delta": {"role": "assistant", "tool_calls": [head]}, "finish_reason": None}])]
    fragment = {"index": 0, "function": {"arguments": "a" * 50}}
    chunks += [_chat_chunk([{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}])] * 40
    chunks.append(_chat_chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    lease, turn = conversation(relay_host)
    seen, stop = _drain(adapters.stream(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []}))
    close(lease, turn)
    assert stop is not None and seen < 12  # ~300 characters of arguments: 6 fragments, not 40
    _stopped(relay_events)


def test_every_choice_and_its_reasoning_count_when_n_asks_for_several(relay_host, relay_events) -> None:
    _budgeted(relay_host, OPENAI_HEADROOM)
    # The first choice alone says 200 characters (under the headroom); all three say 600.
    choices = [
        {"index": 0, "delta": {"content": "x" * 10}, "finish_reason": None},
        {"index": 1, "delta": {"content": "y" * 10}, "finish_reason": None},
        {"index": 2, "delta": {"reasoning_content": "z" * 10}, "finish_reason": None},
    ]
    chunks = [_chat_chunk(choices)] * 20
    chunks.append(_chat_chunk([{"index": i, "delta": {}, "finish_reason": "stop"} for i in range(3)]))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    lease, turn = conversation(relay_host)
    request = {"model": "gpt-x", "max_tokens": 1000, "n": 3, "messages": []}
    seen, stop = _drain(adapters.stream(scripted.client, request))
    close(lease, turn)
    assert stop is not None and seen < 15
    _stopped(relay_events)


def test_n_multiplies_the_worst_case_checked_before_sending(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(0.005, per="turn"))
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body(model="gpt-x")))
    lease, turn = conversation(relay_host)
    # 500 output tokens at 4.0 per million: 0.002 for one answer fits, three (0.006) do not.
    with pytest.raises(BudgetExceeded) as caught:
        adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 500, "n": 3, "messages": []})
    assert caught.value.estimate == pytest.approx(0.006, abs=1e-5)
    adapters.complete(scripted.client, {"model": "gpt-x", "max_tokens": 500, "messages": []})
    close(lease, turn)
    assert len(scripted.script.requests) == 1


def _anthropic_tool_stream(fragments: int) -> list[dict[str, Any]]:
    start = {**t.anthropic_message_body("", model="claude-x"), "content": [], "stop_reason": None}
    block = {"type": "tool_use", "id": "tu_1", "name": "write", "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": block},
    ]
    piece = json.dumps("b" * 38)
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}
    ] * fragments
    events += [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 500}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return events


def test_anthropic_tool_use_input_deltas_count_in_the_running_cost(relay_host, relay_events) -> None:
    _budgeted(relay_host, ANTHROPIC_HEADROOM)
    scripted = t.scripted_anthropic(t.sse_reply(t.typed_sse(_anthropic_tool_stream(40))))
    lease, turn = conversation(relay_host)
    request = {"model": "claude-x", "max_tokens": 4000, "messages": [{"role": "user", "content": "go"}]}
    seen, stop = _drain(adapters.stream(scripted.client, request))
    close(lease, turn)
    assert stop is not None and seen < 15
    _stopped(relay_events)


def test_anthropic_tool_use_input_deltas_stop_an_async_stream_too(relay_host, relay_events) -> None:
    _budgeted(relay_host, ANTHROPIC_HEADROOM)
    scripted = t.scripted_anthropic(t.sse_reply(t.typed_sse(_anthropic_tool_stream(40))))
    request = {"model": "claude-x", "max_tokens": 4000, "messages": [{"role": "user", "content": "go"}]}

    async def run() -> tuple[int, BudgetExceeded | None]:
        lease, turn = conversation(relay_host)
        seen = 0
        try:
            stream = await adapters.astream(scripted.aclient, request)
            async for _ in stream:
                seen += 1
        except BudgetExceeded as exc:
            return seen, exc
        finally:
            close(lease, turn)
        return seen, None

    seen, stop = asyncio.run(run())
    assert stop is not None and seen < 15
    _stopped(relay_events)


def test_responses_function_arguments_and_refusals_count_in_the_running_cost(relay_host, relay_events) -> None:
    _budgeted(relay_host, OPENAI_HEADROOM)
    created = {**t.responses_body("", model="gpt-x", status="in_progress"), "output": [], "usage": None}
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "write", "arguments": "",
            "status": "in_progress"}  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": created},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item},
    ]
    for i in range(40):
        kind = "response.function_call_arguments.delta" if i % 2 else "response.refusal.delta"
        extra = {"item_id": "fc_1"} if i % 2 else {"item_id": "msg_1", "content_index": 0}
        events.append({"type": kind, "sequence_number": 2 + i, "output_index": 0, "delta": "c" * 50, **extra})
    final = t.responses_body("", model="gpt-x")
    events.append({"type": "response.completed", "sequence_number": 99, "response": final})
    scripted = t.scripted_openai(t.sse_reply(t.typed_sse(events)))
    lease, turn = conversation(relay_host)
    request = {"model": "gpt-x", "max_output_tokens": 1000, "input": "go"}
    seen, stop = _drain(adapters.stream(scripted.client, request, api_mode="responses"))
    close(lease, turn)
    assert stop is not None and seen < 12
    _stopped(relay_events)


@pytest.mark.parametrize("closed_early", [False, True], ids=["read-to-the-end", "closed-by-the-caller"])
def test_a_stream_that_ends_without_usage_still_counts_against_the_budget(
    relay_host, relay_events, closed_early: bool
) -> None:
    # An OpenAI chat stream reports no usage unless asked (include_usage), and a stream the caller closes
    # has none: the provider bills it all the same, so the budget counts an estimate of what it answered.
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(0.005, per="turn"))
    pieces = ["x" * 120] * 10  # 1200 characters: about 0.0016 of output at the pessimistic 3 a token
    replies = [t.sse_reply(t.openai_chat_sse(t.chat_chunks(pieces, model="gpt-x"))) for _ in range(10)]
    scripted = t.scripted_openai(*replies)
    lease, turn = conversation(relay_host)
    with pytest.raises(BudgetExceeded):
        for _ in range(10):
            stream = adapters.stream(scripted.client, {"model": "gpt-x", "max_tokens": 500, "messages": []})
            for i, _chunk in enumerate(stream):
                if closed_early and i == 8:
                    stream.close()
                    break
    close(lease, turn)
    sent = len(scripted.script.requests)
    priced = [e.cost for e in relay_events.ends(relay_kind=cv.ATTEMPT)[:sent]]
    assert all(c.estimated and c.amount > 0.0008 for c in priced)
    assert sent <= 3 and turn.scope.cost.total <= 0.005  # the budget held: ten such answers cost ~0.016


def test_a_cjk_answer_counts_at_more_than_a_token_a_character_in_a_streams_running_cost(
    relay_host, relay_events
) -> None:
    _budgeted(relay_host, OPENAI_HEADROOM)  # about 100 output tokens: 60 CJK characters, 300 ASCII ones
    chunks = [_chat_chunk([{"index": 0, "delta": {"content": "这是一个很长的回答"}, "finish_reason": None}])] * 40
    chunks.append(_chat_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(chunks)))
    lease, turn = conversation(relay_host)
    seen, stop = _drain(adapters.stream(scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []}))
    close(lease, turn)
    # Nine characters a chunk: stopped within 8 chunks (at 3 characters a token it ran 34 chunks, 300 characters).
    assert stop is not None and seen <= 8
    _stopped(relay_events)


# -- a stream its turn's end cut off ---------------------------------------------------------------

PROFILE_LIMIT = 1.0
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}  # 0.001 + 0.002
WORDS = ["w" * 100] * 10


def _cut_off_by_its_turn(relay_host: session.Host) -> tuple[Any, Any, Any]:
    """A stream read once, then its turn ended: the stream (its first chunk read), the turn and the lease."""
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(PROFILE_LIMIT, per="profile"))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(WORDS, model="gpt-x", usage=USAGE))))
    lease, turn = conversation(relay_host)
    stream = adapters.stream(
        scripted.client, {"model": "gpt-x", "max_tokens": 1000, "messages": []}, include_usage=True
    )
    next(stream)
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    return stream, turn, lease


def _profile(relay_host: session.Host) -> Any:
    return relay_host.relay.cost.profile_rollup(relay_host.profile_key)


def test_a_stream_read_on_after_its_turn_ended_is_charged_when_it_ends(relay_host, relay_events) -> None:
    """It was charged nothing (unpriced): the provider billed the whole answer, no budget after the turn saw it."""
    stream, turn, lease = _cut_off_by_its_turn(relay_host)
    assert len(list(stream)) == len(WORDS) + 2  # the rest, still handed out: the finish and usage chunks too
    session.SESSION_COORDINATOR.release_conversation(lease)
    attempt = one(relay_events.ends(relay_kind=cv.ATTEMPT))
    assert attempt.outcome == "cancelled" and attempt.cost is None  # the record as it stood at the turn's end
    (mark,) = relay_events.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.data["attempt_uuid"] == attempt.uuid and mark.data["cost"]["amount"] == pytest.approx(0.003)
    assert _profile(relay_host).total == pytest.approx(0.003) and _profile(relay_host).reserved == 0.0
    assert turn.scope.cost.total == pytest.approx(0.003) and turn.scope.cost.reserved == 0.0


@pytest.mark.parametrize("how", ["close", "collected"])
def test_a_stream_cut_off_by_its_turn_then_dropped_is_charged_for_what_was_read(relay_host, relay_events, how) -> None:
    stream, _turn, lease = _cut_off_by_its_turn(relay_host)
    next(stream)  # one more piece of the text, read after the turn's end
    if how == "close":
        stream.close()
    else:
        del stream
        gc.collect()
    session.SESSION_COORDINATOR.release_conversation(lease)
    (mark,) = relay_events.marks(name=cost.LATE_CHARGE_MARK)
    charged = mark.data["cost"]
    assert charged["estimated"] and charged["amount"] > 0  # estimated from the text read: its usage never came
    assert _profile(relay_host).total == pytest.approx(charged["amount"]) and _profile(relay_host).reserved == 0.0


@pytest.mark.asyncio
async def test_an_async_stream_read_on_after_its_turn_ended_is_charged_when_it_ends(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(PROFILE_LIMIT, per="profile"))
    scripted = t.scripted_openai(t.sse_reply(t.openai_chat_sse(t.chat_chunks(WORDS, model="gpt-x", usage=USAGE))))
    lease, turn = conversation(relay_host)
    request = {"model": "gpt-x", "max_tokens": 1000, "messages": []}
    stream = await adapters.astream(scripted.aclient, request, include_usage=True)
    await stream.__anext__()
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    assert len([chunk async for chunk in stream]) == len(WORDS) + 2
    session.SESSION_COORDINATOR.release_conversation(lease)
    (mark,) = relay_events.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.data["cost"]["amount"] == pytest.approx(0.003)
    assert _profile(relay_host).total == pytest.approx(0.003) and _profile(relay_host).reserved == 0.0


def test_a_body_read_after_its_turn_ended_is_charged_when_it_is_read(relay_host, relay_events) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping(PRICES), Budget(PROFILE_LIMIT, per="profile"))
    body = t.chat_completion_body("later", model="gpt-x", usage=t.chat_usage(1000, 500))
    scripted = t.scripted_openai(t.json_reply(body))
    adapters.instrument(scripted.client)
    try:
        lease, turn = conversation(relay_host)
        create = scripted.client.chat.completions.with_streaming_response.create
        with create(model="gpt-x", max_tokens=1000, messages=[]) as response:
            session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
            assert response.parse().choices[0].message.content == "later"
        session.SESSION_COORDINATOR.release_conversation(lease)
    finally:
        adapters.uninstrument(scripted.client)
    assert one(relay_events.ends(relay_kind=cv.ATTEMPT)).outcome == "cancelled"
    (mark,) = relay_events.marks(name=cost.LATE_CHARGE_MARK)
    assert mark.data["cost"]["amount"] == pytest.approx(0.003)
    assert _profile(relay_host).total == pytest.approx(0.003) and _profile(relay_host).reserved == 0.0
