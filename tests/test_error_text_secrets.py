"""An error's text holds no value the structured record blanks: a tool's arguments failing pydantic validation
(whose message quotes them, ``input_value={...}``), an exception quoting a kwargs dict, an intercept's refusal
naming a key. The recorded input blanks the password; the error message carried it to the span's status and
exception event, every end event, the JSONL file, the journal and the trajectory.

Through the real paths: ``relay.tools.execute``, a LangChain agent (``create_agent`` with ``RelayMiddleware``
on the scripted OpenAI transport), and an MCP server in another process (``tests/mcp_app.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from relay_runtime import redaction
from relay_runtime.adapters import testing as t
from tests.framework_support import need, only_our_agents_processor, tool_call_body
from tests.test_frameworks_records_secrets import Sinks, assert_nowhere

PASSWORD = "hunter2-raw-secret"
API_KEY = "sk-live-QwErTyUiOp1234"


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


class Login(pydantic.BaseModel):
    user: str
    password: str


def errors(sinks: Sinks) -> list[tuple[str, str | None, list[dict[str, Any]]]]:
    """Each span's status description and exception events."""
    return [
        (s.name, s.status.description, [dict(e.attributes or {}) for e in s.events if e.name == "exception"])
        for s in sinks.pipeline.finished()
    ]


def assert_spans_tell(sinks: Sinks, shown: str) -> None:
    """Some span's status tells ``shown`` (what failed stays readable), and no span holds the password or key."""
    span_errors = errors(sinks)
    assert any(shown in (d or "") for _, d, _ in span_errors)
    assert PASSWORD not in repr(span_errors) and API_KEY not in repr(span_errors)


def tool_end(relay_events: Any, name: str) -> Any:
    (end,) = [e for e in relay_events.ends() if e.scope_type == "tool" and e.name == name]
    return end


def test_a_tools_pydantic_validation_error_records_no_quoted_argument(relay_turn, relay_events, tmp_path) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    args = {"password": PASSWORD, "api_key": API_KEY}  # no ``user``: pydantic quotes the whole dict
    with pytest.raises(pydantic.ValidationError):
        relay.tools.execute("sign_in", args, lambda a: Login.model_validate(a))
    end = tool_end(relay_events, "sign_in")
    assert end.error_type == "ValidationError"
    # What failed and why stay: the field, pydantic's words, its error type.
    assert "user" in end.error_message and "Field required" in end.error_message and "type=missing" in end.error_message
    assert "input_value=[redacted]" in end.error_message
    assert_spans_tell(sinks, "Field required")
    assert_nowhere(sinks.texts(), PASSWORD, API_KEY)


def test_an_error_quoting_a_kwargs_dict_or_a_keyed_value_records_them_blanked(
    relay_turn, relay_events, tmp_path
) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)

    def connect(args: dict[str, Any]) -> None:
        raise TypeError(f"connect() got an unexpected keyword in {args!r}")

    def no_keys(name: str, args: Any) -> Any:
        raise PermissionError(f"refused: api_key={API_KEY} is not on the allow list; Authorization: Bearer {API_KEY}")

    with pytest.raises(TypeError):
        relay.tools.execute("connect", {"user": "ada", "password": PASSWORD, "port": 5432}, connect)
    relay.intercepts.register_tool_request("no_keys", 0, False, no_keys)
    with pytest.raises(PermissionError):
        relay.tools.execute("fetch", {"url": "https://example.com"}, lambda a: None)
    connected = tool_end(relay_events, "connect")
    assert connected.error_message == (
        "connect() got an unexpected keyword in {'user': 'ada', 'password': '[redacted]', 'port': 5432}"
    )
    fetched = tool_end(relay_events, "fetch")
    assert fetched.error_message == "refused: api_key=[redacted] is not on the allow list; Authorization: [redacted]"
    assert_spans_tell(sinks, "api_key=[redacted]")
    assert_nowhere(sinks.texts(), PASSWORD, API_KEY)


def test_a_langchain_tool_call_failing_its_schema_records_no_quoted_argument(
    relay_turn, relay_events, tmp_path
) -> None:
    """LangGraph's tool node answers a call whose arguments fail the tool's schema with an error ``ToolMessage``
    quoting them (``with kwargs {...}``); that message is the tool scope's error."""
    from relay_runtime.integrations.langchain import RelayCallbackHandler, RelayMiddleware
    from tests.test_frameworks_langchain import agents_mod, chat_model, run, tools_mod

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)

    @tools_mod.tool
    def sign_in(user: str, password: str) -> str:
        """Sign a user in."""
        return "signed in"

    script = t.Script(
        [
            t.json_reply(tool_call_body("sign_in", {"password": PASSWORD, "api_key": API_KEY})),
            t.json_reply(t.chat_completion_body("Done.")),
        ]
    )
    agent = agents_mod.create_agent(chat_model(script), [sign_in], middleware=[RelayMiddleware()], name="helper")
    result = run(agent, "Sign me in", callbacks=[RelayCallbackHandler()])
    assert result["messages"][-1].content == "Done."
    assert PASSWORD in result["messages"][2].content  # the agent was told what it sent; the record is not
    end = tool_end(relay_events, "sign_in")
    assert end.outcome == "failed" and "user" in end.error_message and "Field required" in end.error_message
    assert_spans_tell(sinks, "Field required")
    assert PASSWORD not in " ".join(repr(e.error_message) for e in relay_events.events)
    texts = sinks.texts()
    # The model's next request holds the tool's answer (the conversation, recorded as the model read it):
    # the events, the JSONL file and the spans' captured content carry it; the journal and ATIF do not.
    assert_nowhere({"journal": texts["journal"], "atif": texts["atif"]}, PASSWORD, API_KEY)


def test_an_mcp_tool_call_failing_its_arguments_validation_records_no_quoted_argument(
    relay_host, tmp_path: Path
) -> None:
    """The server answers ``isError`` with pydantic's message (``input_value={...}``), which becomes the tool
    scope's error on both sides: the client's span and events here, the server's span in its process."""
    from tests.test_mcp import APP, ServerSpans, _stdio

    need("mcp")
    from mcp.client.client import Client

    from relay_runtime import session
    from relay_runtime.integrations.mcp import instrument_mcp, uninstrument_mcp
    from relay_runtime.integrations.otel import OTelExporter
    from relay_runtime.recorder import Recorder
    from tests.otel_support import Pipeline

    assert APP.exists()
    spans = ServerSpans(tmp_path / "spans.jsonl")
    coordinator, host = session.SESSION_COORDINATOR, relay_host
    pipeline = Pipeline()
    exporter = OTelExporter(pipeline.tracer_provider).attach(host)
    events = Recorder()
    host.relay.subscribers.register(events, name="test.events")
    instrument_mcp()
    lease = coordinator.acquire_conversation(profile_key=host.profile_key, session_id="s-mcp", platform="test")
    turn = coordinator.begin_turn(lease, turn_id="t-1", task_id="k-1")

    async def call() -> Any:
        async with Client(_stdio(spans.path), mode="auto") as client:  # type: ignore[arg-type]
            return await client.call_tool("add", {"a": 1, "password": PASSWORD})  # no ``b``

    try:
        answer = asyncio.run(call())
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)
        uninstrument_mcp()
        host.relay.subscribers.deregister("test.events")
        exporter.shutdown()
    assert answer.is_error and PASSWORD in answer.content[0].text  # what the server said, as it said it
    (end,) = [e for e in events.ends() if e.scope_type == "tool" and e.name == "add"]
    assert end.error_type == "tool_error" and "Field required" in end.error_message
    ours = pipeline.one("tools/call add")
    served = spans.wait_for("tools/call add")
    assert "Field required" in (ours.status.description or "") and "Field required" in served["status_description"]
    recorded = repr([(e.name, e.input, e.output, e.error_message) for e in events.events])
    recorded += repr(
        [(s.status.description, [dict(x.attributes or {}) for x in s.events]) for s in pipeline.finished()]
    )
    recorded += json.dumps(spans.all())
    assert PASSWORD not in recorded


def test_a_quoted_input_holding_pydantics_own_markers_is_blanked_to_its_end(relay_turn, relay_events) -> None:
    """An input that itself says ``, input_type=`` must not end the quoted repr early: its tail would pass."""
    relay, _turn = relay_turn
    forged = f"x, input_type=str] {PASSWORD}"
    with pytest.raises(pydantic.ValidationError):
        relay.tools.execute("sign_in", {"user": forged}, lambda a: Login.model_validate(a))  # no password
    end = tool_end(relay_events, "sign_in")
    assert PASSWORD not in end.error_message and "Field required" in end.error_message


# -- a redaction rule that holds for one field: the error quoting that field -------------------------

EMAIL = "jane.doe@example.com"
SSN = "078-05-1120"


def test_a_value_a_path_rule_redacted_in_a_tools_arguments_is_redacted_in_its_error(
    relay_turn, relay_events, tmp_path
) -> None:
    """The rules hold for ``/tool/arguments`` only: the start event's input is redacted, and the end event,
    which carries no input, carried the error quoting it to every sink."""
    from relay_runtime.redaction import RedactionPolicy, Rule
    from relay_runtime.redaction_policy import RULES_KEY

    relay, _turn = relay_turn
    relay.redaction.use(
        RedactionPolicy(
            [
                Rule("redact", name="mail", detector="email", paths=["/tool/arguments"]),
                Rule("redact", name="ssn", paths=["/tool/arguments/ssn"]),
            ]
        )
    )
    sinks = Sinks(relay, relay_events, tmp_path)

    def find(args: dict[str, Any]) -> None:
        raise LookupError(f"no user {args['email']} with ssn {args['ssn']}; asked {args!r}")

    with pytest.raises(LookupError):
        relay.tools.execute("find_user", {"email": EMAIL, "ssn": SSN}, find)
    (start,) = relay_events.starts(name="find_user")
    assert start.input == {"email": "[REDACTED:email]", "ssn": "[REDACTED]"}
    end = tool_end(relay_events, "find_user")
    assert end.error_message == (
        "no user [REDACTED:email] with ssn [REDACTED]; asked {'email': '[REDACTED:email]', 'ssn': '[REDACTED]'}"
    )
    assert end.metadata[RULES_KEY] == {"mail": 1, "ssn": 1}
    assert_nowhere(sinks.texts(), EMAIL, SSN)


def test_a_value_a_path_rule_redacted_in_a_request_is_redacted_in_the_providers_error(
    relay_turn, relay_events, tmp_path
) -> None:
    """A provider's 400 quotes the request (``Invalid content: ...``): the rule holds for the messages only."""
    import openai

    from relay_runtime import adapters
    from relay_runtime.redaction import RedactionPolicy, Rule

    relay, _turn = relay_turn
    relay.redaction.use(
        RedactionPolicy([Rule("redact", name="mail", detector="email", paths=["/request/messages/*/content"])])
    )
    sinks = Sinks(relay, relay_events, tmp_path)
    body = {"error": {"message": f"Invalid 'messages[0].content': {EMAIL} is not allowed", "type": "invalid"}}
    script = t.Script([t.json_reply(body, status=400)])
    client = adapters.instrument(t.openai_client(script, max_retries=0))
    try:
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": EMAIL}])
    finally:
        adapters.uninstrument()
    (attempt,) = [e for e in relay_events.ends() if e.scope_type == "llm"]
    assert attempt.outcome == "failed" and "[REDACTED:email] is not allowed" in attempt.error_message
    assert_nowhere(sinks.texts(), EMAIL)


# -- a tool call whose argument text is not JSON ---------------------------------------------------


def test_an_agents_tool_call_with_broken_json_arguments_records_no_credential(
    relay_turn, relay_events, tmp_path
) -> None:
    """The model's arguments did not parse (cut mid-object): the tool scope records them as the text they are,
    where the key-by-key walk that blanks ``password`` in parsed arguments never reaches."""
    from relay_runtime.integrations import openai_agents
    from tests.test_frameworks_agents import agents, run, scripted

    @agents.function_tool
    def sign_in(user: str, password: str) -> str:
        """Sign a user in."""
        return "signed in"

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    call = {"call_id": "call-1", "name": "sign_in", "arguments": f'{{"password": "{PASSWORD}", "user": '}
    with only_our_agents_processor():
        openai_agents.instrument()
        scripted(t.json_reply(t.responses_body("", function_call=call)), t.json_reply(t.responses_body("Done.")))
        assert run(agents.Agent(name="helper", model="gpt-test", tools=[sign_in]), "Sign me in").final_output == "Done."
    (start,) = relay_events.starts(name="sign_in")
    assert start.input == '{"password": "[redacted]", "user": '
    texts = sinks.texts()
    del texts["jsonl"], texts["events"], texts["spans"]  # the conversation holds the model's call as it made it
    assert_nowhere(texts, PASSWORD)
    assert PASSWORD not in repr([e.input for e in relay_events.events if e.scope_type == "tool"])


def test_an_error_quoting_a_credential_held_as_bytes_records_it_blanked(relay_turn, relay_events, tmp_path) -> None:
    """A kwargs or headers dict holding its key as bytes (as an HTTP client holds headers) prints it as ``b'...'``
    or ``bytearray(b'...')``: the word before the quote was taken for the whole value, and the key went on."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    args = {"user": "ada", "api_key": API_KEY.encode(), "password": bytearray(PASSWORD.encode())}

    def connect(given: dict[str, Any]) -> None:
        raise TypeError(f"connect() got an unexpected keyword in {given!r}")

    with pytest.raises(TypeError):
        relay.tools.execute("connect", args, connect)
    assert tool_end(relay_events, "connect").error_message == (
        "connect() got an unexpected keyword in {'user': 'ada', 'api_key': b'[redacted]', 'password': [redacted]}"
    )
    assert_spans_tell(sinks, "unexpected keyword")
    assert_nowhere(sinks.texts(), PASSWORD, API_KEY)


def test_an_error_quoting_headers_as_name_value_pairs_records_their_credentials_blanked(
    relay_turn, relay_events, tmp_path
) -> None:
    """A header list (``urllib``'s ``header_items()``, an HTTP client's raw headers) prints each header as a pair,
    ``('authorization', 'Bearer ...')``: no ``=`` or ``:`` joins the name to its value, and the value went on."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    headers = [("accept", "application/json"), ("Authorization", f"Bearer {API_KEY}")]
    raw = [(b"x-api-key", PASSWORD.encode())]

    def fetch(given: dict[str, Any]) -> None:
        raise ConnectionError(f"GET {given['url']} failed, sent {headers!r} and {raw!r}")

    with pytest.raises(ConnectionError):
        relay.tools.execute("fetch", {"url": "https://example.com/x"}, fetch)
    assert tool_end(relay_events, "fetch").error_message == (
        "GET https://example.com/x failed, sent [('accept', 'application/json'), ('Authorization', '[redacted]')]"
        " and [(b'x-api-key', b'[redacted]')]"
    )
    assert_spans_tell(sinks, "failed, sent")
    assert_nowhere(sinks.texts(), PASSWORD, API_KEY)


SIGNATURE = "aeeed9bbccd4d02ee5c0109b86d86835f995"


def failed_then_done(relay: Any, relay_events: Any, error: str, answer: str) -> tuple[Any, Any]:
    """A tool run twice: failing with a ``ConnectionError`` whose text is ``error``, then answering ``answer``;
    the ends of both runs."""

    def fetch(given: dict[str, Any]) -> str:
        if given["fail"]:
            raise ConnectionError(error)
        return answer

    with pytest.raises(ConnectionError):
        relay.tools.execute("fetch", {"fail": True}, fetch)
    relay.tools.execute("fetch", {"fail": False}, fetch)
    failed, done = relay_events.ends(name="fetch")
    return failed, done


@pytest.mark.parametrize(
    ("separator", "how"),
    [("\\u0026", "JSON-escaped, as Go's encoder writes '&'"), ("&amp;", "HTML- or XML-escaped, as S3's error bodies")],
)
def test_a_presigned_urls_signature_after_an_escaped_separator_is_blanked_in_errors_and_results(
    relay_turn, relay_events, tmp_path, separator: str, how: str
) -> None:
    """A query's ``&sig=`` / ``&X-Amz-Signature=`` is blanked in an error's text and a tool's text result; a body
    that quotes the address escaped (``\\u0026``, ``&amp;``) parted the name from the ``&`` the rule looked for,
    and the signature went on."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    sas = f"https://acct.blob.core.windows.net/c/b.txt?sv=2020-08-04{separator}sig={SIGNATURE}{separator}se=2030"
    s3 = f"https://b.s3.amazonaws.com/k?X-Amz-Date=1{separator}X-Amz-Signature={SIGNATURE}{separator}x=1"

    error, answer = f'{{"error": "cannot read {sas}"}}', f"<a href='{s3}'>report</a>"
    failed, done = failed_then_done(relay, relay_events, error, answer)
    assert f"{separator}sig=[redacted]{separator}se=2030" in failed.error_message, how
    assert f"{separator}X-Amz-Signature=[redacted]{separator}x=1" in done.output, how
    assert_nowhere(sinks.texts(), SIGNATURE)


def test_a_presigned_url_carried_percent_encoded_in_another_address_has_its_signature_blanked(
    relay_turn, relay_events, tmp_path
) -> None:
    """An address carried in another's query (a viewer's ``?src=``, a redirect's ``?url=``) is percent-encoded
    whole: its ``?`` / ``&`` / ``=`` are ``%3F`` / ``%26`` / ``%3D``, so the query rule found no parameter in it."""
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    inner = f"https%3A%2F%2Fb.s3.amazonaws.com%2Fk%3FX-Amz-Date%3D1%26X-Amz-Signature%3D{SIGNATURE}%26x%3D1"
    viewer = f"https://view.example/open?src={inner}&lang=en"

    failed, done = failed_then_done(relay, relay_events, f"cannot open {viewer}: 404", f"open it at {viewer}")
    blanked = "%26X-Amz-Signature%3D[redacted]%26x%3D1&lang=en"
    assert blanked in failed.error_message and blanked in done.output
    assert_nowhere(sinks.texts(), SIGNATURE)
