"""``ManagedStream.chunks()``: a generator reading what ``next()`` reads, recording what iterating the stream records
(read out, a provider error mid-stream, stopped early by its reader, stopped by a budget), for readers that are
generators themselves and delegate to it (``yield from``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, chunks, new_relay, request
from test_core_streams import Source

from relay_runtime import CHUNK_MARK
from relay_runtime.cost import Budget, BudgetExceeded
from relay_runtime.streams import ManagedStream

# The two ways of reading a managed stream: iterating it, and through its generator.
READERS: dict[str, Callable[[ManagedStream], Iterator[Any]]] = {
    "iterated": iter,
    "chunks": lambda stream: stream.chunks(),
}


def _records(rec: Any) -> list[tuple[Any, ...]]:
    """What the relay recorded of the attempt, without its ids and times."""
    ends = [(e.outcome, e.error_type, e.output) for e in attempts(rec.events)]
    marks = [(m.data["index"], m.data["delta"]) for m in rec.marks(name=CHUNK_MARK)]
    return [*ends, *marks]


def _stream(relay: Any, source: Source) -> ManagedStream:
    stream = relay.llm.stream("p", request(stream=True), lambda r: source, codec=DictCodec())
    assert type(stream) is ManagedStream
    return stream


def _read_out(read: Callable[[ManagedStream], Iterator[Any]]) -> tuple[list[Any], list[tuple[Any, ...]], Source]:
    relay, rec = new_relay()
    source = Source(chunks(3))
    with relay.scope.scope("turn"):
        got = list(read(_stream(relay, source)))
    assert balanced(rec.events)
    return got, _records(rec), source


def test_read_out_through_chunks_yields_and_records_what_iterating_does() -> None:
    got, records, source = _read_out(READERS["chunks"])
    iterated, iterated_records, _ = _read_out(READERS["iterated"])
    assert got == iterated == chunks(3)
    assert records == iterated_records
    assert records[0] == ("success", None, {"model": "m-1-2024", "text": "t0t1t2"})
    assert source.closed  # read to its end


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_provider_error_mid_stream_fails_the_attempt_and_reaches_the_reader(reader: str) -> None:
    relay, rec = new_relay()
    error = ConnectionError("cut")
    source = Source(chunks(3), error=error, after=2)
    got = []
    with relay.scope.scope("turn"), pytest.raises(ConnectionError) as raised:
        for chunk in READERS[reader](_stream(relay, source)):
            got.append(chunk)
    assert raised.value is error and got == chunks(2)
    assert _records(rec)[0] == ("failed", "ConnectionError", None)
    assert source.closed and balanced(rec.events)


def test_closing_the_chunks_generator_leaves_the_stream_to_its_reader() -> None:
    relay, rec = new_relay()
    source = Source(chunks(3))
    with relay.scope.scope("turn"):
        stream = _stream(relay, source)
        reading = stream.chunks()
        assert next(reading) == chunks(1)[0]
        reading.close()
        assert not attempts(rec.events) and not source.closed  # still open: its reader closes it
        stream.close()
    assert _records(rec)[0] == ("cancelled", None, {"model": "m-1-2024", "text": "t0"})
    assert source.closed and balanced(rec.events)


class _Meter:
    """A budget's stream meter that stops the stream at its second chunk."""

    def __init__(self) -> None:
        self.seen = 0

    def add(self, delta: Any) -> BudgetExceeded | None:
        self.seen += 1
        if self.seen != 2:
            return None
        return BudgetExceeded(Budget(0.001, per="turn", on_exceed="stop_stream"), spent=0.002, limit=0.001, estimate=0)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_budget_stopping_the_stream_closes_the_provider_and_raises_at_the_next_read(reader: str) -> None:
    relay, rec = new_relay()
    source = Source(chunks(5))
    got = []
    with relay.scope.scope("turn"):
        stream = _stream(relay, source)
        stream._life.meter = _Meter()
        with pytest.raises(BudgetExceeded):
            for chunk in READERS[reader](stream):
                got.append(chunk)
    assert got == chunks(2)  # the chunk that crossed the budget reaches the reader, the next read raises
    assert _records(rec)[0][:2] == ("cancelled", "BudgetExceeded")
    assert source.closed and balanced(rec.events)
