"""A call's next attempt: the attempt goes on as a new one of the same logical call.

Two things make one: a budget downgrade that refuses the attempt before it is sent (``renew``: it
ends refused, and the call goes on with the cheaper model), and an execution intercept that calls
the provider again after an answer (``Attempt.again``: the answered attempt ends with its answer).
Either way the attempt ends its record without its finish hook, which passes to the next attempt,
so the logical call counts the call out once, when its last attempt ends. Attempts are numbered
(``retry_count``) in the order they start, including those made beside one in flight (a fan-out).

These are ``attempt.Attempt``'s methods, kept here as functions of the attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import conventions as cv
from .cost.control import NOT_SENT
from .redaction import redacted_annotation
from .scopes import ScopeHandle, outcome_of
from .types import LLMRequest, ScopeType

if TYPE_CHECKING:
    from .attempt import Attempt

_LLM = ScopeType.LLM.value


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
