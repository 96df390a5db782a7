"""Every client the SDK builds is traced by ``instrument()``; whatever still escapes is counted, never silent.

``anthropic.lib.vertex`` and ``anthropic.lib.bedrock`` define beta ``Messages`` classes that copy the
first-party methods at import: wrapping the first-party classes alone never saw their calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from relay_runtime import Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.instrument import ManagedCreate

UNTRACED = "adapters.untraced_calls"
MESSAGES = [{"role": "user", "content": "hi"}]


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


@pytest.fixture()
def instrumented() -> Iterator[None]:
    adapters.instrument()
    try:
        yield
    finally:
        adapters.uninstrument()


def vertex(script: t.Script, is_async: bool = False) -> Any:
    from anthropic.lib.vertex import AnthropicVertex, AsyncAnthropicVertex

    cls = AsyncAnthropicVertex if is_async else AnthropicVertex
    http = httpx2.AsyncClient(transport=script.transport()) if is_async else httpx2.Client(transport=script.transport())
    return cls(
        region="us-east5", project_id="proj", access_token="tok-not-a-secret", base_url="http://vertex.test",
        max_retries=0, open_telemetry=False, http_client=http,
    )  # fmt: skip


def bedrock(script: t.Script) -> Any:
    from anthropic.lib.bedrock import AnthropicBedrock

    return AnthropicBedrock(
        api_key="bedrock-key-not-a-secret", aws_region="us-east-1", base_url="http://bedrock.test", max_retries=0,
        open_telemetry=False, http_client=httpx2.Client(transport=script.transport()),
    )  # fmt: skip


def test_vertex_beta_messages_are_traced(relay_turn, relay_events, instrumented) -> None:
    script = t.Script(
        [
            t.json_reply(t.anthropic_message_body("beta", model="claude-v")),
            t.sse_reply(t.typed_sse(t.anthropic_events(["s", "t"], model="claude-v"))),
            t.json_reply(t.anthropic_message_body("first-party", model="claude-v")),
        ]
    )
    client = vertex(script)
    reply = client.beta.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    assert reply.content[0].text == "beta"
    with client.beta.messages.stream(model="claude-v", max_tokens=5, messages=MESSAGES) as stream:
        assert stream.get_final_text() == "st"
    client.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    ends = attempts(relay_events)
    assert [e.outcome for e in ends] == ["success"] * 3
    assert [e.annotated_response.output_text for e in ends] == ["beta", "st", "first-party"]
    assert all(":rawPredict" in str(r.url) or ":streamRawPredict" in str(r.url) for r in script.requests)
    relay, _turn = relay_turn
    assert UNTRACED not in relay.diagnostics()


@pytest.mark.asyncio
async def test_async_vertex_beta_messages_are_traced(relay_turn, relay_events, instrumented) -> None:
    script = t.Script([t.json_reply(t.anthropic_message_body("async beta"))])
    client = vertex(script, is_async=True)
    reply = await client.beta.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    assert reply.content[0].text == "async beta"
    (end,) = attempts(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "async beta"


def test_bedrock_beta_messages_are_traced(relay_turn, relay_events, instrumented) -> None:
    script = t.Script([t.json_reply(t.anthropic_message_body("bedrock beta"))])
    client = bedrock(script)
    client.beta.messages.create(model="anthropic.claude", max_tokens=5, messages=MESSAGES)
    (end,) = attempts(relay_events)
    assert end.outcome == "success" and end.annotated_response.output_text == "bedrock beta"
    assert "/invoke" in str(script.requests[0].url)


def test_the_copies_are_restored_and_rewrapped(relay_turn, relay_events) -> None:
    from anthropic.lib.bedrock import _beta_messages as bedrock_messages
    from anthropic.lib.vertex import _beta_messages as vertex_messages

    before = vars(vertex_messages.Messages)["create"], vars(bedrock_messages.AsyncMessages)["stream"]
    adapters.instrument()
    try:
        assert isinstance(vars(vertex_messages.Messages)["create"], ManagedCreate)
        assert isinstance(vars(bedrock_messages.AsyncMessages)["stream"], ManagedCreate)
    finally:
        adapters.uninstrument()
    assert (vars(vertex_messages.Messages)["create"], vars(bedrock_messages.AsyncMessages)["stream"]) == before
    script = t.Script([t.json_reply(t.anthropic_message_body())])
    vertex(script).beta.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    assert attempts(relay_events) == []  # uninstrumented: a plain call


def test_a_copy_taken_while_instrumented_is_traced_after_a_reinstrument(relay_turn, relay_events) -> None:
    """Code loaded while instrumentation is on copies the wrapper; it is switched off by uninstrument()
    and wrapped anew by the next instrument(), so that copy's calls are traced again."""
    from anthropic._resource import SyncAPIResource
    from anthropic.resources.messages import Messages

    adapters.instrument()
    adapters.uninstrument()
    adapters.instrument()
    try:

        class LateCopy(SyncAPIResource):
            create = Messages.create

        script = t.Script([t.json_reply(t.anthropic_message_body(text)) for text in ("one", "two")])
        client = t.anthropic_client(script, max_retries=0)
        LateCopy(client).create(model="c", max_tokens=5, messages=MESSAGES)
        adapters.uninstrument()
        adapters.instrument()
        LateCopy(client).create(model="c", max_tokens=5, messages=MESSAGES)
    finally:
        adapters.uninstrument()
    assert [e.annotated_response.output_text for e in attempts(relay_events)] == ["one", "two"]


def test_llm_requests_that_escape_dispatch_are_counted(relay_turn, relay_events, instrumented) -> None:
    """The net: a raw ``post`` to an LLM path of an instrumented SDK goes out as it was, and is counted."""
    import anthropic
    import openai

    relay, _turn = relay_turn
    oa = t.scripted_openai(t.json_reply(t.chat_completion_body()), t.json_reply({"data": []}), max_retries=0)
    an = t.scripted_anthropic(t.json_reply(t.anthropic_message_body()), max_retries=0)
    oa.client.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion, body={"model": "m", "messages": []})
    oa.client.post("/embeddings", cast_to=object, body={"model": "e", "input": "x"})  # no LLM call: not counted
    an.client.post(
        "/v1/messages?beta=true", cast_to=anthropic.types.Message, body={"model": "c", "max_tokens": 5, "messages": []}
    )
    counts = relay.diagnostics()
    assert counts[UNTRACED] == 2
    assert counts[f"{UNTRACED}.request:/chat/completions"] == 1
    assert counts[f"{UNTRACED}.request:/v1/messages"] == 1
    assert attempts(relay_events) == []
    assert len(oa.script.requests) == 2 and len(an.script.requests) == 1

    # Traced calls are not counted by the net.
    oa.add(t.json_reply(t.chat_completion_body()))
    oa.client.chat.completions.create(model="m", messages=MESSAGES)
    assert relay.diagnostics()[UNTRACED] == 2
    assert len(attempts(relay_events)) == 1


@pytest.mark.asyncio
async def test_async_llm_requests_that_escape_dispatch_are_counted(relay_turn, instrumented) -> None:
    import openai

    relay, _turn = relay_turn
    oa = t.scripted_openai(t.json_reply(t.responses_body()), max_retries=0)
    await oa.aclient.post("/responses", cast_to=openai.types.responses.Response, body={"model": "m", "input": "x"})
    assert relay.diagnostics()[f"{UNTRACED}.request:/responses"] == 1


def test_uninstrument_takes_the_net_off_exactly(relay_turn) -> None:
    import anthropic
    from anthropic._base_client import AsyncAPIClient, SyncAPIClient
    from openai._base_client import SyncAPIClient as OpenAISyncClient

    bases = (SyncAPIClient, AsyncAPIClient, OpenAISyncClient)
    before = [vars(base)["request"] for base in bases]
    adapters.instrument()
    held = t.scripted_anthropic(t.json_reply(t.anthropic_message_body()), max_retries=0)
    request = held.client.request  # a bound method taken while the net is on
    adapters.uninstrument()
    assert [vars(base)["request"] for base in bases] == before
    options = anthropic._models.FinalRequestOptions.construct(
        method="post", url="/v1/messages", json_data={"model": "c", "max_tokens": 5, "messages": []}
    )
    request(anthropic.types.Message, options)  # a net taken off counts nothing, even through an old reference
    relay, _turn = relay_turn
    assert UNTRACED not in relay.diagnostics()


def test_a_vertex_client_instrumented_alone_is_traced(relay_turn, relay_events) -> None:
    script = t.Script([t.json_reply(t.anthropic_message_body("beta")), t.json_reply(t.anthropic_message_body("1p"))])
    client = adapters.instrument(vertex(script))
    client.beta.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    client.messages.create(model="claude-v", max_tokens=5, messages=MESSAGES)
    assert [e.annotated_response.output_text for e in attempts(relay_events)] == ["beta", "1p"]


def test_a_first_instrument_in_a_fresh_process_wraps_the_copies(tmp_path) -> None:
    """Nothing of the SDKs imported yet: instrument() imports them, then the copying modules, then wraps."""
    import subprocess
    import sys

    check = (
        "import sys\n"
        "assert 'anthropic' not in sys.modules\n"
        "from relay_runtime import adapters\n"
        "from relay_runtime.adapters.instrument import ManagedCreate\n"
        "adapters.instrument()\n"
        "from anthropic.lib.vertex import _beta_messages as v\n"
        "from anthropic.lib.bedrock import _beta_messages as b\n"
        "assert isinstance(vars(v.Messages)['create'], ManagedCreate)\n"
        "assert isinstance(vars(b.AsyncMessages)['parse'], ManagedCreate)\n"
        "adapters.uninstrument()\n"
        "assert not isinstance(vars(v.Messages)['create'], ManagedCreate)\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
