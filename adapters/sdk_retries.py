"""How many times the SDK itself retried one ``create()`` under its own ``max_retries``, and what else it sent.

Both SDKs stamp every HTTP try with ``x-stainless-retry-count`` (0 on the first
try). A request hook on the client's httpx client credits each try to the
managed attempt running in this context, as ``sdk_retries`` in its metadata:
0 after the first try, then the stamp of each retry (or one more per try when
unstamped). A request whose stamp is not past the last one is a resend within
the same try (anthropic's refusal / overload fallback middleware, openai's resend
after refreshing a rejected token): counted as ``relay.sdk_resends``. Unmanaged
calls pay one context variable read per HTTP request, and nothing is installed
until the first managed call on a client.

The same hook tells whether a call sent anything at all: a ``create()`` that raised
before its first request (the SDK's own argument checks, an auth deadline) marks its
attempt ``relay.sent: False`` (see ``refused``).
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.attempt import current_attempt

RETRY_HEADER = "x-stainless-retry-count"


def count_try() -> None:
    """One HTTP try of the running attempt, for SDKs that report each try (botocore, google-genai): the
    first is no retry, each later one is."""
    attempt = current_attempt()
    if attempt is None:
        return
    metadata = attempt.metadata
    retries = metadata.get(cv.SDK_RETRIES)
    metadata[cv.SDK_RETRIES] = 0 if retries is None else retries + 1


# The last HTTP request a managed attempt sent here, as httpx sent it (its auth applied: newer SDKs add the
# credential in the send, after the request object an error carries was built). Read on the error path only.
_last_sent: ContextVar[Any] = ContextVar("relay_sdk_last_sent", default=None)


def last_sent() -> Any:
    """The last HTTP request sent for a managed attempt in this context, or None."""
    return _last_sent.get()


def _on_request(request: Any) -> None:
    """The sync client's request hook (and the body of the async one)."""
    attempt = current_attempt()
    if attempt is None:
        return
    _last_sent.set(request)
    metadata = attempt.metadata
    retries = metadata.get(cv.SDK_RETRIES)
    if retries is None:
        # The first try is no retry whatever its stamp says, and reading a header costs more
        # than the rest of the count (httpx decodes every header name on the first read).
        metadata[cv.SDK_RETRIES] = 0
        return
    stamped = request.headers.get(RETRY_HEADER)
    if stamped is not None and stamped.isdigit():
        stamp = int(stamped)
        if stamp > retries:
            metadata[cv.SDK_RETRIES] = stamp
        else:
            metadata[cv.SDK_RESENDS] = metadata.get(cv.SDK_RESENDS, 0) + 1
    else:
        metadata[cv.SDK_RETRIES] = retries + 1


async def _on_request_async(request: Any) -> None:
    _on_request(request)


def _is_async_http(http: Any) -> bool:
    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is not None and isinstance(http, module.AsyncClient):
            return True
    return False


def _install(client: Any) -> bool:
    """Add the request hook to the client's httpx client once; False if it has none we know."""
    http = getattr(client, "_client", None)
    hooks = getattr(http, "event_hooks", None)
    if not isinstance(hooks, dict):
        return False
    request_hooks = hooks.get("request")
    if not isinstance(request_hooks, list):
        return False
    if _on_request in request_hooks or _on_request_async in request_hooks:
        return True  # every call after a client's first
    hook = _on_request_async if _is_async_http(http) else _on_request
    if hook not in request_hooks:
        # A racing second install only appends the same hook twice; a doubled try reads
        # the same stamp twice, and max() makes that harmless, so no lock on this path.
        request_hooks.append(hook)
    return True


def watch(client: Any) -> bool:
    """Before a ``create()`` on ``client``: count its HTTP tries for the attempt running here, if any.

    The count starts afresh, so an attempt whose execution intercept calls the
    provider twice reports the last ``create()``'s retries. True when the tries are
    being counted (so ``refused`` can tell a call that sent nothing).
    """
    attempt = current_attempt()
    if attempt is None:
        return False
    # Every call after a client's first finds its hook already there: looked for here, in the
    # dict behind httpx's ``event_hooks`` property, without that property's frame or _install's.
    hooks = getattr(getattr(client, "_client", None), "_event_hooks", None)
    if type(hooks) is dict:
        request_hooks = hooks.get("request")
        if type(request_hooks) is list and (_on_request in request_hooks or _on_request_async in request_hooks):
            _restart(attempt.metadata)
            return True
    if _install(client):
        _restart(attempt.metadata)
        return True
    return False


def _restart(metadata: dict[str, Any]) -> None:
    metadata.pop(cv.SDK_RETRIES, None)
    if cv.SDK_RESENDS in metadata:  # rare: a second create() in one attempt after a resend
        del metadata[cv.SDK_RESENDS]


def refused() -> None:
    """The ``create()`` just watched raised: if it sent no request, its attempt says so (``relay.sent``)."""
    attempt = current_attempt()
    if attempt is not None and cv.SDK_RETRIES not in attempt.metadata:
        attempt.metadata[cv.SENT] = False
        spend = attempt.cost_state
        if getattr(spend, "sent", False) is True:
            spend.sent = False  # priced at nothing, as a budget's refusal is: no provider was called


def answered_without_http(client: Any) -> None:
    """A ``create()`` answered with no HTTP request (a cassette's direct replay): one try, no retry, as live."""
    attempt = current_attempt()
    if attempt is not None and _install(client):
        attempt.metadata[cv.SDK_RETRIES] = 0
