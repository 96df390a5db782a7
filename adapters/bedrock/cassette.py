"""Cassettes for boto3 ``bedrock-runtime`` calls, played at botocore's ``before-send``.

A call is matched on its neutral request before botocore runs. Each HTTP try then goes
through ``before-send``, whose handler answers it: from the tape when replaying, or,
when recording, by sending it on the client's own HTTP session, keeping status, headers
and body, and answering with those bytes. Either way botocore parses, retries and raises
as it does live. Request headers (SigV4 ``Authorization``, ``X-Amz-Security-Token``) are
never kept, and the client's credentials are cut from whatever is (a provider echoing one).

While recording, an event stream's body is read whole before botocore sees it: the
recording is complete, but its events arrive at once.

botocore signs each try before ``before-send``: a replaying tape makes it sign nothing
(``choose_signer``), so a cassette replays where no AWS credentials are, as in CI.
Recording signs as ever.
"""

from __future__ import annotations

import base64
import io
import json
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from relay_runtime import cassettes
from relay_runtime.cassettes import secrets
from relay_runtime.codec import LLMCodec

from ..cassette_damage import damage
from . import event_stream

_tape: ContextVar[cassettes.CallTape | None] = ContextVar("relay_bedrock_cassette_tape", default=None)
# Transport framing and the date: a replay must not repeat them, and they would make every re-recording a diff.
_DROPPED_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "date",
                              "keep-alive"})  # fmt: skip


class Bound:
    """The tape of one call, bound while botocore runs it."""

    __slots__ = ("tape", "token")

    def __init__(self, codec: LLMCodec, kwargs: Mapping[str, Any], credentials: set[str]) -> None:
        cassette = cassettes.current()
        if cassette is None:
            raise cassettes.CassetteError("no cassette is in use")
        # Known before the match: a miss raised there is scrubbed of them, as the file is.
        cassette.add_secrets(credentials)
        self.tape = cassette.begin(cassettes.neutral_request(codec.decode(kwargs)))

    def __enter__(self) -> cassettes.CallTape:
        self.token = _tape.set(self.tape)
        return self.tape

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        _tape.reset(self.token)
        miss = self.tape.miss
        if miss is not None and isinstance(exc, Exception) and exc is not miss:
            raise miss from exc


class _Raw:
    """A body of known bytes, as botocore reads a urllib3 response: ``read``, ``stream``, ``close``."""

    def __init__(self, data: bytes) -> None:
        self._buffer = io.BytesIO(data)

    def read(self, amt: int | None = None, **_: Any) -> bytes:
        return self._buffer.read() if amt is None else self._buffer.read(amt)

    def stream(self, amt: int = 65536, **_: Any) -> Iterator[bytes]:
        while chunk := self._buffer.read(amt):
            yield chunk

    def close(self) -> None:
        pass


def _response(url: str, status: int, headers: Mapping[str, str], body: bytes) -> Any:
    from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped, unused-ignore]

    return AWSResponse(url, status, dict(headers), _Raw(body))


def _body_record(body: bytes, content_type: str) -> dict[str, Any]:
    """A JSON body as itself (readable, diffable), an event stream as its events (``event_stream``: a
    redaction policy reads them); anything else as base64."""
    if "json" in content_type:
        try:
            return {"body": json.loads(body)}
        except ValueError:
            pass
    if "eventstream" in content_type:
        events = event_stream.records(body)
        if events is not None:
            return {"events": events}
    return {"base64": base64.b64encode(body).decode("ascii")}


def _body_bytes(exchange: Mapping[str, Any]) -> bytes:
    if "body" in exchange:
        return json.dumps(exchange["body"], ensure_ascii=False).encode("utf-8")
    if isinstance(exchange.get("events"), list):
        return event_stream.encode(exchange["events"])
    return base64.b64decode(str(exchange.get("base64", "")))


def _replayed(tape: cassettes.CallTape, request: Any) -> Any:
    exchange = tape.next()
    # Told here, naming the file and the entry: played, a damaged try is an AttributeError or
    # binascii.Error from deep in botocore, or a response parsed into the wrong answer.
    problem = damage(exchange, event_stream.damage)
    if problem is not None:
        raise tape.damaged(problem)
    status = exchange.get("status")
    if status is None:  # a try that failed before any answer (damage() saw its error is an object)
        from botocore.exceptions import EndpointConnectionError  # type: ignore[import-untyped, unused-ignore]

        raise EndpointConnectionError(endpoint_url=request.url, error=str(exchange["error"].get("message", "")))
    return _response(request.url, status, exchange.get("headers") or {}, _body_bytes(exchange))


def _recorded(tape: cassettes.CallTape, request: Any, send: Any) -> Any:
    # Of SigV4's Authorization only the signature is secret (the key id and the secret are the credentials,
    # added already): the rest, signed header names and scope, is text a body may well contain.
    authorization = request.headers.get("Authorization")
    if isinstance(authorization, str) and "Signature=" in authorization:
        tape.add_secrets({authorization.rpartition("Signature=")[2].strip()})
    path, query_secrets = secrets.redact_query(request.url.split("://", 1)[-1].partition("/")[2])
    tape.add_secrets(query_secrets)
    exchange = tape.add(item={"method": request.method, "path": "/" + path})
    try:
        live = send(request)
        body = live.content  # the whole body, an event stream's too
    except Exception as exc:
        exchange["error"] = {"type": type(exc).__name__, "message": str(exc)}
        raise
    headers = {k: v for k, v in live.headers.items() if k.lower() not in _DROPPED_HEADERS}
    exchange["status"] = live.status_code
    exchange["headers"] = secrets.redact_headers(headers)
    exchange.update(_body_record(body, headers.get("content-type", headers.get("Content-Type", ""))))
    return _response(request.url, live.status_code, headers, body)


def send_handler(client: Any, on_try: Callable[[], None]) -> Any:
    """The client's ``before-send`` handler: ``on_try()`` for each HTTP try, then answers it from (or into)
    the bound tape; else nothing."""
    ref = weakref.ref(client)

    def on_send(request: Any = None, **_: Any) -> Any:
        on_try()
        tape = _tape.get()
        if tape is None or request is None:
            return None
        if tape.replaying:
            return _replayed(tape, request)
        owner = ref()
        if owner is None:
            return None
        return _recorded(tape, request, owner._endpoint.http_session.send)

    return on_send


def choose_signer(**_: Any) -> Any:
    """The client's ``choose-signer`` handler: no signing while a replaying tape answers the try; else nothing.

    botocore signs before ``before-send``, where the tape answers: signing a try that is never
    sent would need credentials (NoCredentialsError where there are none, as in CI), and put
    nothing on record either way. Registered on the client's own events, it leaves other
    clients alone; a recording tape, or none, leaves the client's signer as it was.
    """
    tape = _tape.get()
    if tape is None or not tape.replaying:
        return None
    from botocore import UNSIGNED  # type: ignore[import-untyped, unused-ignore]

    return UNSIGNED
