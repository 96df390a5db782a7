"""A budget reads a request's prompt and output limit wherever its SDK keeps them: Gemini's ``contents`` and
``config`` (strings or the SDK's own models), Bedrock Converse's ``inferenceConfig`` (real SDK clients)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bedrock_support import MODEL as BEDROCK_MODEL
from bedrock_support import BedrockServer
from genai_support import gemini_client, response_body, usage

from relay_runtime import adapters, cost, session
from relay_runtime.adapters import testing as t
from relay_runtime.cost import Budget, BudgetExceeded, PriceCatalog

PRICES = {"google": {"gemini-test-flash": {"input": 1.0, "output": 2.0}},
          "aws": {BEDROCK_MODEL: {"input": 1.0, "output": 2.0}}}  # fmt: skip
LONG = "x" * 90_000  # 30,000 tokens at the estimate's 3 characters a token: 0.03 at 1.0 per million


def _budgeted(host: session.Host, limit: float) -> None:
    cost.attach(host, PriceCatalog.from_mapping(PRICES), Budget(limit, per="turn"))


def _gemini() -> tuple[t.Script, Any]:
    script = t.Script([t.json_reply(response_body("hi", usage_metadata=usage()))])
    return script, adapters.instrument(gemini_client(script))


def _contents(kind: str) -> Any:
    from google.genai import types

    if kind == "text":
        return LONG
    if kind == "dicts":
        return [{"role": "user", "parts": [{"text": LONG}]}]
    return [types.Content(role="user", parts=[types.Part(text=LONG)])]


@pytest.mark.parametrize("kind", ["text", "dicts", "sdk-models"])
def test_a_long_gemini_prompt_is_refused_before_it_is_sent(relay_host, relay_turn, kind: str) -> None:
    from google.genai import types

    _budgeted(relay_host, 0.02)
    script, client = _gemini()
    with pytest.raises(BudgetExceeded) as caught:
        client.models.generate_content(model="gemini-test-flash", contents=_contents(kind),
                                       config=types.GenerateContentConfig(max_output_tokens=10))  # fmt: skip
    assert script.requests == []
    assert caught.value.estimate > 0.03


def test_a_gemini_system_instruction_counts_in_the_estimate(relay_host, relay_turn) -> None:
    _budgeted(relay_host, 0.02)
    script, client = _gemini()
    with pytest.raises(BudgetExceeded):
        client.models.generate_content(model="gemini-test-flash", contents="hi",
                                       config={"system_instruction": LONG, "max_output_tokens": 10})  # fmt: skip
    assert script.requests == []


def test_the_output_limit_in_a_gemini_config_bounds_the_estimate(relay_host, relay_turn) -> None:
    # 30,000 output tokens at 2.0 per million: 0.06 at worst, over the 0.05 limit (4096 assumed: 0.008).
    _budgeted(relay_host, 0.05)
    script, client = _gemini()
    with pytest.raises(BudgetExceeded) as caught:
        client.models.generate_content(model="gemini-test-flash", contents="hi",
                                       config={"max_output_tokens": 30_000})  # fmt: skip
    assert script.requests == []
    assert caught.value.estimate == pytest.approx(0.06, abs=1e-5)
    assert "cost.assumed_output_tokens" not in relay_host.relay.diagnostics()


@pytest.fixture()
def bedrock() -> Iterator[Any]:
    server = BedrockServer()
    client = adapters.instrument(server.client())
    yield server, client
    adapters.uninstrument(client)
    server.close()


def test_the_output_limit_in_a_converse_inference_config_bounds_the_estimate(relay_host, relay_turn, bedrock) -> None:
    server, client = bedrock
    _budgeted(relay_host, 0.05)
    with pytest.raises(BudgetExceeded) as caught:
        client.converse(modelId=BEDROCK_MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}],
                        inferenceConfig={"maxTokens": 30_000})  # fmt: skip
    assert server.seen == []
    assert caught.value.estimate == pytest.approx(0.06, abs=1e-5)
