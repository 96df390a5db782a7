"""Delivery and promotion paths beyond the seed: the summary validator's verdicts, early commit,
visual-only delivery, the confirm alarm, the queue limit, status and cancel tools, and the
detached window for an undelivered result."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from voice_support import FakeNativeProvider, GatedHermesToolBroker, PerTaskBroker, next_event, read_until, wait_for

from relay_runtime.integrations.run_journal.paths import MAX_ID_LENGTH, valid_id
from relay_runtime.integrations.voice_relay import (
    ProviderEvent,
    ProviderEventKind,
    RelayConfig,
    ToolCallEvent,
    create_app,
)
from relay_runtime.integrations.voice_relay import runs as runs_module
from relay_runtime.integrations.voice_relay.session import MAX_ACTIVE_RESPONSES
from relay_runtime.integrations.voice_relay.summary_validator import can_commit_early, evidence_tokens, judge_summary

ANSWER = "Background answer ready."


class _AnyInt:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and not isinstance(other, bool)


ANY_INT = _AnyInt()


@pytest.mark.parametrize(
    ("text", "answer", "verdict"),
    [
        ("", ANSWER, "empty_summary"),
        ("   ", ANSWER, "empty_summary"),
        ("Please tell me the run id so I can check.", ANSWER, "asked_for_run_id"),
        ("I will call hermes_run_task again.", ANSWER, "asked_for_run_id"),
        ("One moment while I look that up.", ANSWER, "acknowledgement_not_summary"),
        ("The job is queued; I'll let you know.", ANSWER, "acknowledgement_not_summary"),
        ("Okay.", ANSWER, "short_acknowledgement"),
        ("Everything went fine and you should be pleased with how it all turned out.", ANSWER, "no_answer_overlap"),
        ("Your background answer is ready.", ANSWER, None),
        # A deferral phrase that is part of the answer itself is not filler.
        ("Your order is queued for shipping on day 3.", "The order is queued for shipping on day 3.", None),
        ("Sure thing.", "Yes.", None),
    ],
)
def test_judge_summary(text: str, answer: str, verdict: str | None) -> None:
    assert judge_summary(text, answer) == verdict


def test_evidence_tokens_and_early_commit() -> None:
    assert evidence_tokens("The 3 reports from Berlin were late") == {"3", "reports", "berlin", "late"}
    assert "port" not in evidence_tokens("reports")  # whole words only
    long_good = "The reports from Berlin arrived late this morning, all three."
    assert can_commit_early(long_good, "Three reports from Berlin arrived late.")
    assert not can_commit_early("The reports from Berlin.", "Three reports from Berlin arrived late.")
    assert not can_commit_early(long_good + " One moment.", "Three reports from Berlin arrived late.")


def test_evidence_tokens_keep_accented_and_non_latin_words_whole() -> None:
    assert evidence_tokens("Réunion déplacée à Zürich, 15h30") == {"réunion", "déplacée", "zürich", "15h30"}
    # A decomposed accent (e + combining acute) is the same word as the composed one.
    assert evidence_tokens("cafe\u0301 ouvert") == evidence_tokens("café ouvert") == {"café", "ouvert"}
    assert evidence_tokens("Встреча перенесена на четверг") == {"встреча", "перенесена", "четверг"}
    assert evidence_tokens("l\u2019équipe") == evidence_tokens("l'équipe") == {"l'équipe"}


def test_accented_answer_is_judged_on_its_words() -> None:
    answer = "La réunion avec Müller est déplacée à jeudi, au café de Zürich."
    good = "Votre réunion avec Müller est déplacée à jeudi, au café de Zürich."
    assert judge_summary(good, answer) is None
    assert can_commit_early(good, answer)
    # Shares only the split-off ASCII tails ("union", "ller", "rich") an ASCII tokenizer would see.
    assert judge_summary("Une union de ller et rich, voilà tout ce que je peux dire.", answer) == "no_answer_overlap"
    russian = "Встреча Мюллера перенесена на четверг."
    assert judge_summary("Извините, сейчас я не могу ответить на этот вопрос.", russian) == "no_answer_overlap"
    assert judge_summary("Ваша встреча Мюллера перенесена на четверг.", russian) is None


def test_deferral_with_a_typographic_apostrophe_is_still_an_acknowledgement() -> None:
    answer = "The build finished: 42 tests passed and the release notes are ready."
    # Only the phrase "i'll let you know" catches this one, and only once \u2019 folds to '.
    filler = "Build, 42 tests, release notes: I\u2019ll let you know everything shortly."
    assert judge_summary(filler, answer) == "acknowledgement_not_summary"
    assert not can_commit_early(filler, answer)


@pytest_asyncio.fixture
async def relay(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    previous = runs_module._PRE_TASK_STATUS_LEAD_SECONDS
    runs_module._PRE_TASK_STATUS_LEAD_SECONDS = 0.0
    app = create_app(RelayConfig(realtime_voice_promote_after_ms=50, realtime_voice_run_dir=str(tmp_path)))
    server = app["server"]
    broker = GatedHermesToolBroker()
    provider = FakeNativeProvider()
    server.realtime_agent.task_broker = broker
    server.realtime_agent.native_providers["xai_realtime"] = provider
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        token = server.sessions.create_session("phone", "d").token
        headers = {"Authorization": f"Bearer {token}"}
        resp = await client.post("/voice/realtime-agent/session", json={"provider": "xai_realtime"}, headers=headers)
        info = await resp.json()
        ws = await client.ws_connect(info["websocket_path"], headers=headers)
        assert (await next_event(ws))["type"] == "voice.session.ready"
        yield {
            "ws": ws,
            "provider": provider,
            "broker": broker,
            "client": client,
            "headers": headers,
            "info": info,
            "session": server.realtime_agent.sessions[info["session_id"]],
            "agent": server.realtime_agent,
        }
        broker.release.set()
        await ws.close()
    runs_module._PRE_TASK_STATUS_LEAD_SECONDS = previous


async def tool_call(
    provider: FakeNativeProvider, name: str = "hermes_run_task", call_id: str = "call-1", **arguments: Any
) -> None:
    if name == "hermes_run_task":
        arguments.setdefault("text", "Research the thing.")
    await provider.connection.emit(
        ProviderEvent(
            ProviderEventKind.FUNCTION_CALL_COMPLETED,
            response_id="resp-1",
            payload={"call": ToolCallEvent(call_id=call_id, name=name, arguments=arguments)},
        )
    )


async def result_for(provider: FakeNativeProvider, call_id: str) -> dict[str, Any]:
    for _ in range(200):
        found = [out for cid, out in provider.connection.tool_results if cid == call_id]
        if found:
            return found[-1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no tool result for {call_id}")


async def summary_injected(provider: FakeNativeProvider) -> None:
    for _ in range(200):
        if any("final spoken answer" in t for t in provider.connection.text_inputs):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no summary injection")


@pytest.mark.asyncio
async def test_good_summary_commits_early_and_is_delivered_once(relay: dict[str, Any]) -> None:
    ws, provider, broker = relay["ws"], relay["provider"], relay["broker"]
    await tool_call(provider)
    await read_until(ws, "hermes.run.promoted")
    broker.release.set()
    await read_until(ws, "hermes.run.background_completed")
    await summary_injected(provider)
    emit = provider.connection.emit
    await emit(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, response_id="sum-1"))
    await emit(
        ProviderEvent(
            ProviderEventKind.OUTPUT_TEXT_DELTA,
            response_id="sum-1",
            payload={"delta": "Good news: the background answer is ready for you now."},
        )
    )
    # Committed before the response ends: the phone hears it as it comes.
    events = await read_until(ws, "voice.response.delta")
    assert [e["type"] for e in events][-2:] == ["voice.response.started", "voice.response.delta"]
    await emit(ProviderEvent(ProviderEventKind.RESPONSE_DONE, response_id="sum-1"))
    await read_until(ws, "voice.response.done")
    log_path = relay["session"].event_log_path
    await wait_for(lambda: "voice.realtime_agent.result_delivered" in log_path.read_text())
    log = log_path.read_text()
    assert log.count("voice.realtime_agent.result_delivered") == 1
    assert "forced_summary_fallback" not in log and "delivery_fallback" not in log


@pytest.mark.asyncio
async def test_visual_only_delivery_is_text(relay: dict[str, Any]) -> None:
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    session.result_delivery = "visual_only"
    await tool_call(provider)
    promoted = (await read_until(ws, "hermes.run.promoted"))[-1]
    assert promoted["spoken_handoff"] is False and promoted["result_delivery"] == "visual_only"
    broker.release.set()
    events = await read_until(ws, "voice.response.done")
    delta = next(e for e in events if e["type"] == "voice.response.delta")
    assert delta["delivery"] == "visual_only" and delta["delta"] == ANSWER
    assert provider.connection.request_response_count == 0


@pytest.mark.asyncio
async def test_unconfirmed_delivery_lands_as_text(relay: dict[str, Any]) -> None:
    ws, provider, broker = relay["ws"], relay["provider"], relay["broker"]
    relay["agent"].delivery_timing.confirm_seconds = 0.2
    await tool_call(provider)
    await read_until(ws, "hermes.run.promoted")
    broker.release.set()
    await summary_injected(provider)
    events = await read_until(ws, "voice.response.done")
    delta = next(e for e in events if e["type"] == "voice.response.delta")
    assert delta["delivery"] == "visual_only" and ANSWER in delta["delta"]
    assert "voice.realtime_agent.delivery_unconfirmed" in relay["session"].event_log_path.read_text()


@pytest.mark.asyncio
async def test_queue_limit_status_and_cancel_tools(relay: dict[str, Any]) -> None:
    ws, provider, broker = relay["ws"], relay["provider"], relay["broker"]
    await tool_call(provider, call_id="call-1")
    await read_until(ws, "hermes.run.promoted")
    for n in range(2, 5):
        await tool_call(provider, call_id=f"call-{n}")
        assert (await result_for(provider, f"call-{n}"))["queue_position"] == n - 1
    await tool_call(provider, call_id="call-5")
    assert (await result_for(provider, "call-5"))["status"] == "already_running"
    await tool_call(provider, "hermes_get_status", call_id="status-1")
    status = await result_for(provider, "status-1")
    assert status["status"] == "running" and status["queued_count"] == 3 and status["tier"] == "promoted"
    assert not any("run" in key and "id" in key for key in status)  # nothing the model could read out as an id
    await tool_call(provider, "hermes_run_task", call_id="bad-1", text="")
    assert (await result_for(provider, "bad-1")) == {"ok": False, "error": "text is required"}
    await tool_call(provider, "hermes_cancel", call_id="cancel-1")
    assert (await result_for(provider, "cancel-1")) == {"ok": True, "status": "cancelled"}
    cancelled: list[str] = []
    while "call-1" not in cancelled:
        event = (await read_until(ws, "hermes.run.cancelled"))[-1]
        cancelled.append(event["call_id"])
    # The queue is cleared too, then the running task.
    assert cancelled == ["call-2", "call-3", "call-4", "call-1"]
    await asyncio.wait_for(broker.cancelled.wait(), 5)
    await tool_call(provider, "hermes_get_status", call_id="status-2")
    assert (await result_for(provider, "status-2"))["status"] == "idle"
    await tool_call(provider, "no_such_tool", call_id="x-1")
    assert "unknown tool" in (await result_for(provider, "x-1"))["error"]


@pytest.mark.asyncio
async def test_response_cancel_during_fast_lane_wait_wins(relay: dict[str, Any]) -> None:
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    await tool_call(provider, call_id="call-1", mode="background")
    await read_until(ws, "hermes.run.promoted")
    await broker.started.wait()
    # A long grace window, so the second ask is certainly still in its fast-lane wait when cancel lands.
    session.promote_after_ms = 30_000
    await tool_call(provider, call_id="call-2")
    await wait_for(lambda: len(broker.requests) == 2)
    await ws.send_json({"type": "response.cancel"})
    events = await read_until(ws, "voice.response.done")
    assert events[-1]["cancelled"] is True
    cancelled = {e["call_id"] for e in events if e["type"] == "hermes.run.cancelled"}
    assert cancelled == {"call-1", "call-2"}
    # The second ask is closed with something the model can say, not left hanging or queued.
    second = await result_for(provider, "call-2")
    assert second["ok"] is False and second["status"] == "cancelled"
    assert "cancel" in second["message"].lower() and "call-2" not in second["message"]
    # Both streams are cancelled: the first by the cancel rule, the fast lane because cancel wins.
    await wait_for(lambda: sorted(broker.cancelled_indices) == [0, 1])
    await wait_for(lambda: not any(t.get_name().startswith("voice-tool-call") for t in session.tasks))
    runs = relay["agent"].parts[session.session_id].runs
    assert runs.active is None and not runs.queue
    # Nothing runs later either: releasing the gate starts no queued run.
    broker.release.set()
    session.emit("test.sentinel")
    later = await read_until(ws, "test.sentinel")
    assert not [e for e in events + later if e["type"] in ("hermes.run.queued", "hermes.run.dequeued")]
    assert len(broker.requests) == 2
    assert [cid for cid, _ in provider.connection.tool_results].count("call-2") == 1


@pytest.mark.asyncio
async def test_response_cancel_still_ends_when_the_provider_socket_is_dead(
    relay: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    await tool_call(provider, call_id="call-1", mode="background")
    await read_until(ws, "hermes.run.promoted")
    session.promote_after_ms = 30_000
    await tool_call(provider, call_id="call-2")
    await wait_for(lambda: len(broker.requests) == 2)

    async def dead(call_id: str, output: dict[str, Any]) -> None:
        raise ConnectionError("provider socket dead")

    monkeypatch.setattr(provider.connection, "send_tool_result", dead)
    await ws.send_json({"type": "response.cancel"})
    events = await read_until(ws, "voice.response.done")
    assert events[-1]["cancelled"] is True
    assert not [e for e in events if e["type"] == "voice.error"]
    await wait_for(lambda: sorted(broker.cancelled_indices) == [0, 1])
    assert "voice.realtime_agent.cancel_result_failed" in session.event_log_path.read_text()
    runs = relay["agent"].parts[session.session_id].runs
    assert runs.active is None and not runs.queue


def log_records(session: Any, name: str) -> list[dict[str, Any]]:
    lines = session.event_log_path.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("log") == name]


@pytest.mark.asyncio
async def test_responses_never_reported_done_stay_bounded(relay: dict[str, Any]) -> None:
    ws, provider, session = relay["ws"], relay["provider"], relay["session"]
    extra = 5
    ids = [f"resp-{i}" for i in range(MAX_ACTIVE_RESPONSES + extra)]
    for rid in ids:
        await provider.connection.emit(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, response_id=rid))
    # A repeated start of a response still open is not a second response.
    await provider.connection.emit(ProviderEvent(ProviderEventKind.RESPONSE_STARTED, response_id=ids[-1]))
    await provider.connection.emit(ProviderEvent(ProviderEventKind.RESPONSE_DONE, response_id=ids[-1]))
    events = await read_until(ws, "voice.response.done", limit=len(ids) + 5)
    assert [e["response_id"] for e in events if e["type"] == "voice.response.started"] == ids
    # Oldest dropped first; the one reported done is gone too.
    assert list(session.active_responses) == ids[extra:-1]
    evicted = log_records(session, "voice.realtime_agent.active_response_evicted")
    assert [r["response_id"] for r in evicted] == ids[:extra]
    assert [r["evicted_total"] for r in evicted] == list(range(1, extra + 1))
    # The provider's table of open tool calls reports its evictions through the same log.
    await provider.connection.emit(
        ProviderEvent(
            ProviderEventKind.FUNCTION_CALL_STARTED,
            response_id="resp-x",
            payload={"call_id": "c-9", "name": "t"},
            metadata={"evicted_tool_call": {"call_id": "c-1", "name": "hermes_get_status"}, "evicted_tool_calls": 1},
        )
    )
    await read_until(ws, "voice.tool_call.started")
    assert log_records(session, "voice.realtime_agent.tool_call_evicted") == [
        {
            "log": "voice.realtime_agent.tool_call_evicted",
            "at_ms": ANY_INT,
            "session_id": session.session_id,
            "call_id": "c-1",
            "tool": "hermes_get_status",
            "evicted_total": 1,
        }
    ]


@pytest.mark.asyncio
async def test_undelivered_result_does_not_hold_a_detached_session_forever(
    relay: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_VOICE_BACKGROUND_DETACHED_MAX_MS", "300")
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    session.resume_ttl_seconds = 0.05
    await tool_call(provider)
    await read_until(ws, "hermes.run.promoted")
    await ws.close()
    broker.release.set()
    # Only a pending result is left: the session must expire once the stretched window passes.
    await wait_for(lambda: session.closed)
    log = session.event_log_path.read_text()
    assert "voice.realtime_agent.result_deferred" in log and "voice.session.expired" in log


@pytest.mark.asyncio
async def test_every_result_finished_while_detached_is_delivered_after_resume(relay: dict[str, Any]) -> None:
    # Two runs (the second queued behind the first) both finish while the phone is away:
    # each result must be held and delivered after resume, neither replacing the other.
    ws, provider, session = relay["ws"], relay["provider"], relay["session"]
    broker = PerTaskBroker()
    relay["agent"].task_broker = broker
    relay["agent"].delivery_timing.confirm_seconds = 0.2
    await tool_call(provider, call_id="call-1", text="first task")
    await read_until(ws, "hermes.run.promoted")
    await tool_call(provider, call_id="call-2", text="second task")
    assert (await result_for(provider, "call-2"))["status"] == "queued"
    ready_id = (await read_until(ws, "hermes.run.queued"))[-1]["event_id"]
    await ws.close()
    await wait_for(lambda: session.detached_at is not None)
    broker.gate("first task").set()
    broker.gate("second task").set()

    def injected() -> list[str]:
        return [t for t in provider.connection.text_inputs if "final spoken answer" in t]

    log_path = session.event_log_path
    await wait_for(lambda: log_path.read_text().count("voice.realtime_agent.result_deferred") == 2)
    assert injected() == []  # nothing spoken into the void

    ws2 = await relay["client"].ws_connect(relay["info"]["websocket_path"], headers=relay["headers"])
    await ws2.send_json(
        {"type": "session.resume", "resume_token": relay["info"]["resume_token"], "last_event_id": ready_id}
    )
    await read_until(ws2, "voice.replay.done")
    await wait_for(lambda: len(injected()) == 2)
    assert PerTaskBroker.answer("first task") in injected()[0]
    assert PerTaskBroker.answer("second task") in injected()[1]
    await ws2.close()


@pytest.mark.asyncio
async def test_prompts_and_tool_results_carry_no_ids(relay: dict[str, Any]) -> None:
    # A realtime model reads out whatever id it is shown, or asks the user for one.
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    await tool_call(provider, call_id="call-7f3a")
    await read_until(ws, "hermes.run.promoted")
    broker.release.set()
    await summary_injected(provider)
    said = provider.connection.text_inputs + [json.dumps(out) for _, out in provider.connection.tool_results]
    assert len(said) >= 3  # the handoff prompt, the summary prompt, the interim tool result
    ids = ("call-7f3a", "run-gated", session.session_id, session.chat_session_id or "chat-none")
    assert [text for text in said if any(i in text for i in ids)] == []


@pytest.mark.asyncio
async def test_a_flood_of_respeak_requests_holds_one_delivery_not_one_per_message(relay: dict[str, Any]) -> None:
    ws, provider, broker, session = relay["ws"], relay["provider"], relay["broker"], relay["session"]
    session.result_delivery = "visual_only"
    await tool_call(provider)
    await read_until(ws, "hermes.run.promoted")
    broker.release.set()
    await read_until(ws, "voice.response.done")
    # Spoken respeaks now: the provider never answers, so each one waits out its confirm window.
    session.result_delivery = "speak_verbatim"
    flood = 300
    for _ in range(flood):
        await ws.send_str(json.dumps({"type": "hermes.result.respeak"}))
    # Messages are handled in order: once this is answered, every respeak has been.
    await ws.send_str(json.dumps({"type": "session.start"}))
    events = await read_until(ws, "voice.session.started", limit=flood + 50)
    await wait_for(lambda: provider.connection.request_response_count >= 1)
    # Whatever the phone sends, it holds one respeak at a time, not a task (and a speech) per message.
    assert [t.get_name().startswith("voice-respeak") for t in session.tasks].count(True) == 1
    refused = [e["code"] for e in events if e["type"] == "voice.error"]
    assert refused == ["respeak_in_progress"] * (flood - 1)
    # A resumed socket is the same session: it cannot start a second respeak either.
    resumed = await relay["client"].ws_connect(relay["info"]["websocket_path"], headers=relay["headers"])
    last = events[-1]["event_id"]
    await resumed.send_json(
        {"type": "session.resume", "resume_token": relay["info"]["resume_token"], "last_event_id": last}
    )
    await read_until(resumed, "voice.replay.done")
    await resumed.send_str(json.dumps({"type": "hermes.result.respeak"}))
    error = (await read_until(resumed, "voice.error"))[-1]
    assert error["code"] == "respeak_in_progress"
    await resumed.close()
    await asyncio.sleep(0.2)
    assert provider.connection.request_response_count == 1


@pytest.mark.asyncio
async def test_a_session_id_from_the_voice_model_that_the_journal_would_refuse_is_a_tool_error(
    relay: dict[str, Any],
) -> None:
    # The agent's run is journaled under it: a run under an id the journal refuses would go unrecorded.
    provider, broker = relay["provider"], relay["broker"]
    await tool_call(provider, session_id="the current chat")
    result = await result_for(provider, "call-1")
    assert result["ok"] is False and "session_id" in result["error"]
    assert broker.requests == []


@pytest.mark.asyncio
async def test_a_fast_lane_side_session_of_the_longest_chat_session_id_is_still_a_journal_id(
    relay: dict[str, Any],
) -> None:
    provider, broker, session = relay["provider"], relay["broker"], relay["session"]
    session.chat_session_id = "c" * MAX_ID_LENGTH  # as long as a session's chat_session_id may be
    await tool_call(provider)
    await broker.started.wait()
    await tool_call(provider, call_id="call-2")
    await wait_for(lambda: len(broker.requests) == 2)
    main, side = (request.session_id for request in broker.requests)
    assert main == "c" * MAX_ID_LENGTH
    assert valid_id(side) and side != main
