"""What LangChain hands the relay's callbacks (a chain's inputs and outputs, a tool's arguments) is
recorded without the credentials it may carry: LangChain's own secret fields, credential keys, and
the key of a client the relay remembered."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relay_runtime import redaction
from relay_runtime.events import FIELDS
from relay_runtime.integrations.otel import OTelExporter
from tests.framework_support import need

runnables = need("langchain_core.runnables")
serializable = need("langchain_core.load.serializable")
tools_mod = need("langchain_core.tools")

from relay_runtime.integrations.langchain import RelayCallbackHandler  # noqa: E402

SERVICE_TOKEN = "svc-token-QwErTyUiOp"
PASSWORD = "pw-AsDfGhJkLz"
CLIENT_KEY = "sk-remembered-ZxCvBnM"
GIVEN_KEY = "sk-given-PoIuYtReWq"


class ServiceHandle(serializable.Serializable):  # type: ignore[misc,name-defined]
    """A LangChain object holding a secret in a plain ``str`` field, declared through ``lc_secrets``."""

    endpoint: str
    token: str

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True

    @property
    def lc_secrets(self) -> dict[str, str]:
        return {"token": "SERVICE_TOKEN"}


@dataclasses.dataclass
class Login:
    user: str
    password: str
    extra: ClassVar[str] = "class-level"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


def _records(events: Any) -> str:
    return " ".join(repr(getattr(e, name)) for e in events for name in FIELDS)


def test_chain_inputs_and_outputs_hold_no_credentials(relay_turn, relay_events) -> None:
    relay, _turn = relay_turn
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exporter_sub = OTelExporter(provider, capture_content=True).attach(relay)
    redaction.remember_secret(CLIENT_KEY)

    def connect(inputs: dict[str, Any]) -> dict[str, Any]:
        assert inputs["api_key"] == GIVEN_KEY  # the step itself gets its input as it was
        return {
            "service": ServiceHandle(endpoint="https://svc.example", token=SERVICE_TOKEN),
            "login": Login("ada", PASSWORD),
            "note": f"connected with {CLIENT_KEY}",
        }

    chain = runnables.RunnableLambda(connect).with_config(run_name="connect")
    try:
        out = chain.invoke({"api_key": GIVEN_KEY, "q": "keep"}, config={"callbacks": [RelayCallbackHandler()]})
    finally:
        exporter_sub.detach()
    assert out["service"].token == SERVICE_TOKEN and out["login"].password == PASSWORD

    text = _records(relay_events) + json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])
    for secret in (GIVEN_KEY, SERVICE_TOKEN, PASSWORD, CLIENT_KEY):
        assert secret not in text, secret
    start = relay_events.starts(name="connect")[0]
    assert start.input == {"api_key": redaction.REDACTED, "q": "keep"}
    output = relay_events.ends(name="connect")[0].output
    service = output["service"]
    # LangChain's own serialised form: the secret stands as its marker (here blanked whole as well, its
    # key being a credential's name), the rest as given.
    assert service["kwargs"]["endpoint"] == "https://svc.example"
    assert service["kwargs"]["token"] == redaction.REDACTED
    assert output["login"] == {"user": "ada", "password": redaction.REDACTED}


def test_tool_arguments_hold_no_credentials(relay_turn, relay_events) -> None:
    @tools_mod.tool
    def sign_in(user: str, password: str) -> str:
        """Sign a user in."""
        return f"welcome {user}"

    assert sign_in.invoke({"user": "ada", "password": PASSWORD}, config={"callbacks": [RelayCallbackHandler()]}) == (
        "welcome ada"
    )
    assert PASSWORD not in _records(relay_events)
    assert relay_events.ends(name="sign_in")[0].output == "welcome ada"


def test_what_a_run_brings_to_its_scopes_metadata_holds_no_remembered_key(relay_turn, relay_events) -> None:
    """The handler's own metadata keys (its framework, the run id) are not read for credentials; what the run
    brought (a tool call's id, a graph node's name) still is."""
    from uuid import uuid4

    redaction.remember_secret(CLIENT_KEY)
    handler = RelayCallbackHandler()
    run = uuid4()
    handler.on_tool_start({"name": "lookup"}, "q", run_id=run, tool_call_id=f"call-{CLIENT_KEY}")
    handler.on_tool_end("found", run_id=run)
    (start,) = relay_events.starts(name="lookup")
    assert start.metadata["langchain.run_id"] == str(run)
    assert CLIENT_KEY not in start.metadata["tool_call_id"]
    assert CLIENT_KEY not in _records(relay_events)


def test_a_run_named_by_something_else_than_text_is_a_scope_named_by_its_text(relay_turn, relay_events) -> None:
    from uuid import uuid4

    handler = RelayCallbackHandler()
    run = uuid4()
    handler.on_chain_start({}, {"q": 1}, run_id=run, name=42)
    handler.on_chain_end({"a": 2}, run_id=run)
    (end,) = relay_events.ends(name="42")
    assert end.outcome == "success" and end.output == {"a": 2}
