"""What an LLM attempt does before the provider: guardrails, request intercepts, the budget check.

The policy half of ``attempt.Attempt``, whose methods these two are: ``prepare`` / ``prepare_async``
run, in this order, every guardrail (a reason refuses the call with ``GuardrailRejected``), every
request intercept (each sees the request and its neutral view; what they change in the view is
written back onto the kwargs by the codec once, after the last), then the budget's worst-case
check. Anything raised on the way ends the attempt failed before it is sent, with its start event
still emitted (``Attempt._refused``). Every chain the call will run is resolved once, here: a
registration made while the call is in flight applies to later calls only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .chains import is_awaitable, refuse_awaitable
from .intercepts import LLM_GUARDRAIL, LLM_REQUEST, GuardrailRejected, Intercept
from .types import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome

if TYPE_CHECKING:
    from .attempt import Attempt

NO_CHAINS: Mapping[str, tuple[Intercept, ...]] = MappingProxyType({})


class Paused(Exception):
    """``prepare`` in an async call met an awaitable from a guardrail or request intercept that is no coroutine
    function (a lambda around an async check): ``prepare_async`` awaits it and goes on from that intercept.
    Nothing has been recorded yet; the intercepts before it are not run again."""

    def __init__(self, awaitable: Any, guardrail: int, edit: int, request: LLMRequest, before: Any) -> None:
        super().__init__("a policy intercept returned an awaitable")
        self.awaitable = awaitable
        self.guardrail = guardrail  # the index of the guardrail that returned it (all of them: an edit did)
        self.edit = edit
        self.request = request
        self.before = before


def prepare(attempt: Attempt, stream: bool = False, awaits: bool = False) -> LLMRequest:
    """Guardrails, request intercepts, then the start event. Returns the request to send.

    Every chain the call will run (execution and response ones included) is
    resolved here, once: a registration made while the call is in flight
    applies to later calls only. In a synchronous call a guardrail or
    request intercept that returns an awaitable is a ``TypeError``; in an async
    one (``awaits``) it raises ``Paused``, for ``prepare_async`` to go on.
    """
    request = attempt.request
    relay = attempt.relay
    if not relay.intercepts.active and not relay.cost.active:
        return attempt._started(request)  # no policy can refuse or change it: nothing to resolve
    try:
        guardrails, edits = _resolve(attempt)
        name = attempt.name
        for entry in guardrails:
            reason = entry.fn(name, request, attempt.annotated)
            if reason is not None:
                if awaits and is_awaitable(reason):
                    raise Paused(reason, guardrails.index(entry), 0, request, None)
                _refuse(attempt, entry, reason, False)
        # ``_edit``'s work, inlined: this loop runs on every call that has a request intercept.
        if edits:
            before = attempt.annotated.snapshot() if attempt.annotated is not None else None
            for entry in edits:
                outcome = entry.fn(name, request, attempt.annotated)
                if type(outcome) is not LLMRequestInterceptOutcome:
                    if awaits and is_awaitable(outcome):
                        raise Paused(outcome, len(guardrails), edits.index(entry), request, before)
                    outcome = _outcome(attempt, entry, outcome, False)
                if outcome.annotated_request is not None:
                    attempt.annotated = outcome.annotated_request
                request = outcome.request
                if entry.break_chain:
                    break
            request = _after_edits(attempt, before, request)
        if attempt.relay.cost.active:
            request = attempt.relay.cost.before_send(attempt, request, stream)
    except Paused:
        raise
    except BaseException as exc:
        attempt._refused(request, exc)
        raise
    return attempt._started(request)


async def prepare_async(attempt: Attempt, stream: bool = False, paused: Paused | None = None) -> LLMRequest:
    """``prepare`` for async calls: guardrails and request intercepts may be coroutine functions.

    Their awaitables are awaited here, on the caller's loop; the rest is ``prepare``'s. ``paused``: where
    ``prepare`` stopped, at an awaitable it could not await, to go on from.
    """
    request = attempt.request
    try:
        if paused is None:
            guardrails, edits = _resolve(attempt)
            start, start_edit, pending = 0, 0, None
        else:
            guardrails, edits = attempt.chains.get(LLM_GUARDRAIL, ()), attempt.chains.get(LLM_REQUEST, ())
            start, start_edit, pending, request = paused.guardrail, paused.edit, paused.awaitable, paused.request
        name = attempt.name
        for entry in guardrails[start:]:
            if pending is not None:  # what this guardrail returned to ``prepare``
                reason, pending = pending, None
            else:
                reason = entry.fn(name, request, attempt.annotated)
            if reason is not None and is_awaitable(reason):
                reason = await reason
            if reason is not None:
                _refuse(attempt, entry, reason, True)
        # Request intercepts as in ``prepare``, each outcome awaited first.
        if edits:
            if paused is not None and pending is not None:
                before = paused.before
            else:
                before = attempt.annotated.snapshot() if attempt.annotated is not None else None
            for entry in edits[start_edit:]:
                if pending is not None:  # what this request intercept returned to ``prepare``
                    outcome, pending = pending, None
                else:
                    outcome = entry.fn(name, request, attempt.annotated)
                request = _edit(attempt, entry, await outcome if is_awaitable(outcome) else outcome)
                if entry.break_chain:
                    break
            request = _after_edits(attempt, before, request)
        if attempt.relay.cost.active:
            request = attempt.relay.cost.before_send(attempt, request, stream)
    except BaseException as exc:
        attempt._refused(request, exc)
        raise
    return attempt._started(request)


def _resolve(attempt: Attempt) -> tuple[tuple[Intercept, ...], tuple[Intercept, ...]]:
    """Resolve every chain; decode the view now if policy will read it (failing closed without it)."""
    intercepts = attempt.relay.intercepts
    chains = attempt.chains = intercepts.resolve(attempt.handle.parent) if intercepts.active else NO_CHAINS
    guardrails = chains.get(LLM_GUARDRAIL, ())
    edits = chains.get(LLM_REQUEST, ())
    if (guardrails or edits) and attempt.codec is not None:
        attempt.annotated = attempt.codec.decode(attempt.request.raw_content())
    return guardrails, edits


def _refuse(attempt: Attempt, entry: Intercept, reason: Any, awaited: bool) -> None:
    """A guardrail said no (or, in a synchronous call, returned an awaitable)."""
    if not awaited and is_awaitable(reason):
        refuse_awaitable(
            reason, f"guardrail {entry.name!r} returned an awaitable in a synchronous call; it must be synchronous"
        )
    raise GuardrailRejected(entry.name, str(reason))


def _edit(attempt: Attempt, entry: Intercept, outcome: Any) -> LLMRequest:
    """Take an (awaited) request intercept's outcome: its view becomes current, its request is returned."""
    if type(outcome) is not LLMRequestInterceptOutcome:
        outcome = _outcome(attempt, entry, outcome, True)
    if outcome.annotated_request is not None:
        attempt.annotated = outcome.annotated_request
    return outcome.request


def _outcome(attempt: Attempt, entry: Intercept, outcome: Any, awaited: bool) -> LLMRequestInterceptOutcome:
    """A request intercept's result that is not plainly an outcome: a subclass of one, or an error."""
    if isinstance(outcome, LLMRequestInterceptOutcome):
        return outcome
    message = (
        f"request intercept {entry.name!r} must return an LLMRequestInterceptOutcome, got {type(outcome).__name__}"
    )
    if not awaited and is_awaitable(outcome):
        refuse_awaitable(outcome, f"{message}; in a synchronous call it must be synchronous")
    raise TypeError(message)


def _after_edits(attempt: Attempt, before: AnnotatedLLMRequest | None, request: LLMRequest) -> LLMRequest:
    """Overlay what the intercepts changed in the neutral view onto the request's kwargs."""
    if before is not None and attempt.annotated is not None and attempt.codec is not None:
        changes = attempt.annotated.changes_since(before)
        if changes:
            request = request.replace(content=attempt.codec.apply(request.raw_content(), changes))
    return request
