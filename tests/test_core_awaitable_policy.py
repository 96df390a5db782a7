"""In an async call, a guardrail or request intercept that is no coroutine function but returns an awaitable
(a lambda or wrapper around an async check) is awaited like a coroutine function's, whatever else is
registered; in a sync call it is a ``TypeError`` naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from core_support import DictCodec, attempts, new_relay, request, response

from relay_runtime import LLMRequest, LLMRequestInterceptOutcome
from relay_runtime.intercepts import GuardrailRejected


async def _verdict(name: str, req: LLMRequest, annotated: Any) -> str | None:
    return "blocked" if annotated.params.get("temperature") == 1 else None


async def _cool(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
    annotated.params["temperature"] = 0
    return LLMRequestInterceptOutcome(req, annotated)


def _wrapped(check: Any) -> Any:
    """A plain function handing back the coroutine of an async check (as a lambda or a decorator does)."""
    return lambda name, req, annotated: check(name, req, annotated)


async def _provider(req: LLMRequest) -> dict[str, Any]:
    return response(f"temperature {req.kwargs().get('temperature')}")


async def _stream_provider(req: LLMRequest) -> AsyncIterator[dict[str, Any]]:
    yield {"text": f"temperature {req.kwargs().get('temperature')}"}


@pytest.mark.asyncio
async def test_an_awaitable_from_a_plain_guardrail_is_awaited_in_an_async_call_and_can_refuse() -> None:
    relay, recorder = new_relay()
    relay.intercepts.register_llm_guardrail("verdict", 0, _wrapped(_verdict))
    assert (await relay.llm.execute_async("p", request(), _provider, codec=DictCodec()))["text"] == "temperature None"
    with pytest.raises(GuardrailRejected, match="blocked"):
        await relay.llm.execute_async("p", request(temperature=1), _provider, codec=DictCodec())
    assert [(e.outcome, e.error_type) for e in attempts(recorder.events)] == [
        ("success", None),
        ("failed", "GuardrailRejected"),
    ]


@pytest.mark.asyncio
async def test_an_awaitable_from_a_plain_request_intercept_is_awaited_and_its_edit_sent_in_streams_too() -> None:
    relay, recorder = new_relay()
    relay.intercepts.register_llm_guardrail("verdict", 0, _wrapped(_verdict))
    relay.intercepts.register_llm_request("cool", 0, False, _wrapped(_cool))
    answer = await relay.llm.execute_async("p", request(temperature=0.7), _provider, codec=DictCodec())
    assert answer["text"] == "temperature 0"
    stream = await relay.llm.stream_async("p", request(temperature=0.7), _stream_provider, codec=DictCodec())
    assert [c async for c in stream] == [{"text": "temperature 0"}]
    assert [e.outcome for e in attempts(recorder.events)] == ["success", "success"]


def test_an_awaitable_from_a_plain_guardrail_in_a_sync_call_is_a_type_error_naming_it() -> None:
    relay, recorder = new_relay()
    relay.intercepts.register_llm_guardrail("verdict", 0, _wrapped(_verdict))
    with pytest.raises(TypeError, match=r"'verdict'.*synchronous call"):
        relay.llm.execute("p", request(), lambda r: response(), codec=DictCodec())
    assert [e.error_type for e in attempts(recorder.events)] == ["TypeError"]
