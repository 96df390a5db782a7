"""What each framework integration adds per model call and per tool call, beside the framework alone
and beside NeMo Relay's LangChain middleware, in the same run.

Each variant runs the same framework step: the LangChain agent's innermost model step (a chat model's
``_generate_with_cache``, where ``RelayMiddleware`` makes its attempts) and a tool handler returning a
``ToolMessage``; a chat model ``invoke`` with and without ``RelayCallbackHandler``; the Agents SDK's
response span with and without the relay's trace processor, and a function tool's invocation with
and without its managed wrapper. Ours run in a managed turn with one subscriber, NeMo Relay's
middleware in a NeMo scope with one subscriber (its deliveries flushed inside the sample). Medians
of CPU time per call (``bench_core``'s round-robin sampling); the machine is shared, so read the
ratios more than the absolute figures.

Target: at most 20 us added per call, and ahead of NeMo Relay.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.bench_core import Timing, _line, _ratio, compare_async, compare_sync, sink

CALLS = 1000
ROUNDS = 11
BUDGET_US = 20.0


@contextmanager
def managed_turn() -> Iterator[Any]:
    from relay_runtime import session

    session.reset_for_tests()
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(
        profile_key=session.current_profile_key(), session_id="bench", platform="bench"
    )
    lease.host.relay.subscribers.register(sink, name="bench")
    lease.host.retain_managed_execution("bench")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    try:
        yield lease.host.relay
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        lease.host.release_managed_execution("bench")


def _report(title: str, times: dict[str, Timing], bare: str) -> dict[str, Timing]:
    print(title, flush=True)
    base = times[bare]
    _line(f"{bare} (the framework alone)", base)
    added: dict[str, Timing] = {}
    for name, t in times.items():
        if name == bare:
            continue
        added[name] = t - base
        _line(f"added by {name}", added[name], BUDGET_US if name.startswith("relay") else None)
    return added


def _vs_nemo(added: dict[str, Timing], ours: str, nemo: str) -> None:
    if nemo in added and added[ours].cpu > 0:
        _ratio(f"nemo added / ours added ({ours})", added[nemo].cpu / added[ours].cpu, 1.0)


# -- LangChain -----------------------------------------------------------------------------------


def _fake_model() -> Any:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    class BenchModel(FakeMessagesListChatModel):
        model_name: str = "bench-model"  # NeMo Relay's middleware needs a model name

    answer = AIMessage(content="hi", usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4})
    return BenchModel(responses=[answer])


def bench_langchain() -> None:
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware

    model = _fake_model()
    messages = [HumanMessage(content="hello")]
    request = ModelRequest(model=model, messages=messages, tools=[], state={"messages": messages}, runtime=None)

    def model_step(req: Any) -> Any:
        # The agent's innermost model step, minus LangChain's callback plumbing around it.
        model.i = 0
        return ModelResponse(result=[model._generate_with_cache(req.messages).generations[0].message])

    tool_request = ToolCallRequest(
        tool_call={"name": "weather", "args": {"city": "Paris"}, "id": "c1"}, tool=None, state=None, runtime=None
    )

    def tool_step(req: Any) -> Any:
        return ToolMessage(content=f"sunny in {req.tool_call['args']['city']}", tool_call_id="c1", name="weather")

    ours = RelayMiddleware()
    model_variants: dict[str, Callable[[], Any]] = {
        "bare": lambda: model_step(request),
        "relay RelayMiddleware": lambda: ours.wrap_model_call(request, model_step),
    }
    tool_variants: dict[str, Callable[[], Any]] = {
        "bare": lambda: tool_step(tool_request),
        "relay RelayMiddleware": lambda: ours.wrap_tool_call(tool_request, tool_step),
    }
    from langchain_core.callbacks import BaseCallbackHandler

    handler = RelayCallbackHandler()
    config = {"callbacks": [handler]}
    noop_config = {"callbacks": [BaseCallbackHandler()]}  # LangChain's own cost of running any handler

    def invoke_bare() -> Any:
        model.i = 0
        return model.invoke(messages)

    def invoke_handled() -> Any:
        model.i = 0
        return model.invoke(messages, config=config)

    def invoke_noop() -> Any:
        model.i = 0
        return model.invoke(messages, config=noop_config)

    invoke_variants: dict[str, Callable[[], Any]] = {
        "bare": invoke_bare,
        "a no-op callback handler": invoke_noop,
        "relay RelayCallbackHandler": invoke_handled,
    }
    nemo = _nemo_middleware()
    with managed_turn():
        if nemo is None:
            times = compare_sync(model_variants, CALLS, ROUNDS)
            tool_times = compare_sync(tool_variants, CALLS, ROUNDS)
        else:
            times, tool_times = _with_nemo(
                nemo, request, model_step, tool_request, tool_step, model_variants, tool_variants
            )
        invoke_times = compare_sync(invoke_variants, CALLS // 2, ROUNDS)
    added = _report("LangChain agent model call (RelayMiddleware; NeMo Relay's middleware beside it)", times, "bare")
    _vs_nemo(added, "relay RelayMiddleware", "nemo NemoRelayMiddleware")
    added = _report("LangChain agent tool call", tool_times, "bare")
    _vs_nemo(added, "relay RelayMiddleware", "nemo NemoRelayMiddleware")
    added = _report(
        "LangChain chat model invoke with the callback handler (its logical call and attempt)", invoke_times, "bare"
    )
    _line(
        "added by RelayCallbackHandler beyond a no-op handler",
        added["relay RelayCallbackHandler"] - added["a no-op callback handler"],
        BUDGET_US,
    )


def _nemo_middleware() -> Any:
    try:
        from nemo_relay.integrations.langchain.middleware import NemoRelayMiddleware
    except ImportError as exc:
        print(f"nemo-relay's LangChain middleware not run: {exc} (make bench installs the [bench] extra)")
        return None
    return NemoRelayMiddleware()


def _with_nemo(
    nemo: Any,
    request: Any,
    model_step: Any,
    tool_request: Any,
    tool_step: Any,
    model_variants: dict[str, Callable[[], Any]],
    tool_variants: dict[str, Callable[[], Any]],
) -> tuple[dict[str, Timing], dict[str, Timing]]:
    """Ours and NeMo's in one round-robin; NeMo's middleware is async inside (its sync hook runs a loop),
    so both are driven from one event loop through their async hooks, beside the sync ones."""
    import nemo_relay

    nemo_relay.subscribers.register("bench", sink)

    async def amodel(req: Any) -> Any:
        return model_step(req)

    async def atool(req: Any) -> Any:
        return tool_step(req)

    from relay_runtime.integrations.langchain import RelayMiddleware

    ours = RelayMiddleware()
    try:
        with nemo_relay.scope.scope("bench", nemo_relay.ScopeType.Agent):
            times = compare_async(
                {
                    "bare": lambda: amodel(request),
                    "relay RelayMiddleware": lambda: ours.awrap_model_call(request, amodel),
                    "nemo NemoRelayMiddleware": lambda: nemo.awrap_model_call(request, amodel),
                },
                CALLS // 4,
                ROUNDS,
                after={"nemo NemoRelayMiddleware": nemo_relay.subscribers.flush_async},
            )
            tool_times = compare_async(
                {
                    "bare": lambda: atool(tool_request),
                    "relay RelayMiddleware": lambda: ours.awrap_tool_call(tool_request, atool),
                    "nemo NemoRelayMiddleware": lambda: nemo.awrap_tool_call(tool_request, atool),
                },
                CALLS // 4,
                ROUNDS,
                after={"nemo NemoRelayMiddleware": nemo_relay.subscribers.flush_async},
            )
    finally:
        nemo_relay.subscribers.deregister("bench")
    sync = compare_sync(model_variants, CALLS, ROUNDS)
    sync_tools = compare_sync(tool_variants, CALLS, ROUNDS)
    times.update({f"{k} (sync)": v for k, v in sync.items() if k != "bare"})
    tool_times.update({f"{k} (sync)": v for k, v in sync_tools.items() if k != "bare"})
    return times, tool_times


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


def bench_agents() -> None:
    import agents
    from agents.tool_context import ToolContext

    from relay_runtime.integrations import openai_agents

    @agents.function_tool
    def weather(city: str) -> str:
        """The weather of a city."""
        return f"sunny in {city}"

    provider = agents.tracing.get_trace_provider()
    saved = provider._multi_processor._processors
    agents.set_tracing_disabled(False)
    agents.set_trace_processors([])
    original = weather.on_invoke_tool._invoke_tool_impl

    def ctx() -> Any:
        return ToolContext(context=None, tool_name="weather", tool_call_id="c1", tool_arguments='{"city": "Paris"}')

    def model_span() -> None:
        with agents.trace("bench"), agents.tracing.response_span():
            pass

    try:
        bare_spans: dict[str, Callable[[], Any]] = {"bare": model_span}
        bare = compare_sync(bare_spans, CALLS, ROUNDS)["bare"]
        openai_agents.instrument()
        from relay_runtime.integrations.openai_agents.tools import ToolWrapping

        wrapping = ToolWrapping()
        wrapping.wrap(weather)
        managed = weather.on_invoke_tool._invoke_tool_impl
        with managed_turn():
            span_times = compare_sync({"bare": model_span}, CALLS, ROUNDS)
            tool_times = compare_async(
                {
                    "bare": lambda: original(ctx(), '{"city": "Paris"}'),
                    "relay managed function tool": lambda: managed(ctx(), '{"city": "Paris"}'),
                },
                CALLS,
                ROUNDS,
            )
        wrapping.restore()
    finally:
        openai_agents.uninstrument()
        agents.set_trace_processors(list(saved))
    times = {"bare": bare, "relay trace processor": span_times["bare"]}
    _report(
        "Agents SDK model call (a trace with a response span; the processor's logical call and attempt)", times, "bare"
    )
    _report("Agents SDK function tool invocation", tool_times, "bare")


def main() -> None:
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples; CPU us per call (machine shared)")
    for bench in (bench_langchain, bench_agents):
        try:
            bench()
        except ImportError as exc:
            print(f"{bench.__name__}: framework not installed ({exc}); pip install -e '.[frameworks]'")
    asyncio.set_event_loop(None)


if __name__ == "__main__":
    main()
