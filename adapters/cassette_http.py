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
import importlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx2

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets
from relay_runtime.codec import LLMCodec

from . import sdk_retries

_tape: ContextVar[cassettes.CallTape | None] = ContextVar("relay_cassette_tape", default=None)
_install_lock = threading.Lock()

# Response headers a replay must not repeat: the body is stored decoded, and transport
# framing (and the date) would only make every re-recording a diff.
_DROPPED_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date"}
)
_SSE = "text/event-stream"


# -- the call ----------------------------------------------------------------------------


@contextmanager
def bound(client: Any, codec: LLMCodec, kwargs: Mapping[str, Any]) -> Iterator[cassettes.CallTape]:
    """Around one ``create(**kwargs)`` while a cassette is in use: its HTTP tries play (or record) the tape.

    Raises ``CassetteMiss`` before the SDK runs when nothing recorded matches. A miss
    the SDK hits later (more tries than recorded) comes out as that miss, even if the
    SDK wrapped it in an error of its own.
    """
    cassette = cassettes.current()
    if cassette is None:
        raise cassettes.CassetteError("no cassette is in use")
    _install(client)
    tape = cassette.begin(cassettes.neutral_request(codec.decode(kwargs)))
    token = _tape.set(tape)
    try:
        yield tape
    except Exception as exc:
        if tape.miss is not None and exc is not tape.miss:
            raise tape.miss from exc
        raise
    finally:
        _tape.reset(token)


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
# The SDK type ``create()`` parses a non-streamed answer into, per API (imported on first use).
_RESPONSE_TYPES = {
    "chat_completions": ("openai.types.chat", "ChatCompletion"),
    "responses": ("openai.types.responses", "Response"),
    "anthropic_messages": ("anthropic.types", "Message"),
}


def direct_reply(tape: cassettes.CallTape, client: Any, api_mode: str) -> Any:
    """A recorded single 2xx JSON answer, parsed by the SDK client's own response parser; else ``NOT_DIRECT``.

    The SDK's request building and HTTP round trip are most of what a replay would
    cost, and with one successful try there is no retry or error for them to replay.
    Everything else (retries, errors, streams, recorded timing, strict validation,
    an SDK this does not know) goes through the HTTP layer.
    """
    if not tape.replaying or tape.timing != "instant" or tape.request.get("stream"):
        return NOT_DIRECT
    exchanges = tape.record.get("http")
    if not isinstance(exchanges, list) or len(exchanges) != 1 or not isinstance(exchanges[0], dict):
        return NOT_DIRECT
    exchange = exchanges[0]
    status = exchange.get("status")
    if type(status) is not int or not 200 <= status < 300 or "body" not in exchange or "error" in exchange:
        return NOT_DIRECT
    parse = getattr(client, "_process_response_data", None)
    ids = _ids_writer(client)
    cast_to = _response_type(api_mode)
    if parse is None or ids is None or cast_to is None or getattr(client, "_strict_response_validation", True):
        return NOT_DIRECT
    headers = exchange.get("headers") or {}
    tape.next()
    # A fresh copy: the caller may change the object it gets, and the SDK keeps nested dicts as given.
    parsed = parse(data=json.loads(json.dumps(exchange["body"])), cast_to=cast_to, response=None)
    ids(parsed, headers)
    sdk_retries.answered_without_http(client)
    return parsed


def _response_type(api_mode: str) -> Any:
    where = _RESPONSE_TYPES.get(api_mode)
    if where is None:
        return None
    try:
        return getattr(importlib.import_module(where[0]), where[1])
    except (ImportError, AttributeError):
        return None


def _ids_writer(client: Any) -> Callable[[Any, Mapping[str, str]], None] | None:
    """How the client's SDK puts the ids it reads off response headers onto a parsed response."""
    sdk = type(client).__module__.partition(".")[0]
    try:
        if sdk == "openai":
            from openai._models import add_request_id

            return lambda parsed, headers: add_request_id(parsed, headers.get("x-request-id"))
        if sdk == "anthropic":
            from anthropic._models import add_response_ids

            return lambda parsed, headers: add_response_ids(
                parsed, request_id=headers.get("request-id"), workspace_id=headers.get("anthropic-workspace-id")
            )
    except ImportError:
        return None
    return None


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


def _begin_recording(tape: cassettes.CallTape, request: httpx2.Request) -> tuple[dict[str, Any], float]:
    # Request headers are never stored; their credential values are remembered so the
    # cassette can be scrubbed of them wherever a provider echoes them back.
    tape.add_secrets(secrets.secret_values(request.headers.raw))
    exchange = tape.add(item={"method": request.method, "path": request.url.raw_path.decode("ascii", "replace")})
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

    def __iter__(self) -> Iterator[bytes]:
        with self.log.reading():
            for chunk in self.response.iter_bytes():
                self.log.feed(chunk)
                yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
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


def _replayed(exchange: dict[str, Any], request: httpx2.Request, tape: cassettes.CallTape) -> httpx2.Response:
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


def _frames(events: list[Any]) -> list[tuple[float, bytes]]:
    """Each recorded event as SSE bytes, with the seconds to wait before it (for recorded timing)."""
    frames: list[tuple[float, bytes]] = []
    last = 0.0
    for event in events:
        if not isinstance(event, dict):
            continue
        lines = [f"{name}: {event[name]}" for name in ("event", "id", "retry") if name in event]
        data = event.get("data", "")
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        lines.extend(f"data: {line}" for line in text.split("\n"))
        at = event.get("at_ms")
        at = float(at) if isinstance(at, int | float) else last
        frames.append((max(0.0, at - last) / 1000, ("\n".join(lines) + "\n\n").encode("utf-8")))
        last = max(last, at)
    return frames


class _ReplayBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """Recorded SSE events one per read, optionally at their recorded pace, then the recorded failure."""

    def __init__(self, frames: list[tuple[float, bytes]], error: Exception | None, *, timed: bool) -> None:
        self.frames = frames
        self.error = error
        self.timed = timed

    def __iter__(self) -> Iterator[bytes]:
        for gap, frame in self.frames:
            if self.timed and gap:
                time.sleep(gap)
            yield frame
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for gap, frame in self.frames:
            if self.timed and gap:
                await asyncio.sleep(gap)
            yield frame
        if self.error is not None:
            raise self.error
