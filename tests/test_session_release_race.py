"""``begin_turn`` racing ``release_conversation`` on one lease, with the interleaving forced by Events."""

from __future__ import annotations

import threading
from typing import Any

from relay_runtime import Recorder, session
from relay_runtime import conventions as cv

_WAIT = 5.0  # seconds: a hung step fails the test instead of hanging it


class _GatedLock:
    """The coordinator's lock, made to hold one thread back at its first acquire until told to go on."""

    def __init__(self, lock: Any, held: threading.Thread, arrived: threading.Event, go: threading.Event) -> None:
        self._lock = lock
        self._held = held
        self._arrived = arrived
        self._go = go

    def __enter__(self) -> Any:
        if threading.current_thread() is self._held and not self._arrived.is_set():
            self._arrived.set()
            assert self._go.wait(_WAIT)
        return self._lock.__enter__()

    def __exit__(self, *exc_info: Any) -> Any:
        return self._lock.__exit__(*exc_info)


def test_a_turn_begun_while_its_lease_is_released_never_opens_under_the_ending_conversation() -> None:
    coordinator = session.SessionCoordinator()
    lease = coordinator.acquire_conversation(profile_key="/tmp/race-profile", session_id="s1", platform="t")
    relay = lease.host.relay
    recorder = Recorder()
    relay.subscribers.register(recorder)
    conversation = lease.conversation

    at_lock, go_on, begun, at_pop = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    def begin() -> None:
        try:
            result["turn"] = coordinator.begin_turn(lease, turn_id="t1", task_id="k1")
        except BaseException as exc:
            result["error"] = exc
        finally:
            begun.set()

    beginner = threading.Thread(target=begin)
    # The turn's thread stops where it is about to take the coordinator's lock (after the released check, on
    # the old code), until the release has decided what to close and is about to end the conversation.
    coordinator._lock = _GatedLock(coordinator._lock, beginner, at_lock, go_on)  # type: ignore[assignment]
    pop = relay.scope.pop

    def gated_pop(handle: Any, **kwargs: Any) -> None:
        if handle is conversation:
            at_pop.set()
            assert begun.wait(_WAIT)  # the turn's thread has done all it will do before the conversation ends
        pop(handle, **kwargs)

    relay.scope.pop = gated_pop  # type: ignore[method-assign]
    beginner.start()
    assert at_lock.wait(_WAIT)
    releaser = threading.Thread(target=coordinator.release_conversation, args=(lease,))
    releaser.start()
    assert at_pop.wait(_WAIT)
    go_on.set()
    beginner.join(_WAIT)
    releaser.join(_WAIT)
    assert not beginner.is_alive() and not releaser.is_alive()

    # The release won: no turn opens under the conversation it ends, and the caller is told why.
    assert "turn" not in result, "a turn was opened under a conversation being released"
    error = result["error"]
    assert isinstance(error, ValueError) and "was released" in str(error)
    assert recorder.starts(relay_kind=cv.TURN) == []
    assert conversation.ended and [e.uuid for e in recorder.ends(relay_kind=cv.CONVERSATION)] == [conversation.uuid]


def test_a_turn_begun_before_the_release_is_ended_by_it_before_its_conversation() -> None:
    coordinator = session.SessionCoordinator()
    lease = coordinator.acquire_conversation(profile_key="/tmp/race-profile", session_id="s2", platform="t")
    recorder = Recorder()
    lease.host.relay.subscribers.register(recorder)
    turn = coordinator.begin_turn(lease, turn_id="t1", task_id="k1")
    releaser = threading.Thread(target=coordinator.release_conversation, args=(lease,))
    releaser.start()
    releaser.join(_WAIT)
    assert turn.ended and turn.outcome == "cancelled"
    kinds = [e.metadata[cv.KIND] for e in recorder.ends()]
    assert kinds == [cv.TURN, cv.CONVERSATION]
