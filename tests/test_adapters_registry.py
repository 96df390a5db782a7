"""The provider registry ``instrument()`` walks, SDK versions it does not know, and responses it cannot read.

Real openai clients over the mock transport; an SDK version we do not know is made by taking a method
or a module away from the installed SDK for the length of one test.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from relay_runtime import Recorder, adapters
from relay_runtime import conventions as cv
from relay_runtime.adapters import openai_anthropic, providers, wrapping
from relay_runtime.adapters import testing as t
from relay_runtime.adapters.dispatch import CHAT_COMPLETIONS
from relay_runtime.adapters.endpoints import Endpoint
from relay_runtime.adapters.instrument import is_instrumented
from relay_runtime.adapters.openai_chat import OpenAIChatCodec
from relay_runtime.adapters.wrapping import UnknownSDKWarning
from relay_runtime.urls import server_address

COMPLETIONS = openai.resources.chat.completions.completions.Completions


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(wrapping, "_warned", set())  # each test sees its own first warning
    yield
    adapters.uninstrument()


def chat(client: Any) -> Any:
    return client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])


def test_a_renamed_sdk_method_is_skipped_with_one_warning_naming_it(
    monkeypatch: pytest.MonkeyPatch, relay_turn: Any, relay_events: Recorder
) -> None:
    monkeypatch.delattr(COMPLETIONS, "parse")  # as if the SDK had renamed it
    with pytest.warns(UnknownSDKWarning) as caught:
        wrapped = adapters.instrument()
    named = [str(w.message) for w in caught]
    assert named == [
        "relay-runtime: openai.resources.chat.completions.completions.Completions.parse is not in the installed "
        "SDK (a version this library does not know); it is left untraced"
    ]
    assert "openai.resources.chat.completions.completions.Completions.create" in wrapped
    adapters.uninstrument()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapters.instrument()  # said once per process, not at every instrument()
    script = t.Script([t.json_reply(t.chat_completion_body("traced"))])
    assert chat(t.openai_client(script)).choices[0].message.content == "traced"
    assert len(relay_events.ends(relay_kind=cv.ATTEMPT)) == 1  # what is still there is traced


def test_a_moved_sdk_module_or_class_is_skipped_with_a_warning_never_an_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = (
        ("openai.resources.chat.completions.gone", "Completions", CHAT_COMPLETIONS),
        ("openai.resources.chat.completions.completions", "Renamed", CHAT_COMPLETIONS),
    )
    monkeypatch.setattr(openai_anthropic, "SDK_CLASSES", openai_anthropic.SDK_CLASSES + moved)
    with pytest.warns(UnknownSDKWarning) as caught:
        wrapped = adapters.instrument()
    assert sorted(str(w.message).split(" is not")[0] for w in caught) == [
        "relay-runtime: openai.resources.chat.completions.completions.Renamed",
        "relay-runtime: openai.resources.chat.completions.gone",
    ]
    assert any(name.endswith("Completions.create") for name in wrapped)


def test_a_provider_whose_sdk_is_not_installed_is_skipped_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "botocore" or m.startswith("botocore.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "botocore", None)  # import botocore now fails, as when it is absent
    monkeypatch.setitem(sys.modules, "botocore.client", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped = adapters.instrument()
    assert wrapped and not any("botocore" in name for name in wrapped)


class _Recording:
    """A provider adapter for a client type of its own: the registry must hand that client to it alone."""

    NAME = "test.provider"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.on = False

    def is_client(self, client: Any) -> bool:
        return isinstance(client, SimpleNamespace) and getattr(client, "kind", None) == "test"

    def instrument_client(self, client: Any, *, include_usage: bool = False, provider: Endpoint | None = None) -> Any:
        self.calls.append(("client", provider.provider if provider else None))
        client.instrumented = True
        return client

    def uninstrument_client(self, client: Any) -> Any:
        client.instrumented = False
        return client

    def is_client_instrumented(self, client: Any) -> bool:
        return bool(getattr(client, "instrumented", False))

    def instrument_classes(self, *, include_usage: bool = False) -> list[str]:
        self.on = True
        return ["test.provider.Client.send"]

    def uninstrument_classes(self) -> None:
        self.on = False

    def classes_instrumented(self) -> bool:
        return self.on


def test_a_registered_provider_is_walked_by_instrument_and_asked_first_for_its_clients() -> None:
    adapter = _Recording()
    providers.register(adapter)
    try:
        client = SimpleNamespace(kind="test")
        assert adapters.instrument(client, provider="groq") is client
        assert adapter.calls == [("client", "groq")]
        assert is_instrumented(client)
        adapters.uninstrument(client)
        assert client.instrumented is False
        wrapped = adapters.instrument()
        assert "test.provider.Client.send" in wrapped and adapter.on
        assert any(name.startswith("openai.") for name in wrapped)  # the built-in ones too
        adapters.uninstrument()
        assert adapter.on is False
    finally:
        providers.unregister(adapter)
    assert adapter not in providers.adapters()


def test_an_object_no_provider_knows_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="cannot instrument Thing: it is not a client of a provider SDK"):
        adapters.instrument(type("Thing", (), {})())


JUNK_BODIES = [
    {"choices": 7},
    {"choices": [7]},
    {"choices": [{"message": 7}]},
    {"choices": [{"message": {"tool_calls": [7]}}]},
    {"choices": [{"message": {"content": [1, 2]}}]},
    {"usage": "junk"},
    {"usage": {"prompt_tokens": "x"}},
    {"model": 5},
]


@pytest.mark.parametrize("junk", JUNK_BODIES, ids=[str(i) for i in range(len(JUNK_BODIES))])
def test_a_junk_response_reaches_the_caller_as_the_sdk_built_it_and_the_call_is_recorded(
    junk: dict[str, Any], relay_turn: Any, relay_events: Recorder
) -> None:
    body = {"id": "x", "object": "chat.completion", "model": "gpt-test", **junk}
    script = t.Script([t.json_reply(body)])  # the SDK builds its response without validating it
    answer = chat(adapters.instrument(t.openai_client(script)))
    bare = chat(t.openai_client(t.Script([t.json_reply(body)])))
    assert repr(answer) == repr(bare)
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "success"


def test_a_response_the_codec_fails_on_reaches_the_caller_and_the_decode_error_is_counted(
    monkeypatch: pytest.MonkeyPatch, relay_turn: Any, relay_events: Recorder
) -> None:
    relay, _turn = relay_turn

    def unreadable(self: Any, response: Any) -> Any:
        raise ValueError("a response shape this codec does not know")

    monkeypatch.setattr(OpenAIChatCodec, "annotate_response", unreadable)
    script = t.Script([t.json_reply(t.chat_completion_body("still answered"))])
    answer = chat(adapters.instrument(t.openai_client(script)))
    assert answer.choices[0].message.content == "still answered"
    (attempt,) = relay_events.ends(relay_kind=cv.ATTEMPT)
    assert attempt.outcome == "success"
    assert attempt.annotated_response is None  # a subscriber reading it gets nothing, and no exception
    counts = relay.diagnostics()
    assert counts["decode_errors"] == 1 and counts["bookkeeping_errors"] == 1


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("https://bedrock-runtime.eu-west-3.amazonaws.com", "bedrock-runtime.eu-west-3.amazonaws.com"),
        ("http://127.0.0.1:8123/v1", "127.0.0.1:8123"),
        ("https://user:s3cret@gemini.example:8443/x?key=abc", "gemini.example:8443"),
        ("http://[::1]:9000", "::1:9000"),
        ("not a url", None),
        ("http://host:99999", None),
        (None, None),
    ],
)
def test_the_server_address_of_an_endpoint_url_never_carries_its_credentials(url: Any, address: Any) -> None:
    assert server_address(url) == address
