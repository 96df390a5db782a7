"""An agent test that runs offline on a committed cassette (``cassettes/test_weather_agent/weather.json``).

    pytest examples/test_weather_agent.py                      # replays: no key, no network
    OPENAI_API_KEY=sk-... pytest examples/test_weather_agent.py --relay-record=all   # records afresh

The agent asks the model, runs the tool the model calls, and asks again with the
result: two LLM calls, replayed as the SDK's own ``ChatCompletion`` objects inside a
managed turn, so the test can check what the relay recorded as well as the answer.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
import pytest

from relay_runtime import adapters
from relay_runtime import conventions as cv

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temperature_c": 18, "sky": "clear"}


def weather_agent(client: Any, question: str) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer in one sentence. Use the tool for weather."},
        {"role": "user", "content": question},
    ]
    for _ in range(4):
        reply = adapters.complete(client, {"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS})
        message = reply.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = get_weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise RuntimeError("the agent did not finish")


@pytest.mark.relay_cassette("weather")
def test_the_agent_answers_with_the_tool_result(relay_turn, relay_events) -> None:
    client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "sk-replay-needs-no-key"))
    answer = weather_agent(client, "What's the weather in Paris?")
    assert "18" in answer and "Paris" in answer
    attempts = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [a.outcome for a in attempts] == ["success", "success"]
    assert attempts[0].annotated_response.tool_calls[0]["name"] == "get_weather"
