"""Each provider call a LangChain chat model makes inside a ``RelayMiddleware`` model call, as one attempt.

``RelayMiddleware`` sits at one place in the agent's middleware stack; middleware placed inside it
(``ModelRetryMiddleware``, ``ModelFallbackMiddleware``, ...) may call the model several times. So the
attempts are made where the model really runs: ``BaseChatModel._generate_with_cache`` (and its async
twin), the one step every ``invoke`` / ``ainvoke`` of a chat model goes through, streamed or not, is
wrapped once for the process. Outside a middleware model call the wrapper passes straight through.
While the attempt runs the SDK call inside is marked as dispatch's own, so ``adapters.instrument()``
passes it through: one provider call, one attempt, intercepts and budget checks run once.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

import wrapt
from langchain_core.language_models.chat_models import BaseChatModel

from relay_runtime import calls, session
from relay_runtime.adapters.dispatch import inside_sdk_call
from relay_runtime.attempt import Attempt
from relay_runtime.types import LLMRequest, request_taking

from ..frameworks import ModelCall
from .codec import LangChainCodec

# The model call of ``RelayMiddleware`` running here (None: chat models run untouched).
middleware_call: ContextVar[ModelCall | None] = ContextVar("relay_langchain_model_call", default=None)

_lock = threading.Lock()
_installed = False
_NAME_ATTRS = ("model_name", "model")
_profiles: dict[type, tuple[LangChainCodec, tuple[str, ...]]] = {}
# Arguments of the generate step that are not the model's invocation kwargs.
_POSITIONAL = frozenset({"messages", "stop", "run_manager"})


def install() -> None:
    """Wrap the chat model's generate step (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        wrapt.wrap_function_wrapper(BaseChatModel, "_generate_with_cache", _generate)
        wrapt.wrap_function_wrapper(BaseChatModel, "_agenerate_with_cache", _agenerate)
        _installed = True


def codec_of(model: Any) -> LangChainCodec:
    """The codec for a model's class, named for its provider (``openai``, ``anthropic``, ...)."""
    return _profile(model)[0]


def model_name_of(model: Any) -> str | None:
    return _name_in(model, _profile(model)[1])


def _name_in(model: Any, attrs: tuple[str, ...]) -> str | None:
    name = None
    for attr in attrs:
        name = getattr(model, attr, None)
        if name:
            break
    return name if isinstance(name, str) else None


def _profile(model: Any) -> tuple[LangChainCodec, tuple[str, ...]]:
    """What every call of a model class needs, found once per class: its codec, and where it keeps its
    model name. Only the names the class declares are read, since a pydantic model's missing attribute
    costs a raised and caught AttributeError (``ChatAnthropic`` has no ``model_name``) on every call."""
    cls = type(model)
    profile = _profiles.get(cls)
    if profile is None:
        provider = "langchain"
        try:
            provider = model._get_ls_params().get("ls_provider") or provider
        except Exception:
            pass
        fields = getattr(cls, "model_fields", None) or {}
        declared = tuple(a for a in _NAME_ATTRS if a in fields or hasattr(cls, a))
        profile = _profiles[cls] = (LangChainCodec(provider), declared or _NAME_ATTRS)
    return profile


def _request(model_name: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> LLMRequest:
    """The chat model call as a request (``kwargs`` is the caller's: it is read, never changed)."""
    content = {"model": model_name, "messages": args[0] if args else kwargs["messages"]}
    if kwargs:  # most agent steps pass only the messages: no loop, no lookups then
        for key, value in kwargs.items():
            if key not in _POSITIONAL:
                content[key] = value
        stop = args[1] if len(args) > 1 else kwargs.get("stop")
    else:
        stop = args[1] if len(args) > 1 else None
    if stop is not None:
        content["stop"] = stop
    return request_taking(content)  # built for this request alone: kept, not copied


def _run_manager(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[2] if len(args) > 2 else kwargs.get("run_manager")


def _call_args(
    req: LLMRequest, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments the model's step runs with when an intercept replaced its request (the same request
    object, immutable, means the caller's own arguments: the provider step then passes them as they are)."""
    rest = req.kwargs()
    rest.pop("model", None)
    messages = rest.pop("messages")
    stop = rest.pop("stop", None)
    return (messages, stop, _run_manager(args, kwargs)), rest


def _attempt(
    call: ModelCall, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Attempt | None, LLMRequest]:
    """The attempt of ``call`` this generate step is (None once the call is closed), and its request."""
    codec, attrs = _profiles.get(type(instance)) or _profile(instance)
    if len(attrs) == 1:  # the class declares where its name is: one read, no loop
        model_name = getattr(instance, attrs[0], None)
        if not isinstance(model_name, str):
            model_name = None
    else:
        model_name = _name_in(instance, attrs)
    request = _request(model_name, args, kwargs)
    return calls.attempt_of(call.turn, call.logical, request, codec.provider, model_name, codec), request


def _late(call: ModelCall, instance: Any) -> dict[str, Any]:
    """``calls.execute_current``'s arguments for an attempt of a call its turn's end already closed."""
    codec = codec_of(instance)
    return {
        "name": codec.provider,
        "model_name": model_name_of(instance),
        "metadata": call.next_attempt_metadata(),
        "defer_logical_completion": True,
        "codec": codec,
    }


def _generate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = middleware_call.get()
    if call is None:
        return wrapped(*args, **kwargs)
    attempt, request = _attempt(call, instance, args, kwargs)

    def provider(req: LLMRequest) -> Any:
        call_args, call_kwargs = (args, kwargs) if req is request else _call_args(req, args, kwargs)
        token = inside_sdk_call.set(True)
        try:
            return wrapped(*call_args, **call_kwargs)
        finally:
            inside_sdk_call.reset(token)

    if attempt is None:
        with session.use_turn(call.turn):
            return calls.execute_current(request, provider, **_late(call, instance))
    if session.active_turn() is call.turn:
        return call.turn.relay.llm.run(attempt, provider)
    with session.use_turn(call.turn):  # a framework may run the model on a worker, outside the turn's context
        return call.turn.relay.llm.run(attempt, provider)


async def _agenerate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = middleware_call.get()
    if call is None:
        return await wrapped(*args, **kwargs)
    attempt, request = _attempt(call, instance, args, kwargs)

    async def provider(req: LLMRequest) -> Any:
        call_args, call_kwargs = (args, kwargs) if req is request else _call_args(req, args, kwargs)
        token = inside_sdk_call.set(True)
        try:
            return await wrapped(*call_args, **call_kwargs)
        finally:
            inside_sdk_call.reset(token)

    if attempt is None:
        with session.use_turn(call.turn):
            return await calls.execute_current_async(request, provider, **_late(call, instance))
    if session.active_turn() is call.turn:
        return await call.turn.relay.llm.run_async(attempt, provider)
    with session.use_turn(call.turn):
        return await call.turn.relay.llm.run_async(attempt, provider)
