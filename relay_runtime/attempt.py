"""The lifecycle of one physical LLM call, shared by every calling convention.

``relay_runtime.llm`` keeps only the calling conventions (sync, async, stream,
async stream); everything an attempt does before, around and after the
provider lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from . import conventions as cv
from .chains import run_filters
from .codec import LLMCodec
from .events import SCOPE_START, Event
from .intercepts import LLM_GUARDRAIL, LLM_REQUEST, LLM_RESPONSE, GuardrailRejected, Intercept
from .redaction import redacted_request
from .scopes import ScopeHandle, outcome_of
from .types import (
    AnnotatedLLMRequest,
    AnnotatedLLMResponse,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Outcome,
    ScopeType,
)

if TYPE_CHECKING:
    from .relay import Relay

_current: ContextVar[Attempt | None] = ContextVar("relay_current_attempt", default=None)

FinishHook = Callable[[str, Any, "BaseException | None"], None]


def current_attempt() -> Attempt | None:
    """The attempt whose provider callback is running in this context, if any.

    Adapters use it to add what only they can see (e.g. the SDK's own retry
    count) to ``attempt.metadata`` before the end event is built.
    """
    return _current.get()


class Attempt:
    __slots__ = (
        "annotated",
        "codec",
        "finished",
        "handle",
        "metadata",
        "model_name",
        "name",
        "on_finish",
        "relay",
        "request",
    )

    def __init__(
        self,
        relay: Relay,
        name: str,
        request: LLMRequest,
        parent: ScopeHandle | None,
        model_name: str | None,
        metadata: dict[str, Any] | None,
        codec: LLMCodec | None,
        on_finish: FinishHook | None,
    ) -> None:
        if not isinstance(request, LLMRequest):
            raise TypeError(f"LLM call {name!r} needs an LLMRequest, got {type(request).__name__}")
        self.relay = relay
        self.name = name
        self.request = request
        self.codec = codec
        self.model_name = model_name
        self.metadata: dict[str, Any] = {cv.KIND: cv.ATTEMPT, **metadata} if metadata else {cv.KIND: cv.ATTEMPT}
        self.on_finish = on_finish
        self.finished = False
        self.annotated: AnnotatedLLMRequest | None = None
        scopes = relay.scope
        owner = parent if parent is not None else scopes.current()
        # Not on any stack: the calling convention makes it current only while the
        # provider runs, so a stream left open never becomes everyone's parent.
        self.handle = ScopeHandle(name, ScopeType.LLM.value, owner, None, None, False, None)

    # -- before the provider ----------------------------------------------------------

    def prepare(self) -> LLMRequest:
        """Guardrails, request intercepts, then the start event. Returns the request to send."""
        relay = self.relay
        intercepts = relay.intercepts
        owner = self.handle.parent
        request = self.request
        try:
            guardrails = intercepts.chain(LLM_GUARDRAIL, owner) if intercepts.active else ()
            edits = intercepts.chain(LLM_REQUEST, owner) if intercepts.active else ()
            codec = self.codec
            if codec is not None and (guardrails or edits or relay.subscribers.start or relay.subscribers.end):
                self.annotated = codec.decode(request.content)
            for entry in guardrails:
                reason = entry.fn(self.name, request, self.annotated)
                if reason is not None:
                    raise GuardrailRejected(entry.name, str(reason))
            if edits:
                request = self._apply_request_intercepts(edits, request)
        except BaseException as exc:
            self._emit_start(request)
            self.fail(exc)
            raise
        self.request = request
        if self.model_name is None and self.annotated is not None:
            self.model_name = self.annotated.model
        self._emit_start(request)
        return request

    def _apply_request_intercepts(self, edits: tuple[Intercept, ...], request: LLMRequest) -> LLMRequest:
        before = self.annotated.snapshot() if self.annotated is not None else None

        def one(entry: Intercept, req: LLMRequest) -> LLMRequest:
            outcome = entry.fn(self.name, req, self.annotated)
            if not isinstance(outcome, LLMRequestInterceptOutcome):
                raise TypeError(
                    f"request intercept {entry.name!r} must return an LLMRequestInterceptOutcome, "
                    f"got {type(outcome).__name__}"
                )
            if outcome.annotated_request is not None:
                self.annotated = outcome.annotated_request
            return outcome.request

        request = run_filters(edits, one, request)
        if before is not None and self.annotated is not None and self.codec is not None:
            changes = self.annotated.changes_since(before)
            if changes:
                request = request.replace(content=self.codec.apply(request.content, changes))
        return request

    def _emit_start(self, request: LLMRequest) -> None:
        subs = self.relay.subscribers
        if not subs.start:
            return
        h = self.handle
        try:
            event = Event(
                SCOPE_START,
                h.uuid,
                h.parent_uuid,
                h.trace_id,
                self.name,
                h.scope_type,
                h.start_ns,
                input=redacted_request(request.headers, request.content),
                metadata=dict(self.metadata),
                provider=self.name,
                model_name=self.model_name,
                annotated_request=self.annotated,
            )
        except Exception as exc:
            self.relay.diag.failure("bookkeeping_errors", exc, "building an attempt start event")
            return
        subs.deliver(subs.start, event)

    # -- while the provider runs --------------------------------------------------------

    def enter(self) -> tuple[Any, Any]:
        """Make this attempt the current scope and attempt of this context; ``leave`` undoes it."""
        return self.relay.scope._stack.set(self.handle), _current.set(self)

    def leave(self, tokens: tuple[Any, Any]) -> None:
        self.relay.scope._stack.reset(tokens[0])
        _current.reset(tokens[1])

    # -- after the provider ------------------------------------------------------------

    def response_intercepts(self) -> tuple[Intercept, ...]:
        intercepts = self.relay.intercepts
        return intercepts.chain(LLM_RESPONSE, self.handle.parent) if intercepts.active else ()

    def succeed(self, response: Any) -> Any:
        """Run response intercepts (policy: they fail closed), then end the attempt as a success."""
        chain = self.response_intercepts()
        if chain:
            try:
                response = run_filters(chain, lambda e, r: e.fn(self.name, self.request, r), response)
            except BaseException as exc:
                self.fail(exc)
                raise
        self.finish(Outcome.SUCCESS.value, response, None, None)
        return response

    def fail(self, error: BaseException | None, outcome: str | None = None) -> None:
        self.finish(outcome or outcome_of(error), None, error, None)

    def finish(
        self,
        outcome: str,
        response: Any,
        error: BaseException | None,
        annotation: AnnotatedLLMResponse | None,
        first_chunk_ns: int | None = None,
    ) -> None:
        """End the attempt exactly once; the relay's own failures here never reach the caller."""
        if self.finished:
            return
        self.finished = True
        relay = self.relay
        try:
            if relay.subscribers.end:
                if annotation is None and response is not None and self.codec is not None:
                    annotation = self.codec.annotate_response(response)
                if annotation is not None and first_chunk_ns is not None:
                    annotation.time_to_first_chunk_ns = first_chunk_ns - self.handle.start_ns
                relay.scope.end(
                    self.handle,
                    output=response,
                    metadata=self.metadata,
                    error=error,
                    outcome=outcome,
                    provider=self.name,
                    model_name=self.model_name,
                    annotated_request=self.annotated,
                    annotated_response=annotation,
                )
            else:
                self.handle.ended = True
        except Exception as exc:
            self.handle.ended = True
            relay.diag.failure("bookkeeping_errors", exc, f"ending LLM attempt {self.name!r}")
        if self.on_finish is not None:
            try:
                self.on_finish(outcome, response, error)
            except Exception as exc:
                relay.diag.failure("bookkeeping_errors", exc, f"finishing LLM attempt {self.name!r}")
