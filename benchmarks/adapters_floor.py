"""The floor of ``bench_adapters``: what a managed OpenAI call records, written by hand.

A logical call and one attempt, four events with the same fields, metadata, redacted input and lazily
decoded views, written flat for this one case with nothing else. ``check_same_records`` proves the
hand-written records are the library's; the benchmark measures the library's generality against them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks import floor_calls
from benchmarks.managed_turn import managed_turn

KWARGS: dict[str, Any] = {
    "model": "gpt-bench",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
    "temperature": 0.2,
}


def by_hand(client: Any) -> Callable[[], Any]:
    """What the managed call records (a logical call and one attempt: four events with the same
    fields, metadata, redacted input and lazily decoded views, the attempt current while the SDK
    runs, the SDK's tries counted), written flat for this one case with nothing else: no policy,
    cost, cassette, auxiliary or stream checks, no error paths. The floor of this design's records,
    against which the library's own generality is measured (``check_same_records`` proves the
    records are the same)."""
    from relay_runtime import conventions as cv
    from relay_runtime import redaction, session
    from relay_runtime.adapters import sdk_retries
    from relay_runtime.adapters.dispatch import APIS, CHAT_COMPLETIONS, server_address
    from relay_runtime.attempt import _current
    from relay_runtime.attempt_views import annotate_for_observers, decode_for_observers
    from relay_runtime.events import SCOPE_END, SCOPE_START, Deferred, new_event
    from relay_runtime.scopes import ScopeHandle
    from relay_runtime.types import request_of_kwargs

    codec = APIS[CHAT_COMPLETIONS].codec
    address = server_address(client)
    now = time.time_ns

    def call() -> Any:
        turn = session.managed_turn()
        assert turn is not None and turn.scope is not None
        relay = turn.relay
        subs = relay.subscribers
        create = client.chat.completions.create
        redaction.remember_secret(client.api_key)
        request = request_of_kwargs(KWARGS)
        logical = floor_calls.opened(turn)
        rid, scope = logical.api_request_id, logical.scope
        meta = {cv.KIND: cv.ATTEMPT, cv.SERVER_ADDRESS: address, cv.RETRY_COUNT: 0, cv.API_REQUEST_ID: rid,
                cv.CALL_ROLE: "primary"}  # fmt: skip
        attempt = ScopeHandle("openai", "llm", scope, meta, None, False, None)
        content = request.raw_content()
        snapshot = dict(content)
        for key, value in snapshot.items():
            if type(value) is list:
                snapshot[key] = list(value)
        view = Deferred(decode_for_observers, relay, "openai", codec, snapshot)
        subs.deliver(
            subs.start,
            new_event(SCOPE_START, attempt.uuid, attempt.parent_uuid, attempt.trace_id, "openai", "llm",
                      attempt.start_ns, input=redaction.redacted_request(request.raw_headers(), content),
                      metadata=dict(meta), provider="openai", model_name="gpt-bench", annotated_request=view),
        )  # fmt: skip
        stack_token = relay.scope._stack.set(attempt)
        attempt_token = _current.set(attempt)  # type: ignore[arg-type]  # a handle has the metadata the hook reads
        try:
            sdk_retries.watch(client)
            result = create(**request.kwargs())
        finally:
            relay.scope._stack.reset(stack_token)
            _current.reset(attempt_token)
        attempt.ended = True
        annotation = Deferred(annotate_for_observers, relay, "openai", codec, result, None, meta)
        subs.deliver(
            subs.end,
            new_event(SCOPE_END, attempt.uuid, attempt.parent_uuid, attempt.trace_id, "openai", "llm", now(),
                      start_timestamp=attempt.start_ns, output=result, metadata=meta, outcome="success",
                      provider="openai", model_name="gpt-bench", annotated_request=view,
                      annotated_response=annotation),
        )  # fmt: skip
        floor_calls.ended(turn, logical, result.model, "openai")
        return result

    return call


def record_shapes(call: Callable[[], Any]) -> list[tuple[Any, ...]]:
    from relay_runtime.recorder import Recorder

    with managed_turn(subscribed=False) as host:
        recorder = Recorder()
        host.relay.subscribers.register(recorder, name="bench-shapes")
        call()
    return [
        (
            e.kind, e.name, e.scope_type, sorted(e.metadata or {}),
            e.input and {k: sorted(v) for k, v in e.input.items()},
            type(e.output).__name__, e.output if isinstance(e.output, dict) else None, e.provider, e.model_name,
            e.outcome, e.error_type, e.start_timestamp is not None,
            repr(e.annotated_request), repr(e.annotated_response),
        )
        for e in recorder
    ]  # fmt: skip


def check_same_records(client: Any) -> None:
    """Refuse to show the floor unless the hand-made call records exactly what ours does."""
    from relay_runtime import adapters

    ours = record_shapes(lambda: adapters.complete(client, KWARGS))
    floor = record_shapes(by_hand(client))
    if ours != floor:
        raise SystemExit(f"the hand-made records differ from the managed call's:\n  ours:  {ours}\n  floor: {floor}")
