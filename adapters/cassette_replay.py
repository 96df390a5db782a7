"""Playing a recorded HTTP try back to the SDK: its status, headers, body or SSE events, or its failure."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2

from relay_runtime import cassettes

from .cassette_damage import damage


def replay(tape: cassettes.CallTape, request: httpx2.Request) -> tuple[float, httpx2.Response]:
    """The next recorded try as the response to give, and how long to wait first."""
    exchange = tape.next()
    return _latency(exchange, tape), _replayed(exchange, request, tape)


def _latency(exchange: dict[str, Any], tape: cassettes.CallTape) -> float:
    if tape.timing != "recorded":
        return 0.0
    latency = exchange.get("latency_ms")
    return max(0.0, float(latency)) / 1000 if isinstance(latency, int | float) else 0.0


def transport_error(record: Any, request: httpx2.Request) -> Exception:
    """A recorded transport failure as the httpx2 exception it was (a plain TransportError if unknown)."""
    kind = record.get("type") if isinstance(record, dict) else None
    message = str(record.get("message", "")) if isinstance(record, dict) else ""
    cls = getattr(httpx2, kind, None) if isinstance(kind, str) else None
    if isinstance(cls, type) and issubclass(cls, httpx2.RequestError):
        return cls(message, request=request)
    return httpx2.TransportError(f"{kind}: {message}", request=request)


def _replayed(exchange: dict[str, Any], request: httpx2.Request, tape: cassettes.CallTape) -> httpx2.Response:
    problem = damage(exchange)
    if problem is not None:
        raise tape.damaged(problem)
    if "status" not in exchange:
        raise transport_error(exchange.get("error"), request)
    headers = dict(exchange.get("headers") or {})
    status = int(exchange["status"])
    if status >= 400 and tape.timing == "instant" and tape.remaining():
        # The SDK sleeps before a retry as the server's retry-after says (or backs off for
        # seconds without one): instant replay asks it to wait a millisecond instead. Only
        # before a recorded retry: the last try's headers reach the caller (on the SDK's
        # error) as the provider sent them.
        headers.pop("retry-after", None)
        headers["retry-after-ms"] = "1"
    events = exchange.get("events")
    if events is not None:
        error: Exception | Callable[[], Exception] | None = None
        if exchange.get("error"):
            error = transport_error(exchange["error"], request)
        elif exchange.get("cut"):
            error = past_cut(tape, len(events))
        body = ReplayBody(_frames(events), error, timed=tape.timing == "recorded")
        return httpx2.Response(status, headers=headers, stream=body)
    return httpx2.Response(status, headers=headers, content=_body_bytes(exchange))


def past_cut(tape: cassettes.CallTape, events: int) -> Callable[[], Exception]:
    """What reading past a recording that was cut short raises (made if it is reached): the rest was never recorded."""
    return functools.partial(_read_past_cut, tape, events)


def _read_past_cut(tape: cassettes.CallTape, events: int) -> Exception:
    return tape.cassette.missed(
        cassettes.CassetteMiss(
            f"cassette {tape.cassette.path}: this stream's recording was cut short after {events} events "
            f"(the recording's caller stopped reading there); this run reads on, which was never recorded: "
            f"re-record it\nrequest:\n{tape.cassette.shown(tape.request, limit=500)}"
        )
    )


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


def sse_body(events: list[Any]) -> bytes:
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


class ReplayBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """Recorded SSE events one per read, optionally at their recorded pace, then the recorded failure."""

    def __init__(
        self,
        frames: list[tuple[float, bytes]] | Callable[[], list[tuple[float, bytes]]],
        error: Exception | Callable[[], Exception] | None,
        *,
        timed: bool,
    ) -> None:
        self.frames = frames  # or what makes them, at the first read
        self.error = error  # raised after the last frame (or what makes it, if it is reached)
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
            raise error if isinstance(error, BaseException) else error()
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
