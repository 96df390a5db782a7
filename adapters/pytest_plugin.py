"""pytest fixtures: real OpenAI and Anthropic clients answering from a script.

def test_x(scripted_openai):
    scripted_openai.add(json_reply(chat_completion_body("hi")))
    scripted_openai.client.chat.completions.create(model="m", messages=[])

The SDK retries failed requests by itself (``max_retries``, the SDK's default 2);
``@pytest.mark.relay_scripted(max_retries=0)`` on a test (or its class or module)
chooses another number for both fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import MISSING

if MISSING is None:
    from . import testing
    from .instrument import classes_include_usage, instrument, is_instrumented, uninstrument

MARKER = "relay_scripted"
_DEFAULT_MAX_RETRIES = 2  # both SDKs' own default


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(max_retries=N): the SDK retries of scripted_openai/anthropic")


def _max_retries(request: pytest.FixtureRequest) -> int:
    if MISSING is not None:
        pytest.fail(
            f"{request.fixturename} needs the provider SDKs: pip install 'relay-runtime[openai,anthropic]' ({MISSING})",
            pytrace=False,
        )
    marker = request.node.get_closest_marker(MARKER)
    value = marker.kwargs.get("max_retries", _DEFAULT_MAX_RETRIES) if marker is not None else _DEFAULT_MAX_RETRIES
    if type(value) is not int or value < 0:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}(max_retries=...) must be an int >= 0, got {value!r}")
    return value


@pytest.fixture(autouse=True)
def _relay_sdk_classes_as_found() -> Iterator[None]:
    """The SDK classes as the test found them: instrumented by it (and not put back, say because it failed),
    put back; instrumented before it (by a session fixture, a conftest) and uninstrumented by it (or wrapped again
    with another include_usage), wrapped again as they were, for the tests after it."""
    if MISSING is not None:  # a core-only install: nothing to instrument
        yield
        return
    before = is_instrumented()
    usage = classes_include_usage()
    yield
    after = is_instrumented()
    if not before and after:
        uninstrument()
    elif before and (not after or classes_include_usage() != usage):
        if after:  # wrapped again by the test with its own include_usage: the later tests' requests would differ
            uninstrument()
        instrument(include_usage=usage)


@pytest.fixture()
def scripted_openai(request: pytest.FixtureRequest) -> Iterator[testing.Scripted]:
    retries = _max_retries(request)  # first: it says what to install when the SDKs are not
    scripted = testing.scripted_openai(max_retries=retries)
    try:
        yield scripted
    finally:
        scripted.client.close()


@pytest.fixture()
def scripted_anthropic(request: pytest.FixtureRequest) -> Iterator[testing.Scripted]:
    retries = _max_retries(request)  # first: it says what to install when the SDKs are not
    scripted = testing.scripted_anthropic(max_retries=retries)
    try:
        yield scripted
    finally:
        scripted.client.close()
