"""What a buffered consumer writes later is what the agent's call was delivered with.

The ATIF and ATOF exporters and the journal's writer take events on the agent's thread and write them
later (a digest, a writer thread). A tool's arguments and result, a mark's data, a request's tools list
are often the agent's own dicts and lists, which it goes on changing after the call: the records must say
what was called, answered, marked and sent, not what those objects held by the time they were written.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber, read_run_events
from relay_runtime.integrations.trajectory import AtifExporter, AtofExporter, atif_from_journal, atof_exporter
from relay_runtime.integrations.trajectory.sent_copies import SentCopies


def _tool_call_then_changed(host: session.Host, session_id: str) -> None:
    """One turn with a tool call whose arguments and result the agent changes once the call is over."""
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=session_id, platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="task")
    try:
        args = {"city": "Paris", "tags": ["a"]}
        result = {"forecast": "sunny", "items": [1]}
        assert host.relay.tools.execute("weather", args, lambda given: result) is result
        args["city"] = "changed-after"
        args["tags"].append("changed-after")
        result["forecast"] = "changed-after"
        result["items"].append(99)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)


def hold_atof_writer(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The ATOF exporters' writer threads write nothing until the event returned is set (5 s at most)."""
    released = threading.Event()
    write_line = atof_exporter.atof_line

    def held_line(*args: Any) -> str:
        released.wait(5)
        return write_line(*args)

    monkeypatch.setattr(atof_exporter, "atof_line", held_line)
    return released


def _said(text: str, *values: str) -> None:
    assert "changed-after" not in text
    for value in values:
        assert value in text


def test_the_atif_trajectory_holds_a_tools_arguments_and_result_as_they_were(relay_home: Path) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = AtifExporter().attach(host)
    _tool_call_then_changed(host, "atif")  # digested only now, when the trajectory is asked for
    records = [r for r in exporter.records("atif") if r["k"] in ("tool", "tool_end")]
    assert [r.get("args") or r.get("result") for r in records] == [
        {"city": "Paris", "tags": ["a"]},
        {"forecast": "sunny", "items": [1]},
    ]
    _said(json.dumps(exporter.export("atif")), "sunny")
    exporter.detach()


def test_the_atof_writer_writes_a_tools_arguments_and_result_as_they_were(
    relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    changed = hold_atof_writer(monkeypatch)  # until the agent has changed them
    path = tmp_path / "run.atof.jsonl"
    exporter = AtofExporter(path).attach(host)
    _tool_call_then_changed(host, "atof")
    changed.set()
    assert exporter.shutdown()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    data = [r["data"] for r in rows if r.get("name") == "weather"]
    assert data == [{"city": "Paris", "tags": ["a"]}, {"forecast": "sunny", "items": [1]}]
    _said(path.read_text(), "Paris", "sunny")


def test_the_atof_writer_writes_a_marks_data_as_it_was_marked(
    relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A progress dict marked at each step of the agent: each mark says the step it was made at.
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    written = hold_atof_writer(monkeypatch)
    path = tmp_path / "run.atof.jsonl"
    exporter = AtofExporter(path).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="marks", platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="task")
    progress = {"step": 0, "done": []}
    for step in (1, 2):
        progress["step"] = step
        progress["done"].append(step)
        host.relay.scope.mark("progress", progress)
    coordinator.end_turn(turn, outcome="success")
    coordinator.release_conversation(lease)
    written.set()
    assert exporter.shutdown()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["data"] for r in rows if r.get("name") == "progress"] == [
        {"step": 1, "done": [1]},
        {"step": 2, "done": [1, 2]},
    ]


def test_the_atif_trajectory_holds_each_requests_tools_as_they_were_sent(relay_home: Path, tmp_path: Path) -> None:
    # A loop that adds tools to its own list as it finds them (an MCP server's tools/list_changed): each
    # request's record lists the tools that request had, live as in the journal (which reads at delivery).
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = AtifExporter().attach(host)
    store = FileStore(tmp_path / "journal")
    journal = JournalSubscriber(store=store).attach(host)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("a")), t.json_reply(t.chat_completion_body("b")))
    tools = [_tool("one")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="tools", platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="task")
    try:
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages, "tools": tools})
        tools.append(_tool("two"))
        messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages, "tools": tools})
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    assert journal.close()
    first, second = [r["req"] for r in exporter.records("tools") if r["k"] == "attempt"]
    assert [tool["function"]["name"] for tool in first["set"]["tools"]] == ["one"]
    assert [tool["function"]["name"] for tool in second["set"]["tools"]] == ["one", "two"]
    assert atif_from_journal("tools", "r1", store=store) == exporter.export("tools")
    exporter.detach()


def test_the_atif_trajectory_holds_a_turns_messages_as_sent_when_the_next_turn_compacts_them(
    relay_home: Path,
) -> None:
    # An agent that shortens the tool results of earlier turns in place before it calls again (its own context
    # compaction): the first turn's step still holds the result as it was sent.
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = AtifExporter().attach(host)
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("a")), t.json_reply(t.chat_completion_body("b")))
    long_result = "sunny, 21 degrees, light wind from the west " * 20
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [wire_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": long_result},
    ]
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="compact", platform="pytest")
    try:
        for turn_id in ("r1", "r2"):
            turn = coordinator.begin_turn(lease, turn_id=turn_id, task_id="task")
            try:
                adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages})
            finally:
                coordinator.end_turn(turn, outcome="success")
            messages[2]["content"] = "[compacted]"  # before the next turn, in place
            messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "and tomorrow?"}]
    finally:
        coordinator.release_conversation(lease)
    first = next(r["req"] for r in exporter.records("compact") if r["k"] == "attempt")
    assert first["new"][2]["content"] == long_result
    exporter.detach()


LONG_RESULT = "sunny, 21 degrees, light wind from the west " * 20


def _compacting_turn(host: session.Host, session_id: str) -> None:
    """One turn of two calls, between which the agent shortens a tool result it sent, in place (a long tool
    loop nearing its context limit compacts its context)."""
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("a")), t.json_reply(t.chat_completion_body("b")))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [wire_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": LONG_RESULT},
    ]
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id=session_id, platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="task")
    try:
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages})
        messages[2]["content"] = "[compacted]"
        messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "and tomorrow?"}]
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages})
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)


def test_the_atif_trajectory_holds_messages_as_sent_when_the_same_turn_compacts_them(relay_home: Path) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = AtifExporter().attach(host)
    _compacting_turn(host, "compact")
    first = next(r["req"] for r in exporter.records("compact") if r["k"] == "attempt")
    assert first["new"][2]["content"] == LONG_RESULT
    exporter.detach()


def test_the_atof_writer_writes_messages_as_sent_when_the_agent_compacts_them(
    relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    compacted = hold_atof_writer(monkeypatch)
    path = tmp_path / "run.atof.jsonl"
    exporter = AtofExporter(path).attach(host)
    _compacting_turn(host, "compact-atof")
    compacted.set()
    assert exporter.shutdown()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    sent = [r["data"]["content"]["messages"] for r in rows if (r["category"], r["scope_category"]) == ("llm", "start")]
    assert [len(messages) for messages in sent] == [3, 5]
    assert sent[0][2]["content"] == LONG_RESULT
    assert sent[1][2]["content"] == "[compacted]"  # the next request, as it was sent


def test_sent_copies_copy_a_message_once_and_again_only_when_it_changed() -> None:
    copies = SentCopies()
    tool = {"role": "tool", "content": [{"type": "text", "text": LONG_RESULT}]}
    conversation: list[Any] = [{"role": "user", "content": "hi"}, tool, "a string item"]
    first = copies.messages(conversation)
    assert first == conversation and first[1] is not tool and first[1]["content"][0] is not tool["content"][0]
    conversation.append({"role": "user", "content": "more"})
    second = copies.messages(conversation)
    assert second[1] is first[1]  # unchanged: its copy is reused, not made again
    tool["content"][0]["text"] = "[compacted]"  # deep inside, in place
    third = copies.messages(conversation)
    assert third[1]["content"][0]["text"] == "[compacted]" and first[1]["content"][0]["text"] == LONG_RESULT


def wire_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": "{}"}}


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


class _HeldStore(FileStore):
    """A file store whose writer thread appends nothing until ``changed`` is set."""

    changed = threading.Event()

    def append(self, *args: Any, **kwargs: Any) -> Any:
        self.changed.wait(5)
        return super().append(*args, **kwargs)


def test_the_journal_rows_hold_a_tools_arguments_and_result_as_they_were(relay_home: Path, tmp_path: Path) -> None:
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    store = _HeldStore(tmp_path / "journal")
    store.changed = threading.Event()
    journal = JournalSubscriber(store=store).attach(host)
    _tool_call_then_changed(host, "journal")
    store.changed.set()
    assert journal.close()
    rows = read_run_events("journal", "r1", store=store)["events"]
    (called,) = [r["payload"] for r in rows if r["event"] == "tool"]
    (answered,) = [r["payload"] for r in rows if r["event"] == "tool_result"]
    assert called["args"] == {"city": "Paris", "tags": ["a"]}
    assert answered["result"] == {"forecast": "sunny", "items": [1]}
    _said(json.dumps(rows), "Paris", "sunny")
