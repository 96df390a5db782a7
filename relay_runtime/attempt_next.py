"""A call's next attempt: the attempt goes on as a new one of the same logical call.

Two things make one: a budget downgrade that refuses the attempt before it is sent (``renew``: it
ends refused, and the call goes on with the cheaper model), and an execution intercept that calls
the provider again after an answer (``again``: the answered attempt ends with its answer, and the
next is checked against the budgets before it is sent).
Either way the attempt ends its record without its finish hook, which passes to the next attempt,
so the logical call counts the call out once, when its last attempt ends. Attempts are numbered
(``retry_count``) in the order they start, including those made beside one in flight (a fan-out).

These are ``attempt.Attempt``'s methods, kept here as functions of the attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import conventions as cv
from .chains import IN_FLIGHT, Failed
from .cost.control import NOT_SENT
from .redaction import redacted_annotation
from .scopes import ScopeHandle, outcome_of
from .types import LLMRequest, Outcome, ScopeType

if TYPE_CHECKING:
    from .attempt import Attempt
    from .attempt_records import Beside

_LLM = ScopeType.LLM.value
_SUCCESS = Outcome.SUCCESS.value
_CANCELLED = Outcome.CANCELLED.value


def renew(
    attempt: Attempt, request: LLMRequest, model_name: str, error: BaseException, metadata: dict[str, Any]
) -> None:
    """End ``attempt`` refused (nothing sent) and go on as the next attempt of the same parent."""
    attempt.view = redacted_annotation(attempt.annotated)
    attempt._emit_start(attempt.request)
    attempt.cost_state = NOT_SENT
    end_before_next(attempt, None, error, outcome_of(error))
    next_attempt(attempt, request, metadata)
    attempt.model_name = model_name
    if attempt.annotated is not None:
        attempt.annotated.model = model_name


def end_before_next(attempt: Attempt, response: Any, error: BaseException | None, outcome: str) -> None:
    """End ``attempt``'s record while the call goes on: its finish hook is held back for the next
    attempt; and the answer is in, so it is priced now even while the call waits on."""
    hook, attempt.on_finish = attempt.on_finish, None
    waiting, attempt.waiting = attempt.waiting, False
    try:
        attempt.finish(outcome, response, error, None)
    finally:
        attempt.on_finish = hook
        attempt.waiting = waiting


def next_attempt(attempt: Attempt, request: LLMRequest, metadata: dict[str, Any] | None) -> None:
    """Go on as the next attempt of the same parent: a new scope, ``retry_count`` one up."""
    meta = {**attempt.metadata, **metadata} if metadata else dict(attempt.metadata)
    meta[cv.RETRY_COUNT] = next_retry(attempt)
    attempt.metadata = meta
    attempt.handle = ScopeHandle(attempt.name, _LLM, attempt.handle.parent, meta, None, False, None)
    attempt.finished = False
    attempt.cost_state = None
    attempt.request = request
    number_after(meta)


def next_retry(attempt: Attempt) -> int:
    """The ``retry_count`` of the call's next attempt: one after every attempt it has had.

    Counted on the attempt (set on the first renewal only: most calls have none) rather than read
    from the metadata, since attempts made beside this one (a concurrent fan-out) take numbers too.
    """
    try:
        last = attempt.retries
    except AttributeError:
        last = attempt.metadata.get(cv.RETRY_COUNT) or 0
    attempt.retries = last + 1
    return last + 1


def number_after(metadata: dict[str, Any]) -> None:
    """An attempt was added to its logical call (and the auxiliary call around it): number later ones after it."""
    api_request_id = metadata.get(cv.API_REQUEST_ID)
    if isinstance(api_request_id, str):
        from . import auxiliary, calls  # here: both import the attempt

        calls.count_renewed_attempt(api_request_id)
        auxiliary.count_renewed_attempt(api_request_id)


def again(attempt: Attempt, request: LLMRequest, previous: Any, stream: bool) -> tuple[Beside | None, LLMRequest]:
    """Record one more provider call of the attempt's call: each provider call is an attempt of its own,
    checked against the budgets as the first was (``chains.Liveness.again``).

    The last call answered (``previous``): its attempt ends now with that answer (a stream the
    intercept opened and then replaced is cancelled: the caller never read it), and this one goes
    on as the next attempt of the same parent, with its own start event; returns None. The last
    call still in flight (a concurrent fan-out): this call gets an attempt beside it, which its
    own answer ends; returned. Refused by a budget, the attempt has started and the refusal is
    raised: the intercept gets it as the call's error, and how the call ends records it.
    """
    if previous is IN_FLIGHT:
        from .attempt_records import Beside  # here: it subclasses the attempt, which imports this module

        beside = Beside(attempt, request, stream)
        return beside, beside.request
    if type(previous) is Failed:
        end_before_next(attempt, None, previous.error, outcome_of(previous.error))
    elif stream:
        end_before_next(attempt, None, None, _CANCELLED)
    else:
        end_before_next(attempt, previous, None, _SUCCESS)
    next_attempt(attempt, request, None)
    # The provider runs under the new attempt's scope (``leave`` resets to what was before the call).
    attempt.relay.scope._stack.set(attempt.handle)
    if attempt.relay.cost.active:
        request = checked(attempt, request, stream)
    attempt._emit_start(request)
    attempt.live = True
    return None, request


def checked(attempt: Attempt, request: LLMRequest, stream: bool) -> LLMRequest:
    """The budgets' check of a further provider call; refused, its start goes out before the refusal is raised."""
    try:
        return attempt.relay.cost.before_send(attempt, request, stream)
    except BaseException:
        attempt.cost_state = NOT_SENT
        attempt._emit_start(attempt.request)
        attempt.live = True  # started: the intercept may call ``next`` again, or answer in its place
        raise
