"""How many times the SDK itself retried one ``create()`` under its own ``max_retries``.

Both SDKs stamp every HTTP try with ``x-stainless-retry-count`` (0 on the first
try). A request hook on the client's httpx client reads it, but only while a
managed attempt's provider callback runs in this context: the count goes into
that attempt's metadata as ``sdk_retries``. Unmanaged calls pay one context
variable read per HTTP request, and nothing is installed until the first
managed call on a client.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar, Token
from typing import Any

from relay_runtime import conventions as cv
from relay_runtime.attempt import current_attempt

RETRY_HEADER = "x-stainless-retry-count"

# [HTTP tries seen, highest retry count the SDK stamped (-1: none)]
_box: ContextVar[list[int] | None] = ContextVar("relay_sdk_tries", default=None)


def _record(request: Any) -> None:
    box = _box.get()
    if box is None:
        return
    box[0] += 1
    if box[0] == 1:
        # One try is no retry whatever the stamp says; reading a header costs more than
        # the rest of the count (httpx decodes every header name on the first read).
        return
    stamped = request.headers.get(RETRY_HEADER)
    if stamped is not None and stamped.isdigit():
        box[1] = max(box[1], int(stamped))


def _on_request(request: Any) -> None:
    _record(request)


async def _on_request_async(request: Any) -> None:
    _record(request)


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
        # A racing second install only appends the same hook twice; the max() in _record
        # makes that harmless, so no lock on this path.
        request_hooks.append(hook)
    return True


class Counting:
    """One ``create()``'s count, written to the attempt's metadata by ``end()``."""

    __slots__ = ("attempt", "box", "token")

    def __init__(self, attempt: Any, box: list[int], token: Token[list[int] | None]) -> None:
        self.attempt = attempt
        self.box = box
        self.token = token

    def end(self) -> None:
        _box.reset(self.token)
        tries, stamped = self.box
        if tries:
            self.attempt.metadata[cv.SDK_RETRIES] = stamped if stamped >= 0 else tries - 1


def begin(client: Any) -> Counting | None:
    """Start counting for the attempt whose callback is running, if any, on a client we can hook."""
    attempt = current_attempt()
    if attempt is None or not _install(client):
        return None
    box = [0, -1]
    return Counting(attempt, box, _box.set(box))
