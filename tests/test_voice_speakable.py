"""What the voice model is asked to speak is speakable: source and path lines are stripped, JSON
answers are summarised (never read word for word), raw tool output is described, not read out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from voice_support import FakeNativeProvider, connect_phone, next_event, read_until, wait_for

from relay_runtime.integrations.voice_relay import (
    AgentTaskRequest,
    ProviderEvent,
    ProviderEventKind,
    RelayConfig,
    ToolCallEvent,
    create_app,
)
from relay_runtime.integrations.voice_relay.speakable import speakable

CITED = (
    "The Berlin office moves to Hall 4 on 12 March.\n"
    "Source: notes/office-move.md\n"
    "Sources:\n"
    "- /home/ana/Documents/office.txt\n"
    "- C:\\Users\\ana\\move.docx\n"
    "\n"
    "/srv/share/plan.pdf"
)
TOOL_JSON = json.dumps({"status": "ok", "rows": 3, "table": "orders", "path": "/var/db/orders.sqlite"})


@pytest.mark.parametrize(
    ("answer", "spoken"),
    [
        (CITED, "The Berlin office moves to Hall 4 on 12 March."),
        ("References:\n1. ./docs/a.md\nThe tests pass.", "The tests pass."),
        ("Plain prose: nothing to strip, 3.5 stays.", "Plain prose: nothing to strip, 3.5 stays."),
        ('{"answer": "The vet visit is Friday.\\nSource: ~/pets.md"}', "The vet visit is Friday."),
        ('{"rows": 3, "table": "orders"}', "A structured result: rows: 3; table: orders."),
        ('[{"name": "a"}, {"name": "b"}]', "A list of 2 items: name: a; name: b."),
        ("[not json] but prose", "[not json] but prose"),
    ],
)
def test_speakable(answer: str, spoken: str) -> None:
    assert speakable(answer) == spoken


def test_speakable_is_bounded() -> None:
    assert len(speakable("word " * 2000)) <= 1400


class AnswerBroker:
    """Answers each run with `answer`; runs wait for `release` unless `fast`."""

    def __init__(self, answer: str, *, fast: bool = False) -> None:
        self.answer = answer
        self.release = asyncio.Event()
        if fast:
            self.release.set()

    async def stream_task(self, request: AgentTaskRequest) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "hermes.run.started", "session_id": request.session_id, "run_id": "run-1"}
        await self.release.wait()
        yield {"type": "voice.response.delta", "run_id": "run-1", "delta": self.answer}
        yield {"type": "hermes.run.completed", "run_id": "run-1"}


@pytest_asyncio.fixture
async def phone(tmp_path: Path) -> AsyncIterator[Any]:
    async def start(broker: AnswerBroker, delivery: str | None) -> dict[str, Any]:
        config = RelayConfig(realtime_voice_promote_after_ms=50, realtime_voice_run_dir=str(tmp_path))
        if delivery is not None:
            config.realtime_voice_result_delivery = delivery
        app = create_app(config, task_broker=broker)
        provider = FakeNativeProvider()
        app["server"].realtime_agent.native_providers["xai_realtime"] = provider
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        opened.append(client)
        ws, info, _ = await connect_phone(client, app, {"provider": "xai_realtime"})
        assert (await next_event(ws))["type"] == "voice.session.ready"
        return {"ws": ws, "provider": provider, "info": info}

    opened: list[TestClient] = []
    yield start
    for client in opened:
        await client.close()


async def _run_task(provider: FakeNativeProvider) -> None:
    call = ToolCallEvent(call_id="call-1", name="hermes_run_task", arguments={"text": "Where does the office go?"})
    await provider.connection.emit(ProviderEvent(ProviderEventKind.FUNCTION_CALL_COMPLETED, response_id="r-1",
                                                 payload={"call": call}))


async def _delivery_prompt(provider: FakeNativeProvider) -> str:
    await wait_for(lambda: any("final spoken answer" in t for t in provider.connection.text_inputs))
    return next(t for t in provider.connection.text_inputs if "final spoken answer" in t)


async def _background_delivery(live: dict[str, Any], broker: AnswerBroker) -> str:
    """Run a task into the background, let it finish, and return the prompt its delivery used."""
    await _run_task(live["provider"])
    await read_until(live["ws"], "hermes.run.promoted")
    broker.release.set()
    return await _delivery_prompt(live["provider"])


@pytest.mark.asyncio
async def test_verbatim_delivery_reads_no_source_or_path_lines(phone: Any) -> None:
    broker = AnswerBroker(CITED)
    live = await phone(broker, "speak_verbatim")
    prompt = await _background_delivery(live, broker)
    assert "word for word" in prompt and "Hall 4 on 12 March" in prompt
    assert live["provider"].connection.exact_response_texts == ["The Berlin office moves to Hall 4 on 12 March."]
    for leaked in ("Source", "office-move.md", "/home/ana", "C:\\Users", "plan.pdf"):
        assert leaked not in prompt


@pytest.mark.asyncio
async def test_json_answer_goes_to_the_summary_prompt_even_in_verbatim_mode(phone: Any) -> None:
    broker = AnswerBroker(TOOL_JSON)
    live = await phone(broker, "speak_verbatim")
    prompt = await _background_delivery(live, broker)
    assert "word for word" not in prompt and "in your own words" in prompt
    assert "{" not in prompt and '"rows"' not in prompt and "rows: 3" in prompt
    assert live["provider"].connection.exact_response_texts == []


@pytest.mark.asyncio
async def test_inline_tool_result_carries_described_json_not_raw(phone: Any) -> None:
    live = await phone(AnswerBroker(TOOL_JSON, fast=True), "speak_verbatim")
    await _run_task(live["provider"])
    await read_until(live["ws"], "voice.playback_drain.requested")
    (call_id, output), = live["provider"].connection.tool_results
    assert call_id == "call-1" and output["status"] == "completed"
    assert output["answer"].startswith("A structured result:") and "{" not in output["answer"]


@pytest.mark.asyncio
async def test_fallback_speech_is_speakable(phone: Any) -> None:
    broker = AnswerBroker(CITED)
    live = await phone(broker, "speak_when_idle")
    live["provider"].connection.fail_summary_requests = True
    await _run_task(live["provider"])
    await read_until(live["ws"], "hermes.run.promoted")
    broker.release.set()
    events = await read_until(live["ws"], "voice.response.done", limit=400)
    delta = next(e for e in events if e["type"] == "voice.response.delta" and e.get("delivery") == "fallback")
    assert delta["delta"] == "The Berlin office moves to Hall 4 on 12 March."


@pytest.mark.asyncio
async def test_default_delivery_reads_the_answer_verbatim(phone: Any) -> None:
    broker = AnswerBroker("Your dog's name is Biscuit and the vet visit is Friday.")
    live = await phone(broker, None)
    assert live["info"]["result_delivery"] == "speak_verbatim"
    prompt = await _background_delivery(live, broker)
    assert "word for word" in prompt
    assert live["provider"].connection.exact_response_texts == [broker.answer]


@pytest.mark.asyncio
async def test_answer_seeded_after_a_bad_summary_is_the_speakable_one(phone: Any) -> None:
    broker = AnswerBroker(CITED)
    live = await phone(broker, "speak_when_idle")
    await _background_delivery(live, broker)
    emit = live["provider"].connection.emit
    await emit(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, response_id="sum-1"))
    await emit(ProviderEvent(ProviderEventKind.OUTPUT_TEXT_DELTA, response_id="sum-1",
                             payload={"delta": "One moment while I look that up."}))
    await emit(ProviderEvent(ProviderEventKind.RESPONSE_DONE, response_id="sum-1"))
    await wait_for(lambda: live["provider"].connection.context_items)
    assert live["provider"].connection.context_items == [
        ("assistant", "The Berlin office moves to Hall 4 on 12 March.")
    ]


# A tool's JSON answer whose text field is a command's raw output: 80 lines of `ls -l`.
LISTING = "\n".join(
    f"-rw-r--r--  1 ana  staff  {1000 + i * 37:6d} Mar 12 10:{i % 60:02d} report_{i:03d}.csv" for i in range(80)
)
COMMAND_JSON = json.dumps({"status": "ok", "exit_code": 0, "output": LISTING})


def test_raw_command_output_in_a_json_answer_is_described_not_read() -> None:
    spoken = speakable(COMMAND_JSON)
    assert len(spoken) < 900
    assert spoken.startswith("Raw output of 80 lines, not read out.")
    # Its first and last lines, clipped: never the lines in between.
    assert "report_000.csv" in spoken and "report_079.csv" in spoken
    assert not any(f"report_{i:03d}.csv" in spoken for i in range(1, 79))


def test_raw_output_says_how_many_lines_report_a_problem_and_quotes_no_path() -> None:
    log = "\n".join(
        f"2026-03-12T10:{i:02d}:00Z ERROR worker-{i} failed: db:5432 refused"
        if i % 10 == 0
        else f"2026-03-12T10:{i:02d}:00Z INFO worker-{i} ok"
        for i in range(80)
    )
    assert "8 of them mention an error, failure or warning" in speakable(log)
    paths = "\n".join(f"/home/ana/projects/app/src/module_{i}.py" for i in range(30))
    spoken = speakable(json.dumps({"output": paths}))
    assert spoken == "A list of 30 file paths or sources, not read out."


@pytest.mark.parametrize(
    "prose",
    [
        # Many lines of sentences are an answer, read as before.
        "\n".join(f"Step {n}: open the settings page and choose the network tab." for n in range(1, 12)),
        # A few lines of output are short enough to read.
        "total 8\n-rw-r--r-- 1 ana staff 10 a.txt\n-rw-r--r-- 1 ana staff 20 b.txt",
        # Sentences with a long source list under them: the sources go, the sentences stay.
        "The build passed.\nAll 120 tests ran.\nSources:\n" + "\n".join(f"- ./logs/run_{i}.txt" for i in range(12)),
    ],
)
def test_prose_and_short_output_are_not_described(prose: str) -> None:
    assert not speakable(prose).startswith(("Raw output", "A list of"))


@pytest.mark.asyncio
async def test_delivery_asks_for_a_summary_of_a_description_of_raw_output(phone: Any) -> None:
    broker = AnswerBroker(COMMAND_JSON)
    live = await phone(broker, "speak_verbatim")
    prompt = await _background_delivery(live, broker)
    assert "in your own words" in prompt and "Raw output of 80 lines" in prompt
    assert "report_040.csv" not in prompt and prompt.count("-rw-r--r--") <= 2
    assert live["provider"].connection.exact_response_texts == []
