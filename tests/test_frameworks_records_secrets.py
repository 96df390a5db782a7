"""What the framework integrations record for a tool call or a request holds no credential, in any sink:
a tool that returns an SDK object (a pydantic model, a dataclass) with an ``api_key`` or ``password``
field; an MCP resource address carrying an access token or user info.

Real ``openai-agents`` (on the scripted mock transport, as in ``test_frameworks_agents``), and a real MCP
client and server in this process. The sinks searched: the events themselves and the JSONL file
(``JsonlWriter`` dumps an object by its fields), beside OTel, the run journal and the ATIF trajectory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from relay_runtime import redaction, session
from relay_runtime.adapters import testing as t
from relay_runtime.events import FIELDS
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber
from relay_runtime.integrations.trajectory import AtifExporter
from relay_runtime.jsonl import JsonlWriter
from tests.framework_support import need
from tests.otel_support import Pipeline
from tests.test_frameworks_agents import run, scripted, sdk_tracing
from tests.test_frameworks_agents_records import PATHS, use

agents = need("agents")

__all__ = ["sdk_tracing"]  # the autouse fixture: only our processor, and everything put back

API_KEY = "sk-issued-QwErTyUiOp"
PASSWORD = "pw-AsDfGhJkLz"
TOKEN = "tok-ZxCvBnMmNb"


class Account(pydantic.BaseModel):
    user: str
    api_key: str


@dataclasses.dataclass
class Login:
    user: str
    password: str


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


class Sinks:
    """Every sink on the relay of ``relay_turn``: the events, a JSONL file, OTel (content on), the journal, ATIF."""

    def __init__(self, relay: Any, events: Any, tmp_path: Path) -> None:
        self.events = events
        self.jsonl_path = tmp_path / "events.jsonl"
        self.jsonl = JsonlWriter(self.jsonl_path)
        self.relay = relay
        relay.subscribers.register(self.jsonl, name="test.jsonl")
        self.pipeline = Pipeline()
        coordinator = session.SESSION_COORDINATOR
        self.otel = OTelExporter(self.pipeline.tracer_provider, capture_content=True).attach(relay)
        self.journal_dir = tmp_path / "sessions"
        self.journal = JournalSubscriber(session_dir=self.journal_dir).attach(coordinator)
        self.atif = AtifExporter(agent_name="agent").attach(coordinator)

    def texts(self) -> dict[str, str]:
        """What each sink holds so far (the journal and ATIF as they stand mid-turn)."""
        self.relay.subscribers.deregister("test.jsonl")
        self.jsonl.close()
        self.otel.shutdown()
        self.journal.close()
        spans = [
            (s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events])
            for s in self.pipeline.finished()
        ]
        files = sorted(p for p in self.journal_dir.rglob("*") if p.is_file())
        return {
            "events": " ".join(repr(getattr(e, name)) for e in self.events for name in FIELDS),
            "jsonl": self.jsonl_path.read_text(),
            "spans": json.dumps(spans),
            "journal": "".join(p.read_text() for p in files),
            "atif": self.atif.export_json("session-1"),
        }


def assert_nowhere(texts: dict[str, str], *secrets: str) -> None:
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} is in {where}"


# -- a tool returning an SDK object ---------------------------------------------------------------


@PATHS
def test_an_agents_tool_returning_a_model_with_a_key_records_it_blanked(
    relay_turn, relay_events, tmp_path, instrumented
) -> None:
    relay, _turn = relay_turn
    use(instrumented)
    sinks = Sinks(relay, relay_events, tmp_path)

    @agents.function_tool
    def open_account(user: str) -> Account:
        """Open an account."""
        return Account(user=user, api_key=API_KEY)

    call = {"call_id": "call-1", "name": "open_account", "arguments": json.dumps({"user": "ada"})}
    scripted(t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done.")))
    agent = agents.Agent(name="helper", model="gpt-test", tools=[open_account])
    assert run(agent, "Open one").final_output == "Done."

    (tool,) = [e for e in relay_events.ends() if e.scope_type == "tool"]
    assert tool.outcome == "success"
    output = tool.output
    shown = output.model_dump() if isinstance(output, pydantic.BaseModel) else output
    assert shown == {"user": "ada", "api_key": redaction.REDACTED}
    assert_nowhere(sinks.texts(), API_KEY)


def test_a_dataclass_and_a_model_as_scope_output_are_recorded_by_field(relay_turn, relay_events, tmp_path) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    login = Login("ada", PASSWORD)
    got = relay.tools.execute("sign_in", {"user": "ada"}, lambda args: [login, Account(user="ada", api_key=API_KEY)])
    assert got[0] is login and login.password == PASSWORD  # the caller's objects are left as they were
    assert got[1].api_key == API_KEY
    assert_nowhere(sinks.texts(), API_KEY, PASSWORD)


# -- an MCP resource address with a credential -----------------------------------------------------


def test_an_mcp_resource_address_is_recorded_without_its_credentials(relay_turn, relay_events, tmp_path) -> None:
    from mcp.client.client import Client
    from mcp.server.mcpserver import MCPServer

    from relay_runtime.integrations.mcp import instrument_mcp, uninstrument_mcp

    relay, _turn = relay_turn
    shared = f"https://docs.example/report?access_token={TOKEN}&page=2"
    server = MCPServer("docs")

    @server.resource(shared)
    def report() -> str:
        return "the report"

    async def read() -> None:
        async with Client(server) as client:
            got = await client.read_resource(shared)
            assert got.contents[0].text == "the report"  # the request went out as it was
            with pytest.raises(Exception, match="Unknown resource"):  # the server's error echoes the address
                await client.read_resource(f"https://ada:{PASSWORD}@docs.example/private")

    instrument_mcp()
    try:
        sinks = Sinks(relay, relay_events, tmp_path)
        asyncio.run(read())
    finally:
        uninstrument_mcp()
    reads = [e for e in relay_events.ends() if e.name.startswith("resources/read")]
    assert len(reads) == 4  # the client's scope and the server's, for each read
    assert {e.name for e in reads} == {
        f"resources/read https://docs.example/report?access_token={redaction.REDACTED}&page=2",
        f"resources/read https://{redaction.REDACTED}@docs.example/private",
    }
    assert [e.outcome for e in reads].count("failed") == 2
    assert_nowhere(sinks.texts(), TOKEN, PASSWORD)


@pytest.mark.parametrize(
    ("url", "recorded"),
    [
        ("file:///notes/today.md", "file:///notes/today.md"),
        ("https://h.example/a?author=ada&key=k&sig=s", "https://h.example/a?author=ada&key=[redacted]&sig=[redacted]"),
        ("https://h.example/cb#access_token=t&state=1", "https://h.example/cb#access_token=[redacted]&state=1"),
        ("https://h.example/a?q=a@b&Idempotency-Key=1", "https://h.example/a?q=a@b&Idempotency-Key=1"),
        ("https://token@h.example/x", "https://[redacted]@h.example/x"),
        ("https://u:p@h.example?page=a@b", "https://[redacted]@h.example?page=a@b"),
    ],
)
def test_recorded_url_keeps_the_address_without_its_credentials(url: str, recorded: str) -> None:
    from relay_runtime.urls import recorded_url

    assert recorded_url(url) == recorded


# -- a credential under a key that names it ----------------------------------------------------------


def test_a_key_naming_a_credential_is_blanked_in_every_sink_alike(relay_turn, relay_events, tmp_path) -> None:
    """``github_token`` or ``OPENAI_API_KEY``: the OTel capture blanked such keys (its own rule, by ending),
    the events, the JSONL file and the journal held them (the core's rule took exact names only)."""
    from langchain_core.tools import tool

    from relay_runtime.integrations.langchain import RelayCallbackHandler

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)

    @tool
    def deploy(repo: str, github_token: str, settings: dict[str, str]) -> str:
        """Deploy a repository."""
        return f"deployed {repo}"

    args = {"repo": "ada/site", "github_token": TOKEN, "settings": {"OPENAI_API_KEY": API_KEY, "max_tokens": "5"}}
    assert deploy.invoke(args, config={"callbacks": [RelayCallbackHandler()]}) == "deployed ada/site"
    (start,) = relay_events.starts(name="deploy")
    assert start.input == {
        "repo": "ada/site",
        "github_token": redaction.REDACTED,
        "settings": {"OPENAI_API_KEY": redaction.REDACTED, "max_tokens": "5"},
    }
    assert_nowhere(sinks.texts(), TOKEN, API_KEY)


def test_an_sdk_config_object_in_request_kwargs_is_left_as_it_is() -> None:
    """Request kwargs are not recorded data: a config model there holds the conversation (a tool schema's
    ``password`` property), which the key rule must not blank; recorded data's objects are read by field."""

    class Config(pydantic.BaseModel):
        tools: list[dict[str, Any]]

    config = Config(tools=[{"parameters": {"properties": {"password": {"type": "string"}}}}])
    assert redaction.redact_kwargs({"model": "m", "config": config})["config"] is config
    assert redaction.redact_value({"config": config})["config"].tools[0]["parameters"]["properties"] == {
        "password": redaction.REDACTED
    }
