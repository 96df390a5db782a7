"""Trajectories of requests whose kwargs hold the conversation in a body the provider reads (Bedrock's
``invoke_model``, a JSON string): the user's words and the tools' results are read from the request's view,
each said once however often the history is sent again, live and through the run journal alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from bedrock_support import BedrockServer, raw_reply

from relay_runtime import adapters, session
from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter, atif_from_journal, validate_atif

CLAUDE = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
LLAMA = "meta.llama3-70b-instruct-v1:0"


@pytest.fixture()
def bedrock_server() -> Iterator[BedrockServer]:
    session.reset_for_tests()
    server = BedrockServer()
    yield server
    server.close()
    session.reset_for_tests()


def _claude(text: str, *, tool: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool:
        content.append({"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}})
    return {"id": "msg", "type": "message", "role": "assistant", "model": "claude", "content": content,
            "stop_reason": "tool_use" if tool else "end_turn",
            "usage": {"input_tokens": 9, "output_tokens": 3}}  # fmt: skip


def _body(messages: list[dict[str, Any]]) -> str:
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": messages})


def _turn(server: BedrockServer, store: FileStore, calls: list[tuple[str, str]]) -> dict[str, Any]:
    """``calls`` (model id, JSON body) as one turn through an instrumented boto3 client; the live trajectory."""
    coordinator = session.SESSION_COORDINATOR
    exporter = AtifExporter().attach(coordinator)
    journal = JournalSubscriber(store=store).attach(coordinator)
    client = adapters.instrument(server.client())
    lease = coordinator.acquire_conversation(profile_key=session.current_profile_key(), session_id="s", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="t1")
    try:
        for model, body in calls:
            client.invoke_model(modelId=model, body=body)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        adapters.uninstrument(client)
    assert journal.close()
    exporter.detach()
    return exporter.export()


def test_an_invoke_model_conversation_says_each_user_message_once_and_each_tool_result(bedrock_server, tmp_path):
    asked = {"role": "user", "content": "Weather in Oslo?"}
    first = _claude("Checking.", tool=True)
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}]}
    then = {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}
    history = [asked, {"role": "assistant", "content": first["content"]}, result]
    bedrock_server.replies += [raw_reply(first), raw_reply(_claude("Sunny.")), raw_reply(_claude("Rain."))]
    store = FileStore(tmp_path)
    trajectory = _turn(
        bedrock_server,
        store,
        [(CLAUDE, _body([asked])), (CLAUDE, _body(history)),
         (CLAUDE, _body([*history, {"role": "assistant", "content": "Sunny."}, then]))],
    )  # fmt: skip
    assert validate_atif(trajectory) == []
    steps = [(s["source"], s.get("message")) for s in trajectory["steps"]]
    assert steps == [
        ("user", "Weather in Oslo?"), ("agent", "Checking."), ("agent", "Sunny."),
        ("user", "And tomorrow?"), ("agent", "Rain."),
    ]  # fmt: skip
    # The tool's result, sent back in the body, is the observation of the step that asked for it.
    (observed,) = trajectory["steps"][1]["observation"]["results"]
    said = (observed["source_call_id"], observed["content"], observed["extra"]["read_from"])
    assert said == ("tu_1", "sunny", "request")
    assert atif_from_journal("s", "r1", store=store) == trajectory


def test_a_prompt_body_is_the_user_step(bedrock_server, tmp_path):
    bedrock_server.replies.append(raw_reply({"generation": "Bonjour", "prompt_token_count": 9,
                                             "generation_token_count": 3, "stop_reason": "stop"}))  # fmt: skip
    trajectory = _turn(bedrock_server, FileStore(tmp_path), [(LLAMA, json.dumps({"prompt": "Say hi"}))])
    assert [(s["source"], s.get("message")) for s in trajectory["steps"]] == [("user", "Say hi"), ("agent", "Bonjour")]
