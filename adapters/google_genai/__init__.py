"""The Google Gen AI SDK (``google-genai``): the Gemini API and Vertex AI, sync and async.

Two layers of ``Models`` / ``AsyncModels`` methods are wrapped. The public ones
(``generate_content``, ``generate_content_stream``, ``embed_content``) and a chat's
``send_message`` / ``send_message_stream`` each open one logical call (``logical``); the
per-request ones they call (``_generate_content``, ``_generate_content_stream``,
``_embed_content``) are each one attempt (``runtime``). The Python functions automatic
function calling runs (``_extra_utils.invoke_function_from_dict_args``) are tool scopes. Inside an
attempt made elsewhere (``dispatch.inside_sdk_call``: a LangChain chat model under ``RelayMiddleware``)
all of them pass straight through (``logical.inside_attempt``).

``instrument_client(client)`` shadows the methods on that client's own ``models`` objects
(``client.models`` and ``client.aio.models``; chats use them); ``instrument_classes()`` wraps
them on the classes, for every client made now or later. The chat and tool hooks are
module-wide and act only for an instrumented client's calls. Nothing here imports
``google.genai`` until one of these functions is called with it installed.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from functools import partial
from types import MethodType
from typing import Any

import wrapt

from ..endpoints import Endpoint
from ..wrapping import lock, unknown
from . import logical, runtime
from .codec import GEMINI
from .runtime import EMBED, GENERATE, STREAM

NAME = GEMINI
_MARK = "_relay_genai_provider"  # on an instrumented Models object: the provider its caller named, or None
# method -> (layer, kind): "call" methods open a logical call, "attempt" methods are one request each.
METHODS: dict[str, tuple[str, str]] = {
    "generate_content": ("call", GENERATE),
    "generate_content_stream": ("call", STREAM),
    "embed_content": ("call", EMBED),
    "_generate_content": ("attempt", GENERATE),
    "_generate_content_stream": ("attempt", STREAM),
    "_embed_content": ("attempt", EMBED),
}
CHAT_METHODS: dict[str, bool] = {"send_message": False, "send_message_stream": True}  # -> whether it streams
_TOOL_FUNCTIONS = ("invoke_function_from_dict_args", "invoke_function_from_dict_args_async")
_class_patch: list[tuple[type, str, Any]] = []  # (class, method, the original) while instrument_classes() is on
_hooks: list[tuple[Any, str, Any]] = []  # the chat and tool hooks, once installed: (owner, name, original)
_instrumented: weakref.WeakSet[Any] = weakref.WeakSet()  # Models objects instrument_client() wrapped


def is_client(client: Any) -> bool:
    """Whether ``client`` is a ``google.genai`` ``Client`` or ``AsyncClient`` (without importing the SDK)."""
    module = sys.modules.get("google.genai.client")
    return module is not None and isinstance(client, module.Client | module.AsyncClient)


def _models_of(client: Any) -> list[Any]:
    module = sys.modules["google.genai.client"]
    if isinstance(client, module.Client):
        return [client.models, client.aio.models]
    return [client.models]


def _is_async(models: Any) -> bool:
    from google.genai.models import AsyncModels

    return isinstance(models, AsyncModels)


def _original(models: Any, name: str) -> Any:
    """The SDK's own method bound to ``models`` (under ``instrument_classes()``'s wrapper, if that is on)."""
    function = vars(type(models)).get(name)
    if function is None:
        return None
    return MethodType(getattr(function, "__wrapped__", function), models)


def _wrapper(models: Any, name: str, provider: str | None) -> Callable[..., Any]:
    layer, kind = METHODS[name]
    original = _original(models, name)
    if layer == "call":
        # A partial, not a closure: the call reaches ``grouped`` without a Python frame in between.
        return partial(logical.grouped_async if _is_async(models) else logical.grouped, original, kind == STREAM)
    return _attempt(models, original, kind, _is_async(models), provider)


def _attempt(models: Any, original: Any, kind: str, is_async: bool, provider: str | None) -> Callable[..., Any]:
    """``original`` (a per-request method of ``models``) making one attempt per call. One shape for the sync
    and the async methods: an async one's answer is the awaitable the SDK awaits, as ``original``'s is.
    A partial, not a closure: the call reaches ``runtime``'s entry without a Python frame in between."""
    return partial(_MANAGED[is_async, kind == STREAM], models, original, kind, provider)


# (async, streamed) -> what makes one attempt of a per-request method.
_MANAGED: dict[tuple[bool, bool], Callable[..., Any]] = {
    (False, False): runtime.managed_call,
    (True, False): runtime.managed_call_async,
    (False, True): runtime.managed_stream,
    (True, True): runtime.managed_stream_async,
}


def _known_methods(models: Any) -> list[str]:
    """The traced methods this SDK version has; one it lacks (renamed or removed) is skipped with a warning."""
    found = []
    for name in METHODS:
        if callable(vars(type(models)).get(name)):
            found.append(name)
        else:
            unknown(f"google.genai.models.{type(models).__name__}.{name}")
    return found


def instrument_client(client: Any, *, include_usage: bool = False, provider: Endpoint | str | None = None) -> Any:
    """Trace this client's calls (``client.aio``'s too); idempotent; returns the client.

    ``provider`` names the provider over the client's own (``gcp.gemini`` / ``gcp.vertex_ai``).
    ``include_usage`` is for OpenAI chat streams: Gemini streams always carry their usage.
    """
    del include_usage
    if isinstance(provider, Endpoint):
        provider = provider.provider
    if not is_client(client):
        raise TypeError(f"not a google.genai Client or AsyncClient: {type(client).__name__}")
    with lock:  # check-then-set: two racing calls must not wrap a wrapper
        _install_hooks()
        for models in _models_of(client):
            _instrument_models(models, provider)
    return client


def _instrument_models(models: Any, provider: str | None) -> None:
    own = models.__dict__
    if _MARK in own:
        if own[_MARK] != provider:
            raise ValueError(
                f"this google.genai client is instrumented already (provider {own[_MARK] or 'by its client'}); "
                f"uninstrument(client) before instrumenting it with another provider="
            )
        return
    runtime.state_of(models._api_client)
    for name in _known_methods(models):
        own[name] = _wrapper(models, name, provider)
    own[_MARK] = provider
    _instrumented.add(models)


def uninstrument_client(client: Any) -> Any:
    if not is_client(client):
        return client
    with lock:
        _uninstrument_models(client)
        if not _instrumented and not _class_patch:  # the last traced client: the module-wide hooks go with it
            _remove_hooks()
    return client


def _uninstrument_models(client: Any) -> None:
    for models in _models_of(client):
        own = models.__dict__
        if own.pop(_MARK, _MISSING) is _MISSING:
            continue
        for name in METHODS:
            own.pop(name, None)
        _instrumented.discard(models)


_MISSING = object()


def is_client_instrumented(client: Any) -> bool:
    return is_client(client) and _MARK in client.models.__dict__


# -- the chat and tool hooks: module-wide, acting for instrumented calls only ------------------------


def _traced(models: Any) -> bool:
    return bool(_class_patch) or _MARK in getattr(models, "__dict__", {})


def _chat_wrapper(streaming: bool, is_async: bool) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None or not _hooks or not _traced(getattr(instance, "_modules", None)):
            return wrapped(*args, **kwargs)
        return (logical.grouped_async if is_async else logical.grouped)(wrapped, streaming, *args, **kwargs)

    return wrapper


def _install_hooks() -> None:
    if _hooks:
        return
    from google.genai import _extra_utils, chats

    for cls, is_async in ((chats.Chat, False), (chats.AsyncChat, True)):
        for name, streaming in CHAT_METHODS.items():
            current = vars(cls).get(name)
            if current is None:
                unknown(f"google.genai.chats.{cls.__name__}.{name}")
                continue
            _hooks.append((cls, name, current))
            setattr(cls, name, wrapt.FunctionWrapper(current, _chat_wrapper(streaming, is_async)))
    sync_name, async_name = _TOOL_FUNCTIONS
    sync_tool, async_tool = getattr(_extra_utils, sync_name, None), getattr(_extra_utils, async_name, None)
    for name, tool in ((sync_name, sync_tool), (async_name, async_tool)):
        if not callable(tool):
            unknown(f"google.genai._extra_utils.{name}")
    if callable(sync_tool):
        _hooks.append((_extra_utils, sync_name, sync_tool))
        setattr(_extra_utils, sync_name, lambda args, function: logical.invoke_tool(sync_tool, args, function))
    if callable(async_tool):
        _hooks.append((_extra_utils, async_name, async_tool))

        async def invoke_async(args: Any, function: Any) -> Any:
            return await logical.invoke_tool_async(async_tool, args, function)

        setattr(_extra_utils, async_name, invoke_async)


def _remove_hooks() -> None:
    while _hooks:
        owner, name, original = _hooks.pop()
        setattr(owner, name, original)


# -- the classes ------------------------------------------------------------------------------------


def _class_wrapper(name: str, is_async: bool) -> Callable[..., Any]:
    layer, kind = METHODS[name]
    streaming = kind == STREAM

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None or not _class_patch:
            return wrapped(*args, **kwargs)
        if layer == "call":
            return (logical.grouped_async if is_async else logical.grouped)(wrapped, streaming, *args, **kwargs)
        if args:
            return wrapped(*args, **kwargs)
        return _attempt(instance, wrapped, kind, is_async, None)(**kwargs)

    return wrapper


def instrument_classes(*, include_usage: bool = False) -> list[str]:
    """Wrap ``google.genai``'s ``Models`` and ``AsyncModels`` (if installed); the names wrapped now."""
    try:
        from google.genai.models import AsyncModels, Models
    except ImportError:
        return []
    with lock:
        if _class_patch:
            return []
        _install_hooks()
        done = []
        for cls, is_async in ((Models, False), (AsyncModels, True)):
            for name in METHODS:
                current = vars(cls).get(name)
                if current is None:
                    unknown(f"google.genai.models.{cls.__name__}.{name}")
                    continue
                _class_patch.append((cls, name, current))
                setattr(cls, name, wrapt.FunctionWrapper(current, _class_wrapper(name, is_async)))
                done.append(f"google.genai.models.{cls.__name__}.{name}")
        return done


def uninstrument_classes() -> None:
    with lock:
        while _class_patch:
            cls, name, original = _class_patch.pop()
            setattr(cls, name, original)
        if not _instrumented:  # clients instrumented one by one keep their chats and tools traced
            _remove_hooks()


def classes_instrumented() -> bool:
    return bool(_class_patch)
