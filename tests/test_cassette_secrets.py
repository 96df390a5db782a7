"""A cassette matches a request on its scrubbed form; the check that skips scrubbing never misses a credential."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from relay_runtime import redaction
from relay_runtime.cassettes import secrets
from relay_runtime.cassettes.requests import canonical

PLAIN_KEY = "sk-remembered-0123456789"
QUOTED_KEY = 'sk-"quoted"\\key-0123'  # what JSON escapes: only its escaped form is in the text


@pytest.fixture(autouse=True)
def remembered() -> Iterator[None]:
    redaction.remember_secret(PLAIN_KEY)
    redaction.remember_secret(QUOTED_KEY)
    yield
    redaction.forget_secrets()


DOCUMENTS: list[Any] = [
    {"messages": [{"role": "user", "content": f"my key is {PLAIN_KEY}, keep it"}]},
    {"messages": [{"role": "user", "content": f"quoted {QUOTED_KEY}"}]},
    {"params": {"extra_body": {"nested": [{"ApI_kEy": "v"}]}}},
    {"params": {"client_secret": 12}},
    {"tools": [{"name": "f", "description": "x\ny", "secret": "s"}]},
    {"model": "m", "messages": [{"role": "user", "content": "hello é \u2028"}], "params": {"temperature": 0.2}},
    {"model": "m", "messages": [{"role": "user", "content": 'say "api_key": no'}]},
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_whatever_scrubbing_would_change_is_seen_in_the_text(document) -> None:
    if secrets.scrub(document) != document:
        assert secrets.may_scrub(canonical(document))


def test_a_request_with_nothing_to_scrub_is_not_scrubbed() -> None:
    plain = {"model": "m", "messages": [{"role": "user", "content": "hello é"}], "params": {"max_tokens": 5}}
    assert secrets.scrub(plain) == plain and not secrets.may_scrub(canonical(plain))
    escaped = {"messages": [{"role": "user", "content": "a\nb"}]}  # any escape: scrubbed, to be sure
    assert secrets.may_scrub(canonical(escaped))
    assert [secrets.scrub(d) != d for d in DOCUMENTS] == [True] * 5 + [False, False]


@pytest.mark.parametrize("content", ("my key is {key}", 'a "quoted" {key}', "no key here"))
def test_a_request_matches_its_recording_scrubbed_or_not(tmp_path, content) -> None:
    from relay_runtime import adapters, cassettes
    from relay_runtime.adapters import testing as t
    from tests.cassette_support import APIS, Offline

    api = APIS["chat"]
    kwargs = {**api.kwargs, "messages": [{"role": "user", "content": content.format(key=t.TEST_KEY)}]}
    live = api.scripted(api.reply("ok"))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        adapters.complete(live.client, kwargs)
    assert t.TEST_KEY not in (tmp_path / "c.json").read_text()
    client, _ = Offline().clients("openai")
    client.api_key = t.TEST_KEY  # the key the agent uses is remembered (and cut) as live
    with cassettes.use(tmp_path / "c.json"):
        assert adapters.complete(client, kwargs).choices[0].message.content == "ok"


def test_a_credential_in_the_query_string_never_reaches_the_cassette(tmp_path) -> None:
    """A key sent as ``?api_key=`` (default_query / extra_query) is cut from the recorded path and every string."""
    import httpx2
    import openai

    from relay_runtime import adapters, cassettes
    from relay_runtime.adapters import testing as t

    query_key, short = "sk-query-0123456789", "pw1"
    echo = t.json_reply({"error": {"message": f"bad key {query_key}", "type": "invalid_request_error"}}, status=401)
    scripted = t.scripted_openai(echo)
    client = openai.OpenAI(
        api_key=t.TEST_KEY,
        base_url=t.BASE_OPENAI,
        max_retries=0,
        default_query={"api_key": query_key, "page": "7"},
        http_client=httpx2.Client(transport=scripted.script.transport()),
    )
    kwargs = {"model": "gpt-x", "messages": [], "extra_query": {"Password": short}}
    with cassettes.use(tmp_path / "c.json", mode="record"), pytest.raises(openai.AuthenticationError):
        adapters.complete(client, kwargs)
    text = (tmp_path / "c.json").read_text()
    assert query_key in str(scripted.script.requests[0].url)  # it was sent
    assert query_key not in text and "Password=pw1" not in text
    (path,) = [e["path"] for c in json.loads(text)["calls"] for e in c["http"]]
    assert path == "/v1/chat/completions?api_key=[redacted]&page=7&Password=[redacted]"
