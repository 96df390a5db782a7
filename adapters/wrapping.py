"""The machinery every provider's ``instrument`` shares: wrappers that can be switched off and put back.

A wrapper is set on an owner (a client's resource object, or an SDK class) remembering what the
owner's own ``__dict__`` held before, so ``restore`` puts back that very attribute. The SDKs keep
bound methods (raw-response helpers, the caller's own references), so a wrapper taken out can still
be called: its ``Live`` flag makes it pass every call straight through from then on.

An SDK version this library does not know (a module, class or method renamed or removed) is
skipped with one ``UnknownSDKWarning`` naming what is missing; ``instrument()`` never fails on it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import threading
import warnings
from collections.abc import Callable
from typing import Any

import wrapt

from relay_runtime import session

NOTHING = object()
# Check-then-set on an owner must be atomic, or two racing instrument() calls could wrap a wrapper
# and leave uninstrument() restoring the first one.
lock = threading.RLock()

UNTRACED = "adapters.untraced_calls"


class UnknownSDKWarning(UserWarning):
    """An installed provider SDK lacks something ``instrument()`` wraps: that part is left untraced."""


class Live:
    """Whether a wrapper is still installed: one taken out passes every call straight through."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = True


class ManagedCreate(wrapt.FunctionWrapper):
    """An SDK method routed through the relay; ``__wrapped__`` is the SDK's own method."""

    relay_instrumented = True
    # What the owner's own __dict__ held before (``NOTHING``: the class attribute showed through).
    # wrapt keeps ``_self_``-prefixed attributes on the proxy, not on the wrapped method.
    _self_relay_previous: Any
    _self_relay_live: Live
    _self_relay_provider: Any  # ``instrument(client, provider=...)``'s endpoint, on a client's wrappers


def is_async(method: Any) -> bool:
    # The SDKs decorate their methods with a plain wrapper around the async def: look through it.
    return inspect.iscoroutinefunction(inspect.unwrap(method))


def set_wrapper(owner: Any, name: str, current: Any, wrapper: Callable[..., Any], live: Live) -> ManagedCreate:
    managed = ManagedCreate(current, wrapper)
    managed._self_relay_previous = vars(owner).get(name, NOTHING)
    managed._self_relay_live = live
    setattr(owner, name, managed)
    return managed


def restore(owner: Any, name: str) -> None:
    """Put back what ``owner.name`` was before its wrapper (a no-op where there is none)."""
    current = vars(owner).get(name)
    if not isinstance(current, ManagedCreate):
        return
    current._self_relay_live.on = False
    previous = current._self_relay_previous
    if previous is NOTHING:
        delattr(owner, name)
    else:
        setattr(owner, name, previous)


def path_of(root: Any, path: tuple[str, ...]) -> Any:
    """The object at ``path`` from ``root`` (None where a step is missing)."""
    obj = root
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


# -- SDK classes, looked up without failing on a version we do not know --------------------------

_warned: set[str] = set()


def unknown(what: str) -> None:
    """Say once per process that ``what`` (an SDK path) is missing, so it is left untraced."""
    if what in _warned:
        return
    _warned.add(what)
    warnings.warn(
        f"relay-runtime: {what} is not in the installed SDK (a version this library does not know); "
        f"it is left untraced",
        UnknownSDKWarning,
        stacklevel=4,
    )


def sdk_class(module_name: str, class_name: str) -> type | None:
    """``module_name.class_name``; None when its SDK is not installed (silently) or lacks it (one warning)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        top = module_name.partition(".")[0]
        if top != module_name and importlib.util.find_spec(top) is not None:
            unknown(module_name)
        return None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        unknown(f"{module_name}.{class_name}")
        return None
    return cls


def class_method(cls: type, method: str) -> Any:
    """``cls.method`` if the class has it (else one warning and None)."""
    current = getattr(cls, method, None)
    if not callable(current):
        unknown(f"{cls.__module__}.{cls.__qualname__}.{method}")
        return None
    return current


# -- calls that cannot be attempts: counted ------------------------------------------------------


def count_untraced(label: str) -> None:
    """Count an SDK call the relay cannot record, on the active turn's relay (else on every host's)."""
    turn = session.active_turn()
    relays = [turn.relay] if turn is not None else [host.relay for host in session.SESSION_COORDINATOR.hosts()]
    for relay in relays:
        relay.diag.count_all(UNTRACED, f"{UNTRACED}.{label}")


def untraced_wrapper(label: str, live: Live, inside: Callable[[], bool]) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if live.on and not inside():
            count_untraced(label)
        return wrapped(*args, **kwargs)

    return wrapper
