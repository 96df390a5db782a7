"""Real SDK clients over ``httpx2.MockTransport``, answering from a script.

A ``Script`` is a queue of replies; each HTTP request the SDK sends takes the
next one (and is recorded, so tests can see the retries the SDK made):

    script = Script([error(500), json_reply(chat_completion_body("hi"))])
    client = openai_client(script)          # the SDK retries the 500 by itself
    client.chat.completions.create(model="m", messages=[])
    assert len(script.requests) == 2

Error replies carry ``retry-after-ms: 1`` so the SDKs' own retry back-off is ~0.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from .testing_bodies import (
    anthropic_events as anthropic_events,
)
from .testing_bodies import (
    anthropic_message_body as anthropic_message_body,
)
from .testing_bodies import (
    anthropic_usage as anthropic_usage,
)
from .testing_bodies import (
    chat_chunks as chat_chunks,
)
from .testing_bodies import (  # the canned bodies, exported here with the scripts that answer them
    chat_completion_body as chat_completion_body,
)
from .testing_bodies import (
    chat_usage as chat_usage,
)
from .testing_bodies import (
    embeddings_body as embeddings_body,
)
from .testing_bodies import (
    responses_body as responses_body,
)
from .testing_bodies import (
    responses_events as responses_events,
)
from .testing_bodies import (
    responses_usage as responses_usage,
)

BASE_OPENAI = "http://openai.test/v1"
BASE_ANTHROPIC = "http://anthropic.test"
TEST_KEY = "sk-test-not-a-secret"


# -- replies ---------------------------------------------------------------------------


class _SSEBody(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """SSE frames, then optionally an exception raised where the next bytes would be."""

    def __init__(self, frames: Sequence[bytes], fail_with: BaseException | None) -> None:
        self.frames = frames
        self.fail_with = fail_with

    def __iter__(self) -> Iterator[bytes]:
        yield from self.frames
        if self.fail_with is not None:
            raise self.fail_with

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for frame in self.frames:
            yield frame
        if self.fail_with is not None:
            raise self.fail_with


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able body
    frames: Sequence[bytes] | None = None  # SSE frames instead of a JSON body
    fail_with: BaseException | None = None  # raised by the SSE body after its frames
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> httpx2.Response:
        if self.frames is not None:
            headers = {"content-type": "text/event-stream", **self.headers}
            return httpx2.Response(self.status, headers=headers, stream=_SSEBody(self.frames, self.fail_with))
        return httpx2.Response(self.status, headers=self.headers, json=self.body)


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=body, headers=dict(headers or {}))


def error(status: int = 500, message: str = "scripted failure", *, retry_after_ms: int = 1) -> Reply:
    """An API error body; ``retry-after-ms`` keeps the SDK's retry sleep near zero."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    # OpenAI reads ``error``; Anthropic's envelope also has a top-level ``type``.
    body = {"type": "error", "error": {"message": message, "type": kind}}
    return Reply(status=status, body=body, headers={"retry-after-ms": str(retry_after_ms)})


def sse_reply(frames: Sequence[bytes], *, fail_with: BaseException | None = None) -> Reply:
    return Reply(frames=list(frames), fail_with=fail_with)


def sse_frame(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def openai_chat_sse(chunks: Iterable[dict[str, Any]]) -> list[bytes]:
    """Chat completion chunks as OpenAI frames them: data-only events, then ``[DONE]``."""
    return [*(sse_frame(c) for c in chunks), sse_frame("[DONE]")]


def typed_sse(events: Iterable[dict[str, Any]]) -> list[bytes]:
    """Events named by their ``type`` field, as the Responses API and Anthropic frame them."""
    return [sse_frame(e, e["type"]) for e in events]


# -- the script --------------------------------------------------------------------------


class ScriptExhausted(AssertionError):
    pass


class Script:
    """Replies handed out in order, one per HTTP request; thread-safe."""

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self.replies: list[Reply] = list(replies)
        self.requests: list[httpx2.Request] = []
        self._lock = threading.Lock()

    def add(self, *replies: Reply) -> Script:
        with self._lock:
            self.replies.extend(replies)
        return self

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        with self._lock:
            self.requests.append(request)
            if not self.replies:
                raise ScriptExhausted(f"no scripted reply left for {request.method} {request.url}")
            reply = self.replies.pop(0)
        return reply.response()

    def bodies(self) -> list[Any]:
        """The JSON bodies of every request received, in order."""
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handler)


def openai_client(script: Script, *, max_retries: int = 2, base_url: str = BASE_OPENAI) -> Any:
    import openai

    return openai.OpenAI(
        api_key=TEST_KEY,
        base_url=base_url,
        max_retries=max_retries,
        http_client=httpx2.Client(transport=script.transport()),
    )


def async_openai_client(script: Script, *, max_retries: int = 2, base_url: str = BASE_OPENAI) -> Any:
    import openai

    return openai.AsyncOpenAI(
        api_key=TEST_KEY,
        base_url=base_url,
        max_retries=max_retries,
        http_client=httpx2.AsyncClient(transport=script.transport()),
    )


def anthropic_client(script: Script, *, max_retries: int = 2) -> Any:
    import anthropic

    # The SDK's own OpenTelemetry spans are off: tests look at ours.
    return anthropic.Anthropic(
        api_key=TEST_KEY,
        base_url=BASE_ANTHROPIC,
        max_retries=max_retries,
        open_telemetry=False,
        http_client=httpx2.Client(transport=script.transport()),
    )


def async_anthropic_client(script: Script, *, max_retries: int = 2) -> Any:
    import anthropic

    return anthropic.AsyncAnthropic(
        api_key=TEST_KEY,
        base_url=BASE_ANTHROPIC,
        max_retries=max_retries,
        open_telemetry=False,
        http_client=httpx2.AsyncClient(transport=script.transport()),
    )


@dataclass
class Scripted:
    """One script, answered through a sync and an async client of the same SDK."""

    script: Script
    client: Any
    aclient: Any

    def add(self, *replies: Reply) -> Scripted:
        self.script.add(*replies)
        return self


def scripted_openai(*replies: Reply, max_retries: int = 2) -> Scripted:
    script = Script(replies)
    return Scripted(
        script,
        openai_client(script, max_retries=max_retries),
        async_openai_client(script, max_retries=max_retries),
    )


def scripted_anthropic(*replies: Reply, max_retries: int = 2) -> Scripted:
    script = Script(replies)
    return Scripted(
        script,
        anthropic_client(script, max_retries=max_retries),
        async_anthropic_client(script, max_retries=max_retries),
    )
