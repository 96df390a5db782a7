"""A chat model run the callback handler follows is ended with its turn, whatever the framework does after.

Without ``instrument()`` the handler records the attempt from the callbacks. A stream whose iterator the
caller kept past the end of its turn was never ended by it: the turn closed the logical call and left the
attempt under it open, a start with no end (its end came whenever the iterator was dropped, after its
call's, or never). The turn's end now ends the attempt first, cancelled, and the run's own end, when it
comes, adds nothing. Real LangChain, its generic fake chat model.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any
from uuid import uuid4

import pytest

from relay_runtime import conventions as cv
from relay_runtime import session
from tests.framework_support import need, outline

need("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402


def _turn(host: session.Host) -> tuple[Any, Any]:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="t1", task_id="task")
    host.retain_managed_execution("test")
    return lease, turn


def _end(host: session.Host, lease: Any, turn: Any) -> None:
    host.release_managed_execution("test")
    session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
    session.SESSION_COORDINATOR.release_conversation(lease)


def _ends_in_order(events: Any) -> list[tuple[str, str | None]]:
    return [(e.metadata.get(cv.KIND), e.outcome) for e in events.ends() if e.metadata.get(cv.KIND)
            in (cv.ATTEMPT, cv.LOGICAL_CALL)]  # fmt: skip


def test_a_stream_kept_past_its_turn_has_its_attempt_ended_with_the_turn(relay_host, relay_events) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Hello there, world")]))
    lease, turn = _turn(relay_host)
    stream = model.stream("hi", config={"callbacks": [RelayCallbackHandler()]})
    assert next(stream).content == "Hello"
    _end(relay_host, lease, turn)
    # Every start has its end, the attempt's (cancelled) before its call's (cancelled too: its only attempt
    # was, and nothing answered it).
    starts = {e.uuid for e in relay_events.starts()}
    assert starts == {e.uuid for e in relay_events.ends()}
    assert _ends_in_order(relay_events) == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled")]
    # The caller drops the stream later: LangChain reports the run's end, which records nothing more.
    ended = len(relay_events.ends())
    stream.close()
    del stream
    gc.collect()
    assert len(relay_events.ends()) == ended


def test_a_stream_that_ends_inside_its_turn_is_recorded_as_before(relay_host, relay_events) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="Hello there, world")]))
    lease, turn = _turn(relay_host)
    try:
        assert "".join(c.content for c in model.stream("hi", config={"callbacks": [RelayCallbackHandler()]}))
    finally:
        _end(relay_host, lease, turn)
    assert _ends_in_order(relay_events) == [(cv.ATTEMPT, "success"), (cv.LOGICAL_CALL, "success")]


class _Raising(BaseCallbackHandler):
    """Another handler on the run, one LangChain lets raise: it stops calling the other handlers there."""

    raise_error = True
    run_inline = True

    def __init__(self, where: str) -> None:
        self.where = where

    def on_chain_start(self, *args: Any, **kwargs: Any) -> None:
        if self.where == "chain":
            raise RuntimeError("handler boom")

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        if self.where == "model":
            raise RuntimeError("handler boom")


def _run_with_raising_handler(relay_host: Any, where: str, use_async: bool) -> None:
    model = GenericFakeChatModel(messages=iter(["hi", "there"]))
    chain = RunnableLambda(lambda x: x).with_config(run_name="prep") | model
    config: Any = {"callbacks": [RelayCallbackHandler(), _Raising(where)]}
    lease, turn = _turn(relay_host)
    try:
        if use_async:
            asyncio.run(chain.ainvoke("hello", config=config))
        else:
            chain.invoke("hello", config=config)
    except RuntimeError:
        pass
    _end(relay_host, lease, turn)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_run_whose_end_langchain_never_reports_is_ended_cancelled_by_its_turn(
    relay_host, relay_events, use_async
) -> None:
    # The sequence's start reached our handler, then the other handler raised: LangChain reports no end for it.
    _run_with_raising_handler(relay_host, "chain", use_async)
    assert outline(relay_events, skip=("conversation", "turn")) == ["agent RunnableSequence cancelled"]
    (end,) = relay_events.ends(name="RunnableSequence")
    assert end.error_type == "left_open_by_framework"
    assert {e.uuid for e in relay_events.starts()} == {e.uuid for e in relay_events.ends()}


@pytest.mark.parametrize("use_async", [False, True])
def test_a_model_call_whose_attempt_the_turn_cancelled_is_not_closed_as_a_success(
    relay_host, relay_events, use_async
) -> None:
    _run_with_raising_handler(relay_host, "model", use_async)
    assert _ends_in_order(relay_events) == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled")]
    assert {e.uuid for e in relay_events.starts()} == {e.uuid for e in relay_events.ends()}


def test_runs_left_open_end_children_first_and_a_late_end_changes_nothing(relay_host, relay_events) -> None:
    handler = RelayCallbackHandler()
    outer, inner = uuid4(), uuid4()
    lease, turn = _turn(relay_host)
    handler.on_chain_start({}, {"q": 1}, run_id=outer, name="outer")
    handler.on_tool_start({}, "x", run_id=inner, parent_run_id=outer, name="lookup")
    _end(relay_host, lease, turn)
    names = [e.name for e in relay_events.ends() if e.name in ("outer", "lookup")]
    assert names == ["lookup", "outer"]  # the child before its parent
    assert all(e.outcome == "cancelled" for e in relay_events.ends() if e.name in names)
    assert not turn.open_scopes
    # LangChain reports the ends after all: the scopes stay as the turn ended them, ended once.
    ended = len(relay_events.ends())
    handler.on_tool_end("done", run_id=inner)
    handler.on_chain_end({"a": 2}, run_id=outer)
    assert len(relay_events.ends()) == ended


def test_runs_ended_by_langchain_leave_nothing_for_the_turn(relay_host, relay_events) -> None:
    handler = RelayCallbackHandler()
    run = uuid4()
    lease, turn = _turn(relay_host)
    handler.on_chain_start({}, {"q": 1}, run_id=run, name="outer")
    assert len(turn.open_scopes) == 1
    handler.on_chain_end({"a": 2}, run_id=run)
    assert not turn.open_scopes
    _end(relay_host, lease, turn)
    (end,) = relay_events.ends(name="outer")
    assert end.outcome == "success"


class _SlowChatModel(GenericFakeChatModel):
    """Answers after a long wait: the caller's timeout comes first."""

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)
        return await super()._agenerate(*args, **kwargs)


def test_a_top_level_async_model_call_cancelled_is_closed_cancelled_by_its_turn(relay_host, relay_events) -> None:
    """No run around it: LangChain reports no end for a cancelled ``ainvoke`` (its gather's cancellation skips the
    callbacks), so nothing ends the call before its turn does; the turn, ending in success, closes it with what
    became of its attempt (cancelled), not with the turn's own outcome."""
    model = _SlowChatModel(messages=iter(["too late"]))
    lease, turn = _turn(relay_host)

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(model.ainvoke("hi", config={"callbacks": [RelayCallbackHandler()]}), 0.2)

    asyncio.run(main())
    _end(relay_host, lease, turn)
    assert _ends_in_order(relay_events) == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "cancelled")]
    (turn_end,) = relay_events.ends(name="turn")
    assert turn_end.outcome == "success"
    assert {e.uuid for e in relay_events.starts()} == {e.uuid for e in relay_events.ends()}
