"""An answer's reasoning is in ``gen_ai.output.messages`` as the conventions' ``reasoning`` parts.

The GenAI message schema has a part for it, and the input messages carried earlier answers' thinking blocks
as such; the output messages held the answer's text and tool calls only, so the reasoning of the answer the
span is about was missing with content capture on. It is read from the answer object as the event holds it:
what a redaction rule on ``/response/reasoning`` made of it. Real SDK clients on the scripted transport, a
real OTel SDK pipeline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_runtime import adapters, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.otel_support import Pipeline

THOUGHT = "Jane Doe asked for Lisbon: look up Lisbon's forecast."


def anthropic_thinking() -> None:
    body = testing.anthropic_message_body("Sunny in Lisbon.")
    body["content"].insert(0, {"type": "thinking", "thinking": THOUGHT, "signature": "c2ln"})
    scripted = testing.scripted_anthropic(testing.json_reply(body))
    adapters.instrument(scripted.client).messages.create(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "Weather?"}]
    )


def responses_reasoning() -> None:
    body = testing.responses_body("Sunny in Lisbon.")
    summary = [{"type": "summary_text", "text": THOUGHT}]
    body["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": summary, "encrypted_content": "gAAAA"})
    scripted = testing.scripted_openai(testing.json_reply(body))
    adapters.instrument(scripted.client).responses.create(model="gpt-test", input="Weather?")


ASK = {"anthropic": anthropic_thinking, "openai-responses": responses_reasoning}


def output_messages(provider: str, policy: RedactionPolicy | None = None) -> list[dict[str, Any]]:
    coordinator = session.SESSION_COORDINATOR
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider, capture_content=True).attach(coordinator)
    coordinator.redaction.use(policy)
    try:
        ASK[provider]()
    finally:
        coordinator.redaction.use(None)
        exporter.shutdown()
    (span,) = [s for s in pipeline.finished() if "gen_ai.output.messages" in (s.attributes or {})]
    return json.loads(span.attributes["gen_ai.output.messages"])


@pytest.mark.parametrize("provider", list(ASK))
def test_the_answers_reasoning_is_a_reasoning_part_before_its_text(relay_turn: Any, provider: str) -> None:
    (message,) = output_messages(provider)
    assert message["parts"] == [
        {"type": "reasoning", "content": THOUGHT},
        {"type": "text", "content": "Sunny in Lisbon."},
    ]


@pytest.mark.parametrize("provider", list(ASK))
def test_the_reasoning_part_holds_what_the_policy_made_of_it(relay_turn: Any, provider: str) -> None:
    policy = RedactionPolicy([Rule("redact", paths=["/response/reasoning"])])
    (message,) = output_messages(provider, policy)
    assert message["parts"][0] == {"type": "reasoning", "content": "[REDACTED]"}
    assert "Jane" not in json.dumps(message) and message["parts"][1]["content"] == "Sunny in Lisbon."
