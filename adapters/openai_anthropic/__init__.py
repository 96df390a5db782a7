"""The OpenAI and Anthropic SDKs as a provider of ``instrument()``: their resources' methods as managed attempts.

Per client, the wrapper is set on the client's own resource objects, shadowing the class's
method, so other clients are untouched and ``uninstrument`` restores the very attribute that was
there before; clients derived with ``with_options()`` / ``copy()`` are instrumented too.
Globally, the SDK resource classes themselves are wrapped (with wrapt), so clients a framework
creates are traced as well; classes that copied the wrapped methods at import (the Vertex and
Bedrock beta ``Messages``) are wrapped too, and an LLM request that reaches an SDK client unmarked
is counted (``sdk_coverage``). What is wrapped is listed in ``targets``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import dispatch, sdk_coverage
from ..endpoints import Endpoint
from ..wrapping import Live as _Live
from ..wrapping import (
    ManagedCreate,
    class_method,
    count_untraced,
    is_async,
    lock,
    path_of,
    restore,
    sdk_class,
    set_wrapper,
    untraced_wrapper,
)
from .routing import route
from .targets import (
    DERIVERS,
    METHODS,
    NEVER_THERE,
    RAW_HELPERS,
    RESOURCE_PATHS,
    SDK_CLASSES,
    UNTRACED_CLASSES,
    UNTRACED_PATHS,
)

NAME = "openai/anthropic"


def _inside() -> bool:
    return dispatch.inside_sdk_call.get()


# -- per client -------------------------------------------------------------------------------


def _resources(client: Any) -> list[tuple[str, Any]]:
    """Every resource of ``client`` whose ``create()`` makes an LLM call, with its API."""
    found = []
    for mode, paths in RESOURCE_PATHS.items():
        for path in paths:
            resource = path_of(client, path)
            if resource is not None and callable(getattr(resource, "create", None)):
                found.append((mode, resource))
    return found


def is_client(client: Any) -> bool:
    """Whether ``client`` has any resource this provider traces (an SDK client or a look-alike)."""
    return bool(_resources(client))


def _client_wrapper(
    client: Any, mode: str, method: str, is_async: bool, include_usage: bool, live: _Live, provider: Endpoint | None
) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not live.on:
            return wrapped(*args, **kwargs)
        return route(client, mode, method, is_async, include_usage, wrapped, args, kwargs, provider)

    return wrapper


def _derive_wrapper(include_usage: bool, live: _Live, provider: Endpoint | None) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # with_options() / copy(): the new client is traced like the one it came from, named alike.
        derived = wrapped(*args, **kwargs)
        if live.on and _resources(derived):
            instrument_client(derived, include_usage=include_usage, provider=provider)
        return derived

    return wrapper


def _check_same_provider(client: Any, resources: list[tuple[str, Any]], provider: Endpoint | None) -> None:
    """Instrumenting again is a no-op: one that names another provider would be silently ignored, so it fails."""
    for mode, resource in resources:
        for method in METHODS[mode]:
            existing = vars(resource).get(method)
            if isinstance(existing, ManagedCreate):
                named = getattr(existing, "_self_relay_provider", None)
                if named != provider:
                    said = named.provider if named is not None else "by its base URL"
                    raise ValueError(
                        f"{type(client).__name__} is instrumented already (provider {said}); "
                        f"uninstrument(client) before instrumenting it with another provider="
                    )


def instrument_client(client: Any, *, include_usage: bool = False, provider: Endpoint | None = None) -> Any:
    """Trace this client's LLM calls; idempotent; returns the client."""
    resources = _resources(client)
    if not resources:
        raise TypeError(f"cannot instrument {type(client).__name__}: it has no chat.completions, responses or messages")
    with lock:
        _check_same_provider(client, resources, provider)
        for mode, resource in resources:
            for method in METHODS[mode]:
                current = getattr(resource, method, None)
                if not callable(current) or isinstance(vars(resource).get(method), ManagedCreate):
                    continue
                live = _Live()
                wrapper = _client_wrapper(client, mode, method, is_async(current), include_usage, live, provider)
                set_wrapper(resource, method, current, wrapper, live)._self_relay_provider = provider
        for label, path, method in UNTRACED_PATHS:
            owner = path_of(client, path)
            current = getattr(owner, method, None) if owner is not None else None
            if callable(current) and not isinstance(vars(owner).get(method), ManagedCreate):
                live = _Live()
                set_wrapper(owner, method, current, untraced_wrapper(label, live, _inside), live)
        _forget_raw_helpers(client)
        for name in DERIVERS:
            current = getattr(client, name, None)
            if callable(current) and not isinstance(vars(client).get(name), ManagedCreate):
                live = _Live()
                try:
                    set_wrapper(client, name, current, _derive_wrapper(include_usage, live, provider), live)
                except (AttributeError, TypeError):  # a client that takes no instance attributes
                    pass
    return client


def _forget_raw_helpers(client: Any) -> None:
    """Drop the SDK's cached raw-response helpers on the way to each resource.

    They hold the ``create`` they saw when first used: one made before ``instrument`` would
    keep calling the SDK's own method, untraced. Made again, they pick up the wrapper.
    """
    for paths in RESOURCE_PATHS.values():
        for path in paths:
            obj = client
            for name in (None, *path):
                obj = obj if name is None else getattr(obj, name, None)
                own = getattr(obj, "__dict__", None)
                if not isinstance(own, dict):
                    break
                for helper in RAW_HELPERS:
                    own.pop(helper, None)


def uninstrument_client(client: Any) -> Any:
    with lock:
        for mode, resource in _resources(client):
            for method in METHODS[mode]:
                restore(resource, method)
        for _label, path, method in UNTRACED_PATHS:
            owner = path_of(client, path)
            if owner is not None:
                restore(owner, method)
        for name in DERIVERS:
            if isinstance(getattr(client, "__dict__", {}).get(name), ManagedCreate):
                restore(client, name)
    return client


def is_client_instrumented(client: Any) -> bool:
    return any(isinstance(vars(r).get("create"), ManagedCreate) for _m, r in _resources(client))


# -- the SDK classes ----------------------------------------------------------------------------

_patched: list[tuple[type, str]] = []


def _class_wrapper(mode: str, method: str, is_async: bool, include_usage: bool, live: _Live) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        client = getattr(instance, "_client", None)
        if client is None or not live.on:  # looked up on the class itself, not on a client's resource
            return wrapped(*args, **kwargs)
        return route(client, mode, method, is_async, include_usage, wrapped, args, kwargs)

    return wrapper


def _unpatched(cls: type, method: str) -> Any:
    """``cls``'s own ``method`` if it has one not wrapped yet, else None (one warning if it has none)."""
    if method not in vars(cls):
        if (cls.__module__, method) not in NEVER_THERE:
            class_method(cls, method)  # warns when the SDK lacks it
        return None
    current = vars(cls).get(method)
    return None if current is None or isinstance(current, ManagedCreate) else current


def _patch_class(
    cls: type, method: str, current: Any, wrapper: Callable[..., Any], live: _Live, done: list[str]
) -> None:
    set_wrapper(cls, method, current, wrapper, live)
    _patched.append((cls, method))
    done.append(f"{cls.__module__}.{cls.__qualname__}.{method}")


def instrument_classes(*, include_usage: bool = False) -> list[str]:
    """Wrap the installed SDKs' resource classes; the names wrapped now."""
    done: list[str] = []
    with lock:
        first_party = [
            (cls, mode) for module, name, mode in SDK_CLASSES if (cls := sdk_class(module, name)) is not None
        ]
        sdk_coverage.import_copying_modules()  # before any patch: they copy the SDK's own functions
        originals: dict[Any, tuple[str, str]] = {}  # the SDK's own functions, wrapped now -> (mode, method)
        for cls, mode in first_party:
            for method in METHODS[mode]:
                current = _unpatched(cls, method)
                if current is not None:
                    originals[current] = (mode, method)
                    live = _Live()
                    wrapper = _class_wrapper(mode, method, is_async(current), include_usage, live)
                    _patch_class(cls, method, current, wrapper, live, done)
        # Classes that took those functions as their own (the Vertex and Bedrock beta messages).
        for cls, method, mode in sdk_coverage.copies(originals, {cls for cls, _mode in first_party}):
            current = vars(cls)[method]
            live = _Live()
            wrapper = _class_wrapper(mode, method, is_async(current), include_usage, live)
            _patch_class(cls, method, current, wrapper, live, done)
        for module_name, class_name, label, methods in UNTRACED_CLASSES:
            untraced = sdk_class(module_name, class_name)
            if untraced is None:
                continue
            for method in methods:
                current = _unpatched(untraced, method)
                if current is not None:
                    live = _Live()
                    wrapper = untraced_wrapper(f"{label}.{method}", live, _inside)
                    _patch_class(untraced, method, current, wrapper, live, done)
        # The net: an LLM request that reaches an SDK client's request() without dispatch is counted.
        done += sdk_coverage.install_net(count_untraced, dispatch.inside_sdk_call)
        dispatch.guard_sdk_calls(bool(_patched))
    return done


def uninstrument_classes() -> None:
    with lock:
        sdk_coverage.remove_net()
        for cls, method in reversed(_patched):
            restore(cls, method)
        _patched.clear()
        dispatch.guard_sdk_calls(False)


def classes_instrumented() -> bool:
    return bool(_patched)
