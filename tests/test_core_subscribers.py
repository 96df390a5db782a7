"""Subscribers: synchronous, in registration order, filtered by kind, failing open."""

from __future__ import annotations

import logging
import threading

import pytest
from core_support import chunks, request, response

from relay_runtime import CHUNK_MARK, Event, Recorder, Relay, ScopeType, current_attempt, diagnostics


def test_called_synchronously_in_registration_order_on_the_emitting_thread() -> None:
    relay = Relay()
    calls: list[tuple[str, str, int]] = []
    relay.subscribers.register(lambda e: calls.append(("first", e.kind, threading.get_ident())), name="first")
    relay.subscribers.register(lambda e: calls.append(("second", e.kind, threading.get_ident())), name="second")
    with relay.scope.scope("s"):
        assert [c[:2] for c in calls] == [("first", "scope_start"), ("second", "scope_start")]
    assert [c[:2] for c in calls[2:]] == [("first", "scope_end"), ("second", "scope_end")]
    assert {c[2] for c in calls} == {threading.get_ident()}
    assert relay.subscribers.names() == ["first", "second"]


def test_kinds_filter_and_chunk_marks_only_for_those_that_ask() -> None:
    relay = Relay()
    starts, ends, marks, chunky = Recorder(), Recorder(), Recorder(), Recorder()
    relay.subscribers.register(starts, name="starts", kinds=["scope_start"])
    relay.subscribers.register(ends, name="ends", kinds=("scope_end",))
    relay.subscribers.register(marks, name="marks", kinds=["mark"])
    relay.subscribers.register(chunky, name="chunky", chunks=True)
    with relay.scope.scope("s"):
        relay.scope.mark("note")
        stream = relay.llm.stream("p", request(), lambda _r: iter(chunks(3)))
        assert len(list(stream)) == 3
    assert {e.kind for e in starts} == {"scope_start"} and len(starts) == 2
    assert {e.kind for e in ends} == {"scope_end"} and len(ends) == 2
    assert [e.name for e in marks] == ["note"]  # no chunk marks without chunks=True
    chunk_marks = chunky.marks(name=CHUNK_MARK)
    assert [m.data["index"] for m in chunk_marks] == [0, 1, 2]
    assert len(chunky.marks(name="note")) == 1


def test_registration_errors_are_clear() -> None:
    relay = Relay()
    relay.subscribers.register(lambda e: None, name="dup")
    with pytest.raises(ValueError, match="'dup' is already registered"):
        relay.subscribers.register(lambda e: None, name="dup")
    with pytest.raises(ValueError, match="unknown event kinds"):
        relay.subscribers.register(lambda e: None, kinds=["scope_begin"])
    with pytest.raises(TypeError, match="callable"):
        relay.subscribers.register("not a function")  # type: ignore[arg-type]


def test_deregister_by_name_or_callback() -> None:
    relay = Relay()
    rec = Recorder()
    other = Recorder()
    name = relay.subscribers.register(rec)
    relay.subscribers.register(other, name="other")
    assert relay.subscribers.deregister(name) is True
    assert relay.subscribers.deregister(name) is False
    assert relay.subscribers.deregister(other) is True
    relay.scope.mark("nobody hears")
    assert len(rec) == 0 and len(other) == 0


def test_a_raising_subscriber_is_counted_logged_once_per_window_and_never_reaches_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay = Relay()
    after = Recorder()

    def broken(event: Event) -> None:
        raise RuntimeError("exporter down")

    relay.subscribers.register(broken, name="broken")
    relay.subscribers.register(after, name="after")
    with caplog.at_level(logging.WARNING, logger="relay_runtime"):
        for _ in range(5):
            with relay.scope.scope("s"):
                pass
        assert relay.llm.execute("p", request(), lambda _r: response()) == response()
    assert len(after) == 12  # later subscribers still saw every event
    counts = relay.diagnostics()
    assert counts["subscriber_errors"] == 12
    assert counts["subscriber_errors.broken"] == 12
    warnings = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len(warnings) == 1
    assert "RuntimeError: exporter down" in warnings[0].getMessage()


def test_after_the_window_the_next_log_line_says_how_many_were_suppressed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    relay = Relay()
    relay.subscribers.register(lambda e: 1 / 0, name="zero")
    with caplog.at_level(logging.WARNING, logger="relay_runtime"):
        relay.scope.mark("a")
        relay.scope.mark("b")
        relay.scope.mark("c")
        monkeypatch.setattr(diagnostics, "LOG_WINDOW_S", 0.0)
        relay.scope.mark("d")
    lines = [r.getMessage() for r in caplog.records if "zero" in r.getMessage()]
    assert len(lines) == 2
    assert "2 more since the last report" in lines[1]
    assert relay.diagnostics()["subscriber_errors.zero"] == 4


def test_consumers_count_their_own_drops() -> None:
    relay = Relay()
    relay.count("otel.dropped_spans")
    relay.count("otel.dropped_spans", 4)
    assert relay.diagnostics() == {"otel.dropped_spans": 5}


def test_a_call_nobody_watches_opens_no_attempt() -> None:
    relay = Relay()
    relay.subscribers.register(Recorder(), name="marks-only", kinds=["mark"])
    seen: list[object] = []
    result = relay.llm.execute("p", request(), lambda r: seen.append(current_attempt()) or response())
    assert result == response() and seen == [None]
    watcher = Recorder()
    relay.subscribers.register(watcher, name="ends", kinds=["scope_end"])
    relay.llm.execute("p", request(), lambda r: seen.append(current_attempt()) or response())
    assert seen[1] is not None and len(watcher.ends()) == 1


def test_the_public_event_constructor_and_the_hot_path_one_agree() -> None:
    from relay_runtime.events import FIELDS, new_event

    fields: dict = {"start_timestamp": 5, "output": {"a": 1}, "provider": "p", "error_type": "E", "outcome": "failed"}
    a = Event("scope_end", "u1", "p1", "t1", "n", "llm", 9, **fields)
    b = new_event("scope_end", "u1", "p1", "t1", "n", "llm", 9, **fields)
    assert type(b) is Event
    assert {s: getattr(a, s) for s in FIELDS} == {s: getattr(b, s) for s in FIELDS}
    assert a.metadata == {} and a.duration_ns == 4 and a.to_dict()["outcome"] == "failed"


def test_the_first_subscriber_interrupt_is_raised_once_every_later_subscriber_had_the_event() -> None:
    relay = Relay()
    got: list[str] = []

    def interrupting(name: str, error: type[BaseException]) -> object:
        def subscriber(event: Event) -> None:
            got.append(name)
            if event.kind == "scope_start":
                raise error

        return subscriber

    relay.subscribers.register(interrupting("first", KeyboardInterrupt), name="first")
    relay.subscribers.register(lambda e: got.append("second"), name="second")
    relay.subscribers.register(interrupting("third", SystemExit), name="third")
    relay.subscribers.register(lambda e: 1 / 0, name="failing")
    relay.subscribers.register(lambda e: got.append("last"), name="last")
    with pytest.raises(KeyboardInterrupt):
        relay.scope.push("s")
    # The start reached all five (the failing one counted), the scope's end too: nothing stays open.
    assert got[:4] == ["first", "second", "third", "last"]
    assert relay.scope.current() is None
    assert relay.diagnostics()["subscriber_errors"] == 2


def test_nemo_argument_order_registers_by_name() -> None:
    relay = Relay()
    seen: list[str] = []
    assert relay.subscribers.register("nemo-style", lambda e: seen.append(e.kind)) == "nemo-style"
    assert relay.subscribers.register(lambda e: None, name="ours") == "ours"
    with relay.scope.scope("step", ScopeType.FUNCTION):
        pass
    assert seen == ["scope_start", "scope_end"]
    assert relay.subscribers.names() == ["nemo-style", "ours"]
    assert relay.subscribers.deregister("nemo-style")
    with pytest.raises(TypeError, match="must be followed by a callable"):
        relay.subscribers.register("only-a-name")
    with pytest.raises(TypeError, match="no name= keyword"):
        relay.subscribers.register("a", lambda e: None, name="b")
    with pytest.raises(TypeError, match="second positional argument"):
        relay.subscribers.register(lambda e: None, lambda e: None)  # type: ignore[arg-type]


class _ByKind:
    """A subscriber that names a method per kind (``relay_kind_handlers``); calling it is the fallback."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.relay_kind_handlers = {"scope_start": self.started, "mark": self.marked}

    def __call__(self, event: Event) -> None:
        self.seen.append(("called", event.kind))

    def started(self, event: Event) -> None:
        self.seen.append(("started", event.kind))

    def marked(self, event: Event) -> None:
        raise RuntimeError("a handler's failure is the subscriber's")


def test_a_subscriber_naming_a_method_per_kind_gets_each_kind_there_and_is_still_itself() -> None:
    relay = Relay()
    sub = _ByKind()
    name = relay.subscribers.register(sub, name="by-kind")
    with relay.scope.scope("s"):
        relay.scope.mark("m")  # its handler raises: counted under the subscriber's own name, never raised
    # A kind it names no method for is delivered by calling it.
    assert sub.seen == [("started", "scope_start"), ("called", "scope_end")]
    assert relay.diagnostics()["subscriber_errors.by-kind"] == 1
    assert relay.subscribers.names() == [name]
    assert relay.subscribers.deregister(sub) is True  # found by the callback it was registered with
    relay.scope.mark("nobody hears")
    assert len(sub.seen) == 2


def test_an_attribute_that_is_no_dict_of_handlers_is_ignored() -> None:
    from unittest.mock import MagicMock

    relay = Relay()
    mock = MagicMock()  # answers any attribute, relay_kind_handlers too
    odd = Recorder()
    odd.relay_kind_handlers = {"scope_start": "not callable"}  # type: ignore[attr-defined]
    relay.subscribers.register(mock, name="mock")
    relay.subscribers.register(odd, name="odd")
    with relay.scope.scope("s"):
        pass
    assert [c.args[0].kind for c in mock.call_args_list] == ["scope_start", "scope_end"]
    assert [e.kind for e in odd] == ["scope_start", "scope_end"]
