"""``google-genai`` requests as managed attempts: what one API client adds around each HTTP request.

The SDK's per-request methods (``Models._generate_content`` / ``_generate_content_stream`` /
``_embed_content`` and their ``AsyncModels`` twins) each send one request, retried by tenacity
around ``BaseApiClient._request_once``. Each such method call is one attempt; ``tries`` counts
its HTTP tries (no try at all marks the attempt ``relay.sent: False``) and plays a bound
cassette there. The client's API key is remembered as a secret before every call, so an
error echoing it never records it.

``logical.py`` groups the attempts a public call makes (automatic function calling, automatic
continuation) into one logical call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from relay_runtime import calls, cassettes, redaction, session
from relay_runtime import conventions as cv
from relay_runtime.attempt import Attempt, current_attempt
from relay_runtime.auxiliary import current_route, next_attempt_metadata
from relay_runtime.streams import ManagedStream
from relay_runtime.types import LLMRequest, request_taking
from relay_runtime.urls import server_address

from . import answers, cassette, logical, tries
from .codec import CODECS, GEMINI, VERTEX, EmbedContentCodec, GenerateContentCodec

GENERATE, STREAM, EMBED = "generate", "stream", "embed"
_STATE = "_relay_genai_state"
_TRIES = ("_request_once", "_async_request_once")
_TRANSPORT = "http_options"
_EXTRA_BODY = "extra_body"  # of the http_options: JSON the SDK merges into the request's body
_inside = logical.inside_attempt


def codec_for(provider: str, kind: str) -> Any:
    codec = CODECS.get((provider, kind))
    if codec is None:  # a caller's own name for the provider (instrument(client, provider=...))
        codec = EmbedContentCodec(provider) if kind == EMBED else GenerateContentCodec(provider, kind == STREAM)
        CODECS[(provider, kind)] = codec
    return codec


class ClientState:
    """What one API client contributes to every attempt, worked out on its first managed call."""

    __slots__ = ("key", "metadata", "provider")

    def __init__(self, api_client: Any) -> None:
        self.provider = VERTEX if getattr(api_client, "vertexai", False) else GEMINI
        metadata: dict[str, Any] = {}
        options = getattr(api_client, "_http_options", None)
        address = server_address(getattr(options, "base_url", None))
        if address:
            metadata[cv.SERVER_ADDRESS] = address
        location = getattr(api_client, "location", None)
        if self.provider == VERTEX and isinstance(location, str) and location:
            metadata[cv.CLOUD_REGION] = location
        self.metadata = metadata
        key = getattr(api_client, "api_key", None)
        self.key: str | None = key if isinstance(key, str) and key else None
        redaction.remember_secret(self.key)
        tries.install(api_client)
        answers.load_sdk()


def state_of(api_client: Any) -> ClientState:
    state = api_client.__dict__.get(_STATE)
    if state is None:
        state = api_client.__dict__[_STATE] = ClientState(api_client)
    return state


# -- one attempt -----------------------------------------------------------------------------------


def _tag(error: BaseException) -> None:
    """An ``APIError`` says its API status (``RESOURCE_EXHAUSTED`` for throttling) as its error type."""
    status = getattr(error, "status", None)
    if isinstance(status, str) and status and isinstance(getattr(error, "code", None), int):
        error.relay_error_type = status  # type: ignore[attr-defined]


def _sent_nothing() -> None:
    attempt = current_attempt()
    if attempt is not None and cv.SDK_RETRIES not in attempt.metadata:
        attempt.metadata[cv.SENT] = False  # refused before any HTTP try (the SDK's own checks)


def _without_transport(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``kwargs`` with no ``http_options`` in their config, and those options (None when there are none).

    The options are transport (headers, base URL, the HTTP client's arguments), and a caller's key or token
    travels in their headers: the request the records hold is made without them, and they go back on
    when it is sent (``_with_transport``). The SDK's config objects pass the records' walk as they are.
    Their ``extra_body`` is no transport: the SDK merges it into the JSON it sends, so it stays on the
    request as ``extra_body``, as the openai SDK's is (redaction reads it, a cassette matches on it).
    """
    config = kwargs.get("config")
    if config is None:
        return kwargs, None
    if isinstance(config, Mapping):
        options = config.get(_TRANSPORT)
        if options is None:
            return kwargs, None
        kwargs = {**kwargs, "config": {k: v for k, v in config.items() if k != _TRANSPORT}}
    else:
        options = getattr(config, _TRANSPORT, None)
        if options is None:
            return kwargs, None
        kwargs = {**kwargs, "config": config.model_copy(update={_TRANSPORT: None})}
    extra = options.get(_EXTRA_BODY) if isinstance(options, Mapping) else getattr(options, _EXTRA_BODY, None)
    if extra is None:
        return kwargs, options
    if isinstance(options, Mapping):
        options = {k: v for k, v in options.items() if k != _EXTRA_BODY}
    else:
        options = options.model_copy(update={_EXTRA_BODY: None})
    return {**kwargs, _EXTRA_BODY: extra}, options


def _with_transport(config: Any, options: Any, headers: Any, extra: Any = None) -> Any:
    """``config`` with the caller's ``http_options`` (``options``) back on, an intercept's ``headers`` added,
    and the request's ``extra_body`` (``extra``) in them."""
    if headers or extra is not None:
        from google.genai import types

        if options is None:
            options = types.HttpOptions()
        elif isinstance(options, dict):
            options = types.HttpOptions(**options)
        update: dict[str, Any] = {_EXTRA_BODY: extra} if extra is not None else {}
        if headers:
            update["headers"] = {**(options.headers or {}), **headers}
        options = options.model_copy(update=update)
    if config is None:
        config = {}
    if isinstance(config, Mapping):
        return {**config, _TRANSPORT: options}
    return config.model_copy(update={_TRANSPORT: options})


class Call:
    """One attempt's identity, worked out before anything is recorded or sent, and the attempt itself when it is
    made directly of its public method's logical call (``attempt``; None when it is not in one, or that call no
    longer takes attempts: then ``options`` go to ``calls``)."""

    __slots__ = (
        "attempt", "codec", "group", "kwargs", "metadata", "model", "name", "opens", "request", "sent", "state",
        "transport", "wrapped",
    )  # fmt: skip

    def __init__(
        self,
        models: Any,
        wrapped: Callable[..., Any],
        kind: str,
        kwargs: dict[str, Any],
        provider: str | None,
        opens: bool = False,
    ) -> None:
        self.wrapped = wrapped  # what ``send`` calls: the SDK's method
        # A sync stream's: ``send`` opens what the method returns (``_opened``: its first chunk read), in its guards.
        self.opens = opens
        api_client = models._api_client
        self.state = state = api_client.__dict__.get(_STATE) or state_of(api_client)
        key = state.key
        # Remembered again before every call (the newest keys are kept, and tests forget them), but looked for
        # first without ``remember_secret``'s frame: it is there on every call after the first.
        if key is not None and key not in redaction._secrets:
            redaction.remember_secret(key)
        # The provider: ``instrument(client, provider=...)``, then ``set_route``'s, then the client's own.
        if provider:
            name = provider
        else:
            route = current_route()
            name = (route.provider if route is not None else None) or state.provider
        self.name = name
        # The logical call its public method opened (the attempt is made of it), else its own logical call's
        # identity (an ``@auxiliary_call``'s next attempt, or none).
        group = self.group = logical.current.get()
        self.metadata = next_attempt_metadata() if group is None else None
        self.codec = codec = CODECS.get((name, kind)) or codec_for(name, kind)  # the lookup without a frame, mostly
        model = kwargs.get("model")
        self.model = model = model if isinstance(model, str) else None
        # ``_without_transport``'s first test, without its frame: the SDK's own calls mostly pass no config.
        if kwargs.get("config") is None:
            self.transport = None
        else:
            kwargs, self.transport = _without_transport(kwargs)
        # Its own dict (the ``**kwargs`` the SDK's call made, or ``_without_transport``'s new one): taken, not copied.
        self.kwargs = kwargs
        self.request = request = request_taking(kwargs)
        self.sent = False  # whether the SDK method was called for this attempt yet
        self.attempt: Attempt | None = None
        if group is None:
            return
        # Made here, not in a method of its own: one frame fewer on every grouped attempt.
        turn = group.turn
        if session.managed_turn() is not turn:
            return
        if kind == STREAM:
            # Opened with ``relay.llm.open_stream``. The client's metadata leads the attempt's own, as it does when
            # ``options`` go to ``calls.stream_current``; it is the adapter's own (``ClientState``), merged as it is
            # below, not read for credentials on every attempt.
            # Positionally (``streaming``, ``metadata``, ``clean``): keywords are matched by name on every call.
            self.attempt = calls.attempt_of(turn, group.call, request, name, model, codec, True, state.metadata, True)
        else:
            self.attempt = attempt = calls.attempt_of(turn, group.call, request, name, model, codec)
            if attempt is not None and state.metadata:
                attempt.metadata.update(state.metadata)

    def options(self) -> dict[str, Any]:
        """``calls.execute_current`` / ``stream_current``'s keyword arguments for this attempt."""
        state = self.state
        group = self.group
        metadata = group.metadata if group is not None else self.metadata
        return {
            "name": self.name, "model_name": self.model,
            # The client's own dict when there is nothing to add: the attempt's is made of it, never it.
            "metadata": {**state.metadata, **metadata} if metadata else state.metadata,
            "codec": self.codec, "defer_logical_completion": group is not None or metadata is not None,
        }  # fmt: skip

    def arguments(self, request: LLMRequest) -> tuple[dict[str, Any], cassette.Bound | None]:
        """What the SDK method is called with for ``request``, and the cassette tape bound around it, if one is
        in use."""
        if self.sent:  # an execution intercept's second call counts afresh (the first finds no count to drop)
            attempt = current_attempt()
            if attempt is not None:
                attempt.metadata.pop(cv.SDK_RETRIES, None)
        self.sent = True
        headers = request._headers  # raw_headers(), without the call
        kwargs = self.kwargs
        extra = None
        if request is not self.request or headers or self.transport is not None or _EXTRA_BODY in kwargs:
            # A copy of the request's content (``request.kwargs()`` without its frame). A plain dict to splat: the
            # read-only view itself would cost the splat a generic mapping merge (its keys(), then a lookup per
            # key), several times a dict's copy.
            content = request._content
            kwargs = content.copy() if type(content) is MappingProxyType else dict(content)
            extra = kwargs.pop(_EXTRA_BODY, None)
            if headers or extra is not None or self.transport is not None:
                # The caller's http_options, kept off the record, go back on; headers an intercept added travel in
                # them.
                kwargs["config"] = _with_transport(kwargs.get("config"), self.transport, headers, extra)
        # Else the request is the one the SDK's call made, with nothing to put back on: its own dict, splatted as it
        # is (the splat only reads it, and nothing else writes to it), not a copy of it.
        return kwargs, self.bound(kwargs, extra) if cassettes.current() is not None else None

    def send(self, request: LLMRequest) -> Any:
        """The attempt's provider call: the SDK's method called with ``request``. A bound method is what
        ``relay.llm`` calls: no partial made for every call."""
        kwargs, bound = self.arguments(request)
        try:
            if bound is None:
                return _opened(self.wrapped(**kwargs)) if self.opens else self.wrapped(**kwargs)
            with bound:
                return _opened(self.wrapped(**kwargs)) if self.opens else self.wrapped(**kwargs)
        except BaseException as exc:
            _tag(exc)
            _sent_nothing()
            raise

    async def send_async(self, request: LLMRequest) -> Any:
        kwargs, bound = self.arguments(request)
        try:
            if bound is None:
                return await self.wrapped(**kwargs)
            with bound:
                return await self.wrapped(**kwargs)
        except BaseException as exc:
            _tag(exc)
            _sent_nothing()
            raise

    def bound(self, kwargs: Mapping[str, Any], extra: Any) -> cassette.Bound:
        """The tape of the cassette in use (the caller checked there is one) bound around the SDK call;
        ``extra``: the ``extra_body`` sent with it."""
        key = self.state.key
        return cassette.Bound(self.codec, kwargs, {key} if key else set(), extra)


# Each ``managed_*`` is an instrumented per-request method with its first four arguments bound (``__init__._attempt``):
# it gets the SDK's own arguments as the SDK passed them. Positional ones are a call shape the SDK refuses itself;
# inside another managed attempt (dispatch's own SDK call, a LangChain chat model under RelayMiddleware) the
# request is that attempt already: either way the method is called as it is.


def _entry(body: Callable[..., Any], doc: str) -> Callable[..., Any]:
    """A ``managed_*`` method that passes the call through as above, else has ``body(models, wrapped, kind, kwargs,
    provider)`` make it. (``managed_call``, on every plain call, does its work in its own frame instead.)"""

    def entry(
        models: Any, wrapped: Callable[..., Any], kind: str, provider: str | None, /, *args: Any, **kwargs: Any
    ) -> Any:
        if args or _inside.get():
            return wrapped(*args, **kwargs)
        return body(models, wrapped, kind, kwargs, provider)

    entry.__doc__ = doc
    return entry


def managed_call(
    models: Any, wrapped: Callable[..., Any], kind: str, provider: str | None, /, *args: Any, **kwargs: Any
) -> Any:
    """``wrapped(**kwargs)`` (``_generate_content`` or ``_embed_content``) as one attempt."""
    if args or _inside.get():
        return wrapped(*args, **kwargs)
    call = Call(models, wrapped, kind, kwargs, provider)
    attempt = call.attempt
    if attempt is not None:
        return attempt.relay.llm.run(attempt, call.send)
    return calls.execute_current(call.request, call.send, **call.options())


async def _call_async(
    models: Any, wrapped: Callable[..., Any], kind: str, kwargs: dict[str, Any], provider: str | None
) -> Any:
    call = Call(models, wrapped, kind, kwargs, provider)
    attempt = call.attempt
    if attempt is not None:
        return await attempt.relay.llm.run_async(attempt, call.send_async)
    return await calls.execute_current_async(call.request, call.send_async, **call.options())


def _opened(source: Iterator[Any]) -> Iterator[Any]:
    """A sync stream opened now: its first chunk read (the request sent, retried or refused here), then the rest.

    The rest is a generator's: each chunk passes through its frame without a Python ``__next__`` call, and
    its end is the generator's return, not a ``StopIteration`` raised through one more frame.
    """
    for first in source:
        rest = _rest(first, source)
        next(rest)  # started: closed before its first chunk is read, it still closes the source
        return rest
    return source  # no chunk at all: read out already


def _rest(first: Any, source: Iterator[Any]) -> Iterator[Any]:
    try:
        yield None  # where ``_opened`` starts it
        yield first
        yield from source
    except GeneratorExit:  # closed early: ``yield from`` closes the source itself, but not while at ``first``
        close = getattr(source, "close", None)
        if close is not None:
            close()
        raise
    except Exception as exc:
        _tag(exc)
        raise


def _stream(
    models: Any, wrapped: Callable[..., Any], kind: str, kwargs: dict[str, Any], provider: str | None
) -> Iterator[Any]:
    # Sent, the stream is opened too: its first chunk read, the request sent (or refused) inside ``send``.
    call = Call(models, wrapped, kind, kwargs, provider, True)
    attempt = call.attempt
    if attempt is not None:
        stream = attempt.relay.llm.open_stream(attempt, call.send)
    else:
        stream = calls.stream_current(call.request, call.send, **call.options())
    try:
        # A managed stream's chunks through its generator (``chunks``): a generator's step per chunk, not a call.
        yield from stream.chunks() if type(stream) is ManagedStream else stream
    except BaseException:  # closed early (GeneratorExit), or the stream failed: it closes its source now
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        raise
    # Read out: the managed stream ended its attempt, and its source is read out too, as any managed stream's a
    # caller reads to its end: nothing to close.


class _Tagging:
    """An async stream whose errors carry their API status (see ``_tag``)."""

    __slots__ = ("source",)

    def __init__(self, source: Any) -> None:
        self.source = source

    def __aiter__(self) -> _Tagging:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.source.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            _tag(exc)
            raise

    async def aclose(self) -> None:
        close = getattr(self.source, "aclose", None)
        if close is not None:
            await close()


async def _stream_async(
    models: Any, wrapped: Callable[..., Any], kind: str, kwargs: dict[str, Any], provider: str | None
) -> AsyncIterator[Any]:
    call = Call(models, wrapped, kind, kwargs, provider)

    async def open_stream(request: LLMRequest) -> Any:
        return _Tagging(await call.send_async(request))

    attempt = call.attempt
    if attempt is not None and call.group is not None:
        stream = await attempt.relay.llm.open_stream_async(attempt, open_stream)
        call.group.keep(stream)  # closed with the public stream
        return stream
    return await calls.stream_current_async(call.request, open_stream, **call.options())


managed_call_async = _entry(_call_async, "``managed_call`` for ``AsyncModels``: the awaitable the SDK awaits.")
# ``kind`` is ``STREAM`` for the streams: every ``managed_*`` takes the same arguments.
managed_stream = _entry(
    _stream, "``_generate_content_stream(**kwargs)`` as one streamed attempt; lazy, as the SDK's own generator is."
)
managed_stream_async = _entry(
    _stream_async,
    "``await AsyncModels._generate_content_stream(**kwargs)`` (which sends the request) as one attempt.",
)
