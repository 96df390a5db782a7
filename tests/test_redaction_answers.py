"""What a policy reads beyond the answer's text and the request's messages: every field of the answer
object (a refusal, citations, the id), the tool the request makes the model call, and what the SDK sends
beside the view (``extra_body``, ``extra_query``), in events, spans and cassettes alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay_runtime import Recorder, adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.otel_support import Pipeline

EMAIL = "jane.doe@example.com"
KEY = "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"


def _policy() -> RedactionPolicy:
    return RedactionPolicy([Rule("redact", detector="email"), Rule("redact", detector="api_key")])


def _assert_clean(where: str, blob: str) -> None:
    for value in (EMAIL, KEY):
        assert value not in blob and json.dumps(value)[1:-1] not in blob, f"{value!r} is in {where}"


def test_fields_of_an_answer_beyond_its_text_are_redacted(relay_turn: Any, relay_events: Recorder) -> None:
    # The text says nothing the policy changes: the rest of the answer used to pass whole.
    coordinator = session.SESSION_COORDINATOR
    coordinator.redaction.use(_policy())
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(coordinator)
    body = testing.chat_completion_body("ok")
    body["id"] = f"chatcmpl-{EMAIL}"  # an id a proxy built from what it was sent
    message = body["choices"][0]["message"]
    message["refusal"] = f"I will not mail {EMAIL}"
    message["annotations"] = [
        {"type": "url_citation",
         "url_citation": {"url": f"https://x.test/?u={EMAIL}", "title": f"key {KEY}", "start_index": 0,
                          "end_index": 1}},
    ]  # fmt: skip
    scripted = testing.scripted_openai(testing.json_reply(body))
    adapters.complete(scripted.client, {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    exporter.shutdown()

    (end,) = relay_events.ends(scope_type="llm")
    _assert_clean("the attempt's output", repr(end.output))
    assert "[REDACTED:email]" in end.annotated_response.id
    assert end.output.choices[0].message.refusal == "I will not mail [REDACTED:email]"  # still the SDK's object
    spans = "\n".join(s.to_json() for s in pipeline.finished())
    assert end.annotated_response.id in spans
    _assert_clean("the spans", spans)


def test_tool_choice_and_what_is_sent_beside_the_view_are_redacted(
    relay_turn: Any, relay_events: Recorder, tmp_path: Path
) -> None:
    session.SESSION_COORDINATOR.redaction.use(_policy())
    scripted = testing.scripted_openai(testing.json_reply(testing.chat_completion_body("ok")))
    tool = {"type": "function", "function": {"name": f"notify_{EMAIL.replace('@', '_at_')}", "parameters": {}}}
    choice = {"type": "function", "function": {"name": f"mail {EMAIL}"}}

    client = adapters.instrument(scripted.client)

    def call() -> None:
        client.chat.completions.create(
            model="gpt-x", messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice=choice,
            extra_body={"note": f"key {KEY}"}, extra_query={"who": EMAIL},
        )  # fmt: skip

    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        call()
    (start,) = relay_events.starts(scope_type="llm")
    assert start.annotated_request.tool_choice == {"type": "function", "function": {"name": "mail [REDACTED:email]"}}
    _assert_clean("the attempt's request", repr(start.annotated_request) + repr(start.input))
    stored = cassette.read_text()
    assert "[REDACTED:email]" in stored
    _assert_clean("the cassette", stored)
    sent = b"".join(r.content for r in scripted.script.requests).decode()
    assert KEY in sent and EMAIL in sent  # the provider still got what the caller sent
