"""Cassettes for the SDK clients, served at their HTTP layer.

A cassette call is matched on its neutral request (the codec's view of the final
kwargs) before the SDK runs; the SDK then sends its HTTP tries as usual and the
client's transport is swapped, for this call only, for one that plays the tape:
recorded status, headers and body (or SSE events) come back to the SDK, which
parses them into its own ``ChatCompletion``/``Message``/``Stream``, retries a
recorded 500 by itself and raises a recorded error as its own exception class.
So the response types, the SDK's retries and our attempt lifecycle are the live
ones, while the file keeps what a user reads: the request, JSON bodies, events.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib
import inspect
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx2

try:  # how the httpx2 client hands a streamed response on; without it, streams replay over HTTP
    from httpx2._client import BoundAsyncStream, BoundSyncStream
except ImportError:  # pragma: no cover - an httpx2 that moved them
    BoundAsyncStream = BoundSyncStream = None  # type: ignore[assignment,misc]

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets
from relay_runtime.codec import LLMCodec

from . import cassette_items, sdk_retries

_tape: ContextVar[cassettes.CallTape | None] = ContextVar("relay_cassette_tape", default=None)
_install_lock = threading.Lock()

# Response headers a replay must not repeat: the body is stored decoded, and transport
# framing (and the date) would only make every re-recording a diff.
_DROPPED_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date"}
)
_SSE = "text/event-stream"


# -- the call ----------------------------------------------------------------------------


def bound(client: Any, codec: LLMCodec, kwargs: Mapping[str, Any]) -> _Bound:
    """Around one ``create(**kwargs)`` while a cassette is in use: its HTTP tries play (or record) the tape.

    Raises ``CassetteMiss`` before the SDK runs when nothing recorded matches. A miss
    the SDK hits later (more tries than recorded) comes out as that miss, even if the
    SDK wrapped it in an error of its own.
    """
    cassette = cassettes.current()
    if cassette is None:
        raise cassettes.CassetteError("no cassette is in use")
    _install(client)
    return _Bound(cassette.begin(cassettes.neutral_request(codec.decode(kwargs))))


class _Bound:
    """The tape bound for the HTTP tries of one call (a class, not a generator: this runs on every call)."""

    __slots__ = ("tape", "token")

    def __init__(self, tape: cassettes.CallTape) -> None:
        self.tape = tape

    def __enter__(self) -> cassettes.CallTape:
        self.token = _tape.set(self.tape)
        return self.tape

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        _tape.reset(self.token)
        miss = self.tape.miss
        if miss is not None and isinstance(exc, Exception) and exc is not miss:
            raise miss from exc


def _install(client: Any) -> None:
    """Route the client's HTTP through the tape transport when a tape is bound; a no-op once installed."""
    http = getattr(client, "_client", None)
    original = getattr(http, "_transport_for_url", None)
    if not isinstance(http, httpx2.Client | httpx2.AsyncClient) or original is None:
        raise cassettes.CassetteError(
            f"cassettes need the SDK's httpx2 client; {type(client).__name__} has none this adapter knows"
        )
    if getattr(original, "relay_cassette", False):
        return
    with _install_lock:
        original = http._transport_for_url
        if getattr(original, "relay_cassette", False):
            return
        is_async = isinstance(http, httpx2.AsyncClient)

        def routed(url: httpx2.URL) -> Any:
            transport = original(url)
            tape = _tape.get()
            if tape is None:
                return transport
            if is_async:
                return _AsyncTapeTransport(transport, tape)  # type: ignore[arg-type]
            return _SyncTapeTransport(transport, tape)  # type: ignore[arg-type]

        routed.relay_cassette = True  # type: ignore[attr-defined]
        # The client is shared by the SDK client's copies (with_options): installed once for all.
        http._transport_for_url = routed  # type: ignore[method-assign]


# -- direct replay -----------------------------------------------------------------------

NOT_DIRECT: Any = object()


class _SdkReplay:
    """What a direct replay needs to know of one SDK client class and API (built once, then cached)."""

    __slots__ = ("chunk_type", "ids", "is_async", "items", "iterator_cached", "response_type", "stream_cls", "usual")

    def __init__(
        self,
        response_type: Any,
        chunk_type: Any,
        stream_cls: Any,
        ids: Callable[[Any, Mapping[str, str]], None],
        usual: Callable[[Any, Mapping[str, Any]], bool],
        items: Callable[[list[Any]], list[bytes] | None],
        is_async: bool,
    ) -> None:
        self.response_type = response_type
        self.chunk_type = chunk_type
        self.stream_cls = stream_cls  # subscripted, as create() passes it: the stream gets the same __orig_class__
        self.ids = ids
        self.usual = usual
        self.items = items
        self.is_async = is_async
        # Whether the stream class makes its item iterator on first use (else it sets it in __init__).
        self.iterator_cached = isinstance(
            inspect.getattr_static(stream_cls.__origin__, "_iterator", None), functools.cached_property
        )


# Per API: the SDK, the type a non-streamed answer is parsed into, the type of a stream's items.
_TYPES = {
    "chat_completions": (
        "openai",
        ("openai.types.chat", "ChatCompletion"),
        ("openai.types.chat", "ChatCompletionChunk"),
    ),
    "responses": ("openai", ("openai.types.responses", "Response"), ("openai.types.responses", "ResponseStreamEvent")),
    "anthropic_messages": ("anthropic", ("anthropic.types", "Message"), ("anthropic.types", "RawMessageStreamEvent")),
}
_SDKS: dict[tuple[type, str], _SdkReplay | None] = {}
# Client attributes a direct replay uses in place of the SDK's request path: without one, the HTTP path.
_NEEDED = ("_process_response_data", "_make_sse_decoder", "_base_url", "_strict_response_validation")


def _sdk_replay(client: Any, api_mode: str) -> _SdkReplay | None:
    key = (type(client), api_mode)
    try:
        return _SDKS[key]
    except KeyError:
        pass
    try:
        profile = _load_sdk_replay(client, api_mode)
    except (ImportError, AttributeError):
        profile = None
    _SDKS[key] = profile
    return profile


def _load_sdk_replay(client: Any, api_mode: str) -> _SdkReplay | None:
    types = _TYPES.get(api_mode)
    sdk = type(client).__module__.partition(".")[0]
    http = getattr(client, "_client", None)
    if types is None or sdk != types[0] or not isinstance(http, httpx2.Client | httpx2.AsyncClient):
        return None
    if not all(hasattr(client, name) for name in _NEEDED):
        return None
    response_type = getattr(importlib.import_module(types[1][0]), types[1][1])
    chunk_type = getattr(importlib.import_module(types[2][0]), types[2][1])
    streaming = importlib.import_module(f"{sdk}._streaming")
    is_async = isinstance(http, httpx2.AsyncClient)
    stream_cls = (streaming.AsyncStream if is_async else streaming.Stream)[chunk_type]
    if sdk == "openai":
        from openai._models import add_request_id

        def openai_ids(parsed: Any, headers: Mapping[str, str]) -> None:
            add_request_id(parsed, headers.get("x-request-id"))

        return _SdkReplay(response_type, chunk_type, stream_cls, openai_ids, _always, _openai_items, is_async)
    from anthropic._data import DEPRECATED_MODELS, MODELS_TO_WARN_WITH_THINKING_ENABLED
    from anthropic._models import add_response_ids

    warned = frozenset(DEPRECATED_MODELS) | frozenset(MODELS_TO_WARN_WITH_THINKING_ENABLED)

    def anthropic_ids(parsed: Any, headers: Mapping[str, str]) -> None:
        add_response_ids(
            parsed, request_id=headers.get("request-id"), workspace_id=headers.get("anthropic-workspace-id")
        )

    def anthropic_usual(client: Any, request: Mapping[str, Any]) -> bool:
        # Its own spans and middleware run around the HTTP tries, and create() warns of some
        # models before sending: a replay must do all of that as live, so through the HTTP path.
        return client._tracer is None and not client._middleware and request.get("model") not in warned

    return _SdkReplay(response_type, chunk_type, stream_cls, anthropic_ids, anthropic_usual, _anthropic_items, is_async)


def _always(client: Any, request: Mapping[str, Any]) -> bool:
    return True


def _openai_items(events: list[Any]) -> list[bytes] | None:
    return _item_texts(events, openai=True)


def _anthropic_items(events: list[Any]) -> list[bytes] | None:
    return _item_texts(events, openai=False)


def _item_texts(events: list[Any], *, openai: bool) -> list[bytes] | None:
    """What the SDK's stream makes of the recorded events: the JSON text of each item it yields, in order.

    None where it would take another way: an error event (it raises; see ``_plain_event``),
    text data, Assistants events; the SDK's own stream then reads the recorded body.
    """
    raws = []
    to_text = cassette_items.json_text
    for event in events:
        if type(event) is not dict:
            return None
        name, data = event.get("event"), event.get("data")
        if name == "error" or (type(data) is dict and data.get("error")):
            return None
        if openai:
            if type(data) is str and data.startswith("[DONE]"):
                break  # the SDK stops reading here
            if type(name) is str and name.startswith("thread."):
                return None
        elif name is None or name == "ping" or data == "":
            continue  # the SDK skips these
        if type(data) is not dict:
            return None
        raws.append(to_text(data))
    return raws


def _single_answer(tape: cassettes.CallTape) -> dict[str, Any] | None:
    """The call's one recorded try when it is a 2xx answer with no failure; None otherwise."""
    exchanges = tape.record.get("http")
    if not isinstance(exchanges, list) or len(exchanges) != 1 or not isinstance(exchanges[0], dict):
        return None
    exchange = exchanges[0]
    status = exchange.get("status")
    if type(status) is not int or not 200 <= status < 300 or "error" in exchange:
        return None
    headers = exchange.get("headers")
    if headers is not None and (not isinstance(headers, dict) or "set-cookie" in headers):
        return None  # the client's cookie jar takes what a live answer sets
    return exchange


def direct_reply(tape: cassettes.CallTape, client: Any, api_mode: str) -> Any:
    """A recorded single 2xx answer, made into what ``create()`` returns by the SDK's own parsing; else ``NOT_DIRECT``.

    The SDK's request building and HTTP round trip are most of what a replay would
    cost, and with one successful try there is no retry or error for them to replay.
    A JSON answer is parsed by the client's own response parser; a stream is the
    SDK's own stream class over a response made of the recorded events, yielding
    items built as it is read (``cassette_items``: as the SDK's parser would build
    them). Everything else (retries, errors, error events, recorded timing, an SDK
    this does not know or whose internals moved) goes through the HTTP layer.
    """
    if not tape.replaying or tape.timing != "instant":
        return NOT_DIRECT
    exchange = _single_answer(tape)
    if exchange is None:
        return NOT_DIRECT
    sdk = _sdk_replay(client, api_mode)
    if sdk is None or not sdk.usual(client, tape.request):
        return NOT_DIRECT
    if tape.request.get("stream"):
        return _direct_stream(tape, exchange, client, sdk)
    if "body" not in exchange or client._strict_response_validation:
        return NOT_DIRECT
    tape.next()
    # Built from the JSON's text, as the SDK builds it from a live body: a fresh object, which
    # the caller may change (the SDK keeps nested dicts as given) without changing the tape.
    builder = cassette_items.builder(sdk.response_type, sdk_validates=False)  # (a validating client: HTTP path)
    parsed = _item(cassette_items.json_text(exchange["body"]), builder, client, sdk.response_type, None)
    sdk.ids(parsed, exchange.get("headers") or {})
    sdk_retries.answered_without_http(client)
    return parsed


def _direct_stream(tape: cassettes.CallTape, exchange: dict[str, Any], client: Any, sdk: _SdkReplay) -> Any:
    events = exchange.get("events")
    path = exchange.get("path")
    if BoundSyncStream is None or not isinstance(events, list) or not isinstance(path, str):
        return NOT_DIRECT
    builder = cassette_items.builder(sdk.chunk_type, sdk_validates=bool(client._strict_response_validation))
    raws = sdk.items(events) if builder is not None else None
    if raws is None and not all(map(_plain_event, events)):
        return NOT_DIRECT
    tape.next()
    http = client._client
    request = _request(str(exchange.get("method") or "POST"), _url(client._base_url, path))
    # Instant timing: the whole body in one read, as a mock transport gives it (the SDK splits the events).
    # Encoded only if read: the stream below is given its items without reading the body.
    body = _ReplayBody(lambda: [(0.0, _sse_body(events))], None, timed=False)
    # As the httpx2 client hands a response on: its request, a stream that times itself, the encoding.
    bound_body = (BoundAsyncStream if sdk.is_async else BoundSyncStream)(body, start=time.perf_counter())
    headers = exchange.get("headers") or {}
    response = httpx2.Response(exchange["status"], headers=headers, stream=bound_body, request=request)
    response.default_encoding = http._default_encoding
    sdk_retries.answered_without_http(client)
    # The request options the SDK would pass only choose its legacy event handling, which None also means.
    stream = sdk.stream_cls(cast_to=sdk.chunk_type, response=response, client=client, options=None)
    if builder is not None and raws is not None and (sdk.iterator_cached or "_iterator" in stream.__dict__):
        # The SDK's own stream object, its iteration, close() and response; only the items are
        # made here (as its parser would), without SSE bytes to split and JSON to parse in Python.
        items = _aitems if sdk.is_async else _items
        stream.__dict__["_iterator"] = items(raws, builder, client, sdk.chunk_type, response)
    return stream


def _item(
    raw: bytes, builder: cassette_items.ItemBuilder | None, client: Any, cast_to: Any, response: httpx2.Response | None
) -> Any:
    """The SDK object for one recorded JSON text: the builder's, else the SDK's parser's (as live)."""
    item = builder.build(raw) if builder is not None else cassette_items.NOT_BUILT
    if item is cassette_items.NOT_BUILT:
        item = client._process_response_data(data=json.loads(raw), cast_to=cast_to, response=response)
    return item


def _built(
    raws: list[bytes], builder: cassette_items.ItemBuilder, client: Any, cast_to: Any, response: httpx2.Response
) -> Iterator[Any]:
    """Each item, built as it is asked for (as the SDK's stream parses each event as it is read)."""
    build = builder.build
    for raw in raws:
        item = build(raw)
        yield item if item is not cassette_items.NOT_BUILT else _item(raw, None, client, cast_to, response)


def _items(
    raws: list[bytes], builder: cassette_items.ItemBuilder, client: Any, cast_to: Any, response: httpx2.Response
) -> Iterator[Any]:
    try:
        yield from _built(raws, builder, client, cast_to, response)
    finally:
        response.close()  # as the SDK's stream does when read to the end, broken off or collected


async def _aitems(
    raws: list[bytes], builder: cassette_items.ItemBuilder, client: Any, cast_to: Any, response: httpx2.Response
) -> AsyncIterator[Any]:
    try:
        for item in _built(raws, builder, client, cast_to, response):
            yield item
    finally:
        await response.aclose()


def _plain_event(event: Any) -> bool:
    """An event the SDK's stream parses into an item: an error event raises, through the HTTP path."""
    if not isinstance(event, dict) or event.get("event") == "error":
        return False
    data = event.get("data")
    return not (isinstance(data, dict) and data.get("error"))


def _request(method: str, url: httpx2.URL) -> httpx2.Request:
    """What ``httpx2.Request(method, url)`` makes (the headers it adds to a bodiless request), made faster.

    A replayed stream's response carries it as the request it answered; building it
    the usual way encodes an empty body for a fifth of a replayed stream's own cost.
    """
    headers = [(b"Host", url.netloc)]
    if method.upper() in ("POST", "PUT", "PATCH", "QUERY"):
        headers.append((b"Content-Length", b"0"))
    request = httpx2.Request(method, url, headers=headers, stream=httpx2.ByteStream(b""))
    request.read()
    return request


_URLS: dict[tuple[httpx2.URL, str], httpx2.URL] = {}


def _url(base: httpx2.URL, path: str) -> httpx2.URL:
    """The URL a live try went to: the client's base URL with the recorded path (URLs are immutable)."""
    key = (base, path)
    url = _URLS.get(key)
    if url is None:
        if len(_URLS) > 256:
            _URLS.clear()
        url = _URLS[key] = base.copy_with(raw_path=path.encode("utf-8"))
    return url


# -- transports --------------------------------------------------------------------------


class _SyncTapeTransport(httpx2.BaseTransport):
    def __init__(self, inner: httpx2.BaseTransport, tape: cassettes.CallTape) -> None:
        self.inner = inner
        self.tape = tape

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        tape = self.tape
        if tape.replaying:
            delay, replayed = _replay(tape, request)
            if delay:
                time.sleep(delay)
            return replayed
        exchange, start = _begin_recording(tape, request)
        with _noting_failure(exchange):
            response = self.inner.handle_request(request)
        streamed = _streamed(exchange, start, response)
        if streamed is not None:
            return streamed
        try:
            return _recorded(exchange, response, response.read())
        finally:
            response.close()


class _AsyncTapeTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, tape: cassettes.CallTape) -> None:
        self.inner = inner
        self.tape = tape

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        tape = self.tape
        if tape.replaying:
            delay, replayed = _replay(tape, request)
            if delay:
                await asyncio.sleep(delay)
            return replayed
        exchange, start = _begin_recording(tape, request)
        with _noting_failure(exchange):
            response = await self.inner.handle_async_request(request)
        streamed = _streamed(exchange, start, response)
        if streamed is not None:
            return streamed
        try:
            return _recorded(exchange, response, await response.aread())
        finally:
            await response.aclose()


# -- recording ---------------------------------------------------------------------------

# Statuses a later try may not meet, as the SDKs judge when they retry by themselves.
_PASSING_STATUSES = frozenset({408, 409, 429})


def ended_transiently(call: dict[str, Any]) -> bool:
    """Whether a recorded call's last HTTP try failed in a way a later try may not: a 408/409/429, a 5xx,
    or a failure with no answer (a lost connection, a timeout, a stream cut short)."""
    tries = call.get("http")
    last = tries[-1] if isinstance(tries, list) and tries else None
    if not isinstance(last, dict):
        return False
    status = last.get("status")
    return "error" in last or (type(status) is int and (status in _PASSING_STATUSES or status >= 500))


cassettes.register_transient_check(ended_transiently)


def _begin_recording(tape: cassettes.CallTape, request: httpx2.Request) -> tuple[dict[str, Any], float]:
    # Request headers are never stored; their credential values are remembered so the
    # cassette can be scrubbed of them wherever a provider echoes them back.
    tape.add_secrets(secrets.secret_values(request.headers.raw))
    # A key may also be sent in the query string (default_query / extra_query).
    path, query_secrets = secrets.redact_query(request.url.raw_path.decode("ascii", "replace"))
    tape.add_secrets(query_secrets)
    exchange = tape.add(item={"method": request.method, "path": path})
    return exchange, time.perf_counter()


@contextmanager
def _noting_failure(exchange: dict[str, Any]) -> Iterator[None]:
    """A transport failure (connection refused, a timeout) is part of the recording: the SDK may retry it."""
    try:
        yield
    except Exception as exc:
        exchange["error"] = _error_record(exc)
        raise


def _streamed(exchange: dict[str, Any], start: float, response: httpx2.Response) -> httpx2.Response | None:
    """The response handed on, its SSE events logged as the SDK reads them; None for a body to read whole."""
    exchange["latency_ms"] = _ms_since(start)
    if not _is_sse(response):
        return None
    headers = _kept(response, exchange)
    return httpx2.Response(response.status_code, headers=headers, stream=_RecordingBody(response, _EventLog(exchange)))


def _ms_since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _is_sse(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == _SSE


def _kept(response: httpx2.Response, exchange: dict[str, Any]) -> dict[str, str]:
    """Record status and headers; the headers handed on to the SDK are the ones a replay gives it."""
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        if name in _DROPPED_HEADERS:
            continue
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    exchange["status"] = response.status_code
    exchange["headers"] = secrets.redact_headers(headers)
    return headers


def _recorded(exchange: dict[str, Any], response: httpx2.Response, body: bytes) -> httpx2.Response:
    headers = _kept(response, exchange)
    exchange.update(_body_record(body))
    return httpx2.Response(response.status_code, headers=headers, content=body)


def _body_record(body: bytes) -> dict[str, Any]:
    """A JSON object or array as itself (readable, diffable); anything else as text or base64."""
    if not body:
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}
    value = _data_record(text)
    return {"text": text} if isinstance(value, str) else {"body": value}


def _error_record(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


class _EventLog:
    """Splits a recorded SSE body into events, each with the time it arrived."""

    def __init__(self, exchange: dict[str, Any]) -> None:
        self.events: list[dict[str, Any]] = exchange.setdefault("events", [])
        self.exchange = exchange
        self.start = time.perf_counter()
        self.buffer = b""

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        text = self.buffer.replace(b"\r\n", b"\n")
        *blocks, rest = text.split(b"\n\n")
        self.buffer = rest
        for block in blocks:
            self._add(block)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around reading the body: a failure mid-stream is recorded, and a last unterminated event kept."""
        try:
            with _noting_failure(self.exchange):
                yield
        finally:
            if self.buffer.strip():
                self._add(self.buffer.replace(b"\r\n", b"\n"))
            self.buffer = b""

    def _add(self, block: bytes) -> None:
        event: dict[str, Any] = {"at_ms": _ms_since(self.start)}
        data: list[str] = []
        for line in block.decode("utf-8", "replace").split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name in ("event", "id", "retry"):
                event[name] = value
        if not data and len(event) == 1:
            return
        event["data"] = _data_record("\n".join(data))
        self.events.append(event)


def _data_record(text: str) -> Any:
    """An event's data: a JSON object or array as itself, anything else (``[DONE]``) as the raw string."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict | list) else text


class _RecordingBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The provider's SSE body passed through unchanged, each event logged as it arrives."""

    def __init__(self, response: httpx2.Response, log: _EventLog) -> None:
        self.response = response
        self.log = log
        self.started = False

    def _second_read(self) -> bool:
        # The async SDK drains a stream at its end marker while still reading it: that
        # second read fails as on any consumed stream, and is no failure of the provider's.
        started, self.started = self.started, True
        return started

    def __iter__(self) -> Iterator[bytes]:
        if self._second_read():
            raise httpx2.StreamConsumed()
        with self.log.reading():
            for chunk in self.response.iter_bytes():
                self.log.feed(chunk)
                yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._second_read():
            raise httpx2.StreamConsumed()
        with self.log.reading():
            async for chunk in self.response.aiter_bytes():
                self.log.feed(chunk)
                yield chunk

    def close(self) -> None:
        self.response.close()

    async def aclose(self) -> None:
        await self.response.aclose()


# -- replaying ---------------------------------------------------------------------------


def _replay(tape: cassettes.CallTape, request: httpx2.Request) -> tuple[float, httpx2.Response]:
    """The next recorded try as the response to give, and how long to wait first."""
    exchange = tape.next()
    return _latency(exchange, tape), _replayed(exchange, request, tape)


def _latency(exchange: dict[str, Any], tape: cassettes.CallTape) -> float:
    if tape.timing != "recorded":
        return 0.0
    latency = exchange.get("latency_ms")
    return max(0.0, float(latency)) / 1000 if isinstance(latency, int | float) else 0.0


def _transport_error(record: Any, request: httpx2.Request) -> Exception:
    """A recorded transport failure as the httpx2 exception it was (a plain TransportError if unknown)."""
    kind = record.get("type") if isinstance(record, dict) else None
    message = str(record.get("message", "")) if isinstance(record, dict) else ""
    cls = getattr(httpx2, kind, None) if isinstance(kind, str) else None
    if isinstance(cls, type) and issubclass(cls, httpx2.RequestError):
        return cls(message, request=request)
    return httpx2.TransportError(f"{kind}: {message}", request=request)


def _damage(exchange: dict[str, Any]) -> str | None:
    """What makes a recorded exchange (a hand-edited one, say) unplayable, or None."""
    status = exchange.get("status")
    if "status" in exchange and (type(status) is not int or not 100 <= status <= 599):
        return f"status {status!r} is not an HTTP status"
    headers = exchange.get("headers")
    if headers is not None and not (
        isinstance(headers, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        return "headers must be an object of strings"
    if "events" in exchange and not isinstance(exchange["events"], list):
        return "events must be a list"
    if "error" in exchange and not isinstance(exchange["error"], dict):
        return "error must be an object"
    if "body" not in exchange and "text" not in exchange and "base64" in exchange:
        try:
            base64.b64decode(str(exchange["base64"]), validate=True)
        except ValueError:
            return "base64 is not base64"
    return None


def _replayed(exchange: dict[str, Any], request: httpx2.Request, tape: cassettes.CallTape) -> httpx2.Response:
    damage = _damage(exchange)
    if damage is not None:
        raise cassettes.CassetteError(
            f"cassette {tape.cassette.path}: a recorded HTTP exchange of this call is damaged: {damage} "
            f"(fix it or re-record)\nrequest:\n{json.dumps(tape.request, ensure_ascii=False)[:500]}"
        )
    if "status" not in exchange:
        raise _transport_error(exchange.get("error"), request)
    headers = dict(exchange.get("headers") or {})
    status = int(exchange["status"])
    if status >= 400 and tape.timing == "instant":
        # The SDK sleeps before a retry as the server's retry-after says (or backs off for
        # seconds without one): instant replay asks it to wait a millisecond instead.
        headers.pop("retry-after", None)
        headers["retry-after-ms"] = "1"
    events = exchange.get("events")
    if events is not None:
        error = _transport_error(exchange["error"], request) if exchange.get("error") else None
        body = _ReplayBody(_frames(events), error, timed=tape.timing == "recorded")
        return httpx2.Response(status, headers=headers, stream=body)
    return httpx2.Response(status, headers=headers, content=_body_bytes(exchange))


def _body_bytes(exchange: dict[str, Any]) -> bytes:
    if "body" in exchange:
        return json.dumps(exchange["body"], ensure_ascii=False).encode("utf-8")
    if "text" in exchange:
        return str(exchange["text"]).encode("utf-8")
    if "base64" in exchange:
        return base64.b64decode(exchange["base64"])
    return b""


# One encoder for all: json.dumps with options builds a new one per call.
_to_json = json.JSONEncoder(ensure_ascii=False).encode


def _frames(events: list[Any]) -> list[tuple[float, bytes]]:
    """Each recorded event as SSE bytes, with the seconds to wait before it (for recorded timing)."""
    frames: list[tuple[float, bytes]] = []
    last = 0.0
    for event in events:
        if not isinstance(event, dict):
            continue
        at = event.get("at_ms")
        at = float(at) if isinstance(at, int | float) else last
        frames.append((max(0.0, at - last) / 1000, _sse(event).encode("utf-8")))
        last = max(last, at)
    return frames


def _sse_body(events: list[Any]) -> bytes:
    """All recorded events as one SSE body (instant timing)."""
    return "".join([_sse(event) for event in events if isinstance(event, dict)]).encode("utf-8")


def _sse(event: dict[str, Any]) -> str:
    head = ""
    for name in ("event", "id", "retry"):
        if name in event:
            head += f"{name}: {event[name]}\n"
    data = event.get("data", "")
    # JSON text has no raw newline; a string may, and each of its lines is a data line.
    text = data.replace("\n", "\ndata: ") if isinstance(data, str) else _to_json(data)
    return f"{head}data: {text}\n\n"


class _ReplayBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """Recorded SSE events one per read, optionally at their recorded pace, then the recorded failure."""

    def __init__(
        self,
        frames: list[tuple[float, bytes]] | Callable[[], list[tuple[float, bytes]]],
        error: Exception | None,
        *,
        timed: bool,
    ) -> None:
        self.frames = frames  # or what makes them, at the first read
        self.error = error
        self.timed = timed
        self.position = 0  # shared by every read, as on a connection: a second read goes on from the first

    def _next(self) -> tuple[float, bytes] | None:
        if callable(self.frames):
            self.frames = self.frames()
        position = self.position
        if position < len(self.frames):
            self.position = position + 1
            return self.frames[position]
        error, self.error = self.error, None
        if error is not None:
            raise error
        return None

    def __iter__(self) -> Iterator[bytes]:
        while (item := self._next()) is not None:
            if self.timed and item[0]:
                time.sleep(item[0])
            yield item[1]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (item := self._next()) is not None:
            if self.timed and item[0]:
                await asyncio.sleep(item[0])
            yield item[1]
