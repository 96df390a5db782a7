"""A cassette's single recorded answer made into what the SDK's ``create()`` returns, with no HTTP round trip."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import httpx2

try:  # how the httpx2 client hands a streamed response on; without it, streams replay over HTTP
    from httpx2._client import BoundAsyncStream, BoundSyncStream
except ImportError:  # pragma: no cover - an httpx2 that moved them
    BoundAsyncStream = BoundSyncStream = None  # type: ignore[assignment,misc]

from relay_runtime import cassettes

from . import cassette_items, cassette_replay, sdk_retries
from .cassette_damage import damage

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
    if damage(exchange) is not None:
        return None  # the HTTP path tells what is wrong with it
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
    cut = cassette_replay.past_cut(tape, len(events)) if exchange.get("cut") else None
    http = client._client
    request = _request(str(exchange.get("method") or "POST"), _url(client._base_url, path))
    # Instant timing: the whole body in one read, as a mock transport gives it (the SDK splits the events).
    # Encoded only if read: the stream below is given its items without reading the body.
    body = cassette_replay.ReplayBody(lambda: [(0.0, cassette_replay.sse_body(events))], cut, timed=False)
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
        stream.__dict__["_iterator"] = items(raws, builder, client, sdk.chunk_type, response, cut)
    return stream


def _item(
    raw: bytes, builder: cassette_items.ItemBuilder | None, client: Any, cast_to: Any, response: httpx2.Response | None
) -> Any:
    """The SDK object for one recorded JSON text: the builder's, else the SDK's parser's (as live)."""
    item = builder.build(raw) if builder is not None else cassette_items.NOT_BUILT
    if item is cassette_items.NOT_BUILT:
        item = client._process_response_data(data=json.loads(raw), cast_to=cast_to, response=response)
    return item


_Cut = Callable[[], Exception] | None


def _built(
    raws: list[bytes],
    builder: cassette_items.ItemBuilder,
    client: Any,
    cast_to: Any,
    response: httpx2.Response,
    cut: _Cut,
) -> Iterator[Any]:
    """Each item, built as it is asked for (as the SDK's stream parses each event as it is read);
    past the last, what a recording cut short raises (see ``cassette_replay.past_cut``)."""
    build = builder.build
    for raw in raws:
        item = build(raw)
        yield item if item is not cassette_items.NOT_BUILT else _item(raw, None, client, cast_to, response)
    if cut is not None:
        raise cut()


def _items(
    raws: list[bytes],
    builder: cassette_items.ItemBuilder,
    client: Any,
    cast_to: Any,
    response: httpx2.Response,
    cut: _Cut = None,
) -> Iterator[Any]:
    try:
        yield from _built(raws, builder, client, cast_to, response, cut)
    finally:
        response.close()  # as the SDK's stream does when read to the end, broken off or collected


async def _aitems(
    raws: list[bytes],
    builder: cassette_items.ItemBuilder,
    client: Any,
    cast_to: Any,
    response: httpx2.Response,
    cut: _Cut = None,
) -> AsyncIterator[Any]:
    try:
        for item in _built(raws, builder, client, cast_to, response, cut):
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
