"""``instrument(client)``: every ``create()`` of that one client becomes a managed call.

The wrapper is set on the client's own resource objects (``client.chat.completions``,
``client.responses``, ``client.messages``), shadowing the class's method, so other
clients of the same class are untouched and ``uninstrument`` restores the very
attribute that was there before. Clients derived later (``with_options``, ``copy``)
are new objects and start uninstrumented.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import wrapt

from . import dispatch

_NOTHING = object()
# Check-then-set on a resource must be atomic, or two racing instrument() calls could wrap
# a wrapper and leave uninstrument() restoring the first one.
_lock = threading.Lock()


class ManagedCreate(wrapt.FunctionWrapper):
    """A resource's ``create`` routed through dispatch; ``__wrapped__`` is the SDK's own method."""

    relay_instrumented = True
    # What the resource's own __dict__ held before (``_NOTHING``: the class method showed through).
    # wrapt keeps ``_self_``-prefixed attributes on the proxy, not on the wrapped method.
    _self_relay_previous: Any


def _sync_wrapper(client: Any, mode: str, include_usage: bool) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return wrapped(*args, **kwargs)  # not a call shape the SDK accepts: let the SDK say so
        if kwargs.get("stream"):
            return dispatch.stream(client, kwargs, api_mode=mode, include_usage=include_usage)
        return dispatch.complete(client, kwargs, api_mode=mode)

    return wrapper


def _async_wrapper(client: Any, mode: str, include_usage: bool) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            return wrapped(*args, **kwargs)
        if kwargs.get("stream"):
            return dispatch.astream(client, kwargs, api_mode=mode, include_usage=include_usage)
        return dispatch.acomplete(client, kwargs, api_mode=mode)

    return wrapper


def _resources(client: Any) -> list[tuple[str, Any]]:
    found = []
    for mode, api in dispatch.APIS.items():
        try:
            resource = dispatch.resource_of(client, api)
        except TypeError:
            continue
        if callable(getattr(resource, "create", None)):
            found.append((mode, resource))
    return found


def instrument(client: Any, *, include_usage: bool = False) -> Any:
    """Route this client's ``create()`` calls (sync or async, streamed or not) through the relay.

    ``include_usage=True`` makes OpenAI chat streams ask for their token usage (the caller
    sees one more chunk, with no choices). Idempotent; returns the client. Raises TypeError for an object with none of
    chat.completions, responses or messages.
    """
    resources = _resources(client)
    if not resources:
        raise TypeError(f"cannot instrument {type(client).__name__}: it has no chat.completions, responses or messages")
    with _lock:
        for mode, resource in resources:
            current = resource.create
            if isinstance(current, ManagedCreate):
                continue
            # The SDKs decorate create() with a plain wrapper around the async def: look through it.
            make = _async_wrapper if inspect.iscoroutinefunction(inspect.unwrap(current)) else _sync_wrapper
            managed = ManagedCreate(current, make(client, mode, include_usage))
            managed._self_relay_previous = vars(resource).get("create", _NOTHING)
            resource.create = managed
    return client


def uninstrument(client: Any) -> Any:
    """Put back exactly what ``instrument`` replaced; a no-op on a client it never touched."""
    with _lock:
        for _mode, resource in _resources(client):
            current = vars(resource).get("create")
            if not isinstance(current, ManagedCreate):
                continue
            previous = current._self_relay_previous
            if previous is _NOTHING:
                del resource.create
            else:
                resource.create = previous
    return client


def is_instrumented(client: Any) -> bool:
    return any(isinstance(vars(r).get("create"), ManagedCreate) for _m, r in _resources(client))
