"""Guardrails and intercepts: order, break_chain, scope-local registration, and failing closed."""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, new_relay, request, response
from hypothesis import given, settings
from hypothesis import strategies as st

from relay_runtime import (
    AnnotatedLLMRequest,
    GuardrailRejected,
    LLMRequest,
    LLMRequestInterceptOutcome,
    Relay,
)


def _keep(name: str, req: LLMRequest, annotated: AnnotatedLLMRequest | None) -> LLMRequestInterceptOutcome:
    return LLMRequestInterceptOutcome(req, annotated)


# -- guardrails --------------------------------------------------------------------------------------


def test_guardrail_that_rejects_fails_the_attempt_and_never_calls_the_provider() -> None:
    relay, rec = new_relay()
    called: list[Any] = []
    seen: list[Any] = []

    def allow(name: str, req: LLMRequest, annotated: Any) -> None:
        seen.append(annotated.model)

    relay.intercepts.register_llm_guardrail("allow", 0, allow)
    relay.intercepts.register_llm_guardrail("no-secrets", 1, lambda n, r, a: "prompt mentions a secret")
    with pytest.raises(GuardrailRejected) as info:
        relay.llm.execute("p", request(), lambda r: called.append(r), codec=DictCodec())
    assert info.value.guardrail == "no-secrets" and info.value.reason == "prompt mentions a secret"
    assert called == [] and seen == ["m-1"]
    (end,) = attempts(rec.events)
    assert end.outcome == "failed" and end.error_type == "GuardrailRejected"
    assert balanced(rec.events)


def test_guardrail_returning_none_allows() -> None:
    relay, rec = new_relay()
    relay.intercepts.register_llm_guardrail("ok", 0, lambda n, r, a: None)
    assert relay.llm.execute("p", request(), lambda r: response()) == response()
    assert attempts(rec.events)[0].outcome == "success"


# -- request intercepts ------------------------------------------------------------------------------


def test_request_intercepts_return_new_immutable_requests() -> None:
    relay, rec = new_relay()
    original = request()

    def add_header(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        return LLMRequestInterceptOutcome(req.replace(headers={**req.headers, "x-trace": "t-1"}))

    relay.intercepts.register_llm_request("trace", 0, False, add_header)
    got: list[LLMRequest] = []
    relay.llm.execute("p", original, lambda r: got.append(r) or response())
    assert got[0].headers["x-trace"] == "t-1"
    assert "x-trace" not in original.headers
    with pytest.raises(AttributeError, match="immutable"):
        original.content = {}  # type: ignore[misc]
    original.content["model"] = "other"  # a copy: the request itself never changes
    assert original.content["model"] == "m-1"
    assert rec.starts()[0].input["headers"]["x-trace"] == "t-1"


def test_annotated_edits_reach_the_provider_kwargs_and_untouched_keys_stay() -> None:
    relay, rec = new_relay()

    def tune(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        annotated.params["temperature"] = 0.25
        annotated.params.pop("top_p")
        annotated.model = "m-2"
        return LLMRequestInterceptOutcome(req, annotated)

    relay.intercepts.register_llm_request("tune", 0, False, tune)
    got: list[LLMRequest] = []
    relay.llm.execute("p", request(top_p=0.9, seed=7), lambda r: got.append(r) or response(), codec=DictCodec())
    content = dict(got[0].content)
    assert content["temperature"] == 0.25 and content["model"] == "m-2" and content["seed"] == 7
    assert "top_p" not in content
    start = rec.starts()[0]
    assert start.model_name == "m-2" and start.annotated_request.params["temperature"] == 0.25


def test_request_intercept_outcome_shape() -> None:
    req = request()
    outcome = LLMRequestInterceptOutcome(req)
    assert outcome.request is req and outcome.annotated_request is None
    with pytest.raises(TypeError, match="LLMRequest"):
        LLMRequestInterceptOutcome({"model": "m"})  # type: ignore[arg-type]
    assert Relay.LLMRequestInterceptOutcome is LLMRequestInterceptOutcome


def test_request_intercept_returning_the_wrong_type_fails_closed_naming_it() -> None:
    relay, rec = new_relay()
    relay.intercepts.register_llm_request("sloppy", 0, False, lambda n, r, a: r)
    called: list[Any] = []
    with pytest.raises(TypeError, match="'sloppy' must return an LLMRequestInterceptOutcome"):
        relay.llm.execute("p", request(), lambda r: called.append(r))
    assert called == [] and attempts(rec.events)[0].outcome == "failed"


def test_async_request_intercept_in_a_call_is_refused_without_a_never_awaited_warning() -> None:
    relay, _rec = new_relay()

    async def slow(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        return LLMRequestInterceptOutcome(req)

    relay.intercepts.register_llm_request("slow", 0, False, slow)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match="synchronous"):
            relay.llm.execute("p", request(), lambda r: response())
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_an_intercept_that_raises_fails_closed() -> None:
    relay, rec = new_relay()
    boom = PermissionError("policy service unavailable")

    def broken(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        raise boom

    relay.intercepts.register_llm_request("broken", 0, False, broken)
    called: list[Any] = []
    with pytest.raises(PermissionError) as info:
        relay.llm.execute("p", request(), lambda r: called.append(r))
    assert info.value is boom and called == []
    (end,) = attempts(rec.events)
    assert end.outcome == "failed" and end.error_type == "PermissionError"
    assert end.error_message == "policy service unavailable"
    assert balanced(rec.events)


def test_registration_errors() -> None:
    relay = Relay()
    relay.intercepts.register_llm_request("one", 0, False, _keep)
    with pytest.raises(ValueError, match="'one' is already registered globally"):
        relay.intercepts.register_llm_request("one", 5, True, _keep)
    with pytest.raises(ValueError, match="name"):
        relay.intercepts.register_llm_request("", 0, False, _keep)
    with pytest.raises(TypeError, match="priority"):
        relay.intercepts.register_llm_request("p", "high", False, _keep)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        relay.intercepts.register_llm_request("p", 0, False, None)  # type: ignore[arg-type]
    with relay.scope.scope("s") as s:
        relay.intercepts.register_llm_request("local", 0, False, _keep, scope=s)
        with pytest.raises(ValueError, match="'local' is already registered on"):
            relay.intercepts.register_llm_request("local", 0, False, _keep, scope=s)
    with pytest.raises(ValueError, match="has ended"):
        relay.intercepts.register_llm_request("late", 0, False, _keep, scope=s)
    assert relay.intercepts.deregister_llm_request("one") is True
    assert relay.intercepts.deregister_llm_request("one") is False


# -- property: the order a request-intercept chain runs in -----------------------------------------

# (where, name, priority, break_chain); where: 0 = global, 1 = outer scope, 2 = inner scope
_spec = st.tuples(st.integers(0, 2), st.sampled_from("abcdef"), st.integers(-2, 2), st.booleans())


def _reference_order(specs: list[tuple[int, str, int, bool]]) -> list[tuple[int, str]]:
    """Globals, then outer-scope locals, then inner-scope locals, each by (priority, name);
    stable-merged by priority; cut after the first break_chain."""
    merged: list[tuple[int, str, int, bool]] = []
    for where in (0, 1, 2):
        merged.extend(sorted((s for s in specs if s[0] == where), key=lambda s: (s[2], s[1])))
    merged.sort(key=lambda s: s[2])
    out: list[tuple[int, str]] = []
    for where, name, _priority, stop in merged:
        out.append((where, name))
        if stop:
            break
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_spec, max_size=12, unique_by=lambda s: (s[0], s[1])))
def test_request_intercept_order_matches_the_reference_model(specs: list[tuple[int, str, int, bool]]) -> None:
    relay = Relay()
    ran: list[tuple[int, str]] = []

    def make(where: int, name: str) -> Any:
        def fn(call: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
            ran.append((where, name))
            return LLMRequestInterceptOutcome(req, annotated)

        return fn

    with relay.scope.scope("outer") as outer, relay.scope.scope("inner") as inner:
        anchors = {0: None, 1: outer, 2: inner}
        for where, name, priority, stop in specs:
            relay.intercepts.register_llm_request(name, priority, stop, make(where, name), scope=anchors[where])
        relay.llm.execute("p", request(), lambda r: response())
    assert ran == _reference_order(specs)
    # Once the scopes ended their intercepts are gone; the globals remain.
    ran.clear()
    relay.llm.execute("p", request(), lambda r: response())
    assert ran == _reference_order([s for s in specs if s[0] == 0])


def test_scope_local_intercepts_apply_to_calls_under_their_scope_only() -> None:
    relay = Relay()
    ran: list[str] = []

    def tag(label: str) -> Any:
        def fn(call: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
            ran.append(label)
            return LLMRequestInterceptOutcome(req)

        return fn

    relay.intercepts.register_llm_request("g", 5, False, tag("global"))
    with relay.scope.scope("a") as a:
        relay.intercepts.register_llm_request("l", 0, False, tag("local"), scope=a)
        relay.llm.execute("p", request(), lambda r: response())
        assert ran == ["local", "global"]
        ran.clear()
        with relay.scope.scope("child"):  # inherited by scopes below
            relay.llm.execute("p", request(), lambda r: response())
        assert ran == ["local", "global"]
    ran.clear()
    with relay.scope.scope("sibling"):
        relay.llm.execute("p", request(), lambda r: response())
    assert ran == ["global"]
    assert relay.intercepts.deregister_llm_request("g") is True
    assert relay.intercepts.active is False


# -- execution intercepts ----------------------------------------------------------------------------


def test_execution_intercept_may_call_next_twice_to_retry() -> None:
    relay, rec = new_relay()
    provider_calls: list[LLMRequest] = []
    transient = ConnectionError("reset by peer")

    def flaky(req: LLMRequest) -> dict:
        provider_calls.append(req)
        if len(provider_calls) == 1:
            raise transient
        return response()

    def retry(name: str, req: LLMRequest, next_call: Any) -> Any:
        try:
            return next_call(req)
        except ConnectionError:
            return next_call(req.replace(headers={"x-retry": "1"}))

    relay.intercepts.register_llm_execution("retry", 0, retry)
    assert relay.llm.execute("p", request(), flaky) == response()
    assert len(provider_calls) == 2 and provider_calls[1].headers == {"x-retry": "1"}
    # Each provider call is an attempt (test_core_provider_calls.py has the rest).
    assert [e.outcome for e in attempts(rec.events)] == ["failed", "success"]


def test_execution_intercepts_nest_and_break_chain_skips_the_rest() -> None:
    relay, _rec = new_relay()
    order: list[str] = []

    def wrap(label: str) -> Any:
        def fn(name: str, req: LLMRequest, next_call: Any) -> Any:
            order.append(f"{label}>")
            result = next_call(req)
            order.append(f"<{label}")
            return result

        return fn

    relay.intercepts.register_llm_execution("outer", 0, wrap("outer"))
    relay.intercepts.register_llm_execution("stop", 1, wrap("stop"), break_chain=True)
    relay.intercepts.register_llm_execution("skipped", 2, wrap("skipped"))
    relay.llm.execute("p", request(), lambda r: order.append("provider") or response())
    assert order == ["outer>", "stop>", "provider", "<stop", "<outer"]


def test_execution_intercept_can_answer_without_the_provider_and_fan_out() -> None:
    relay, rec = new_relay()
    calls: list[Any] = []

    def fan_out(name: str, req: LLMRequest, next_call: Any) -> Any:
        first = next_call(req)
        second = next_call(req)
        return {"both": [first["text"], second["text"]]}

    relay.intercepts.register_llm_execution("fan", 0, fan_out)
    result = relay.llm.execute("p", request(), lambda r: calls.append(r) or response(f"r{len(calls)}"))
    assert result == {"both": ["r1", "r2"]} and len(calls) == 2
    assert relay.intercepts.deregister_llm_execution("fan")
    relay.intercepts.register_llm_execution("cache", 0, lambda n, r, nxt: {"cached": True})
    assert relay.llm.execute("p", request(), lambda r: calls.append(r)) == {"cached": True}
    assert len(calls) == 2
    # Two provider calls of the fan-out, then the cached answer.
    assert [e.outcome for e in attempts(rec.events)] == ["success", "success", "success"]


def test_an_execution_intercept_that_raises_fails_closed() -> None:
    relay, rec = new_relay()
    boom = RuntimeError("quota policy")

    def deny(name: str, req: LLMRequest, next_call: Any) -> Any:
        raise boom

    relay.intercepts.register_llm_execution("deny", 0, deny)
    with pytest.raises(RuntimeError) as info:
        relay.llm.execute("p", request(), lambda r: response())
    assert info.value is boom and attempts(rec.events)[0].outcome == "failed"


@pytest.mark.asyncio
async def test_async_execution_intercepts_retry_through_an_awaitable_next() -> None:
    relay, rec = new_relay()
    tries: list[int] = []

    async def provider(req: LLMRequest) -> dict:
        tries.append(1)
        if len(tries) < 3:
            raise TimeoutError("slow")
        return response()

    async def retry(name: str, req: LLMRequest, next_call: Any) -> Any:
        for _ in range(3):
            try:
                return await next_call(req)
            except TimeoutError:
                continue
        raise AssertionError("unreachable")

    relay.intercepts.register_llm_execution("retry", 0, retry)
    assert await relay.llm.execute_async("p", request(), provider) == response()
    assert len(tries) == 3 and [e.outcome for e in attempts(rec.events)] == ["failed", "failed", "success"]


def test_in_flight_calls_keep_the_chain_they_resolved() -> None:
    relay, _rec = new_relay()
    retried: list[int] = []

    def retry_once(name: str, req: LLMRequest, next_call: Any) -> Any:
        retried.append(1)
        return next_call(req)

    def upper(name: str, req: LLMRequest, resp: Any) -> Any:
        return {**resp, "text": resp["text"].upper()}

    relay.intercepts.register_llm_execution("retry", 0, retry_once)

    def provider(req: LLMRequest) -> dict:
        # Registry changes made mid-call apply to later calls only.
        relay.intercepts.deregister_llm_execution("retry")
        relay.intercepts.register_llm_response("upper", 0, False, upper)
        return response("quiet")

    assert relay.llm.execute("p", request(), provider)["text"] == "quiet"
    assert retried == [1]
    assert relay.llm.execute("p", request(), lambda r: response("quiet"))["text"] == "QUIET"
    assert retried == [1]


def test_a_sync_call_refuses_an_async_execution_intercept() -> None:
    relay, rec = new_relay()

    async def passthrough(name: str, req: LLMRequest, next_call: Any) -> Any:
        return next_call(req)

    relay.intercepts.register_llm_execution("async-only", 0, passthrough)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match="'async-only' returned an awaitable in a synchronous call"):
            relay.llm.execute("p", request(), lambda r: response())
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert attempts(rec.events)[0].outcome == "failed"


# -- response intercepts -----------------------------------------------------------------------------


def test_response_intercepts_rewrite_in_order_and_break_chain() -> None:
    relay, rec = new_relay()
    seen_requests: list[LLMRequest] = []

    def suffix(label: str) -> Any:
        def fn(name: str, req: LLMRequest, resp: Any) -> Any:
            seen_requests.append(req)
            return {**resp, "text": resp["text"] + label}

        return fn

    relay.intercepts.register_llm_response("b", 1, True, suffix("-b"))
    relay.intercepts.register_llm_response("a", 1, False, suffix("-a"))
    relay.intercepts.register_llm_response("c", 2, False, suffix("-c"))
    result = relay.llm.execute("p", request(), lambda r: response("x"))
    assert result["text"] == "x-a-b"
    assert rec.ends()[0].output["text"] == "x-a-b"
    assert len(seen_requests) == 2 and seen_requests[0].content["model"] == "m-1"


def test_a_response_intercept_that_raises_fails_closed_after_the_provider_ran() -> None:
    relay, rec = new_relay()
    boom = ValueError("response failed a policy")

    def reject(name: str, req: LLMRequest, resp: Any) -> Any:
        raise boom

    relay.intercepts.register_llm_response("reject", 0, False, reject)
    ran: list[int] = []
    with pytest.raises(ValueError) as info:
        relay.llm.execute("p", request(), lambda r: ran.append(1) or response())
    assert info.value is boom and ran == [1]
    (end,) = attempts(rec.events)
    assert end.outcome == "failed" and end.error_type == "ValueError"
    assert balanced(rec.events)
