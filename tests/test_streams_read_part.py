"""A stream the caller stopped reading keeps the answer as far as it was read.

The user stops a generation (``close()``, ``break``, the stream dropped): the attempt ends cancelled, as
DESIGN.md says, and the record said nothing was answered at all; the run page, the journal and the
trajectory showed an empty answer where the user had read half of one. Real SDK clients over the mock
transport, the ATIF exporter live.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cost, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.cost import PriceCatalog
from relay_runtime.integrations.trajectory import AtifExporter


@pytest.fixture
def atif(relay_host: session.Host) -> Any:
    exporter = AtifExporter().attach(relay_host)
    yield exporter
    exporter.detach()


@pytest.mark.parametrize("how", ["close", "break"])
def test_a_chat_stream_stopped_early_records_what_was_read(
    atif: Any, relay_host: session.Host, relay_turn: Any, relay_events: Recorder, how: str
) -> None:
    cost.attach(relay_host, PriceCatalog.from_mapping({"openai": {"gpt-test": {"input": 1.0, "output": 2.0}}}))
    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["one ", "two ", "three"])))])
    client = adapters.instrument(t.openai_client(script))
    stream = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "count"}],
                                            stream=True)  # fmt: skip
    read = ""
    for chunk in stream:
        read += (chunk.choices[0].delta.content or "") if chunk.choices else ""
        if read == "one two ":
            break
    if how == "close":
        stream.close()
    else:
        del stream, chunk  # the caller dropped it: collected
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "cancelled"
    assert end.annotated_response.output_text == read == "one two "
    assert end.annotated_response.finish_reasons == []  # the provider's end was not read
    # Nor its usage: a part's would price it short. With no budget metering the stream, no amount is
    # made up (``missing == ("usage",)``), as before the answer read was kept.
    assert end.annotated_response.usage.input_tokens is None
    assert end.cost.amount is None and end.cost.missing == ("usage",)
    steps = atif.export()["steps"]
    assert [(s["source"], s.get("message")) for s in steps] == [("user", "count"), ("agent", "one two ")]


def test_an_anthropic_stream_stopped_early_records_what_was_read(relay_turn: Any, relay_events: Recorder) -> None:
    frames = t.typed_sse(t.anthropic_events(["Hel", "lo ", "there"]))
    script = t.Script([t.sse_reply(frames)])
    client = adapters.instrument(t.anthropic_client(script))
    read = ""
    with client.messages.stream(model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
        for text in s.text_stream:
            read += text
            if read == "Hello ":
                break
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "cancelled"
    assert end.annotated_response.output_text == "Hello "


def test_a_stream_stopped_before_its_first_chunk_records_no_answer(relay_turn: Any, relay_events: Recorder) -> None:
    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["one"])))])
    client = adapters.instrument(t.openai_client(script))
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}], stream=True).close()
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "cancelled" and end.annotated_response is None


def test_an_async_stream_closed_early_records_what_was_read(relay_turn: Any, relay_events: Recorder) -> None:
    import asyncio

    script = t.Script([t.sse_reply(t.openai_chat_sse(t.chat_chunks(["one ", "two ", "three"])))])
    client = adapters.instrument(t.async_openai_client(script))

    async def read_two() -> str:
        stream = await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "count"}], stream=True
        )
        read = ""
        async for chunk in stream:
            read += (chunk.choices[0].delta.content or "") if chunk.choices else ""
            if read == "one two ":
                break
        await stream.close()
        return read

    assert asyncio.run(read_two()) == "one two "
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.outcome == "cancelled" and end.annotated_response.output_text == "one two "
