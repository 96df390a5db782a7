"""Cassettes on the other exit paths of a call: early break, intercepts, fallback, many concurrent tasks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from relay_runtime import LLMRequestInterceptOutcome, adapters, auxiliary, cassettes
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Offline, dump, shape


@pytest.mark.parametrize("api_name", sorted(APIS))
def test_a_replayed_stream_broken_early_is_cancelled_as_live(relay_turn, relay_events, tmp_path, api_name) -> None:
    api = APIS[api_name]
    live = api.scripted(api.stream_reply(["a", "b", "c", "d"]))
    path = tmp_path / "c.json"

    def first_two(client: Any) -> list[Any]:
        stream = adapters.stream(client, api.kwargs, api_mode=api.api_mode)
        got = []
        for chunk in stream:
            got.append(chunk)
            if len(got) == 2:
                break
        stream.close()
        return got

    with cassettes.use(path, mode="record"):
        live_chunks = first_two(live.client)
    live_events = shape(relay_events)
    relay_events.clear()
    client, _ = Offline().clients(api.sdk)
    with cassettes.use(path):
        chunks = first_two(client)
    assert dump(chunks) == dump(live_chunks)
    assert shape(relay_events) == live_events
    assert relay_events.ends(relay_kind=cv.ATTEMPT)[0].outcome == "cancelled"


def test_the_cassette_holds_the_request_an_intercept_made(relay_turn, relay_events, tmp_path) -> None:
    relay, _turn = relay_turn
    api = APIS["chat"]

    def cooler(_name: str, request: Any, annotated: Any) -> LLMRequestInterceptOutcome:
        annotated.params["temperature"] = 0.0
        return LLMRequestInterceptOutcome(request, annotated)

    path = tmp_path / "c.json"
    live = api.scripted(api.reply("cool"))
    relay.intercepts.register_llm_request("cooler", 1, False, cooler)
    try:
        with cassettes.use(path, mode="record"):
            adapters.complete(live.client, api.kwargs)
        client, _ = Offline().clients("openai")
        with cassettes.use(path):
            assert adapters.complete(client, api.kwargs).choices[0].message.content == "cool"
    finally:
        relay.intercepts.deregister_llm_request("cooler")
    assert json.loads(path.read_text())["calls"][0]["request"]["params"] == {"temperature": 0.0}
    # Without the intercept the request is what the caller wrote, and that was never recorded.
    miss = pytest.raises(cassettes.CassetteMiss, match=r'(?s)-\s+"temperature": 0\.0.*\+\s+"temperature": 0\.2')
    with miss, cassettes.use(path):
        adapters.complete(client, api.kwargs)


def test_a_fallback_after_a_recorded_provider_error_replays(relay_turn, relay_events, tmp_path) -> None:
    import anthropic

    claude, gpt = APIS["anthropic"], APIS["chat"]

    @auxiliary.auxiliary_call
    def title(task: str, primary: Any, fallback: Any) -> str:
        try:
            auxiliary.set_route("anthropic", "claude-test", "anthropic_messages")
            return str(auxiliary.validate_response(adapters.complete(primary, claude.kwargs), task).content[0].text)
        except anthropic.BadRequestError:
            auxiliary.set_route("openai", "gpt-test", "chat_completions")
            reply = auxiliary.validate_response(adapters.complete(fallback, gpt.kwargs), task)
            return str(reply.choices[0].message.content)

    primary = claude.scripted(t.error(400, "prompt too long"))
    fallback = gpt.scripted(gpt.reply("A title"))
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        assert title("title", primary.client, fallback.client) == "A title"
    live_events = shape(relay_events)
    relay_events.clear()
    offline = Offline()
    with cassettes.use(path):
        result = title("title", offline.clients("anthropic")[0], offline.clients("openai")[0])
    assert result == "A title" and offline.requests == []
    assert shape(relay_events) == live_events
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [(a.provider, a.outcome) for a in attempts] == [("anthropic", "failed"), ("openai", "success")]
    assert attempts[0].error_type == "BadRequestError"


def test_many_concurrent_tasks_each_get_their_own_recording(tmp_path) -> None:
    import openai

    def echo(request: httpx2.Request) -> httpx2.Response:
        prompt = json.loads(request.content)["messages"][0]["content"]
        return httpx2.Response(200, json=t.chat_completion_body(f"answer to {prompt}"))

    def client(transport: Any) -> Any:
        return openai.AsyncOpenAI(
            api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, http_client=httpx2.AsyncClient(transport=transport)
        )

    async def ask_all(llm: Any) -> dict[str, str]:
        async def ask(prompt: str) -> tuple[str, str]:
            kwargs = {"model": "gpt-test", "messages": [{"role": "user", "content": prompt}]}
            return prompt, (await adapters.acomplete(llm, kwargs)).choices[0].message.content

        return dict(await asyncio.gather(*(ask(f"question {i}") for i in range(30))))

    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        live = asyncio.run(ask_all(client(httpx2.MockTransport(echo))))
    _, offline = Offline().clients("openai")
    with cassettes.use(path):
        replayed = asyncio.run(ask_all(offline))
    assert replayed == live and live["question 7"] == "answer to question 7"
