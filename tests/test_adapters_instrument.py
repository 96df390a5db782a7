"""instrument(client) / uninstrument(client): per client, idempotent, undoable."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, auxiliary
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.instrument import ManagedCreate, is_instrumented


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def test_instrumented_create_is_a_managed_call_once_however_often_instrumented(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("one")))
    client = scripted.client
    assert adapters.instrument(client) is client
    adapters.instrument(client)
    response = client.chat.completions.create(model="m", messages=[])
    assert response.choices[0].message.content == "one"
    assert len(attempts(relay_events)) == 1
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1


def test_uninstrument_restores_the_original_methods_exactly(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body()))
    client = scripted.client
    before = {name: r.create for name, r in (("chat", client.chat.completions), ("responses", client.responses))}
    adapters.instrument(client)
    assert is_instrumented(client)
    assert isinstance(client.chat.completions.create, ManagedCreate)
    adapters.uninstrument(client)
    adapters.uninstrument(client)  # a second undo is a no-op
    assert not is_instrumented(client)
    assert not isinstance(client.chat.completions.create, ManagedCreate)
    assert client.chat.completions.create == before["chat"]
    assert client.responses.create == before["responses"]
    assert "create" not in vars(client.chat.completions)
    client.chat.completions.create(model="m", messages=[])
    assert attempts(relay_events) == []


def test_uninstrument_puts_back_an_instance_patch_made_before(relay_turn) -> None:
    scripted = t.scripted_openai()
    resource = scripted.client.chat.completions

    def earlier_patch(**kwargs: Any) -> str:
        return "patched"

    resource.create = earlier_patch
    adapters.instrument(scripted.client)
    adapters.uninstrument(scripted.client)
    assert resource.create is earlier_patch


def test_other_clients_of_the_same_class_are_untouched(relay_turn, relay_events) -> None:
    mine = t.scripted_openai(t.json_reply(t.chat_completion_body("mine")))
    other = t.scripted_openai(t.json_reply(t.chat_completion_body("other")))
    adapters.instrument(mine.client)
    other.client.chat.completions.create(model="m", messages=[])
    assert attempts(relay_events) == []
    assert not is_instrumented(other.client)
    mine.client.chat.completions.create(model="m", messages=[])
    assert len(attempts(relay_events)) == 1


def test_instrumented_stream_and_dispatch_do_not_double_count(relay_turn, relay_events) -> None:
    scripted = t.scripted_anthropic(
        t.sse_reply(t.typed_sse(t.anthropic_events(["s", "t"]))),
        t.json_reply(t.anthropic_message_body("via dispatch")),
    )
    client = adapters.instrument(scripted.client)
    kinds = [e.type for e in client.messages.create(model="c", max_tokens=5, messages=[], stream=True)]
    assert kinds[-1] == "message_stop"
    adapters.complete(client, {"model": "c", "max_tokens": 5, "messages": []})
    ends = attempts(relay_events)
    assert len(ends) == 2
    assert ends[0].annotated_response.output_text == "st" and ends[0].provider == "anthropic"
    assert ends[1].annotated_response.output_text == "via dispatch"


@pytest.mark.asyncio
async def test_instrumented_async_client_sync_and_stream(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(
        t.error(500),
        t.json_reply(t.responses_body("r1")),
        t.sse_reply(t.openai_chat_sse(t.chat_chunks(["c", "2"]))),
    )
    client = adapters.instrument(scripted.aclient)
    response = await client.responses.create(model="m", input="hi")
    assert response.output_text == "r1"
    stream = await client.chat.completions.create(model="m", messages=[], stream=True)
    pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(pieces) == "c2"
    ends = attempts(relay_events)
    assert [e.annotated_request.operation for e in ends] == ["responses", "chat"]
    assert ends[0].metadata[cv.SDK_RETRIES] == 1
    assert ends[1].annotated_response.output_text == "c2"
    adapters.uninstrument(client)
    assert not is_instrumented(client)


def test_instrumented_client_inside_an_auxiliary_call_joins_its_logical_call(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("")), t.json_reply(t.chat_completion_body("good")))
    client = adapters.instrument(scripted.client)

    @auxiliary.auxiliary_call
    def summarise(task: str) -> Any:
        auxiliary.set_route("openrouter", "m", "chat_completions")
        with pytest.raises(RuntimeError, match="invalid response"):
            auxiliary.validate_response(client.chat.completions.create(model="m", messages=[]), task)
        return auxiliary.validate_response(client.chat.completions.create(model="m", messages=[]), task)

    assert summarise("compression").choices[0].message.content == "good"
    ends = attempts(relay_events)
    assert [e.metadata[cv.RETRY_COUNT] for e in ends] == [0, 1]
    assert {e.metadata[cv.API_REQUEST_ID] for e in ends} == {ends[0].metadata[cv.API_REQUEST_ID]}
    assert all(e.provider == "openrouter" for e in ends)
    logical = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert [(e.output or {}).get("outcome") for e in logical] == ["success"]


def test_instrumenting_from_many_threads_wraps_once(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("x")))
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait(timeout=5)
        adapters.instrument(scripted.client)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=5)
    scripted.client.chat.completions.create(model="m", messages=[])
    assert len(attempts(relay_events)) == 1
    adapters.uninstrument(scripted.client)
    assert "create" not in vars(scripted.client.chat.completions)


def test_duck_typed_client_and_bad_targets() -> None:
    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=lambda **kw: kw)))
    adapters.instrument(client)
    assert client.chat.completions.create(model="m", messages=[]) == {"model": "m", "messages": []}
    adapters.uninstrument(client)
    with pytest.raises(TypeError, match="cannot instrument object"):
        adapters.instrument(object())


def test_raw_response_helpers_made_before_instrument_are_traced(relay_turn, relay_events) -> None:
    # The SDKs cache with_raw_response / with_streaming_response with the create() they saw first.
    scripted = t.scripted_openai(*(t.json_reply(t.chat_completion_body("a")) for _ in range(3)))
    client = scripted.client
    _ = client.chat.completions.with_raw_response, client.with_raw_response.chat.completions
    _ = client.chat.completions.with_streaming_response
    adapters.instrument(client)
    client.chat.completions.with_raw_response.create(model="m", messages=[]).parse()
    client.with_raw_response.chat.completions.create(model="m", messages=[]).parse()
    with client.chat.completions.with_streaming_response.create(model="m", messages=[]) as response:
        response.parse()
    assert len(attempts(relay_events)) == 3


def test_uninstrumented_client_is_untraced_through_references_held_while_instrumented(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai(*(t.json_reply(t.chat_completion_body("a")) for _ in range(3)))
    client = scripted.client
    adapters.instrument(client)
    raw = client.chat.completions.with_raw_response
    create = client.chat.completions.create
    copy = client.copy
    adapters.uninstrument(client)
    raw.create(model="m", messages=[]).parse()
    create(model="m", messages=[])
    derived = copy()
    assert not is_instrumented(derived)
    derived.chat.completions.create(model="m", messages=[])
    assert attempts(relay_events) == []


def test_client_instrumented_under_the_global_wrapper_stays_one_attempt_after_it_is_removed(
    relay_turn, relay_events
) -> None:
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("a")))
    client = scripted.client
    adapters.instrument()
    try:
        adapters.instrument(client)  # wraps the class's wrapper, as bound then
    finally:
        adapters.uninstrument()
    client.chat.completions.create(model="m", messages=[])
    assert len(attempts(relay_events)) == 1
    adapters.uninstrument(client)
