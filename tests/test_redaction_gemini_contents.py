"""A rule on ``/request/messages/*/content`` reaches a Gemini conversation in every shape its SDK takes, and the
texts an embeddings call is given.

The request view keeps Gemini's own shape: a message's content is its ``parts``, and ``contents`` may be a
bare text, a list of texts or parts (the SDK sends them as one user message), or ``Content`` objects. The
rule named ``content`` and nothing else: the prompt was recorded whole in every event (so every span, journal
row and trajectory) while the same rule redacted an OpenAI, Anthropic or Bedrock prompt; and a ``remove``
left the text of SDK objects in the recorded kwargs. The provider still gets the prompt as given. A real
google-genai client on a mock transport.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay_runtime import Recorder, adapters, session
from relay_runtime.adapters import testing as t
from relay_runtime.redaction import RedactionPolicy, Rule
from tests import genai_support as g
from tests.framework_support import need

need("google.genai")

from google.genai import types  # noqa: E402

ASKED = "Jane Doe asks: is it sunny in Lisbon?"


def contents(shape: str) -> Any:
    return {
        "text": ASKED,
        "texts": ["Jane Doe asks:", "is it sunny in Lisbon?"],
        "parts": [types.Part(text=ASKED)],
        "content-objects": [types.Content(role="user", parts=[types.Part(text=ASKED)])],
        "content-dicts": [{"role": "user", "parts": [{"text": ASKED}]}],
    }[shape]


@pytest.mark.parametrize("action", ["redact", "remove"])
@pytest.mark.parametrize("shape", ["text", "texts", "parts", "content-objects", "content-dicts"])
def test_a_content_rule_reaches_a_gemini_prompt_in_every_shape(
    relay_turn: Any, relay_events: Recorder, shape: str, action: str
) -> None:
    script = t.Script([t.json_reply(g.response_body("Sunny."))])
    client = adapters.instrument(g.gemini_client(script))
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule(action, paths=["/request/messages/*/content"])]))
    try:
        client.models.generate_content(model="gemini-2.5-flash", contents=contents(shape))
    finally:
        session.SESSION_COORDINATOR.redaction.use(None)
    (start,) = relay_events.starts(scope_type="llm")
    recorded = repr(start.annotated_request) + repr(start.input)
    assert "Jane" not in recorded and "Lisbon" not in recorded
    assert start.metadata["relay.redaction.rules"]  # the event says a rule changed it
    assert "Jane Doe asks" in repr(script.bodies())  # the provider got the prompt as given


@pytest.mark.parametrize("sdk", ["openai", "google-genai"])
def test_a_content_rule_reaches_the_texts_an_embeddings_call_is_given(
    relay_turn: Any, relay_events: Recorder, sdk: str
) -> None:
    # An embeddings request's inputs are the view's messages as bare texts: the rule named none of them.
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", paths=["/request/messages/*/content"])]))
    try:
        if sdk == "openai":
            scripted = t.scripted_openai(t.json_reply(t.embeddings_body(((0.1, 0.2), (0.3, 0.4)))))
            adapters.instrument(scripted.client).embeddings.create(model="text-embedding-3-small", input=[ASKED, "Bob"])
        else:
            script = t.Script([t.json_reply(g.embed_body(2))])
            client = adapters.instrument(g.gemini_client(script))
            client.models.embed_content(model="text-embedding-004", contents=[ASKED, "Bob"])
    finally:
        session.SESSION_COORDINATOR.redaction.use(None)
    (start,) = relay_events.starts(scope_type="llm")
    assert start.annotated_request.messages == ["[REDACTED]", "[REDACTED]"]
    assert "Jane" not in repr(start.input)
