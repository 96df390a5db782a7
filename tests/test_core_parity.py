"""Parity with the intercept and stream behaviour code written for the systems we replace relies on."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, new_relay, request, response

from relay_runtime import LLMRequest, LLMRequestInterceptOutcome, Relay, adapters, current_attempt
from relay_runtime.adapters import testing as t
from relay_runtime.intercepts import GuardrailRejected

# -- 1. request.content is a mutable copy -------------------------------------------------------


def test_request_content_is_a_fresh_mutable_copy_per_read() -> None:
    req = request(temperature=1.0)
    content = req.content
    content["temperature"] = 0
    content["messages"].append({"role": "user", "content": "more"})
    content["messages"][0]["content"] = "changed"
    headers = req.headers
    headers["x-added"] = "1"
    assert req.content == {"model": "m-1", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.0}
    assert "x-added" not in req.headers
    assert req.content is not req.content


def test_nemo_idiom_builds_a_new_request_and_unreturned_edits_are_ignored() -> None:
    relay, recorder = new_relay()
    sent: list[dict[str, Any]] = []

    def zero_temperature(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        c = req.content
        c["temperature"] = 0
        return LLMRequestInterceptOutcome(LLMRequest(req.headers, c), annotated)

    def meddle(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        c = req.content  # edited but never returned: the provider must not see it
        c["temperature"] = 99
        c["messages"][0]["content"] = "tampered"
        c["messages"].clear()
        return LLMRequestInterceptOutcome(req, annotated)

    relay.intercepts.register_llm_request("zero", 1, False, zero_temperature)
    relay.intercepts.register_llm_request("meddle", 2, False, meddle)
    relay.llm.execute("p", request(temperature=1.0), lambda r: sent.append(r.kwargs()) or response(), codec=DictCodec())
    assert sent == [{"model": "m-1", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}]
    assert balanced(recorder.events)


def test_nemo_idiom_reaches_the_openai_sdk_request_body(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    scripted = t.scripted_openai()

    def zero_temperature(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        c = req.content
        c["temperature"] = 0
        c["messages"].append({"role": "user", "content": "be brief"})
        return LLMRequestInterceptOutcome(LLMRequest(req.headers, c), annotated)

    relay.intercepts.register_llm_request("zero", 1, False, zero_temperature)
    caller_messages = [{"role": "user", "content": "hi"}]
    try:
        scripted.add(t.json_reply(t.chat_completion_body("ok")))
        adapters.complete(scripted.client, {"model": "m", "messages": caller_messages, "temperature": 1.0})
    finally:
        relay.intercepts.deregister_llm_request("zero")
        scripted.client.close()
    body = scripted.script.bodies()[0]
    assert body["temperature"] == 0
    assert body["messages"] == [{"role": "user", "content": "hi"}, {"role": "user", "content": "be brief"}]
    assert caller_messages == [{"role": "user", "content": "hi"}]  # the caller's list is not the copy


# -- 2. async guardrails and request intercepts -------------------------------------------------


async def async_zero_temperature(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
    await asyncio.sleep(0)
    c = req.content
    c["temperature"] = 0
    return LLMRequestInterceptOutcome(LLMRequest(req.headers, c), annotated)


@pytest.mark.asyncio
async def test_async_request_intercepts_and_guardrails_are_awaited_on_the_callers_loop() -> None:
    relay, recorder = new_relay()
    loop = asyncio.get_running_loop()
    loops: list[Any] = []
    sent: list[dict[str, Any]] = []

    async def allow(name: str, req: LLMRequest, annotated: Any) -> str | None:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return None

    async def edit(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        loops.append(asyncio.get_running_loop())
        return await async_zero_temperature(name, req, annotated)

    relay.intercepts.register_llm_guardrail("allow", 0, allow)
    relay.intercepts.register_llm_request("edit", 0, False, edit)

    async def provider(req: LLMRequest) -> dict[str, Any]:
        sent.append(req.kwargs())
        return response()

    async def stream_provider(req: LLMRequest) -> AsyncIterator[dict[str, Any]]:
        sent.append(req.kwargs())
        yield {"text": "a"}

    assert await relay.llm.execute_async("p", request(), provider, codec=DictCodec()) == response()
    stream = await relay.llm.stream_async("p", request(), stream_provider, codec=DictCodec())
    assert [c async for c in stream] == [{"text": "a"}]
    assert loops == [loop] * 4
    assert [s["temperature"] for s in sent] == [0, 0]
    assert [e.outcome for e in attempts(recorder.events)] == ["success", "success"]


@pytest.mark.asyncio
async def test_async_guardrail_rejection_fails_the_attempt() -> None:
    relay, recorder = new_relay()

    async def refuse(name: str, req: LLMRequest, annotated: Any) -> str | None:
        return "not today"

    relay.intercepts.register_llm_guardrail("refuse", 0, refuse)
    called: list[int] = []

    async def provider(req: LLMRequest) -> Any:
        called.append(1)

    with pytest.raises(GuardrailRejected, match="not today"):
        await relay.llm.execute_async("p", request(), provider)
    assert called == []
    assert [e.outcome for e in attempts(recorder.events)] == ["failed"]
    assert balanced(recorder.events)


def test_async_intercept_in_a_sync_call_is_a_type_error_naming_it() -> None:
    relay, recorder = new_relay()

    async def edit(name: str, req: LLMRequest, annotated: Any) -> LLMRequestInterceptOutcome:
        return LLMRequestInterceptOutcome(req, annotated)

    relay.intercepts.register_llm_request("async-edit", 0, False, edit)
    with pytest.raises(TypeError, match="async-edit"):
        relay.llm.execute("p", request(), lambda r: response())
    assert balanced(recorder.events)


# -- 3. a kept continuation is dead once its call settled ---------------------------------------


def test_execution_continuation_called_after_the_call_settled_is_refused() -> None:
    relay, recorder = new_relay()
    kept: list[Any] = []
    provider_calls: list[int] = []

    def keep_next(name: str, req: LLMRequest, call_next: Any) -> Any:
        kept.append(call_next)
        return call_next(req)

    relay.intercepts.register_llm_execution("keep", 0, keep_next)
    relay.llm.execute("p", request(), lambda r: provider_calls.append(1) or response())
    with pytest.raises(RuntimeError, match="execution continuation is no longer active"):
        kept[0](request())
    assert provider_calls == [1]
    assert len(attempts(recorder.events)) == 1


@pytest.mark.asyncio
async def test_async_execution_continuation_called_after_the_call_settled_is_refused() -> None:
    relay, _recorder = new_relay()
    kept: list[Any] = []
    provider_calls: list[int] = []

    async def keep_next(name: str, req: LLMRequest, call_next: Any) -> Any:
        kept.append(call_next)
        return await call_next(req)

    async def provider(req: LLMRequest) -> Any:
        provider_calls.append(1)
        return response()

    relay.intercepts.register_llm_execution("keep", 0, keep_next)
    await relay.llm.execute_async("p", request(), provider)
    with pytest.raises(RuntimeError, match="execution continuation is no longer active"):
        await kept[0](request())
    assert provider_calls == [1]


def test_stream_continuation_lives_while_the_stream_does_and_no_longer() -> None:
    relay, _recorder = new_relay()
    kept: list[Any] = []
    opened: list[int] = []

    def lazy(name: str, req: LLMRequest, call_next: Any) -> Iterator[Any]:
        kept.append(call_next)
        yield from call_next(req)  # called on the first next(): the stream is still open then

    def provider(req: LLMRequest) -> Iterator[Any]:
        opened.append(1)
        return iter([{"text": "a"}, {"text": "b"}])

    relay.intercepts.register_llm_stream_execution("lazy", 0, lazy)
    assert list(relay.llm.stream("p", request(), provider)) == [{"text": "a"}, {"text": "b"}]
    with pytest.raises(RuntimeError, match="execution continuation is no longer active"):
        kept[0](request())
    assert opened == [1]


# -- 4. lazy provider streams run under the attempt ---------------------------------------------


def test_lazy_generator_provider_sees_its_attempt_as_the_current_scope() -> None:
    relay, recorder = new_relay()
    seen: list[Any] = []

    def provider(req: LLMRequest) -> Iterator[Any]:
        def gen() -> Iterator[Any]:
            seen.append((relay.scope.current(), current_attempt()))
            yield {"text": "a"}
            seen.append((relay.scope.current(), current_attempt()))
            yield {"text": "b"}

        return gen()

    with relay.scope.scope("outer") as outer:
        stream = relay.llm.stream("p", request(), provider)
        assert relay.scope.current() is outer
        assert list(stream) == [{"text": "a"}, {"text": "b"}]
        assert relay.scope.current() is outer and current_attempt() is None
    (attempt,) = attempts(recorder.events)
    assert [s[0].uuid for s in seen] == [attempt.uuid, attempt.uuid]
    assert all(s[1] is not None and s[1].handle.uuid == attempt.uuid for s in seen)


@pytest.mark.asyncio
async def test_lazy_async_generator_provider_sees_its_attempt_as_the_current_scope() -> None:
    relay, recorder = new_relay()
    seen: list[Any] = []

    async def provider(req: LLMRequest) -> AsyncIterator[Any]:
        seen.append(relay.scope.current())
        await asyncio.sleep(0)
        yield {"text": "a"}
        seen.append(relay.scope.current())

    stream = await relay.llm.stream_async("p", request(), provider)
    assert relay.scope.current() is None
    assert [c async for c in stream] == [{"text": "a"}]
    assert relay.scope.current() is None
    (attempt,) = attempts(recorder.events)
    assert [s.uuid for s in seen] == [attempt.uuid, attempt.uuid]


# -- 5. a failed stream closes its provider first; close() is idempotent -----------------------


class ClosingSource:
    def __init__(self, log: list[str], fail_after: int = 1) -> None:
        self.log = log
        self.fail_after = fail_after
        self.sent = 0

    def __iter__(self) -> ClosingSource:
        return self

    def __next__(self) -> Any:
        if self.sent >= self.fail_after:
            raise ConnectionError("provider dropped")
        self.sent += 1
        return {"text": "x"}

    def close(self) -> None:
        self.log.append("close")


class AsyncClosingSource(ClosingSource):
    def __aiter__(self) -> AsyncClosingSource:
        return self

    async def __anext__(self) -> Any:
        try:
            return self.__next__()
        except ConnectionError:
            raise

    async def aclose(self) -> None:
        self.log.append("aclose")


def test_provider_stream_is_closed_before_its_error_reaches_the_caller() -> None:
    relay, recorder = new_relay()
    log: list[str] = []
    stream = relay.llm.stream("p", request(), lambda r: ClosingSource(log))
    next(stream)
    with pytest.raises(ConnectionError):
        try:
            next(stream)
        except ConnectionError:
            log.append("caller")
            raise
    assert log == ["close", "caller"]
    stream.close()
    stream.close()
    assert log == ["close", "caller"]
    assert [e.outcome for e in attempts(recorder.events)] == ["failed"]


def test_second_close_never_calls_the_providers_close_again() -> None:
    relay, recorder = new_relay()
    log: list[str] = []
    stream = relay.llm.stream("p", request(), lambda r: ClosingSource(log, fail_after=5))
    next(stream)
    stream.close()
    stream.close()
    assert log == ["close"]
    assert [e.outcome for e in attempts(recorder.events)] == ["cancelled"]


@pytest.mark.asyncio
async def test_async_provider_stream_is_acloseed_before_its_error_reaches_the_caller() -> None:
    relay, recorder = new_relay()
    log: list[str] = []
    stream = await relay.llm.stream_async("p", request(), lambda r: AsyncClosingSource(log))
    await stream.__anext__()
    with pytest.raises(ConnectionError):
        try:
            await stream.__anext__()
        except ConnectionError:
            log.append("caller")
            raise
    await stream.aclose()
    await stream.aclose()
    assert log == ["aclose", "caller"]
    assert [e.outcome for e in attempts(recorder.events)] == ["failed"]


class HangingCleanupSource(AsyncClosingSource):
    """A provider stream whose cleanup waits until ``release`` is set."""

    def __init__(self, log: list[str], release: asyncio.Event) -> None:
        super().__init__(log)
        self.release = release

    async def aclose(self) -> None:
        self.log.append("cleanup started")
        await self.release.wait()
        self.log.append("cleanup done")


@pytest.mark.asyncio
async def test_async_provider_error_reaches_the_caller_at_once_and_aclose_waits_for_a_hung_cleanup() -> None:
    relay, recorder = new_relay()
    log: list[str] = []
    release = asyncio.Event()
    stream = await relay.llm.stream_async("p", request(), lambda r: HangingCleanupSource(log, release))
    await stream.__anext__()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(stream.__anext__(), 2)  # the cleanup hangs: the error does not wait for it
    assert log == ["cleanup started"]
    assert [e.outcome for e in attempts(recorder.events)] == ["failed"]
    closing = asyncio.ensure_future(stream.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done()  # closed means the provider's cleanup has finished
    release.set()
    await asyncio.wait_for(closing, 2)
    assert log == ["cleanup started", "cleanup done"]
    await stream.aclose()
    assert log == ["cleanup started", "cleanup done"] and balanced(recorder.events)


@pytest.mark.asyncio
async def test_async_sdk_stream_failing_mid_way_raises_its_error_and_ends_closed(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai()
    scripted.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a"]))[:2], fail_with=ConnectionError("cut")))
    try:
        stream = await adapters.astream(scripted.aclient, {"model": "m", "messages": [], "stream": True})
        with pytest.raises(Exception) as caught:
            async for _ in stream:
                pass
        await stream.aclose()
        assert stream.response.is_closed
    finally:
        await scripted.aclient.close()
        scripted.client.close()
    (end,) = relay_events.ends(relay_kind="llm_attempt")
    assert end.outcome == "failed" and end.error_type == type(caught.value).__name__


def test_sdk_stream_failing_mid_way_has_its_response_closed_before_the_error(relay_turn, relay_events) -> None:
    scripted = t.scripted_openai()
    scripted.add(t.sse_reply(t.openai_chat_sse(t.chat_chunks(["a"]))[:2], fail_with=ConnectionError("cut")))
    try:
        stream = adapters.stream(scripted.client, {"model": "m", "messages": [], "stream": True})
        next(stream)
        closed_when_raised: list[bool] = []
        with pytest.raises(ConnectionError):
            try:
                for _ in stream:
                    pass
            except ConnectionError:
                closed_when_raised.append(stream.response.is_closed)
                raise
    finally:
        scripted.client.close()
    assert closed_when_raised == [True]


# -- 8. a subscriber raising a BaseException ----------------------------------------------------


class Interrupting:
    """A subscriber that raises KeyboardInterrupt once, on the first event matching ``when``."""

    def __init__(self, when: Any) -> None:
        self.when = when
        self.fired = False

    def __call__(self, event: Any) -> None:
        if not self.fired and self.when(event):
            self.fired = True
            raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("when", "attempt_outcomes"),
    [
        pytest.param(lambda e: e.kind == "scope_start" and e.scope_type == "llm", ["cancelled"], id="attempt-start"),
        pytest.param(lambda e: e.kind == "scope_end" and e.scope_type == "llm", ["success"], id="attempt-end"),
        pytest.param(lambda e: e.kind == "scope_start" and e.name == "outer", [], id="scope-start"),
    ],
)
def test_subscriber_base_exception_leaves_scopes_and_attempts_consistent(when: Any, attempt_outcomes: Any) -> None:
    relay = Relay("kbd")
    interrupting = Interrupting(when)
    relay.subscribers.register(interrupting, name="interrupting")
    from relay_runtime import Recorder

    recorder = Recorder()
    relay.subscribers.register(recorder, name="later")
    with pytest.raises(KeyboardInterrupt), relay.scope.scope("outer"):
        relay.llm.execute("p", request(), lambda r: response(), codec=DictCodec())
    assert interrupting.fired
    assert relay.scope.current() is None
    # Every subscriber still saw every start and its end: the later one missed nothing.
    assert balanced(recorder.events)
    assert [e.outcome for e in attempts(recorder.events)] == attempt_outcomes
    assert [e.name for e in recorder.ends() if e.scope_type != "llm"] == ["outer"]


def test_subscriber_base_exception_at_attempt_end_keeps_the_provider_result_in_the_events() -> None:
    relay = Relay("kbd-end")
    relay.subscribers.register(Interrupting(lambda e: e.kind == "scope_end" and e.scope_type == "llm"), name="kbd")
    from relay_runtime import Recorder

    recorder = Recorder()
    relay.subscribers.register(recorder, name="later")
    with pytest.raises(KeyboardInterrupt):
        relay.llm.execute("p", request(), lambda r: response(), codec=DictCodec())
    (end,) = attempts(recorder.events)
    assert end.outcome == "success" and end.output == response()
    assert end.annotated_response is not None and end.annotated_response.usage.output_tokens == 5
    assert relay.scope.current() is None and current_attempt() is None


def test_subscriber_base_exception_on_a_chunk_ends_the_stream_attempt() -> None:
    relay = Relay("kbd-chunk")
    relay.subscribers.register(Interrupting(lambda e: e.kind == "mark"), name="kbd", chunks=True)
    from relay_runtime import Recorder

    recorder = Recorder()
    relay.subscribers.register(recorder, name="later", chunks=True)
    log: list[str] = []
    stream = relay.llm.stream("p", request(), lambda r: ClosingSource(log, fail_after=3))
    with pytest.raises(KeyboardInterrupt):
        next(stream)
    assert [e.outcome for e in attempts(recorder.events)] == ["cancelled"]
    assert log == ["close"]
    assert balanced(recorder.events)
    del stream
    gc.collect()
    assert len(attempts(recorder.events)) == 1


@pytest.mark.asyncio
async def test_async_request_intercept_edits_reach_the_async_openai_sdk(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    scripted = t.scripted_openai()

    async def guard(name: str, req: LLMRequest, annotated: Any) -> str | None:
        await asyncio.sleep(0)
        return None

    relay.intercepts.register_llm_guardrail("guard", 0, guard)
    relay.intercepts.register_llm_request("zero", 0, False, async_zero_temperature)
    try:
        scripted.add(t.json_reply(t.chat_completion_body("ok")), t.sse_reply(t.openai_chat_sse(t.chat_chunks(["s"]))))
        await adapters.acomplete(scripted.aclient, {"model": "m", "messages": [], "temperature": 1.0})
        stream = await adapters.astream(scripted.aclient, {"model": "m", "messages": [], "temperature": 1.0})
        assert [c async for c in stream]
    finally:
        relay.intercepts.deregister_llm_guardrail("guard")
        relay.intercepts.deregister_llm_request("zero")
        await scripted.aclient.close()
        scripted.client.close()
    assert [b["temperature"] for b in scripted.script.bodies()] == [0, 0]
    assert [e.outcome for e in relay_events.ends(relay_kind="llm_attempt")] == ["success", "success"]
    assert relay.intercepts.async_policy == 0


# -- 9. async tool request intercepts run on the caller's loop -----------------------------------


@pytest.mark.asyncio
async def test_async_tool_request_intercepts_are_awaited_on_the_callers_loop() -> None:
    relay, recorder = new_relay()
    loop = asyncio.get_running_loop()
    seen: list[Any] = []

    async def add_units(name: str, args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        seen.append(asyncio.get_running_loop() is loop)
        return {**args, "units": "metric"}

    relay.intercepts.register_tool_request("units", 0, False, add_units)
    relay.intercepts.register_tool_request("city", 1, False, lambda name, args: {**args, "city": "Oslo"})

    async def weather(args: dict[str, Any]) -> dict[str, Any]:
        return {"temp": 21, **args}

    assert await relay.tools.execute_async("weather", {}, weather) == {"temp": 21, "units": "metric", "city": "Oslo"}
    assert seen == [True]
    (end,) = recorder.ends(scope_type="tool")
    assert end.outcome == "success"


@pytest.mark.asyncio
async def test_async_tool_request_intercept_failing_fails_the_tool_closed() -> None:
    relay, recorder = new_relay()

    async def deny(name: str, args: Any) -> Any:
        raise PermissionError("not this tool")

    relay.intercepts.register_tool_request("deny", 0, False, deny)
    ran: list[Any] = []
    with pytest.raises(PermissionError):
        await relay.tools.execute_async("weather", {}, lambda a: ran.append(a))
    assert ran == []
    (end,) = recorder.ends(scope_type="tool")
    assert end.outcome == "failed" and end.error_type == "PermissionError"
    assert relay.scope.current() is None


def test_async_tool_request_intercept_in_a_sync_tool_call_is_a_type_error() -> None:
    relay, _recorder = new_relay()

    async def add_units(name: str, args: Any) -> Any:
        return args

    relay.intercepts.register_tool_request("units", 0, False, add_units)
    with pytest.raises(TypeError, match="'units' must be synchronous"):
        relay.tools.execute("weather", {}, lambda a: a)
