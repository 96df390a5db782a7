"""What each framework integration adds per model call and per tool call, beside the framework alone
and beside NeMo Relay's LangChain middleware, in the same run.

Each variant runs the same framework step: the LangChain agent's innermost model step (a chat model's
``_generate_with_cache``, where ``RelayMiddleware`` makes its attempts) and a tool handler returning a
``ToolMessage``; a chat model ``invoke`` with and without ``RelayCallbackHandler`` (and with the same records
written by hand in a handler of their own, ``langchain_floor``: the floor of that figure); the Agents SDK's
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

from benchmarks import instructions
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


def _noop_handler(base: type) -> Any:
    """A handler taking the callbacks ``RelayCallbackHandler`` takes, doing nothing in them.

    ``BaseCallbackHandler`` itself is no baseline: its ``on_chat_model_start`` raises NotImplementedError,
    on which LangChain renders the messages as text and calls ``on_llm_start`` instead, a cost ours never
    pays, which made ours look about 6 us cheaper than it is."""

    class NoopHandler(base):  # type: ignore[misc, valid-type]
        run_inline = True

        def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            return None

        def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
            return None

        def on_llm_error(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoopHandler()


def _langchain_calls() -> tuple[dict[str, Callable[[], Any]], Any, Any, Any, Any]:
    """Each LangChain call the benchmark compares (and ``--count`` counts), with the model request, its
    step, the tool request and its step (NeMo's middleware is driven with them)."""
    from langchain.agents.middleware import ModelRequest, ModelResponse
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from benchmarks.langchain_floor import floor_handler
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
    handled = {"callbacks": [RelayCallbackHandler()]}
    noop = {"callbacks": [_noop_handler(BaseCallbackHandler)]}  # LangChain's own cost of running such a handler

    def invoke(config: Any) -> Callable[[], Any]:
        def call() -> Any:
            model.i = 0
            return model.invoke(messages, config=config)

        return call

    calls: dict[str, Callable[[], Any]] = {
        "model-bare": lambda: model_step(request),
        "model-ours": lambda: ours.wrap_model_call(request, model_step),
        "tool-bare": lambda: tool_step(tool_request),
        "tool-ours": lambda: ours.wrap_tool_call(tool_request, tool_step),
        "invoke-bare": invoke(None),
        "invoke-noop": invoke(noop),
        "invoke-ours": invoke(handled),
        "invoke-floor": invoke({"callbacks": [floor_handler()]}),  # the handler's records, written by hand
    }
    return calls, request, model_step, tool_request, tool_step


def bench_langchain() -> None:
    from benchmarks.langchain_floor import check_same_records

    calls, request, model_step, tool_request, tool_step = _langchain_calls()
    check_same_records(calls["invoke-ours"], calls["invoke-floor"])
    model_variants = {"bare": calls["model-bare"], "relay RelayMiddleware": calls["model-ours"]}
    tool_variants = {"bare": calls["tool-bare"], "relay RelayMiddleware": calls["tool-ours"]}
    invoke_variants = {
        "bare": calls["invoke-bare"],
        "a no-op callback handler": calls["invoke-noop"],
        "relay RelayCallbackHandler": calls["invoke-ours"],
        "its records written by hand (the floor)": calls["invoke-floor"],
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
    floor = added["its records written by hand (the floor)"]
    _line("added by the floor beyond a no-op handler", floor - added["a no-op callback handler"])
    print(f"  {'handler added / floor added':<52} {added['relay RelayCallbackHandler'].cpu / floor.cpu:8.3f} x",
          flush=True)  # fmt: skip


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


@contextmanager
def _agents_calls(instrumented: bool) -> Iterator[dict[str, Callable[[], Any]]]:
    """The Agents SDK calls compared (and counted): a trace with a response span (with the relay's trace
    processor when ``instrumented``, else with no processor at all), and a function tool's invocation,
    bare and (when ``instrumented``) managed. The tool calls return coroutines."""
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

    calls: dict[str, Callable[[], Any]] = {
        "span": model_span,
        "agent-tool-bare": lambda: original(ctx(), '{"city": "Paris"}'),
    }
    wrapping = None
    try:
        if instrumented:
            openai_agents.instrument()
            from relay_runtime.integrations.openai_agents.tools import ToolWrapping

            wrapping = ToolWrapping()
            wrapping.wrap(weather)
            managed = weather.on_invoke_tool._invoke_tool_impl
            calls["agent-tool-ours"] = lambda: managed(ctx(), '{"city": "Paris"}')
        yield calls
    finally:
        if wrapping is not None:
            wrapping.restore()
        openai_agents.uninstrument()
        agents.set_trace_processors(list(saved))


def bench_agents() -> None:
    with _agents_calls(instrumented=False) as calls:
        bare = compare_sync({"bare": calls["span"]}, CALLS, ROUNDS)["bare"]
    with _agents_calls(instrumented=True) as calls, managed_turn():
        span_times = compare_sync({"bare": calls["span"]}, CALLS, ROUNDS)
        tool_times = compare_async(
            {"bare": calls["agent-tool-bare"], "relay managed function tool": calls["agent-tool-ours"]},
            CALLS,
            ROUNDS,
        )
    times = {"bare": bare, "relay trace processor": span_times["bare"]}
    _report(
        "Agents SDK model call (a trace with a response span; the processor's logical call and attempt)", times, "bare"
    )
    _report("Agents SDK function tool invocation", tool_times, "bare")


def _core_calls() -> dict[str, Callable[[], Any]]:
    """The yardstick: the core's own logical call and attempt in a managed turn (``calls.execute_current``)."""
    from benchmarks.bench_core import HEADERS, _content, provider
    from relay_runtime import calls
    from relay_runtime.types import LLMRequest

    content = _content()
    return {
        "core-bare": lambda: provider(LLMRequest(HEADERS, content)),
        "core-turn": lambda: calls.execute_current(LLMRequest(HEADERS, content), provider, name="bench"),
    }


# Each ``--count`` variant: (its group, the call of the group it runs).
COUNTED: dict[str, tuple[str, str]] = {
    "lc-model-bare": ("langchain", "model-bare"),
    "lc-model-ours": ("langchain", "model-ours"),
    "lc-tool-bare": ("langchain", "tool-bare"),
    "lc-tool-ours": ("langchain", "tool-ours"),
    "lc-invoke-bare": ("langchain", "invoke-bare"),
    "lc-invoke-noop": ("langchain", "invoke-noop"),
    "lc-invoke-ours": ("langchain", "invoke-ours"),
    "lc-invoke-floor": ("langchain", "invoke-floor"),
    "agents-span-bare": ("agents-bare", "span"),
    "agents-span-ours": ("agents", "span"),
    "agents-tool-bare": ("agents", "agent-tool-bare"),
    "agents-tool-ours": ("agents", "agent-tool-ours"),
    "core-bare": ("core", "core-bare"),
    "core-turn": ("core", "core-turn"),
}
# The pairs whose difference is what an integration adds (ours, its baseline), printed with instructions.
ADDED = [
    ("lc-model-ours", "lc-model-bare"),
    ("lc-tool-ours", "lc-tool-bare"),
    ("lc-invoke-ours", "lc-invoke-noop"),
    ("lc-invoke-floor", "lc-invoke-noop"),
    ("agents-span-ours", "agents-span-bare"),
    ("agents-tool-ours", "agents-tool-bare"),
    ("core-turn", "core-bare"),
]


@contextmanager
def _group(name: str) -> Iterator[dict[str, Callable[[], Any]]]:
    if name == "langchain":
        yield _langchain_calls()[0]
    elif name in ("agents", "agents-bare"):
        with _agents_calls(instrumented=name == "agents") as calls:
            yield calls
    else:
        yield _core_calls()


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of one variant in a managed turn with one subscriber
    (an async call's coroutine run to its end by one event loop, the same for its bare twin)."""
    group, key = COUNTED[variant]
    loop = asyncio.new_event_loop()
    with _group(group) as calls, managed_turn():
        call = calls[key]

        def once() -> None:
            result = call()
            if asyncio.iscoroutine(result):
                loop.run_until_complete(result)

        instructions.counted(once, n, warm=200)
    loop.close()


def report_instructions() -> None:
    figures = {variant: instructions.per_call("benchmarks.bench_frameworks", variant) for variant in COUNTED}
    print("instructions per call (valgrind, 60 calls, deterministic), and what each integration adds:")
    for ours, base in ADDED:
        print(f"  {ours:18s} {figures[ours]:10,.0f}  {base:18s} {figures[base]:10,.0f}  "
              f"added {figures[ours] - figures[base]:10,.0f}")  # fmt: skip
    print(f"  {'lc-invoke-noop':18s} {figures['lc-invoke-noop']:10,.0f}  {'lc-invoke-bare':18s} "
          f"{figures['lc-invoke-bare']:10,.0f}  added {figures['lc-invoke-noop'] - figures['lc-invoke-bare']:10,.0f}"
          "  (LangChain's own cost of any handler)")  # fmt: skip


def run_benches(*benches: Callable[[], None]) -> None:
    """Each of ``benches`` in turn, under one heading; one whose framework is not installed says so."""
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples; CPU us per call (machine shared)")
    for bench in benches:
        try:
            bench()
        except ImportError as exc:
            print(f"{bench.__name__}: framework not installed ({exc}); pip install -e '.[frameworks]'")


def main() -> None:
    run_benches(bench_langchain, bench_agents)
    asyncio.set_event_loop(None)
    if instructions.available():
        report_instructions()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
