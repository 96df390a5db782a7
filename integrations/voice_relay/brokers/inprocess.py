"""Runs an agent callable in this process, inside a relay_runtime turn.

Each run leases the conversation of its session id and opens one turn for the run, so every LLM
call and tool the agent makes while the run is active is traced under it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from relay_runtime import session as relay_session

from ..models import AgentTaskRequest

AgentCallable = Callable[[AgentTaskRequest, "RunContext"], Coroutine[Any, Any, str]]
_DONE = object()


class RunContext:
    """What the agent callable may do besides returning its answer."""

    def __init__(self, request: AgentTaskRequest, run_id: str, turn: relay_session.Turn) -> None:
        self.request = request
        self.run_id = run_id
        self.turn = turn
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._confirmations: dict[str, asyncio.Future[bool]] = {}
        self.streamed = False

    def _event(self, kind: str, **fields: Any) -> None:
        self._queue.put_nowait({"type": kind, "session_id": self.request.session_id, "run_id": self.run_id, **fields})

    def say(self, delta: str) -> None:
        """Stream part of the answer."""
        self.streamed = True
        self._event("voice.response.delta", delta=delta)

    async def tool(self, name: str, args: Any, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(args)` as a traced tool; the phone sees it start and complete."""
        call_id = uuid.uuid4().hex[:12]
        self._event("hermes.tool.started", tool_name=name, tool_call_id=call_id)
        ok = False
        try:
            result = await self.turn.relay.tools.execute_async(name, args, fn)
            ok = True
            return result
        finally:
            self._event("hermes.tool.completed", tool_name=name, tool_call_id=call_id, ok=ok)

    async def confirm(self, prompt: str) -> bool:
        """Ask the user (through the voice model or the phone) to approve something; waits for the answer."""
        confirm_id = uuid.uuid4().hex[:12]
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._confirmations[confirm_id] = future
        self._event("hermes.confirm.requested", confirm_id=confirm_id, prompt=prompt)
        try:
            return await future
        finally:
            self._confirmations.pop(confirm_id, None)

    def resolve(self, confirm_id: str, approved: bool) -> bool:
        future = self._confirmations.get(confirm_id)
        if future is None or future.done():
            return False
        future.set_result(approved)
        return True


class InProcessTaskBroker:
    def __init__(self, agent: AgentCallable, *, profile_key: str | None = None, platform: str = "voice") -> None:
        self.agent = agent
        self.profile_key = profile_key
        self.platform = platform
        self._runs: dict[str, RunContext] = {}

    async def confirm(self, confirm_id: str, approved: bool) -> bool:
        return any(ctx.resolve(confirm_id, approved) for ctx in list(self._runs.values()))

    async def stream_task(self, request: AgentTaskRequest) -> AsyncIterator[dict[str, Any]]:
        run_id = f"run-{uuid.uuid4().hex[:16]}"
        coordinator = relay_session.SESSION_COORDINATOR
        lease = coordinator.acquire_conversation(
            profile_key=self.profile_key or relay_session.current_profile_key(),
            session_id=request.session_id or run_id,
            platform=self.platform,
        )
        turn = coordinator.begin_turn(lease, turn_id=run_id, task_id=run_id)
        ctx = RunContext(request, run_id, turn)
        self._runs[run_id] = ctx
        outcome = "cancelled"
        task: asyncio.Task[str] | None = None
        try:
            yield {"type": "hermes.session.bound", "session_id": lease.session_id, "run_id": run_id}
            yield {"type": "hermes.run.started", "session_id": lease.session_id, "run_id": run_id,
                   "profile": request.profile}
            # The task copies this context, so the agent runs with the turn active.
            task = asyncio.create_task(self.agent(request, ctx), name=f"agent-{run_id}")
            task.add_done_callback(lambda _t: ctx._queue.put_nowait(_DONE))
            while True:
                item = await ctx._queue.get()
                if item is _DONE:
                    break
                yield item
            try:
                answer = task.result()
            except Exception as exc:
                outcome = "failed"
                yield {"type": "voice.error", "session_id": lease.session_id, "run_id": run_id,
                       "message": f"agent failed: {type(exc).__name__}: {exc}"}
                return
            if not ctx.streamed and answer:
                yield {"type": "voice.response.delta", "session_id": lease.session_id, "run_id": run_id,
                       "delta": str(answer)}
            outcome = "success"
            yield {"type": "hermes.run.completed", "session_id": lease.session_id, "run_id": run_id,
                   "profile": request.profile}
        finally:
            if task is not None and not task.done():
                task.cancel()
            self._runs.pop(run_id, None)
            coordinator.end_turn(turn, outcome=outcome)
            coordinator.release_conversation(lease)


async def echo_agent(request: AgentTaskRequest, ctx: RunContext) -> str:
    """A stand-in agent for demos: one traced tool call, then an answer naming the task."""
    words = await ctx.tool("count_words", {"text": request.text}, lambda args: len(args["text"].split()))
    return f"The agent looked at your request, {request.text!r}, which has {words} words."
