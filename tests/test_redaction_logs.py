"""The library's own log lines get what its events get: the redaction policy in force reads their message and
the traceback they carry. Before, only remembered keys were blanked there: an address in a provider's error, a
tool's exception or a voice pump's traceback reached the logs whole."""

from __future__ import annotations

import logging
import weakref

import pytest

from relay_runtime import Relay, redaction_logs
from relay_runtime.redaction import RedactionPolicy, Rule

EMAIL = "jane.doe@example.com"


@pytest.fixture(autouse=True)
def _only_these_tests_relays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Relays earlier tests left with a policy (held until collected) would read these lines too."""
    monkeypatch.setattr(redaction_logs, "_installed", weakref.WeakKeyDictionary())


def _policy() -> RedactionPolicy:
    return RedactionPolicy(
        [Rule("redact", detector="email", replacement="<mail>", paths=["/request/messages/*/content"])]
    )


def test_a_library_log_line_and_its_traceback_are_redacted_by_the_policy_in_force(caplog) -> None:
    relay = Relay("logs")
    relay.redaction.use(_policy())  # a rule with a path: a log line has none, so it reads every line
    log = logging.getLogger("relay_runtime.integrations.voice_relay.pump")
    with caplog.at_level(logging.INFO, logger="relay_runtime"):
        try:
            raise ValueError(f"the provider said: no such user {EMAIL}")
        except ValueError:
            log.exception("pump failed for %s", EMAIL)
    assert EMAIL not in caplog.text
    assert "pump failed for <mail>" in caplog.text  # the rest of the line is kept
    assert "ValueError: the provider said: no such user <mail>" in caplog.text
    relay.redaction.use(None)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="relay_runtime"):
        log.info("after %s", EMAIL)
    assert f"after {EMAIL}" in caplog.text  # no policy in force: the line as written


def test_a_subscriber_failure_logged_by_the_relay_is_redacted(caplog) -> None:
    relay = Relay("logs")
    relay.redaction.use(_policy())

    def failing(event: object) -> None:
        raise RuntimeError(f"could not deliver to {EMAIL}")

    relay.subscribers.register(failing, name="failing")
    with caplog.at_level(logging.WARNING, logger="relay_runtime"):
        relay.scope.mark("m", {"x": 1})
    relay.redaction.use(None)
    assert relay.diagnostics()["subscriber_errors"] == 1
    assert "could not deliver to <mail>" in caplog.text
    assert EMAIL not in caplog.text


def test_other_loggers_are_left_alone(caplog) -> None:
    relay = Relay("logs")
    relay.redaction.use(_policy())
    with caplog.at_level(logging.INFO):
        logging.getLogger("myapp").info("user %s", EMAIL)
    assert f"user {EMAIL}" in caplog.text
    relay.redaction.use(None)
