"""What the agent-framework integrations (LangChain, LangGraph, OpenAI Agents SDK) share.

- ``framework_scope``: the innermost scope a framework opened around the code running here
  (an agent, a graph node, a chain), so that model calls and tools made inside nest under it.
  Framework callbacks open scopes *detached* (a framework ends its runs in whatever order and
  context it likes, which a scope stack cannot follow) and say where they are through this
  context variable instead.
- ``ModelCall``: one logical model call the framework makes, opened under that scope. The
  attempts ``adapters.instrument()`` makes inside join it (one attempt per provider call,
  never a second one); when nothing joined (the SDK is not instrumented, or the model is not
  an SDK model) the integration records the attempt it observed from the framework's data,
  priced as a managed attempt is, its spend counted by the budgets after the fact (it was
  sent before anything here heard of it: no budget can refuse it).
- ``FrameworkRun``: a run (LangChain) or span (Agents SDK) a framework callback follows from its
  start to its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from relay_runtime import auxiliary, calls, logical_calls, session
from relay_runtime import conventions as cv
from relay_runtime.adapters.instrument import clients_instrumented
from relay_runtime.attempt import Attempt
from relay_runtime.attempt_views import recorded_answer, recorded_request
from relay_runtime.call_opening import new_call
from relay_runtime.codec import LLMCodec
from relay_runtime.events import AnnotatedRequestField, AnnotatedResponseField, Deferred, Recorded, lazily
from relay_runtime.scopes import ScopeHandle, outcome_of
from relay_runtime.session import LogicalCall, Turn
from relay_runtime.types import LLMRequest, Outcome, ScopeType

_LLM = ScopeType.LLM.value
_DEFAULT_ROLE = calls.DEFAULT_CALL_ROLE  # a call opened with no role (``open_call_in``'s default)
_SUCCESS = Outcome.SUCCESS.value
_CANCELLED = Outcome.CANCELLED.value
_NO_HEADERS: Mapping[str, Any] = {}
_KIND, _ATTEMPT, _API_REQUEST_ID, _CALL_ROLE, _RETRY_COUNT = (
    cv.KIND, cv.ATTEMPT, cv.API_REQUEST_ID, cv.CALL_ROLE, cv.RETRY_COUNT
)  # fmt: skip

# What ``ModelCall.witness`` saw: provider, model, request view, codec, request as sent, start, attempts before.
_Witnessed = tuple[str, "str | None", AnnotatedRequestField, Any, "Mapping[str, Any] | None", int, int]

framework_scope: ContextVar[ScopeHandle | None] = ContextVar("relay_framework_scope", default=None)


class FrameworkRun:
    """A framework's run or span that an integration follows from its start callback to its end one.

    ``handle``: the scope it opened (``own``: it is ours to end; ``token``: it was entered as the
    framework scope), or, when it opened none, the scope that what runs inside it nests under.
    ``call``: the logical model call it is, for a model run. A plain class with slots: one is made
    for every run the framework reports.

    A scope of its own stands among its turn's open scopes until ``end`` ends it: a framework may never
    report the run's end (a LangChain callback handler beside ours raised, and LangChain stopped calling the
    others), and the end of the turn then ends it (``abandon``), cancelled, rather than leave a start
    without its end.
    """

    __slots__ = ("call", "handle", "own", "token", "turn")

    def __init__(
        self,
        turn: Turn,
        handle: ScopeHandle | None,
        own: bool = False,
        token: Any = None,
        call: ModelCall | None = None,
    ) -> None:
        self.turn = turn
        self.handle = handle
        self.own = own
        self.token = token
        self.call = call
        if own and handle is not None:
            turn.open_scopes[handle.uuid] = self  # one atomic store, as the core's open attempts

    def end(self, **fields: Any) -> None:
        """End the run's own scope with ``fields`` (``ScopeAPI.end``'s); nothing if the turn's end ended it."""
        handle = self.handle
        assert handle is not None
        self.turn.open_scopes.pop(handle.uuid, None)
        self.turn.relay.scope.end(handle, **fields)

    def abandon(self) -> None:
        """The turn is ending with the run's scope still open: the framework never reported its end. It ends
        cancelled, saying so; an end the framework reports later finds it ended and changes nothing."""
        handle = self.handle
        if handle is None:
            return
        self.turn.open_scopes.pop(handle.uuid, None)
        if not handle.ended:
            self.turn.relay.scope.end(handle, error=LeftOpen(), outcome=_CANCELLED)


# A framework whose scope may stay set here after its code has left (a LangChain chain streamed: between chunks the
# caller's own code runs where the chain began) says, by the metadata key its scopes carry, which scope the code
# running here is inside of: the scope itself, or the one set before it (``still_here``).
_SCOPES_HERE: dict[str, Callable[[ScopeHandle], ScopeHandle | None]] = {}


def still_here(key: str, check: Callable[[ScopeHandle], ScopeHandle | None]) -> None:
    """Have ``current_parent`` ask ``check(scope)`` of a framework scope whose metadata holds ``key``: the scope
    the code running here is inside of (``scope``, or the framework scope set before it)."""
    _SCOPES_HERE[key] = check


def current_parent(turn: Turn) -> ScopeHandle | None:
    """The framework scope open here when it is still open and belongs to ``turn``'s relay, else None."""
    scope = framework_scope.get()
    if scope is not None and _SCOPES_HERE:
        scope = _here(scope)
    if scope is None or scope.ended or scope.trace_id != _trace_of(turn):
        return None
    return scope


def _here(scope: ScopeHandle | None) -> ScopeHandle | None:
    while scope is not None:
        metadata = scope.metadata
        check = None
        if metadata:
            # A loop, not ``next()`` over a generator: this runs on every framework model and tool call.
            for key, found in _SCOPES_HERE.items():
                if key in metadata:
                    check = found
                    break
        if check is None:
            return scope  # no framework that asks: the scope set here is the one
        here = check(scope)
        if here is scope:
            return scope
        scope = here
    return scope


def _trace_of(turn: Turn) -> str | None:
    return turn.scope.trace_id if turn.scope is not None else None


def enter_scope(scope: ScopeHandle) -> Token[ScopeHandle | None]:
    return framework_scope.set(scope)


def leave_scope(token: Token[ScopeHandle | None] | None) -> None:
    if token is None:
        return
    try:
        framework_scope.reset(token)
    except ValueError:  # the framework ended the run in another context than it began it: nothing to undo here
        pass


class ModelCall:
    """One logical model call of a framework, under the framework scope open where it began."""

    __slots__ = (
        "_abandoned", "_joined", "_observed_codec", "_observed_request", "_pending", "_witnessed", "api_request_id",
        "call_role", "logical", "observed", "turn",
    )  # fmt: skip

    def __init__(self, turn: Turn, logical: LogicalCall | None, call_role: str, parent: ScopeHandle | None) -> None:
        self.turn = turn
        if logical is None:  # none opened (``calls.open_call_in``) nor held for a retry: opened here, that frame less
            logical = new_call(turn, None, call_role or _DEFAULT_ROLE, parent, True)
        # The turn's record of the call, held so that every attempt and the close reach it without a lookup.
        self.logical = logical
        self.api_request_id = logical.api_request_id
        self.call_role = call_role
        self.observed: ScopeHandle | None = None
        self._observed_request: AnnotatedRequestField = None
        self._observed_codec: Any = None
        self._joined: Any = None  # what ``auxiliary.join_logical_call`` gave, while joined
        # What ``witness`` saw, until ``leave`` knows whether an SDK attempt joined instead; meanwhile it stands
        # among the call's open attempts (``_Pending``), so that the end of the turn records it rather than lose it.
        self._witnessed: _Witnessed | None = None
        self._pending: _Pending | None = None
        # The end of the turn ended the observed attempt (``abandon``): what the framework reports of it later
        # is a late charge.
        self._abandoned = False

    @classmethod
    def open(
        cls, parent: ScopeHandle | None = None, *, call_role: str = "primary", turn: Turn | None = None
    ) -> ModelCall | None:
        """A new logical call of the managed turn (``turn``, if the caller has it from ``session.managed_turn``;
        None when calls are not managed here)."""
        turn = turn or session.managed_turn()
        if turn is None:
            return None
        return cls.under(turn, parent if parent is not None else current_parent(turn), call_role)

    @classmethod
    def under(cls, turn: Turn, parent: ScopeHandle | None, call_role: str = "primary") -> ModelCall:
        """``open`` for a caller holding the managed turn and the parent already (None: the turn's scope)."""
        return cls(turn, None, call_role, parent)

    def join(self) -> None:
        """Completions made in this context until ``leave`` are attempts of this call."""
        self._joined = auxiliary.join_logical_call(self.api_request_id, self.call_role, attempts=self.attempts())

    def unjoin(self) -> None:
        """The provider call inside has been made (its answer is streaming in): completions made from here on
        are not this call's, though the framework's call goes on, between the caller's steps (a stream it
        yields from, in the caller's context) or in another context than the one it joined in."""
        joined = self._joined
        if joined is not None:
            self._joined = None
            auxiliary.leave_logical_call(joined)

    def leave(self, *, request: AnnotatedRequestField = None, sent: Mapping[str, Any] | None = None) -> None:
        """The framework's model call is over: what it makes from here on is not this call's; an attempt
        ``witness`` saw is recorded now if no SDK attempt joined in its place (with ``request`` and ``sent``,
        when the framework reports the request only at the call's end: ``witness(..., at_end=True)``)."""
        if self._joined is not None:
            auxiliary.leave_logical_call(self._joined)
            self._joined = None
        # Only ``witness`` sets it, before the call can end; once taken (here or by the end of the turn) it stays None.
        if self._witnessed is not None:
            self._record_witnessed(request, sent)

    def _record_witnessed(self, request: AnnotatedRequestField = None, sent: Mapping[str, Any] | None = None) -> None:
        """Record what ``witness`` saw (once: at ``leave``, or at the end of the turn, whichever comes first),
        unless an SDK attempt joined in its place."""
        with self.turn.lock:  # the turn may end on another thread while the framework ends its call
            witnessed, self._witnessed = self._witnessed, None
            pending, self._pending = self._pending, None
        if witnessed is None:
            return
        if pending is not None:
            try:
                self.logical.open_attempts.remove(pending)
            except ValueError:  # the end of the turn took it off already
                pass
        provider, model, seen, codec, seen_sent, start_ns, attempts_before = witnessed
        if self.logical.attempts == attempts_before:
            if sent is None:
                request, sent = seen, seen_sent
            self.observe(provider, model, request, start_ns=start_ns, codec=codec, sent=sent)

    def witness(
        self,
        provider: str,
        model: str | None,
        request: AnnotatedRequestField = None,
        *,
        codec: Any = None,
        sent: Mapping[str, Any] | None = None,
        at_end: bool = False,
    ) -> None:
        """The provider call the framework's callbacks report, with the SDK's classes not instrumented:
        an attempt of this call, unless an SDK attempt joins in its place.

        With no client instrumented either, nothing else can record it: it is observed now. With single
        clients instrumented (``instrument(client)``), whether the framework's client is one of them
        shows only when it runs: the call is joined, and the witnessed attempt is recorded at ``leave``
        (with the time it began) only if no SDK attempt joined; never both. ``at_end``: the framework
        tells what it sent only when the call ended (an Agents SDK span): recorded at ``leave`` always,
        which is given the request then, so that the attempt's start holds it.
        """
        instrumented = clients_instrumented()
        if not instrumented and not at_end:
            self.observe(provider, model, request, codec=codec, sent=sent)
            return
        if instrumented:
            self.join()
        self._witnessed = (provider, model, request, codec, sent, time.time_ns(), self.logical.attempts)
        self._pending = _Pending(self)
        self.logical.open_attempts.append(self._pending)  # one atomic append, as the core's attempts

    def attempts(self) -> int:
        return self.logical.attempts

    def attempt(self, request: LLMRequest, name: str, model_name: str | None, codec: LLMCodec | None) -> Attempt | None:
        """An attempt the integration makes itself, to run with ``relay.llm.run`` (None once the call is closed)."""
        return calls.attempt_of(self.turn, self.logical, request, name, model_name, codec)

    def next_attempt_metadata(self) -> dict[str, Any]:
        """Metadata for an attempt the integration makes itself (``calls.execute_current``)."""
        return {cv.API_REQUEST_ID: self.api_request_id, cv.CALL_ROLE: self.call_role, cv.RETRY_COUNT: self.attempts()}

    def observe(
        self,
        provider: str,
        model: str | None,
        request: AnnotatedRequestField = None,
        start_ns: int | None = None,
        codec: Any = None,
        sent: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the provider call the framework is making as an attempt (nothing else records it).

        ``request`` (its annotation, best a ``Deferred``) goes on the attempt's end event; ``start_ns``:
        when the attempt began, if before now; ``codec``: the one whose ``price_provider`` it is priced
        under (none: ``provider``, as the cost layer maps it); ``sent``: the request's arguments as the
        framework made them (a LangChain model's ``{"model", "messages"}``), recorded on its start as a
        managed attempt's are, so that a trajectory holds what the user said. Its arguments may be given in order:
        a model call's callback passes them so (keywords are matched by name on every call)."""
        call = self.logical
        turn = self.turn
        api_request_id = self.api_request_id
        if turn.logical_llm_calls.get(api_request_id) is not call:
            return
        lock = turn.lock
        lock.acquire()  # not ``with``, on every model call: see ``logical_calls``
        try:
            retry = call.attempts
            call.attempts = retry + 1
            call.provider = provider
            if model:
                call.model = model
        finally:
            lock.release()
        metadata = {_KIND: _ATTEMPT, _API_REQUEST_ID: api_request_id, _CALL_ROLE: self.call_role, _RETRY_COUNT: retry}
        recorded = None if sent is None else lazily(Recorded, recorded_request, (_NO_HEADERS, sent, turn.relay))
        # ``opened``, not ``push``: the metadata is the relay's own, built above, with nothing of the caller's to
        # read for credentials on every model call.
        self.observed = turn.relay.scope.opened(
            provider,
            _LLM,
            call.scope,
            recorded,
            metadata,
            None,  # data
            False,  # attach
            False,  # root
            None,  # remote_parent
            None,  # remote_tracestate
            start_ns,
        )
        self._observed_request = request
        self._observed_codec = codec
        # Among the call's open attempts until it ends: the end of the turn ends it before the call (``abandon``).
        call.open_attempts.append(self)

    def abandon(self) -> None:
        """The turn is ending with the observed attempt still open (a stream its caller kept past the turn, a
        call the framework has not ended): it ends now, cancelled, before its logical call does, as a managed
        attempt would; what the framework reports of it afterwards is priced as a late charge."""
        handle = self.observed
        if handle is None or handle.ended:
            return
        self._abandoned = True
        self._leave_open_attempts()
        self.logical.last_outcome = _CANCELLED  # its call was not answered: the turn's end closes it so
        # Not priced now (nothing was answered yet): its answer, if the framework reports one, is the late charge.
        self.turn.relay.scope.end(handle, provider=handle.name, annotated_request=self._observed_request,
                                  outcome=_CANCELLED)  # fmt: skip

    def _leave_open_attempts(self) -> None:
        try:
            self.logical.open_attempts.remove(self)
        except ValueError:  # the end of the turn took it off already
            pass

    def end_observed(
        self,
        response: Any = None,
        annotated: AnnotatedResponseField = None,
        error: BaseException | None = None,
        model: str | None = None,
        complete: bool = False,
    ) -> None:
        """End the observed attempt, priced (with a catalog installed) from ``annotated``'s usage and model; one
        the end of its turn ended (``abandon``) gets what ``annotated`` says it cost as a late charge. ``complete``:
        the framework reported the call's end with it: the logical call completes too, as ``close`` completes it."""
        handle = self.observed
        relay = self.turn.relay
        outcome = outcome_of(error) if error is not None else _SUCCESS
        if handle is not None and handle.ended:
            if self._abandoned and annotated is not None and relay.cost.active:
                self._abandoned = False  # charged once
                relay.cost.settle_observed(handle, self._observed_codec, model or self.logical.model, _CANCELLED,
                                           annotated)  # fmt: skip
                relay.cost.late_charge(handle, _CANCELLED)
        elif handle is not None:  # (none: nothing observed, an SDK attempt joined)
            try:  # ``_leave_open_attempts`` without its frame: once per model call
                self.logical.open_attempts.remove(self)
            except ValueError:  # the end of the turn took it off already
                pass
            if model:
                self.logical.model = model
            self.logical.last_outcome = outcome
            late = False
            if relay.cost.active:
                late = relay.cost.settle_observed(
                    handle, self._observed_codec, model or self.logical.model, outcome, annotated
                )
            # Positional, in ``end``'s order: each keyword would be matched by name.
            relay.scope.end(handle, response, None, error, outcome, handle.name, model, self._observed_request,
                            annotated)  # fmt: skip
            if late:  # its turn (or agent) ended while the framework still ran it: their roll-ups went out without it
                relay.cost.late_charge(handle, outcome)
        if complete:  # (``close``'s own end, without its frame: a model call's answer ends both in one call)
            logical_calls.close_logical_call(self.turn, self.logical, outcome, False, True)

    def close(self, error: BaseException | None = None) -> None:
        """Complete the logical call: a success, or the outcome ``error`` means (once; later closes do nothing)."""
        if self._joined is not None or self._witnessed is not None:
            self.leave()
        if self.observed is not None and not self.observed.ended:
            self.end_observed(error=error or _Unfinished())
        if error is not None and self.logical.open_attempts:
            # The framework gave up on the call with an SDK attempt still open (an async stream it broke off,
            # whose provider stream is closed only when collected): it ends now, before its call, as the end
            # of the turn ends one; once the call is closed, nothing else would.
            for attempt in reversed(tuple(self.logical.open_attempts)):
                if type(attempt) is Attempt:
                    attempt.abandon()
        outcome = outcome_of(error) if error is not None else _SUCCESS
        # The call object itself (once: a no-op if the turn closed it first): the framework may end it outside its turn.
        logical_calls.close_logical_call(self.turn, self.logical, outcome, False, True)


class _Pending:
    """A witnessed attempt not recorded yet, among its logical call's open attempts. The end of the turn
    abandons the attempts still open: this one is then recorded (begun when it began, with what was known of
    it then) and ended cancelled (``ModelCall.abandon``); the framework's end of the call prices what it
    reports as a late charge."""

    __slots__ = ("call",)

    def __init__(self, call: ModelCall) -> None:
        self.call = call

    def abandon(self) -> None:
        self.call._record_witnessed()
        self.call.abandon()


class LeftOpen(RuntimeError):
    """The framework never reported the end of a run whose scope it had opened: its turn's end ended it."""

    relay_error_type = "left_open_by_framework"

    def __init__(self) -> None:
        super().__init__("the framework never ended this run; the end of its turn did")


class _Unfinished(RuntimeError):
    """The framework ended the model call without reporting its answer."""

    relay_error_type = "unfinished"


def refusal_text(error: BaseException) -> str:
    """What an agent is told when a tool request intercept refused its tool call."""
    reason = getattr(error, "reason", None)
    if not isinstance(reason, str) or not reason:
        reason = str(error) or type(error).__name__
    return f"Tool call refused: {reason}"


def deferred(call: tuple[Any, ...]) -> Deferred[Any]:
    """``compute(*args)`` (``call``: ``compute``, then ``args``) when an event's reader first asks (never raising:
    a framework's odd data costs the annotation, not the event)."""
    return lazily(Deferred, _safely, call)  # (``call``, one tuple: see ``events.lazily``)


def deferred_answer(call: tuple[Any, ...]) -> Deferred[Any]:
    """``deferred`` for an answer's annotation, recorded as an SDK call's attempt records it (``recorded_answer``:
    its tool calls' arguments as their tools' scopes record them)."""
    return lazily(Deferred, _answered, call)


def _answered(compute: Callable[..., Any], *args: Any) -> Any:
    return recorded_answer(_safely(compute, *args))


def _safely(compute: Callable[..., Any], *args: Any) -> Any:
    try:
        return compute(*args)
    except Exception:
        return None
