"""No silent wrong replay: what the SDK sends beside the prompt is matched on, and a stream the caller broke
off while recording replays ending at the same place, recorded the same way (cancelled)."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

import pytest

from relay_runtime import adapters, cassettes
from relay_runtime import conventions as cv
from relay_runtime.adapters import cassette_direct
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Offline, dump, shape


def test_a_changed_extra_body_is_a_miss_not_the_old_answer(tmp_path) -> None:
    api = APIS["chat"]
    path = tmp_path / "c.json"
    low = {**api.kwargs, "extra_body": {"reasoning": {"effort": "low"}}}
    high = {**api.kwargs, "extra_body": {"reasoning": {"effort": "high"}}}
    live = api.scripted(api.reply("thought a little"))
    with cassettes.use(path, mode="record"):
        adapters.complete(live.client, low)
    assert json.loads(live.script.requests[0].content)["reasoning"] == {"effort": "low"}  # it was sent
    client, _ = Offline().clients("openai")
    with cassettes.use(path):
        assert adapters.complete(client, low).choices[0].message.content == "thought a little"
    with pytest.raises(cassettes.CassetteMiss) as miss, cassettes.use(path):
        adapters.complete(client, high)
    assert '-      "effort": "low"' in str(miss.value) and '+      "effort": "high"' in str(miss.value)
    with pytest.raises(cassettes.CassetteMiss), cassettes.use(path):
        adapters.complete(client, api.kwargs)  # no extra_body at all is another request too


def test_extra_query_is_matched_on_except_its_credentials(tmp_path) -> None:
    api = APIS["chat"]
    path = tmp_path / "c.json"

    def kwargs(version: str, key: str) -> dict[str, Any]:
        return {**api.kwargs, "extra_query": {"api-version": version, "sig": key}}

    live = api.scripted(api.reply("v1 answer"))
    with cassettes.use(path, mode="record"):
        adapters.complete(live.client, kwargs("2024-01", "sig-value-0123456789"))
    text = path.read_text()
    assert "sig-value-0123456789" not in text
    assert json.loads(text)["calls"][0]["request"]["extra_query"] == {"api-version": "2024-01", "sig": "[redacted]"}
    client, _ = Offline().clients("openai")
    with cassettes.use(path):  # another signature: the same request
        assert adapters.complete(client, kwargs("2024-01", "sig-other-9876543210")).choices[0].message.content == (
            "v1 answer"
        )
    with pytest.raises(cassettes.CassetteMiss), cassettes.use(path):
        adapters.complete(client, kwargs("2025-05", "sig-value-0123456789"))


def _read(api_name: str, client: Any, aclient: Any, style: str, stop_after: int | None) -> list[Any]:
    """A stream's chunks, broken off after ``stop_after`` of them (None: read to the end)."""
    api = APIS[api_name]
    if style == "stream":
        got = []
        stream = adapters.stream(client, api.kwargs, api_mode=api.api_mode)
        for chunk in stream:
            got.append(chunk)
            if len(got) == stop_after:
                break
        stream.close()
        return dump(got)

    async def consume() -> list[Any]:
        got = []
        stream = await adapters.astream(aclient, api.kwargs, api_mode=api.api_mode)
        async for chunk in stream:
            got.append(chunk)
            if len(got) == stop_after:
                break
        await stream.aclose()
        return dump(got)

    return asyncio.run(consume())


@pytest.mark.parametrize("way", ["direct", "http"])
@pytest.mark.parametrize("style", ["stream", "astream"])
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_stream_cut_short_while_recording_replays_ending_at_the_same_place(
    relay_turn, relay_events, tmp_path, monkeypatch, api_name, style, way
) -> None:
    if way == "http":  # an SDK the direct replay does not know: the recorded events go through its HTTP layer
        monkeypatch.setattr(cassette_direct, "_NEEDED", (*cassette_direct._NEEDED, "_an_internal_no_sdk_has"))
        monkeypatch.setattr(cassette_direct, "_SDKS", {})
    api = APIS[api_name]
    path = tmp_path / "c.json"
    live = api.scripted(api.stream_reply(["one ", "two ", "three ", "four ", "five"]))
    with cassettes.use(path, mode="record"):
        live_chunks = _read(api_name, live.client, live.aclient, style, stop_after=2)
    live_events = shape(relay_events)
    relay_events.clear()
    (exchange,) = json.loads(path.read_text())["calls"][0]["http"]
    assert exchange["cut"] is True and len(exchange["events"]) < 8  # not the whole answer

    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    with cassettes.use(path):
        assert _read(api_name, client, aclient, style, stop_after=2) == live_chunks
    assert shape(relay_events) == live_events  # the same attempt and call, ended the same way
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "cancelled"
    relay_events.clear()

    # Read on past the cut: what was never recorded is a miss, never a normal end.
    use = cassettes.use(path)
    with pytest.raises(cassettes.CassetteMiss, match="cut short after"), use as cassette:
        _read(api_name, client, aclient, style, stop_after=None)
    assert cassette.misses and offline.requests == []


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_stream_read_to_its_end_is_not_marked_cut(relay_turn, tmp_path, api_name) -> None:
    api = APIS[api_name]
    path = tmp_path / "c.json"
    live = api.scripted(api.stream_reply(["one ", "two"]))
    with cassettes.use(path, mode="record"):
        chunks = _read(api_name, live.client, live.aclient, "stream", stop_after=None)
    assert "cut" not in json.loads(path.read_text())["calls"][0]["http"][0]
    client, aclient = Offline().clients(api.sdk)
    with cassettes.use(path):
        assert _read(api_name, client, aclient, "astream", stop_after=None) == chunks


@pytest.mark.parametrize("api_name", ["chat", "anthropic"])
def test_the_error_a_caller_gets_keeps_its_recorded_retry_after_and_a_recorded_retry_does_not_wait(
    tmp_path, api_name: str
) -> None:
    api = APIS[api_name]
    limited = t.json_reply(
        {"type": "error", "error": {"message": "slow down", "type": "rate_limit_error"}},
        status=429,
        headers={"retry-after": "30", "x-request-id": "req_limited"},
    )
    given_up, retried = tmp_path / "given_up.json", tmp_path / "retried.json"
    scripted = t.scripted_openai if api.sdk == "openai" else t.scripted_anthropic
    with cassettes.use(given_up, mode="record"), pytest.raises(Exception) as live_error:
        adapters.complete(scripted(limited, max_retries=0).client, api.kwargs)
    with cassettes.use(retried, mode="record"):  # the SDK waited retry-after-ms: 1 live, then got its answer
        fast_limit = t.json_reply(limited.body, status=429, headers={"retry-after-ms": "1", "retry-after": "30"})
        adapters.complete(scripted(fast_limit, api.reply("after the wait")).client, api.kwargs)

    client, _ = Offline().clients(api.sdk)
    with cassettes.use(given_up), pytest.raises(type(live_error.value)) as replayed:
        adapters.complete(client.with_options(max_retries=0), api.kwargs)
    headers = replayed.value.response.headers  # type: ignore[attr-defined]
    assert headers.get("retry-after") == "30" and headers.get("x-request-id") == "req_limited"
    assert "retry-after-ms" not in headers  # nothing the provider did not send
    started = time.monotonic()
    with cassettes.use(retried):
        assert "after the wait" in json.dumps(dump(adapters.complete(client, api.kwargs)))
    assert time.monotonic() - started < 5  # instant replay of the retry: no 30 s sleep


@pytest.mark.parametrize("api_name", ["chat", "anthropic"])
def test_a_raw_response_call_replays_its_recorded_headers_and_body(tmp_path, api_name: str) -> None:
    api, path = APIS[api_name], tmp_path / "c.json"
    request_id = "request-id" if api.sdk == "anthropic" else "x-request-id"
    headers = {request_id: "req_raw_1", "x-ratelimit-remaining-requests": "7"}

    def create(sdk_client: Any) -> Any:
        resource = sdk_client.messages if api.sdk == "anthropic" else sdk_client.chat.completions
        return resource.with_raw_response.create(**api.kwargs)

    live = api.scripted(t.json_reply(api.reply("raw answer").body, headers=headers))
    adapters.instrument(live.client)
    with cassettes.use(path, mode="record"):
        create(live.client)
    client, aclient = Offline().clients(api.sdk)
    adapters.instrument(client)
    adapters.instrument(aclient)

    async def acreate() -> tuple[Any, Any]:
        raw = await create(aclient)
        parsed = raw.parse()  # a coroutine for Anthropic's async raw response
        return raw.headers, (await parsed if inspect.isawaitable(parsed) else parsed)

    with cassettes.use(path):
        raw = create(client)
        replays = [(raw.headers, raw.parse())]
    with cassettes.use(path):
        replays.append(asyncio.run(acreate()))
    for replayed_headers, parsed in replays:
        assert replayed_headers[request_id] == "req_raw_1"
        assert replayed_headers["x-ratelimit-remaining-requests"] == "7"
        assert "raw answer" in json.dumps(dump(parsed))


@pytest.mark.parametrize("api_name", ["chat", "anthropic"])
def test_a_stream_still_open_when_its_cassette_is_saved_replays_as_cut_not_as_a_whole_answer(
    tmp_path, api_name: str
) -> None:
    api, path = APIS[api_name], tmp_path / "c.json"
    live = api.scripted(api.stream_reply(["one", "two", "three"]))
    with cassettes.use(path, mode="record"):
        chunks = iter(adapters.stream(live.client, api.kwargs, api_mode=api.api_mode))
        first = [next(chunks), next(chunks)]
    rest = list(chunks)  # the caller reads on after the use() ended: the file was written already
    assert len(first + rest) > 2
    exchange = json.loads(path.read_text())["calls"][0]["http"][0]
    assert len(exchange["events"]) == 2 and exchange["cut"] is True
    client, _ = Offline().clients(api.sdk)
    with pytest.raises(cassettes.CassetteMiss, match="cut short after 2 events"), cassettes.use(path):
        list(adapters.stream(client, api.kwargs, api_mode=api.api_mode))
