"""The floor of the callback handler's benchmark: what ``RelayCallbackHandler`` records of a chat model
``invoke``, written by hand.

A logical call and one observed attempt under the turn, four events with the same fields, metadata, lazily
blanked input and output and lazily made views, the call held on the turn while open, written flat for this
one case (a model run with no parent run, no instrumented SDK, one answer) in a callback handler of its
own, with nothing else: no retry bookkeeping, no second handler's check, no turn handed to another thread.
``check_same_records`` proves the hand-written records are the handler's; the benchmark measures the
handler's generality (and the core's) against them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks import floor_calls
from benchmarks.genai_floor import record_shapes
from relay_runtime import conventions as cv
from relay_runtime import session
from relay_runtime.attempt_views import recorded_request, recorded_view
from relay_runtime.events import SCOPE_END, SCOPE_START, Deferred, Recorded, lazily, new_event
from relay_runtime.integrations.frameworks import _answered, _safely
from relay_runtime.integrations.langchain.codec import CODECS, codec_for
from relay_runtime.scopes import ScopeHandle, _blanked

_EMPTY: dict[str, Any] = {}


def floor_handler() -> Any:
    """A LangChain callback handler writing the handler's records of one chat model call by hand."""
    from langchain_core.callbacks import BaseCallbackHandler

    class FloorHandler(BaseCallbackHandler):  # type: ignore[misc]
        run_inline = True
        ignore_llm = ignore_retry = ignore_chain = ignore_agent = ignore_retriever = ignore_chat_model = False
        ignore_custom_event = False

        def __init__(self) -> None:
            super().__init__()
            self.runs: dict[int, tuple[Any, ...]] = {}

        def on_chat_model_start(
            self, serialized: Any, messages: list[list[Any]], *, run_id: Any, metadata: Any = None, **kwargs: Any
        ) -> None:
            turn = session.managed_turn()
            assert turn is not None
            relay = turn.relay
            meta = metadata or _EMPTY
            provider = meta.get("ls_provider") or "langchain"
            codec = CODECS.get(provider) or codec_for(provider)
            model = meta.get("ls_model_name")
            content = {"model": model, "messages": messages[0]}
            logical = floor_calls.opened(turn)
            logical.provider, logical.model = codec.provider, model
            attempt_meta = {
                cv.KIND: cv.ATTEMPT, cv.API_REQUEST_ID: logical.api_request_id, cv.CALL_ROLE: "primary",
                cv.RETRY_COUNT: 0,
            }  # fmt: skip
            attempt = ScopeHandle(codec.provider, "llm", logical.scope, attempt_meta, None, False, None)
            sent = lazily(Recorded, recorded_request, (_EMPTY, content, relay))
            subs = relay.subscribers
            start = new_event(SCOPE_START, attempt.uuid, attempt.parent_uuid, attempt.trace_id, attempt.name, "llm",
                              attempt.start_ns, None, sent, None, attempt_meta)  # fmt: skip
            subs.deliver(subs.start, start)
            view = lazily(Deferred, _safely, (recorded_view, codec, content))
            self.runs[run_id.int] = (turn, logical, attempt, codec, view)

        def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
            turn, logical, attempt, codec, view = self.runs.pop(run_id.int)
            message = response.generations[0][0].message
            model = (message.response_metadata or _EMPTY).get("model_name") or (response.llm_output or _EMPTY).get(
                "model_name"
            )
            answer = lazily(Deferred, _answered, (codec.annotate_response, message))
            output = lazily(Recorded, _blanked, (response, False, True))
            attempt.ended = True
            subs = turn.relay.subscribers
            subs.deliver(subs.end, new_event(SCOPE_END, attempt.uuid, attempt.parent_uuid, attempt.trace_id,
                                             attempt.name, "llm", time.time_ns(), attempt.start_ns, None,
                                             output, attempt.metadata, None, attempt.name, model, view, answer, None,
                                             None, "success"))  # fmt: skip
            floor_calls.ended(turn, logical, model or logical.model, logical.provider)

    return FloorHandler()


def check_same_records(ours: Callable[[], Any], floor: Callable[[], Any]) -> None:
    """Refuse to show the floor unless the hand-made records are exactly the handler's."""
    mine, by_hand = record_shapes(ours), record_shapes(floor)
    if mine != by_hand:
        raise SystemExit(f"the hand-made records differ from the handler's:\n  ours:  {mine}\n  floor: {by_hand}")
