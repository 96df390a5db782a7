"""The lifecycle of one physical LLM call, shared by every calling convention.

``relay_runtime.llm`` keeps only the calling conventions (sync, async, stream,
async stream); everything an attempt does before, around and after the
provider lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import attempt_next, attempt_request, attempt_views
from . import conventions as cv
from .attempt_request import NO_CHAINS
from .attempt_views import DECODE_ERRORS as DECODE_ERRORS
from .attempt_views import annotate_for_observers, decode_for_observers, mark_fallback, recorded_request
from .chains import is_awaitable, refuse_awaitable
from .codec import LLMCodec, content_reader
from .cost.control import DOWNGRADED_FROM, NOT_SENT
from .events import (
    SCOPE_START,
    AnnotatedRequestField,
    AnnotatedResponseField,
    Deferred,
    DeferredResponse,
    Recorded,
    lazily,
    new_event,
)
from .intercepts import LLM_RESPONSE, Intercept
from .redaction import redact_metadata, redacted_annotation
from .scopes import ScopeHandle, outcome_of
from .types import (
    AnnotatedLLMRequest,
    AnnotatedLLMResponse,
    LLMRequest,
    Outcome,
    ScopeType,
)

if TYPE_CHECKING:
    from .relay import Relay

_current: ContextVar[Attempt | None] = ContextVar("relay_current_attempt", default=None)

# Enum member lookups cost on every call; the hot path reads these plain strings.
_LLM = ScopeType.LLM.value
_SUCCESS = Outcome.SUCCESS.value

_CANCELLED = Outcome.CANCELLED.value
_NOTHING: Any = object()
# ``Attempt.fallback`` when the attempt's record was handed to an ``Outrun`` (see ``Attempt.outrun``).
_OUTRUN: Any = ("", None, None)
_SDK_RETRIES = cv.SDK_RETRIES

FinishHook = Callable[[str, Any, "BaseException | None"], None]


def attempt_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A new attempt's own metadata dict: its kind, then the caller's entries (never the caller's dict)."""
    return {cv.KIND: cv.ATTEMPT, **redact_metadata(metadata)} if metadata else {cv.KIND: cv.ATTEMPT}


# ``current_attempt()``: the attempt whose provider callback is running in this context, if
# any. Adapters use it to add what only they can see (e.g. the SDK's own retry count) to
# ``attempt.metadata`` before the end event is built. The context variable's own ``get``:
# it runs on every HTTP request of a managed call, and a wrapper would add a Python frame.
current_attempt: Callable[[], Attempt | None] = _current.get
# Its set and reset, for ``Attempt.enter``'s work done inline (``llm.run``: every managed call runs it).
set_current = _current.set
reset_current = _current.reset


class Attempt:
    __slots__ = (
        "abandoned",
        "annotated",
        "chains",
        "codec",
        "cost_state",
        "fallback",
        "finished",
        "handle",
        "held",
        "hold",
        "live",
        "metadata",
        "model_name",
        "name",
        "on_finish",
        "relay",
        "request",
        "retries",
        "settle_late",
        "tracked",
        "view",
        "waiting",
    )
    # The retry_count last given to an attempt of this call; set by its first renewal only (see _next_retry).
    retries: int

    def __init__(
        self,
        relay: Relay,
        name: str,
        request: LLMRequest,
        parent: ScopeHandle | None,
        model_name: str | None,
        metadata: dict[str, Any],
        codec: LLMCodec | None,
        on_finish: FinishHook | None,
    ) -> None:
        """``metadata`` becomes the attempt's own (see ``attempt_metadata``): adapters add to it during the call."""
        if (type(name) is not str and not isinstance(name, str)) or not name:
            raise ValueError(f"LLM call name must be a non-empty string, got {name!r}")
        if type(request) is not LLMRequest and not isinstance(request, LLMRequest):
            raise TypeError(f"LLM call {name!r} needs an LLMRequest, got {type(request).__name__}")
        self.relay = relay
        self.name = name
        self.request = request
        self.codec = codec
        self.model_name = model_name
        self.metadata = metadata
        self.on_finish = on_finish
        self.finished = False
        # While True, the execution chain's continuations may reach the provider (see chains).
        self.live = False
        # Set by whoever validates responses after the call (an auxiliary call): the attempt then
        # stays open, holding its response, until ``release`` says how it ended.
        self.hold: Callable[[Attempt], None] | None = None
        self.held: Any = _NOTHING
        self.annotated: AnnotatedLLMRequest | None = None
        self.view: AnnotatedRequestField = None
        self.chains = NO_CHAINS
        self.cost_state: Any = None  # relay_runtime.cost's AttemptSpend, when budgets apply
        # True while a (non-streamed) call waits for the provider's answer. Ended then (its turn ended),
        # the attempt is priced when the answer comes: the provider charges for it all the same.
        self.waiting = False
        # The outcome recorded for such an attempt, kept until its answer is priced: its cost is wasted or
        # not as that record says (a call its turn cancelled), whatever the late answer is.
        self.settle_late: str | None = None
        # The open attempts of this attempt's logical call (set by the session layer): the end of the
        # turn ends them, so one made beside this one (a fan-out) joins them.
        self.tracked: list[Attempt] | None = None
        # Set when an execution intercept answered in place of the provider: the intercept's name, and the
        # provider's error (it caught) or, with none, the provider's own answer (it kept another call's).
        self.fallback: tuple[str, BaseException | None, Any] | None = None
        owner = parent if parent is not None else relay.scope.current()
        # Not on any stack: the calling convention makes it current only while the
        # provider runs, so a stream left open never becomes everyone's parent.
        # The handle shares the attempt's metadata dict, so the end event carries what
        # adapters added during the call (e.g. SDK retries) without a merge.
        self.handle = ScopeHandle(name, _LLM, owner, self.metadata, None, False, None)

    # -- before the provider ----------------------------------------------------------

    # Guardrails, request intercepts and the budget check, then the start event (see attempt_request).
    prepare = attempt_request.prepare
    prepare_async = attempt_request.prepare_async

    def _refused(self, request: LLMRequest, exc: BaseException) -> None:
        """Policy (or its bookkeeping) failed before the provider: the attempt starts and ends failed."""
        if self.finished:  # its turn ended it while the policy ran (see ``abandon``)
            return
        self.cost_state = NOT_SENT
        self.view = redacted_annotation(self.annotated)
        if DOWNGRADED_FROM in self.metadata:
            # Re-aimed at a cheaper model (``renew``) and refused again: its start records its own request,
            # not the one it replaced, which is all the policy still holds.
            request = self.request
        try:
            self._emit_start(request)
        finally:
            self.fail(exc)

    def _started(self, request: LLMRequest) -> LLMRequest:
        if self.finished:
            # Its turn ended it while the policy ran (see ``abandon``): the call goes on, unrecorded.
            return request
        relay = self.relay
        codec = self.codec
        self.request = request
        if self.annotated is not None:
            view = self.view = redacted_annotation(self.annotated)
            if self.model_name is None and view is not None:
                self.model_name = view.model
        elif codec is not None and (relay.subscribers.start or relay.subscribers.end):
            # Only observers want the view: decoded when one first reads it (or now, when the
            # caller gave no model name and the start event takes it from there), and a codec that
            # cannot decode costs the view (counted), not the call. The caller's lists
            # (messages, tools) are copied now, since agents append to them after the call.
            kwargs = request._content  # raw_content(), without the call
            content = kwargs.copy() if type(kwargs) is MappingProxyType else dict(kwargs)
            for key, value in content.items():
                if type(value) is list:
                    content[key] = list(value)
            if self.model_name is None:
                decoded = decode_for_observers(relay, self.name, codec, content)
                self.model_name = decoded.model if decoded is not None else None
                self.view = decoded
            else:
                self.view = lazily(Deferred, decode_for_observers, (relay, self.name, codec, content))
        try:
            self._emit_start(request)
        except BaseException as exc:
            # A subscriber's KeyboardInterrupt (say) may propagate, but never past an attempt left open.
            self.fail(exc)
            raise
        self.live = True
        return request

    def _emit_start(self, request: LLMRequest) -> None:
        subs = self.relay.subscribers
        if not subs.start:
            return
        h = self.handle
        try:
            # Positionally, in ``new_event``'s order: matching keywords by name costs the call ~1,000 instructions.
            event = new_event(
                SCOPE_START,
                h.uuid,
                h.parent_uuid,
                h.trace_id,
                self.name,
                _LLM,
                h.start_ns,
                None,  # start_timestamp
                # The slots themselves (what raw_headers() / raw_content() return), without two calls: the
                # dicts as they are now, walked only if a subscriber reads the input.
                lazily(Recorded, recorded_request, (request._headers, request._content, self.relay)),  # input
                None,  # output
                dict(self.metadata),
                None,  # data
                self.name,  # provider
                self.model_name,
                self.view,  # annotated_request
            )
        except Exception as exc:
            self.relay.diag.failure("bookkeeping_errors", exc, "building an attempt start event")
            return
        subs.deliver(subs.start, event)

    # A call's next attempt, after a refusal or an answer, is ``attempt_next``'s.
    renew = attempt_next.renew
    _end_before_next = attempt_next.end_before_next
    _next_attempt = attempt_next.next_attempt
    _next_retry = attempt_next.next_retry

    # -- a further provider call within this call (an execution intercept retrying, fanning out) -------

    # One more provider call of this call (an execution intercept retrying, fanning out): ``attempt_next``'s.
    again = attempt_next.again
    _checked = attempt_next.checked

    def fell_back(self, name: str, error: BaseException) -> None:
        """Execution intercept ``name`` caught the provider's ``error`` and returned a fallback (see ``succeed``)."""
        self.fallback = (name, error, None)

    def answered_instead(self, name: str, own: Any) -> None:
        """Execution intercept ``name`` called the provider more than once and returned something other than this
        attempt's answer ``own`` (a second opinion that keeps the first): the attempt ends with its own answer, which
        its provider gave, and the call with what the caller got, as after a fallback (see ``succeed``). With one
        provider call, what the intercept returned is that call's answer as it shaped it, as a response
        intercept's is."""
        if hasattr(self, "retries"):  # set by the call's second provider call (``attempt_next.next_retry``)
            self.fallback = (name, None, own)

    def outrun(self) -> Outrun:
        """The execution chain returned while this attempt's provider call is still in flight (a hedge that
        answered with another call's answer): that call's record goes on as an ``Outrun``, ended by its own
        answer (cancelled, say), not by the answer another call gave; ``succeed`` then settles the call only."""
        record = Outrun(self)
        self.fallback = _OUTRUN
        return record

    # -- while the provider runs --------------------------------------------------------

    def enter(self) -> tuple[Any, Any]:
        """Make this attempt the current scope and attempt of this context; ``leave`` undoes it."""
        return self.relay.scope._stack.set(self.handle), _current.set(self)

    def leave(self, tokens: tuple[Any, Any]) -> None:
        self.relay.scope._stack.reset(tokens[0])
        _current.reset(tokens[1])

    # -- after the provider ------------------------------------------------------------

    def response_intercepts(self) -> tuple[Intercept, ...]:
        return self.chains.get(LLM_RESPONSE, ())

    def succeed(self, response: Any) -> Any:
        """Run response intercepts (policy: they fail closed), then end the attempt as a success.

        With a ``hold`` set, the attempt stays open holding the response instead, until ``release``.
        """
        chain = self.chains.get(LLM_RESPONSE) if self.chains else None
        if chain:
            try:
                for entry in chain:
                    response = entry.fn(self.name, self.request, response)
                    if is_awaitable(response):
                        refuse_awaitable(
                            response, f"response intercept {entry.name!r} must be synchronous; it returned an awaitable"
                        )
                    if entry.break_chain:
                        break
            except BaseException as exc:
                if self.fallback is _OUTRUN:
                    self._settle_outrun(outcome_of(exc), response, exc)
                    raise
                # The provider did answer: its response stays in the record beside the failure.
                self.finish(outcome_of(exc), response, exc, None)
                raise
        if self.fallback is not None:
            self._settle_fallback(self.fallback, response)
            return response
        if self.hold is not None:
            self._hold_answer(self.hold, response)
            return response
        self.finish(_SUCCESS, response, None, None)
        return response

    def _settle_fallback(self, fallback: tuple[str, BaseException | None, Any], response: Any) -> None:
        """An intercept answered in place of the provider: the attempt (the provider's call) ends as that call
        did (failed with the provider's error, or with its own answer); the call it belongs to ends a success
        with the intercept's answer, marked ``relay.fallback`` (the intercept's name) on its logical call, or on
        the attempt when it has none."""
        if self.finished:
            return
        if fallback is _OUTRUN:
            self._settle_outrun(_SUCCESS, response, None)
            return
        name, error, own = fallback
        parent = self.handle.parent
        meta = parent.metadata if parent is not None else None
        if parent is not None and meta is not None and meta.get(cv.KIND) == cv.LOGICAL_CALL:
            parent.metadata = {**meta, cv.FALLBACK: name}  # a new dict: the start event keeps its own
            owner = parent
        else:
            self.metadata[cv.FALLBACK] = name
            owner = self.handle
        hook, self.on_finish = self.on_finish, None
        try:
            self.finish(outcome_of(error), own, error, None)
            # After the attempt, before its call's end: the answer the caller got.
            mark_fallback(self.relay, self.name, self.codec, name, response, owner)
        finally:
            if hook is not None:
                try:
                    hook(_SUCCESS, response, None)
                except Exception as exc:
                    self.relay.diag.failure("bookkeeping_errors", exc, f"finishing LLM attempt {self.name!r}")

    def _settle_outrun(self, outcome: str, response: Any, error: BaseException | None) -> None:
        """Settle the call of an attempt whose record went on as an ``Outrun``: its hook (the logical call)
        hears how the call ended; no scope ends here, and nothing can end this attempt any more."""
        self.finished = True
        self.live = False
        hook, self.on_finish = self.on_finish, None
        if hook is not None:
            try:
                hook(outcome, response, error)
            except Exception as exc:
                self.relay.diag.failure("bookkeeping_errors", exc, f"finishing LLM attempt {self.name!r}")

    def _hold_answer(self, hold: Callable[[Attempt], None], response: Any) -> None:
        """Keep ``response`` until it is validated: the call has settled, though the attempt stays open."""
        self.live = False
        self.held = response
        hold(self)

    @property
    def holding(self) -> bool:
        """Whether the attempt holds an answer until it is validated (``release`` ends it)."""
        return self.held is not _NOTHING

    def complete_whole(self, response: Any, first_ns: int | None) -> None:
        """End (or, with a ``hold``, hold) an attempt whose answer arrived in one piece; once only."""
        if self.finished or self.held is not _NOTHING:
            if self.settle_late is not None:  # its turn ended it before the body was read: the late charge
                self.finish(_SUCCESS, response, None, None, first_ns)
            return
        if self.hold is not None:
            self._hold_answer(self.hold, response)
            return
        self.finish(_SUCCESS, response, None, None, first_ns)

    def release(self, error: BaseException | None = None) -> None:
        """End a held attempt: a success, or failed with ``error`` (its held response still recorded)."""
        response, self.held = self.held, _NOTHING
        if response is _NOTHING:
            response = None
        self.finish(_SUCCESS if error is None else outcome_of(error), response, error, None)

    def abandon(self) -> None:
        """End an attempt whose turn is ending: a held response as the success it was, an open stream cancelled."""
        if self.finished:
            return
        if self.held is not _NOTHING:
            self.release()
        else:
            # Set only here (read with a default): the call may go on, unrecorded (see ``chains._dead``).
            self.abandoned = True
            # Its provider goes on answering (a stream the caller still reads): priced when that ends.
            self.waiting = True
            if not self.live:
                # Not started yet (an async guardrail still deciding): its start goes out now, before its end.
                try:
                    self._emit_start(self.request)
                finally:
                    self.fail(None, _CANCELLED)
                return
            self.fail(None, _CANCELLED)

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
        """End the attempt exactly once; the relay's own failures here never reach the caller.

        The response is annotated only when a subscriber reads the end event's
        ``annotated_response``; a codec that cannot read it costs that annotation
        (counted), not the end event: every start still gets its end.
        """
        if self.finished:
            recorded = self.settle_late
            if recorded is not None:  # the answer of a call its turn ended while it was in flight
                self.settle_late = None
                self.relay.cost.settle_late(self, recorded, response, annotation)
            return
        self.finished = True
        relay = self.relay
        response_view: AnnotatedResponseField = annotation
        if relay.subscribers.end:
            # The annotation carries the SDK's own retries as an adapter counted them in the metadata
            # (read when it is built: adapters are done with the metadata once the call has ended).
            if annotation is None and response is not None and self.codec is not None:
                ttfc = first_chunk_ns - self.handle.start_ns if first_chunk_ns is not None else None
                codec = self.codec
                read = content_reader(codec) if relay.subscribers.policy is not None else None
                if read is None:
                    response_view = lazily(
                        Deferred, annotate_for_observers, (relay, self.name, codec, response, ttfc, self.metadata)
                    )
                else:  # a redaction policy reads the text first, and mostly needs no more
                    response_view = DeferredResponse(
                        partial(attempt_views.content_blanked, read, response),
                        annotate_for_observers, relay, self.name, codec, response, ttfc, self.metadata,
                    )  # fmt: skip
            elif annotation is not None:
                attempt_views.recorded_answer(annotation)  # as ``annotate_for_observers`` records a whole answer
                if first_chunk_ns is not None:
                    annotation.time_to_first_chunk_ns = first_chunk_ns - self.handle.start_ns
                annotation.sdk_retries = self.metadata.get(_SDK_RETRIES)
        if relay.cost.active:
            if self.waiting:
                self.settle_late = outcome
            else:
                relay.cost.settle(self, outcome, response, response_view, error)
        try:
            relay.scope._end(
                self.handle, response, None, error, outcome, self.name, self.model_name, self.view, response_view
            )
        except Exception as exc:
            self.handle.ended = True
            relay.diag.failure("bookkeeping_errors", exc, f"ending LLM attempt {self.name!r}")
        finally:
            # Also when a subscriber raised a BaseException: the logical call still counts this attempt out.
            self.live = False
            tracked = self.tracked
            if tracked is not None:
                # Ended, it is not the turn's to end; and off its call's list it makes no reference
                # cycle with the call, so both are freed now rather than by the garbage collector.
                try:
                    tracked.remove(self)
                except ValueError:
                    pass
            if self.on_finish is not None:
                try:
                    self.on_finish(outcome, response, error)
                except Exception as exc:
                    relay.diag.failure("bookkeeping_errors", exc, f"finishing LLM attempt {self.name!r}")


# The records of further provider calls subclass ``Attempt``: imported once it exists.
from .attempt_records import Outrun  # noqa: E402
