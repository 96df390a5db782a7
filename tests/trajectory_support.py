"""One agent turn, run through our relay and through NeMo Relay, for the trajectory tests (no tests here).

The turn: a system prompt and a user question; an LLM call that asks for a tool, whose first
provider call fails with a 500 and is retried inside an execution intercept; the tool's result;
a final answer (streamed in the ``stream`` mode). Both runs see the same provider bodies.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter, AtofExporter

MODEL = "gpt-4o-mini"
SESSION = "sess-traj"
TURN = "turn-1"
SYSTEM = {"role": "system", "content": "Answer briefly."}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
CALL = {"id": "call_w1", "name": "weather", "arguments": '{"city": "Paris"}'}
TOOL_RESULT = {"temp_c": 21, "sky": "clear"}
ANSWER = "It is 21°C and clear."
MODES = ("sync", "async", "stream")


def asks_for_tool() -> dict[str, Any]:
    return testing.chat_completion_body(
        None, model=MODEL, id="chatcmpl-a", tool_calls=[CALL], finish_reason="tool_calls",
        usage=testing.chat_usage(40, 9),
    )  # fmt: skip


def final_answer() -> dict[str, Any]:
    return testing.chat_completion_body(
        ANSWER, model=MODEL, id="chatcmpl-b", usage=testing.chat_usage(75, 11, cached=32)
    )


def final_chunks() -> list[dict[str, Any]]:
    return testing.chat_chunks(
        ["It is 21°C ", "and clear."], model=MODEL, id="chatcmpl-b", usage=testing.chat_usage(75, 11, cached=32)
    )


def second_messages(first: Any) -> list[dict[str, Any]]:
    assistant = {"role": "assistant", "content": None, "tool_calls": first}
    tool = {"role": "tool", "tool_call_id": CALL["id"], "content": json.dumps(TOOL_RESULT)}
    return [SYSTEM, QUESTION, assistant, tool]


def wire_tool_calls() -> list[dict[str, Any]]:
    return [{"id": CALL["id"], "type": "function", "function": {"name": CALL["name"], "arguments": CALL["arguments"]}}]


# -- ours -------------------------------------------------------------------------------------


@dataclass
class OurRun:
    atif: AtifExporter
    atof_lines: list[dict[str, Any]]
    journal: JournalSubscriber | None


def _retry(name: str, request: Any, call_next: Any) -> Any:
    try:
        return call_next(request)
    except Exception:
        return call_next(request)  # the retry NeMo Relay can record too: inside an execution intercept


async def _aretry(name: str, request: Any, call_next: Any) -> Any:
    try:
        return await call_next(request)
    except Exception:
        return await call_next(request)


def run_ours(
    mode: str,
    *,
    journal_dir: Path | None = None,
    store: Any = None,
    atif: AtifExporter | None = None,
    end_turn: bool = True,
) -> OurRun:
    """The turn through our relay, watched by a live ATIF and ATOF exporter (and a journal when asked)."""
    coordinator = session.SESSION_COORDINATOR
    atif = atif or AtifExporter(model_name=MODEL)
    atif.attach(coordinator)
    out = io.StringIO()
    atof = AtofExporter(stream=out).attach(coordinator)
    journal = None
    if journal_dir is not None or store is not None:
        journal = JournalSubscriber(session_dir=journal_dir, store=store).attach(coordinator)
    replies = [testing.error(500), testing.json_reply(asks_for_tool())]
    if mode == "stream":
        replies.append(testing.sse_reply(testing.openai_chat_sse(final_chunks())))
    else:
        replies.append(testing.json_reply(final_answer()))
    scripted = testing.scripted_openai(*replies, max_retries=0)
    lease = coordinator.acquire_conversation(
        profile_key=session.current_profile_key(), session_id=SESSION, platform="test"
    )
    relay = lease.host.relay
    relay.intercepts.register_llm_execution("retry", 0, _aretry if mode == "async" else _retry)
    turn = coordinator.begin_turn(lease, turn_id=TURN, task_id="task-1")
    try:
        first_kwargs = {"model": MODEL, "messages": [SYSTEM, QUESTION], "tools": TOOLS}
        if mode == "async":

            async def body() -> None:
                first = await adapters.acomplete(scripted.aclient, first_kwargs)
                calls = [c.model_dump(exclude_none=True) for c in first.choices[0].message.tool_calls]
                await relay.tools.execute_async(
                    "weather", {"city": "Paris"}, _async_weather, tool_call_id=calls[0]["id"]
                )
                await adapters.acomplete(scripted.aclient, {"model": MODEL, "messages": second_messages(calls)})

            asyncio.run(body())
        else:
            first = adapters.complete(scripted.client, first_kwargs)
            calls = [c.model_dump(exclude_none=True) for c in first.choices[0].message.tool_calls]
            relay.tools.execute(
                "weather", {"city": "Paris"}, lambda args: dict(TOOL_RESULT), tool_call_id=calls[0]["id"]
            )
            second = {"model": MODEL, "messages": second_messages(calls)}
            if mode == "stream":
                for _ in adapters.stream(scripted.client, second, include_usage=True):
                    pass
            else:
                adapters.complete(scripted.client, second)
    finally:
        if end_turn:
            coordinator.end_turn(turn, outcome="success")
            coordinator.release_conversation(lease)
        relay.intercepts.deregister_llm_execution("retry")
    atof.shutdown()
    if journal is not None:
        journal.flush()
    atif.detach()
    return OurRun(atif, [json.loads(line) for line in out.getvalue().splitlines()], journal)


async def _async_weather(args: Any) -> Any:
    await asyncio.sleep(0)
    return dict(TOOL_RESULT)


# -- NeMo Relay --------------------------------------------------------------------------------


def nemo_or_skip() -> Any:
    try:
        import nemo_relay
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"nemo-relay is part of the dev extra and must be installed under CI: {exc}", pytrace=False)
        pytest.skip(f"nemo-relay is not installed (pip install nemo-relay): {exc}")
    return nemo_relay


def run_nemo(mode: str, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The same turn through NeMo Relay: its AtifExporter's trajectory and its AtofExporter's lines."""
    nr = nemo_or_skip()
    codec = nr.codecs.OpenAIChatCodec()
    atif = nr.AtifExporter(SESSION, "agent", "0", model_name=MODEL)
    atif.register("traj-atif")
    config = nr.AtofExporterConfig()
    config.output_directory = str(tmp_path)
    config.filename = "nemo.atof.jsonl"
    atof = nr.AtofExporter(config)
    atof.register("traj-atof")
    failed = {"once": False}

    async def retry(name: Any, request: Any, context: Any, call_next: Any) -> Any:
        try:
            return await call_next(request)
        except Exception:
            return await call_next(request)

    nr.intercepts.register_llm_execution("traj-retry", 0, retry)

    async def first_provider(request: Any) -> Any:
        if not failed["once"]:
            failed["once"] = True
            raise RuntimeError("Error code: 500 - scripted failure")
        return asks_for_tool()

    async def final_provider(request: Any) -> Any:
        return final_answer()

    async def weather(args: Any) -> Any:
        return nr.ToolExecutionResult(dict(TOOL_RESULT))

    async def body() -> None:
        with nr.scope.scope("conversation", nr.ScopeType.Agent):
            content = {"model": MODEL, "messages": [SYSTEM, QUESTION], "tools": TOOLS}
            await nr.llm.execute(
                "openai",
                nr.LLMRequest({}, content),
                first_provider,
                codec=codec,
                response_codec=codec,
                model_name=MODEL,
            )
            await nr.tools.execute("weather", {"city": "Paris"}, weather, tool_call_id=CALL["id"])
            second = {"model": MODEL, "messages": second_messages(wire_tool_calls())}
            if mode == "stream":
                chunks: list[Any] = []

                async def produce(request: Any) -> Any:
                    for chunk in final_chunks():
                        yield chunk

                stream = await nr.llm.stream_execute(
                    "openai", nr.LLMRequest({}, {**second, "stream": True}), produce, chunks.append,
                    final_answer, codec=codec, response_codec=codec, model_name=MODEL,
                )  # fmt: skip
                async for _ in stream:
                    pass
            else:
                await nr.llm.execute(
                    "openai", nr.LLMRequest({}, second), final_provider, codec=codec, response_codec=codec,
                    model_name=MODEL,
                )  # fmt: skip

    try:
        asyncio.run(body())
        nr.subscribers.flush()
        atof.force_flush()
        trajectory = atif.export()
    finally:
        nr.intercepts.deregister_llm_execution("traj-retry")
        atif.deregister("traj-atif")
        atof.shutdown()
        atof.deregister("traj-atof")
    lines = [json.loads(line) for line in (tmp_path / "nemo.atof.jsonl").read_text().splitlines() if line.strip()]
    return trajectory, lines
