"""The voice session log under the redaction policy of the relay its session records to.

A record is written as the policy would record it: every string a pathless rule reads. Answers and
transcripts come as deltas of a few characters, so a value they carry is split across records; as
with a stream's chunk marks (``relay_runtime.redaction_streams``), each delta record carries the
text up to a point no value can still straddle and the rest is held, to go out with later deltas or
in one ``released`` record just before the record that ends that stream (the response's ``done``,
the transcript's ``final``, the session's end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from relay_runtime.redaction_pass import Pass
from relay_runtime.redaction_policy import RedactionPolicy
from relay_runtime.redaction_streams import Held, hold_of

# Delta record types -> the record types that end their stream.
_ENDED_BY = {
    "voice.response.delta": frozenset({"voice.response.done"}),
    "voice.input_transcript.delta": frozenset({"voice.input_transcript.final"}),
}
_SESSION_ENDS = frozenset({"voice.session.closed"})

PolicyOf = Callable[[], RedactionPolicy | None]
_Key = tuple[str, Any]


class LogRedaction:
    """What the log writes of each record under the policy ``policy_of()`` names at that moment."""

    def __init__(self, policy_of: PolicyOf) -> None:
        self._policy_of = policy_of
        self._held: dict[_Key, Held] = {}

    def records(self, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The records to write for ``record``: what streams it ends released first, then itself."""
        policy = self._policy_of()
        kind = record.get("type")
        for key in self._ended(kind, record):
            held = self._held.pop(key)
            if held.text:
                yield self._released(policy, key, held, record)
        if policy is None:
            yield record
            return
        if kind in _ENDED_BY and policy._streamed and isinstance(record.get("delta"), str):
            stream = hold_of(self._held, (kind, record.get("response_id")))
            rest = {k: v for k, v in record.items() if k != "delta"}
            out = dict(policy.redact_value(rest))
            out["delta"] = Pass(policy).settle(stream, "text", record["delta"])
            yield out
            return
        yield policy.redact_value(record)

    def policy(self) -> RedactionPolicy | None:
        """The policy in force now (for a process log line that quotes an error)."""
        return self._policy_of()

    def close(self) -> Iterator[dict[str, Any]]:
        """What is still held, released: the log is closing."""
        policy = self._policy_of()
        for key in list(self._held):
            held = self._held.pop(key)
            if held.text:
                yield self._released(policy, key, held, {})

    def _ended(self, kind: Any, record: dict[str, Any]) -> list[_Key]:
        if kind in _SESSION_ENDS:
            return list(self._held)
        rid = record.get("response_id")
        return [key for key in self._held if kind in _ENDED_BY[key[0]] and (key[1] == rid or key[1] is None)]

    def _released(self, policy: RedactionPolicy | None, key: _Key, held: Held, by: dict[str, Any]) -> dict[str, Any]:
        text = Pass(policy).flush(held.text, "text") if policy is not None else held.text
        held.text = ""
        out: dict[str, Any] = {"type": key[0], "delta": text, "released": True}
        if key[1] is not None:
            out["response_id"] = key[1]
        if "at_ms" in by:
            out["at_ms"] = by["at_ms"]
        return out
