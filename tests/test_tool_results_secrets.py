"""A tool's result carried back to the model holds no credential in any record of the request.

A tool returning an object with an ``api_key`` has its own output recorded with the key blanked; the
agent then sends ``str(result)`` back to the model in the conversation, which the credential walk leaves
alone. Every record of that next request (its events, JSONL, spans with content on) carried the key.
Real SDK clients over the mock transport (the provider still gets the result as it was), a real Agents
SDK run and a real LangChain agent, every sink attached (``Sinks``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from tests.framework_support import only_our_agents_processor
from tests.test_frameworks_records_secrets import API_KEY, Account, Sinks, assert_nowhere

RESULT = str(Account(user="ada", api_key=API_KEY))  # what an SDK sends back of such a tool's result
ASK = {"role": "user", "content": "Open an account for ada"}


def test_an_openai_chat_tool_message_records_no_credential(relay_turn: Any, relay_events: Any, tmp_path: Any) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.chat_completion_body("Opened."))])
    client = adapters.instrument(t.openai_client(script))
    call = {"id": "call-1", "type": "function", "function": {"name": "open_account", "arguments": "{}"}}
    messages = [ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call-1", "content": RESULT}]  # fmt: skip
    client.chat.completions.create(model="gpt-test", messages=messages)
    assert API_KEY in script.requests[0].content.decode()  # the provider got the result as it was
    assert messages[2]["content"] == RESULT  # and the caller's conversation is left as it is
    texts = sinks.texts()
    assert "api_key=" in texts["events"] and "open_account" in texts["spans"]  # the rest of the result is there
    assert_nowhere(texts, API_KEY)


def test_responses_and_anthropic_tool_results_record_no_credential(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.responses_body("Opened.")), t.json_reply(t.anthropic_message_body("Opened."))])
    adapters.instrument(t.openai_client(script)).responses.create(
        model="gpt-test",
        input=[ASK, {"type": "function_call", "call_id": "c-1", "name": "open_account", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c-1", "output": RESULT}],
    )  # fmt: skip
    adapters.instrument(t.anthropic_client(script)).messages.create(
        model="claude-test",
        max_tokens=16,
        messages=[ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "tu-1", "name": "open_account",
                                                          "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu-1", "content": RESULT},
                                               {"type": "tool_result", "tool_use_id": "tu-1",
                                                "content": [{"type": "text", "text": RESULT}]}]}],
    )  # fmt: skip
    assert all(API_KEY in r.content.decode() for r in script.requests)
    assert_nowhere(sinks.texts(), API_KEY)


def test_an_agents_tool_returning_a_model_with_a_key_is_sent_back_with_none_recorded(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    from relay_runtime.integrations import openai_agents
    from tests.test_frameworks_agents import agents, run, scripted

    @agents.function_tool
    def open_account(user: str) -> Account:
        """Open an account."""
        return Account(user=user, api_key=API_KEY)

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    call = {"call_id": "call-1", "name": "open_account", "arguments": json.dumps({"user": "ada"})}
    with only_our_agents_processor():
        adapters.instrument()
        openai_agents.instrument()
        s = scripted(t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done.")))
        agent = agents.Agent(name="helper", model="gpt-test", tools=[open_account])
        assert run(agent, "Open one").final_output == "Done."
    assert API_KEY in s.script.requests[1].content.decode()
    assert_nowhere(sinks.texts(), API_KEY)


@pytest.mark.parametrize("recorder", ["middleware", "callbacks alone"])
def test_a_langchain_tool_returning_a_model_with_a_key_is_sent_back_with_none_recorded(
    recorder: str, relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """With ``RelayMiddleware``, or with the callbacks alone (the SDK not instrumented: they record the call's
    view from LangChain's own messages)."""
    from tests.test_frameworks_langchain import tools_mod

    @tools_mod.tool
    def open_account(user: str) -> str:
        """Open an account."""
        return str(Account(user=user, api_key=API_KEY))

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script, result = _agent_opens_an_account(open_account, recorder)
    assert result["messages"][-1].content == "Done."
    assert API_KEY in script.requests[1].content.decode()
    assert_nowhere(sinks.texts(), API_KEY)


def test_a_request_with_no_credential_in_its_tool_results_is_the_callers_own_object() -> None:
    from relay_runtime.tool_results import blanked

    kwargs = {"messages": [ASK, {"role": "tool", "tool_call_id": "c", "content": "sunny in Paris"}]}
    assert blanked(kwargs) is kwargs


def converse_sending_back(content: list[Any]) -> None:
    """A Bedrock Converse call (real boto3, loopback server) whose conversation sends ``content`` back as the
    ``toolResult`` of an ``open_account`` call; the provider gets it as given."""
    from bedrock_support import MODEL, BedrockServer

    server = BedrockServer()
    bedrock = adapters.instrument(server.client())
    try:
        use = {"toolUse": {"toolUseId": "t-1", "name": "open_account", "input": {"user": "ada"}}}
        result = {"toolResult": {"toolUseId": "t-1", "content": content}}
        bedrock.converse(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "Open one"}]}, {"role": "assistant", "content": [use]},
                      {"role": "user", "content": [result]}],
        )  # fmt: skip
        assert API_KEY in json.dumps(server.seen[0].body)
    finally:
        adapters.uninstrument(bedrock)
        server.close()


def test_bedrock_converse_and_gemini_tool_results_record_no_credential(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """Converse sends a tool's result as ``toolResult`` blocks (text, or ``json`` data); Gemini as a
    ``function_response`` part whose response is data: a key in the data and one in its text are blanked."""
    from genai_support import gemini_client, response_body

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    converse_sending_back([{"text": RESULT}, {"json": {"api_key": API_KEY}}])
    script = t.Script([t.json_reply(response_body("Opened."))])
    gemini = adapters.instrument(gemini_client(script))
    answer = {"name": "open_account", "response": {"api_key": API_KEY, "summary": RESULT}}
    gemini.models.generate_content(
        model="gemini-test-flash",
        contents=[{"role": "user", "parts": [{"text": "Open one"}]},
                  {"role": "model", "parts": [{"function_call": {"name": "open_account", "args": {"user": "ada"}}}]},
                  {"role": "user", "parts": [{"function_response": answer}]}],
    )  # fmt: skip
    assert API_KEY in script.requests[0].content.decode()
    assert_nowhere(sinks.texts(), API_KEY)


@pytest.mark.parametrize("recorder", ["middleware", "callbacks alone"])
def test_a_langchain_tools_artifact_is_recorded_in_the_next_request_with_its_credentials_blanked(
    recorder: str, relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """A tool answering ``(content, artifact)``: the artifact stays on the ``ToolMessage`` beside what the model
    reads, and is never sent. The tool's own record blanked the key in it; the next request's record carried it."""
    from tests.test_frameworks_langchain import tools_mod

    @tools_mod.tool(response_format="content_and_artifact")
    def open_account(user: str) -> tuple[str, dict[str, Any]]:
        """Open an account."""
        return "opened", {"user": user, "api_key": API_KEY}

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script, result = _agent_opens_an_account(open_account, recorder)
    assert result["messages"][-1].content == "Done."
    assert result["messages"][2].artifact["api_key"] == API_KEY  # the agent's own message is left as it is
    assert API_KEY not in script.requests[1].content.decode()  # the artifact never reaches the model
    texts = sinks.texts()
    assert "artifact" in texts["events"]  # recorded, the rest of it as it was
    assert_nowhere(texts, API_KEY)


def test_gemini_tool_results_given_as_the_sdks_objects_record_no_credential(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """The SDK's ``Content`` / ``Part`` / ``FunctionResponse`` objects, as an agent builds its history with them,
    rather than dicts."""
    from genai_support import gemini_client, response_body
    from google.genai import types

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(response_body("Opened."))])
    gemini = adapters.instrument(gemini_client(script))
    answer = types.FunctionResponse(name="open_account", response={"api_key": API_KEY, "summary": RESULT})
    gemini.models.generate_content(
        model="gemini-test-flash",
        contents=[types.Content(role="user", parts=[types.Part(text="Open one")]),
                  types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
                      name="open_account", args={"user": "ada"}))]),
                  types.Content(role="user", parts=[types.Part(function_response=answer)])],
    )  # fmt: skip
    assert API_KEY in script.requests[0].content.decode()
    assert_nowhere(sinks.texts(), API_KEY)


def test_a_tools_arguments_and_result_given_as_data_have_their_quoted_credentials_blanked_as_text_has(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """A tool called with the model's arguments (``{"note": "password=..."}``) and answering with data quoting a
    key: the model's tool call and the next request's tool message are text, read for keyed values, and recorded
    blanked; the tool's own record (its scope's input and output, the journal's rows, the trajectory) held the
    same values whole, in the strings of its data."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    arguments = {"note": f"password={API_KEY}", "nested": [{"header": f"Authorization: Bearer {API_KEY}"}]}
    result = relay.tools.execute("open_account", arguments, lambda a: {"echo": [f"api_key={API_KEY}"], "n": 1})
    assert result["echo"] == [f"api_key={API_KEY}"]  # the agent gets its result as it was
    (start,) = [e for e in relay_events.starts() if e.scope_type == "tool"]
    (end,) = [e for e in relay_events.ends() if e.scope_type == "tool"]
    assert start.input == {"note": "password=[redacted]", "nested": [{"header": "Authorization: [redacted]"}]}
    assert end.output == {"echo": ["api_key=[redacted]"], "n": 1}
    assert_nowhere(sinks.texts(), API_KEY)


def _agent_opens_an_account(open_account: Any, recorder: str) -> tuple[Any, Any]:
    """A LangChain agent whose model calls ``open_account`` once, then answers "Done.", recorded by
    ``RelayMiddleware`` or by the callbacks alone: the script (what was sent) and the agent's result."""
    from tests.framework_support import tool_call_body
    from tests.test_frameworks_langchain import RelayCallbackHandler, RelayMiddleware, agents_mod, chat_model, run

    script = t.Script([t.json_reply(tool_call_body("open_account", {"user": "ada"})),
                       t.json_reply(t.chat_completion_body("Done."))])  # fmt: skip
    middleware, callbacks = ([RelayMiddleware()], []) if recorder == "middleware" else ([], [RelayCallbackHandler()])
    agent = agents_mod.create_agent(chat_model(script), [open_account], middleware=middleware, name="a")
    return script, run(agent, "Open one", callbacks=callbacks)
