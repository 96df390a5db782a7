"""The scripted-client fixtures: the SDK's own retries are the test's to choose."""

from __future__ import annotations

import openai
import pytest

from relay_runtime.adapters import testing as t


def test_default_is_the_sdks_own_retry_count(scripted_openai) -> None:
    scripted_openai.add(t.error(500), t.json_reply(t.chat_completion_body("second try")))
    reply = scripted_openai.client.chat.completions.create(model="m", messages=[])
    assert reply.choices[0].message.content == "second try"
    assert len(scripted_openai.script.requests) == 2


@pytest.mark.relay_scripted(max_retries=0)
def test_a_test_chooses_max_retries(scripted_openai, scripted_anthropic) -> None:
    assert scripted_openai.client.max_retries == scripted_anthropic.aclient.max_retries == 0
    scripted_openai.add(t.error(500), t.json_reply(t.chat_completion_body("never reached")))
    with pytest.raises(openai.InternalServerError):
        scripted_openai.client.chat.completions.create(model="m", messages=[])
    assert len(scripted_openai.script.requests) == 1


pytest_plugins = ["pytester"]


def test_a_test_that_instruments_the_sdk_classes_leaves_them_as_it_found_them(pytester: pytest.Pytester) -> None:
    """A test failing (or forgetting) after instrument() does not leave every later test's clients traced."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters.instrument import is_instrumented

@pytest.fixture(scope="session", autouse=True)
def session_wide():  # on before any test: stays on
    yield
"""
    )
    pytester.makepyfile(
        test_leak="""
from relay_runtime import adapters
from relay_runtime.adapters.instrument import is_instrumented
from relay_runtime.adapters import testing as t

def test_instruments_then_fails(scripted_openai):
    adapters.instrument()
    raise RuntimeError("failed before uninstrument()")

def test_forgets(scripted_openai):
    adapters.instrument()

def test_next(relay_turn, relay_events, scripted_openai):
    assert not is_instrumented()
    scripted_openai.add(t.json_reply(t.chat_completion_body("x")))
    scripted_openai.client.chat.completions.create(model="m", messages=[])
    assert relay_events.ends(relay_kind="llm_attempt") == []  # a plain client is not traced
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2, failed=1)
    pytester.makeconftest(
        """
import pytest
from relay_runtime import adapters
from relay_runtime.adapters.instrument import is_instrumented

@pytest.fixture(scope="session", autouse=True)
def session_wide():
    adapters.instrument()
    yield
    adapters.uninstrument()
"""
    )
    pytester.makepyfile(
        test_session="""
from relay_runtime import adapters
from relay_runtime.adapters.instrument import is_instrumented

def test_one():
    assert is_instrumented()

def test_two():
    adapters.instrument()  # already on: still on for the next test
    assert is_instrumented()

def test_three():
    assert is_instrumented()
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "test_session.py").assert_outcomes(passed=3)
    assert not _is_instrumented()


# What a test does to the SDK classes a session fixture wrapped with include_usage=True.
UNDOINGS = {
    # Turned off: every later test's calls went untraced.
    "off": "adapters.uninstrument()",
    # Wrapped again with its own include_usage: every later test's streams went with its options, not the session's.
    "again": "adapters.uninstrument()\n    adapters.instrument()",
}


@pytest.mark.parametrize("undoing", sorted(UNDOINGS))
def test_a_test_that_uninstruments_what_a_session_fixture_instrumented_leaves_it_on_for_the_next(
    pytester: pytest.Pytester, undoing: str
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
import pytest
from relay_runtime import adapters

@pytest.fixture(scope="session", autouse=True)
def session_wide():
    adapters.instrument(include_usage=True)
    yield
    adapters.uninstrument()
"""
    )
    pytester.makepyfile(
        test_undo=f"""
from relay_runtime import adapters
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.instrument import is_instrumented

def test_undoes():
    {UNDOINGS[undoing]}

def test_next(relay_turn, relay_events, scripted_openai):
    assert is_instrumented()
    chunks = t.chat_chunks(["x"], usage={{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
    scripted_openai.add(t.sse_reply(t.openai_chat_sse(chunks)))
    for _chunk in scripted_openai.client.chat.completions.create(model="m", messages=[], stream=True):
        pass
    (end,) = relay_events.ends(relay_kind="llm_attempt")  # traced, as the session fixture asked
    sent = scripted_openai.script.bodies()[0]
    assert sent["stream_options"] == {{"include_usage": True}}  # and with its options
"""
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "test_undo.py").assert_outcomes(passed=2)
    assert not _is_instrumented()


def _is_instrumented() -> bool:
    from relay_runtime.adapters.instrument import is_instrumented

    return bool(is_instrumented())
