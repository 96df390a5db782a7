"""Recording a live HTTP try into a cassette: status, kept headers, the body, SSE events as they arrive."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets

# Response headers a replay must not repeat: the body is stored decoded, and transport
# framing (and the date) would only make every re-recording a diff.
_DROPPED_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date"}
)
_SSE = "text/event-stream"

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


def begin_recording(tape: cassettes.CallTape, request: httpx2.Request) -> tuple[dict[str, Any], float]:
    # Request headers are never stored; their credential values are remembered so the
    # cassette can be scrubbed of them wherever a provider echoes them back.
    tape.add_secrets(secrets.secret_values(request.headers.raw))
    # A key may also be sent in the query string (default_query / extra_query).
    path, query_secrets = secrets.redact_query(request.url.raw_path.decode("ascii", "replace"))
    tape.add_secrets(query_secrets)
    exchange = tape.add(item={"method": request.method, "path": path})
    return exchange, time.perf_counter()


@contextmanager
def noting_failure(exchange: dict[str, Any]) -> Iterator[None]:
    """A transport failure (connection refused, a timeout) is part of the recording: the SDK may retry it; a
    cancellation is not (the call is then not written)."""
    try:
        yield
    except Exception as exc:
        exchange["error"] = _error_record(exc)
        raise
    except GeneratorExit:  # a stream's caller stopped reading (closed it): the break-off is recorded as ``cut``
        raise
    except BaseException:
        # Cancelled (or interrupted) before the answer was complete: no failure of the provider's to replay;
        # the cassette does not write the call (``cassettes.cassette.unanswered``).
        cassettes.note_cancelled(exchange)
        raise


def streamed(exchange: dict[str, Any], start: float, response: httpx2.Response) -> httpx2.Response | None:
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


def recorded(exchange: dict[str, Any], response: httpx2.Response, body: bytes) -> httpx2.Response:
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
            with noting_failure(self.exchange):
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


# The events after which a provider sends nothing more: an SDK may close the body there without
# reading to its end, which is no break-off of the caller's.
_LAST_EVENTS = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed", "error"})


def _ended(events: list[dict[str, Any]]) -> bool:
    if not events:
        return False
    last = events[-1]
    data = last.get("data")
    return last.get("event") in _LAST_EVENTS or (isinstance(data, str) and data.strip() == "[DONE]")


class _RecordingBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The provider's SSE body passed through unchanged, each event logged as it arrives.

    Closed before its end (the caller broke off, the SDK's stream was closed), the
    recording is marked ``cut``: a replay ends at the same place, never as a whole answer.
    """

    def __init__(self, response: httpx2.Response, log: _EventLog) -> None:
        self.response = response
        self.log = log
        self.started = False
        self.finished = False
        # Cut until it is seen to end: a cassette saved while the stream is still open (the caller read on
        # after the use() ended) holds only its first events, which a replay must not give as the whole answer.
        log.exchange["cut"] = True

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
        self._finish()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._second_read():
            raise httpx2.StreamConsumed()
        with self.log.reading():
            async for chunk in self.response.aiter_bytes():
                self.log.feed(chunk)
                yield chunk
        self._finish()

    def _finish(self) -> None:
        self.finished = True
        self.log.exchange.pop("cut", None)

    def _note_cut(self) -> None:
        log = self.log
        if self.finished or "error" in log.exchange or _ended(log.events):
            log.exchange.pop("cut", None)

    def close(self) -> None:
        self._note_cut()
        self.response.close()

    async def aclose(self) -> None:
        self._note_cut()
        await self.response.aclose()
