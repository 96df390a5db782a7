"""Trajectory records: what a trajectory needs of a relay's events, as small JSON-ready dicts.

One ``Tracker`` per consumer turns events into records, in event order. The live
``AtifExporter`` builds its trajectory from them, and the run journal writes the
same records into its rows (under ``"traj"``), so a trajectory rebuilt from the
journal is the live one. A record is written when its scope ends:

- ``turn`` (at the turn's start) and ``turn_end``;
- ``call``: a logical LLM call, with its outcome (and ``answer``, when an execution intercept answered in
  place of its failed provider: what the caller got, which no attempt's record holds);
- ``attempt``: one provider call, with its request as a *delta* against an earlier
  attempt of the same conversation (``base``, how many messages it ``keep``s, the ``new``
  ones, and the kwargs it ``set``s or ``drop``s), so that each row holds a call's new
  messages only, never the history again; and what the response said;
- ``tool`` (at the tool's start) and ``tool_end``;
- ``late_charge``: what an attempt cost when it was priced after its end (its answer came after its
  turn ended it: ``relay.cost.late_charge``), by the attempt's ``id``.

``os`` / ``oe`` number the start and end events in the order the tracker saw them,
which is how ATOF events rebuilt from records are put back in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event
from relay_runtime import conventions as cv
from relay_runtime.redaction_reasoning import reasoning_texts

from .deltas import CONVERSATION_KEYS, History
from .plain import plain
from .sent_copies import SentCopies

TURN, TURN_END, CALL, ATTEMPT, TOOL, TOOL_END = "turn", "turn_end", "call", "attempt", "tool", "tool_end"
LATE_CHARGE = "late_charge"
_ENDED_ATTEMPTS = 1024  # ended attempts whose conversation is remembered, for a charge that comes after
TOOL_CALL_ID = "tool_call_id"
_CALL_META = (cv.API_REQUEST_ID, cv.CALL_ROLE)
_ATTEMPT_META = (cv.API_REQUEST_ID, cv.CALL_ROLE, cv.RETRY_COUNT, cv.SDK_RETRIES, cv.API_MODE)
_MAPPINGS = (dict, MappingProxyType)


@dataclass(eq=False)
class _Open:
    session_id: str
    start: int
    os: int
    kind: str
    req: dict[str, Any] | None = None
    said: dict[str, Any] | None = None  # the view's conversation as a delta, for a request whose kwargs hold none
    reasoning: list[str] = field(default_factory=list)
    answer: dict[str, Any] | None = None  # a logical call's fallback answer (``fallback``)
    ended: str | None = None  # a logical call's attempt that ended last, which a fallback answer comes after


def frozen_request(event: Event, copies: SentCopies | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """An attempt start event's request as it was sent: its kwargs (each list and dict among them copied:
    the agent goes on appending to its own conversation, and to a tools list that tools join as they are
    found) and headers (already redacted by the core). With ``copies``, each message of the conversation is
    copied too (the agent may rewrite one in place): for a writer that writes whole requests later.

    Exporters that read events later, on another thread, take this on the agent's thread.
    """
    given = event.input
    if type(given) is not dict and not isinstance(given, Mapping):
        given = {}
    content = given.get("content")
    headers = given.get("headers")
    # The core hands a read-only view of the kwargs (a MappingProxyType): its type is checked before the ABC.
    kwargs = dict(content) if type(content) in _MAPPINGS or isinstance(content, Mapping) else {}
    for key, value in kwargs.items():
        # The agent's own: it goes on changing them after the call, and a later request is compared with this
        # one as it was sent. (Values are replaced, no key added: the loop may go on over the dict.)
        kind = type(value)
        if kind is list:
            kwargs[key] = copies.messages(value) if copies is not None and key in CONVERSATION_KEYS else list(value)
        elif kind is dict:
            kwargs[key] = dict(value)
    return kwargs, dict(headers) if headers and (type(headers) in _MAPPINGS or isinstance(headers, Mapping)) else {}


_TOOL_SCOPE, _LLM_SCOPE = "tool", "llm"  # the ``scope_type`` of a tool call, and of an attempt


def frozen(event: Event) -> Any:
    """What ``event`` carries that the agent may go on changing once it was delivered, taken as it was then:
    an attempt start's request (``frozen_request``), a tool's arguments (at its start) or result (at its end),
    a mark's data (a stream chunk's aside: the SDK's chunk and our delta stay as they came) as JSON-ready
    copies; None for any other event. A tool's arguments and result, or a mark's data (a progress dict marked
    at each step), are often the agent's own dicts and lists, changed as it goes on: an exporter that reads
    events later, on another thread, takes this on the agent's thread and gives it to ``Tracker`` (or writes
    it) in place of the event's own."""
    kind, scope_type = event.kind, event.scope_type
    if kind == MARK:
        return plain(event.data) if event.name != CHUNK_MARK and event.data is not None else None
    if scope_type == _TOOL_SCOPE:
        if kind == SCOPE_START:
            return plain(event.input)
        return plain(event.output) if kind == SCOPE_END else None
    return frozen_request(event) if scope_type == _LLM_SCOPE and kind == SCOPE_START else None


_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens")


def _usage_of(usage: Any) -> dict[str, int]:
    # Read field by field: TokenUsage.as_dict() asks dataclasses for its fields on every call.
    if usage is None:
        return {}
    return {name: value for name in _USAGE if (value := getattr(usage, name, None)) is not None}


def _response(event: Event) -> dict[str, Any] | None:
    annotation = event.annotated_response
    if annotation is None:
        return None
    out: dict[str, Any] = {}
    # The provider's words, as every string a record takes from it: scrubbed of the keys the relay remembered.
    if annotation.model:
        out["model"] = plain(annotation.model)
    if annotation.id:
        out["id"] = plain(annotation.id)
    if annotation.finish_reasons:
        out["finish_reasons"] = plain(list(annotation.finish_reasons))
    usage = _usage_of(annotation.usage)
    if usage:
        out["usage"] = usage
    if annotation.output_text:
        out["text"] = plain(annotation.output_text)
    if annotation.tool_calls:
        out["tool_calls"] = plain(annotation.tool_calls, keys=False)
    if annotation.time_to_first_chunk_ns is not None:
        out["ttfc_ns"] = annotation.time_to_first_chunk_ns
    return out


def _meta(metadata: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        value = metadata.get(key)
        if value is not None:
            out[key] = value if type(value) is int else plain(value)
    return out


def _ended(record: dict[str, Any], event: Event) -> dict[str, Any]:
    if event.outcome:
        record["outcome"] = event.outcome
    if event.error_type:
        record["error"] = {"type": event.error_type, "message": plain(event.error_message or "")}
    cost = event.cost
    if cost is not None and hasattr(cost, "as_dict"):
        record["cost"] = plain(cost.as_dict())
    return record


class Tracker:
    """Events in, trajectory records out; not thread-safe (its owner serialises events)."""

    def __init__(self) -> None:
        self._session: dict[str, str] = {}  # open scope uuid -> its conversation's session id
        self._open: dict[str, _Open] = {}  # open logical calls, attempts and tools
        self._history: dict[str, History] = {}
        self._said: dict[str, History] = {}  # the views' conversations, of requests whose kwargs hold none
        self._order = 0
        # Ended attempts -> their conversation, the newest last: a late charge names its attempt only.
        self._ended: dict[str, str] = {}

    def session_of(self, uuid: str | None) -> str | None:
        return self._session.get(uuid or "")

    def forget(self, session_id: str) -> None:
        """Drop what is kept to compare later requests of ``session_id`` with (its conversation ended)."""
        self._history.pop(session_id, None)
        self._said.pop(session_id, None)

    def _said_delta(self, session_id: str, uuid: str, event: Event) -> dict[str, Any] | None:
        """The conversation of the request ``event`` starts as its view holds it, as a delta against the views
        before it: for a request whose kwargs hold its conversation in a body the provider reads (Bedrock's
        ``invoke_model``), where the user's words and the tools' results are read from. None without one."""
        messages = getattr(event.annotated_request, "messages", None)
        if not isinstance(messages, list) or not messages:
            return None
        history = self._said.get(session_id)
        if history is None:
            history = self._said[session_id] = History()
        return history.delta(uuid, {"messages": messages})

    def chunk(self, event: Event) -> None:
        """A stream chunk mark: its reasoning text is kept for the attempt's record."""
        opened = self._open.get(event.parent_uuid or "")
        data = event.data
        delta = data.get("delta") if isinstance(data, dict) else None
        reasoning = getattr(delta, "reasoning", None)
        if opened is not None and reasoning:
            opened.reasoning.append(reasoning)

    def fallback(self, event: Event) -> None:
        """A fallback mark: the answer an execution intercept gave in place of the provider's, which failed. No
        attempt's record holds it; its logical call's record does (``answer``), as the answer the caller got."""
        opened = self._open.get(event.parent_uuid or "")
        if opened is not None and opened.kind == cv.LOGICAL_CALL:
            opened.answer = _response(event) or {}
            if opened.ended is not None:
                # The attempt it answered in place of: a later attempt of the call (a deferred call retried after
                # the caller refused the answer) answers in its place in turn (``build``).
                opened.answer["after"] = opened.ended

    def late_charge(self, event: Event) -> tuple[str, dict[str, Any]] | None:
        """A ``relay.cost.late_charge`` mark: the ``late_charge`` record of the attempt it names, with its cost."""
        data = event.data
        cost = data.get("cost") if isinstance(data, dict) else None
        attempt = data.get("attempt_uuid") if isinstance(data, dict) else None
        session_id = self._ended.get(attempt) if isinstance(attempt, str) else None
        if session_id is None or not isinstance(cost, dict):
            return None
        return session_id, {"k": LATE_CHARGE, "id": attempt, "cost": plain(cost)}

    def __call__(self, event: Event, held: Any = None) -> tuple[str, dict[str, Any]] | None:
        """The record ``event`` completes, as ``(session_id, record)``; None for most events.

        ``held``: what ``frozen`` took of the event when it was delivered, for an event read later than that.
        """
        kind = event.kind
        if kind != SCOPE_START and kind != SCOPE_END:
            return None
        self._order += 1
        order = self._order
        relay_kind = event.metadata.get(cv.KIND)
        uuid = event.uuid
        if kind == SCOPE_START:
            if relay_kind == cv.CONVERSATION:
                session_id = event.metadata.get(cv.SESSION_ID)
                if isinstance(session_id, str):
                    self._session[uuid] = session_id
                return None
            session_id = event.metadata.get(cv.SESSION_ID) if relay_kind == cv.TURN else None
            if not isinstance(session_id, str):
                session_id = self._session.get(event.parent_uuid or "")
            if session_id is None:
                return None
            self._session[uuid] = session_id
            if relay_kind == cv.TURN:
                meta = event.metadata
                return session_id, {
                    "k": TURN, "id": uuid, "parent": event.parent_uuid, "name": event.name,
                    "start": event.timestamp, "os": order, "session_id": session_id,
                    "run_id": meta.get(cv.TURN_ID), "task_id": meta.get(cv.TASK_ID),
                }  # fmt: skip
            if relay_kind == cv.ATTEMPT and getattr(event.annotated_request, "operation", None) == "embeddings":
                return None  # an embeddings call (a retriever's lookup) is no step of the conversation
            opened = _Open(session_id, event.timestamp, order, str(relay_kind))
            if relay_kind == cv.ATTEMPT:
                content, headers = held if held is not None else frozen_request(event)
                history = self._history.get(session_id)
                if history is None:
                    history = self._history[session_id] = History()
                opened.req = history.delta(uuid, content)
                if not any(key in content for key in CONVERSATION_KEYS):
                    opened.said = self._said_delta(session_id, uuid, event)
                if headers:
                    opened.req["headers"] = plain(headers)
                self._open[uuid] = opened
            elif relay_kind == cv.LOGICAL_CALL:
                self._open[uuid] = opened
            elif relay_kind == cv.TOOL:
                record = {
                    "k": TOOL, "id": uuid, "parent": event.parent_uuid, "name": event.name,
                    "start": event.timestamp, "os": order,
                    "args": held if held is not None else plain(event.input),
                }  # fmt: skip
                call_id = event.metadata.get(TOOL_CALL_ID)
                if isinstance(call_id, str):
                    record["tool_call_id"] = call_id
                return session_id, record
            return None
        # SCOPE_END
        if relay_kind == cv.CONVERSATION:
            session_id = self._session.pop(uuid, None)
            if session_id is not None:
                self.forget(session_id)
            return None
        session_id = self._session.pop(uuid, None)
        if session_id is None:
            return None
        if relay_kind == cv.TURN:
            output = event.output if isinstance(event.output, dict) else {}
            record = {"k": TURN_END, "id": uuid, "end": event.timestamp, "oe": order}
            outcome = output.get("outcome") or event.outcome
            if outcome:
                record["outcome"] = outcome
            return session_id, _ended(record, event) if event.cost is not None else record
        if relay_kind == cv.TOOL:
            record = {"k": TOOL_END, "id": uuid, "end": event.timestamp, "oe": order}
            if held is not None:
                record["result"] = held
            elif event.output is not None:
                record["result"] = plain(event.output)
            return session_id, _ended(record, event)
        found = self._open.pop(uuid, None)
        if found is None:
            return None
        record = {
            "k": ATTEMPT if relay_kind == cv.ATTEMPT else CALL, "id": uuid, "parent": event.parent_uuid,
            "name": event.name, "start": found.start, "end": event.timestamp, "os": found.os, "oe": order,
        }  # fmt: skip
        if relay_kind == cv.ATTEMPT:
            ended = self._ended
            ended[uuid] = session_id
            if len(ended) > _ENDED_ATTEMPTS:
                del ended[next(iter(ended))]
            meta = _meta(event.metadata, _ATTEMPT_META)
            if meta:
                record["meta"] = meta
            if event.provider:
                record["provider"] = event.provider
            if event.model_name:
                record["model_name"] = plain(event.model_name)
            record["req"] = found.req
            if found.said is not None:
                record["said"] = found.said
            parent = self._open.get(event.parent_uuid or "")
            if parent is None or parent.kind != cv.LOGICAL_CALL:
                record["orphan"] = True  # an attempt made outside any logical call is a call of its own
            else:
                parent.ended = uuid
            response = _response(event)
            if response is not None:
                record["resp"] = response
            if found.reasoning:
                record["reasoning"] = plain("".join(found.reasoning))
            elif event.output is not None:
                # An answer given whole says its reasoning in the SDK's answer object only (the view carries
                # none), as the redaction policy left it there: what a rule on ``/response/reasoning`` made of it.
                thoughts = reasoning_texts(event.output)
                if thoughts:
                    record["reasoning"] = plain("\n".join(thoughts))
        else:
            meta = _meta(event.metadata, _CALL_META)
            output = event.output if isinstance(event.output, dict) else {}
            for key in ("model", "provider"):
                if isinstance(output.get(key), str):
                    meta[key] = plain(output[key])
            if isinstance(output.get("relay.fallback"), str) or isinstance(event.metadata.get("relay.fallback"), str):
                meta["fallback"] = output.get("relay.fallback") or event.metadata.get("relay.fallback")
            if meta:
                record["meta"] = meta
            if found.answer is not None:
                record["answer"] = found.answer
        return session_id, _ended(record, event)
