"""A tool call no tool scope answered is answered in the trajectory by the result a later request sends.

An Agents SDK handoff is a tool call (``transfer_to_<agent>``) the SDK answers itself: no tool runs, and the
step that asked for it had no observation. A loop that runs its tools in plain code (``instrument()`` alone)
left every tool call of its trajectory unanswered the same way. The result was in the next request all
along: it is read from there, for each provider's shape, live and from the journal alike; a tool scope
still answers its own call once, and a result for a call no step made invents no observation.
Real SDK clients on the scripted mock transport, the ATIF exporter and a file journal live.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.run_journal import FileStore, JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter, atif_from_journal, validate_atif
from tests.framework_support import need


def trajectory(host: session.Host, tmp_path: Path, run: Callable[[], None]) -> dict[str, Any]:
    """``run`` as one turn of a conversation of its own; its live trajectory, checked against the journal's."""
    exporter = AtifExporter().attach(host)
    store = FileStore(tmp_path / "journal")
    journal = JournalSubscriber(store=store).attach(host)
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="pytest")
    turn = coordinator.begin_turn(lease, turn_id="r1", task_id="task")
    host.retain_managed_execution("test")
    try:
        run()
    finally:
        host.release_managed_execution("test")
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        adapters.uninstrument()
    assert journal.close()
    live = exporter.export()
    exporter.detach()
    assert validate_atif(live) == []
    assert atif_from_journal("s", "r1", store=store) == live
    return live


def answers(trajectory: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """Each tool call of the trajectory: its function, and the content and origin of what answered it."""
    out = []
    for step in trajectory["steps"]:
        results = {r["source_call_id"]: r for r in (step.get("observation") or {}).get("results", [])}
        for call in step.get("tool_calls") or ():
            result = results.get(call["tool_call_id"])
            origin = (result or {}).get("extra", {}).get("read_from", "scope") if result else None
            out.append((call["function_name"], (result or {}).get("content"), origin))
    return out


def test_an_agents_sdk_handoff_is_answered_by_what_the_sdk_sent_the_next_agent(relay_host, tmp_path) -> None:
    agents = need("agents")
    from relay_runtime.integrations import openai_agents
    from tests.test_frameworks_agents import only_our_agents_processor, scripted

    def run() -> None:
        openai_agents.instrument()
        try:
            expert = agents.Agent(name="expert", model="gpt-test")
            triage = agents.Agent(name="triage", model="gpt-test", handoffs=[expert])
            handoff = {"call_id": "call-h", "name": "transfer_to_expert", "arguments": "{}"}
            scripted(
                t.json_reply(t.responses_body("", function_call=handoff)),
                t.json_reply(t.responses_body("Expert here.")),
            )
            assert agents.Runner.run_sync(triage, "Help").final_output == "Expert here."
        finally:
            openai_agents.uninstrument()

    with only_our_agents_processor():
        got = trajectory(relay_host, tmp_path, run)
    assert answers(got) == [("transfer_to_expert", json.dumps({"assistant": "expert"}), "request")]
    assert [s["source"] for s in got["steps"]] == ["user", "agent", "agent"]


def _openai_loop() -> None:
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body(None, finish_reason="tool_calls", tool_calls=[
            {"id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
            {"id": "c2", "name": "weather", "arguments": '{"city": "Rome"}'}])),
        t.json_reply(t.chat_completion_body("Sunny in both.")),
    )  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    adapters.instrument()
    first = scripted.client.chat.completions.create(model="gpt-test", messages=messages)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": "c1", "content": "sunny in Paris"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "sunny in Rome"}]},
        {"role": "tool", "tool_call_id": "c9", "content": "an answer to nothing asked"},
    ]
    scripted.client.chat.completions.create(model="gpt-test", messages=messages)


def _openai_legacy_functions_loop() -> None:
    # The chat API's function calling before tools: the answer's ``function_call`` (no id), the result a
    # ``function`` message naming the function.
    body = t.chat_completion_body(None, finish_reason="function_call")
    body["choices"][0]["message"]["function_call"] = {"name": "weather", "arguments": '{"city": "Paris"}'}
    scripted = t.scripted_openai(t.json_reply(body), t.json_reply(t.chat_completion_body("Sunny.")))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    functions = [{"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    adapters.instrument()
    first = scripted.client.chat.completions.create(model="gpt-test", messages=messages, functions=functions)
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "function", "name": "weather", "content": "sunny in Paris"})
    messages.append({"role": "function", "name": "forecast", "content": "an answer to nothing asked"})
    scripted.client.chat.completions.create(model="gpt-test", messages=messages, functions=functions)


def _responses_loop() -> None:
    call = {"call_id": "call-1", "name": "weather", "arguments": '{"city": "Paris"}'}
    scripted = t.scripted_openai(
        t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Sunny."))
    )
    adapters.instrument()
    first = scripted.client.responses.create(model="gpt-test", input="Weather in Paris?")
    said = [item.model_dump(exclude_none=True) for item in first.output]
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}, *said]
    items.append({"type": "function_call_output", "call_id": "call-1", "output": "sunny in Paris"})
    scripted.client.responses.create(model="gpt-test", input=items)


def _responses_custom_tool_loop() -> None:
    # A custom (freeform) tool: the model's call carries text (``input``), its result goes back as a
    # ``custom_tool_call_output`` item.
    body = t.responses_body("")
    body["output"].append({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call-1", "name": "weather",
                           "input": "Paris", "status": "completed"})  # fmt: skip
    scripted = t.scripted_openai(t.json_reply(body), t.json_reply(t.responses_body("Sunny.")))
    adapters.instrument()
    first = scripted.client.responses.create(model="gpt-test", input="Weather in Paris?")
    said = [item.model_dump(exclude_none=True) for item in first.output]
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}, *said]
    items.append({"type": "custom_tool_call_output", "call_id": "call-1", "output": "sunny in Paris"})
    items.append({"type": "custom_tool_call_output", "call_id": "c9", "output": "an answer to nothing asked"})
    scripted.client.responses.create(model="gpt-test", input=items)


def _anthropic_loop() -> None:
    use = {"id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    scripted = t.scripted_anthropic(
        t.json_reply(t.anthropic_message_body("Let me look.", tool_use=use, stop_reason="tool_use")),
        t.json_reply(t.anthropic_message_body("Sunny.")),
    )
    adapters.instrument()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    first = scripted.client.messages.create(model="claude-test", max_tokens=64, messages=messages)
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    messages.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny in Paris"}],
                }
            ],
        }
    )
    scripted.client.messages.create(model="claude-test", max_tokens=64, messages=messages)


def _gemini_loop() -> None:
    from tests.genai_support import gemini_client, response_body

    need("google.genai")
    # Not the test key's "gemini-test-": the journal blanks any run of 8 characters of a client's key.
    model = "gemini-2.5-flash"
    script = t.Script([
        t.json_reply(response_body(None, calls=[{"name": "weather", "args": {"city": "Paris"}}], model=model)),
        t.json_reply(response_body("Sunny.", model=model)),
    ])  # fmt: skip
    client = gemini_client(script)
    adapters.instrument()
    asked = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
    first = client.models.generate_content(model=model, contents=[asked])
    said = first.candidates[0].content.model_dump(exclude_none=True)
    # Gemini's function response names its function and carries no id here: the name says which call it answers.
    answer = {"role": "user", "parts": [{"function_response": {"name": "weather", "response": {"sky": "sunny"}}}]}
    client.models.generate_content(model=model, contents=[asked, said, answer])


def _bedrock_loop() -> None:
    need("boto3")
    from tests.bedrock_support import MODEL, BedrockServer, converse_body, json_reply

    server = BedrockServer()
    call = {"toolUseId": "t1", "name": "weather", "input": {"city": "Paris"}}
    server.replies += [json_reply(converse_body("Let me look.", stop="tool_use", tool=call)),
                       json_reply(converse_body("Sunny."))]  # fmt: skip
    client = adapters.instrument(server.client())
    try:
        asked = {"role": "user", "content": [{"text": "Weather in Paris?"}]}
        first = client.converse(modelId=MODEL, messages=[asked])
        # A result for a call no step made (t9) answers nothing: it must invent no observation.
        results = [
            {"toolResult": {"toolUseId": "t1", "content": [{"json": {"sky": "sunny"}}]}},
            {"toolResult": {"toolUseId": "t9", "content": [{"text": "an answer to nothing asked"}]}},
        ]
        answered = {"role": "user", "content": results}
        client.converse(modelId=MODEL, messages=[asked, first["output"]["message"], answered])
    finally:
        server.close()


@pytest.mark.parametrize(
    ("loop", "expected"),
    [
        (_openai_loop, [("weather", "sunny in Paris", "request"), ("weather", "sunny in Rome", "request")]),
        (_openai_legacy_functions_loop, [("weather", "sunny in Paris", "request")]),
        (_responses_loop, [("weather", "sunny in Paris", "request")]),
        (_anthropic_loop, [("weather", "sunny in Paris", "request")]),
        (_responses_custom_tool_loop, [("weather", "sunny in Paris", "request")]),
        (_gemini_loop, [("weather", json.dumps({"sky": "sunny"}), "request")]),
        (_bedrock_loop, [("weather", json.dumps({"sky": "sunny"}), "request")]),
    ],
    ids=[
        "openai-chat",
        "openai-chat-functions",
        "openai-responses",
        "anthropic",
        "openai-responses-custom-tool",
        "gemini",
        "bedrock-converse",
    ],
)
def test_tools_a_loop_runs_in_plain_code_are_answered_by_the_next_request(
    relay_host, tmp_path, loop: Callable[[], None], expected: list[Any]
) -> None:
    got = trajectory(relay_host, tmp_path, loop)
    assert answers(got) == expected
    # The result for a call no step made (c9) is no observation, and no step of its own.
    assert "an answer to nothing asked" not in json.dumps(got)


def test_a_tool_with_its_own_scope_answers_its_call_once(relay_host, tmp_path) -> None:
    agents = need("agents")
    from relay_runtime.integrations import openai_agents
    from tests.test_frameworks_agents import helper, only_our_agents_processor, scripted, tool_then_answer

    def run() -> None:
        openai_agents.instrument()
        try:
            scripted(*tool_then_answer())
            assert agents.Runner.run_sync(helper(), "Weather in Paris?").final_output == "Done."
        finally:
            openai_agents.uninstrument()

    with only_our_agents_processor():
        got = trajectory(relay_host, tmp_path, run)
    assert answers(got) == [("weather", "sunny in Paris", "scope")]
    (step,) = [s for s in got["steps"] if s.get("tool_calls")]
    assert len(step["observation"]["results"]) == 1


def test_a_result_read_from_the_request_is_as_redacted_as_the_request(relay_host, tmp_path) -> None:
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    call = {"id": "c1", "name": "lookup", "arguments": "{}"}
    scripted = t.scripted_openai(
        t.json_reply(t.chat_completion_body(None, finish_reason="tool_calls", tool_calls=[call])),
        t.json_reply(t.chat_completion_body("Found them.")),
    )

    def run() -> None:
        adapters.instrument()
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Who owns the account?"}]
        first = scripted.client.chat.completions.create(model="gpt-test", messages=messages)
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": "c1", "content": "owner: jane.doe@example.com"})
        scripted.client.chat.completions.create(model="gpt-test", messages=messages)

    got = trajectory(relay_host, tmp_path, run)
    ((name, content, origin),) = answers(got)
    assert (name, origin) == ("lookup", "request")
    assert content is not None and content.startswith("owner: ")
    assert "jane.doe@example.com" not in json.dumps(got)
    # The provider got the address: the policy redacts records, not what is sent.
    assert "jane.doe@example.com" in json.dumps(scripted.script.bodies()[1])


def test_a_bedrock_converse_trajectory_has_the_users_words(relay_host, tmp_path) -> None:
    # Converse's text blocks say what they are by their key (``{"text": ...}``), with no type: the user's
    # message was read as holding no text, and the agent acted with nobody having asked it anything.
    got = trajectory(relay_host, tmp_path, _bedrock_loop)
    assert [(s["source"], s.get("message")) for s in got["steps"]] == [
        ("user", "Weather in Paris?"), ("agent", "Let me look."), ("agent", "Sunny.")
    ]  # fmt: skip


def test_a_gemini_prompt_given_as_parts_is_the_users_step(relay_host, tmp_path) -> None:
    # ``contents=[Part(text=...)]``: no message, but the SDK sends the part as the user's; the trajectory had the
    # agent answer nobody.
    need("google.genai")
    from google.genai import types

    from tests.genai_support import gemini_client, response_body

    def run() -> None:
        client = gemini_client(t.Script([t.json_reply(response_body("Sunny.", model="gemini-2.5-flash"))]))
        adapters.instrument()
        client.models.generate_content(model="gemini-2.5-flash", contents=[types.Part(text="Weather in Oslo?")])

    got = trajectory(relay_host, tmp_path, run)
    steps = [(s["source"], s.get("message")) for s in got["steps"]]
    assert steps == [("user", "Weather in Oslo?"), ("agent", "Sunny.")]
