"""One SDK call as a managed attempt of the current turn, for any supported client.

``complete`` / ``acomplete`` / ``stream`` / ``astream`` pick the API (chat
completions, responses, anthropic messages), wrap the kwargs in an
``LLMRequest``, and hand the SDK call to ``relay_runtime.calls``. Inside an
``@auxiliary_call`` the attempt carries the logical call's identity and the
route's provider name, and the logical call stays open for the decorator to settle.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from types import MethodType
from typing import Any

from relay_runtime import auxiliary, calls, cassettes, neutral, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.codec import LLMCodec
from relay_runtime.types import LLMRequest, request_of_kwargs

from . import cassette_http, endpoints, sdk_retries, sent_credentials
from .anthropic_messages import AnthropicMessagesCodec
from .openai_chat import OpenAIChatCodec
from .openai_embeddings import EMBEDDINGS, OpenAIEmbeddingsCodec
from .openai_responses import OpenAIResponsesCodec
from .wrapping import count_untraced

CHAT_COMPLETIONS = "chat_completions"
RESPONSES = "responses"
ANTHROPIC_MESSAGES = "anthropic_messages"


@dataclass(frozen=True)
class Api:
    mode: str
    codec: LLMCodec
    resource: tuple[str, ...]  # attribute path from the client to the object whose create() is called


APIS: dict[str, Api] = {
    CHAT_COMPLETIONS: Api(CHAT_COMPLETIONS, OpenAIChatCodec(), ("chat", "completions")),
    RESPONSES: Api(RESPONSES, OpenAIResponsesCodec(), ("responses",)),
    ANTHROPIC_MESSAGES: Api(ANTHROPIC_MESSAGES, AnthropicMessagesCodec(), ("messages",)),
    # Only by name (api_mode="embeddings", or instrument()): a client's own API is its LLM one.
    EMBEDDINGS: Api(EMBEDDINGS, OpenAIEmbeddingsCodec(), ("embeddings",)),
}


# SDK client classes seen before -> their API: one dict lookup on the hot path.
_MODE_BY_TYPE: dict[type, str] = {}


def _mode_of_client(client: Any) -> str:
    mode = _MODE_BY_TYPE.get(type(client))
    if mode is not None:
        return mode
    # sys.modules, not import: a client of an SDK nobody imported cannot be an instance of it,
    # and dispatch never pays for importing an SDK the caller does not use.
    anthropic = sys.modules.get("anthropic")
    if anthropic is not None and isinstance(client, anthropic.Anthropic | anthropic.AsyncAnthropic):
        _MODE_BY_TYPE[type(client)] = ANTHROPIC_MESSAGES
        return ANTHROPIC_MESSAGES
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
        _MODE_BY_TYPE[type(client)] = CHAT_COMPLETIONS
        return CHAT_COMPLETIONS
    # Duck-typed clients are not cached: two SimpleNamespaces share a type, not attributes.
    for mode in (CHAT_COMPLETIONS, ANTHROPIC_MESSAGES, RESPONSES):
        if getattr(client, APIS[mode].resource[0], None) is not None:
            return mode
    raise TypeError(
        f"cannot tell which LLM API {type(client).__name__} speaks: expected an OpenAI or Anthropic "
        f"client, or an object with chat.completions, messages or responses; pass api_mode="
    )


def resource_of(client: Any, api: Api) -> Any:
    obj = client
    for name in api.resource:
        obj = getattr(obj, name, None)
        if obj is None:
            raise TypeError(
                f"{type(client).__name__} has no {'.'.join(api.resource)}.create() for api_mode {api.mode!r}"
            )
    return obj


# What one SDK call hands to ``relay_runtime.calls``: its API, the SDK's create(), the request,
# the attempt's provider name, model name and metadata, and whether it is an attempt of an
# auxiliary call (whose logical call stays open for a retry until validated).
Prepared = tuple[Api, Any, LLMRequest, str, "str | None", "dict[str, Any] | None", bool]


# The last base URL seen and its address: a process mostly talks to one endpoint, and URL
# objects are immutable, so the same object always gives the same address.
_last_address: tuple[Any, str | None] = (None, None)
_IMMUTABLE_URL_MODULES = frozenset({"httpx", "httpx2"})


def server_address(client: Any) -> str | None:
    """``host`` or ``host:port`` of the client's base URL (for ``server.address`` on exported spans)."""
    global _last_address
    # Both SDKs keep the URL in ``_base_url``; their public ``base_url`` property costs ~40x more.
    url = getattr(client, "_base_url", None) or getattr(client, "base_url", None)
    last_url, address = _last_address  # one read: another thread may replace the pair
    if url is last_url and url is not None:
        return address
    host = getattr(url, "host", None)
    if not isinstance(host, str) or not host:
        address = None
    else:
        port = getattr(url, "port", None)
        address = f"{host}:{port}" if port else host
    if type(url).__module__ in _IMMUTABLE_URL_MODULES:  # a duck-typed stand-in may change in place
        _last_address = (url, address)
    return address


def _check_kwargs(kwargs: Any) -> None:
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        raise TypeError(f"SDK kwargs must be a mapping, got {type(kwargs).__name__}")


def _named_api(api: Api, client: Any, provider: endpoints.Endpoint | None, route: Any) -> Api:
    """``api`` with its codec named for the provider the call reaches (see ``adapters.endpoints``)."""
    if provider is None:
        provider = endpoints.named(route.provider) if route is not None else endpoints.of_client(client)
        if provider is None:
            return api
    codec = api.codec
    deployment = endpoints.deployment_of(client) if provider.provider == endpoints.AZURE_OPENAI else None
    if provider.provider == codec.provider and provider.endpoint is None and deployment is None:
        return api
    own = neutral.SPELLINGS.get((provider.provider, codec.operation))
    if own is not None and own is not getattr(codec, "spelling", own):
        # A name whose own API is not this client's (an Anthropic route on an OpenAI client): the
        # request keeps its API's name, or intercepts would be told the other API's params.
        return api
    return endpoints.api_for(api, provider, deployment)


def prepare(
    kwargs: Mapping[str, Any], api_mode: str | None, client: Any, entry: str,
    provider: endpoints.Endpoint | None = None,
) -> Prepared:
    """Everything about one call that can be refused is refused here, before anything is recorded or sent.

    ``provider``: the caller's name for the provider (``instrument(client, provider=...)``), over
    the route's and the base URL's.
    """
    if type(kwargs) is not dict:  # the one check a plain dict needs, without a call
        _check_kwargs(kwargs)
    route = auxiliary.current_route()
    mode = api_mode or (route.api_mode if route is not None else None) or _mode_of_client(client)
    api = APIS.get(mode)
    if api is None:
        raise ValueError(f"unknown api_mode {mode!r}; expected one of {sorted(APIS)}")
    create = _create(client, api, entry)
    if mode == RESPONSES and kwargs.get("background") is True:
        # Its output, usage and cost come later, through ``responses.retrieve``, which is not traced: counted, as
        # every call whose output the record cannot hold is, so that a budget's blind spot is never silent.
        count_untraced("responses.background")
    api = _named_api(api, client, provider, route)
    # The client's own key, so that a provider echoing it in an error never puts it on record.
    redaction.remember_secret(getattr(client, "api_key", None))
    if mode == ANTHROPIC_MESSAGES:
        redaction.remember_secret(getattr(client, "auth_token", None))
    if entry in _STREAMING and not kwargs.get("stream"):
        kwargs = {**kwargs, "stream": True}
    metadata = auxiliary.next_attempt_metadata()
    auxiliary_attempt = metadata is not None
    address = server_address(client)
    if address is not None:
        metadata = {**metadata, cv.SERVER_ADDRESS: address} if metadata else {cv.SERVER_ADDRESS: address}
    codec = api.codec
    endpoint = getattr(codec, "endpoint", None)
    if endpoint is not None:
        metadata = {**metadata, cv.PROVIDER_ENDPOINT: endpoint} if metadata else {cv.PROVIDER_ENDPOINT: endpoint}
    model = kwargs.get("model")
    request = request_of_kwargs(kwargs) if type(kwargs) is dict else LLMRequest(None, kwargs)
    if route is None or provider is not None:
        model_name = model if isinstance(model, str) else (route.model if route is not None else None)
        if codec.provider == endpoints.AZURE_OPENAI:
            model_name = endpoints.deployment_of(client) or model_name
        return api, create, request, codec.provider, model_name, metadata, auxiliary_attempt
    model_name = model if isinstance(model, str) else route.model
    return api, create, request, route.provider, model_name, metadata, auxiliary_attempt


def _kwargs_of(request: LLMRequest) -> dict[str, Any]:
    # A shallow copy: ``request.content`` (a deep one, for intercepts to edit) costs more.
    kwargs = request.kwargs()
    headers = request.raw_headers()
    if headers:
        # Headers an intercept added travel as extra_headers, over any the caller gave.
        kwargs["extra_headers"] = {**(kwargs.get("extra_headers") or {}), **headers}
    return kwargs


# True while a managed attempt runs the code that calls the SDK: every instrumented SDK method (classes
# or one client's) then passes the call straight through, or one provider call would be two attempts.
# Dispatch sets it around the SDK's own method only while class-level instrumentation is on
# (``guard_sdk_calls``: it costs a context switch); a framework's attempt (LangChain's chat model under
# ``RelayMiddleware``) sets it always, since the SDK client inside may be instrumented either way.
inside_sdk_call: ContextVar[bool] = ContextVar("relay_inside_sdk_call", default=False)
_guarded = False


def guard_sdk_calls(on: bool) -> None:
    global _guarded
    _guarded = on


def _guarded_call(create: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    token = inside_sdk_call.set(True)
    try:
        return create(**kwargs)
    finally:
        inside_sdk_call.reset(token)


# Response types seen not to be awaitable: one set lookup per call instead of the ABC check.
_NOT_AWAITABLE: set[type] = set()


def _awaitable(result: Any) -> bool:
    # isinstance, not hasattr: a missing attribute on an SDK's pydantic response costs
    # microseconds (its __getattr__ raises). Whether an object is Awaitable depends on its type
    # alone, so a type once seen answers for all its instances.
    if isinstance(result, Awaitable):
        return True
    if len(_NOT_AWAITABLE) < 256:
        _NOT_AWAITABLE.add(type(result))
    return False


def sync_callback(
    create: Callable[..., Any], client: Any, api: Api, *, direct: bool = True
) -> Callable[[LLMRequest], Any]:
    # ``direct``: a cassette's single recorded answer may be built without the SDK's HTTP round trip; not for a
    # raw response (``with_raw_response``), which is that round trip's response and has no parsed object to hand.
    def call(request: LLMRequest) -> Any:
        kwargs = _kwargs_of(request)
        counted = sdk_retries.watch(client)
        try:
            if cassettes.current() is not None:
                with cassette_http.bound(client, api.codec, kwargs) as tape:
                    reply = cassette_http.direct_reply(tape, client, api.mode) if direct else cassette_http.NOT_DIRECT
                    if reply is not cassette_http.NOT_DIRECT:
                        return reply
                    return create(**kwargs) if not _guarded else _guarded_call(create, kwargs)
            result = create(**kwargs) if not _guarded else _guarded_call(create, kwargs)
        except BaseException as exc:
            sent_credentials.remember_from_error(exc)
            if counted:  # the SDK refused before sending (its own checks): no provider was called
                sdk_retries.refused()
            raise
        if type(result) not in _NOT_AWAITABLE and _awaitable(result):
            # A duck-typed create() that looked synchronous: an un-awaited coroutine is no response.
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(
                f"{type(client).__name__}'s create() returned an awaitable: use the async call (acomplete / astream)"
            )
        return result

    return call


async def _acall_sdk(create: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    if not _guarded:
        return await create(**kwargs)
    token = inside_sdk_call.set(True)
    try:
        return await create(**kwargs)
    finally:
        inside_sdk_call.reset(token)


def async_callback(
    create: Callable[..., Any], client: Any, api: Api, *, direct: bool = True
) -> Callable[[LLMRequest], Any]:
    async def call(request: LLMRequest) -> Any:
        kwargs = _kwargs_of(request)
        counted = sdk_retries.watch(client)
        try:
            if cassettes.current() is not None:
                with cassette_http.bound(client, api.codec, kwargs) as tape:
                    reply = cassette_http.direct_reply(tape, client, api.mode) if direct else cassette_http.NOT_DIRECT
                    if reply is not cassette_http.NOT_DIRECT:
                        return reply
                    return await _acall_sdk(create, kwargs)
            return await _acall_sdk(create, kwargs)
        except BaseException as exc:
            sent_credentials.remember_from_error(exc)
            if counted:
                sdk_retries.refused()
            raise

    return call


# Resource classes of the two SDKs -> whether their create() is a coroutine function.
_ASYNC_BY_TYPE: dict[type, bool] = {}
_SDK_MODULES = ("openai.", "anthropic.")


def _is_async(resource: Any, create: Any) -> bool:
    kind = type(resource)
    verdict = _ASYNC_BY_TYPE.get(kind)
    if verdict is None:
        # The SDKs wrap their async create() in a plain decorator: look through it.
        verdict = inspect.iscoroutinefunction(inspect.unwrap(create))
        if kind.__module__.startswith(_SDK_MODULES):  # duck-typed resources share a type, not a method
            _ASYNC_BY_TYPE[kind] = verdict
    return verdict


_SYNC_TWIN = {"acomplete": "complete", "astream": "stream"}
_STREAMING = frozenset({"stream", "astream"})
_ASYNC_TWIN = {v: k for k, v in _SYNC_TWIN.items()}


def _create(client: Any, api: Api, entry: str) -> Any:
    """The SDK's create() for ``entry`` (complete / acomplete / ...), refused before anything is
    recorded or sent when the client's calling convention is not the entry point's."""
    resource = resource_of(client, api)
    # The resource's create(), seen through ``instrument()``'s wrapper (dispatch must not
    # re-enter it); then ``_is_async``'s cache, read here first: this runs on every call.
    create = resource.create
    if type(create) is not MethodType and getattr(type(create), "relay_instrumented", False):
        create = create.__wrapped__
    is_async = _ASYNC_BY_TYPE.get(type(resource))
    if is_async is None:
        is_async = _is_async(resource, create)
    if is_async != (entry in _SYNC_TWIN):
        twin = _SYNC_TWIN.get(entry) or _ASYNC_TWIN[entry]
        kind = "an async" if is_async else "a sync"
        raise TypeError(
            f"adapters.{entry}() was given {kind} client ({type(client).__name__}); use adapters.{twin}() instead"
        )
    return create


def _wants_stream(kwargs: Mapping[str, Any]) -> bool:
    if type(kwargs) is not dict:
        _check_kwargs(kwargs)
    return bool(kwargs.get("stream"))


STREAMS_WITHOUT_USAGE = "streams_without_usage"


def _stream_usage(api: Api, request: LLMRequest, include_usage: bool) -> tuple[LLMRequest, LLMCodec]:
    """Chat streams carry token usage only when asked (``stream_options.include_usage``).

    ``include_usage=True`` asks (the caller then sees one more chunk, with no choices);
    otherwise a managed stream that ends without usage is counted in ``relay.diagnostics()``.
    """
    if api.mode != CHAT_COMPLETIONS:
        return request, api.codec  # the Responses API and Anthropic always report usage
    content = request.raw_content()
    options = content.get("stream_options")
    if include_usage and not (isinstance(options, Mapping) and options.get("include_usage")):
        merged = {**options, "include_usage": True} if isinstance(options, Mapping) else {"include_usage": True}
        return request.replace(content={**content, "stream_options": merged}), api.codec
    turn = session.managed_turn()
    if turn is None or not isinstance(api.codec, OpenAIChatCodec):
        return request, api.codec
    return request, api.codec.counting_missing_usage(partial(turn.relay.count, STREAMS_WITHOUT_USAGE))


def _provider(provider: str | endpoints.Endpoint | None) -> endpoints.Endpoint | None:
    if provider is None or isinstance(provider, endpoints.Endpoint):
        return provider
    return endpoints.named(provider)


def complete(
    client: Any, kwargs: Mapping[str, Any], *, api_mode: str | None = None, include_usage: bool = False,
    sdk_method: Callable[..., Any] | None = None, provider: str | endpoints.Endpoint | None = None,
) -> Any:
    """``create(**kwargs)`` on the client's API as a managed attempt; returns the SDK's response.

    With ``"stream": True`` in ``kwargs`` it is ``stream()``: a managed stream, as the SDK returns one.
    ``provider="groq"`` names the provider the call reaches, over the route's and the base URL's.
    """
    if kwargs.get("stream") if type(kwargs) is dict else _wants_stream(kwargs):
        return stream(
            client, kwargs, api_mode=api_mode, include_usage=include_usage, sdk_method=sdk_method, provider=provider
        )
    api, create, request, name, model_name, metadata, auxiliary_attempt = prepare(
        kwargs, api_mode, client, "complete", _provider(provider)
    )
    return calls.execute_current(
        request,
        sync_callback(sdk_method or create, client, api),
        name=name,
        model_name=model_name,
        metadata=metadata,
        defer_logical_completion=auxiliary_attempt,
        codec=api.codec,
    )


async def acomplete(
    client: Any, kwargs: Mapping[str, Any], *, api_mode: str | None = None, include_usage: bool = False,
    sdk_method: Callable[..., Any] | None = None, provider: str | endpoints.Endpoint | None = None,
) -> Any:
    if _wants_stream(kwargs):
        return await astream(
            client, kwargs, api_mode=api_mode, include_usage=include_usage, sdk_method=sdk_method, provider=provider
        )
    api, create, request, name, model_name, metadata, auxiliary_attempt = prepare(
        kwargs, api_mode, client, "acomplete", _provider(provider)
    )
    return await calls.execute_current_async(
        request,
        async_callback(sdk_method or create, client, api),
        name=name,
        model_name=model_name,
        metadata=metadata,
        defer_logical_completion=auxiliary_attempt,
        codec=api.codec,
    )


def stream(client: Any, kwargs: Mapping[str, Any], *, api_mode: str | None = None, include_usage: bool = False,
    sdk_method: Callable[..., Any] | None = None, provider: str | endpoints.Endpoint | None = None,
) -> Any:
    """``create(**kwargs, stream=True)`` as a managed attempt; iterating yields the SDK's own chunks.

    ``include_usage=True`` asks an OpenAI chat stream for its token usage (one more chunk).
    """
    prepared = prepare(kwargs, api_mode, client, "stream", _provider(provider))
    api, create, request, name, model_name, metadata, _ = prepared
    request, codec = _stream_usage(api, request, include_usage)
    return calls.stream_current(
        request,
        sync_callback(sdk_method or create, client, api),
        name=name,
        model_name=model_name,
        metadata=metadata,
        codec=codec,
    )


async def astream(
    client: Any, kwargs: Mapping[str, Any], *, api_mode: str | None = None, include_usage: bool = False,
    sdk_method: Callable[..., Any] | None = None, provider: str | endpoints.Endpoint | None = None,
) -> Any:
    prepared = prepare(kwargs, api_mode, client, "astream", _provider(provider))
    api, create, request, name, model_name, metadata, _ = prepared
    request, codec = _stream_usage(api, request, include_usage)
    return await calls.stream_current_async(
        request,
        async_callback(sdk_method or create, client, api),
        name=name,
        model_name=model_name,
        metadata=metadata,
        codec=codec,
    )
