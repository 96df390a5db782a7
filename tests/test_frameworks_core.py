"""The core's two hooks for framework integrations: a logical call opened under a framework's scope,
and completions joined to it as its attempts."""

from __future__ import annotations

import pytest

from relay_runtime import adapters, auxiliary, calls
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t


def test_open_logical_call_needs_a_managed_turn(relay_home) -> None:
    assert calls.open_logical_call() is None


def test_joined_completions_are_attempts_of_the_call_under_the_parent(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    client = t.scripted_openai(t.error(500), t.json_reply(t.chat_completion_body("ok")), max_retries=0).client
    with relay.scope.scope("agent", "agent") as agent:
        api_request_id = calls.open_logical_call(agent, call_role="agent:helper")
        assert api_request_id is not None
        token = auxiliary.join_logical_call(api_request_id, "agent:helper")
        try:
            with pytest.raises(Exception, match=r"500|scripted failure"):
                adapters.complete(client, {"model": "gpt-test", "messages": []})
        finally:
            auxiliary.leave_logical_call(token)
        # A later join (the framework's retry, from another step) numbers on from the call's attempts.
        token = auxiliary.join_logical_call(api_request_id, "agent:helper", attempts=1)
        try:
            adapters.complete(client, {"model": "gpt-test", "messages": []})
        finally:
            auxiliary.leave_logical_call(token)
        assert calls.complete_logical_call(api_request_id, outcome="success")
    (call,) = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    first, second = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert call.parent_uuid == agent.uuid
    assert (call.outcome, call.metadata[cv.CALL_ROLE]) == ("success", "agent:helper")
    assert [first.metadata[cv.RETRY_COUNT], second.metadata[cv.RETRY_COUNT]] == [0, 1]
    assert {first.parent_uuid, second.parent_uuid} == {call.uuid}
    assert (first.outcome, second.outcome) == ("failed", "success")


def test_a_completion_after_leaving_is_its_own_call(relay_turn, relay_events) -> None:
    client = t.scripted_openai(t.json_reply(t.chat_completion_body("ok"))).client
    api_request_id = calls.open_logical_call()
    assert api_request_id is not None
    auxiliary.leave_logical_call(auxiliary.join_logical_call(api_request_id))
    adapters.complete(client, {"model": "gpt-test", "messages": []})
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.metadata[cv.API_REQUEST_ID] != api_request_id


def test_join_refuses_an_empty_id() -> None:
    with pytest.raises(ValueError, match="api_request_id"):
        auxiliary.join_logical_call("")


def test_integrations_import_no_framework_until_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import relay_runtime.integrations.langchain, relay_runtime.integrations.langgraph\n"
        "import relay_runtime.integrations.openai_agents\n"
        "print(sorted(m for m in ('langchain', 'langchain_core', 'langgraph', 'agents') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_logical_call_takes_the_model_a_pydantic_response_names(relay_turn, relay_events) -> None:
    """A framework's result class without a ``model`` is remembered as such (a read there raises inside
    pydantic); one that has it as a field, an extra attribute or a property is still read, every time."""
    from pydantic import BaseModel, ConfigDict

    class Result(BaseModel):  # LangChain's ChatResult: no model anywhere
        text: str

    class Field(BaseModel):
        model: str

    class Extra(BaseModel):  # the SDKs' response models: unknown keys kept as attributes
        model_config = ConfigDict(extra="allow")

    class Prop(BaseModel):
        @property
        def model(self) -> str:
            return "m-prop"

    from relay_runtime.types import LLMRequest

    responses = [Result(text="a"), Result(text="b"), Field(model="m-field"), Extra(model="m-extra"), Prop()]
    for response in responses:
        calls.execute_current(
            LLMRequest(None, {"model": "m-asked"}), lambda req, r=response: r, name="p", model_name="m-asked"
        )
    models = [end.output["model"] for end in relay_events.ends(relay_kind=cv.LOGICAL_CALL)]
    assert models == ["m-asked", "m-asked", "m-field", "m-extra", "m-prop"]
    from relay_runtime import response_model

    modelless = response_model._modelless
    assert Result in modelless and not {Field, Extra, Prop} & modelless


def test_a_dict_answer_names_its_model_only_by_a_non_empty_string_under_model() -> None:
    """A stream's folded answer is a plain dict: its model is read from its ``model`` key, as a dict
    subclass's is, and a key holding anything but a non-empty string names no model."""
    from relay_runtime.response_model import response_model

    class Answer(dict):  # type: ignore[type-arg]
        pass

    for make in (dict, Answer):
        assert response_model(make(model="gemini-2.5-flash", text="hi")) == "gemini-2.5-flash"
        assert response_model(make(model="")) is None
        assert response_model(make(model=3)) is None
        assert response_model(make(text="hi")) is None
