"""The setup every provider benchmark measures in: a consumer retains managed execution, a leased
conversation, a begun turn, on a relay home of its own."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def managed_turn(*, subscribed: bool) -> Iterator[Any]:
    """The issue's setup: a consumer retains managed execution, a leased conversation, a begun turn.

    Yields the host; with ``subscribed`` one no-op subscriber sees every event.
    """
    from relay_runtime import session

    home = tempfile.mkdtemp(prefix="relay-bench-")
    previous = os.environ.get(session.HOME_ENV)
    os.environ[session.HOME_ENV] = home
    session.reset_for_tests()
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    if subscribed:
        host.relay.subscribers.register(lambda event: None, name="bench-noop")
    host.retain_managed_execution("bench")
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="bench", platform="bench")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="t")
    try:
        yield host
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        host.release_managed_execution("bench")
        session.reset_for_tests()
        if previous is None:
            os.environ.pop(session.HOME_ENV, None)
        else:
            os.environ[session.HOME_ENV] = previous
