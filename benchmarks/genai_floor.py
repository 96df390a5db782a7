"""The floor of ``bench_genai``: what an instrumented ``generate_content`` records, written by hand.

A logical call and one attempt, four events with the same fields, metadata, lazily blanked input and
lazily decoded views, the attempt current while the SDK runs and its HTTP tries counted at the SDK's
per-try seam, written flat for this one case (no config, no tools, one request) with nothing else.
``check_same_records`` proves the hand-written records are the adapter's; the benchmark measures the
adapter's generality (and the core's) against them. ``by_hand_stream`` does the same for
``generate_content_stream``: the chunks folded into the response the end event holds, as they pass.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextvars import copy_context
from functools import partial
from typing import TYPE_CHECKING, Any

from benchmarks import floor_calls
from benchmarks.managed_turn import managed_turn
from relay_runtime import conventions as cv
from relay_runtime import redaction, session
from relay_runtime.adapters.google_genai.codec import GEMINI
from relay_runtime.attempt import _current
from relay_runtime.attempt_views import annotate_for_observers, decode_for_observers, recorded_request
from relay_runtime.events import SCOPE_END, SCOPE_START, Deferred, Recorded, new_event
from relay_runtime.scopes import ScopeHandle
from relay_runtime.types import request_taking

if TYPE_CHECKING:
    from relay_runtime.session import LogicalCall, Turn

MODEL = "gemini-2.5-flash"
CONTENTS = "hello"


def _count_tries(api_client: Any) -> None:
    """The SDK's per-try method shadowed on this API client (tenacity looks it up for every try): each try is
    counted on the attempt current here, as the adapter counts it (``sdk_retries``)."""
    from relay_runtime.adapters.sdk_retries import count_try

    if "_request_once" in api_client.__dict__:
        return  # counted already (or instrumented: ``by_hand`` refuses that client's records below)
    once = api_client._request_once

    def request_once(http_request: Any, stream: bool = False, *args: Any, **kwargs: Any) -> Any:
        count_try()
        return once(http_request, stream, *args, **kwargs)

    api_client.__dict__["_request_once"] = request_once


class _Client:
    """What both floors read of one client once, and the records they share: the attempt's start and end."""

    def __init__(self, client: Any, kind: str) -> None:
        from relay_runtime.adapters.google_genai.codec import CODECS, GEMINI
        from relay_runtime.urls import server_address

        api_client = client._api_client
        _count_tries(api_client)
        self.codec = CODECS[(GEMINI, kind)]
        self.address = server_address(api_client._http_options.base_url)
        self.key = api_client.api_key

    def started(self, stream: bool) -> tuple[Turn, LogicalCall, ScopeHandle, dict[str, Any], Deferred]:
        """The managed turn, and in it a logical call and its attempt, started as the adapter starts them: the
        attempt's metadata, its view, and its start event."""
        turn = session.managed_turn()
        assert turn is not None and turn.scope is not None
        relay = turn.relay
        subs = relay.subscribers
        if self.key not in redaction._secrets:
            redaction.remember_secret(self.key)
        logical = floor_calls.opened(turn, streams=1 if stream else 0)
        rid = logical.api_request_id
        # The request the SDK's public method passes its per-request one (its config parsed: none here).
        request = request_taking({"model": MODEL, "contents": CONTENTS, "config": None})
        # A stream's attempt is opened with the client's metadata leading its own; a call's gets it after.
        meta = (
            {cv.KIND: cv.ATTEMPT, cv.SERVER_ADDRESS: self.address, cv.API_REQUEST_ID: rid, cv.CALL_ROLE: "primary",
             cv.RETRY_COUNT: 0}
            if stream
            else {cv.KIND: cv.ATTEMPT, cv.API_REQUEST_ID: rid, cv.CALL_ROLE: "primary", cv.RETRY_COUNT: 0,
                  cv.SERVER_ADDRESS: self.address}
        )  # fmt: skip
        attempt = ScopeHandle(GEMINI, "llm", logical.scope, meta, None, False, None)
        view = Deferred(decode_for_observers, relay, GEMINI, self.codec, dict(request._content))
        subs.deliver(subs.start, new_event(SCOPE_START, attempt.uuid, attempt.parent_uuid, attempt.trace_id, GEMINI,
                                           "llm", attempt.start_ns, None,
                                           Recorded(recorded_request, request._headers, request._content, relay),
                                           None, dict(meta), None, GEMINI, MODEL, view))  # fmt: skip
        return turn, logical, attempt, meta, view

    def ended(
        self, turn: Turn, logical: LogicalCall, attempt: ScopeHandle, meta: dict[str, Any], view: Deferred,
        response: Any, first_chunk_ns: int | None,
    ) -> None:  # fmt: skip
        """The attempt's end (a success answered by ``response``), then its logical call's."""
        attempt.ended = True
        relay = turn.relay
        subs = relay.subscribers
        annotation = Deferred(annotate_for_observers, relay, GEMINI, self.codec, response, first_chunk_ns, meta)
        subs.deliver(subs.end, new_event(SCOPE_END, attempt.uuid, attempt.parent_uuid, attempt.trace_id, GEMINI,
                                         "llm", time.time_ns(), attempt.start_ns, None, response, meta, None, GEMINI,
                                         MODEL, view, annotation, None, None, "success"))  # fmt: skip
        floor_calls.ended(turn, logical, MODEL, GEMINI)


def by_hand(client: Any) -> Callable[[], Any]:
    """``client.models.generate_content(model=MODEL, contents=CONTENTS)`` recording what the instrumented call
    records (a logical call and one attempt, four events), written flat for this one case: no policy, cost,
    cassette, route, auxiliary call, automatic function calling, stream or error path. ``client`` must not be
    instrumented; its API client gets a per-try counter (once)."""
    floor = _Client(client, "generate")
    generate = client.models.generate_content

    def call() -> Any:
        turn, logical, attempt, meta, view = floor.started(False)
        stack = turn.relay.scope._stack
        stack_token = stack.set(attempt)
        attempt_token = _current.set(attempt)  # type: ignore[arg-type]  # a handle has the metadata the counter reads
        try:
            result = generate(model=MODEL, contents=CONTENTS)
        finally:
            stack.reset(stack_token)
            _current.reset(attempt_token)
        floor.ended(turn, logical, attempt, meta, view, result, None)
        return result

    return call


def by_hand_stream(client: Any) -> Callable[[], Iterator[Any]]:
    """``client.models.generate_content_stream(model=MODEL, contents=CONTENTS)`` recording what the instrumented
    stream records, written flat for this one case (one candidate, text parts, a last chunk that says why it
    stopped; no policy, cost, cassette, route, tools or error path): the attempt current while the SDK reads (a
    context of its own, as the core's), the time to the first chunk, and the chunks folded as they pass into the
    response the end event holds. ``client`` must not be instrumented."""
    floor = _Client(client, "stream")
    generate = client.models.generate_content_stream
    now = time.time_ns

    def stream() -> Iterator[Any]:
        turn, logical, attempt, meta, view = floor.started(True)
        context = copy_context()
        run = context.run
        run(turn.relay.scope._stack.set, attempt)
        run(_current.set, attempt)
        source = run(iter, run(generate, model=MODEL, contents=CONTENTS))
        first_ns = None
        texts: list[str] = []
        chunk = None
        for chunk in iter(partial(run, next, source, _END), _END):
            if first_ns is None:
                first_ns = now()
            texts.append(chunk.candidates[0].content.parts[0].text)
            yield chunk
        # The last chunk says why the model stopped, its model, id and the whole usage.
        candidate = chunk.candidates[0]
        usage = chunk.usage_metadata.__dict__
        response = {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "".join(texts)}]},
                            "finish_reason": candidate.finish_reason.value}],
            "model_version": chunk.model_version, "response_id": chunk.response_id,
            "usage_metadata": {name: value for name, value in usage.items() if value is not None},
        }  # fmt: skip
        assert first_ns is not None
        floor.ended(turn, logical, attempt, meta, view, response, first_ns - attempt.start_ns)

    return stream


_END: Any = object()  # a stream's end, as ``iter(callable, sentinel)`` reads it


def record_shapes(call: Callable[[], Any]) -> list[tuple[Any, ...]]:
    """The events one call records, field by field (lazily made ones read), its ids replaced by their order of
    appearance and its times by whether they are there."""
    from relay_runtime.recorder import Recorder

    with managed_turn(subscribed=False) as host:
        recorder = Recorder()
        host.relay.subscribers.register(recorder, name="bench-shapes")
        call()
    ids: dict[str, str] = {}

    def named(value: Any) -> Any:
        return ids.setdefault(value, f"id{len(ids)}") if isinstance(value, str) else value

    shapes = []
    for e in recorder:
        if e.name in ("turn", "conversation"):
            continue  # the managed turn's own ends, after the call
        metadata = [(k, named(v) if k == "api_request_id" else v) for k, v in (e.metadata or {}).items()]  # in order
        shapes.append((
            e.kind, e.name, e.scope_type, named(e.uuid), named(e.parent_uuid), metadata,
            repr(e.input), type(e.output).__name__, e.output if isinstance(e.output, dict) else None,
            e.provider, e.model_name, e.outcome, e.error_type, e.error_message, e.start_timestamp is not None,
            repr(e.annotated_request), _TIMED.sub(r"\1<set>", repr(e.annotated_response)), e.data, e.cost,
        ))  # fmt: skip
    return shapes


_TIMED = re.compile(r"(time_to_first_chunk_ns=)\d+")  # a duration: whether it is there, not its value


def read_out(stream: Callable[[], Iterator[Any]]) -> Callable[[], list[Any]]:
    return lambda: list(stream())


def check_same_records(ours: Any, floor: Any) -> None:
    """Refuse to show the floor unless the hand-made calls on ``floor`` record exactly what the instrumented
    ``generate_content`` and ``generate_content_stream`` (read out) on ``ours`` do."""
    models = ours.models
    pairs = (
        (lambda: models.generate_content(model=MODEL, contents=CONTENTS), by_hand(floor)),
        (lambda: list(models.generate_content_stream(model=MODEL, contents=CONTENTS)), read_out(by_hand_stream(floor))),
    )
    for instrumented, hand_made in pairs:
        mine, by_hand_ = record_shapes(instrumented), record_shapes(hand_made)
        if mine != by_hand_:
            raise SystemExit(f"the hand-made records differ from the instrumented call's:\n  ours:  {mine}\n"
                             f"  floor: {by_hand_}")  # fmt: skip
