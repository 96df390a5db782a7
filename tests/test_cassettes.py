"""Cassettes over real SDK clients: record on the mock transport, replay with a client that refuses the network."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cassettes
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Api, Offline, dump, shape

STYLES = ("sync", "async", "stream", "astream")


def run_call(api: Api, client: Any, aclient: Any, style: str, kwargs: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """One call in ``style``; returns (what the SDK call returned, its content as plain data)."""
    kwargs = dict(api.kwargs if kwargs is None else kwargs)
    if style == "sync":
        response = adapters.complete(client, kwargs, api_mode=api.api_mode)
        return response, dump(response)
    if style == "async":
        response = asyncio.run(adapters.acomplete(aclient, kwargs, api_mode=api.api_mode))
        return response, dump(response)
    if style == "stream":
        stream = adapters.stream(client, kwargs, api_mode=api.api_mode)
        return stream, dump(list(stream))

    async def consume() -> tuple[Any, Any]:
        stream = await adapters.astream(aclient, kwargs, api_mode=api.api_mode)
        return stream, dump([chunk async for chunk in stream])

    return asyncio.run(consume())


def record_then_replay(
    api: Api,
    style: str,
    path: Path,
    events: Recorder,
    *,
    retried: bool = True,
    before_replay: Callable[[], None] = lambda: None,
) -> tuple[Any, Any, Any, Any]:
    reply = api.stream_reply(["Hel", "lo"]) if "stream" in style else api.reply("Hello")
    reply.headers.update({"x-request-id": "req_live_1", "request-id": "req_live_1"})
    live = api.scripted(*((t.error(500),) if retried else ()), reply)  # the SDK retries the 500 by itself
    with cassettes.use(path, mode="record"):
        live_value, live_content = run_call(api, live.client, live.aclient, style)
    assert len(live.script.requests) == (2 if retried else 1)
    assert t.TEST_KEY not in path.read_text()  # sent as Authorization (OpenAI) or x-api-key (Anthropic)
    live_events = shape(events)
    events.clear()

    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    before_replay()
    with cassettes.use(path):
        value, content = run_call(api, client, aclient, style)
    assert offline.requests == []
    return (live_value, live_content, live_events), (value, content, shape(events))  # type: ignore[return-value]


def failing_stream_replay(
    api: Api, reply: t.Reply, path: Path, events: Recorder, offline: Offline
) -> tuple[tuple[list[Any], BaseException, Any], tuple[list[Any], BaseException, Any]]:
    """A stream that raises, recorded then replayed: (chunks, error, event shapes) of each run."""

    def consume(client: Any) -> tuple[list[Any], BaseException, Any]:
        got: list[Any] = []
        with pytest.raises(Exception) as failure:
            for chunk in adapters.stream(client, api.kwargs, api_mode=api.api_mode):
                got.append(chunk)
        return got, failure.value, shape(events)

    with cassettes.use(path, mode="record"):
        live = consume(api.scripted(reply).client)
    events.clear()
    client, _ = offline.clients(api.sdk)
    with cassettes.use(path):
        return live, consume(client)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_replay_returns_the_live_type_content_and_events(relay_turn, relay_events, tmp_path, api_name, style) -> None:
    api = APIS[api_name]
    (live_value, live_content, live_events), (value, content, events) = record_then_replay(
        api, style, tmp_path / "c.json", relay_events
    )
    assert type(value) is type(live_value)
    if "stream" in style:
        # The managed stream wraps the SDK's own stream class in both runs.
        assert type(value._source) is type(live_value._source)
        assert type(value._source).__module__.startswith(api.sdk)
    assert content == live_content and content  # same chunks / same response, field by field
    assert events == live_events and len(events) >= 4  # attempt and logical call, start and end
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert len(attempts) == 1 and attempts[0].outcome == "success"
    assert attempts[0].metadata[cv.SDK_RETRIES] == 1  # the recorded 500 was retried by the SDK on replay too


def forbid_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that goes through the HTTP layer fails the test: the direct replay must serve it."""
    from relay_runtime.adapters import cassette_http

    def no_http(*args: Any) -> Any:
        raise AssertionError("a single recorded answer should not go through the HTTP layer")

    monkeypatch.setattr(cassette_http._SyncTapeTransport, "handle_request", no_http)
    monkeypatch.setattr(cassette_http._AsyncTapeTransport, "handle_async_request", no_http)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_single_try_replays_as_live(relay_turn, relay_events, tmp_path, monkeypatch, api_name, style) -> None:
    """One 2xx answer is made into the SDK's own object straight from the recording, with no HTTP try."""
    api = APIS[api_name]
    (live_value, live_content, live_events), (value, content, events) = record_then_replay(
        api, style, tmp_path / "c.json", relay_events, retried=False, before_replay=lambda: forbid_http(monkeypatch)
    )
    assert type(value) is type(live_value) and content == live_content and content
    # The events hold the final (for a stream: accumulated) response the attempt reports.
    assert events == live_events and len(events) >= 4
    (end,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert end.metadata[cv.SDK_RETRIES] == 0 and end.outcome == "success"
    assert (
        [e["annotated_response"] for e in events if e.get("annotated_response")]
        == [e["annotated_response"] for e in live_events if e.get("annotated_response")]
        != []
    )
    if "stream" not in style:
        assert value._request_id == live_value._request_id == "req_live_1"
        return
    source, live_source = value._source, live_value._source
    assert type(source) is type(live_source) and source.__orig_class__ == live_source.__orig_class__
    assert source._cast_to is live_source._cast_to
    response, live_response = source.response, live_source.response
    assert response.status_code == live_response.status_code == 200
    assert response.headers["x-request-id"] == live_response.headers["x-request-id"] == "req_live_1"
    assert response.headers["content-type"] == live_response.headers["content-type"]
    assert response.request.method == live_response.request.method
    assert response.request.url == live_response.request.url
    assert response.is_closed and response.elapsed is not None


@pytest.mark.parametrize("style", ("stream", "astream"))
@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_direct_stream_broken_off_ends_cancelled_as_live(
    relay_turn, relay_events, tmp_path, monkeypatch, api_name, style
) -> None:
    api = APIS[api_name]
    path = tmp_path / "c.json"

    def first_chunk_then_close(client: Any, aclient: Any) -> Any:
        if style == "stream":
            stream = adapters.stream(client, api.kwargs, api_mode=api.api_mode)
            first = next(iter(stream))
            stream.close()
            return first, stream._source.response.is_closed

        async def run() -> Any:
            stream = await adapters.astream(aclient, api.kwargs, api_mode=api.api_mode)
            first = await stream.__anext__()
            await stream.aclose()
            return first, stream._source.response.is_closed

        return asyncio.run(run())

    live = api.scripted(api.stream_reply(["Hel", "lo", "!"]))
    with cassettes.use(path, mode="record"):
        live_first, live_closed = first_chunk_then_close(live.client, live.aclient)
    live_events = shape(relay_events)
    relay_events.clear()
    forbid_http(monkeypatch)
    client, aclient = Offline().clients(api.sdk)
    with cassettes.use(path):
        first, closed = first_chunk_then_close(client, aclient)
    assert dump(first) == dump(live_first) and closed and live_closed
    assert shape(relay_events) == live_events
    assert relay_events.ends(relay_kind=cv.ATTEMPT)[0].outcome == "cancelled"


@pytest.mark.parametrize("api_name", ("chat", "anthropic"))
def test_a_stream_with_an_error_event_replays_through_http_as_live(
    relay_turn, relay_events, tmp_path, api_name
) -> None:
    """The SDK raises on an error event with the request it sent: the HTTP path gives it one."""
    api = APIS[api_name]
    if api.sdk == "openai":
        frames = [*t.openai_chat_sse(t.chat_chunks(["a"]))[:1], t.sse_frame({"error": {"message": "overloaded"}})]
    else:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
        frames = [*t.typed_sse(t.anthropic_events(["a"]))[:2], t.sse_frame(error, "error")]
    offline = Offline()
    (live_chunks, live_error, live_events), (chunks, error, events) = failing_stream_replay(
        api, t.sse_reply(frames), tmp_path / "c.json", relay_events, offline
    )
    assert dump(chunks) == dump(live_chunks) and type(error) is type(live_error) and str(error) == str(live_error)
    assert error.request.url == live_error.request.url  # type: ignore[attr-defined]
    assert events == live_events and offline.requests == []


def test_an_anthropic_deprecated_model_still_warns_on_replay(tmp_path) -> None:
    from anthropic._data import DEPRECATED_MODELS

    api = APIS["anthropic"]
    kwargs = {**api.kwargs, "model": next(iter(DEPRECATED_MODELS))}
    live = api.scripted(api.stream_reply(["a"]), api.reply("b"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"), pytest.warns(DeprecationWarning):
        list(adapters.stream(live.client, kwargs))
        adapters.complete(live.client, kwargs)
    client, _ = Offline().clients("anthropic")
    with cassettes.use(path), pytest.warns(DeprecationWarning, match="is deprecated"):
        list(adapters.stream(client, kwargs))
    with cassettes.use(path), pytest.warns(DeprecationWarning, match="is deprecated"):
        list(adapters.stream(client, kwargs))
        adapters.complete(client, kwargs)


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_unmanaged_calls_replay_too(tmp_path, api_name) -> None:
    """No turn, no consumer: the call still never reaches a provider; a stream is the SDK's own class."""
    api = APIS[api_name]
    live = api.scripted(api.reply("one"), api.stream_reply(["a", "b"]))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        live_response, _ = run_call(api, live.client, live.aclient, "sync")
        live_stream, live_chunks = run_call(api, live.client, live.aclient, "stream")
    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    with cassettes.use(path):
        response, _ = run_call(api, client, aclient, "sync")
        stream, chunks = run_call(api, client, aclient, "stream")
    assert dump(response) == dump(live_response)
    assert type(stream) is type(live_stream) and type(stream).__name__ == "Stream"
    assert chunks == live_chunks and offline.requests == []


def test_instrumented_client_calls_replay(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("instrumented"))
    path = tmp_path / "c.json"
    adapters.instrument(live.client)
    with cassettes.use(path, mode="record"):
        live.client.chat.completions.create(**api.kwargs)
    offline = Offline()
    client, _ = offline.clients("openai")
    adapters.instrument(client)
    with cassettes.use(path):
        response = client.chat.completions.create(**api.kwargs)
    assert response.choices[0].message.content == "instrumented" and offline.requests == []


def test_a_changed_prompt_fails_with_the_closest_recording_and_a_diff(tmp_path) -> None:
    api = APIS["anthropic"]
    live = api.scripted(api.reply("a"), api.reply("b"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "sync")
        run_call(api, live.client, live.aclient, "sync", {**api.kwargs, "max_tokens": 99, "messages": []})
    client, aclient = Offline().clients("anthropic")
    changed = {**api.kwargs, "messages": [{"role": "user", "content": "hello there"}]}
    with pytest.raises(cassettes.CassetteMiss) as miss, cassettes.use(path):
        run_call(api, client, aclient, "sync", changed)
    text = str(miss.value)
    assert "closest recorded call (#1 of 2)" in text
    diff_lines = [line.replace(" ", "") for line in text.splitlines()]
    assert '-"content":"hello"' in diff_lines and '+"content":"hellothere"' in diff_lines
    assert "max_tokens" not in text.split("diff recorded")[1]  # the diff shows what changed, not the other call


def test_a_cassette_never_holds_the_api_key(tmp_path) -> None:
    api = APIS["chat"]
    echoed = t.json_reply(
        {"error": {"message": f"Incorrect API key provided: {t.TEST_KEY}", "type": "invalid_request_error"}},
        status=401,
    )
    live = api.scripted(echoed, api.reply("ok"))
    path = tmp_path / "c.json"
    kwargs = {
        **api.kwargs,
        "extra_headers": {"Authorization": f"Bearer {t.TEST_KEY}"},
        "extra_body": {"api_key": t.TEST_KEY, "nested": {"client_secret": "also-a-secret-value"}},
    }
    with cassettes.use(path, mode="record"):
        with pytest.raises(Exception) as error:
            run_call(api, live.client, live.aclient, "sync", kwargs)
        assert type(error.value).__name__ == "AuthenticationError"
        run_call(api, live.client, live.aclient, "sync", kwargs)
    text = path.read_text()
    assert t.TEST_KEY not in text and "also-a-secret-value" not in text
    assert "Incorrect API key provided: [redacted]" in text
    # A secret redacted on disk still matches the live request on replay.
    client, aclient = Offline().clients("openai")
    with cassettes.use(path):
        with pytest.raises(Exception) as replayed:
            run_call(api, client, aclient, "sync", kwargs)
        assert type(replayed.value) is type(error.value)
        assert run_call(api, client, aclient, "sync", kwargs)[0].choices[0].message.content == "ok"


def test_a_redact_hook_cleans_more_before_writing(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("the customer's card is 4111-1111"))
    path = tmp_path / "c.json"

    def redact(call: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(call).replace("4111-1111", "XXXX"))

    with cassettes.use(path, mode="record", redact=redact):
        run_call(api, live.client, live.aclient, "sync")
    assert "4111" not in path.read_text() and "XXXX" in path.read_text()


@pytest.mark.parametrize("style", ("sync", "async", "stream"))
def test_a_recorded_error_replays_as_the_same_sdk_exception(tmp_path, style) -> None:
    import openai

    api = APIS["chat"]
    live = api.scripted(t.error(400, "bad temperature"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"), pytest.raises(openai.BadRequestError) as recorded:
        run_call(api, live.client, live.aclient, style)
    client, aclient = Offline().clients("openai")
    with cassettes.use(path), pytest.raises(openai.BadRequestError) as replayed:
        run_call(api, client, aclient, style)
    assert replayed.value.status_code == recorded.value.status_code == 400
    assert replayed.value.body == recorded.value.body and "bad temperature" in str(replayed.value)


def test_retries_exhausted_replay_every_try(relay_turn, relay_events, tmp_path) -> None:
    import anthropic

    api = APIS["anthropic"]
    live = api.scripted(t.error(529), t.error(503), t.error(500))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"), pytest.raises(anthropic.InternalServerError):
        run_call(api, live.client, live.aclient, "sync")
    live_events = shape(relay_events)
    relay_events.clear()
    client, aclient = Offline().clients("anthropic")
    with cassettes.use(path), pytest.raises(anthropic.InternalServerError) as replayed:
        run_call(api, client, aclient, "sync")
    assert replayed.value.status_code == 500
    assert shape(relay_events) == live_events
    assert [x["status"] for x in json.loads(path.read_text())["calls"][0]["http"]] == [529, 503, 500]


def test_a_transport_failure_then_success_replays(tmp_path) -> None:
    import httpx2

    api = APIS["chat"]
    script = t.Script()
    failures = [httpx2.ConnectError("connection refused")]

    def handler(request: httpx2.Request) -> httpx2.Response:
        if failures:
            raise failures.pop()
        return api.reply("after reconnect").response()

    client = t.openai_client(script)
    client._client._transport = httpx2.MockTransport(handler)
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, client, None, "sync")
    offline_client, _ = Offline().clients("openai")
    with cassettes.use(path):
        response, _ = run_call(api, offline_client, None, "sync")
    assert response.choices[0].message.content == "after reconnect"
    assert json.loads(path.read_text())["calls"][0]["http"][0]["error"]["type"] == "ConnectError"


def test_identical_requests_replay_in_recorded_order_and_then_miss(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("one"), api.reply("two"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        for _ in range(2):
            run_call(api, live.client, live.aclient, "sync")
    client, aclient = Offline().clients("openai")
    answers = []
    miss = pytest.raises(cassettes.CassetteMiss, match="all 2 recordings of it were already replayed")
    with miss, cassettes.use(path):
        for _ in range(3):
            answers.append(run_call(api, client, aclient, "sync")[0].choices[0].message.content)
    assert answers == ["one", "two"]


def test_a_retried_auxiliary_call_replays_its_retries(relay_turn, relay_events, tmp_path) -> None:
    from relay_runtime import auxiliary

    api = APIS["chat"]

    @auxiliary.auxiliary_call
    def summarize(task: str, client: Any) -> str:
        for _ in range(3):
            try:
                response = auxiliary.validate_response(adapters.complete(client, api.kwargs), task)
            except RuntimeError:
                continue  # an empty answer: ask again
            return str(response.choices[0].message.content)
        raise RuntimeError("no answer")

    live = api.scripted(api.reply(""), t.error(500), api.reply("summary"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        assert summarize("summarize", live.client) == "summary"
    live_events = shape(relay_events)
    relay_events.clear()
    client, _ = Offline().clients("openai")
    with cassettes.use(path):
        assert summarize("summarize", client) == "summary"
    assert shape(relay_events) == live_events
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [a.metadata[cv.RETRY_COUNT] for a in attempts] == [0, 1]
    assert [a.metadata[cv.SDK_RETRIES] for a in attempts] == [0, 1]
    assert [len(c["http"]) for c in json.loads(path.read_text())["calls"]] == [1, 2]


def test_auto_mode_replays_what_is_recorded_and_records_the_rest(tmp_path) -> None:
    api = APIS["chat"]
    path = tmp_path / "c.json"
    first = api.scripted(api.reply("recorded"))
    with cassettes.use(path, mode="auto"):
        run_call(api, first.client, first.aclient, "sync")
    second = api.scripted(api.reply("new"))
    other = {**api.kwargs, "messages": [{"role": "user", "content": "something else"}]}
    with cassettes.use(path, mode="auto"):
        assert run_call(api, second.client, second.aclient, "sync")[0].choices[0].message.content == "recorded"
        assert run_call(api, second.client, second.aclient, "sync", other)[0].choices[0].message.content == "new"
    assert len(second.script.requests) == 1
    assert len(json.loads(path.read_text())["calls"]) == 2


def test_a_swallowed_miss_still_fails_when_the_cassette_closes(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("x"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "sync")
    client, aclient = Offline().clients("openai")
    with pytest.raises(cassettes.CassetteMiss), cassettes.use(path):
        try:
            run_call(api, client, aclient, "sync", {**api.kwargs, "temperature": 1.0})
        except Exception:
            pass  # an agent's broad fallback


def test_calls_from_a_plain_worker_thread_see_the_cassette(tmp_path) -> None:
    import threading

    api = APIS["chat"]
    live = api.scripted(api.reply("threaded"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "sync")
    offline = Offline()
    client, _ = offline.clients("openai")
    out: list[Any] = []
    with cassettes.use(path):
        worker = threading.Thread(target=lambda: out.append(run_call(api, client, None, "sync")[0]))
        worker.start()
        worker.join()
    assert out[0].choices[0].message.content == "threaded" and offline.requests == []


def test_volatile_params_and_a_normalize_hook(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("x"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "sync", {**api.kwargs, "user": "u-1", "seed": 1})
    client, aclient = Offline().clients("openai")

    def ignore_seed(request: dict[str, Any]) -> dict[str, Any]:
        request.get("params", {}).pop("seed", None)
        return request

    with cassettes.use(path, normalize=ignore_seed):
        run_call(api, client, aclient, "sync", {**api.kwargs, "user": "u-2", "seed": 2})
    with pytest.raises(cassettes.CassetteMiss, match='"seed": 1'), cassettes.use(path):
        run_call(api, client, aclient, "sync", {**api.kwargs, "seed": 2})


def test_recorded_timing_reproduces_the_gaps_between_chunks(tmp_path) -> None:
    import time

    import httpx2

    api = APIS["chat"]
    frames = t.openai_chat_sse(t.chat_chunks(["a", "b", "c"]))

    class Slow(httpx2.SyncByteStream):
        def __iter__(self):  # type: ignore[no-untyped-def]
            for frame in frames:
                time.sleep(0.04)
                yield frame

    client = t.openai_client(t.Script())
    client._client._transport = httpx2.MockTransport(
        lambda r: httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Slow())
    )
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, client, None, "stream")
    offline, _ = Offline().clients("openai")

    def first_and_total(timing: str) -> tuple[float, float]:
        with cassettes.use(path, timing=timing):
            start = time.perf_counter()
            stream = adapters.stream(offline, api.kwargs)
            next(iter(stream))
            first = time.perf_counter() - start
            list(stream)
            return first, time.perf_counter() - start

    first, total = first_and_total("recorded")
    assert first >= 0.03 and total >= 0.04 * len(frames) * 0.9
    first, total = first_and_total("instant")
    assert total < 0.03


def test_replay_of_a_missing_cassette_and_of_junk_names_the_file(tmp_path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(cassettes.CassetteError, match="does not exist: record it once"), cassettes.use(missing):
        pass
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(cassettes.CassetteError, match=r"junk\.json cannot be read"), cassettes.use(junk):
        pass
    junk.write_text('{"calls": []}')
    with pytest.raises(cassettes.CassetteError, match="not a version 1 relay-runtime cassette"), cassettes.use(junk):
        pass
    with pytest.raises(ValueError, match="cassette mode must be one of replay, record, auto; got 'play'"):
        cassettes.use(junk, mode="play")
    with pytest.raises(ValueError, match="timing must be one of instant, recorded"):
        cassettes.use(junk, timing="slow")
    for path in (None, 123, ""):
        with pytest.raises(TypeError, match=f"cassette path must be a file path .*got {path!r}"):
            cassettes.use(path)  # type: ignore[arg-type]


def test_use_is_a_decorator_for_sync_and_async_functions(tmp_path) -> None:
    api = APIS["chat"]
    live = api.scripted(api.reply("decorated"))
    path = tmp_path / "c.json"

    @cassettes.use(path, mode="record")
    def record() -> Any:
        return run_call(api, live.client, live.aclient, "sync")[0]

    record()
    _, aclient = Offline().clients("openai")

    @cassettes.use(path)
    async def replay() -> Any:
        return await adapters.acomplete(aclient, api.kwargs)

    assert asyncio.run(replay()).choices[0].message.content == "decorated"
    assert cassettes.current() is None


def test_use_decorates_an_async_callable_object_until_it_is_awaited(tmp_path) -> None:
    """An async ``__call__`` (or a plain wrapper returning a coroutine): its calls replay, none goes live."""
    api = APIS["chat"]
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        adapters.complete(api.scripted(api.reply("recorded")).client, api.kwargs)
    offline = Offline()
    _, aclient = offline.clients("openai")

    class Agent:
        async def __call__(self) -> Any:
            return (await adapters.acomplete(aclient, api.kwargs)).choices[0].message.content

    assert asyncio.run(cassettes.use(path)(Agent())()) == "recorded"
    assert offline.requests == [] and cassettes.current() is None


def test_use_decorates_generators_for_their_whole_run(tmp_path) -> None:
    """A decorated (async) generator replays while it runs: its calls never reach a provider past its first yield."""
    api = APIS["chat"]
    live = api.scripted(api.reply("one"), api.reply("two"))
    path = tmp_path / "c.json"

    @cassettes.use(path, mode="record")
    def record() -> Any:
        for _ in range(2):
            yield adapters.complete(live.client, api.kwargs).choices[0].message.content

    assert list(record()) == ["one", "two"] and len(live.script.requests) == 2
    offline = Offline()
    client, aclient = offline.clients("openai")

    @cassettes.use(path)
    def replay() -> Any:
        sent = yield adapters.complete(client, api.kwargs).choices[0].message.content
        yield sent, adapters.complete(client, api.kwargs).choices[0].message.content

    gen = replay()
    assert next(gen) == "one" and gen.send("sent") == ("sent", "two")
    assert cassettes.current() is not None  # suspended: still in use
    gen.close()
    assert cassettes.current() is None

    @cassettes.use(path)
    async def areplay() -> Any:
        for _ in range(2):
            yield (await adapters.acomplete(aclient, api.kwargs)).choices[0].message.content

    async def read() -> list[Any]:
        return [text async for text in areplay()]

    assert asyncio.run(read()) == ["one", "two"]
    assert offline.requests == [] and cassettes.current() is None

    @cassettes.use(path)
    async def astop() -> Any:
        yield (await adapters.acomplete(aclient, api.kwargs)).choices[0].message.content
        yield "never"

    async def first() -> Any:
        agen = astop()
        text = await agen.__anext__()
        await agen.aclose()  # closed early: the cassette is no longer in use
        return text

    assert asyncio.run(first()) == "one" and cassettes.current() is None


def test_the_file_is_readable_json_with_the_neutral_request_and_sse_events(tmp_path) -> None:
    api = APIS["anthropic"]
    live = api.scripted(api.stream_reply(["Hi", "!"]))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "stream")
    call = json.loads(path.read_text())["calls"][0]
    assert call["request"] == {
        "provider": "anthropic",
        "api": "chat",
        "model": "claude-test",
        "system": "be brief",
        "messages": [{"role": "user", "content": "hello"}],
        "params": {"max_tokens": 64},
        "stream": True,
    }
    (exchange,) = call["http"]
    assert exchange["status"] == 200 and exchange["headers"]["content-type"] == "text/event-stream"
    assert [e["event"] for e in exchange["events"]][:2] == ["message_start", "content_block_start"]
    assert exchange["events"][2]["data"]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert path.read_text().count("\n") > 20  # one field a line: diffs show what changed


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_stream_that_fails_midway_replays_its_chunks_then_the_failure(
    relay_turn, relay_events, tmp_path, api_name
) -> None:
    import httpx2

    api = APIS[api_name]
    reply = api.stream_reply(["Hel", "lo"])
    reply.frames = list(reply.frames or [])[:3]
    reply.fail_with = httpx2.ReadError("connection reset by peer")
    (live_chunks, live_error, live_events), (chunks, error, events) = failing_stream_replay(
        api, reply, tmp_path / "c.json", relay_events, Offline()
    )
    assert dump(chunks) == dump(live_chunks) and chunks
    assert type(error) is type(live_error) and str(error) == str(live_error)
    assert events == live_events
    assert relay_events.ends(relay_kind=cv.ATTEMPT)[0].outcome == "failed"


def test_more_tries_than_recorded_is_a_miss_not_a_connection_error(tmp_path) -> None:
    import openai

    api = APIS["chat"]
    script = t.Script([t.error(500)])
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"), pytest.raises(openai.InternalServerError):
        adapters.complete(t.openai_client(script, max_retries=0), api.kwargs)
    retrying = t.openai_client(t.Script(), max_retries=1)  # this client would retry the 500 once more
    miss = pytest.raises(cassettes.CassetteMiss, match="more http requests than the 1 recorded")
    with miss, cassettes.use(path):
        adapters.complete(retrying, api.kwargs)


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_an_async_stream_records_no_failure_of_the_sdks_own_drain(tmp_path, api_name) -> None:
    """The async SDK re-reads a finished stream to drain it: the recording keeps only what the provider sent."""
    api = APIS[api_name]
    live = api.scripted(api.stream_reply(["a", "b"]))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        run_call(api, live.client, live.aclient, "astream")
    (exchange,) = json.loads(path.read_text())["calls"][0]["http"]
    assert exchange["status"] == 200 and exchange["events"] and "error" not in exchange


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_an_sdk_without_the_internals_a_direct_replay_uses_replays_over_http(tmp_path, monkeypatch, api_name) -> None:
    from relay_runtime.adapters import cassette_direct, cassette_http

    api = APIS[api_name]
    live = api.scripted(api.stream_reply(["a", "b"]))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        _, live_chunks = run_call(api, live.client, live.aclient, "stream")
    monkeypatch.setattr(cassette_direct, "_NEEDED", (*cassette_direct._NEEDED, "_an_internal_this_sdk_lacks"))
    monkeypatch.setattr(cassette_direct, "_SDKS", {})
    sent: list[Any] = []
    real = cassette_http._replay

    def replay(tape: Any, request: Any) -> Any:
        sent.append(request)
        return real(tape, request)

    monkeypatch.setattr(cassette_http, "_replay", replay)
    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    with cassettes.use(path):
        _, chunks = run_call(api, client, aclient, "stream")
    assert chunks == live_chunks and len(sent) == 1 and offline.requests == []


DAMAGE = {
    "status 'abc' is not an HTTP status": {"status": "abc"},
    "status 99 is not an HTTP status": {"status": 99},
    "headers must be an object of strings": {"headers": ["content-type"]},
    "base64 is not base64": {"body": None, "base64": "!!not base64!!"},
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("timing", ["instant", "recorded"])
def test_a_hand_edited_exchange_is_an_error_naming_the_file_and_what_is_wrong(tmp_path, damage, timing) -> None:
    api = APIS["chat"]
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        adapters.complete(api.scripted(api.reply("ok")).client, api.kwargs)
    document = json.loads(path.read_text())
    exchange = document["calls"][0]["http"][0]
    for key, value in DAMAGE[damage].items():
        exchange.pop(key) if value is None else exchange.__setitem__(key, value)
    path.write_text(json.dumps(document))
    offline = Offline()
    client, _ = offline.clients("openai")
    damaged = pytest.raises(cassettes.CassetteError, match=f"cassette {path}: .*damaged: {damage}")
    with damaged, cassettes.use(path, timing=timing):
        adapters.complete(client, api.kwargs)
    assert offline.requests == []


def test_a_cassette_whose_version_is_true_is_not_version_1(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"relay_runtime_cassette": True, "calls": []}))
    with pytest.raises(cassettes.CassetteError, match="is not a version 1 relay-runtime cassette"):
        cassettes.use(path).__enter__()
