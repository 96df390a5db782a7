"""A chat model run the callback handler follows is ended with its turn, whatever the framework does after.

Without ``instrument()`` the handler records the attempt from the callbacks. A stream whose iterator the
caller kept past the end of its turn was never ended by it: the turn closed the logical call and left the
attempt under it open, a start with no end (its end came whenever the iterator was dropped, after its
call's, or never). The turn's end now ends the attempt first, cancelled, and the run's own end, when it
comes, adds nothing. Real LangChain, its generic fake chat model.
"""

from __future__ import annotations

import gc
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime import session
from tests.framework_support import need

need("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402

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
    # Every start has its end, the attempt's (cancelled) before its call's (the turn's outcome, as a managed
    # call's).
    starts = {e.uuid for e in relay_events.starts()}
    assert starts == {e.uuid for e in relay_events.ends()}
    assert _ends_in_order(relay_events) == [(cv.ATTEMPT, "cancelled"), (cv.LOGICAL_CALL, "success")]
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
