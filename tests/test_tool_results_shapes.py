"""A tool's result carried back in each provider's fuller shapes holds no credential in any record.

``test_tool_results_secrets`` covers each API's plainest result (a text, text parts, top-level data); these are
the shapes beside it that the credential reading of a request's tool results did not reach: data nesting the
text (Converse's ``json``, Gemini's ``response``, a LangChain artifact), nested blocks (Anthropic's search
results and documents, Converse's documents), bare texts in a LangChain content list, and the Responses
items and chat messages other than ``function_call_output`` and ``tool`` that carry a result back.
Real SDK clients over the scripted transports, every sink attached (``Sinks``).
"""

from __future__ import annotations

from typing import Any

from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from tests.test_frameworks_records_secrets import API_KEY, Account, Sinks, assert_nowhere
from tests.test_tool_results_secrets import converse_sending_back

RESULT = str(Account(user="ada", api_key=API_KEY))  # what an SDK sends back of such a tool's result
ASK = {"role": "user", "content": "Open an account for ada"}


def test_results_given_as_nested_data_record_no_credential(relay_turn: Any, relay_events: Any, tmp_path: Any) -> None:
    """A Converse ``json`` result and a Gemini ``response`` whose text sits deeper than their top level (a
    tool's output object, a list of lines): only their top-level strings were read, the rest recorded whole."""
    from genai_support import gemini_client, response_body
    from google.genai import types

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    nested = {"output": {"log": RESULT}, "lines": [RESULT]}
    converse_sending_back([{"json": nested}])
    script = t.Script([t.json_reply(response_body("Opened.")), t.json_reply(response_body("Opened."))])
    gemini = adapters.instrument(gemini_client(script))
    call = {"role": "model", "parts": [{"function_call": {"name": "open_account", "args": {"user": "ada"}}}]}
    gemini.models.generate_content(
        model="gemini-test-flash",
        contents=[{"role": "user", "parts": [{"text": "Open one"}]}, call,
                  {"role": "user", "parts": [{"functionResponse": {"name": "open_account", "response": nested}}]}],
    )  # fmt: skip
    answer = types.FunctionResponse(name="open_account", response=nested)
    gemini.models.generate_content(
        model="gemini-test-flash",
        contents=[types.Content(role="user", parts=[types.Part(function_response=answer)])],
    )
    assert all(API_KEY in r.content.decode() for r in script.requests)
    texts = sinks.texts()
    assert "api_key=" in texts["events"]  # the rest of the result is there
    assert_nowhere(texts, API_KEY)


def test_results_given_as_nested_blocks_or_bare_texts_record_no_credential(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """Anthropic's ``tool_result`` holding a search result (its own text blocks) or a plain-text document (its text
    in its source), Converse's ``toolResult`` holding a document or a search result, and a LangChain
    ``ToolMessage`` whose content list holds bare texts: only a part's own ``text`` was read."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from relay_runtime.integrations.langchain import RelayCallbackHandler
    from tests.test_frameworks_langchain import chat_model

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.anthropic_message_body("Opened.")), t.json_reply(t.chat_completion_body("Ok"))])
    found = {"type": "search_result", "source": "https://accounts.example", "title": "ada",
             "content": [{"type": "text", "text": RESULT}]}  # fmt: skip
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": RESULT}}
    adapters.instrument(t.anthropic_client(script)).messages.create(
        model="claude-test",
        max_tokens=16,
        messages=[ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "tu-1", "name": "open_account",
                                                          "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu-1",
                                                "content": [found, document]}]}],
    )  # fmt: skip
    converse_document = {"document": {"name": "account", "format": "txt", "source": {"text": RESULT}}}
    searched = {"searchResult": {"source": "accounts", "title": "ada", "content": [{"text": RESULT}]}}
    converse_sending_back([converse_document, searched])
    call = {"name": "open_account", "args": {"user": "ada"}, "id": "c-1", "type": "tool_call"}
    chat_model(script).invoke(
        [HumanMessage("Open one"), AIMessage("", tool_calls=[call]), ToolMessage(content=[RESULT], tool_call_id="c-1")],
        config={"callbacks": [RelayCallbackHandler()]},
    )
    assert all(API_KEY in r.content.decode() for r in script.requests)
    assert "open_account" in sinks.texts()["events"]
    assert_nowhere(sinks.texts(), API_KEY)


def test_responses_other_tool_outputs_and_a_chat_function_message_record_no_credential(
    relay_turn: Any, relay_events: Any, tmp_path: Any
) -> None:
    """Responses carries back a custom tool's, a shell's and a patch's output as items of their own type, and
    chat's older function calling a result as a ``function`` message: only ``function_call_output`` items and
    ``tool`` messages were read, the others recorded whole."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.responses_body("Opened.")), t.json_reply(t.chat_completion_body("Opened."))])
    client = adapters.instrument(t.openai_client(script))
    client.responses.create(
        model="gpt-test",
        input=[ASK,
               {"type": "custom_tool_call", "call_id": "c-1", "name": "open_account", "input": "ada"},
               {"type": "custom_tool_call_output", "call_id": "c-1", "output": RESULT},
               {"type": "shell_call_output", "call_id": "c-2",
                "output": [{"stdout": RESULT, "stderr": RESULT, "outcome": {"type": "exit", "exit_code": 0}}]},
               {"type": "local_shell_call_output", "id": "c-3", "output": RESULT},
               {"type": "apply_patch_call_output", "call_id": "c-4", "status": "failed", "output": RESULT}],
    )  # fmt: skip
    client.chat.completions.create(
        model="gpt-test",
        messages=[ASK, {"role": "assistant", "content": None,
                        "function_call": {"name": "open_account", "arguments": "{}"}},
                  {"role": "function", "name": "open_account", "content": RESULT}],
    )  # fmt: skip
    assert all(API_KEY in r.content.decode() for r in script.requests)
    texts = sinks.texts()
    assert "api_key=" in texts["events"]
    assert_nowhere(texts, API_KEY)
