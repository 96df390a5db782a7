"""``JournalSubscriber``: every turn a relay runs becomes a journaled run.

Run id = the turn id, session id = the conversation's. The subscriber only
turns events into rows (under a lock, in event order) and hands them to a
writer thread; it never touches the disk on the agent's thread.

What it writes:

- ``status {type: run_started}`` when the turn starts;
- ``reasoning`` / ``token`` rows for the reasoning and text deltas of streamed attempts;
- ``runtime_model`` observations of the model and provider that *served*
  (the response's model, never the requested one): before the first output
  whenever that tuple changes, and for a non-streamed success at its end
  (``route_observed``);
- ``warning {type: fallback}`` when an attempt that follows a failed one
  (same logical call, or a later call of the turn) is served by another
  (provider, model). It is written once the new route has proven itself with
  output, followed by a corrective observation (the warning voids the previous one);
- ``tool`` / ``tool_result`` for tool scopes, ``tool_call`` for tool calls a response asked for;
- for the answer an execution intercept gave in place of a failed provider (a fallback), the rows a served
  non-streamed answer gets: ``token`` with its text, ``tool_call`` with its tool calls;
- ``warning {type: response_rejected, provider, model, call_role, retry_count, message}`` for an
  answer the validator rejected (its usage still counts);
- ``cost`` with each attempt's cost when a price catalog is installed (``relay.cost.use``); for an attempt
  priced after it ended (its answer came after its turn ended: a late charge), when the charge comes, even
  after the run's terminal row;
- the terminal row from the turn's outcome: ``done {usage}``, ``cancel``, ``apperror``, each with
  the turn's ``cost`` roll-up when there is one.

The run-started, terminal, ``span``, ``tool`` and ``tool_result`` rows also carry ``traj``: the
trajectory record of that scope (``relay_runtime.integrations.trajectory.records``), from which
``atif_from_journal`` / ``atof_from_journal`` rebuild the live exports. An attempt's record holds
its request as a delta against an earlier request of the conversation (its new messages only).

Auxiliary calls (``call_role`` ``auxiliary:*``) count towards usage only: a
title generator's model is not the model that answered.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event, Relay, session
from relay_runtime import conventions as cv
from relay_runtime.attach import Attachment, detach_all, subscriber_attachment
from relay_runtime.cost import LATE_CHARGE_MARK, AttemptCost, CostRollup
from relay_runtime.redaction import scrub_text

from ..trajectory.plain import plain
from ..trajectory.records import Tracker, frozen
from . import paths
from .answer_rows import RESPONSE_REJECTED, fallback_rows, rejection, tool_result
from .background import RowWriter
from .runtime_model import EVENT as RUNTIME_MODEL
from .runtime_model import OBSERVED_OUTPUT, ROUTE_OBSERVED, observation
from .span_rows import USAGE_FIELDS, response_model, span_row
from .states import COST_EVENT

if TYPE_CHECKING:
    from .store import RunJournalStore

logger = logging.getLogger("relay_runtime.integrations.run_journal")

_ENDED_UNPRICED = 4096  # attempts that ended without a cost, remembered (oldest out) for a late charge
_SUCCESS = "success"
_FAILED = "failed"
_CANCELLED = "cancelled"

Route = tuple[str, str | None]  # (provider, model)
Rows = list[tuple[str, Any]]


@dataclass(eq=False)
class _Run:
    session_id: str
    run_id: str
    scopes: set[str] = field(default_factory=set)
    observed: tuple[str, str, bool] | None = None  # what the journal's last observation says, if still valid
    served: Route | None = None
    fallback_active: bool = False
    pending_failure: Route | None = None  # the route that failed last, until a later attempt serves
    usage: Counter[str] = field(default_factory=Counter)
    error: tuple[str, str] | None = None


@dataclass(eq=False)
class _Attempt:
    run: _Run
    provider: str
    requested: str | None
    auxiliary: bool
    served: str | None = None
    streamed: bool = False
    had_output: bool = False

    def route(self) -> Route:
        return (self.provider, self.served or self.requested)


def _auxiliary(role: Any) -> bool:
    return isinstance(role, str) and role.startswith("auxiliary")


class JournalSubscriber:
    """Journals the turns of what it is attached to: ``JournalSubscriber(session_dir=...).attach(target)``.

    ``target``: a session host or ``SESSION_COORDINATOR`` (every host, now and later),
    whose managed execution is then retained; or a bare ``Relay``.
    """

    def __init__(
        self,
        relay: Relay | None = None,
        *,
        session_dir: str | os.PathLike[str] | None = None,
        fsync: str | None = None,
        queue_size: int = 10_000,
        store: RunJournalStore | None = None,
    ) -> None:
        self._relay = relay
        self._attachments: list[Attachment] = []
        self._unmanaged_warned = False
        self._invalid_warned = False
        self.counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._writer = RowWriter(
            session_dir=session_dir, fsync=fsync, maxsize=queue_size, count=self._count, store=store
        )
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}  # turn scope uuid -> run
        self._scopes: dict[str, _Run] = {}  # any scope inside a run -> run
        self._roles: dict[str, bool] = {}  # logical call uuid -> auxiliary?
        self._attempts: dict[str, _Attempt] = {}
        self._unpriced: dict[str, _Run] = {}  # attempts that ended without a cost -> their run (a late charge's)
        self._tracker = Tracker()  # what a trajectory needs, added to the rows as "traj"
        self._traj: dict[str, Any] | None = None  # the record of the event being handled, if any

    # -- wiring ---------------------------------------------------------------------------

    def attach(self, target: Any = None, *, name: str = "run_journal") -> JournalSubscriber:
        """Journal ``target``'s turns (default: the relay given to the constructor); ``detach()`` undoes it."""
        target = target if target is not None else self._relay
        if target is None:
            raise ValueError("JournalSubscriber.attach needs a Relay, a session host or SESSION_COORDINATOR")

        attachment = subscriber_attachment(target, self, name=name, chunks=True)
        if self._relay is None and attachment.relays:
            self._relay = attachment.relays[0]
        self._attachments.append(attachment)
        return self

    def register(self, relay: Any = None, *, name: str = "run_journal") -> str:
        """``attach`` under its older name; returns the subscriber's name."""
        self.attach(relay, name=name)
        return name

    def detach(self) -> None:
        detach_all(self._attachments)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row produced so far is on disk; False on timeout."""
        return self._writer.flush(timeout)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Stop listening, write what is queued, stop the writer thread. Idempotent."""
        self.detach()
        return self._writer.close(timeout)

    def _count(self, key: str) -> None:
        with self._count_lock:
            self.counts[key] += 1
        relays = [r for a in self._attachments for r in a.relays] or ([self._relay] if self._relay else [])
        for relay in relays:
            relay.count(key)

    def _warn_if_unmanaged(self) -> None:
        """A bare relay whose host retains no managed execution journals runs without their LLM calls."""
        if self._unmanaged_warned:
            return
        for attachment in self._attachments:
            if not isinstance(attachment.target, Relay):
                continue
            for host in session.SESSION_COORDINATOR.hosts():
                if host.relay is attachment.target and not host.managed_execution_enabled():
                    self._unmanaged_warned = True
                    logger.warning(
                        "run journal on relay %r: no consumer retains managed execution on its host, so LLM "
                        "calls in its turns are not journaled; attach the journal to the host or to "
                        "SESSION_COORDINATOR instead",
                        host.relay.name,
                    )
                    return

    # -- events ---------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == MARK:
            if event.name == CHUNK_MARK:
                with self._lock:
                    self._on_chunk(event)
                    self._tracker.chunk(event)
            elif event.name == LATE_CHARGE_MARK:
                with self._lock:
                    self._late_charge(event)
            elif event.name == cv.FALLBACK_ANSWER:
                with self._lock:
                    self._tracker.fallback(event)
                    self._fallback_answer(event)
            return
        relay_kind = event.metadata.get(cv.KIND)
        with self._lock:
            # A tool's arguments or result made JSON-ready once, for its trajectory record and its row alike: a
            # copy, since the writer's thread encodes the row later and the agent may change what it passed.
            held = frozen(event) if relay_kind == cv.TOOL else None
            done = self._tracker(event, held)
            self._traj = done[1] if done is not None else None
            try:
                self._on_scope(kind, relay_kind, event, held)
            finally:
                self._traj = None

    def _on_scope(self, kind: str, relay_kind: Any, event: Event, held: Any) -> None:
        if kind == SCOPE_START:
            if relay_kind == cv.TURN:
                self._start_run(event)
                return
            run = self._scopes.get(event.parent_uuid or "")
            if run is None:
                return
            self._scopes[event.uuid] = run
            run.scopes.add(event.uuid)
            if relay_kind == cv.LOGICAL_CALL:
                self._roles[event.uuid] = _auxiliary(event.metadata.get(cv.CALL_ROLE))
            elif relay_kind == cv.ATTEMPT:
                self._start_attempt(run, event)
            elif relay_kind == cv.TOOL:
                args = held if held is not None else plain(event.input)
                self._emit(run, [("tool", self._with_traj({"name": event.name, "args": args}))])
        elif kind == SCOPE_END:
            if relay_kind == cv.TURN:
                self._end_run(event)
                return
            run = self._scopes.pop(event.uuid, None)
            if run is None:
                return
            run.scopes.discard(event.uuid)
            if relay_kind == cv.LOGICAL_CALL:
                self._end_call(run, event)
                self._emit(run, [self._with_traj(span_row("logical_call", event))])
            elif relay_kind == cv.ATTEMPT:
                self._end_attempt(event)
                self._emit(run, [self._with_traj(span_row("attempt", event))])
            elif relay_kind == cv.TOOL:
                self._emit(run, [("tool_result", self._with_traj(tool_result(event, held)))])
                if event.metadata.get(cv.FRAMEWORK):  # a framework's tool: also a node of the run's tree
                    self._emit(run, [span_row("tool", event)])
            elif relay_kind is None and event.metadata.get(cv.FRAMEWORK):
                # An agent framework's agent, graph node or chain: a node of the run's tree.
                self._emit(run, [span_row(event.scope_type or "scope", event)])

    def _with_traj(self, row: Any) -> Any:
        """``row`` (a payload or an ``(event, payload)`` pair) with the trajectory record of the event at hand."""
        traj = self._traj
        if traj is None:
            return row
        if isinstance(row, tuple):
            return (row[0], {**row[1], "traj": traj})
        return {**row, "traj": traj}

    def _emit(self, run: _Run, rows: Rows) -> None:
        for event, payload in rows:
            self._writer.submit((run.session_id, run.run_id, event, payload))

    # -- runs -----------------------------------------------------------------------------

    def _start_run(self, event: Event) -> None:
        meta = event.metadata
        session_id, run_id = meta.get(cv.SESSION_ID), meta.get(cv.TURN_ID)
        if not (paths.valid_id(session_id) and paths.valid_id(run_id)):
            self._count("journal.invalid_ids")
            if not self._invalid_warned:
                # Once per journal, and without the ids: one that is not valid may be an e-mail address.
                self._invalid_warned = True
                logger.warning(
                    "run journal: a turn's session or turn id is not a journal id (letters, digits, '_', '.' "
                    "and '-', at most %d characters), so its run is not journaled; such runs are counted as "
                    "journal.invalid_ids",
                    paths.MAX_ID_LENGTH,
                )
            return
        self._warn_if_unmanaged()
        run = _Run(str(session_id), str(run_id))
        self._runs[event.uuid] = run
        self._scopes[event.uuid] = run
        self._emit(run, [("status", self._with_traj({"type": "run_started", "task_id": meta.get(cv.TASK_ID)}))])

    def _end_run(self, event: Event) -> None:
        run = self._runs.pop(event.uuid, None)
        if run is None:
            return
        self._scopes.pop(event.uuid, None)
        for uuid in run.scopes:  # scopes the turn's end closed without their own end events
            self._scopes.pop(uuid, None)
            self._roles.pop(uuid, None)
            self._attempts.pop(uuid, None)
        output = event.output if isinstance(event.output, dict) else {}
        outcome = output.get("outcome") or event.outcome
        cost = {"cost": event.cost.as_dict()} if isinstance(event.cost, CostRollup) else {}
        if outcome == _SUCCESS:
            usage: dict[str, Any] = dict(run.usage)
            if run.served is not None and run.served[1]:
                usage["used_model"] = run.served[1]
                usage["used_provider"] = run.served[0]
            self._emit(run, [("done", self._with_traj({"usage": usage, **cost}))])
        elif outcome == _CANCELLED:
            self._emit(run, [("cancel", self._with_traj(cost))])
        else:
            error_type, message = run.error or ("error", "the turn failed")
            payload = {"type": "error", "error_type": error_type, "message": message, **cost}
            self._emit(run, [("apperror", self._with_traj(payload))])

    def _end_call(self, run: _Run, event: Event) -> None:
        auxiliary = self._roles.pop(event.uuid, False)
        output = event.output if isinstance(event.output, dict) else {}
        if auxiliary or (output.get("outcome") or event.outcome) != _FAILED:
            return
        # A call can fail after a successful attempt (its response did not validate):
        # whatever the turn tries next is then a fallback from this route.
        if run.pending_failure is None:
            provider, model = output.get("provider"), output.get("model")
            run.pending_failure = (provider if isinstance(provider, str) else "", model or None)

    # -- attempts -------------------------------------------------------------------------

    def _start_attempt(self, run: _Run, event: Event) -> None:
        meta = event.metadata
        auxiliary = self._roles.get(event.parent_uuid or "")
        if auxiliary is None:
            auxiliary = _auxiliary(meta.get(cv.CALL_ROLE))
        self._attempts[event.uuid] = _Attempt(run, event.provider or "", event.model_name, auxiliary)

    def _on_chunk(self, event: Event) -> None:
        attempt = self._attempts.get(event.parent_uuid or "")
        data = event.data
        if attempt is None or not isinstance(data, dict):
            return
        attempt.streamed = True
        delta = data.get("delta")
        if delta is None:
            return
        if delta.model:
            attempt.served = delta.model
        if attempt.auxiliary:
            return
        if delta.reasoning:
            self._output(attempt, "reasoning", {"text": scrub_text(delta.reasoning)})
        if delta.text:
            self._output(attempt, "token", {"text": scrub_text(delta.text)})

    def _output(self, attempt: _Attempt, event: str, payload: dict[str, Any], phase: str = OBSERVED_OUTPUT) -> None:
        """Output of an attempt, preceded by the observation of who served it and any fallback warning.

        Streamed: the first output proves the new route, so the warning follows it
        (and a corrective observation follows the warning). Completed responses
        are known whole: the warning comes first and one observation covers both.
        """
        run = attempt.run
        rows: Rows = []
        fallback_from = None
        if not attempt.had_output:
            attempt.had_output = True
            fallback_from = self._fallback_from(attempt)
        if fallback_from is not None and phase == ROUTE_OBSERVED:
            rows.append(self._warning(attempt, fallback_from))
            fallback_from = None
        rows += self._observe(attempt, phase)
        if event:
            rows.append((event, payload))
        if fallback_from is not None:
            rows.append(self._warning(attempt, fallback_from))
            rows += self._observe(attempt, phase)
        self._emit(run, rows)

    def _warning(self, attempt: _Attempt, failed: Route) -> tuple[str, Any]:
        to_provider, to_model = attempt.route()
        # Readers drop the observation in effect at a fallback warning: the next one must be said again.
        attempt.run.observed = None
        return (
            "warning",
            {
                "type": "fallback",
                "message": f"Switched to fallback: {to_model} ({to_provider})",
                "from_provider": failed[0],
                "from_model": failed[1],
                "to_provider": to_provider,
                "to_model": to_model,
            },
        )

    def _fallback_from(self, attempt: _Attempt) -> Route | None:
        run = attempt.run
        failed, run.pending_failure = run.pending_failure, None
        if failed is None or failed == attempt.route():
            return None  # nothing failed before, or a plain retry of the same route
        run.fallback_active = True
        return failed

    def _observe(self, attempt: _Attempt, phase: str) -> Rows:
        model = attempt.served
        if not model:
            return []  # the requested model is not evidence of what served
        run = attempt.run
        key = (attempt.provider, model, run.fallback_active)
        run.served = (attempt.provider, model)
        if run.observed == key:
            return []
        run.observed = key
        payload = observation(
            session_id=run.session_id,
            run_id=run.run_id,
            model=model,
            provider=attempt.provider,
            fallback_active=run.fallback_active,
            phase=phase,
        )
        return [(RUNTIME_MODEL, payload)]

    def _end_attempt(self, event: Event) -> None:
        attempt = self._attempts.pop(event.uuid, None)
        if attempt is None:
            return
        run = attempt.run
        if isinstance(event.cost, AttemptCost):
            self._emit(run, [(COST_EVENT, {**event.cost.as_dict(), "attempt_id": event.uuid})])
        else:
            unpriced = self._unpriced
            unpriced[event.uuid] = run
            if len(unpriced) > _ENDED_UNPRICED:
                del unpriced[next(iter(unpriced))]
        annotation = event.annotated_response
        if annotation is not None:
            # Any answer counts, a rejected one too: its tokens were spent.
            for name in USAGE_FIELDS:
                value = getattr(annotation.usage, name, None)
                if isinstance(value, int):
                    run.usage[name] += value
        if event.outcome != _SUCCESS:
            if event.error_type == RESPONSE_REJECTED:
                self._emit(run, [("warning", rejection(attempt.route(), event))])
            if event.outcome == _FAILED and not attempt.auxiliary:
                run.pending_failure = attempt.route()
                run.error = (event.error_type or "error", event.error_message or "")
            return
        if attempt.auxiliary:
            return
        run.error = None  # recovered: a failure before this answer is not why the run may fail after it
        attempt.served = attempt.served or response_model(event)
        text = annotation.output_text if annotation is not None else None
        tool_calls = annotation.tool_calls if annotation is not None else []
        produced = text or tool_calls or (annotation is None and event.output is not None)
        if not attempt.had_output and produced:
            # A non-streamed success (or a stream that only carried tool calls): observe the route now.
            shown = scrub_text(text) if text else text  # a provider may echo the caller's key
            self._output(attempt, "" if attempt.streamed or not text else "token", {"text": shown}, ROUTE_OBSERVED)
        if tool_calls:
            self._emit(run, [("tool_call", {"calls": tool_calls})])

    def _fallback_answer(self, event: Event) -> None:
        """An execution intercept answered a call in place of its failed provider: what the caller got is the
        run's answer, as a served one is (an auxiliary call's is not)."""
        call = event.parent_uuid or ""
        run = self._scopes.get(call)
        if run is None or self._roles.get(call, True):
            return  # no logical call of a run (a failed attempt's own fallback), or an auxiliary one
        run.error = None  # recovered: the provider's failure is not why the run may fail after this answer
        self._emit(run, fallback_rows(event))

    def _late_charge(self, event: Event) -> None:
        """The cost of an attempt priced after it ended (its answer came after its turn ended): the provider
        billed it, so its run's cost rows must count it, terminal row or not."""
        run = self._unpriced.pop(event.parent_uuid or "", None)
        data = event.data
        cost = data.get("cost") if isinstance(data, dict) else None
        if run is not None and isinstance(cost, dict):
            row: dict[str, Any] = {**cost, "attempt_id": event.parent_uuid, "late": True}
            done = self._tracker.late_charge(event)  # so a trajectory rebuilt from the journal counts it too
            if done is not None:
                row["traj"] = done[1]
            self._emit(run, [(COST_EVENT, row)])
