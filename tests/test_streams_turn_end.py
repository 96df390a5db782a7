"""A stream whose turn ends on another thread while a chunk is being read: nothing of that chunk is
recorded after the attempt's end event."""

from __future__ import annotations

import threading
from typing import Any

from core_support import DictCodec, chunks, request

from relay_runtime import calls, session
from relay_runtime import conventions as cv
from relay_runtime.threads import ContextExecutor


class _SlowAccumulatorCodec(DictCodec):
    """A codec whose accumulator is still reading a chunk when the turn ends on another thread."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.let_go = threading.Event()

    def accumulator(self) -> Any:
        codec = self
        inner = super().accumulator()

        class Slow:
            def add(self, chunk: Any) -> Any:
                codec.reading.set()
                codec.let_go.wait()
                return inner.add(chunk)

            def finish(self) -> Any:
                return inner.finish()

        return Slow()


def test_a_chunk_read_while_the_turn_ends_on_another_thread_is_not_recorded_after_its_attempt_ended(
    relay_turn, relay_events
) -> None:
    _relay, turn = relay_turn
    codec = _SlowAccumulatorCodec()
    stream = calls.stream_current(request(), lambda r: iter(chunks(2)), name="p", codec=codec)
    with ContextExecutor(1) as pool:
        first = pool.submit(next, stream)
        assert codec.reading.wait(5)
        session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        codec.let_go.set()
        assert first.result(5)["text"] == "t0"
    (ended,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert ended.outcome == "cancelled"
    after = relay_events.events[relay_events.events.index(ended) :]
    assert [e for e in after if e.kind == "mark" and e.parent_uuid == ended.uuid] == []
