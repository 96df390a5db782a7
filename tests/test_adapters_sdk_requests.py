"""What the SDK sends within one call, as its attempt records it.

- Requests inside one SDK try (anthropic's refusal fallback middleware, a middleware's resend after
  refreshing a rejected token) carry the same ``x-stainless-retry-count``: neither ``sdk_retries`` nor
  anything else showed them; they are ``relay.sdk_resends`` on the attempt.
- A call the SDK refuses before sending anything (its own argument checks, a credential that cannot
  be had in time) is recorded as never sent (``relay.sent: False``), not as a provider call that failed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from otel_support import Pipeline, span_path  # noqa: F401  (the span tests run on both span paths)

from relay_runtime import Recorder, adapters, session
from relay_runtime import conventions as cv
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter

MESSAGES = [{"role": "user", "content": "hi"}]
FALLBACK = "claude-fallback"


def attempts(events: Recorder) -> list[Any]:
    return events.ends(relay_kind=cv.ATTEMPT)


def anthropic_client(script: t.Script, *, is_async: bool = False, max_retries: int = 0, **options: Any) -> Any:
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    http = httpx2.AsyncClient(transport=script.transport()) if is_async else httpx2.Client(transport=script.transport())
    options.setdefault("api_key", t.TEST_KEY)
    client = cls(base_url=t.BASE_ANTHROPIC, max_retries=max_retries, open_telemetry=False, http_client=http, **options)
    return adapters.instrument(client)


def refusal_body() -> dict[str, Any]:
    body = t.anthropic_message_body("", stop_reason="refusal")
    body["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "no", "fallback_credit_token": "c1"}
    return body


def refusal_events() -> list[dict[str, Any]]:
    events = t.anthropic_events([], stop_reason="refusal")
    delta = next(e for e in events if e["type"] == "message_delta")
    delta["delta"]["stop_details"] = {"type": "refusal", "category": "cyber", "fallback_credit_token": "c2"}
    return events


def fallback_middleware() -> list[Any]:
    return [anthropic.BetaRefusalFallbackMiddleware([{"model": FALLBACK}])]


@pytest.fixture(autouse=True)
def _no_missing_state_warning() -> Iterator[None]:
    with warnings.catch_warnings():  # the middleware warns once when used without a BetaFallbackState
        warnings.simplefilter("ignore")
        yield


# -- resends within one SDK try ----------------------------------------------------------------------


def test_refusal_fallback_middleware_resends_are_counted(relay_turn, relay_events) -> None:
    script = t.Script([t.json_reply(refusal_body()), t.json_reply(t.anthropic_message_body("served", model=FALLBACK))])
    client = anthropic_client(script, middleware=fallback_middleware())
    message = client.beta.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    assert [block.type for block in message.content] == ["fallback", "text"]
    assert [r.headers["x-stainless-retry-count"] for r in script.requests] == ["0", "0"]
    (end,) = attempts(relay_events)
    assert end.outcome == "success"
    assert end.metadata[cv.SDK_RETRIES] == 0
    assert end.metadata[cv.SDK_RESENDS] == 1
    assert end.annotated_response.model == FALLBACK


def test_refusal_fallback_middleware_resends_of_a_stream_are_counted(relay_turn, relay_events) -> None:
    script = t.Script(
        [
            t.sse_reply(t.typed_sse(refusal_events())),
            t.sse_reply(t.typed_sse(t.anthropic_events(["ok"], model=FALLBACK))),
        ]
    )
    client = anthropic_client(script, middleware=fallback_middleware())
    stream = client.beta.messages.create(model="c", max_tokens=5, messages=MESSAGES, stream=True)
    assert [e.type for e in stream][-1] == "message_stop"
    assert len(script.requests) == 2  # the hop was sent while the caller read the stream
    (end,) = attempts(relay_events)
    assert (end.outcome, end.metadata[cv.SDK_RETRIES], end.metadata[cv.SDK_RESENDS]) == ("success", 0, 1)


class RefreshOn401(anthropic.Middleware):
    """A middleware that, like a token refresh after a 401, sends the same try again with a new token."""

    def __init__(self) -> None:
        self.refreshed = 0

    def handle(self, request: Any, call_next: Any) -> Any:
        response = call_next(request)
        if response.status_code != 401:
            return response
        self.refreshed += 1
        return call_next(request.copy(headers={"X-Api-Key": f"refreshed-{self.refreshed}"}))

    async def handle_async(self, request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        if response.status_code != 401:
            return response
        self.refreshed += 1
        return await call_next(request.copy(headers={"X-Api-Key": f"refreshed-{self.refreshed}"}))


def test_a_resend_after_a_refreshed_token_is_counted_apart_from_sdk_retries(relay_turn, relay_events) -> None:
    """Two SDK tries (a 500, retried), the second one sent twice (a 401, then a refreshed token)."""
    script = t.Script([t.error(500), t.error(401), t.json_reply(t.anthropic_message_body("in"))])
    client = anthropic_client(script, max_retries=1, middleware=[RefreshOn401()])
    client.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    assert [r.headers["x-stainless-retry-count"] for r in script.requests] == ["0", "1", "1"]
    (end,) = attempts(relay_events)
    assert (end.outcome, end.metadata[cv.SDK_RETRIES], end.metadata[cv.SDK_RESENDS]) == ("success", 1, 1)

    # The next call counts afresh: one try, nothing resent.
    script.add(t.json_reply(t.anthropic_message_body("again")))
    client.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    last = attempts(relay_events)[-1]
    assert last.metadata[cv.SDK_RETRIES] == 0 and cv.SDK_RESENDS not in last.metadata


def test_openai_resend_after_refreshing_a_rejected_workload_token_is_counted(relay_turn, relay_events) -> None:
    """openai's workload identity: a 401 drops the token, and the same try is sent again with a new one."""
    script = t.Script([t.error(401, "expired token"), t.json_reply(t.chat_completion_body("fresh"))])
    identity = {
        "identity_provider_id": "idp",
        "service_account_id": "sa",
        "provider": {"token_type": "jwt", "get_token": lambda: "subject-token"},
    }
    client = openai.OpenAI(
        base_url=t.BASE_OPENAI, max_retries=0, http_client=httpx2.Client(transport=script.transport()),
        workload_identity=identity,
    )  # fmt: skip
    auth = client._workload_identity_auth
    auth._store_token({"access_token": "stale-token", "expires_in": 3600.0})
    # The token exchange is a separate endpoint the SDK calls with its own HTTP client: answered here.
    auth._fetch_token_from_exchange = lambda: {"access_token": "fresh-token", "expires_in": 3600.0}
    adapters.instrument(client)
    reply = client.chat.completions.create(model="m", messages=MESSAGES)
    assert reply.choices[0].message.content == "fresh"
    assert [r.headers["x-stainless-retry-count"] for r in script.requests] == ["0", "0"]
    (end,) = attempts(relay_events)
    assert (end.outcome, end.metadata[cv.SDK_RETRIES], end.metadata[cv.SDK_RESENDS]) == ("success", 0, 1)


@pytest.mark.asyncio
async def test_async_resends_are_counted(relay_turn, relay_events) -> None:
    script = t.Script([t.error(401), t.json_reply(t.anthropic_message_body("in"))])
    client = anthropic_client(script, is_async=True, middleware=[RefreshOn401()])
    await client.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    (end,) = attempts(relay_events)
    assert (end.outcome, end.metadata[cv.SDK_RETRIES], end.metadata[cv.SDK_RESENDS]) == ("success", 0, 1)


# -- refused by the SDK before sending ------------------------------------------------------------------


def test_sdk_argument_checks_are_recorded_as_never_sent(relay_turn, relay_events) -> None:
    o = t.scripted_openai(max_retries=0)
    adapters.instrument(o.client)
    script = t.Script()
    client = anthropic_client(script)
    with pytest.raises(TypeError, match="Missing required arguments"):
        o.client.chat.completions.create(model="m")  # no messages: the SDK's own check
    with pytest.raises(ValueError, match="Streaming is required"):
        client.messages.create(model="c", max_tokens=500_000, messages=MESSAGES)  # would take too long
    assert o.script.requests == [] and script.requests == []
    refused = attempts(relay_events)
    assert [(e.outcome, e.error_type) for e in refused] == [("failed", "TypeError"), ("failed", "ValueError")]
    assert all(e.metadata[cv.SENT] is False and cv.SDK_RETRIES not in e.metadata for e in refused)


def test_a_credential_not_had_in_time_is_recorded_as_never_sent(relay_turn, relay_events) -> None:
    def token_provider(*, force_refresh: bool = False) -> Any:
        raise TimeoutError("the token endpoint did not answer before the deadline")

    script = t.Script()
    client = anthropic_client(script, api_key=None, credentials=token_provider)
    with pytest.raises(anthropic.APIConnectionError) as raised:
        client.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    assert isinstance(raised.value.__cause__, TimeoutError)  # the SDK wraps what its auth step raised
    assert script.requests == []
    (end,) = attempts(relay_events)
    assert end.outcome == "failed" and end.metadata[cv.SENT] is False


def test_a_call_never_sent_costs_nothing(relay_turn, relay_host, relay_events) -> None:
    from relay_runtime import cost
    from relay_runtime.cost import Budget, PriceCatalog

    prices = {"openai": {"gpt-x": {"input": 1.0, "output": 4.0}}}
    cost.attach(relay_host, PriceCatalog.from_mapping(prices), Budget(1.0, per="turn", name="turn budget"))
    o = t.scripted_openai(max_retries=0)
    adapters.instrument(o.client)
    with pytest.raises(TypeError):
        o.client.chat.completions.create(model="gpt-x", max_tokens=10)
    (end,) = attempts(relay_events)
    assert end.metadata[cv.SENT] is False
    assert end.cost.amount == 0.0 and not end.cost.wasted  # not an unpriced provider call
    assert "cost.unpriced_no_usage" not in relay_host.relay.diagnostics()


def test_provider_errors_and_answers_are_sent(relay_turn, relay_events) -> None:
    """Only a refusal before the first request is 'never sent': a provider's error was sent, and failed."""
    o = t.scripted_openai(t.error(400, "bad"), t.json_reply(t.chat_completion_body()), max_retries=0)
    adapters.instrument(o.client)
    with pytest.raises(openai.BadRequestError):
        o.client.chat.completions.create(model="m", messages=MESSAGES)
    o.client.chat.completions.create(model="m", messages=MESSAGES)
    failed, answered = attempts(relay_events)
    assert failed.outcome == "failed" and cv.SENT not in failed.metadata and failed.metadata[cv.SDK_RETRIES] == 0
    assert answered.outcome == "success" and cv.SENT not in answered.metadata


@pytest.mark.asyncio
async def test_async_and_streamed_refusals_are_never_sent(relay_turn, relay_events) -> None:
    o = t.scripted_openai(max_retries=0)
    adapters.instrument(o.aclient)
    adapters.instrument(o.client)
    with pytest.raises(TypeError):
        await o.aclient.chat.completions.create(model="m", stream=True)
    with pytest.raises(TypeError):
        o.client.responses.create(model="m", input="x", stream=True, no_such_argument=1)
    assert o.script.requests == []
    assert [e.metadata[cv.SENT] for e in attempts(relay_events)] == [False, False]


# -- on the spans ----------------------------------------------------------------------------------------


@pytest.fixture
def spans(relay_home: Any, span_path: str) -> Iterator[Pipeline]:  # noqa: F811  (span_path: the fixture)
    out = Pipeline()
    host = session.SESSION_COORDINATOR.host(session.current_profile_key())
    exporter = OTelExporter(out.tracer_provider, out.meter_provider).attach(host)
    lease = session.SESSION_COORDINATOR.acquire_conversation(
        profile_key=host.profile_key, session_id="chat-1", platform="test"
    )
    turn = session.SESSION_COORDINATOR.begin_turn(lease, turn_id="turn-1", task_id="task-1")
    try:
        yield out
    finally:
        session.SESSION_COORDINATOR.end_turn(turn, outcome="success")
        session.SESSION_COORDINATOR.release_conversation(lease)
        exporter.detach()


def test_spans_say_resent_and_never_sent(spans) -> None:
    script = t.Script([t.json_reply(refusal_body()), t.json_reply(t.anthropic_message_body("served", model=FALLBACK))])
    client = anthropic_client(script, middleware=fallback_middleware())
    client.beta.messages.create(model="claude-first", max_tokens=5, messages=MESSAGES)
    with pytest.raises(TypeError):
        client.messages.create(model="claude-refused")  # no max_tokens, no messages
    resent = spans.one("chat claude-first")
    assert resent.attributes[cv.SDK_RESENDS] == 1 and resent.attributes["relay.sdk_retries"] == 0
    assert cv.SENT not in resent.attributes
    assert resent.attributes["gen_ai.provider.name"] == "anthropic"
    assert resent.attributes["server.address"] == "anthropic.test"
    refused = spans.one("chat claude-refused")
    assert refused.attributes[cv.SENT] is False
    assert refused.attributes["error.type"] == "TypeError"
    assert "relay.sdk_retries" not in refused.attributes
    # No provider in its claims: nothing was sent to one.
    assert not {"gen_ai.provider.name", "server.address", "server.port"} & set(refused.attributes)
    assert refused.attributes["gen_ai.request.model"] == "claude-refused"  # what was asked for stays
