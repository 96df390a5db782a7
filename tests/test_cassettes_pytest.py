"""The pytest marker and --relay-record, run in a child pytest over a real SDK client on the mock transport."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

TEST_MODULE = """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

ANSWER = {answer!r}

def client():
    return t.openai_client(t.Script([t.json_reply(t.chat_completion_body(ANSWER))]))

@pytest.mark.relay_cassette
def test_default_name(relay_cassette):
    reply = adapters.complete(client(), {{"model": "m", "messages": [{{"role": "user", "content": "hi"}}]}})
    assert reply.choices[0].message.content == "live answer"
    assert relay_cassette is not None

@pytest.mark.relay_cassette("shared")
def test_named():
    reply = adapters.complete(client(), {{"model": "m", "messages": [{{"role": "user", "content": "{prompt}"}}]}})
    assert reply.choices[0].message.content == "live answer"

def test_unmarked(relay_cassette):
    assert relay_cassette is None
"""


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def write(pytester: pytest.Pytester, *, answer: str, prompt: str = "named") -> None:
    pytester.makepyfile(test_agent=TEST_MODULE.format(answer=answer, prompt=prompt))


def test_record_then_replay_offline_then_a_changed_prompt_fails(pytester: pytest.Pytester) -> None:
    write(pytester, answer="live answer")
    # Default: replay only; nothing is recorded yet, so both marked tests error with how to record.
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*does not exist: record it once*--relay-record=new*"])

    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new")
    result.assert_outcomes(passed=3)
    base = pytester.path / "cassettes" / "test_agent"
    assert sorted(p.name for p in base.iterdir()) == ["shared.json", "test_default_name.json"]
    recorded = json.loads((base / "shared.json").read_text())
    assert recorded["calls"][0]["request"]["messages"] == [{"role": "user", "content": "named"}]

    # The provider now answers differently: a replay still gives the recorded answer, offline.
    write(pytester, answer="provider changed")
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)

    write(pytester, answer="live answer", prompt="renamed")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*CassetteMiss*", '*-*"content": "named"', '*+*"content": "renamed"'])
    assert "ERROR" not in result.stdout.str()  # the miss fails the test once, not again at teardown

    # --relay-record=all records every call afresh.
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=3)
    recorded = json.loads((base / "shared.json").read_text())
    assert recorded["calls"][0]["request"]["messages"] == [{"role": "user", "content": "renamed"}]


def test_bad_marker_arguments_are_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.relay_cassette("../escape")
def test_path():
    pass

@pytest.mark.relay_cassette(speed="fast")
def test_option():
    pass
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*relay_cassette name must be a plain file name*'../escape'*"])
    result.stdout.fnmatch_lines(["*relay_cassette got unknown options*speed*"])


def test_the_example_agent_test_runs_offline_on_its_committed_cassette() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # the discard port: a call that got out would fail
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/test_weather_agent.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_parametrized_ids_that_sanitize_alike_get_their_own_cassettes(pytester: pytest.Pytester) -> None:
    """Ids differing only in characters a file name cannot hold (or too long for one) never share a cassette."""
    pytester.makepyfile(
        test_ids="""
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

@pytest.mark.relay_cassette
@pytest.mark.parametrize("city", ["a/b", "a b", "a:b", "..", "x" * 300, "plain"])
def test_city(city):
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body("live " + city[:5]))]))
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": city}]})
    assert reply.choices[0].message.content == "live " + city[:5]
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=6)
    folder = pytester.path / "cassettes" / "test_ids"
    files = sorted(folder.iterdir())
    assert len(files) == 6 and all(len(f.name) < 150 for f in files)
    assert folder / "test_city-plain.json" in files  # a plain id keeps its readable name
    contents = {f.name: json.loads(f.read_text())["calls"][0]["request"]["messages"][0]["content"] for f in files}
    assert sorted(contents.values()) == sorted(["a/b", "a b", "a:b", "..", "x" * 300, "plain"])
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=6)  # each replays its own


def test_same_named_tests_in_two_classes_get_their_own_cassettes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_classes="""
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

def ask(city):
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body("live " + city))]))
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": city}]})
    assert reply.choices[0].message.content == "live " + city

class TestParis:
    @pytest.mark.relay_cassette
    def test_weather(self):
        ask("Paris")

class TestOslo:
    @pytest.mark.relay_cassette
    def test_weather(self):
        ask("Oslo")
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=2)
    folder = pytester.path / "cassettes" / "test_classes"
    assert sorted(f.name for f in folder.iterdir()) == ["TestOslo.test_weather.json", "TestParis.test_weather.json"]
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


# The start of a test module whose tests each ask one question and expect their own answer back.
ASKING = """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

def ask(city, answer):
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body(answer))]))
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": city}]})
    assert reply.choices[0].message.content == answer
"""


# A parametrized test and a test named as the older scheme named its cassette, each with its own answer.
ALIKE = ASKING + """
@pytest.mark.relay_cassette
@pytest.mark.parametrize("city", ["a"])
def test_x(city):
    ask("Paris", "sunny")

@pytest.mark.relay_cassette
def test_x_a():
    ask("Paris", "rainy")
"""


def test_a_parametrized_test_and_one_named_like_it_get_their_own_cassettes(pytester: pytest.Pytester) -> None:
    """``test_x[a]`` and ``test_x_a`` were both ``test_x_a.json``: each replayed the other's recordings."""
    pytester.makepyfile(
        test_alike=ALIKE
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=2)
    folder = pytester.path / "cassettes" / "test_alike"
    assert sorted(f.name for f in folder.iterdir()) == ["test_x-a.json", "test_x_a.json"]
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)  # each its own answer


def test_the_older_name_is_not_taken_from_a_test_this_run_did_not_select(pytester: pytest.Pytester) -> None:
    """Run alone (a node id, ``-k``), ``test_x[a]`` took ``test_x_a.json``, the cassette of ``test_x_a`` (not
    collected this run), for its own older one: it replayed that test's answers, and recorded into its file."""
    pytester.makepyfile(
        test_alike=ALIKE + """
class TestY:
    @pytest.mark.relay_cassette
    @pytest.mark.parametrize("city", ["a"])
    def test_y(self, city):
        ask("Paris", "sunny")

    @pytest.mark.relay_cassette
    def test_y_a(self):
        ask("Paris", "rainy")
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=4)
    folder = pytester.path / "cassettes" / "test_alike"
    (folder / "test_x-a.json").unlink()  # a parametrized test new since the cassettes were recorded
    (folder / "TestY.test_y-a.json").unlink()
    only = "not test_x_a and not test_y_a"
    alone = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new", "-k", only)
    alone.assert_outcomes(passed=2)  # each recorded its own answer, and test_x_a's cassette is as it was
    assert sorted(f.name for f in folder.iterdir()) == [
        "TestY.test_y-a.json", "TestY.test_y_a.json", "test_x-a.json", "test_x_a.json",
    ]  # fmt: skip


def test_a_cassette_recorded_under_the_older_name_is_still_found(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_old="""
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

@pytest.mark.relay_cassette
@pytest.mark.parametrize("city", ["Oslo"])
def test_weather(city):
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body("live " + city))]))
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": city}]})
    assert reply.choices[0].message.content == "live " + city
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=1)
    folder = pytester.path / "cassettes" / "test_old"
    (folder / "test_weather-Oslo.json").rename(folder / "test_weather_Oslo.json")  # as an older version named it
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)  # replayed from it
    assert sorted(f.name for f in folder.iterdir()) == ["test_weather_Oslo.json"]


# Two tests sharing one cassette (a module's pytestmark), each asking its own question.
SHARED_MODULE = """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

pytestmark = pytest.mark.relay_cassette("agent")

def ask(city):
    client = t.openai_client(t.Script([t.json_reply(t.chat_completion_body("live " + city))]))
    reply = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": city}]})
    assert reply.choices[0].message.content == "live " + city

def test_paris():
    ask("Paris")

def test_oslo():
    ask("Oslo")
"""


def test_record_all_keeps_every_test_of_a_shared_cassette(pytester: pytest.Pytester) -> None:
    """--relay-record=all starts a shared cassette afresh once per run, not once per test (that kept the last only)."""
    pytester.makepyfile(test_shared=SHARED_MODULE)
    path = pytester.path / "cassettes" / "test_shared" / "agent.json"
    for _ in range(2):  # the second run replaces the first's recordings, it does not add to them
        pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=all").assert_outcomes(passed=2)
        calls = json.loads(path.read_text())["calls"]
        assert [c["request"]["messages"][0]["content"] for c in calls] == ["Paris", "Oslo"]
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_under_pytest_a_failed_tests_passing_failures_are_recorded_afresh_next_run(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_flaky="""
import pytest
from relay_runtime import adapters
from relay_runtime.adapters import testing as t

OUTAGE = [True]

@pytest.mark.relay_cassette("agent")
def test_agent():
    reply = t.error(503, "overloaded") if OUTAGE[0] else t.json_reply(t.chat_completion_body("fine"))
    client = t.openai_client(t.Script([reply]), max_retries=0)
    answer = adapters.complete(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.choices[0].message.content == "fine"
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new").assert_outcomes(failed=1)
    assert not (pytester.path / "cassettes" / "test_flaky" / "agent.json").exists()  # the outage is not kept
    pytester.makeconftest("import test_flaky\ntest_flaky.OUTAGE[0] = False\n")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--relay-record=new").assert_outcomes(passed=1)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
