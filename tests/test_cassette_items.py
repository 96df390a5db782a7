"""Replayed stream items built by the compiled validator equal, to their internals, the live SDK's items."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Annotated, Any, Literal

import pydantic
import pytest

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import cassette_direct, cassette_items
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Offline, shape

NAN = float("nan")


def chat_events() -> tuple[list[bytes], int]:
    """Chat chunks of every usual kind, unknown keys at every level, and what only the SDK's parser builds."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-test"}

    def chunk(choice: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
        return {**head, "choices": [] if choice is None else [{"index": 0, "logprobs": None, **choice}], **more}

    usual = [
        chunk({"delta": {"role": "assistant", "content": "", "refusal": None}, "finish_reason": None}),
        chunk(
            {
                "delta": {"content": "Hel"},
                "finish_reason": None,
                # An integer log probability: the SDK makes it a float, as strict validation does.
                "logprobs": {"content": [{"token": "Hel", "logprob": 0, "bytes": [72], "top_logprobs": []}]},
            },
            system_fingerprint="fp_1",
            obfuscation="abc",
        ),
        chunk(
            {
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a"', "new_in_function": 1},
                        }
                    ],
                    "new_in_delta": {"nested": [1, 2]},
                },
                "finish_reason": None,
                "new_in_choice": True,
            },
            new_at_top="x",
        ),
        chunk({"delta": {}, "finish_reason": "tool_calls"}, service_tier="default"),
        chunk(usage={**t.chat_usage(12, 5, cached=3), "new_in_usage": 7}),
    ]
    odd = [
        chunk({"delta": {"content": "!"}, "finish_reason": "a_new_finish_reason"}),  # not in the SDK's Literal
        {**chunk({"delta": {"content": "?"}, "finish_reason": None}), "created": "1700000000"},  # a string
        chunk({"delta": {}, "finish_reason": None, "logprobs": {"content": [{"token": "x", "logprob": NAN}]}}),
    ]
    return t.openai_chat_sse(usual[:2] + odd + usual[2:]), len(odd)


def responses_events() -> tuple[list[bytes], int]:
    events = t.responses_events(["Hel", "lo"], function_call={"call_id": "c1", "name": "f", "arguments": '{"a": 1}'})
    events[1]["new_in_event"] = {"k": "v"}
    events[-1]["response"]["new_in_response"] = 1
    odd = [{"type": "response.a_new_event", "sequence_number": 90, "payload": {"k": 1}}]
    # A number sent as a string: the SDK validates a stream event lax, and so does the replay.
    coerced = {**events[2], "sequence_number": "91"}
    return t.typed_sse([*events[:2], *odd, coerced, *events[2:]]), len(odd)


def anthropic_events() -> tuple[list[bytes], int]:
    events = t.anthropic_events(
        ["Hel", "lo"], thinking="hmm", tool_use={"id": "tu_1", "name": "f", "input": {"a": 1}}, stop_reason="tool_use"
    )
    events[0]["message"]["new_in_message"] = [1]
    events[-2]["new_in_event"] = True
    odd = [
        {"type": "content_block_delta", "index": 1, "delta": {"type": "a_new_delta", "text": "x"}},
        {"type": "message_delta", "delta": {"stop_reason": "a_new_stop_reason", "stop_sequence": None}, "usage": {}},
    ]
    frames = t.typed_sse([*events[:2], *odd, *events[2:]])
    return [frames[0], t.sse_frame({"type": "ping"}, "ping"), *frames[1:]], len(odd)


CORPUS = {"chat": chat_events, "responses": responses_events, "anthropic": anthropic_events}


def state(value: Any) -> Any:
    """Everything an SDK object holds, recursively, with each value's exact type (NaN made comparable)."""
    if isinstance(value, pydantic.BaseModel):
        return (
            type(value),
            {k: state(v) for k, v in value.__dict__.items()},
            sorted(value.__pydantic_fields_set__),
            state(value.__pydantic_extra__),
            value.__pydantic_private__,
        )
    if isinstance(value, dict):
        return {k: state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [state(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return (float, "nan")
    return (type(value), value)


def views(chunk: Any) -> Any:
    """What a user reads of a chunk: the dumps the SDK offers (as JSON text, so NaN compares)."""
    return (
        repr(chunk),
        chunk.to_json(),
        json.dumps(chunk.to_dict(), default=repr),
        json.dumps(chunk.model_dump(), default=repr),
        json.dumps(chunk.model_dump(exclude_unset=True), default=repr),
        sorted(chunk.model_fields_set),
    )


def consume(api_name: str, client: Any, aclient: Any, style: str) -> list[Any]:
    api = APIS[api_name]
    if style == "stream":
        return list(adapters.stream(client, api.kwargs, api_mode=api.api_mode))

    async def run() -> list[Any]:
        return [chunk async for chunk in await adapters.astream(aclient, api.kwargs, api_mode=api.api_mode)]

    return asyncio.run(run())


def count_sdk_parses(client: Any) -> list[Any]:
    """The items the replay left to the SDK's own parser (its response processing, wrapped on this client)."""
    parsed: list[Any] = []
    sdk_parse = client._process_response_data

    def counting(**kwargs: Any) -> Any:
        parsed.append(kwargs["data"])
        return sdk_parse(**kwargs)

    client._process_response_data = counting
    return parsed


# Dumping the odd items warns alike in both runs (a value the SDK's Literal does not know).
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@pytest.mark.parametrize("style", ("stream", "astream"))
@pytest.mark.parametrize("api_name", sorted(CORPUS))
def test_replayed_items_equal_the_live_sdk_items_to_their_internals(
    relay_turn, relay_events, tmp_path, monkeypatch, api_name, style
) -> None:
    api = APIS[api_name]
    frames, odd = CORPUS[api_name]()
    path = tmp_path / "c.json"
    live = api.scripted(t.sse_reply(frames))
    with cassettes.use(path, mode="record"):
        live_items = consume(api_name, live.client, live.aclient, style)
    live_events = shape(relay_events)
    relay_events.clear()

    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    parsed = count_sdk_parses(client if style == "stream" else aclient)
    with cassettes.use(path):
        items = consume(api_name, client, aclient, style)
    assert offline.requests == []
    assert [state(i) for i in items] == [state(i) for i in live_items] and len(items) > odd
    assert [views(i) for i in items] == [views(i) for i in live_items]
    assert items == live_items or api_name == "chat"  # (a NaN is unequal to itself)
    # The odd items, and only those, were built by the SDK's own parser.
    assert len(parsed) == odd
    assert shape(relay_events) == live_events


def test_a_client_that_validates_responses_gets_validated_items(tmp_path) -> None:
    """With strict response validation the SDK validates every item: unknown keys count as set, as there."""
    api = APIS["chat"]
    chunk = {**t.chat_chunks(["a"])[0], "new_at_top": 1}
    chunk["choices"][0]["new_in_choice"] = 2
    live = api.scripted(t.sse_reply(t.openai_chat_sse([chunk])))
    live.client._strict_response_validation = True
    with cassettes.use(tmp_path / "c.json", mode="record"):
        (live_item,) = adapters.stream(live.client, api.kwargs)
    client, _ = Offline().clients("openai")
    client._strict_response_validation = True
    parsed = count_sdk_parses(client)
    with cassettes.use(tmp_path / "c.json"):
        (item,) = adapters.stream(client, api.kwargs)
    assert state(item) == state(live_item) and "new_at_top" in item.model_fields_set and parsed == []


def test_a_replayed_item_is_a_fresh_object_not_the_cassettes_data(tmp_path) -> None:
    api = APIS["chat"]
    chunk = {**t.chat_chunks(["a"])[0], "new_at_top": {"k": [1]}}
    live = api.scripted(t.sse_reply(t.openai_chat_sse([chunk])))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        list(adapters.stream(live.client, api.kwargs))
    client, _ = Offline().clients("openai")
    with cassettes.use(tmp_path / "c.json") as cassette:
        (item,) = adapters.stream(client, api.kwargs)
        item.new_at_top["k"].append(2)
        (recorded,) = cassette.recorded[0]["http"][0]["events"][:1]
    assert recorded["data"]["new_at_top"] == {"k": [1]}


@pytest.mark.parametrize("style", ("stream", "astream"))
@pytest.mark.parametrize("api_name", sorted(CORPUS))
def test_without_a_fast_builder_the_sdks_stream_reads_the_recorded_body(tmp_path, monkeypatch, api_name, style) -> None:
    """A type the validator may not build alike leaves every item to the SDK's stream, over the recorded SSE."""
    api = APIS[api_name]
    frames, _ = CORPUS[api_name]()
    live = api.scripted(t.sse_reply(frames))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        live_items = consume(api_name, live.client, live.aclient, style)
    monkeypatch.setattr(cassette_items, "builder", lambda item_type, sdk_validates: None)
    client, aclient = Offline().clients(api.sdk)
    with cassettes.use(tmp_path / "c.json"):
        items = consume(api_name, client, aclient, style)
    assert [state(i) for i in items] == [state(i) for i in live_items]


# -- which types the validator may build -------------------------------------------------------


from openai._models import BaseModel as Sdk  # noqa: E402 - the SDK's base, with its construct
from openai._models import construct_type  # noqa: E402


class Plain(Sdk):
    name: str
    size: int | None = None


class Aliased(Sdk):
    schema_: str = pydantic.Field(alias="schema")


class Defaulted(Sdk):
    mode: str | None = "fast"  # construct puts "fast" where the JSON says null


class Validated(Sdk):
    name: str

    @pydantic.field_validator("name")
    @classmethod
    def upper(cls, value: str) -> str:
        return value.upper()


class Ignoring(pydantic.BaseModel):
    name: str


class Outer(Sdk):
    inner: Aliased  # constructed by the SDK, so checked too


class Cat(Sdk):
    type: Literal["cat"]


class Dog(Sdk):
    type: Literal["dog"]


class Bird(Sdk):
    type: Literal["bird"] = "bird"  # not required: a JSON object without "type" may still be a Bird


class Pets(Sdk):
    pets: list[Cat | Dog]
    others: list[Cat | Dog] | None = None


class Flock(Sdk):
    birds: list[Cat | Bird]  # a JSON object without "type" might fill either member


class Floaty(Sdk):
    at: float  # construct keeps 2**53 + 1 an int; validation makes it a float


class Gridded(Sdk):
    grid: list[list[Cat]]


class Paired(Sdk):
    pair: tuple[int, int]  # construct keeps the JSON list


class Kennel(Sdk):
    pet: Cat = None  # type: ignore[assignment]  # a model field whose default is None (not Optional)


class Tag:
    def __init__(self, discriminator: str) -> None:
        self.discriminator = discriminator


@pytest.mark.parametrize("model", (Aliased, Defaulted, Validated, Ignoring, Outer, Floaty, Gridded, Paired))
def test_a_model_whose_construct_could_differ_gets_no_fast_builder(model) -> None:
    assert cassette_items.builder(model, sdk_validates=False) is None
    with pytest.raises(cassette_items._NotAlike):  # refused for what it is, not for an error on the way
        cassette_items._make_builder(model, sdk_validates=False)


def test_a_plain_model_and_a_discriminated_union_get_one() -> None:
    plain = cassette_items.builder(Plain, sdk_validates=False)
    assert plain is not None
    built = plain.build('{"name": "a", "new": 1}')
    assert type(built) is Plain and built.model_fields_set == {"name"} and built.new == 1  # type: ignore[attr-defined]
    assert plain.build('{"name": 1}') is cassette_items.NOT_BUILT  # a number where a string belongs
    assert plain.build(cassette_items.json_text({"name": "\ud800"})) is cassette_items.NOT_BUILT  # the SDK keeps it
    pets = cassette_items.builder(Annotated[Cat | Dog, Tag("type")], sdk_validates=False)
    assert pets is not None and type(pets.build('{"type": "dog"}')) is Dog
    assert pets.build('{"type": "bird"}') is cassette_items.NOT_BUILT
    assert cassette_items.builder(Cat | Dog, sdk_validates=False) is None  # no discriminator named


def test_the_stream_items_each_sdk_yields_from_the_recorded_events() -> None:
    chunk = {"id": "c"}
    assert cassette_direct._openai_items([{"data": chunk}, {"data": "[DONE]"}, {"data": chunk}]) == [b'{"id":"c"}']
    assert cassette_direct._openai_items([{"data": "plain text"}]) is None
    assert cassette_direct._openai_items([{"event": "thread.created", "data": chunk}]) is None
    events = [{"data": chunk}, {"event": "ping", "data": {"type": "ping"}}, {"event": "x", "data": ""}]
    assert cassette_direct._anthropic_items([*events, {"event": "x", "data": chunk}]) == [b'{"id":"c"}']
    assert cassette_direct._anthropic_items([{"event": "x", "data": "text"}]) is None
    # An error event (the SDK raises on it) or a malformed one: the HTTP path's, for both SDKs.
    for items in (cassette_direct._openai_items, cassette_direct._anthropic_items):
        assert items([{"event": "x", "data": chunk}, {"event": "x", "data": {"error": {"message": "m"}}}]) is None
        assert items([{"event": "error", "data": chunk}]) is None and items([["not", "an", "event"]]) is None


def test_the_json_text_reads_back_as_the_recorded_data_and_parses_alike() -> None:
    import random
    import struct

    odd = {"nan": NAN, "inf": float("inf"), "big": 10**40, "surrogate": "\ud800", "text": "é\u2028\x00", "neg": -0.0}
    assert state(json.loads(cassette_items.json_text(odd))) == state(odd)
    rng = random.Random(7)
    floats = [x for x in (struct.unpack("d", rng.randbytes(8))[0] for _ in range(2000)) if math.isfinite(x)]
    raw = cassette_items.json_text({"name": "a", "floats": floats})
    plain = cassette_items.builder(Plain, sdk_validates=False)
    assert plain is not None
    built = plain.build(raw)
    # The compiled parser reads every float as the standard one does (bit for bit).
    assert [struct.pack("d", x) for x in built.floats] == [struct.pack("d", x) for x in json.loads(raw)["floats"]]


def test_a_union_of_models_each_requiring_its_own_type_is_tagged_and_no_other() -> None:
    pets = cassette_items.builder(Pets, sdk_validates=False)  # builds the schema the SDK's base defers
    assert pets is not None
    raw = b'{"pets": [{"type": "dog"}, {"type": "cat", "new": 1}], "others": [{"type": "cat"}], "new": 2}'
    built = pets.build(raw)
    assert [type(p) for p in built.pets] == [Dog, Cat] and type(built.others[0]) is Cat
    assert state(built) == state(construct_type(value=json.loads(raw), type_=Pets))  # as the SDK builds it
    assert pets.build(b'{"pets": [{"type": "fish"}]}') is cassette_items.NOT_BUILT
    Flock.model_rebuild()
    tagged = json.dumps(cassette_items.tag_unions(Flock.__pydantic_core_schema__), default=repr)
    assert '"tagged-union"' not in tagged and '"union"' in tagged  # Bird's type is not required
    # Strict validation of that union might pick another member than the SDK's lax one: not for a
    # type the SDK constructs; one it validates is validated lax here too, the same validation.
    assert cassette_items.builder(Flock, sdk_validates=False) is None
    kennel = cassette_items.builder(Kennel, sdk_validates=False)
    for raw in (b"{}", b'{"pet": {"type": "cat", "new": 1}}', b'{"pet": null}'):
        built = kennel.build(raw) if kennel is not None else None
        sdk = construct_type(value=json.loads(raw), type_=Kennel)
        assert built is cassette_items.NOT_BUILT or state(built) == state(sdk)
    assert kennel is not None and kennel.build(b'{"pet": null}') is cassette_items.NOT_BUILT
    flock = cassette_items.builder(Flock, sdk_validates=True)
    assert flock is not None and type(flock.build(b'{"birds": [{}]}').birds[0]) is Bird


# -- non-streamed answers ----------------------------------------------------------------------


def chat_bodies() -> tuple[list[dict[str, Any]], int]:
    usual = t.chat_completion_body(
        None, finish_reason="tool_calls", tool_calls=[{"id": "c1", "name": "f", "arguments": "{}"}]
    )
    usual["new_at_top"] = {"k": [1]}
    usual["choices"][0]["new_in_choice"] = 1
    usual["choices"][0]["message"]["new_in_message"] = "x"
    usual["choices"][0]["logprobs"] = {"content": [{"token": "a", "logprob": 0, "bytes": None, "top_logprobs": []}]}
    return [usual, t.chat_completion_body("a", finish_reason="a_new_finish_reason"), t.chat_completion_body("b")], 1


def responses_bodies() -> tuple[list[dict[str, Any]], int]:
    usual = t.responses_body("a", function_call={"call_id": "c1", "name": "f", "arguments": "{}"})
    usual["new_at_top"] = 1
    usual["output"][0]["content"][0]["new_in_part"] = [1]
    odd = t.responses_body("b")
    odd["output"].append({"type": "a_new_item", "id": "n1"})
    # A Response is constructed with a float (created_at) the validator might not build alike:
    # every answer is the SDK parser's.
    return [usual, odd, t.responses_body("c")], 3


def anthropic_bodies() -> tuple[list[dict[str, Any]], int]:
    usual = t.anthropic_message_body("a", tool_use={"id": "tu_1", "name": "f", "input": {"a": [1]}})
    usual["content"].insert(0, {"type": "thinking", "thinking": "hmm", "signature": "s"})
    usual["new_at_top"] = {"k": 1}
    usual["usage"]["new_in_usage"] = 2  # a level the SDK constructs
    odd = t.anthropic_message_body("b", stop_reason="a_new_stop_reason")
    return [usual, odd, t.anthropic_message_body("c")], 1


BODIES = {"chat": chat_bodies, "responses": responses_bodies, "anthropic": anthropic_bodies}


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@pytest.mark.parametrize("style", ("sync", "async"))
@pytest.mark.parametrize("api_name", sorted(BODIES))
def test_replayed_answers_equal_the_live_sdk_answers_to_their_internals(
    relay_turn, relay_events, tmp_path, api_name, style
) -> None:
    api = APIS[api_name]
    bodies, odd = BODIES[api_name]()

    def answers(client: Any, aclient: Any) -> list[Any]:
        if style == "sync":
            return [adapters.complete(client, api.kwargs, api_mode=api.api_mode) for _ in bodies]

        async def run() -> list[Any]:
            return [await adapters.acomplete(aclient, api.kwargs, api_mode=api.api_mode) for _ in bodies]

        return asyncio.run(run())

    live = api.scripted(
        *(t.json_reply(body, headers={"x-request-id": "req_1", "request-id": "req_1"}) for body in bodies)
    )
    with cassettes.use(tmp_path / "c.json", mode="record"):
        live_answers = answers(live.client, live.aclient)
    live_events = shape(relay_events)
    relay_events.clear()
    offline = Offline()
    client, aclient = offline.clients(api.sdk)
    parsed = count_sdk_parses(client if style == "sync" else aclient)
    with cassettes.use(tmp_path / "c.json"):
        replayed = answers(client, aclient)
    assert offline.requests == [] and len(parsed) == odd  # the odd answer, and only it, by the SDK's parser
    assert [state(a) for a in replayed] == [state(a) for a in live_answers]
    assert [views(a) for a in replayed] == [views(a) for a in live_answers] and replayed == live_answers
    assert [a._request_id for a in replayed] == [a._request_id for a in live_answers] == ["req_1"] * len(bodies)
    assert shape(relay_events) == live_events


@pytest.mark.parametrize("method", ("POST", "GET", "put"))
def test_a_replayed_streams_request_is_what_httpx_makes_of_its_method_and_url(method) -> None:
    import httpx2

    url = httpx2.URL("https://api.example.test:8443/v1/messages?beta=true")
    made, usual = cassette_direct._request(method, url), httpx2.Request(method, url)
    assert (made.method, made.url, made.headers.raw, made.content, made.extensions) == (
        usual.method,
        usual.url,
        usual.headers.raw,
        usual.content,
        usual.extensions,
    )
    assert type(made.stream) is type(usual.stream) and list(made.stream) == list(usual.stream)
