"""Each HTTP try of a ``google-genai`` API client, at the SDK's own per-try seam.

tenacity retries ``BaseApiClient._request_once`` (``_async_request_once``), looked up on the
client for every try: shadowed on the client itself, it counts the tries of the running
attempt (its ``sdk_retries``), answers or records them from a bound cassette whatever HTTP
client the SDK uses (httpx2, aiohttp, google-auth's requests session), and remembers the
credentials a try was sent with as secrets (a Vertex AI bearer token always, any other when
the try failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import sdk_retries, sent_credentials
from . import cassette

_TRIES = ("_request_once", "_async_request_once")


def _http_response(headers: Any, held: Any) -> Any:
    from google.genai._api_client import HttpResponse

    return HttpResponse(headers, held)


def install(api_client: Any) -> None:
    """Shadow the client's per-try methods (once): tenacity looks them up on the client for every retry."""
    own = api_client.__dict__
    if getattr(own.get(_TRIES[0]), "relay_genai", False):
        return
    once, async_once = api_client._request_once, api_client._async_request_once
    # Vertex AI with credentials: the SDK adds a bearer token inside each try, remembered after it.
    bearer = bool(getattr(api_client, "vertexai", False)) and not getattr(api_client, "api_key", None)

    def request_once(http_request: Any, stream: bool = False, *args: Any, **kwargs: Any) -> Any:
        sdk_retries.count_try()
        call = cassette.tape.get()
        if call is None:
            if not bearer:
                try:
                    return once(http_request, stream, *args, **kwargs)
                except BaseException:
                    _remember_sent(http_request)
                    raise
            try:
                return once(http_request, stream, *args, **kwargs)
            finally:
                _remember_sent(http_request)
        if call.replaying:
            return _http_response(*cassette.replayed(call, http_request, stream))
        exchange = cassette.begin(call, http_request)
        try:
            response = once(http_request, stream, *args, **kwargs)
        except BaseException as exc:
            _sent(call, http_request)
            cassette.record_error(exchange, exc)
            raise
        _sent(call, http_request)
        if not stream:
            return _recorded_whole(exchange, response)
        return _recorded_stream(exchange, response.headers, _read_sync(response.response_stream))

    async def async_request_once(http_request: Any, stream: bool = False, *args: Any, **kwargs: Any) -> Any:
        sdk_retries.count_try()
        call = cassette.tape.get()
        if call is None:
            if not bearer:
                try:
                    return await async_once(http_request, stream, *args, **kwargs)
                except BaseException:
                    _remember_sent(http_request)
                    raise
            try:
                return await async_once(http_request, stream, *args, **kwargs)
            finally:
                _remember_sent(http_request)
        if call.replaying:
            return _http_response(*cassette.replayed(call, http_request, stream))
        exchange = cassette.begin(call, http_request)
        try:
            response = await async_once(http_request, stream, *args, **kwargs)
        except BaseException as exc:
            _sent(call, http_request)
            cassette.record_error(exchange, exc)
            raise
        _sent(call, http_request)
        if not stream:
            return _recorded_whole(exchange, response)
        return _recorded_stream(exchange, response.headers, await _read_async(response.response_stream))

    pairs: tuple[tuple[Any, Any], ...] = ((request_once, once), (async_request_once, async_once))
    for function, original in pairs:
        function.relay_genai = True
        function.__wrapped__ = original
    own[_TRIES[0]] = request_once
    own[_TRIES[1]] = async_request_once


def _sent(call: Any, http_request: Any) -> None:
    """A recorded try is over: what it was sent with is a secret of the call and of every record."""
    _remember_sent(http_request)
    cassette.note_sent_secrets(call, http_request)


def _recorded_whole(exchange: dict[str, Any], response: Any) -> Any:
    held = response.response_stream
    cassette.record_answer(exchange, response.headers, held[0] if isinstance(held, list) and held else "", None)
    return response


def _remember_sent(http_request: Any) -> None:
    """An error echoing a credential the try was sent with (Vertex's bearer token, a key the caller put in
    ``http_options.headers`` for the client or one request) must not record it: none of them is the client's
    ``api_key``, remembered before the call."""
    headers = getattr(http_request, "headers", None)
    if isinstance(headers, Mapping):
        sent_credentials.remember_sent(headers.items(), getattr(http_request, "url", None))


def _recorded_stream(exchange: dict[str, Any], headers: Any, read: tuple[bytes, BaseException | None]) -> Any:
    """A recorded stream handed on as the bytes that came, then the failure that cut it, if one did."""
    import httpx2

    body, error = read
    kept = cassette.record_answer(exchange, headers, None, body)
    if error is not None:
        exchange["error"] = {"type": type(error).__name__, "message": str(error)}
        cut = cassette.Cut(body, _as_exception(error))
        return _http_response(kept, httpx2.Response(200, headers=kept, stream=cut))
    return _http_response(kept, httpx2.Response(200, headers=kept, content=body))


def _as_exception(error: BaseException) -> Exception:
    return error if isinstance(error, Exception) else RuntimeError(str(error))


def _read_sync(source: Any) -> tuple[bytes, BaseException | None]:
    """A live stream's whole body (httpx / httpx2, or google-auth's requests session), and what broke it."""
    parts: list[bytes] = []
    try:
        chunks = source.iter_bytes() if hasattr(source, "iter_bytes") else source.iter_content(chunk_size=512)
        for chunk in chunks:
            parts.append(chunk)
    except Exception as exc:
        return b"".join(parts), exc
    finally:
        source.close()
    return b"".join(parts), None


async def _read_async(source: Any) -> tuple[bytes, BaseException | None]:
    """``_read_sync`` for the async clients: httpx / httpx2, or aiohttp."""
    parts: list[bytes] = []
    try:
        if hasattr(source, "aiter_bytes"):
            async for chunk in source.aiter_bytes():
                parts.append(chunk)
        else:
            async for chunk in source.content.iter_any():
                parts.append(chunk)
    except Exception as exc:
        return b"".join(parts), exc
    finally:
        if hasattr(source, "aclose"):
            await source.aclose()
        else:
            source.release()
    return b"".join(parts), None
