"""Cassettes for ``google-genai`` calls, played at the SDK's own per-try seam: ``BaseApiClient._request_once``.

A call is matched on its neutral request before the SDK runs. Each HTTP try then goes through
the client's ``_request_once`` (``_async_request_once``), which tenacity retries: when replaying,
the try is answered from the tape as an ``httpx2.Response`` whatever HTTP client the SDK would
have used (httpx2, aiohttp, google-auth's requests session), and the SDK parses it, raises its
``APIError`` for an error status and retries as it does live. When recording, the live try runs
and its status, kept headers and body (a stream's SSE events, read whole before the SDK sees them)
are written down. Request headers (``x-goog-api-key``, Vertex's ``Authorization: Bearer``) are
never kept, and their values are cut from whatever is (a provider echoing one).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import httpx2

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets
from relay_runtime.codec import LLMCodec

from ..cassette_damage import damage

tape: ContextVar[cassettes.CallTape | None] = ContextVar("relay_genai_cassette_tape", default=None)
_DROPPED_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "date",
                              "keep-alive", "server-timing", "alt-svc"})  # fmt: skip


class Bound:
    """The tape of one call, bound while the SDK runs it."""

    __slots__ = ("tape", "token")

    def __init__(self, codec: LLMCodec, kwargs: Mapping[str, Any], known_secrets: set[str], extra_body: Any) -> None:
        cassette = cassettes.current()
        if cassette is None:
            raise cassettes.CassetteError("no cassette is in use")
        # Known before the match: a miss raised there is scrubbed of them, as the file is.
        cassette.add_secrets(known_secrets)
        request = cassettes.neutral_request(codec.decode(kwargs))
        if extra_body is not None:  # sent in the body as much as the view is: another extra is another request
            request = cassettes.with_sent_extras(request, {"extra_body": extra_body})
        self.tape = cassette.begin(request)

    def __enter__(self) -> cassettes.CallTape:
        self.token = tape.set(self.tape)
        return self.tape

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        tape.reset(self.token)
        miss = self.tape.miss
        if miss is not None and isinstance(exc, Exception) and exc is not miss:
            raise miss from exc


# -- what a try sends and answers ------------------------------------------------------------


def begin(call: cassettes.CallTape, http_request: Any) -> dict[str, Any]:
    parts = urlsplit(str(http_request.url))
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    path, query_secrets = secrets.redact_query(path)
    call.add_secrets(query_secrets)
    return call.add(item={"method": str(http_request.method).upper(), "path": path})


def note_sent_secrets(call: cassettes.CallTape, http_request: Any) -> None:
    """The credentials the try was sent with (the SDK adds Vertex's bearer token inside the try)."""
    headers = getattr(http_request, "headers", None)
    if isinstance(headers, Mapping):
        call.add_secrets(secrets.secret_values(headers.items()))


def _kept(headers: Any) -> dict[str, str]:
    items = headers.items() if headers is not None and hasattr(headers, "items") else ()
    return {str(k): str(v) for k, v in items if str(k).lower() not in _DROPPED_HEADERS}


def _body_record(text: str) -> dict[str, Any]:
    try:
        return {"body": json.loads(text)} if text else {}
    except ValueError:
        return {"text": text}


_SSE_FIELDS = (b":", b"event:", b"id:", b"retry:")  # lines of an SSE event other than its data


def _events(body: bytes) -> list[Any]:
    """The data of each SSE event in a stream's body: a JSON value as itself, anything else as text.

    A block with no ``data:`` lines is kept too: past the 200 the API writes an error as bare JSON
    lines, which the SDK reads as a chunk and raises. Dropped, the replay would end quietly instead.
    """
    events: list[Any] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = block.split(b"\n")
        data = [line[5:].lstrip() for line in lines if line.startswith(b"data:")]
        if not data:
            data = [line for line in lines if line.strip() and not line.startswith(_SSE_FIELDS)]
            if not data:
                continue
        text = b"\n".join(data).decode("utf-8", "replace")
        try:
            events.append(json.loads(text))
        except ValueError:
            events.append(text)
    return events


def _sse(events: list[Any]) -> bytes:
    out = []
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
        out.append(f"data: {data}\r\n\r\n".encode())
    return b"".join(out)


def record_error(exchange: dict[str, Any], exc: BaseException) -> None:
    """A failed try: an ``APIError`` as the status and body it came with, else as a transport failure; a
    cancellation is none (nothing answered: the cassette does not write the call)."""
    if not isinstance(exc, Exception):
        cassettes.note_cancelled(exchange)
        return
    code = getattr(exc, "code", None)
    if type(code) is int and hasattr(exc, "details"):
        exchange["status"] = code
        exchange["headers"] = secrets.redact_headers(_kept(getattr(getattr(exc, "response", None), "headers", None)))
        details = exc.details
        exchange["body"] = details if isinstance(details, dict | list) else {"message": str(details)}
    else:
        exchange["error"] = {"type": type(exc).__name__, "message": str(exc)}


def record_answer(exchange: dict[str, Any], headers: Any, text: str | None, body: bytes | None) -> dict[str, str]:
    """A try that answered: its kept headers, and its body (``text``) or its stream's events (``body``)."""
    kept = _kept(headers)
    exchange["status"] = 200
    exchange["headers"] = secrets.redact_headers(kept)
    if body is not None:
        exchange["events"] = _events(body)
    elif text is not None:
        exchange.update(_body_record(text))
    return kept


# -- replay --------------------------------------------------------------------------------------


class Cut(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A recorded stream's bytes, then the failure that broke it off."""

    def __init__(self, data: bytes, error: Exception) -> None:
        self.data = data
        self.error = error

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data
        raise self.error


def _transport_error(record: Any, request: httpx2.Request) -> Exception:
    kind = record.get("type") if isinstance(record, dict) else None
    message = str(record.get("message", "")) if isinstance(record, dict) else ""
    cls = getattr(httpx2, kind, None) if isinstance(kind, str) else None
    if isinstance(cls, type) and issubclass(cls, httpx2.RequestError):
        return cls(message, request=request)
    return httpx2.ReadError(f"{kind}: {message}", request=request)


def _events_damage(events: list[Any]) -> str | None:
    """What is wrong with a stream's recorded chunks, or None: the SDK parses each as a ``GenerateContentResponse``."""
    for index, event in enumerate(events):
        # The recorder keeps a chunk that was not JSON as its text: played, the SDK's json.loads raises on it.
        if type(event) is not dict and not (type(event) is str and _json_object(event)):
            return f"events[{index}] must be a JSON object (a streamed GenerateContentResponse)"
    return None


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def replayed(call: cassettes.CallTape, http_request: Any, stream: bool) -> tuple[dict[str, str], Any]:
    """The next recorded try as (headers, what the SDK's ``HttpResponse`` holds), or its failure raised."""
    from google.genai import errors  # the SDK is loaded: its client is calling

    exchange = call.next()
    # Told here, naming the file and the entry: played, a damaged try is a raw TypeError, JSONDecodeError
    # or APIError from inside the SDK, or an answer whose text is silently None.
    problem = damage(exchange, _events_damage)
    if problem is not None:
        raise call.damaged(problem)
    request = httpx2.Request(str(http_request.method).upper(), str(http_request.url))
    status = exchange.get("status")
    if status is None:  # a try that failed before any answer (damage() saw its error is an object)
        raise _transport_error(exchange["error"], request)
    headers = exchange.get("headers") or {}
    events = exchange.get("events")
    if events is not None:
        data = _sse(events)
        error = exchange.get("error")
        if error:
            response = httpx2.Response(status, headers=headers, stream=Cut(data, _transport_error(error, request)))
        else:
            response = httpx2.Response(status, headers=headers, content=data)
    elif "body" in exchange:
        response = httpx2.Response(status, headers=headers, content=json.dumps(exchange["body"]).encode())
    else:
        response = httpx2.Response(status, headers=headers, content=str(exchange.get("text", "")).encode())
    response.request = request
    errors.APIError.raise_for_response(response)
    return headers, (response if stream else [response.text])
