"""A call cancelled while it was being recorded is not written to the cassette.

Nothing answered it: stored, google-genai's replayed as a transport failure (``ReadError``) the live call
never had, and a whole body or a stream the SDK reads whole, cancelled mid-read, left an exchange with
neither a status nor an error, which replay refused as damaged (and re-recording wrote again). Now the
request stays unrecorded, counted in the relay's diagnostics: replay-only raises the usual miss, ``auto``
records it on its next run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t
from tests.framework_support import need

_KIND = ["whole", "stream"]


class _SlowBody(httpx2.AsyncByteStream):
    """An SSE body whose first event comes at once and the rest long after."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    async def __aiter__(self) -> Any:
        yield self.frames[0]
        await asyncio.sleep(5)
        for frame in self.frames[1:]:
            yield frame


def _slow(kind: str, body: dict[str, Any], frames: list[bytes]) -> Any:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        if kind == "whole":
            await asyncio.sleep(5)
            return httpx2.Response(200, json=body)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_SlowBody(frames))

    return handler


def _answering(kind: str, body: dict[str, Any], frames: list[bytes]) -> Any:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        if kind == "whole":
            return httpx2.Response(200, json=body)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(frames))

    return handler


def _openai(handler: Any) -> Any:
    openai = need("openai")
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return adapters.instrument(
        openai.AsyncOpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)
    )


async def _openai_call(client: Any, kind: str) -> Any:
    messages = [{"role": "user", "content": "hi"}]
    if kind == "whole":
        return (await client.chat.completions.create(model="gpt-test", messages=messages)).choices[0].message.content
    stream = await client.chat.completions.create(model="gpt-test", messages=messages, stream=True)
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


_OPENAI_FRAMES = t.openai_chat_sse(t.chat_chunks(["Hel", "lo"]))


def _cancelled(call: Any) -> None:
    async def run() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(call(), 0.3)

    asyncio.run(run())


def _calls(path: Path) -> list[Any]:
    return json.loads(path.read_text())["calls"] if path.exists() else []


@pytest.mark.parametrize("kind", _KIND)
def test_an_openai_call_cancelled_while_recording_is_not_written(relay_turn, tmp_path, kind) -> None:
    relay, _ = relay_turn
    path = tmp_path / "c.json"
    slow = _openai(_slow(kind, t.chat_completion_body("late"), _OPENAI_FRAMES))
    with cassettes.use(path, mode="record"):
        _cancelled(lambda: _openai_call(slow, kind))
    assert _calls(path) == []
    assert relay.diagnostics()["cassette.cancelled_not_recorded"] == 1
    # Replay-only: the request is one not recorded, as any other.
    with pytest.raises(cassettes.CassetteMiss, match="no recorded call matches"), cassettes.use(path, mode="replay"):
        asyncio.run(_openai_call(_openai(_answering(kind, {}, [])), kind))
    # Auto records it on its next run, answered.
    answering = _openai(_answering(kind, t.chat_completion_body("Hello"), _OPENAI_FRAMES))
    with cassettes.use(path, mode="auto"):
        assert asyncio.run(_openai_call(answering, kind)) == "Hello"
    assert len(_calls(path)) == 1
    with cassettes.use(path, mode="replay"):
        assert asyncio.run(_openai_call(_openai(_answering(kind, {}, [])), kind)) == "Hello"


@pytest.mark.parametrize("kind", _KIND)
def test_a_google_genai_call_cancelled_while_recording_is_not_written(relay_turn, tmp_path, kind) -> None:
    need("google.genai")
    from genai_support import BASE, GEMINI_KEY, MODEL, gemini_client, response_body, stream_frames
    from google import genai
    from google.genai import types

    from relay_runtime.adapters import google_genai

    relay, _ = relay_turn
    path = tmp_path / "c.json"

    def client(handler: Any) -> Any:
        transport = httpx2.MockTransport(handler)
        options = types.HttpOptions(
            base_url=BASE, client_args={"transport": transport}, async_client_args={"transport": transport}
        )
        return google_genai.instrument_client(genai.Client(api_key=GEMINI_KEY, http_options=options))

    async def call(made: Any) -> Any:
        if kind == "whole":
            return (await made.aio.models.generate_content(model=MODEL, contents="hi")).text
        stream = await made.aio.models.generate_content_stream(model=MODEL, contents="hi")
        return "".join([c.text or "" async for c in stream])

    slow = client(_slow(kind, response_body("late"), stream_frames(["a", "b"])))
    with cassettes.use(path, mode="record"):
        _cancelled(lambda: call(slow))
    # Not the CancelledError as a transport failure (replayed as ReadError), nor an exchange with no answer.
    assert _calls(path) == []
    assert relay.diagnostics()["cassette.cancelled_not_recorded"] == 1
    with pytest.raises(cassettes.CassetteMiss, match="no recorded call matches"), cassettes.use(path, mode="replay"):
        asyncio.run(call(google_genai.instrument_client(gemini_client(t.Script()))))
