"""Zero-code tracing: ``instrument(client)`` for one client, ``instrument()`` for the SDK classes.

Traced methods, per API (the SDKs' other helpers go through these):

- chat completions: ``create`` (``stream=True`` too, and so ``chat.completions.stream()``), ``parse``
- responses: ``create`` (and so ``responses.stream()``), ``parse``
- anthropic messages: ``create``, ``stream``, ``parse``
- openai embeddings: ``create`` (operation ``embeddings``)

each on the API's resource and on its beta twin (``beta.chat.completions``,
``beta.responses``, ``beta.messages``), per client and globally.

Per client, the wrapper is set on the client's own resource objects, shadowing the
class's method, so other clients are untouched and ``uninstrument`` restores the very
attribute that was there before; clients derived with ``with_options()`` / ``copy()``
are instrumented too. Globally, the SDK resource classes themselves are wrapped (with
wrapt), so clients a framework creates are traced as well.

Both may be on at once: dispatch marks the SDK call it makes (``inside_sdk_call``) and
every wrapper passes a marked call straight through, so one call is one attempt.

Globally, classes that copied the wrapped methods at import (the Vertex and Bedrock beta
``Messages``) are wrapped too, and an LLM request that reaches an SDK client unmarked is
counted (``sdk_coverage``).

``with_raw_response`` / ``with_streaming_response``: one attempt each, see ``raw_responses``.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

import wrapt

from relay_runtime import session

from . import bedrock, dispatch, endpoints, raw_responses, sdk_coverage
from .dispatch import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, EMBEDDINGS, RESPONSES
from .endpoints import Endpoint

_NOTHING = object()
# Check-then-set on a resource must be atomic, or two racing instrument() calls could wrap
# a wrapper and leave uninstrument() restoring the first one.
_lock = threading.Lock()

METHODS: dict[str, tuple[str, ...]] = {
    CHAT_COMPLETIONS: ("create", "parse"),
    RESPONSES: ("create", "parse"),
    ANTHROPIC_MESSAGES: ("create", "stream", "parse"),
    EMBEDDINGS: ("create",),
}

# Where a client keeps the resources of each API, per client: the main one and its beta twin
# (the same API answering beta types). ``instrument(client)`` wraps each one the client has.
RESOURCE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    CHAT_COMPLETIONS: (("chat", "completions"), ("beta", "chat", "completions")),
    RESPONSES: (("responses",), ("beta", "responses")),
    ANTHROPIC_MESSAGES: (("messages",), ("beta", "messages")),
    EMBEDDINGS: (("embeddings",),),
}

# The SDK resource classes ``instrument()`` wraps: (module, class, api).
SDK_CLASSES: tuple[tuple[str, str, str], ...] = (
    ("openai.resources.chat.completions.completions", "Completions", CHAT_COMPLETIONS),
    ("openai.resources.chat.completions.completions", "AsyncCompletions", CHAT_COMPLETIONS),
    ("openai.resources.responses.responses", "Responses", RESPONSES),
    ("openai.resources.responses.responses", "AsyncResponses", RESPONSES),
    ("anthropic.resources.messages.messages", "Messages", ANTHROPIC_MESSAGES),
    ("anthropic.resources.messages.messages", "AsyncMessages", ANTHROPIC_MESSAGES),
    # client.beta.messages: the same API with beta features, answering BetaMessage.
    ("anthropic.resources.beta.messages.messages", "Messages", ANTHROPIC_MESSAGES),
    ("anthropic.resources.beta.messages.messages", "AsyncMessages", ANTHROPIC_MESSAGES),
    # client.beta.responses: the Responses API answering BetaResponse (client.beta.chat is the plain Chat).
    ("openai.resources.beta.responses.responses", "Responses", RESPONSES),
    ("openai.resources.beta.responses.responses", "AsyncResponses", RESPONSES),
    ("openai.resources.embeddings", "Embeddings", EMBEDDINGS),
    ("openai.resources.embeddings", "AsyncEmbeddings", EMBEDDINGS),
)

# Public SDK calls that make LLM output but cannot be recorded as one attempt, so they are counted
# instead (in ``relay.diagnostics()`` as ``adapters.untraced_calls`` and ``.<label>``), never silent:
# a compaction answers a compacted item list, not a response the codecs read; a websocket connection
# carries many responses over one socket; a batch creates its messages later, out of band.
# (label, path from the client, method); the classes ``instrument()`` wraps the same way follow.
UNTRACED = "adapters.untraced_calls"
UNTRACED_PATHS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("responses.compact", ("responses",), "compact"),
    ("responses.compact", ("beta", "responses"), "compact"),
    ("responses.connect", ("responses",), "connect"),
    ("responses.connect", ("beta", "responses"), "connect"),
    ("messages.batches.create", ("messages", "batches"), "create"),
    ("messages.batches.create", ("beta", "messages", "batches"), "create"),
)
UNTRACED_CLASSES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("openai.resources.responses.responses", "Responses", "responses", ("compact", "connect")),
    ("openai.resources.responses.responses", "AsyncResponses", "responses", ("compact", "connect")),
    ("openai.resources.beta.responses.responses", "Responses", "responses", ("compact", "connect")),
    ("openai.resources.beta.responses.responses", "AsyncResponses", "responses", ("compact", "connect")),
    ("anthropic.resources.messages.batches", "Batches", "messages.batches", ("create",)),
    ("anthropic.resources.messages.batches", "AsyncBatches", "messages.batches", ("create",)),
    ("anthropic.resources.beta.messages.batches", "Batches", "messages.batches", ("create",)),
    ("anthropic.resources.beta.messages.batches", "AsyncBatches", "messages.batches", ("create",)),
)

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # both SDKs: "true" (with_raw_response), "stream"


class _Live:
    """Whether a wrapper is still installed: one taken out passes every call straight through.

    The SDKs keep bound methods (``with_raw_response``, ``with_streaming_response`` and the
    caller's own references hold ``create`` as it was when they were made), so a wrapper
    that ``uninstrument`` took out can still be called.
    """

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = True


class ManagedCreate(wrapt.FunctionWrapper):
    """A resource's SDK method routed through dispatch; ``__wrapped__`` is the SDK's own method."""

    relay_instrumented = True
    # What the owner's own __dict__ held before (``_NOTHING``: the class attribute showed through).
    # wrapt keeps ``_self_``-prefixed attributes on the proxy, not on the wrapped method.
    _self_relay_previous: Any
    _self_relay_live: _Live
    _self_relay_provider: Endpoint | None  # ``instrument(client, provider=...)``'s name, on a client's wrappers


ManagedMethod = ManagedCreate


def _is_async(method: Any) -> bool:
    # The SDKs decorate their methods with a plain wrapper around the async def: look through it.
    return inspect.iscoroutinefunction(inspect.unwrap(method))


def _raw_kind(kwargs: dict[str, Any]) -> str | None:
    headers = kwargs.get("extra_headers")
    if not headers or not isinstance(headers, dict):
        return None
    kind = headers.get(RAW_RESPONSE_HEADER)
    return kind if isinstance(kind, str) else None


def route(
    client: Any,
    mode: str,
    method: str,
    is_async: bool,
    include_usage: bool,
    wrapped: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    provider: Endpoint | None = None,
) -> Any:
    """One call of an instrumented SDK method, as a managed attempt (or straight through)."""
    if args or dispatch.inside_sdk_call.get():
        return wrapped(*args, **kwargs)  # dispatch's own SDK call, or a call shape the SDK will refuse itself
    if method == "stream":
        return _stream_helper(client, mode, wrapped, kwargs, provider)
    raw = _raw_kind(kwargs)
    if raw is not None:
        call = raw_responses.araw_call if is_async else raw_responses.raw_call
        return call(client, mode, wrapped, kwargs, raw, provider)
    # complete()/acomplete() hand a streamed call to stream()/astream() themselves.
    run = dispatch.acomplete if is_async else dispatch.complete
    return run(client, kwargs, api_mode=mode, include_usage=include_usage, sdk_method=wrapped, provider=provider)


# -- anthropic's messages.stream(): a manager whose request runs on __enter__ ------------------


def _stream_helper(client: Any, mode: str, wrapped: Any, kwargs: dict[str, Any], provider: Endpoint | None) -> Any:
    # stream() itself is synchronous for both clients; the async manager holds an awaitable request.
    manager = wrapped(**kwargs)
    attr = f"_{type(manager).__name__}__api_request"
    original = getattr(manager, attr, None)
    if original is None:  # a helper of an SDK version this does not know: untraced, never broken
        return manager

    def request_of(**edited: Any) -> Any:
        # The kwargs after intercepts: the helper builds its request from them again.
        edited.pop("stream", None)
        return getattr(wrapped(**edited), attr)

    if inspect.iscoroutine(original):
        original.close()  # an un-awaited coroutine; its replacement is awaited on __aenter__

        async def open_async(**edited: Any) -> Any:
            return await request_of(**edited)

        opened = dispatch.astream(client, kwargs, api_mode=mode, sdk_method=open_async, provider=provider)
        setattr(manager, attr, opened)
    else:
        setattr(
            manager,
            attr,
            lambda: dispatch.stream(
                client, kwargs, api_mode=mode, sdk_method=lambda **e: request_of(**e)(), provider=provider
            ),
        )
    return manager


# -- calls that cannot be attempts: counted ------------------------------------------------------


def count_untraced(label: str) -> None:
    """Count an SDK call the relay cannot record, on the active turn's relay (else on every host's)."""
    turn = session.active_turn()
    relays = [turn.relay] if turn is not None else [host.relay for host in session.SESSION_COORDINATOR.hosts()]
    for relay in relays:
        relay.diag.count_all(UNTRACED, f"{UNTRACED}.{label}")


def _untraced_wrapper(label: str, live: _Live) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if live.on and not dispatch.inside_sdk_call.get():
            count_untraced(label)
        return wrapped(*args, **kwargs)

    return wrapper


# -- per client -------------------------------------------------------------------------------


def _path(client: Any, path: tuple[str, ...]) -> Any:
    """The object at ``path`` from ``client`` (None where a step is missing)."""
    obj = client
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _resources(client: Any) -> list[tuple[str, Any]]:
    """Every resource of ``client`` whose ``create()`` makes an LLM call, with its API."""
    found = []
    for mode, paths in RESOURCE_PATHS.items():
        for path in paths:
            resource = _path(client, path)
            if resource is not None and callable(getattr(resource, "create", None)):
                found.append((mode, resource))
    return found


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
            _instrument_client(derived, include_usage, provider)
        return derived

    return wrapper


_DERIVERS = ("copy", "with_options")


def _set(owner: Any, name: str, current: Any, wrapper: Callable[..., Any], live: _Live) -> None:
    managed = ManagedCreate(current, wrapper)
    managed._self_relay_previous = vars(owner).get(name, _NOTHING)
    managed._self_relay_live = live
    setattr(owner, name, managed)


def _restore(owner: Any, name: str) -> None:
    current = vars(owner).get(name)
    if not isinstance(current, ManagedCreate):
        return
    current._self_relay_live.on = False
    previous = current._self_relay_previous
    if previous is _NOTHING:
        delattr(owner, name)
    else:
        setattr(owner, name, previous)


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


def _instrument_client(client: Any, include_usage: bool, provider: Endpoint | None) -> Any:
    if bedrock.is_client(client):
        return bedrock.instrument_client(client)
    resources = _resources(client)
    if not resources:
        raise TypeError(f"cannot instrument {type(client).__name__}: it has no chat.completions, responses or messages")
    with _lock:
        _check_same_provider(client, resources, provider)
        for mode, resource in resources:
            for method in METHODS[mode]:
                current = getattr(resource, method, None)
                if not callable(current) or isinstance(vars(resource).get(method), ManagedCreate):
                    continue
                live = _Live()
                wrapper = _client_wrapper(client, mode, method, _is_async(current), include_usage, live, provider)
                _set(resource, method, current, wrapper, live)
                vars(resource)[method]._self_relay_provider = provider
        for label, path, method in UNTRACED_PATHS:
            owner = _path(client, path)
            current = getattr(owner, method, None) if owner is not None else None
            if callable(current) and not isinstance(vars(owner).get(method), ManagedCreate):
                live = _Live()
                _set(owner, method, current, _untraced_wrapper(label, live), live)
        _forget_raw_helpers(client)
        for name in _DERIVERS:
            current = getattr(client, name, None)
            if callable(current) and not isinstance(vars(client).get(name), ManagedCreate):
                live = _Live()
                try:
                    _set(client, name, current, _derive_wrapper(include_usage, live, provider), live)
                except (AttributeError, TypeError):  # a client that takes no instance attributes
                    pass
    return client


_RAW_HELPERS = ("with_raw_response", "with_streaming_response")


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
                for helper in _RAW_HELPERS:
                    own.pop(helper, None)


def _uninstrument_client(client: Any) -> Any:
    if bedrock.is_client(client):
        return bedrock.uninstrument_client(client)
    with _lock:
        for mode, resource in _resources(client):
            for method in METHODS[mode]:
                _restore(resource, method)
        for _label, path, method in UNTRACED_PATHS:
            owner = _path(client, path)
            if owner is not None:
                _restore(owner, method)
        for name in _DERIVERS:
            if isinstance(getattr(client, "__dict__", {}).get(name), ManagedCreate):
                _restore(client, name)
    return client


# -- the SDK classes ----------------------------------------------------------------------------

_patched: list[tuple[type, str]] = []


def _class_wrapper(mode: str, method: str, is_async: bool, include_usage: bool, live: _Live) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        client = getattr(instance, "_client", None)
        if client is None or not live.on:  # looked up on the class itself, not on a client's resource
            return wrapped(*args, **kwargs)
        return route(client, mode, method, is_async, include_usage, wrapped, args, kwargs)

    return wrapper


def _sdk_classes() -> list[tuple[type, str]]:
    found = []
    for module_name, class_name, mode in SDK_CLASSES:
        cls = _sdk_class(module_name, class_name)
        if cls is not None:
            found.append((cls, mode))
    return found


def _sdk_class(module_name: str, class_name: str) -> type | None:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None  # that SDK is not installed
    cls = getattr(module, class_name, None)
    return cls if isinstance(cls, type) else None


def _unpatched(cls: type, method: str) -> Any:
    """``cls``'s own ``method`` if it has one not wrapped yet, else None."""
    current = vars(cls).get(method)
    return None if current is None or isinstance(current, ManagedCreate) else current


def _patch_class(
    cls: type, method: str, current: Any, wrapper: Callable[..., Any], live: _Live, done: list[str]
) -> None:
    _set(cls, method, current, wrapper, live)
    _patched.append((cls, method))
    done.append(f"{cls.__module__}.{cls.__qualname__}.{method}")


def _instrument_classes(include_usage: bool) -> list[str]:
    done: list[str] = []
    with _lock:
        first_party = _sdk_classes()  # imports the SDKs that are installed
        sdk_coverage.import_copying_modules()  # before any patch: they copy the SDK's own functions
        originals: dict[Any, tuple[str, str]] = {}  # the SDK's own functions, wrapped now -> (mode, method)
        for cls, mode in first_party:
            for method in METHODS[mode]:
                current = _unpatched(cls, method)
                if current is not None:
                    originals[current] = (mode, method)
                    live = _Live()
                    wrapper = _class_wrapper(mode, method, _is_async(current), include_usage, live)
                    _patch_class(cls, method, current, wrapper, live, done)
        # Classes that took those functions as their own (the Vertex and Bedrock beta messages).
        for cls, method, mode in sdk_coverage.copies(originals, {cls for cls, _mode in first_party}):
            current = vars(cls)[method]
            live = _Live()
            wrapper = _class_wrapper(mode, method, _is_async(current), include_usage, live)
            _patch_class(cls, method, current, wrapper, live, done)
        for module_name, class_name, label, methods in UNTRACED_CLASSES:
            untraced = _sdk_class(module_name, class_name)
            if untraced is None:
                continue
            for method in methods:
                current = _unpatched(untraced, method)
                if current is not None:
                    live = _Live()
                    _patch_class(untraced, method, current, _untraced_wrapper(f"{label}.{method}", live), live, done)
        # The net: an LLM request that reaches an SDK client's request() without dispatch is counted.
        done += sdk_coverage.install_net(count_untraced, dispatch.inside_sdk_call)
        done += bedrock.instrument_classes()
        dispatch.guard_sdk_calls(bool(_patched))
    return done


def _uninstrument_classes() -> None:
    with _lock:
        sdk_coverage.remove_net()
        bedrock.uninstrument_classes()
        for cls, method in reversed(_patched):
            _restore(cls, method)
        _patched.clear()
        dispatch.guard_sdk_calls(False)


# -- the public pair ----------------------------------------------------------------------------


def instrument(client: Any = None, *, include_usage: bool = False, provider: str | None = None) -> Any:
    """Route SDK calls through the relay: one client's, or (no argument) every client's.

    ``instrument(client)``: idempotent, returns the client; raises TypeError for an object
    with none of chat.completions, responses or messages (a boto3 ``bedrock-runtime`` client is
    traced by ``adapters.bedrock``). ``instrument()``: wraps the OpenAI and Anthropic SDK classes
    and botocore's client calls, those installed; returns the names wrapped now.
    ``include_usage=True`` makes OpenAI chat streams ask for their token usage (the caller
    sees one more chunk, with no choices).
    ``provider="groq"`` (one client only) names the provider its calls reach, over ``set_route``
    and the client's base URL (see ``adapters.endpoints``): a convention's name (``mistral_ai``),
    an alias (``mistral``, ``azure``) or an OpenAI-compatible endpoint (``vllm``, ``openrouter``).
    """
    named = None if provider is None else endpoints.named(provider)
    if client is None:
        if named is not None:
            raise TypeError("instrument(provider=...) names one client's provider: pass the client too")
        return _instrument_classes(include_usage)
    return _instrument_client(client, include_usage, named)


def uninstrument(client: Any = None) -> Any:
    """Put back exactly what ``instrument`` replaced; a no-op where it never was."""
    if client is None:
        _uninstrument_classes()
        return None
    return _uninstrument_client(client)


def is_instrumented(client: Any = None) -> bool:
    """Whether this client's own resources are wrapped (no argument: whether the SDK classes are)."""
    if client is None:
        return bool(_patched) or bedrock.classes_instrumented()
    if bedrock.is_client(client):
        return bedrock.is_client_instrumented(client)
    return any(isinstance(vars(r).get("create"), ManagedCreate) for _m, r in _resources(client))
