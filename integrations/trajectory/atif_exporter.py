"""``AtifExporter``: a conversation's trajectory in ATIF v1.7, collected from live events.

The agent's thread appends each event to a list; the events become trajectory records
(``records.Tracker``) in batches, on ``export`` or once enough are pending, so a call costs
the agent one append. With ``sinks=``, each conversation's trajectory is handed to them
when the conversation ends (and on ``publish()``), on a thread of their own.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any

from relay_runtime import CHUNK_MARK, MARK, SCOPE_END, SCOPE_START, Event
from relay_runtime import conventions as cv
from relay_runtime.attach import Attachment, detach_all, subscriber_attachment
from relay_runtime.cost import LATE_CHARGE_MARK
from relay_runtime.types import ScopeType

from .build import TrajectoryBuilder
from .records import Tracker, frozen
from .sinks import Sink, SinkWorker

_DIGEST_AT = 4096
_LLM = ScopeType.LLM.value
_TOOL = ScopeType.TOOL.value


class AtifExporter:
    """``AtifExporter(session_id=None, agent_name="agent", agent_version="0").attach(SESSION_COORDINATOR)``.

    With a ``session_id`` it keeps that conversation only; without one, every conversation it
    sees, and ``export(session_id)`` says which (required once it saw more than one).
    """

    def __init__(
        self,
        session_id: str | None = None,
        agent_name: str = "agent",
        agent_version: str = "0",
        *,
        model_name: str | None = None,
        tool_definitions: list[dict[str, Any]] | None = None,
        extra: Any = None,
        sinks: Sequence[Sink] = (),
    ) -> None:
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
        for label, value in (("agent_name", agent_name), ("agent_version", agent_version)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{label} must be a non-empty string, got {value!r}")
        if tool_definitions is not None and not isinstance(tool_definitions, list):
            raise TypeError(f"tool_definitions must be a list of objects, got {type(tool_definitions).__name__}")
        self.session_id = session_id
        self.agent_name = agent_name
        self.agent_version = agent_version
        self.model_name = model_name
        self.tool_definitions = tool_definitions
        self.extra = extra
        self._pending: deque[Any] = deque()  # events; an attempt's start with its request as sent
        self._lock = threading.Lock()
        self._tracker = Tracker()
        self._records: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._attachments: list[Attachment] = []
        self._sinks = SinkWorker(list(sinks), self._publish_now) if sinks else None

    # -- wiring ------------------------------------------------------------------------------

    def attach(self, target: Any, *, name: str | None = None) -> AtifExporter:
        """Collect the events of ``target``: a ``Relay``, a session host, or ``SESSION_COORDINATOR``."""

        name = name or f"atif@{id(self):x}"  # one subscriber name per exporter: several may watch a relay

        # Chunks: a stream's reasoning text.
        self._attachments.append(subscriber_attachment(target, self, name=name, chunks=True))
        return self

    def detach(self) -> None:
        detach_all(self._attachments)

    def __call__(self, event: Event) -> None:
        pending = self._pending
        scope_type = event.scope_type
        if scope_type == _TOOL or (scope_type == _LLM and event.kind == SCOPE_START):
            # As sent: the agent's list grows after the call, and it may change a tool's arguments or result.
            pending.append((event, frozen(event)))
            if scope_type == _LLM:
                # Read now: an agent compacting its context (before its next call, in this turn or the next)
                # rewrites the messages it sent in place, and the records must hold them as they were sent.
                # ``frozen_request`` copies the lists, not every message of a long conversation on every call;
                # the tracker copies the messages new to this request, each once.
                self._digest()
                return
        else:
            pending.append(event)
        if len(pending) >= _DIGEST_AT:
            self._digest()
        elif event.kind == SCOPE_END:
            relay_kind = event.metadata.get(cv.KIND)
            if relay_kind == cv.TURN:
                self._digest()  # the turn's records complete when it ends
            elif relay_kind == cv.CONVERSATION and self._sinks is not None:
                session_id = event.metadata.get(cv.SESSION_ID)
                if isinstance(session_id, str) and self.session_id in (None, session_id):
                    self._sinks.submit(session_id)

    # -- records -----------------------------------------------------------------------------

    def _digest(self) -> None:
        with self._lock:
            # Popped one by one: an event appended meanwhile by another thread is taken now or next time.
            pending, tracker, records, wanted = self._pending, self._tracker, self._records, self.session_id
            pseudonyms: tuple[str, ...] | None = None  # worked out at the first record under another id
            while pending:
                item = pending.popleft()
                held = None
                if type(item) is tuple:
                    item, held = item
                event = item
                done = None
                if event.kind != MARK:
                    done = tracker(event, held)
                elif event.name == CHUNK_MARK:
                    tracker.chunk(event)
                elif event.name == cv.FALLBACK_ANSWER:
                    tracker.fallback(event)
                elif event.name == LATE_CHARGE_MARK:
                    done = tracker.late_charge(event)
                if done is None:
                    continue
                session_id = done[0]
                if wanted is not None and session_id != wanted:
                    if pseudonyms is None:
                        pseudonyms = self._recorded_ids(wanted)
                    if session_id not in pseudonyms:
                        continue  # another conversation's
                records[session_id].append(done[1])

    def sessions(self) -> list[str]:
        """The conversations collected so far, in the order they were first seen."""
        self._digest()
        with self._lock:
            return list(self._records)

    def records(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The trajectory records of one conversation (what the run journal stores under ``traj``)."""
        chosen = self._choose(session_id)
        with self._lock:
            return list(self._records.get(chosen, ()))

    def _recorded_ids(self, session_id: str) -> tuple[str, ...]:
        """``session_id`` and the pseudonym the redaction policy of a relay watched records it under (when a rule
        changes it): a caller names its conversation by the id it gave, the records carry what the sinks may."""
        ids = [session_id]
        for attachment in self._attachments:
            for relay in attachment.relays:
                policy = relay.redaction.policy
                recorded = policy.recorded(cv.SESSION_ID, session_id) if policy is not None else None
                if isinstance(recorded, str) and recorded not in ids:
                    ids.append(recorded)
        return tuple(ids)

    def _choose(self, session_id: str | None) -> str:
        self._digest()
        if session_id is not None:
            if self.session_id is not None and session_id != self.session_id:
                raise ValueError(f"this AtifExporter collects session {self.session_id!r} only, not {session_id!r}")
            return self._held_as(session_id)
        if self.session_id is not None:
            return self._held_as(self.session_id)
        with self._lock:
            seen = list(self._records)
        if len(seen) == 1:
            return seen[0]
        if not seen:
            raise ValueError("AtifExporter has seen no conversation yet: pass export(session_id=...)")
        raise ValueError(f"AtifExporter saw several conversations ({', '.join(seen)}): pass export(session_id=...)")

    def _held_as(self, session_id: str) -> str:
        """The id the records of ``session_id`` are held under: its pseudonym when a policy recorded one."""
        with self._lock:
            held = [i for i in self._recorded_ids(session_id) if i in self._records]
        return held[-1] if held else session_id

    # -- the trajectory ------------------------------------------------------------------------

    def export(self, session_id: str | None = None) -> dict[str, Any]:
        chosen = self._choose(session_id)
        with self._lock:
            records = list(self._records.get(chosen, ()))
        return (
            TrajectoryBuilder()
            .add_all(records)
            .trajectory(
                chosen,
                agent_name=self.agent_name,
                agent_version=self.agent_version,
                model_name=self.model_name,
                tool_definitions=self.tool_definitions,
                extra=self.extra,
            )
        )

    def export_json(self, session_id: str | None = None, *, indent: int | None = None) -> str:
        return json.dumps(self.export(session_id), ensure_ascii=False, indent=indent)

    def write(self, path: str | os.PathLike[str], session_id: str | None = None) -> str:
        """Write the trajectory to ``path`` (whole or not at all: written aside, then renamed); returns the path."""
        from .sinks import write_file

        return write_file(os.fspath(path), self.export_json(session_id, indent=2))

    def clear(self) -> None:
        """Forget what was collected; the exporter stays attached."""
        self._digest()
        with self._lock:
            self._records.clear()

    # -- sinks ---------------------------------------------------------------------------------

    def publish(self, session_id: str | None = None) -> None:
        """Hand the trajectory to the sinks now (on their thread; never blocks)."""
        if self._sinks is None:
            raise ValueError("this AtifExporter has no sinks: give sinks=[...] to the constructor")
        self._sinks.submit(self._choose(session_id))

    def _publish_now(self, session_id: str) -> dict[str, Any]:
        return self.export(session_id)

    def force_flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until the sinks delivered (or gave up on) everything handed to them; False on timeout."""
        return self._sinks.flush(timeout) if self._sinks is not None else True

    def shutdown(self, timeout: float | None = 10.0) -> bool:
        self.detach()
        return self._sinks.close(timeout) if self._sinks is not None else True

    @property
    def sink_failures(self) -> int:
        return self._sinks.failures if self._sinks is not None else 0
