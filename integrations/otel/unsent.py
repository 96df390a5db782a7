"""An attempt the SDK refused before sending anything: its span takes back what claimed a provider call.

The span of an attempt is started, with the provider and server it is meant for, before the
SDK runs; when the SDK then refuses the call before any request left (its own argument checks,
a credential it could not get: ``relay.sent`` is False), those attributes would claim a provider
call that never happened. They are removed before the span ends, on either span path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .deferred import DeferredSpan

# What names a provider call's counterpart: the provider, and the server it would have reached.
PROVIDER_CLAIMS = ("gen_ai.provider.name", "server.address", "server.port", "llm.provider", "llm.system")


def retract(span: Any, keys: Iterable[str] = PROVIDER_CLAIMS) -> None:
    """Remove ``keys`` from an open span's attributes (a ``DeferredSpan`` or the SDK's own ``Span``)."""
    keys = tuple(keys)
    if type(span) is DeferredSpan:
        if span._end_time is not None:
            return
        # The merged view, the start attributes and the updates: replayed through limits at the end.
        span._start_attributes = {k: v for k, v in span._start_attributes.items() if k not in keys}
        span._attributes = {k: v for k, v in span._attributes.items() if k not in keys}
        if span._updates:
            span._updates = [{k: v for k, v in u.items() if k not in keys} for u in span._updates]
        return
    attributes = getattr(span, "_attributes", None)  # the SDK's BoundedAttributes, mutable until the span ends
    lock = getattr(span, "_lock", None)
    if attributes is None or lock is None or not span.is_recording():
        return
    with lock:
        for key in keys:
            try:
                attributes.pop(key, None)
            except TypeError:  # immutable: ended meanwhile
                return
