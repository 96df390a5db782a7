# ruff: noqa: F811 - the atif fixture imported from test_trajectory_frameworks is a parameter of the tests below
"""A LangChain answer given as content blocks (Anthropic's, OpenAI's Responses API, LangChain's own standard
blocks) is recorded with its text and reasoning, under ``RelayMiddleware`` and under the callback handler alone.

The answer's text was read only from a string content: an answer in blocks recorded no text (the trajectory's
agent step said nothing, a rule on ``/response/text`` found nothing to act on and the answer stayed whole in
the recorded answer object), and under the callback handler the attempt's end held no answer object, so its
reasoning was not in the trajectory either. A real chat model, real agents, the ATIF exporter live.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import session
from relay_runtime.recorder import Recorder
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.framework_support import need

need("langchain.agents")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402

from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware  # noqa: E402
from tests.test_frameworks_langchain import agents_mod, run  # noqa: E402
from tests.test_trajectory_frameworks import atif  # noqa: E402, F401

THOUGHT = "The user wants the capital of France."
ANSWERS: dict[str, list[Any]] = {
    "anthropic": [
        {"type": "thinking", "thinking": THOUGHT, "signature": "c2lnbmF0dXJl"},
        {"type": "text", "text": "Paris"},
        {"type": "text", "text": ", on the Seine."},
    ],
    "langchain-standard": [
        {"type": "reasoning", "reasoning": THOUGHT},
        "Paris",
        {"type": "text", "text": ", on the Seine."},
    ],
    "openai-responses": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": THOUGHT, "index": 0}]},
        {"type": "text", "text": "Paris, on the Seine.", "annotations": []},
    ],
}
ANSWER = "Paris, on the Seine."


def ask(how: str, content: list[Any]) -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage(content=content)])
    if how == "middleware":
        run(agents_mod.create_agent(model, [], middleware=[RelayMiddleware()]), "Capital of France?")
    else:
        model.invoke([HumanMessage("Capital of France?")], config={"callbacks": [RelayCallbackHandler()]})


@pytest.mark.parametrize("shape", list(ANSWERS))
@pytest.mark.parametrize("how", ["middleware", "callback-handler"])
def test_an_answer_in_content_blocks_is_recorded_with_its_text_and_reasoning(
    atif: Any, relay_turn: Any, relay_events: Recorder, how: str, shape: str
) -> None:
    ask(how, ANSWERS[shape])
    (attempt,) = [e for e in relay_events.ends() if e.scope_type == "llm"]
    assert attempt.annotated_response.output_text == ANSWER
    agent = atif.export()["steps"][-1]
    assert (agent["source"], agent["message"], agent.get("reasoning_content")) == ("agent", ANSWER, THOUGHT)


@pytest.mark.parametrize("how", ["middleware", "callback-handler"])
def test_a_rule_on_the_answers_text_acts_on_an_answer_in_blocks(
    relay_host: session.Host, relay_turn: Any, relay_events: Recorder, how: str
) -> None:
    relay_host.relay.redaction.use(RedactionPolicy([Rule("redact", paths=["/response/text"])]))
    try:
        ask(how, ANSWERS["anthropic"])
    finally:
        relay_host.relay.redaction.use(None)
    (attempt,) = [e for e in relay_events.ends() if e.scope_type == "llm"]
    assert attempt.annotated_response.output_text == "[REDACTED]"
    assert "Seine" not in repr(attempt.output) and "Seine" not in repr(attempt.to_dict())


def test_a_messages_tool_calls_and_call_id_are_read_wherever_its_class_keeps_them() -> None:
    """``message_view`` reads ``tool_calls`` and ``tool_call_id`` from a message's fields, its extra fields (LangChain's
    messages take any keyword) or a property of its class, and finds none on a message that has neither, without
    asking pydantic for a missing attribute."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from relay_runtime.integrations.langchain.codec import message_view

    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "c1", "type": "tool_call"}

    class Relayed(HumanMessage):
        @property
        def tool_call_id(self) -> str:
            return "from-a-property"

    assert message_view(HumanMessage(content="hi")) == {"role": "user", "content": "hi"}
    assert message_view(AIMessage(content="", tool_calls=[call], name="bot")) == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}], "name": "bot",
    }  # fmt: skip
    assert message_view(ToolMessage(content="sunny", tool_call_id="c1")) == {
        "role": "tool", "content": "sunny", "tool_call_id": "c1",
    }  # fmt: skip
    assert message_view(HumanMessage(content="hi", tool_call_id="as-an-extra")) == {
        "role": "user", "content": "hi", "tool_call_id": "as-an-extra",
    }  # fmt: skip
    assert message_view(Relayed(content="hi")) == {"role": "user", "content": "hi", "tool_call_id": "from-a-property"}


def test_plain_reads_a_message_the_same_whether_its_class_was_met_before_or_not() -> None:
    """``plain`` views a message of a class it has met before without asking ``isinstance`` again: the same view as
    the first time (fields, extra fields, a property of its class), and a message past the depth limit is still only
    named."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from relay_runtime.integrations.langchain.codec import plain

    class Met(ToolMessage):
        @property
        def tool_calls(self) -> list[dict[str, object]]:
            return [{"id": "c2", "name": "lookup", "args": {"q": "x"}}]

    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "c1", "type": "tool_call"}
    state = {
        "messages": [
            HumanMessage(content="hi", tool_call_id="as-an-extra"),
            AIMessage(content="", tool_calls=[call], name="bot"),
            Met(content="sunny", tool_call_id="c1"),
        ]
    }
    expected = {
        "messages": [
            {"role": "user", "content": "hi", "tool_call_id": "as-an-extra"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}], "name": "bot"},
            {"role": "tool", "content": "sunny", "tool_call_id": "c1",
             "tool_calls": [{"id": "c2", "name": "lookup", "arguments": {"q": "x"}}]},
        ]
    }  # fmt: skip
    assert plain(state) == expected  # the classes met for the first time (or not: other tests may have met them)
    assert plain(state) == expected  # known now
    built = AIMessage.model_construct(content="unvalidated", name="bot")  # its fields set without validation
    assert plain(built) == {"role": "assistant", "content": "unvalidated", "name": "bot"}
    deep: object = HumanMessage(content="deep")
    for _ in range(8):
        deep = [deep]
    assert plain(deep) == [[[[[[[["'HumanMessage'"]]]]]]]]
