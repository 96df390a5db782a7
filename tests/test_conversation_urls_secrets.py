"""An image or a file the conversation gives by a signed address reaches no record with its signature.

A GCS or S3 presigned URL, an Azure SAS URL or one with ``?key=`` or user info, given to the model as
an image or a file part (OpenAI chat, Responses, Anthropic, Gemini), is conversation, which the credential
walk leaves alone: every record of the request (its events, JSONL, spans with content on, the journal,
ATIF, the cassette file) held its signature and token whole. Real SDK clients over the mock transport
(the provider still gets the address as it was), every sink attached (``Sinks``), real cassette files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay_runtime import adapters, cassettes
from relay_runtime.adapters import testing as t
from relay_runtime.cassettes.cassette import CassetteMiss
from relay_runtime.conversation_urls import recorded
from tests.test_frameworks_records_secrets import Sinks, assert_nowhere

GOOG_SIGNATURE = "9f8e7d6c5b4a39281706f5e4d3c2b1a0" * 4
GOOG_CREDENTIAL = "signer%40proj-test.iam.gserviceaccount.com%2F20261205%2Fauto%2Fstorage%2Fgoog4_request"
GCS_URL = (
    "https://storage.googleapis.com/bucket-test/cat.png?X-Goog-Algorithm=GOOG4-RSA-SHA256"
    f"&X-Goog-Credential={GOOG_CREDENTIAL}&X-Goog-Date=20261205T000000Z&X-Goog-Expires=900"
    f"&X-Goog-SignedHeaders=host&X-Goog-Signature={GOOG_SIGNATURE}"
)
AMZ_SIGNATURE = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
AMZ_TOKEN = "IQoJb3JpZ2luX2VjEXAMPLEsessiontokenQ7w2E9r4"
AMZ_KEY_ID = "AKIAEXAMPLEKEYID0123"
S3_URL = (
    "https://bucket-test.s3.eu-west-1.amazonaws.com/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    f"&X-Amz-Credential={AMZ_KEY_ID}%2F20261205%2Feu-west-1%2Fs3%2Faws4_request&X-Amz-Date=20261205T000000Z"
    f"&X-Amz-Expires=900&X-Amz-Security-Token={AMZ_TOKEN}&X-Amz-SignedHeaders=host&X-Amz-Signature={AMZ_SIGNATURE}"
)
SAS_SIGNATURE = "SASsignatureEXAMPLEk4Jm8Pq2Wz%3D"
SAS_URL = f"https://acct.blob.core.windows.net/box/dog.jpg?sv=2024-11-04&se=2026-12-06&sp=r&sig={SAS_SIGNATURE}"
QUERY_KEY = "qk-EXAMPLE-7Hn2Rf9Lw4"
KEYED_URL = f"https://files.example.test/doc.pdf?key={QUERY_KEY}&page=2"
PASSWORD = "pw-EXAMPLE-Vb6Tq1Zs8M"
USER_URL = f"https://ada:{PASSWORD}@files.example.test/notes.txt"
TOKEN = "tok-EXAMPLE-Jc5Xy3Pd0K"
TOKEN_URL = f"https://img.example.test/bird.webp?token={TOKEN}"
SECRETS = (GOOG_SIGNATURE, AMZ_SIGNATURE, AMZ_TOKEN, SAS_SIGNATURE, QUERY_KEY, PASSWORD, TOKEN)


def _sent(requests: list[Any]) -> str:
    return " ".join(r.content.decode() for r in requests)


def _image(url: str) -> dict[str, Any]:
    """An OpenAI chat request showing the model an image by its address."""
    return {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
    }


def test_a_signed_url_given_to_gemini_reaches_no_record_nor_cassette(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    from genai_support import gemini_client, response_body
    from google.genai import types

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(response_body(f"A {animal}.")) for animal in ("cat", "dog", "bird")])
    gemini = adapters.instrument(gemini_client(script))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        gemini.models.generate_content(
            model="gemini-test-flash",
            contents=["What is this?", types.Part.from_uri(file_uri=GCS_URL, mime_type="image/png")],
        )
        gemini.models.generate_content(
            model="gemini-test-flash",
            contents=[{"role": "user", "parts": [{"file_data": {"file_uri": SAS_URL, "mime_type": "image/jpeg"}}]}],
        )
        bird = types.Part.from_uri(file_uri=TOKEN_URL, mime_type="image/webp")
        gemini.models.generate_content(model="gemini-test-flash", contents=types.Content(role="user", parts=[bird]))
    assert GCS_URL in _sent(script.requests[:1])  # the provider got the address as it was
    texts = {**sinks.texts(), "cassette": (tmp_path / "c.json").read_text()}
    assert "storage.googleapis.com/bucket-test/cat.png" in texts["events"]  # the address is still recorded
    assert "X-Goog-Expires=900" in texts["jsonl"] and "sv=2024-11-04" in texts["cassette"]
    assert_nowhere(texts, GOOG_SIGNATURE, SAS_SIGNATURE, GOOG_CREDENTIAL, TOKEN)


def test_signed_and_keyed_urls_in_openai_and_anthropic_parts_reach_no_record(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.chat_completion_body("A report.")), t.json_reply(t.responses_body("Two.")),
                       t.json_reply(t.anthropic_message_body("Three."))])  # fmt: skip
    openai = adapters.instrument(t.openai_client(script))
    openai.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Read it"},
                                               {"type": "image_url", "image_url": {"url": S3_URL}}]}],
    )  # fmt: skip
    openai.responses.create(
        model="gpt-test",
        input=[{"role": "user", "content": [{"type": "input_image", "image_url": SAS_URL},
                                            {"type": "input_file", "file_url": KEYED_URL}]}],
    )  # fmt: skip
    adapters.instrument(t.anthropic_client(script)).messages.create(
        model="claude-test",
        max_tokens=16,
        messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": TOKEN_URL}},
                                               {"type": "document", "source": {"type": "url", "url": USER_URL}}]}],
    )  # fmt: skip
    assert all(secret in _sent(script.requests) for secret in SECRETS[1:])  # the provider got them as they were
    texts = sinks.texts()
    assert "bucket-test.s3.eu-west-1.amazonaws.com/report.pdf" in texts["spans"]
    assert "files.example.test/notes.txt" in texts["jsonl"]
    assert_nowhere(texts, *SECRETS[1:], AMZ_KEY_ID)


def test_a_cassette_replays_a_call_whose_presigned_url_was_signed_anew(tmp_path: Path) -> None:
    """A presigned URL is made again each run, with a new signature: the recording holds none, and matches."""
    from tests.cassette_support import Offline

    live = t.scripted_openai(t.json_reply(t.chat_completion_body("A report.")))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        adapters.complete(live.client, _image(S3_URL))
    text = (tmp_path / "c.json").read_text()
    assert AMZ_SIGNATURE not in text and AMZ_TOKEN not in text
    (request,) = [c["request"] for c in json.loads(text)["calls"]]
    assert "X-Amz-Expires=900" in request["messages"][0]["content"][0]["image_url"]["url"]
    client, _ = Offline().clients("openai")
    with cassettes.use(tmp_path / "c.json"):
        resigned = _image(S3_URL.replace(AMZ_SIGNATURE, AMZ_SIGNATURE[::-1]))
        assert adapters.complete(client, resigned).choices[0].message.content == "A report."


@pytest.mark.parametrize(
    ("url", "signed_anew"),
    [
        (S3_URL, {AMZ_SIGNATURE: AMZ_SIGNATURE[::-1], "X-Amz-Date=20261205T000000Z": "X-Amz-Date=20261206T101500Z",
                  "X-Amz-Expires=900": "X-Amz-Expires=3600", "%2F20261205%2F": "%2F20261206%2F"}),
        (GCS_URL, {GOOG_SIGNATURE: GOOG_SIGNATURE[::-1], "X-Goog-Date=20261205T000000Z": "X-Goog-Date=20261206T1015Z",
                   "X-Goog-Expires=900": "X-Goog-Expires=600"}),
        (SAS_URL, {SAS_SIGNATURE: SAS_SIGNATURE[::-1], "se=2026-12-06": "se=2026-12-07"}),
    ],
    ids=["s3", "gcs", "azure-sas"],
)  # fmt: skip
def test_a_cassette_replays_a_call_whose_presigned_url_was_signed_anew_on_another_day(
    tmp_path: Path, url: str, signed_anew: dict[str, str]
) -> None:
    """Signed anew, an address changes its date and expiry with its signature: the same file shown to the model
    is the same request, and the recording's dates stay as they were."""
    from tests.cassette_support import Offline

    live = t.scripted_openai(t.json_reply(t.chat_completion_body("An image.")))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        adapters.complete(live.client, _image(url))
    again = url
    for old, new in signed_anew.items():
        assert old in again
        again = again.replace(old, new)
    client, _ = Offline().clients("openai")
    with cassettes.use(tmp_path / "c.json"):
        assert adapters.complete(client, _image(again)).choices[0].message.content == "An image."
    # The same address asking for another version of the file is another request.
    with pytest.raises(CassetteMiss), cassettes.use(tmp_path / "c.json"):
        adapters.complete(client, _image(again.replace("?", "?v=2&", 1)))
    recorded_date = list(signed_anew)[1]  # the recording keeps the date it was signed on
    assert recorded_date in (tmp_path / "c.json").read_text()


def test_a_provider_error_echoing_the_signed_url_leaves_no_signature_in_the_cassette(tmp_path: Path) -> None:
    echo = t.json_reply({"error": {"message": f"cannot fetch {S3_URL}", "type": "invalid_request_error"}}, status=400)
    live = t.scripted_openai(echo)
    with cassettes.use(tmp_path / "c.json", mode="record"):
        try:
            adapters.complete(live.client, _image(S3_URL))
        except Exception as exc:
            assert AMZ_SIGNATURE in str(exc)  # the caller's own error is as the provider said it
    text = (tmp_path / "c.json").read_text()
    assert "cannot fetch https://bucket-test.s3" in text
    assert AMZ_SIGNATURE not in text and AMZ_TOKEN not in text


def test_a_conversation_without_credentials_in_its_addresses_is_the_callers_own_object() -> None:
    plain = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png?w=2"}}]}
    kwargs = {"messages": [{"role": "user", "content": "hi"}, plain]}
    assert recorded(kwargs) is kwargs
    signed = {
        "messages": [*kwargs["messages"], {"role": "user", "content": [{"type": "input_image", "image_url": SAS_URL}]}]
    }
    clean = recorded(signed)
    assert clean["messages"][:2] == kwargs["messages"] and clean["messages"][2]["content"][0]["image_url"] == (
        SAS_URL.replace(SAS_SIGNATURE, "[redacted]")
    )


def test_the_run_journal_holds_a_signed_urls_address_without_its_signature(tmp_path: Path) -> None:
    from genai_support import gemini_client, response_body
    from google.genai import types
    from journal_support import run_turn

    script = t.Script([t.json_reply(response_body("A cat."))])
    part = types.Part.from_uri(file_uri=GCS_URL, mime_type="image/png")

    def body() -> None:
        gemini = adapters.instrument(gemini_client(script))
        gemini.models.generate_content(model="gemini-test-flash", contents=["What is this?", part])

    result = run_turn(tmp_path, body)
    journal = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file()) + json.dumps(result.rows)
    assert GCS_URL in _sent(script.requests)
    assert "storage.googleapis.com/bucket-test/cat.png" in journal
    assert GOOG_SIGNATURE not in journal and GOOG_CREDENTIAL not in journal


def test_a_langchain_message_showing_a_signed_image_reaches_no_record(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    """Without the SDK instrumented, LangChain's callbacks record the call from its own messages."""
    from langchain_core.messages import HumanMessage

    from relay_runtime.integrations.langchain import RelayCallbackHandler
    from tests.test_frameworks_langchain import chat_model

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.chat_completion_body("A report."))])
    image = {"type": "image_url", "image_url": {"url": S3_URL}}
    message = HumanMessage(content=[{"type": "text", "text": "Read it"}, image])
    chat_model(script).invoke([message], config={"callbacks": [RelayCallbackHandler()]})
    assert AMZ_SIGNATURE in _sent(script.requests) and message.content[1] == image
    texts = sinks.texts()
    assert "bucket-test.s3.eu-west-1.amazonaws.com/report.pdf" in texts["spans"]
    assert_nowhere(texts, AMZ_SIGNATURE, AMZ_TOKEN, AMZ_KEY_ID)


def test_a_langchain_agent_asked_about_a_signed_image_records_its_runs_without_the_signature(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    """The callbacks record the agent's and its graph nodes' runs, whose input and output hold the messages."""
    from langchain_core.messages import HumanMessage

    from tests.test_frameworks_langchain import RelayCallbackHandler, agents_mod, chat_model

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    script = t.Script([t.json_reply(t.chat_completion_body("A report."))])
    agent = agents_mod.create_agent(chat_model(script), [], name="reader")
    message = HumanMessage(
        content=[{"type": "text", "text": "Read it"}, {"type": "image_url", "image_url": {"url": S3_URL}}]
    )
    agent.invoke({"messages": [message]}, config={"callbacks": [RelayCallbackHandler()]})
    assert AMZ_SIGNATURE in _sent(script.requests)
    texts = sinks.texts()
    assert "bucket-test.s3.eu-west-1.amazonaws.com/report.pdf" in texts["jsonl"]
    assert_nowhere(texts, AMZ_SIGNATURE, AMZ_TOKEN, AMZ_KEY_ID)


def test_an_agents_run_asked_about_a_signed_image_records_no_signature(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    import asyncio

    from relay_runtime.integrations import openai_agents
    from tests.framework_support import only_our_agents_processor
    from tests.test_frameworks_agents import agents, scripted

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    ask = [{"role": "user", "content": [{"type": "input_text", "text": "Read it"},
                                        {"type": "input_image", "image_url": SAS_URL, "detail": "auto"}]}]  # fmt: skip
    with only_our_agents_processor():
        adapters.instrument()
        openai_agents.instrument()
        s = scripted(t.json_reply(t.responses_body("A dog.")))
        agent = agents.Agent(name="reader", model="gpt-test")
        assert asyncio.run(agents.Runner.run(agent, ask)).final_output == "A dog."
    assert SAS_SIGNATURE in _sent(s.script.requests)
    texts = sinks.texts()
    assert "acct.blob.core.windows.net/box/dog.jpg" in texts["jsonl"]
    assert_nowhere(texts, SAS_SIGNATURE)


def test_a_signed_url_in_a_bedrock_invoke_model_body_reaches_no_record(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    """An ``invoke_model`` body is JSON text holding the model API's own kwargs (Anthropic's messages)."""
    from bedrock_support import BedrockServer, raw_reply

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    server = BedrockServer()
    try:
        bedrock = adapters.instrument(server.client())
        server.replies.append(raw_reply(t.anthropic_message_body("A report.")))
        image = {"type": "image", "source": {"type": "url", "url": S3_URL}}
        body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16,
                "messages": [{"role": "user", "content": [image, {"type": "text", "text": "Read it"}]}]}  # fmt: skip
        bedrock.invoke_model(modelId="anthropic.claude-3-5-sonnet-20241022-v2:0", body=json.dumps(body))
        assert AMZ_SIGNATURE in json.dumps(server.seen[0].body)
    finally:
        adapters.uninstrument(bedrock)
        server.close()
    texts = sinks.texts()
    assert "bucket-test.s3.eu-west-1.amazonaws.com/report.pdf" in texts["spans"]
    assert_nowhere(texts, AMZ_SIGNATURE, AMZ_TOKEN, AMZ_KEY_ID)


def test_a_provider_error_quoting_the_addresses_records_neither_their_signatures_nor_a_password(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    from genai_support import api_error, gemini_client
    from google.genai import errors, types

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    password = "Zq7Wv3Ntr8LmXk"  # shares no run of 8 with a key the tests remember
    fetched = f"https://ada:{password}@files.example.test/notes.txt"
    said = f"Cannot fetch content from the provided URL: {GCS_URL} and {fetched}"
    script = t.Script([api_error(400, "INVALID_ARGUMENT", said)])
    gemini = adapters.instrument(gemini_client(script))
    parts = [types.Part.from_uri(file_uri=u, mime_type="image/png") for u in (GCS_URL, fetched)]
    try:
        gemini.models.generate_content(model="gemini-test-flash", contents=parts)
    except errors.ClientError as exc:
        assert password in str(exc)  # the caller's own error is as the provider said it
    texts = sinks.texts()
    assert "Cannot fetch content" in texts["events"] and "https://ada:[redacted]@files.example.test/" in texts["events"]
    assert_nowhere(texts, GOOG_SIGNATURE, GOOG_CREDENTIAL, password)


def test_a_presigned_urls_dates_and_region_are_left_in_the_cassette_its_signature_is_not(tmp_path: Path) -> None:
    """The signing scope (``<key id>/<date>/<region>/s3/aws4_request``) is blanked where it stands, but not cut
    from every other text as a signature is: its runs of 8 are dates and regions."""
    echo = f"See eu-west-1 on 20261205, not {AMZ_SIGNATURE}"
    live = t.scripted_openai(t.json_reply(t.chat_completion_body(echo)))
    with cassettes.use(tmp_path / "c.json", mode="record"):
        adapters.complete(live.client, _image(S3_URL))
    (call,) = json.loads((tmp_path / "c.json").read_text())["calls"]
    url = call["request"]["messages"][0]["content"][0]["image_url"]["url"]
    assert url.startswith("https://bucket-test.s3.eu-west-1.amazonaws.com/report.pdf?")
    assert "X-Amz-Date=20261205T000000Z" in url and "X-Amz-Credential=[redacted]" in url
    assert call["http"][0]["body"]["choices"][0]["message"]["content"] == "See eu-west-1 on 20261205, not [redacted]"


def test_a_signed_url_shown_through_an_image_proxy_reaches_no_record(
    relay_turn: Any, relay_events: Any, tmp_path: Path
) -> None:
    """An image proxy or a viewer takes the signed address percent-encoded in its own query (``?url=``): the
    proxy's parameter is no credential's name, and the signature inside it went to every record whole."""
    from urllib.parse import quote

    relay, _turn = relay_turn
    sinks = Sinks(relay, relay_events, tmp_path)
    proxied = f"https://img.example.test/_next/image?url={quote(S3_URL, safe='')}&w=640"
    script = t.Script([t.json_reply(t.chat_completion_body("A report."))])
    adapters.instrument(t.openai_client(script)).chat.completions.create(**_image(proxied))
    assert quote(AMZ_SIGNATURE, safe="") in _sent(script.requests)  # the provider got it as it was
    texts = sinks.texts()
    assert "img.example.test/_next/image?url=https%3A%2F%2Fbucket-test.s3" in texts["jsonl"]
    assert "&w=640" in texts["jsonl"]
    assert_nowhere(texts, AMZ_SIGNATURE, AMZ_TOKEN)


def test_a_chat_of_text_alone_is_recorded_as_given_and_anything_else_is_still_walked() -> None:
    """``recorded`` passes over a conversation of text messages alone (one loop for both walks); a message beside
    them that may carry a tool's result or an address (a tool's message, parts, an object, a body's JSON text) is
    still read by both walks."""
    chat = [
        {"role": "system", "content": "You are a support assistant."},
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": f"see {SAS_URL}"},  # a text: the conversation as sent (detectors are rules')
        {"role": "assistant", "content": "ok"},
    ]
    kwargs = {"model": "gpt-test", "messages": chat, "input": "hi", "contents": None}
    assert recorded(kwargs) is kwargs
    tool = {"role": "tool", "tool_call_id": "call_1", "content": f"user='ada' api_key='{QUERY_KEY}'"}
    image = {"role": "user", "content": [{"type": "input_image", "image_url": SAS_URL}]}
    parts = {"role": "user", "parts": [{"file_data": {"file_uri": TOKEN_URL}}]}  # Gemini's contents
    for extra in (tool, image, parts):
        for key in ("messages", "input", "contents"):
            walked = recorded({**kwargs, key: [*chat, extra]})
            assert walked[key][:4] == chat
            dumped = json.dumps(walked[key][4])
            assert QUERY_KEY not in dumped and SAS_SIGNATURE not in dumped and TOKEN not in dumped, (extra, key)
    body = json.dumps({"messages": [*chat, tool]})
    assert QUERY_KEY not in recorded({"body": body})["body"]
