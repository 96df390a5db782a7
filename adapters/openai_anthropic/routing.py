"""One call of an instrumented OpenAI or Anthropic SDK method: to dispatch as a managed attempt, or straight through.

Both ``instrument(client)`` and ``instrument()`` may be on at once: dispatch marks the SDK call it
makes (``inside_sdk_call``) and every wrapper passes a marked call straight through, so one call is
one attempt. ``with_raw_response`` / ``with_streaming_response`` are one attempt each (``raw_responses``).
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import dispatch, raw_responses
from ..endpoints import Endpoint

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # both SDKs: "true" (with_raw_response), "stream"


def _raw_kind(kwargs: dict[str, Any]) -> str | None:
    headers = kwargs.get("extra_headers")
    if not headers or not isinstance(headers, dict):
        return None
    kind = headers.get(RAW_RESPONSE_HEADER)
    return kind if isinstance(kind, str) else None


def route(
    client: Any,
    mode: str,
    method: str,
    is_async: bool,
    include_usage: bool,
    wrapped: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    provider: Endpoint | None = None,
) -> Any:
    """One call of an instrumented SDK method, as a managed attempt (or straight through)."""
    if args or dispatch.inside_sdk_call.get():
        return wrapped(*args, **kwargs)  # dispatch's own SDK call, or a call shape the SDK will refuse itself
    if method == "stream":
        return _stream_helper(client, mode, wrapped, kwargs, provider)
    raw = _raw_kind(kwargs)
    if raw is not None:
        call = raw_responses.araw_call if is_async else raw_responses.raw_call
        return call(client, mode, wrapped, kwargs, raw, provider)
    # complete()/acomplete() hand a streamed call to stream()/astream() themselves.
    run = dispatch.acomplete if is_async else dispatch.complete
    return run(client, kwargs, api_mode=mode, include_usage=include_usage, sdk_method=wrapped, provider=provider)


# anthropic's messages.stream(): a manager whose request runs on __enter__.


def _stream_helper(client: Any, mode: str, wrapped: Any, kwargs: dict[str, Any], provider: Endpoint | None) -> Any:
    # stream() itself is synchronous for both clients; the async manager holds an awaitable request.
    manager = wrapped(**kwargs)
    attr = f"_{type(manager).__name__}__api_request"
    original = getattr(manager, attr, None)
    if original is None:  # a helper of an SDK version this does not know: untraced, never broken
        return manager

    def request_of(**edited: Any) -> Any:
        # The kwargs after intercepts: the helper builds its request from them again.
        edited.pop("stream", None)
        return getattr(wrapped(**edited), attr)

    if inspect.iscoroutine(original):
        original.close()  # an un-awaited coroutine; its replacement is awaited on __aenter__

        async def open_async(**edited: Any) -> Any:
            return await request_of(**edited)

        opened = dispatch.astream(client, kwargs, api_mode=mode, sdk_method=open_async, provider=provider)
        setattr(manager, attr, opened)
    else:
        setattr(
            manager,
            attr,
            lambda: dispatch.stream(
                client, kwargs, api_mode=mode, sdk_method=lambda **e: request_of(**e)(), provider=provider
            ),
        )
    return manager
