"""google-genai calls and the auxiliary layer: a route set outside any auxiliary call names the provider of a grouped
call's attempts, and inside an ``@auxiliary_call`` the attempts join its logical call with its route's provider (the
adapter asks the auxiliary layer's functions only when an auxiliary call is set)."""

from __future__ import annotations

import contextvars
from typing import Any

from genai_support import MODEL, gemini_client, response_body, stream_frames

from relay_runtime import adapters, auxiliary
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t


def _client(*replies: t.Reply) -> Any:
    script = t.Script()
    script.add(*replies)
    return adapters.instrument(gemini_client(script))


def test_a_route_set_outside_an_auxiliary_call_names_the_provider_of_a_call_and_a_stream(
    relay_turn, relay_events
) -> None:
    client = _client(t.json_reply(response_body("hi")), t.sse_reply(stream_frames(["a", "b"])))

    def routed() -> None:
        auxiliary.set_route("my.gemini", "m")
        assert client.models.generate_content(model=MODEL, contents="x").text == "hi"
        assert [c.text for c in client.models.generate_content_stream(model=MODEL, contents="x")] == ["a", "b"]

    contextvars.copy_context().run(routed)  # the route stays in that context
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [(e.provider, e.outcome) for e in ends] == [("my.gemini", "success")] * 2
    logical = relay_events.ends(relay_kind=cv.LOGICAL_CALL)
    assert len(logical) == 2 and {e.metadata[cv.API_REQUEST_ID] for e in ends} == {
        e.metadata[cv.API_REQUEST_ID] for e in logical
    }


def test_a_call_inside_an_auxiliary_call_is_an_attempt_of_its_logical_call(relay_turn, relay_events) -> None:
    client = _client(t.json_reply(response_body("first")), t.json_reply(response_body("second")))

    @auxiliary.auxiliary_call
    def summarise(task: str) -> str:
        auxiliary.set_route("aux.gemini", "m")
        client.models.generate_content(model=MODEL, contents="x")
        return str(client.models.generate_content(model=MODEL, contents="y").text)

    assert summarise("compression") == "second"
    ends = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert [e.metadata[cv.RETRY_COUNT] for e in ends] == [0, 1]
    assert len({e.metadata[cv.API_REQUEST_ID] for e in ends}) == 1
    assert all(e.provider == "aux.gemini" for e in ends)
    assert len(relay_events.ends(relay_kind=cv.LOGICAL_CALL)) == 1
