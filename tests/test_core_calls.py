"""Managed calls: one attempt per call, exceptions as-is, secrets kept out, bookkeeping failing open."""

from __future__ import annotations

import asyncio
import json
import threading
import traceback
from typing import Any

import pytest
from core_support import DictCodec, attempts, balanced, new_relay, request, response

from relay_runtime import LLMRequest, LLMRequestInterceptOutcome, Relay, ScopeType, current_attempt
from relay_runtime.jsonl import event_json


def test_execute_is_one_attempt_scope_with_the_call_described() -> None:
    relay, rec = new_relay()
    inside: list[Any] = []

    def provider(req: LLMRequest) -> dict:
        attempt = current_attempt()
        inside.append((attempt, relay.scope.current()))
        attempt.metadata["sdk_retries"] = 2  # what an adapter adds while the call runs
        with relay.scope.scope("http"):
            pass
        return response()

    with relay.scope.scope("turn", ScopeType.FUNCTION) as turn:
        result = relay.llm.execute("openai", request(), provider, metadata={"call_role": "main"}, codec=DictCodec())
    assert result == response()
    start, end = attempts(rec.events, "scope_start")[0], attempts(rec.events)[0]
    attempt, current = inside[0]
    assert current is attempt.handle and attempt.handle.uuid == start.uuid == end.uuid
    assert start.parent_uuid == turn.uuid and start.trace_id == turn.trace_id
    assert start.provider == "openai" and start.model_name == "m-1"
    assert start.metadata == {"relay.kind": "llm_attempt", "call_role": "main"}
    assert start.annotated_request.messages == [{"role": "user", "content": "hi"}]
    assert end.outcome == "success" and end.output == response()
    assert end.metadata["sdk_retries"] == 2
    usage = end.annotated_response.usage
    assert (usage.input_tokens, usage.output_tokens) == (3, 5) and end.annotated_response.model == "m-1-2024"
    assert rec.starts(name="http")[0].parent_uuid == start.uuid  # work inside the provider nests under it
    assert relay.scope.current() is None and current_attempt() is None
    assert balanced(rec.events)


def test_explicit_parent_wins_over_the_current_scope() -> None:
    relay, rec = new_relay()
    logical = relay.scope.push("logical", attach=False)
    with relay.scope.scope("elsewhere"):
        relay.llm.execute("p", request(), lambda r: response(), parent=logical)
    relay.scope.pop(logical)
    assert attempts(rec.events)[0].parent_uuid == logical.uuid


def test_provider_exception_propagates_as_the_same_object_with_its_traceback() -> None:
    relay, rec = new_relay()
    boom = ConnectionError("upstream 502")

    def failing_provider(req: LLMRequest) -> dict:
        raise boom

    with pytest.raises(ConnectionError) as info:
        relay.llm.execute("p", request(), failing_provider)
    assert info.value is boom
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "failing_provider"
    (end,) = attempts(rec.events)
    assert end.outcome == "failed" and end.error_type == "ConnectionError" and end.error_message == "upstream 502"


def test_keyboard_interrupt_in_the_provider_is_cancelled_and_reraised() -> None:
    relay, rec = new_relay()

    def interrupted(req: LLMRequest) -> dict:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        relay.llm.execute("p", request(), interrupted)
    assert attempts(rec.events)[0].outcome == "cancelled"


@pytest.mark.asyncio
async def test_execute_async_success_failure_and_cancellation() -> None:
    relay, rec = new_relay()

    async def ok(req: LLMRequest) -> dict:
        await asyncio.sleep(0)
        return response()

    assert await relay.llm.execute_async("p", request(), ok, codec=DictCodec()) == response()
    boom = ValueError("bad json")

    async def bad(req: LLMRequest) -> dict:
        await asyncio.sleep(0)
        raise boom

    with pytest.raises(ValueError) as info:
        await relay.llm.execute_async("p", request(), bad)
    assert info.value is boom
    started = asyncio.Event()

    async def hangs(req: LLMRequest) -> dict:
        started.set()
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    task = asyncio.create_task(relay.llm.execute_async("p", request(), hangs))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.outcome for e in attempts(rec.events)] == ["success", "failed", "cancelled"]
    assert attempts(rec.events)[0].annotated_response.usage.output_tokens == 5
    assert balanced(rec.events)


def test_bad_call_arguments_are_named() -> None:
    relay, _rec = new_relay()
    with pytest.raises(TypeError, match="needs an LLMRequest"):
        relay.llm.execute("p", {"model": "m"}, lambda r: r)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        relay.llm.execute("", request(), lambda r: r)


def test_a_callback_that_is_not_callable_is_named_and_records_no_attempt() -> None:
    relay, rec = new_relay()
    for call in (relay.llm.execute, relay.llm.stream):
        with pytest.raises(TypeError, match=r"LLM call 'p': .* must be callable, got NoneType"):
            call("p", request(), None)  # type: ignore[arg-type]
    for acall in (relay.llm.execute_async, relay.llm.stream_async):
        with pytest.raises(TypeError, match=r"LLM call 'p': .* must be callable, got str"):
            asyncio.run(acall("p", request(), "not a function"))  # type: ignore[arg-type]
    assert rec.events == []  # no attempt that never reached a provider


# -- secrets -----------------------------------------------------------------------------------------

SECRETS = ("sk-live-111", "sk-ant-222", "sess-333", "tok-444", "az-555", "sk-extra-666", "sk-kwarg-777")


def test_credential_headers_and_kwargs_never_reach_an_event() -> None:
    relay, rec = new_relay()
    req = LLMRequest(
        {
            "Authorization": "Bearer sk-live-111",
            "x-api-key": "sk-ant-222",
            "Cookie": "session=sess-333",
            "X-Custom-Token": "tok-444",
            b"api-key": "az-555",
            "content-type": "application/json",
        },
        {
            "model": "m-1",
            "messages": [],
            "extra_headers": {"Authorization": "Bearer sk-extra-666", "x-request-id": "r-1"},
            "api_key": "sk-kwarg-777",
        },
    )
    seen: list[LLMRequest] = []
    relay.llm.execute("p", req, lambda r: seen.append(r) or response(), codec=DictCodec())
    with pytest.raises(ConnectionError):
        relay.llm.execute("p", req, lambda r: (_ for _ in ()).throw(ConnectionError("down")), codec=DictCodec())
    list(relay.llm.stream("p", req, lambda r: iter([{"text": "a"}]), codec=DictCodec()))
    dumped = "\n".join(event_json(e) + repr(e.to_dict()) for e in rec.events)
    for secret in SECRETS:
        assert secret not in dumped, secret
    start = rec.starts()[0]
    assert start.input["headers"]["content-type"] == "application/json"
    assert start.input["content"]["extra_headers"]["x-request-id"] == "r-1"
    assert start.input["headers"]["Authorization"] == "[redacted]"
    # The provider itself still gets the real credentials.
    assert seen[0].headers["Authorization"] == "Bearer sk-live-111"
    assert seen[0].content["api_key"] == "sk-kwarg-777"
    assert json.loads(event_json(start))["input"]["content"]["api_key"] == "[redacted]"


# -- bookkeeping fails open --------------------------------------------------------------------------


class UnreadableCodec(DictCodec):
    def annotate_response(self, response: Any) -> Any:
        raise KeyError("choices")


def test_a_codec_that_cannot_read_the_response_still_returns_the_providers_result() -> None:
    relay, rec = new_relay()
    result = relay.llm.execute("p", request(), lambda r: response(), codec=UnreadableCodec())
    assert result == response()
    (end,) = attempts(rec.events)
    # The response is annotated when a subscriber first reads the annotation: that is when it fails.
    assert "bookkeeping_errors" not in relay.diagnostics()
    assert end.outcome == "success" and end.annotated_response is None and end.output == response()
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    assert end.annotated_response is None and relay.diagnostics()["bookkeeping_errors"] == 1
    assert balanced(rec.events)


def test_a_failing_finish_hook_is_counted_not_raised() -> None:
    relay = Relay()

    def hook(outcome: str, resp: Any, error: BaseException | None) -> None:
        raise RuntimeError("journal full")

    assert relay.llm.execute("p", request(), lambda r: response(), on_finish=hook) == response()
    assert relay.diagnostics()["bookkeeping_errors"] == 1


def test_finish_hook_runs_once_with_the_outcome() -> None:
    relay = Relay()
    finished: list[tuple[str, Any, Any]] = []
    relay.llm.execute("p", request(), lambda r: response(), on_finish=lambda *a: finished.append(a))
    boom = OSError("x")

    def failing(req: LLMRequest) -> dict:
        raise boom

    with pytest.raises(OSError):
        relay.llm.execute("p", request(), failing, on_finish=lambda *a: finished.append(a))
    assert finished == [("success", response(), None), ("failed", None, boom)]


# -- tools -------------------------------------------------------------------------------------------


def test_an_unintercepted_tool_scope_is_the_one_execute_opens_and_only_while_no_intercept_is_registered() -> None:
    relay, rec = new_relay()

    async def tool(args: dict) -> dict:
        return {"echo": args}

    with relay.scope.scope("turn") as turn:
        asyncio.run(relay.tools.execute_async("t", {"x": 1}, tool, metadata={"k": "v"}))
        handle = relay.tools.open_unintercepted("t", {"x": 1}, {"k": "v"})
        assert handle is not None and relay.scope.current() is handle
        relay.scope.pop(handle, output={"echo": {"x": 1}})
        relay.intercepts.register_tool_request("any", 0, False, lambda name, args: args)
        assert relay.tools.open_unintercepted("t", {"x": 1}) is None and relay.scope.current() is turn
        relay.intercepts.deregister_tool_request("any")
    via_execute, opened = rec.starts(scope_type="tool")
    assert (via_execute.name, via_execute.input, via_execute.metadata, via_execute.parent_uuid) == (
        opened.name,
        opened.input,
        opened.metadata,
        opened.parent_uuid,
    )
    assert [e.outcome for e in rec.ends(scope_type="tool")] == ["success", "success"] and balanced(rec.events)


def test_tool_call_is_a_tool_scope_around_its_intercepts() -> None:
    relay, rec = new_relay()
    relay.intercepts.register_tool_request("defaults", 0, False, lambda name, args: {**args, "units": "metric"})
    attempts_made: list[dict] = []

    def retry(name: str, args: dict, next_call: Any) -> Any:
        try:
            return next_call(args)
        except TimeoutError:
            return next_call({**args, "retry": True})

    relay.intercepts.register_tool_execution("retry", 0, retry)

    def weather(args: dict) -> dict:
        attempts_made.append(args)
        if len(attempts_made) == 1:
            raise TimeoutError("slow api")
        relay.llm.execute("p", request(), lambda r: response())  # nested work parents on the tool
        return {"temp": 21, "units": args["units"]}

    with relay.scope.scope("turn") as turn:
        assert relay.tools.execute("weather", {"city": "Oslo"}, weather, metadata={"tool_call_id": "c1"}) == {
            "temp": 21,
            "units": "metric",
        }
    assert attempts_made == [{"city": "Oslo", "units": "metric"}, {"city": "Oslo", "units": "metric", "retry": True}]
    start, end = rec.starts(scope_type="tool")[0], rec.ends(scope_type="tool")[0]
    assert start.parent_uuid == turn.uuid and start.input == {"city": "Oslo"}
    assert start.metadata == {"relay.kind": "tool", "tool_call_id": "c1"}
    assert end.output == {"temp": 21, "units": "metric"} and end.outcome == "success"
    assert attempts(rec.events)[0].parent_uuid == start.uuid
    assert balanced(rec.events)


def test_tool_errors_and_failing_tool_intercepts_fail_closed() -> None:
    relay, rec = new_relay()
    boom = LookupError("no such city")

    def broken_tool(args: Any) -> Any:
        raise boom

    with pytest.raises(LookupError) as info:
        relay.tools.execute("weather", {}, broken_tool)
    assert info.value is boom
    relay.intercepts.register_tool_request("deny", 0, False, lambda name, args: 1 / 0)
    ran: list[Any] = []
    with pytest.raises(ZeroDivisionError):
        relay.tools.execute("weather", {}, lambda a: ran.append(a))
    assert ran == []
    assert [e.outcome for e in rec.ends(scope_type="tool")] == ["failed", "failed"]
    assert [e.error_type for e in rec.ends(scope_type="tool")] == ["LookupError", "ZeroDivisionError"]
    assert relay.scope.current() is None


class _Paused(Exception):
    """A framework's control flow (as LangGraph's interrupt), raised through a tool call."""


def _is_pause(error: BaseException) -> bool:
    return isinstance(error, _Paused)


@pytest.mark.parametrize("phase", ["request", "execution"])
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_tool_calls_control_flow_ends_it_as_a_success_and_propagates(phase: str, use_async: bool) -> None:
    relay, rec = new_relay()
    ran: list[Any] = []

    def ask_a_human(name: str, args: Any) -> Any:
        raise _Paused("approve?")

    def tool(args: Any) -> Any:
        ran.append(args)
        if phase == "execution":
            raise _Paused("approve?")
        return "done"

    if phase == "request":
        relay.intercepts.register_tool_request("approval", 0, False, ask_a_human)

    def call(control_flow: Any) -> Any:
        if use_async:
            return asyncio.run(relay.tools.execute_async("send", {"to": "ops"}, tool, control_flow=control_flow))
        return relay.tools.execute("send", {"to": "ops"}, tool, control_flow=control_flow)

    with pytest.raises(_Paused):
        call(_is_pause)
    with pytest.raises(_Paused):
        call(None)  # without the caller's test it is an error like any other
    assert ran == ([] if phase == "request" else [{"to": "ops"}] * 2)
    paused, failed = rec.ends(scope_type="tool")
    assert (paused.outcome, paused.error_type, paused.output) == ("success", None, {"control_flow": "_Paused"})
    assert (failed.outcome, failed.error_type) == ("failed", "_Paused")
    assert relay.scope.current() is None and balanced(rec.events)


@pytest.mark.asyncio
async def test_async_tool_with_async_execution_intercept() -> None:
    relay, rec = new_relay()
    order: list[str] = []

    async def around(name: str, args: Any, next_call: Any) -> Any:
        order.append("before")
        result = await next_call(args)
        order.append("after")
        return result * 2

    relay.intercepts.register_tool_execution("double", 0, around)

    async def slow_add(args: dict) -> int:
        await asyncio.sleep(0)
        order.append("tool")
        return args["a"] + args["b"]

    assert await relay.tools.execute_async("add", {"a": 1, "b": 2}, slow_add) == 6
    assert relay.tools.execute_async is not None and order == ["before", "tool", "after"]
    assert rec.ends(scope_type="tool")[0].output == 6


def test_a_tool_call_keeps_the_chains_it_resolved() -> None:
    relay, _rec = new_relay()
    wrapped: list[str] = []

    def late(name: str, args: Any, next_call: Any) -> Any:
        wrapped.append(name)
        return next_call(args)

    # First call: registers "late" mid-call (must not wrap this call).
    # Second call: deregisters it mid-call (must still wrap this call).
    def registers_late(name: str, args: Any) -> Any:
        if not wrapped and relay.intercepts.deregister_tool_execution("late") is False:
            relay.intercepts.register_tool_execution("late", 0, late)
        return args

    relay.intercepts.register_tool_request("registers", 0, False, registers_late)
    assert relay.tools.execute("first", 1, lambda a: a + 1) == 2
    assert wrapped == []
    assert relay.tools.execute("second", 1, lambda a: a + 1) == 2
    assert wrapped == ["second"]


class CountingCodec(DictCodec):
    def __init__(self) -> None:
        self.decodes = 0
        self.annotations = 0

    def decode(self, content: Any) -> Any:
        self.decodes += 1
        return super().decode(content)

    def annotate_response(self, response: Any) -> Any:
        self.annotations += 1
        return super().annotate_response(response)


def test_annotations_nobody_reads_cost_no_codec_call() -> None:
    relay, rec = new_relay()
    codec = CountingCodec()
    relay.llm.execute("p", request(), lambda r: response(), model_name="m-1", codec=codec)
    start, end = attempts(rec.events, "scope_start")[0], attempts(rec.events)[0]
    assert (codec.decodes, codec.annotations) == (0, 0) and start.model_name == end.model_name == "m-1"
    assert end.annotated_response.output_text == "hello" and codec.annotations == 1
    assert end.annotated_request.messages == [{"role": "user", "content": "hi"}] and codec.decodes == 1
    # Start and end share one decoded view; reading again computes nothing.
    assert start.annotated_request is end.annotated_request
    assert end.annotated_response is end.annotated_response
    assert (codec.decodes, codec.annotations) == (1, 1)
    assert end.to_dict()["annotated_response"]["output_text"] == "hello"
    assert "bookkeeping_errors" not in relay.diagnostics()


def test_without_a_model_name_the_request_is_decoded_for_it_at_once() -> None:
    relay, rec = new_relay()
    codec = CountingCodec()
    relay.llm.execute("p", request(model="m-from-kwargs"), lambda r: response(), codec=codec)
    assert codec.decodes == 1 and attempts(rec.events, "scope_start")[0].model_name == "m-from-kwargs"
    assert attempts(rec.events)[0].annotated_request.model == "m-from-kwargs" and codec.decodes == 1


def test_no_subscriber_means_no_codec_call_at_all() -> None:
    relay = Relay()
    codec = CountingCodec()
    hooked: list[str] = []
    relay.llm.execute("p", request(), lambda r: response(), codec=codec, on_finish=lambda o, r, e: hooked.append(o))
    assert hooked == ["success"] and (codec.decodes, codec.annotations) == (0, 0)


def test_an_annotation_read_late_describes_the_call_as_it_was_made() -> None:
    relay, rec = new_relay()
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    tools: list[Any] = [{"name": "search"}]
    reply = response("first")
    relay.llm.execute(
        "p", request(messages=messages, tools=tools), lambda r: reply, model_name="m-1", codec=CountingCodec()
    )
    # What an agent loop does next: the history grows, the next call goes out.
    messages.append({"role": "assistant", "content": "first"})
    tools.clear()
    second_reply = response("second")
    relay.llm.execute("p", request(messages=messages), lambda r: second_reply, model_name="m-1", codec=DictCodec())
    first, second = attempts(rec.events)
    assert first.annotated_request.messages == [{"role": "user", "content": "hi"}]
    assert first.annotated_request.params["tools"] == [{"name": "search"}]
    assert first.annotated_response.output_text == "first" and second.annotated_response.output_text == "second"
    assert len(second.annotated_request.messages) == 2


def test_a_codec_that_fails_late_fails_open_once_when_read() -> None:
    relay, rec = new_relay()
    relay.llm.execute("p", request(), lambda r: response(), model_name="m-1", codec=UndecodableCodec())
    relay.llm.execute("p", request(), lambda r: response(), model_name="m-1", codec=UnreadableCodec())
    assert "bookkeeping_errors" not in relay.diagnostics()
    undecodable, unreadable = attempts(rec.events)
    assert undecodable.annotated_request is None and undecodable.annotated_response is not None
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    assert unreadable.annotated_response is None and unreadable.annotated_request is not None
    assert relay.diagnostics()["bookkeeping_errors"] == 2
    for event in (undecodable, unreadable):
        assert event.to_dict()["outcome"] == "success"
    assert relay.diagnostics()["bookkeeping_errors"] == 2 and balanced(rec.events)


def test_an_annotation_read_from_many_threads_at_once_is_computed_once() -> None:
    relay, rec = new_relay()
    codec = CountingCodec()
    relay.llm.execute("p", request(), lambda r: response(), model_name="m-1", codec=codec)
    (end,) = attempts(rec.events)
    barrier = threading.Barrier(8)
    seen: list[Any] = []

    def read() -> None:
        barrier.wait(timeout=10)
        seen.append((end.annotated_request, end.annotated_response))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(seen) == 8 and (codec.decodes, codec.annotations) == (1, 1)
    assert all(req is seen[0][0] and resp is seen[0][1] for req, resp in seen)


class UndecodableCodec(DictCodec):
    def decode(self, content: Any) -> Any:
        raise ValueError("unknown request shape")


def test_a_codec_that_cannot_decode_fails_open_for_observers_and_closed_for_policy() -> None:
    relay, rec = new_relay()
    assert relay.llm.execute("p", request(), lambda r: response(), codec=UndecodableCodec()) == response()
    assert attempts(rec.events)[0].outcome == "success" and attempts(rec.events)[0].annotated_request is None
    assert relay.diagnostics()["bookkeeping_errors"] == 1
    relay.intercepts.register_llm_request("needs-view", 0, False, lambda n, r, a: LLMRequestInterceptOutcome(r, a))
    ran: list[Any] = []
    with pytest.raises(ValueError, match="unknown request shape"):
        relay.llm.execute("p", request(), lambda r: ran.append(r), codec=UndecodableCodec())
    assert ran == [] and attempts(rec.events)[1].outcome == "failed"
