"""The cassette in use is context-local: concurrent uses never mix, and a call with no cassette of its own
never silently goes to another's (or, under the pytest plugin, to a provider)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from relay_runtime import ContextExecutor, adapters, cassettes
from relay_runtime.adapters import testing as t

pytest_plugins = ["pytester"]


class Echo:
    """A provider that answers each question with itself (so a recording shows whose call it was)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        question = json.loads(request.content)["messages"][0]["content"]
        self.sent.append(question)
        return httpx2.Response(200, json=t.chat_completion_body(f"re: {question}"))

    def client(self) -> openai.OpenAI:
        http = httpx2.Client(transport=httpx2.MockTransport(self._answer))
        return openai.OpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)

    def aclient(self) -> openai.AsyncOpenAI:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self._answer))
        return openai.AsyncOpenAI(api_key=t.TEST_KEY, base_url=t.BASE_OPENAI, max_retries=0, http_client=http)


def ask(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}]}


def questions(path: Path) -> list[str]:
    return [call["request"]["messages"][0]["content"] for call in json.loads(path.read_text())["calls"]]


def test_two_tasks_each_in_their_own_use_record_into_their_own_cassette(tmp_path) -> None:
    echo = Echo()
    aclient = echo.aclient()

    async def agent(name: str, started: asyncio.Event, other: asyncio.Event) -> list[str]:
        with cassettes.use(tmp_path / f"{name}.json", mode="record"):
            started.set()
            await other.wait()  # both uses are open before either calls
            answers = []
            for i in range(5):
                reply = await adapters.acomplete(aclient, ask(f"{name}-{i}"))
                answers.append(reply.choices[0].message.content)
                await asyncio.sleep(0)  # interleave with the other task
            return answers

    async def main() -> list[list[str]]:
        a, b = asyncio.Event(), asyncio.Event()
        return list(await asyncio.gather(agent("A", a, b), agent("B", b, a)))

    assert asyncio.run(main()) == [[f"re: A-{i}" for i in range(5)], [f"re: B-{i}" for i in range(5)]]
    assert questions(tmp_path / "A.json") == [f"A-{i}" for i in range(5)]
    assert questions(tmp_path / "B.json") == [f"B-{i}" for i in range(5)]
    assert cassettes.current() is None


def test_two_threads_each_in_their_own_use_replay_their_own_cassette(tmp_path) -> None:
    echo = Echo()
    for name in ("A", "B"):
        with cassettes.use(tmp_path / f"{name}.json", mode="record"):
            adapters.complete(echo.client(), ask(name))
    offline = Echo()
    client = offline.client()
    barrier = threading.Barrier(2)
    answers: dict[str, str] = {}

    def agent(name: str) -> None:
        with cassettes.use(tmp_path / f"{name}.json"):
            barrier.wait(timeout=10)
            answers[name] = adapters.complete(client, ask(name)).choices[0].message.content
            barrier.wait(timeout=10)  # neither use closes before both called

    threads = [threading.Thread(target=agent, args=(name,)) for name in ("A", "B")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert answers == {"A": "re: A", "B": "re: B"} and offline.sent == []


def test_tasks_and_handed_threads_started_inside_a_use_inherit_it_while_another_use_is_open(tmp_path) -> None:
    echo = Echo()
    client, aclient = echo.client(), echo.aclient()
    other = cassettes.use(tmp_path / "other.json", mode="record")
    release = threading.Event()

    def hold_other() -> None:  # another thread's use, open the whole time
        with other:
            release.wait(timeout=30)

    holder = threading.Thread(target=hold_other)
    holder.start()
    try:

        async def main() -> None:
            with cassettes.use(tmp_path / "mine.json", mode="record"):
                await asyncio.gather(*(adapters.acomplete(aclient, ask(f"task-{i}")) for i in range(3)))
                with ContextExecutor(max_workers=2) as pool:
                    list(pool.map(lambda q: adapters.complete(client, ask(q)), ["pool-0", "pool-1"]))

        asyncio.run(main())
    finally:
        release.set()
        holder.join(timeout=30)
    assert sorted(questions(tmp_path / "mine.json")) == ["pool-0", "pool-1", "task-0", "task-1", "task-2"]
    assert not (tmp_path / "other.json").exists() or questions(tmp_path / "other.json") == []


def test_a_thread_with_no_cassette_of_its_own_goes_to_the_only_one_in_use_and_is_refused_among_several(
    tmp_path,
) -> None:
    echo = Echo()
    client = echo.client()
    outcome: list[Any] = []

    def bare_thread_call() -> None:  # a thread nobody handed the context
        try:
            outcome.append(adapters.complete(client, ask("worker")).choices[0].message.content)
        except cassettes.CassetteError as exc:
            outcome.append(exc)

    def run_in_thread() -> None:
        thread = threading.Thread(target=bare_thread_call)
        thread.start()
        thread.join(timeout=30)

    with cassettes.use(tmp_path / "only.json", mode="record"):
        run_in_thread()
    assert outcome == ["re: worker"] and questions(tmp_path / "only.json") == ["worker"]

    outcome.clear()
    entered, release = threading.Event(), threading.Event()

    def hold(path: Path) -> None:
        with cassettes.use(path, mode="record"):
            entered.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold, args=(tmp_path / "held.json",))
    holder.start()
    entered.wait(timeout=30)
    try:
        with cassettes.use(tmp_path / "mine.json", mode="record"):
            run_in_thread()
    finally:
        release.set()
        holder.join(timeout=30)
    (error,) = outcome
    assert isinstance(error, cassettes.CassetteError)
    assert "no cassette is in use while 2 are" in str(error) and "held.json" in str(error)
    assert echo.sent == ["worker"]  # the refused call never reached the provider


PYTEST_MODULE = """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

SCRIPT = t.Script([t.json_reply(t.chat_completion_body("live")) for _ in range(4)])

def ask():
    return adapters.complete(t.openai_client(SCRIPT), {"model": "m", "messages": [{"role": "user", "content": "q"}]})

@pytest.fixture(scope="module")
def warmed():
    return ask().choices[0].message.content  # set up before the test's cassette is in use

@pytest.mark.relay_cassette("agent")
def test_marked(warmed):
    assert warmed == "live"

def test_unmarked_calls_go_live():
    assert ask().choices[0].message.content == "live"

def test_nothing_was_sent_for_the_marked_test():
    assert len(SCRIPT.requests) == 1  # the unmarked test's call only
"""


def test_under_the_plugin_a_call_outside_the_tests_cassette_raises_instead_of_going_live(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_agent=PYTEST_MODULE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*CassetteError*expects a cassette, but none is in use here*"])
