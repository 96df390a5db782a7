"""Credentials that never sit in ``client.api_key`` (token providers, Azure AD and Vertex tokens, a gateway's
key in default headers, keys in the query string, a Bedrock API key) are kept out of every record when a
provider echoes them in an error: events, exported spans and cassettes."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import botocore.config
import botocore.exceptions
import httpx2
import openai
import pytest
from bedrock_support import MODEL, REGION, BedrockServer, error_reply
from otel_support import Pipeline

from relay_runtime import Recorder, adapters, cassettes, redaction, session
from relay_runtime.adapters import testing as t
from relay_runtime.integrations.otel import OTelExporter


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


class Records:
    def __init__(self, recorder: Recorder, pipeline: Pipeline) -> None:
        self.recorder = recorder
        self.pipeline = pipeline

    def text(self) -> str:
        events = [
            repr(vars(e)) if hasattr(e, "__dict__") else repr([getattr(e, s, None) for s in e.__slots__])
            for e in self.recorder.events
        ]
        spans = [
            repr(dict(s.attributes or {})) + repr([dict(ev.attributes or {}) for ev in s.events]) + str(s.status)
            for s in self.pipeline.finished()
        ]
        return "\n".join(events + spans)


@contextmanager
def recorded(relay_home: Path) -> Iterator[Records]:
    """A turn on the default host, its events recorded and its spans exported to memory."""
    pipeline = Pipeline()
    coordinator = session.SESSION_COORDINATOR
    host = coordinator.host(session.current_profile_key())
    recorder = Recorder()
    name = host.relay.subscribers.register(recorder, name="sent-credentials")
    exporter = OTelExporter(pipeline.tracer_provider, pipeline.meter_provider).attach(host)
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t", task_id="k")
    try:
        yield Records(recorder, pipeline)
    finally:
        coordinator.end_turn(turn, outcome="failed")
        coordinator.release_conversation(lease)
        exporter.detach()
        host.relay.subscribers.deregister(name)


def _echo(header: str) -> Callable[[httpx2.Request], httpx2.Response]:
    """A provider (or gateway) that echoes the credential it was sent in its 401."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = request.headers.get(header, "")
        return httpx2.Response(401, json={"error": {"message": f"invalid credential: {sent}", "type": "auth"}})

    return answer


def _http(header: str) -> httpx2.Client:
    return httpx2.Client(transport=httpx2.MockTransport(_echo(header)))


OPENAI_TOKEN = "sk-proj-Qm7Zt2LwX9vRk4PsN8yHc3JdF6aEuB1g"
AZURE_TOKEN = "eyJhbGciOiJSUzI1NiJ9.Ak3Tq9Wm2Rz7Lp5Xv8Nc.s1gNaTuReAAD"
GATEWAY_KEY = "pk-gw-Vb7Qx2Lm9Zr4Tn6Ws1Kd8Hy3"

CLIENTS: dict[str, tuple[Callable[[], Any], str]] = {
    "a key provider": (
        lambda: openai.OpenAI(
            api_key=lambda: OPENAI_TOKEN, base_url="https://api.example.test/v1", max_retries=0,
            http_client=_http("authorization"),
        ),
        OPENAI_TOKEN,
    ),
    "an Azure AD token": (
        lambda: openai.AzureOpenAI(
            azure_ad_token=AZURE_TOKEN, api_version="2024-06-01", azure_endpoint="https://x.openai.azure.com",
            max_retries=0, http_client=_http("authorization"),
        ),
        AZURE_TOKEN,
    ),
    "an Azure AD token provider": (
        lambda: openai.AzureOpenAI(
            azure_ad_token_provider=lambda: AZURE_TOKEN, api_version="2024-06-01",
            azure_endpoint="https://x.openai.azure.com", max_retries=0, http_client=_http("authorization"),
        ),
        AZURE_TOKEN,
    ),
    "a gateway key in default_headers": (
        lambda: openai.OpenAI(
            api_key="placeholder-key", base_url="https://gw.example.test/v1", max_retries=0,
            default_headers={"x-portkey-api-key": GATEWAY_KEY}, http_client=_http("x-portkey-api-key"),
        ),
        GATEWAY_KEY,
    ),
}  # fmt: skip


def test_a_token_under_a_header_named_like_authorization_is_kept_out_of_events_and_spans(relay_home: Path) -> None:
    # Cloud Run takes its ID token in X-Serverless-Authorization when Authorization carries the API's own key.
    token = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJydW4ifQ.Qx2Lm9Zr4Tn6Ws1Kd8Hy3Vb7"
    client = adapters.instrument(
        openai.OpenAI(
            api_key="sk-placeholder-key", base_url="https://vllm-abc123-ew.a.run.app/v1", max_retries=0,
            default_headers={"X-Serverless-Authorization": f"Bearer {token}"},
            http_client=_http("x-serverless-authorization"),
        )
    )  # fmt: skip
    with recorded(relay_home) as records, pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Forwarded-Authorization": f"Bearer {token}"},
        )  # fmt: skip
    start = next(e for e in records.recorder.events if getattr(e, "input", None) and "content" in e.input)
    assert start.input["content"]["extra_headers"] == {"X-Forwarded-Authorization": redaction.REDACTED}
    text = records.text()
    assert "invalid credential: Bearer [redacted]" in text
    assert token not in text


@pytest.mark.parametrize("how", list(CLIENTS))
def test_a_credential_the_client_does_not_hold_as_its_key_is_kept_out_of_events_and_spans(
    relay_home: Path, tmp_path: Path, how: str
) -> None:
    make, secret = CLIENTS[how]
    client = adapters.instrument(make())
    with recorded(relay_home) as records:
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        with cassettes.use(tmp_path / "c.json", mode="record"), pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "again"}])
    assert secret in str(caught.value)  # the caller's own error is the provider's, untouched
    text = records.text()
    assert "invalid credential: Bearer [redacted]" in text or "invalid credential: [redacted]" in text
    assert secret not in text
    assert secret not in (tmp_path / "c.json").read_text()


def test_a_vertex_access_token_is_kept_out_of_events_and_spans(relay_home: Path) -> None:
    token = "ya29.a0Af7Qx2Lm9Zr4Tn6Ws1Kd8Hy3Vb"

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = request.headers.get("authorization")
        error = {"type": "authentication_error", "message": f"token {sent} expired"}
        return httpx2.Response(401, json={"type": "error", "error": error})

    vertex = anthropic.AnthropicVertex(
        region="us-east5", project_id="p", access_token=token, max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )  # fmt: skip
    client = adapters.instrument(vertex)
    with recorded(relay_home) as records, pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="claude-sonnet-4", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    text = records.text()
    assert "token Bearer [redacted] expired" in text
    assert token not in text


def test_keys_in_the_query_string_are_redacted_in_events_and_reach_the_provider(relay_home: Path) -> None:
    query = {"key": "AIzaSyQx2Lm9Zr4Tn6Ws1Kd8Hy3Vb7", "subscription-key": "apim-9f8e7d6c5b4a39281706",
             "sig": "sv2024sigQ9w8e7r6t5y4u3i", "q": "keep-query"}  # fmt: skip
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")), max_retries=0)
    client = adapters.instrument(scripted.client)
    with recorded(relay_home) as records:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], extra_query=query)
    sent = str(scripted.script.requests[0].url)
    assert all(value in sent for value in query.values())  # the record is redacted, not the request
    start = next(e for e in records.recorder.events if getattr(e, "input", None) and "content" in e.input)
    assert start.input["content"]["extra_query"] == {
        "key": redaction.REDACTED, "subscription-key": redaction.REDACTED, "sig": redaction.REDACTED, "q": "keep-query"
    }  # fmt: skip
    text = records.text()
    assert not [value for name, value in query.items() if name != "q" and value in text]


@pytest.fixture()
def tls_bedrock(tmp_path: Path) -> Iterator[BedrockServer]:
    """The loopback Bedrock server over TLS: botocore sends a Bedrock API key only over HTTPS."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = BedrockServer()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    yield server
    server.close()


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")  # the loopback server's own certificate
def test_a_bedrock_api_key_is_kept_out_of_events_spans_and_cassettes(
    relay_home: Path, tmp_path: Path, tls_bedrock: BedrockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    bearer = "ABSKQmVkcm9ja0FQSUtleS1hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk="
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", bearer)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    tls_bedrock.replies += [error_reply(403, "AccessDeniedException", f"Invalid API key: {bearer}")] * 2
    client = adapters.instrument(
        boto3.client(
            "bedrock-runtime", region_name=REGION, endpoint_url=tls_bedrock.url.replace("http://", "https://"),
            verify=False, config=botocore.config.Config(retries={"max_attempts": 0}),
        )
    )  # fmt: skip
    messages = [{"role": "user", "content": [{"text": "hi"}]}]
    with recorded(relay_home) as records:
        with pytest.raises(botocore.exceptions.ClientError):
            client.converse(modelId=MODEL, messages=messages)
        with cassettes.use(tmp_path / "b.json", mode="record"), pytest.raises(botocore.exceptions.ClientError):
            client.converse(modelId=MODEL, messages=messages)
    assert tls_bedrock.seen[0].headers["Authorization"] == f"Bearer {bearer}"
    text = records.text()
    assert "Invalid API key: [redacted]" in text
    assert bearer not in text
    assert bearer not in (tmp_path / "b.json").read_text()


def test_a_header_named_key_inside_extra_body_is_redacted_in_events_and_the_cassette(
    relay_home: Path, tmp_path: Path
) -> None:
    keys = {"api-key": "gw-key-Qx2Lm9Zr4Tn6Ws1Kd8", "x-api-key": "gw-key-Hy3Vb7Zt2LwX9vRk4P"}
    scripted = t.scripted_openai(t.json_reply(t.chat_completion_body("ok")), max_retries=0)
    client = adapters.instrument(scripted.client)
    with recorded(relay_home) as records, cassettes.use(tmp_path / "c.json", mode="record"):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_body={"forward": {"headers": keys}}
        )
    assert all(value in scripted.script.requests[0].content.decode() for value in keys.values())
    stored = (tmp_path / "c.json").read_text()
    for value in keys.values():
        assert value not in records.text() and value not in stored


GOOGLE_KEY = "AIzaSyHeaderKey-Qx2Lm9Zr4Tn6Ws1Kd8Hy3"


def _google_client(headers: dict[str, str] | None) -> Any:
    from google import genai
    from google.genai import types

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = request.headers.get("x-goog-api-key", "")
        return httpx2.Response(400, json={"error": {"code": 400, "message": f"key {sent} refused", "status": "X"}})

    transport = httpx2.MockTransport(answer)
    options = types.HttpOptions(
        base_url="https://gemini.test", headers=headers, client_args={"transport": transport},
        async_client_args={"transport": transport},
    )  # fmt: skip
    return genai.Client(api_key="AIzaSyClientKey-placeholder", http_options=options)


@pytest.mark.parametrize("where", ["the client's http_options", "one request's http_options"])
def test_a_google_key_sent_in_http_options_headers_is_kept_out_of_events_spans_and_cassettes(
    relay_home: Path, tmp_path: Path, where: str
) -> None:
    from google.genai import errors, types

    headers = {"x-goog-api-key": GOOGLE_KEY}
    on_client = where == "the client's http_options"
    client = adapters.instrument(_google_client(headers if on_client else None))
    config = None if on_client else types.GenerateContentConfig(http_options=types.HttpOptions(headers=headers))
    with recorded(relay_home) as records:
        with pytest.raises(errors.APIError) as caught:
            client.models.generate_content(model="gemini-2.5-flash", contents="hi", config=config)
        with cassettes.use(tmp_path / "g.json", mode="record"), pytest.raises(errors.APIError):
            client.models.generate_content(model="gemini-2.5-flash", contents="again", config=config)
    assert GOOGLE_KEY in str(caught.value)  # the key the SDK sent, the caller's error untouched
    text = records.text()
    assert "key [redacted] refused" in text
    assert GOOGLE_KEY not in text
    assert GOOGLE_KEY not in (tmp_path / "g.json").read_text()


def test_a_key_in_an_x_apikey_header_is_kept_out_of_events_and_spans(relay_home: Path) -> None:
    # Apigee (and other API gateways) in front of a model take their key in "x-apikey": no "-" before "key".
    key = "apigee-Vb7Qx2Lm9Zr4Tn6Ws1Kd8Hy3"
    client = adapters.instrument(
        openai.OpenAI(
            api_key="sk-placeholder-key",
            base_url="https://gw.example.test/v1",
            max_retries=0,
            http_client=_http("x-apikey"),
        )
    )
    with recorded(relay_home) as records, pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-apikey": key}
        )
    assert key in str(caught.value)  # sent, and echoed in the caller's error
    assert "invalid credential: [redacted]" in records.text()
    assert key not in records.text()
