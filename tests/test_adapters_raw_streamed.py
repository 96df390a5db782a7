# ruff: noqa: F811 - the fixture imported from test_adapters_instrument_paths is a parameter of the tests below
"""A streamed ``with_streaming_response`` body its caller reads raw (``iter_lines``, ``iter_bytes``,
``iter_text``, ``read``): the SDK never decodes it, so its events are read from what the caller got, as
they come. The attempt used to end a success knowing nothing of the answer: no text, no usage, no cost."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from test_adapters_instrument_paths import attempts, check, only_attempt, scripted  # noqa: F401 - a fixture

from relay_runtime import CHUNK_MARK, Relay
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.sse_body import SseFeed
from relay_runtime.cost import PriceCatalog

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def chat_sse(*pieces: str, usage: Any = USAGE, finish: str | None = "stop") -> t.Reply:
    chunks = t.chat_chunks(list(pieces), model="gpt-x", usage=usage)
    if finish is None:  # a body cut before its finish chunk (and the usage chunk after it)
        chunks = chunks[: len(pieces) + 1]
    return t.sse_reply(t.openai_chat_sse(chunks) if finish else [t.sse_frame(c) for c in chunks])


@pytest.mark.parametrize("read", ["iter_lines", "iter_bytes", "iter_text", "read", "text"])
def test_a_chat_stream_read_raw_is_recorded_as_it_said(relay_turn, relay_events, scripted, read) -> None:
    s = scripted("openai", chat_sse("one ", "two"))
    with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
        got = getattr(r, read)()
        body = got if isinstance(got, str | bytes) else (b"" if read == "iter_bytes" else "").join(got)
    assert ("one " in body) if isinstance(body, str) else (b"one " in body)  # the caller's body, as sent
    check(only_attempt(relay_events), model="gpt-x", inputs=3, outputs=2, finish=["stop"], text="one two")


def test_each_event_is_read_as_it_comes_not_when_the_body_ends(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", chat_sse("one ", "two"))
    with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
        seen = []
        for line in r.iter_lines():
            if '"two"' in line:
                seen = [m.data["delta"].text for m in relay_events.marks(name=CHUNK_MARK)]
    assert "one " in seen and "two" not in seen  # the first piece's mark came while the caller still read
    assert only_attempt(relay_events).annotated_response.output_text == "one two"


def test_a_raw_body_cut_before_its_end_is_an_incomplete_stream(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", chat_sse("one ", "two", finish=None))
    with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
        "".join(r.iter_text())  # the caller gets what came, and no error from us
    (end,) = attempts(relay_events)
    assert (end.outcome, end.error_type) == ("failed", "IncompleteStream")
    assert end.annotated_response.output_text == "one two"


def test_a_raw_body_the_caller_leaves_part_read_is_cancelled_with_what_it_read(
    relay_turn, relay_events, scripted
) -> None:
    s = scripted("openai", chat_sse("one ", "two"))
    with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
        lines = r.iter_lines()
        for line in lines:
            if '"one "' in line:
                break
        lines.close()
    (end,) = attempts(relay_events)
    assert end.outcome == "cancelled"


def test_a_responses_stream_read_raw_is_recorded(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.sse_reply(t.typed_sse(t.responses_events(["a", "b"], model="gpt-x"))))
    with s.client.responses.with_streaming_response.create(model="gpt-x", input="hi", stream=True) as r:
        for _line in r.iter_lines():
            pass
    check(only_attempt(relay_events), model="gpt-x", inputs=20, outputs=7, finish=["completed"], text="ab")


@pytest.mark.asyncio
async def test_an_async_anthropic_stream_read_raw_is_recorded(relay_turn, relay_events, scripted) -> None:
    s = scripted("anthropic", t.sse_reply(t.typed_sse(t.anthropic_events(["x", "y"]))))
    async with s.aclient.messages.with_streaming_response.create(
        model="claude-test", max_tokens=5, messages=[], stream=True
    ) as r:
        async for _piece in r.iter_bytes(chunk_size=5):
            pass
    end = only_attempt(relay_events)
    assert (end.outcome, end.annotated_response.output_text) == ("success", "xy")
    assert end.annotated_response.usage.output_tokens is not None


def test_a_stream_read_raw_is_priced(relay_turn, relay_events, scripted) -> None:
    relay: Relay = relay_turn[0]
    relay.cost.use(PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}))
    try:
        s = scripted("openai", chat_sse("one ", "two"))
        with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
            r.read()
    finally:
        relay.cost.use(None)
    assert only_attempt(relay_events).cost.amount == pytest.approx((3 * 1.0 + 2 * 4.0) / 1e6)


def test_the_event_feed_reads_events_split_anywhere() -> None:
    body = (
        'data: {"a": "ü\u2028x"}\r\n\r\n: a comment\nevent: e\ndata: [DONE]\n\n'
        'data: {"b":\ndata: 1}\n\ndata: junk\n\n'
    )
    raw = body.encode()
    for size in (1, 2, 3, 7, len(raw)):
        feed = SseFeed("iter_bytes")
        events = [e for i in range(0, len(raw), size) for e in feed.feed(raw[i : i + size])] + feed.end()
        assert events == [{"a": "ü\u2028x"}, {"b": 1}], size
    lines = SseFeed("iter_lines")
    events = [e for line in body.replace("\r\n", "\n").split("\n") for e in lines.feed(line)] + lines.end()
    assert events == [{"a": "ü\u2028x"}, {"b": 1}]


def test_a_raw_body_read_past_a_stopped_budget_holds_no_events(relay_host, relay_events, scripted) -> None:
    # The budget ends the attempt; the caller reads on. Each later event was queued for a managed stream that
    # no longer reads: the whole rest of the body was held until the response was dropped.
    from relay_runtime import cost
    from relay_runtime.cost import Budget
    from tests.test_cost import close, conversation

    prices = PriceCatalog.from_mapping({"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}})
    cost.attach(relay_host, prices, Budget(0.0004, per="turn", on_exceed="stop_stream"))
    s = scripted("openai", chat_sse(*["x" * 50] * 200))
    lease, turn = conversation(relay_host)
    with s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r:
        for _line in r.iter_lines():
            pass
        held = r._self_body.stream
    close(lease, turn)
    (end,) = attempts(relay_events)
    assert end.error_type == "BudgetExceeded"
    assert len(held.items) == 0


def _with_a_ping() -> t.Reply:
    events = t.typed_sse(t.anthropic_events(["x", "y"]))
    return t.sse_reply([events[0], t.sse_frame({"type": "ping"}, "ping"), *events[1:]])


def test_a_ping_read_raw_is_no_chunk_as_the_sdk_stream_skips_it(relay_turn, relay_events, scripted) -> None:
    # Anthropic's keep-alive ``ping`` events are dropped by its SDK's stream: read raw, each was one more chunk
    # (a chunk mark of nothing, and the first chunk's time a ping's, before any of the answer came).
    s = scripted("anthropic", _with_a_ping(), _with_a_ping())
    for _chunk in s.client.messages.create(model="claude-test", max_tokens=5, messages=[], stream=True):
        pass
    through_sdk = len(relay_events.marks(name=CHUNK_MARK))
    with s.client.messages.with_streaming_response.create(
        model="claude-test", max_tokens=5, messages=[], stream=True
    ) as r:
        r.read()
    assert len(relay_events.marks(name=CHUNK_MARK)) - through_sdk == through_sdk


def test_the_event_feed_drops_pings() -> None:
    feed = SseFeed("read")
    body = 'event: ping\ndata: {"type": "ping"}\n\nevent: message_stop\ndata: {"type": "message_stop"}\n\n'
    assert [*feed.feed(body), *feed.end()] == [{"type": "message_stop"}]


def test_the_event_queue_has_only_its_own_attributes() -> None:
    # It forwarded any other name to a ``stream`` it does not have, which looked itself up the same way: a
    # RecursionError, not an AttributeError, for ``hasattr`` and ``getattr(..., default)``.
    from relay_runtime.adapters.raw_responses import _Queue

    assert not hasattr(_Queue(), "response")


def test_the_event_feed_reads_lines_ended_by_a_carriage_return_alone() -> None:
    # Server-sent events may end their lines with CR alone (the SDKs' decoders and httpx's iter_lines split there):
    # read as bytes or text, such a body gave no event at all, and the attempt ended a success knowing nothing.
    body = 'event: a\rdata: {"a": 1}\r\rdata: {"b":\rdata: 2}\r\r\ndata: {"c": 3}\r\n\r\n'
    raw = body.encode()
    for size in (1, 2, 3, 5, len(raw)):
        feed = SseFeed("iter_bytes")
        events = [e for i in range(0, len(raw), size) for e in feed.feed(raw[i : i + size])] + feed.end()
        assert events == [{"a": 1}, {"b": 2}, {"c": 3}], size


def test_json_of_a_streamed_body_read_raw_fails_the_caller_not_the_attempt(relay_turn, relay_events, scripted) -> None:
    # ``json()`` reads the whole body, then parses it: the provider had said all it had to say.
    s = scripted("openai", chat_sse("one ", "two"))
    with (
        s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r,
        pytest.raises(ValueError),
    ):
        r.json()
    check(only_attempt(relay_events), model="gpt-x", inputs=3, outputs=2, finish=["stop"], text="one two")


@pytest.mark.asyncio
async def test_json_of_an_async_streamed_body_read_raw_fails_the_caller_not_the_attempt(
    relay_turn, relay_events, scripted
) -> None:
    s = scripted("openai", chat_sse("one ", "two"))
    async with s.aclient.chat.completions.with_streaming_response.create(
        model="gpt-x", messages=[], stream=True
    ) as r:
        with pytest.raises(ValueError):
            await r.json()
    check(only_attempt(relay_events), model="gpt-x", inputs=3, outputs=2, finish=["stop"], text="one two")


def test_a_body_cut_while_json_reads_it_still_fails_the_attempt(relay_turn, relay_events, scripted) -> None:
    s = scripted("openai", t.Reply(frames=[b'data: {"id"'], fail_with=httpx2.ReadError("cut")))
    with (
        s.client.chat.completions.with_streaming_response.create(model="gpt-x", messages=[], stream=True) as r,
        pytest.raises(Exception) as raised,
    ):
        r.json()
    (end,) = attempts(relay_events)
    assert end.outcome == "failed" and end.error_message == str(raised.value)
