"""No secret reaches a cassette file: each leak seen on disk, over real SDK clients on the mock transport.

The provider here echoes what it was sent (as real gateways and error pages do), in every
place a cassette keeps: the path, response headers, JSON keys and values, non-UTF-8 bodies.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from relay_runtime import adapters, cassettes, redaction
from relay_runtime.adapters import testing as t
from tests.cassette_support import APIS, Offline

KEY = "sk-live-abcdefghijklmnop0123456789"  # the client's API key
GATEWAY = "gw-secret-0123456789abcdef"  # a default header the client holds
QUERY_KEY = "qk-0123456789abcdefghij"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


def _openai(answer: Callable[[httpx2.Request], httpx2.Response], **options: Any) -> openai.OpenAI:
    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return openai.OpenAI(api_key=KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http, **options)


def _record(path: Path, client: Any, kwargs: dict[str, Any] | None = None) -> str:
    kwargs = kwargs or {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with cassettes.use(path, mode="record"):
        try:
            adapters.complete(client, kwargs)
        except (openai.APIStatusError, anthropic.APIStatusError):
            pass
    return path.read_text()


def _assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, secret
        for start in range(len(secret) - 7):  # no run of 8 of its characters either
            assert secret[start : start + 8] not in text, (secret, secret[start : start + 8])


def _ok(**extra: Any) -> dict[str, Any]:
    return t.chat_completion_body("ok") | extra


def test_credential_query_parameters_are_redacted_in_the_recorded_path(tmp_path) -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=_ok(echo=str(request.url)))

    query = {"key": QUERY_KEY, "subscription-key": "sub-0123456789abc", "token": "tok-0123456789abc"}
    client = _openai(answer, default_query={**query, "sig": "s1", "author": "ada", "page": "2"})
    text = _record(tmp_path / "c.json", client)
    (exchange,) = json.loads(text)["calls"][0]["http"]
    assert exchange["path"] == (
        "/v1/chat/completions?key=[redacted]&subscription-key=[redacted]&token=[redacted]"
        "&sig=[redacted]&author=ada&page=2"
    )
    _assert_clean(text, *query.values(), KEY)


def test_credential_response_headers_and_echoed_header_values_are_redacted(tmp_path) -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        headers = {
            "set-cookie": "session=abcdef0123456789; HttpOnly",
            "x-echo-gateway-auth": request.headers["x-gateway-auth"],
            "x-debug": f"auth was {request.headers['authorization']}",
            "x-author": "ada",
        }
        return httpx2.Response(200, json=_ok(), headers=headers)

    text = _record(tmp_path / "c.json", _openai(answer, default_headers={"X-Gateway-Auth": GATEWAY}))
    headers = json.loads(text)["calls"][0]["http"][0]["headers"]
    assert headers["set-cookie"] == headers["x-echo-gateway-auth"] == "[redacted]"
    assert headers["x-debug"] == "auth was Bearer [redacted]" and headers["x-author"] == "ada"
    _assert_clean(text, KEY, GATEWAY, "abcdef0123456789")


def test_the_key_in_a_non_utf8_body_and_as_a_json_key_is_scrubbed(tmp_path) -> None:
    bodies = [
        b"\xff\xfe binary " + KEY.encode() + b" \x80",
        "\ufeffkey: ".encode("utf-16-le") + KEY.encode("utf-16-le"),
    ]
    for n, body in enumerate(bodies):

        def answer(request: httpx2.Request, body: bytes = body) -> httpx2.Response:
            return httpx2.Response(400, content=body, headers={"content-type": "application/octet-stream"})

        text = _record(tmp_path / f"bytes{n}.json", _openai(answer))
        stored = base64.b64decode(json.loads(text)["calls"][0]["http"][0]["base64"])
        assert KEY.encode() not in stored and KEY.encode("utf-16-le") not in stored
        assert b"[redacted]" in stored or "[redacted]".encode("utf-16-le") in stored

    def as_key(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(401, json={"error": {"message": "bad key", "keys": {KEY: "revoked"}}})

    text = _record(tmp_path / "key.json", _openai(as_key))
    assert json.loads(text)["calls"][0]["http"][0]["body"]["error"]["keys"] == {"[redacted]": "revoked"}
    _assert_clean(text, KEY)


def test_an_apikey_scheme_and_a_masked_echo_of_the_key_are_scrubbed(tmp_path) -> None:
    other = "ak-0123456789abcdefghijkl"

    def answer(request: httpx2.Request) -> httpx2.Response:
        message = f"Incorrect API key provided: {KEY[:12]}****{KEY[-4:]}; key {other} is not {KEY}"
        return httpx2.Response(401, json={"error": {"message": message, "type": "invalid_request_error"}})

    kwargs = {"model": "m", "messages": [], "extra_headers": {"Authorization": f"ApiKey {other}"}}
    text = _record(tmp_path / "c.json", _openai(answer), kwargs)
    message = json.loads(text)["calls"][0]["http"][0]["body"]["error"]["message"]
    # The four characters shown after the mask are no run of the key (too short to be one).
    assert message == f"Incorrect API key provided: [redacted]****{KEY[-4:]}; key [redacted] is not [redacted]"
    _assert_clean(text, KEY, other)


def test_a_scrubbed_cassette_still_replays(tmp_path) -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=_ok(echo=f"you are {KEY}"), headers={"set-cookie": "a=0123456789abcdef"})

    path = tmp_path / "c.json"
    _record(path, _openai(answer))
    client, _ = Offline().clients("openai")
    with cassettes.use(path):
        reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.choices[0].message.content == "ok" and reply.model_extra == {"echo": "you are [redacted]"}


def test_anthropic_key_echoed_under_its_own_header_name(tmp_path) -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = request.headers.get("x-api-key") or request.headers["authorization"]
        body = {"type": "error", "error": {"type": "authentication_error", "message": f"key {sent} revoked"}}
        return httpx2.Response(401, json=body, headers={"x-echo": sent})

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    client = anthropic.Anthropic(api_key=KEY, base_url=t.BASE_ANTHROPIC, max_retries=0, http_client=http)
    kwargs = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    text = _record(tmp_path / "c.json", client, kwargs)
    _assert_clean(text, KEY)


@pytest.mark.parametrize("api_name", ["chat", "anthropic"])
def test_a_key_the_model_streams_back_in_pieces_is_not_on_disk_in_pieces(tmp_path, api_name: str) -> None:
    api, path = APIS[api_name], tmp_path / "c.json"
    # Deltas of a few characters, as a model streams tokens: none holds a run of the key, together they spell it.
    pieces = ["Your key is ", *(KEY[i : i + 5] for i in range(0, len(KEY), 5)), ", keep it safe"]
    live = api.scripted(api.stream_reply(pieces)).client.with_options(api_key=KEY)
    with cassettes.use(path, mode="record"):
        said = "".join(_texts(adapters.stream(live, api.kwargs, api_mode=api.api_mode)))
    assert KEY in said  # the caller got what the provider sent
    stored = "".join(_texts_on_disk(path))
    assert stored == "Your key is [redacted], keep it safe"
    client, _ = Offline().clients(api.sdk)
    with cassettes.use(path):  # still a whole, playable stream
        assert "".join(_texts(adapters.stream(client, api.kwargs, api_mode=api.api_mode))).endswith("keep it safe")


def _texts(stream: Any) -> list[str]:
    out = []
    for chunk in stream:
        if getattr(chunk, "choices", None):
            out.append(chunk.choices[0].delta.content or "")
        elif getattr(chunk, "type", None) == "content_block_delta":
            out.append(chunk.delta.text)
    return out


def _texts_on_disk(path: Path) -> list[str]:
    out = []
    for event in json.loads(path.read_text())["calls"][0]["http"][0]["events"]:
        data = event["data"]
        if isinstance(data, dict) and data.get("choices"):
            out.append(data["choices"][0]["delta"].get("content") or "")
        elif isinstance(data, dict) and data.get("type") == "content_block_delta":
            out.append(data["delta"]["text"])
    return out
