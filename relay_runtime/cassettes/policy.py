"""A cassette under a ``RedactionPolicy``: what is stored, matched and checked.

The policy in force is the one of the relay whose attempt makes the call. The live
request is redacted before it is matched (so it compares equal to what was stored),
each new call is stored redacted (its request, and every string of its HTTP answers
through the policy's span rules: a whole-field rule would break the SDK's parsing of
the replay), and the file carries the policy's fingerprint: replaying it under
another policy, or none, is a ``CassetteError`` that says to re-record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..attempt import current_attempt
from ..redaction_policy import RedactionPolicy

if TYPE_CHECKING:
    from pathlib import Path

FINGERPRINT_KEY = "redaction"

# Neutral request keys -> where they sit in the policy's view.
_VIEW = {
    "system": ("request", "system"),
    "messages": ("request", "messages"),
    "tools": ("request", "tools"),
    "params": ("request", "params"),
    "provider_params": ("request", "params"),
}


def policy_in_force() -> RedactionPolicy | None:
    """The redaction policy of the relay whose attempt is running here, if any."""
    attempt = current_attempt()
    if attempt is None:
        return None
    return attempt.relay.redaction.policy


def mismatch(path: Path, recorded: str | None, policy: RedactionPolicy | None) -> str | None:
    """Why a cassette recorded under ``recorded`` cannot be replayed under ``policy``, or None."""
    current = policy.fingerprint if policy is not None else None
    if recorded == current:
        return None
    was = f"redaction policy {recorded}" if recorded else "no redaction policy"
    now = f"redaction policy {current}" if current else "no redaction policy"
    return (
        f"cassette {path} was recorded under {was}, and this run uses {now}: its stored requests and "
        f"answers were redacted differently. Re-record it (mode='record', or under pytest --relay-record=all)"
    )


def redact_request(policy: RedactionPolicy, request: dict[str, Any]) -> dict[str, Any]:
    """The neutral request as the policy records it (what is matched and stored)."""
    out = dict(request)
    for key, path in _VIEW.items():
        if key in out:
            out[key] = policy.redact_at(out[key], path)
    return out


def redact_answers(policy: RedactionPolicy, call: dict[str, Any]) -> dict[str, Any]:
    """A recorded call's answers (HTTP bodies, provider events) with every value a span rule finds replaced."""
    out = dict(call)
    for key, value in call.items():
        if key != "request":
            out[key] = policy.redact_spans(value)
    return out
