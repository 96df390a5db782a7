"""What ``auto`` keeps: what a later run needs to replay a run that worked, not a passing failure frozen in.

``record`` keeps every try as it happened (tests in test_cassettes.py); ``auto`` drops a transient
failure (429, 5xx, a lost connection, a stream cut short) that the caller's own retry then got past,
and the transient failures of a session that failed; a transient failure that was the final outcome of
a session that went on (the behaviour under test) is kept, as are the SDK's retries inside a call that
got its answer and every other error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from cassette_support import APIS, Offline

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t

API = APIS["chat"]
QUESTION = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello"}]}


def _client(*replies: t.Reply | BaseException, max_retries: int = 0) -> Any:
    """A real OpenAI client whose transport gives ``replies`` in order (an exception is raised, as a lost link)."""
    pending = list(replies)

    def handler(request: httpx2.Request) -> httpx2.Response:
        reply = pending.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply.response()

    client = t.openai_client(t.Script(), max_retries=max_retries)
    client._client._transport = httpx2.MockTransport(handler)
    return client


def _ask_retrying(client: Any, tries: int = 3) -> str:
    """An agent's own retry around the SDK call."""
    for attempt in range(tries):
        try:
            return str(adapters.complete(client, QUESTION).choices[0].message.content)
        except (openai.APIStatusError, openai.APIConnectionError):
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _offline(max_retries: int = 0) -> Any:
    """As the run that recorded, but any request that reaches the network fails the test."""
    return Offline().clients("openai")[0].with_options(max_retries=max_retries)


def _statuses(path: Path) -> list[list[Any]]:
    calls = json.loads(path.read_text())["calls"]
    return [[x.get("status", x.get("error", {}).get("type")) for x in call["http"]] for call in calls]


FAILURES = {
    "429": lambda: t.error(429, "rate limited"),
    "503": lambda: t.error(503, "overloaded"),
    "connection": lambda: httpx2.ConnectError("connection reset by peer"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_auto_drops_a_transient_failure_the_callers_retry_got_past(tmp_path, failure):
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="auto"):
        assert _ask_retrying(_client(FAILURES[failure](), API.reply("the answer"))) == "the answer"
    # A later run is the live one as it would go now: the answer on the first try, no failure to get past.
    with cassettes.use(path):
        assert adapters.complete(_offline(), QUESTION).choices[0].message.content == "the answer"
    assert _statuses(path) == [[200]]


def test_auto_keeps_the_sdks_own_retries_inside_a_call_that_got_its_answer(tmp_path):
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="auto"):
        assert _ask_retrying(_client(t.error(500), API.reply("the answer"), max_retries=1)) == "the answer"
    assert _statuses(path) == [[500, 200]]
    with cassettes.use(path):
        assert adapters.complete(_offline(max_retries=1), QUESTION).choices[0].message.content == "the answer"


def test_auto_keeps_a_transient_failure_that_was_the_final_outcome_the_run_saw(tmp_path):
    # The agent's handling of a provider that stays down is what this run exercised: it replays as it went.
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="auto"), pytest.raises(openai.RateLimitError):
        _ask_retrying(_client(*(t.error(429, "rate limited") for _ in range(2))), tries=2)
    assert _statuses(path) == [[429], [429]]
    with cassettes.use(path), pytest.raises(openai.RateLimitError) as replayed:
        _ask_retrying(_offline(), tries=2)
    assert replayed.value.status_code == 429 and "rate limited" in str(replayed.value)


def test_auto_does_not_keep_the_transient_failures_of_a_run_that_failed(tmp_path):
    # The run failed on a passing outage: kept, it would fail every later run that a live call would pass.
    path = tmp_path / "c.json"
    with pytest.raises(openai.InternalServerError), cassettes.use(path, mode="auto"):
        assert _ask_retrying(_client(API.reply("kept")), tries=1) == "kept"
        adapters.complete(_client(t.error(503)), {**QUESTION, "temperature": 0.5})
    assert _statuses(path) == [[200]]  # its answered call stays
    with cassettes.use(path, mode="auto"):
        assert _ask_retrying(_offline()) == "kept"
        again = adapters.complete(_client(API.reply("live now")), {**QUESTION, "temperature": 0.5})
        assert again.choices[0].message.content == "live now"


def test_auto_keeps_an_error_that_is_the_providers_answer(tmp_path):
    # A 400 is not passing: the next live run would get it too.
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="auto"):
        with pytest.raises(openai.BadRequestError):
            _ask_retrying(_client(t.error(400, "bad temperature")), tries=1)
        assert _ask_retrying(_client(API.reply("fine"))) == "fine"
    assert _statuses(path) == [[400], [200]]


def test_record_keeps_every_try_as_it_happened(tmp_path):
    path = tmp_path / "c.json"
    with cassettes.use(path, mode="record"):
        assert _ask_retrying(_client(t.error(429), API.reply("the answer"))) == "the answer"
    assert _statuses(path) == [[429], [200]]

