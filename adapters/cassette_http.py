"""Cassettes for the SDK clients, served at their HTTP layer.

A cassette call is matched on its neutral request (the codec's view of the final
kwargs) before the SDK runs; the SDK then sends its HTTP tries as usual and the
client's transport is swapped, for this call only, for one that plays the tape:
recorded status, headers and body (or SSE events) come back to the SDK, which
parses them into its own ``ChatCompletion``/``Message``/``Stream``, retries a
recorded 500 by itself and raises a recorded error as its own exception class.
So the response types, the SDK's retries and our attempt lifecycle are the live
ones, while the file keeps what a user reads: the request, JSON bodies, events.

This module binds a call's tape and swaps the transport; ``cassette_recording``
writes what a live try gave, ``cassette_replay`` plays a recorded try back and
``cassette_direct`` makes a single recorded answer into the SDK's object without
an HTTP round trip.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

import httpx2

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets
from relay_runtime.codec import LLMCodec

from . import cassette_recording
from .cassette_direct import NOT_DIRECT, direct_reply
from .cassette_replay import replay as _replay

__all__ = ["NOT_DIRECT", "bound", "direct_reply"]

_tape: ContextVar[cassettes.CallTape | None] = ContextVar("relay_cassette_tape", default=None)
_install_lock = threading.Lock()


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
    request = cassettes.neutral_request(codec.decode(kwargs))
    if "extra_body" in kwargs or "extra_query" in kwargs:
        request = cassettes.with_sent_extras(request, kwargs)
    cassette.add_secrets(_sent_secrets(client, kwargs))
    return _Bound(cassette.begin(request))


def _sent_secrets(client: Any, kwargs: Mapping[str, Any]) -> set[str]:
    """The credential values the call will send in its headers and query (the client's defaults, the call's
    extras). A recording learns them from each try, but a miss is raised before any: known first, the miss
    (and the match) is scrubbed of them wherever the request quotes them, as the file is."""
    found: set[str] = set()
    for headers in (getattr(client, "default_headers", None), kwargs.get("extra_headers")):
        if isinstance(headers, Mapping):  # the SDK's Omit stands for a header not sent: no text, no secret
            found |= secrets.secret_values((k, v) for k, v in headers.items() if isinstance(v, str | bytes))
    for query in (getattr(client, "default_query", None), kwargs.get("extra_query")):
        if isinstance(query, Mapping):
            found |= secrets.query_secrets(query)
    return found


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
        exchange, start = cassette_recording.begin_recording(tape, request)
        with cassette_recording.noting_failure(exchange):
            response = self.inner.handle_request(request)
        streamed = cassette_recording.streamed(exchange, start, response)
        if streamed is not None:
            return streamed
        try:
            return cassette_recording.recorded(exchange, response, response.read())
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
        exchange, start = cassette_recording.begin_recording(tape, request)
        with cassette_recording.noting_failure(exchange):
            response = await self.inner.handle_async_request(request)
        streamed = cassette_recording.streamed(exchange, start, response)
        if streamed is not None:
            return streamed
        try:
            return cassette_recording.recorded(exchange, response, await response.aread())
        finally:
            await response.aclose()
