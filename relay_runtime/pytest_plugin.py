"""pytest fixtures for code instrumented with relay-runtime (loaded through the ``pytest11`` entry point).

- ``relay_home``: a temporary ``RELAY_HOME`` and a clean session coordinator.
- ``relay_host``: the host (and so the ``Relay``) of that profile.
- ``relay_events``: a ``Recorder`` of every event on that relay, chunk marks included.
- ``relay_turn``: ``(relay, turn)`` for a leased conversation with an open turn and managed
  execution retained; the turn ends and the conversation is released afterwards.
- ``relay_cassette``: the marker ``@pytest.mark.relay_cassette`` and ``--relay-record`` (see
  ``relay_runtime.cassettes.pytest_plugin``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from . import session
from .recorder import Recorder
from .relay import Relay

# The relay_cassette marker, the --relay-record option and the relay_cassette fixture.
pytest_plugins = ["relay_runtime.cassettes.pytest_plugin"]

TURN_CONSUMER = "pytest.relay_turn"


@pytest.fixture
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "relay-home"
    monkeypatch.setenv(session.HOME_ENV, str(home))
    session.reset_for_tests()
    try:
        yield home
    finally:
        session.reset_for_tests()


@pytest.fixture
def relay_host(relay_home: Path) -> session.Host:
    return session.SESSION_COORDINATOR.host(session.current_profile_key())


@pytest.fixture
def relay_events(relay_host: session.Host) -> Iterator[Recorder]:
    recorder = Recorder()
    name = relay_host.relay.subscribers.register(recorder, name="pytest.relay_events", chunks=True)
    try:
        yield recorder
    finally:
        relay_host.relay.subscribers.deregister(name)


@pytest.fixture
def relay_turn(relay_host: session.Host) -> Iterator[tuple[Relay, session.Turn]]:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(
        profile_key=relay_host.profile_key, session_id="session-1", platform="pytest"
    )
    turn = coordinator.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    relay_host.retain_managed_execution(TURN_CONSUMER)
    try:
        yield lease.host.relay, turn
    finally:
        relay_host.release_managed_execution(TURN_CONSUMER)
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
