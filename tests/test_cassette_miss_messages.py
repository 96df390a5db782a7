"""What a cassette's error messages show of a request: the request as the cassette stores it, never more.

A miss, a damaged recording or a call that tries more often than recorded is raised to the
caller, printed in CI logs and recorded as the attempt's error in events and spans: none of
them may hold a credential, a value the redaction policy replaces, or what the cassette's
``redact=`` hook hides. Real SDK clients (OpenAI, Anthropic) on the mock transport throughout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import Recorder, adapters, cassettes, redaction, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.cassette_support import APIS, Api, Offline
from tests.otel_support import Pipeline

RECORDED_SECRET = "cs-Vb7Qx2Lm9Zr4Tn6Ws1Kd8Hy3"
SECRET = "cs-Qp4Wd8Zx1Ny5Rk7Tm2Hs9Lc6"  # what this run sends in its place
EMAIL = "jane.doe@example.com"
SDK_APIS = ("chat", "anthropic")


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


@dataclass
class Sinks:
    """Where a miss goes besides the caller: the attempt's error in the relay's events and in the OTel spans.

    Only the error is looked at: the request an event or span carries is the caller's, redacted by
    their own rules (a prompt quoting a key the client never sent as its API key stays there).
    """

    events: Recorder
    pipeline: Pipeline

    def text(self, error: BaseException) -> str:
        told = [str(e.error_message) for e in self.events if getattr(e, "error_message", None)]
        for span in self.pipeline.finished():
            told.append(str(span.status.description))
            told += [json.dumps(dict(ev.attributes or {})) for ev in span.events if ev.name == "exception"]
        return "\n".join([str(error), repr(error), *told])


@pytest.fixture
def sinks(relay_turn: Any, relay_events: Recorder) -> Iterator[Sinks]:
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(session.SESSION_COORDINATOR)
    yield Sinks(relay_events, pipeline)
    exporter.shutdown()


def _with(api: Api, content: str, **extra: Any) -> dict[str, Any]:
    return {**api.kwargs, "messages": [{"role": "user", "content": content}], **extra}


def _record(api: Api, path: Path, kwargs: dict[str, Any], **use: Any) -> None:
    live = api.scripted(api.reply("ok"))
    with cassettes.use(path, mode="record", **use):
        adapters.complete(live.client, kwargs)


def _miss(api: Api, path: Path, kwargs: dict[str, Any], sinks: Sinks, **use: Any) -> tuple[str, str]:
    """The miss a replay of ``kwargs`` raises: its message, and everything that went to the sinks."""
    client, _ = Offline().clients(api.sdk)
    with pytest.raises(cassettes.CassetteError) as raised, cassettes.use(path, **use):
        adapters.complete(client, kwargs)
    everywhere = sinks.text(raised.value)
    assert everywhere.count(str(raised.value).splitlines()[0]) >= 3  # the caller, the events and the spans got it
    return str(raised.value), everywhere


def _diff_lines(message: str) -> list[str]:
    return [line.replace(" ", "") for line in message.splitlines()]


@pytest.mark.parametrize("api_name", SDK_APIS)
def test_a_miss_never_shows_a_credential_key_of_the_request(tmp_path, sinks, api_name) -> None:
    api, path = APIS[api_name], tmp_path / "c.json"
    _record(api, path, _with(api, "hello", extra_body={"provider": {"client_secret": RECORDED_SECRET}}))
    changed = _with(api, "hello there", extra_body={"provider": {"client_secret": SECRET}})
    message, everywhere = _miss(api, path, changed, sinks)
    assert SECRET not in everywhere and RECORDED_SECRET not in everywhere
    lines = _diff_lines(message)
    assert '-"content":"hello"' in lines and '+"content":"hellothere"' in lines  # what differs is still shown
    # Both sides are shown as stored: the redacted key is no difference.
    assert not any(line.startswith(("-", "+")) and "client_secret" in line for line in lines)


@pytest.mark.parametrize("api_name", SDK_APIS)
@pytest.mark.parametrize("sent_as", ["api-key header", "key query parameter"])
def test_a_key_the_call_sends_is_cut_from_the_miss_wherever_the_request_quotes_it(
    tmp_path, sinks, api_name, sent_as
) -> None:
    def call(key: str, ask: str) -> dict[str, Any]:
        sent = {"extra_headers": {"api-key": key}} if sent_as == "api-key header" else {"extra_query": {"key": key}}
        return _with(api, f"use the gateway key {key} and {ask}", **sent)

    api, path = APIS[api_name], tmp_path / "c.json"
    _record(api, path, call(RECORDED_SECRET, "say hi"))
    assert RECORDED_SECRET[:8] not in path.read_text()
    message, everywhere = _miss(api, path, call(SECRET, "say bye"), sinks)
    for key in (SECRET, RECORDED_SECRET):
        assert key[:8] not in everywhere and key[-8:] not in everywhere
    lines = _diff_lines(message)
    assert '-"content":"usethegatewaykey[redacted]andsayhi"' in lines
    assert '+"content":"usethegatewaykey[redacted]andsaybye"' in lines


@pytest.mark.parametrize("api_name", SDK_APIS)
def test_a_call_that_differs_only_in_the_key_it_sends_replays(tmp_path, api_name) -> None:
    """Matched as stored: a rotated key quoted in the prompt is the same request (it used to miss)."""
    api, path = APIS[api_name], tmp_path / "c.json"
    _record(api, path, _with(api, f"key {RECORDED_SECRET}", extra_headers={"api-key": RECORDED_SECRET}))
    client, _ = Offline().clients(api.sdk)
    with cassettes.use(path):
        adapters.complete(client, _with(api, f"key {SECRET}", extra_headers={"api-key": SECRET}))


def _break_body(path: Path) -> None:
    document = json.loads(path.read_text())
    document["calls"][0]["http"][0]["body"] = [1, 2]
    path.write_text(json.dumps(document))


def _empty(path: Path) -> None:
    path.write_text(json.dumps({"relay_runtime_cassette": 1, "calls": []}))


@pytest.mark.parametrize(
    "what, edit, expected",
    [
        ("damaged", _break_body, "http[0] is damaged"),
        ("no calls", _empty, "the cassette holds no calls"),
        ("replayed already", None, "all 1 recordings of it were already replayed"),
    ],
)
def test_messages_that_print_the_whole_request_print_it_as_stored(tmp_path, sinks, what, edit, expected) -> None:
    api, path = APIS["chat"], tmp_path / "c.json"
    kwargs = _with(api, "hello", extra_body={"client_secret": SECRET})
    _record(api, path, kwargs)
    if edit is not None:
        edit(path)
    client, _ = Offline().clients(api.sdk)
    with pytest.raises(cassettes.CassetteError) as raised, cassettes.use(path):
        if what == "replayed already":
            adapters.complete(client, kwargs)
        adapters.complete(client, kwargs)
    message = str(raised.value)
    assert expected in message and '"client_secret": "[redacted]"' in message
    assert SECRET not in sinks.text(raised.value)


def test_more_tries_than_recorded_prints_the_request_as_stored(tmp_path, sinks) -> None:
    import openai

    api, path = APIS["chat"], tmp_path / "c.json"
    kwargs = _with(api, "hello", extra_body={"client_secret": SECRET})
    with cassettes.use(path, mode="record"), pytest.raises(openai.InternalServerError):
        adapters.complete(t.openai_client(t.Script([t.error(500)]), max_retries=0), kwargs)
    retrying = t.openai_client(t.Script(), max_retries=1)  # it would try the recorded 500 once more
    miss = pytest.raises(cassettes.CassetteMiss, match="more http requests than the 1 recorded")
    with miss as raised, cassettes.use(path):
        adapters.complete(retrying, kwargs)
    assert '"client_secret": "[redacted]"' in str(raised.value)
    assert SECRET not in sinks.text(raised.value)


@pytest.mark.parametrize("api_name", SDK_APIS)
def test_a_miss_under_a_redaction_policy_shows_no_value_the_policy_replaces(tmp_path, sinks, api_name) -> None:
    session.SESSION_COORDINATOR.redaction.use(RedactionPolicy([Rule("redact", detector="email")]))
    api, path = APIS[api_name], tmp_path / "c.json"
    _record(api, path, _with(api, f"mail {EMAIL}"))
    message, everywhere = _miss(api, path, _with(api, f"mail {EMAIL} again"), sinks)
    assert EMAIL not in everywhere
    lines = _diff_lines(message)
    assert '-"content":"mail[REDACTED:email]"' in lines and '+"content":"mail[REDACTED:email]again"' in lines


@pytest.mark.parametrize("api_name", SDK_APIS)
def test_a_value_the_redact_hook_hides_is_named_as_changed_but_not_shown(tmp_path, sinks, api_name) -> None:
    card = "4111-1111-1111-1111"

    def redact(call: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(call).replace(card, "<card>"))

    api, path = APIS[api_name], tmp_path / "c.json"
    kwargs = _with(api, f"charge {card}")
    param = "temperature" if api_name == "chat" else "max_tokens"  # one the SDK takes, changed
    _record(api, path, kwargs, redact=redact)
    # Matched on the request as sent (no normalize= hides the card), the same call misses: the message
    # must say where it differs from the recording without showing the card.
    message, everywhere = _miss(api, path, {**kwargs, param: 7}, sinks, redact=redact)
    assert card not in everywhere and "4111" not in everywhere
    lines = _diff_lines(message)
    assert any(line.startswith(f'-"{param}":{kwargs[param]}') for line in lines)
    assert any(line.startswith(f'+"{param}":7') for line in lines)
    assert "also differ, values withheld by the cassette's redaction: messages[0].content" in message
