"""@auxiliary_call on the function shapes it cannot make one logical call of."""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import adapters
from relay_runtime.adapters.testing import chat_completion_body, json_reply
from relay_runtime.auxiliary import auxiliary_call, set_route


def test_a_generator_function_is_refused_when_decorated(relay_turn, relay_events, scripted_openai) -> None:
    """Its body would run after the wrapper returned: its calls would be recorded outside any logical call."""
    scripted_openai.add(json_reply(chat_completion_body("ok")))

    def summarise(task: str) -> Any:
        set_route("openai", "gpt-x", "chat_completions")
        yield adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": []})

    async def asummarise(task: str) -> Any:
        yield None

    for fn in (summarise, asummarise):
        with pytest.raises(TypeError, match=f"@auxiliary_call cannot decorate '{fn.__name__}': a generator"):
            auxiliary_call(fn)
    assert relay_events.starts(relay_kind="logical_llm_call") == []

    @auxiliary_call
    def plain(task: str) -> Any:  # the shapes it takes still work
        set_route("openai", "gpt-x", "chat_completions")
        return adapters.complete(scripted_openai.client, {"model": "gpt-x", "messages": []})

    plain("summary")
    (call,) = relay_events.ends(relay_kind="logical_llm_call")
    assert call.outcome == "success"
