"""``outside_turns.serving(scope)``: LLM calls made with no turn open, while a request is served, nest under it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from relay_runtime import Recorder, adapters, outside_turns, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t

CHAT = {"model": "gpt-o", "messages": [{"role": "user", "content": "q"}]}


def _host_with_recorder() -> tuple[session.Host, Recorder]:
    host = session.SESSION_COORDINATOR.default_host()
    recorder = Recorder()
    host.relay.subscribers.register(recorder, name="serving-recorder")
    host.retain_managed_execution("serving-recorder")
    return host, recorder


def test_a_call_made_while_serving_nests_under_the_served_scope_and_only_then(relay_home: Path) -> None:
    host, recorder = _host_with_recorder()
    scripted = t.scripted_openai(*(t.json_reply(t.chat_completion_body("a")) for _ in range(2)))
    client = adapters.instrument(scripted.client)
    served = host.relay.scope.push("tools/call ask", "tool")
    with outside_turns.serving(served):
        client.chat.completions.create(**CHAT)
    host.relay.scope.pop(served)
    client.chat.completions.create(**CHAT)  # after the request: a root again
    first, second = recorder.starts(relay_kind=cv.LOGICAL_CALL)
    assert first.parent_uuid == served.uuid and first.trace_id == served.trace_id
    assert second.parent_uuid is None


def test_tasks_started_while_serving_inherit_it_and_an_ended_scope_is_not_used(relay_home: Path) -> None:
    host, recorder = _host_with_recorder()
    scripted = t.scripted_openai(*(t.json_reply(t.chat_completion_body("a")) for _ in range(2)))

    async def run() -> session.ScopeHandle:
        client = adapters.instrument(scripted.aclient)
        served = host.relay.scope.push("tools/call ask", "tool")
        with outside_turns.serving(served):
            await asyncio.gather(asyncio.ensure_future(client.chat.completions.create(**CHAT)))
            host.relay.scope.pop(served)
            await client.chat.completions.create(**CHAT)  # the served scope has ended: a root
        return served

    served = asyncio.run(run())
    first, second = recorder.starts(relay_kind=cv.LOGICAL_CALL)
    assert first.parent_uuid == served.uuid
    assert second.parent_uuid is None
