"""The annotated request is provider-neutral: intercepts edit neutral params, each codec spells
them its API's way, and a param an API cannot take is refused before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import AnnotatedLLMRequest, LLMRequest, LLMRequestInterceptOutcome, adapters, neutral
from relay_runtime import conventions as cv
from relay_runtime.adapters import dispatch
from relay_runtime.adapters import testing as t

# The ``oa`` / ``an`` fixtures: scripted OpenAI and Anthropic clients.
pytest_plugins = ["adapters_support"]


def _editing(relay: Any, edit: Any) -> Any:
    def intercept(_name: str, request: LLMRequest, annotated: AnnotatedLLMRequest) -> LLMRequestInterceptOutcome:
        edit(annotated)
        return LLMRequestInterceptOutcome(request, annotated)

    relay.intercepts.register_llm_request("neutral-edit", 1, False, intercept)
    return intercept


@pytest.fixture()
def edit(relay_turn) -> Iterator[Any]:
    relay, _turn = relay_turn
    edits: list[Any] = []
    _editing(relay, lambda annotated: [e(annotated) for e in edits])
    yield edits.append
    relay.intercepts.deregister_llm_request("neutral-edit")


# (api mode, scripted fixture name, kwargs, reply, the SDK key max_tokens becomes)
CASES = {
    "chat": (
        dispatch.CHAT_COMPLETIONS,
        "oa",
        {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 9},
        lambda: t.json_reply(t.chat_completion_body()),
        "max_completion_tokens",
    ),
    "responses": (
        dispatch.RESPONSES,
        "oa",
        {"model": "m", "input": "q", "max_output_tokens": 9},
        lambda: t.json_reply(t.responses_body()),
        "max_output_tokens",
    ),
    "anthropic": (
        dispatch.ANTHROPIC_MESSAGES,
        "an",
        {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 9},
        lambda: t.json_reply(t.anthropic_message_body()),
        "max_tokens",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_max_tokens_is_neutral_in_the_view_and_spelled_per_api_on_the_wire(
    case: str, request, relay_turn, relay_events, edit
) -> None:
    mode, fixture, kwargs, reply, sdk_key = CASES[case]
    scripted = request.getfixturevalue(fixture)
    seen: list[dict[str, Any]] = []
    edit(lambda a: seen.append(dict(a.params)))
    edit(lambda a: a.params.__setitem__("max_tokens", 321))
    scripted.add(reply())
    adapters.complete(scripted.client, kwargs, api_mode=mode)
    assert seen == [{"max_tokens": 9}]
    body = scripted.script.bodies()[0]
    assert body[sdk_key] == 321
    assert {"max_tokens", "max_completion_tokens", "max_output_tokens"} & set(body) == {sdk_key}
    start = relay_events.starts(relay_kind=cv.ATTEMPT)[0]
    assert start.annotated_request.params == {"max_tokens": 321}


def test_readme_temperature_example_reaches_both_openai_apis(relay_turn, edit, oa) -> None:
    edit(lambda a: a.params.__setitem__("temperature", 0.2))
    oa.add(t.json_reply(t.chat_completion_body()), t.json_reply(t.responses_body()))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    adapters.complete(oa.client, {"model": "m", "input": "q"}, api_mode=dispatch.RESPONSES)
    assert [b["temperature"] for b in oa.script.bodies()] == [0.2, 0.2]


def test_readme_example_as_documented_runs_on_all_three_apis(relay_turn, edit, oa, an) -> None:
    def lower_temperature(annotated: AnnotatedLLMRequest) -> None:
        if annotated.accepts("temperature"):  # Anthropic 2.x takes no sampling parameters
            annotated.params["temperature"] = 0.2
        annotated.params["max_tokens"] = 100

    edit(lower_temperature)
    oa.add(t.json_reply(t.chat_completion_body()), t.json_reply(t.responses_body()))
    an.add(t.json_reply(t.anthropic_message_body("ok")))
    adapters.complete(oa.client, {"model": "m", "messages": []})
    adapters.complete(oa.client, {"model": "m", "input": "q"}, api_mode=dispatch.RESPONSES)
    message = adapters.complete(an.client, {"model": "m", "max_tokens": 5, "messages": []})
    assert message.content[0].text == "ok"
    chat, responses = oa.script.bodies()
    assert chat["temperature"] == responses["temperature"] == 0.2
    assert chat["max_completion_tokens"] == responses["max_output_tokens"] == 100
    assert an.script.bodies() == [{"model": "m", "max_tokens": 100, "messages": []}]


def test_a_param_the_api_cannot_take_is_named_and_nothing_is_sent(relay_turn, relay_events, edit, an) -> None:
    edit(lambda a: a.params.__setitem__("temperature", 0.2))
    with pytest.raises(neutral.UnsupportedParamError, match=r"Anthropic messages API has no 'temperature'") as caught:
        adapters.complete(an.client, {"model": "m", "max_tokens": 5, "messages": []})
    assert (caught.value.param, caught.value.api) == ("temperature", "Anthropic messages")
    assert an.script.requests == []
    attempt = relay_events.ends(relay_kind=cv.ATTEMPT)[0]
    assert attempt.outcome == "failed" and attempt.error_type == "UnsupportedParamError"


@pytest.mark.parametrize(
    ("mode", "param", "api"),
    [(dispatch.RESPONSES, "stop", "OpenAI responses"), (dispatch.RESPONSES, "seed", "OpenAI responses"),
     (dispatch.CHAT_COMPLETIONS, "top_k", "OpenAI chat completions")],
)  # fmt: skip
def test_unsupported_openai_params_are_refused_before_sending(relay_turn, edit, oa, mode, param, api) -> None:
    edit(lambda a: a.params.__setitem__(param, 1))
    kwargs = {"model": "m", "input": "q"} if mode == dispatch.RESPONSES else {"model": "m", "messages": []}
    with pytest.raises(neutral.UnsupportedParamError, match=f"{api} API has no {param!r}"):
        adapters.complete(oa.client, kwargs, api_mode=mode)
    assert oa.script.requests == []


def test_stop_becomes_stop_sequences_for_anthropic(relay_turn, edit, an) -> None:
    seen: list[Any] = []
    edit(lambda a: seen.append(a.params.get("stop")))
    edit(lambda a: a.params.__setitem__("stop", "END"))
    an.add(t.json_reply(t.anthropic_message_body()))
    adapters.complete(an.client, {"model": "m", "max_tokens": 5, "messages": [], "stop_sequences": ["x"]})
    assert seen == [["x"]]  # read back under the neutral name
    body = an.script.bodies()[0]
    assert body["stop_sequences"] == ["END"] and "stop" not in body


def test_legacy_chat_max_tokens_is_replaced_not_doubled(relay_turn, edit, oa) -> None:
    edit(lambda a: a.params.__setitem__("max_tokens", 7))
    oa.add(t.json_reply(t.chat_completion_body()))
    adapters.complete(oa.client, {"model": "m", "messages": [], "max_tokens": 50})
    body = oa.script.bodies()[0]
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body


def test_sdk_specific_arguments_are_provider_params_under_the_sdk_name(relay_turn, edit, oa, an) -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    edit(lambda a: seen.append((dict(a.params), dict(a.provider_params))))
    edit(lambda a: a.provider_params.__setitem__("metadata", {"user_id": "u-1"}))
    an.add(t.json_reply(t.anthropic_message_body()))
    thinking = {"type": "enabled", "budget_tokens": 50}
    adapters.complete(an.client, {"model": "m", "max_tokens": 5, "messages": [], "thinking": thinking})
    assert seen == [({"max_tokens": 5}, {"thinking": thinking})]
    body = an.script.bodies()[0]
    assert body["thinking"] == thinking and body["metadata"] == {"user_id": "u-1"}


def test_unknown_neutral_name_and_neutral_name_in_provider_params_are_clear_errors(relay_turn, edit, oa) -> None:
    edit(lambda a: a.params.__setitem__("response_format", {"type": "json_object"}))
    with pytest.raises(ValueError, match=r"'response_format' is not a neutral param.*provider_params"):
        adapters.complete(oa.client, {"model": "m", "messages": []})
    assert oa.script.requests == []


def test_provider_params_may_not_smuggle_a_neutral_param() -> None:
    codec = dispatch.APIS[dispatch.CHAT_COMPLETIONS].codec
    with pytest.raises(ValueError, match=r"spelling of the neutral param 'max_tokens'"):
        codec.apply({"model": "m", "messages": []}, {"provider_params": {"max_completion_tokens": 3}})


def test_every_spelling_maps_only_neutral_names() -> None:
    for (provider, operation), spelling in neutral.SPELLINGS.items():
        assert set(spelling.names) <= set(neutral.NEUTRAL_PARAMS), (provider, operation)
        for name in spelling.names:
            assert neutral.accepts(provider, operation, name)
    assert not neutral.accepts("anthropic", "chat", "temperature")
    assert neutral.accepts("some-custom", "chat", "temperature")
    assert not neutral.accepts("openai", "chat", "not-a-param")
