"""Helpers for the journal's relay tests: a real leased turn with the JournalSubscriber on its host.

(No tests here.) Model calls go through ``relay_runtime.calls`` with a small
scripted provider and codec: each route is ``(provider name, requested model)``
and answers with chunks or a response saying which model served.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay_runtime import AnnotatedLLMRequest, AnnotatedLLMResponse, ChunkDelta, LLMRequest, TokenUsage, calls, session
from relay_runtime import conventions as cv
from relay_runtime.integrations import run_journal
from relay_runtime.integrations.run_journal import JournalSubscriber, paths, read_run_events
from relay_runtime.integrations.run_journal.states import ends_run, summarize, terminal_state

CONSUMER = "run_journal"


class ProviderError(RuntimeError):
    pass


def _sdk_errors() -> tuple[type[BaseException], ...]:
    import anthropic
    import httpx2
    import openai

    return (ProviderError, httpx2.HTTPError, openai.APIError, anthropic.APIError)


# What a provider call can fail with: the scripted provider's error, the SDKs' and their transport's.
ProviderFailures = _sdk_errors()


class ScriptedAccumulator:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.model: str | None = None

    def add(self, chunk: Mapping[str, Any]) -> ChunkDelta | None:
        if chunk.get("model"):
            self.model = chunk["model"]
        text, reasoning = chunk.get("text", ""), chunk.get("reasoning", "")
        self.text.append(text)
        return ChunkDelta(text=text, reasoning=reasoning, model=chunk.get("model"))

    def finish(self) -> tuple[Any, AnnotatedLLMResponse]:
        text = "".join(self.text)
        response = {"model": self.model, "text": text}
        usage = TokenUsage(input_tokens=3, output_tokens=len(self.text))
        return response, AnnotatedLLMResponse(model=self.model, output_text=text or None, usage=usage)


class ScriptedCodec:
    """The codec contract for a provider whose kwargs are {model, messages} and whose replies are dicts."""

    operation = "chat"

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def decode(self, content: Mapping[str, Any]) -> AnnotatedLLMRequest:
        return AnnotatedLLMRequest(model=content.get("model"), messages=list(content.get("messages", [])))

    def apply(self, content: Mapping[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        out = dict(content)
        if "model" in changes:
            out["model"] = changes["model"]
        return out

    def annotate_response(self, response: Mapping[str, Any]) -> AnnotatedLLMResponse:
        return AnnotatedLLMResponse(
            model=response.get("model"),
            output_text=response.get("text"),
            tool_calls=list(response.get("tool_calls", [])),
            usage=TokenUsage(input_tokens=5, output_tokens=7),
        )

    def accumulator(self) -> ScriptedAccumulator:
        return ScriptedAccumulator()


def stream_call(
    provider: str,
    requested: str,
    chunks: list[dict[str, Any]],
    *,
    fail: bool = False,
    fail_on_open: bool = False,
    call_id: str = "call-1",
    role: str | None = None,
) -> list[Any]:
    """One streamed attempt of the active turn; returns the chunks the caller saw (provider errors swallowed)."""

    def factory(request: LLMRequest) -> Iterator[dict[str, Any]]:
        if fail_on_open:
            raise ProviderError(f"{provider} unavailable")

        def gen() -> Iterator[dict[str, Any]]:
            yield from chunks
            if fail:
                raise ProviderError(f"{provider} broke mid-stream")

        return gen()

    metadata = {cv.API_REQUEST_ID: call_id, **({cv.CALL_ROLE: role} if role else {})}
    seen: list[Any] = []
    try:
        stream = calls.stream_current(
            LLMRequest({}, {"model": requested, "messages": [{"role": "user", "content": "new turn"}]}),
            factory,
            name=provider,
            model_name=requested,
            metadata=metadata,
            codec=ScriptedCodec(provider),
        )
        for chunk in stream:
            seen.append(chunk)
    except ProviderError:
        pass
    return seen


def complete_call(
    provider: str,
    requested: str,
    response: dict[str, Any] | None,
    *,
    call_id: str = "call-1",
    role: str | None = None,
) -> Any:
    """One non-streamed attempt; ``response=None`` makes the provider fail."""

    def callback(request: LLMRequest) -> dict[str, Any]:
        if response is None:
            raise ProviderError(f"{provider} unavailable")
        return response

    metadata = {cv.API_REQUEST_ID: call_id, **({cv.CALL_ROLE: role} if role else {})}
    try:
        return calls.execute_current(
            LLMRequest({}, {"model": requested, "messages": []}),
            callback,
            name=provider,
            model_name=requested,
            metadata=metadata,
            codec=ScriptedCodec(provider),
        )
    except ProviderError:
        return None


@dataclass
class TurnResult:
    lease: session.ConversationLease
    rows: list[dict[str, Any]]
    subscriber: JournalSubscriber
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The run's story, without the ``span`` rows of its call tree (see ``spans``)."""
        return [row["event"] for row in self.rows if row["event"] != "span"]

    @property
    def spans(self) -> list[dict[str, Any]]:
        return self.payloads("span")

    def payloads(self, event: str) -> list[Any]:
        """The payloads of ``event`` rows, without the trajectory record rows carry (see ``records``)."""
        return [_without_traj(row["payload"]) for row in self.rows if row["event"] == event]

    @property
    def records(self) -> list[dict[str, Any]]:
        """The trajectory records the rows carry under ``traj`` (tests/test_trajectory*.py read them)."""
        return [p["traj"] for row in self.rows if isinstance(p := row["payload"], dict) and "traj" in p]


def _without_traj(payload: Any) -> Any:
    if isinstance(payload, dict) and "traj" in payload:
        return {k: v for k, v in payload.items() if k != "traj"}
    return payload


def run_turn(
    tmp_path: Path,
    body: Any,
    *,
    monkeypatch: Any = None,
    outcome: str = "success",
    session_id: str = "session-a",
    run_id: str = "run-a",
    selected_model: str = "primary",
    store: Any = None,
) -> TurnResult:
    """A leased conversation and one turn with the journal on the host's relay; ``body()`` makes the calls.

    With ``monkeypatch`` the journal finds ``tmp_path`` through the package's default-dir hook (as the
    seed does); without, the subscriber is given it; with ``store`` the journal goes there instead.
    """
    coordinator = session.SESSION_COORDINATOR
    profile = str(tmp_path / "profile")
    host = coordinator.host(profile)
    if store is not None:
        subscriber = JournalSubscriber(host.relay, store=store)
    elif monkeypatch is not None:
        monkeypatch.setattr(run_journal, "_default_session_dir", lambda: tmp_path)
        subscriber = JournalSubscriber(host.relay)
    else:
        subscriber = JournalSubscriber(host.relay, session_dir=tmp_path)
    subscriber.register()
    host.retain_managed_execution(CONSUMER)
    lease = coordinator.acquire_conversation(
        profile_key=profile, session_id=session_id, platform="test", model=selected_model
    )
    try:
        turn = coordinator.begin_turn(lease, turn_id=run_id, task_id="task-1")
        try:
            body()
        finally:
            coordinator.end_turn(turn, outcome=outcome)
    finally:
        coordinator.release_conversation(lease)
        host.release_managed_execution(CONSUMER)
        assert subscriber.flush(timeout=10)
        subscriber.close()
    valid = paths.valid_id(session_id) and paths.valid_id(run_id)
    where: dict[str, Any] = {"store": store} if store is not None else {"session_dir": tmp_path}
    rows = read_run_events(session_id, run_id, **where)["events"] if valid else []
    return TurnResult(lease, rows, subscriber, host.relay.diagnostics())


class MemoryStore:
    """A second ``RunJournalStore`` (rows in memory, tail reads that block on a condition): proves the interface.

    ``follow`` waits in a thread on a condition variable, as a store with blocking tail reads
    (Redis ``XREAD BLOCK``) would: it never polls.
    """

    BATCH = 100

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._written: dict[tuple[str, str], float] = {}
        self.waits = 0

    def append(
        self, session_id: str, run_id: str, event: str, payload: Any = None, *, seq: int | None = None,
        created_at: Any = None,
    ) -> dict[str, Any]:
        paths.check_ids(session_id, run_id)
        if not isinstance(event, str) or not event:
            raise ValueError(f"run journal event must be a non-empty string, got {event!r}")
        payload = {} if payload is None else payload
        state = terminal_state(event, payload)
        with self._cond:
            rows = self._runs.setdefault((session_id, run_id), [])
            next_seq = len(rows) + 1
            if seq is not None and seq != next_seq:
                raise ValueError(f"seq {seq} is not the run's next seq {next_seq}")
            row = {
                "version": 1, "event_id": f"{run_id}:{next_seq}", "seq": next_seq, "run_id": run_id,
                "session_id": session_id, "event": event, "type": event,
                "created_at": time.time() if created_at is None else created_at,
                "terminal": state is not None, "terminal_state": state, "payload": payload,
            }
            rows.append(row)
            self._written[(session_id, run_id)] = time.time()
            self._cond.notify_all()
        return dict(row)

    def _after(self, key: tuple[str, str], after_seq: int, max_seq: int | None = None) -> list[dict[str, Any]]:
        rows = self._runs.get(key, [])
        return [dict(r) for r in rows[after_seq:] if max_seq is None or r["seq"] <= max_seq]

    def read(self, session_id: str, run_id: str, *, after_seq: int = 0, max_seq: int | None = None) -> dict[str, Any]:
        paths.check_ids(session_id, run_id)
        with self._cond:
            events = self._after((session_id, run_id), after_seq, max_seq)
        return {"session_id": session_id, "run_id": run_id, "events": events, "malformed": []}

    def summary(self, session_id: str, run_id: str) -> dict[str, Any] | None:
        paths.check_ids(session_id, run_id)
        with self._cond:
            if not any(sid == session_id for sid, _ in self._runs):
                return None
            return summarize(session_id, run_id, self._after((session_id, run_id), 0))

    def locate(self, run_id: str) -> str | None:
        paths.check_ids("s", run_id)
        with self._cond:
            held = [(t, sid) for (sid, rid), t in self._written.items() if rid == run_id]
        return max(held)[1] if held else None

    def list_sessions(self) -> list[dict[str, Any]]:
        with self._cond:
            latest: dict[str, float] = {}
            for (sid, _), t in self._written.items():
                latest[sid] = max(t, latest.get(sid, 0.0))
        return [{"session_id": s, "updated_at": t} for s, t in sorted(latest.items(), key=lambda i: -i[1])]

    def list_runs(self, session_id: str) -> list[dict[str, Any]]:
        with self._cond:
            runs = [(t, rid) for (sid, rid), t in self._written.items() if sid == session_id]
        return [{"session_id": session_id, "run_id": r, "updated_at": t} for t, r in sorted(runs, reverse=True)]

    def _wait_after(self, key: tuple[str, str], cursor: int, timeout: float) -> list[dict[str, Any]]:
        with self._cond:
            self.waits += 1
            self._cond.wait_for(lambda: len(self._runs.get(key, [])) > cursor, timeout)
            return self._after(key, cursor)[: self.BATCH]

    async def follow(
        self, session_id: str, run_id: str, *, after_seq: int = 0, idle: float = 15.0
    ) -> AsyncIterator[list[dict[str, Any]]]:
        paths.check_ids(session_id, run_id)
        summary = self.summary(session_id, run_id)
        ended = bool(summary and summary["terminal"])
        cursor, key = after_seq, (session_id, run_id)
        while True:
            rows = await asyncio.to_thread(self._wait_after, key, cursor, 0 if ended else idle)
            if rows:
                cursor = rows[-1]["seq"]
                ended = ended or any(ends_run(row) for row in rows)
                yield rows
            elif ended:
                return
            else:
                yield []
