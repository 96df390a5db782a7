"""The model a call names is the caller's words (a fine-tune's suffix, an Azure deployment's name) and reaches
no sink with a value the policy redacts: the span is named for it, metrics are labelled with it, the journal
and the trajectory carry it as the event's ``model_name`` and the request view's ``model``, and a cassette
stores it as the request's model. The answer's model was read already; the request's was not.

Through the real path: the openai SDK over its scripted transport, under a detector policy, watched by the
events, OTel (spans and metrics), the journal, ATIF and a cassette, which replays under the same policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay_runtime import adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.test_frameworks_records_secrets import Sinks

EMAIL = "jane.doe@example.com"
MODEL = f"ft:gpt-4o-mini:acme:{EMAIL}:9xYz"  # a fine-tune whose suffix its owner chose


def _call(client: Any) -> Any:
    return adapters.complete(client, {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]})


def test_a_value_in_the_requests_model_reaches_no_sink(relay_host: Any, relay_events: Any, tmp_path: Path) -> None:
    coordinator = session.SESSION_COORDINATOR
    coordinator.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    relay = relay_host.relay
    sinks = Sinks(relay, relay_events, tmp_path)
    pipeline = sinks.pipeline
    sinks.otel.detach()  # the same exporter, with metrics too
    sinks.otel = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider, capture_content=True).attach(relay)
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("hi there")))
    cassette = tmp_path / "cassette.json"
    lease = coordinator.acquire_conversation(profile_key=relay_host.profile_key, session_id="session-1", platform="t")
    turn = coordinator.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    try:
        with cassettes.use(cassette, mode="record"):
            answer = _call(scripted.client)
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
    assert answer.choices[0].message.content == "hi there"
    assert json.loads(scripted.script.requests[0].content)["model"] == MODEL  # the provider gets it as named

    texts = sinks.texts()
    texts["span names"] = json.dumps([s.name for s in pipeline.finished()])
    metrics = pipeline.reader.get_metrics_data()
    texts["metrics"] = metrics.to_json() if metrics else ""
    texts["cassette"] = cassette.read_text()
    for where, text in texts.items():
        assert EMAIL not in text, f"the model's {EMAIL!r} is in {where}"
    # What the model's name says besides is still there, and the answer too.
    redacted = "ft:gpt-4o-mini:acme:[REDACTED:email]:9xYz"
    assert relay_events.starts(scope_type="llm")[0].model_name == redacted
    assert f"chat {redacted}" in texts["span names"]
    for where in ("jsonl", "journal", "cassette", "metrics"):
        assert redacted in texts[where], where
    assert "hi there" in texts["cassette"]

    # The cassette replays: the live request is redacted the same way before it is matched.
    with cassettes.use(cassette, mode="replay"):
        assert _call(scripted.client).choices[0].message.content == "hi there"
    assert len(scripted.script.requests) == 1
