# ruff: noqa: F811 - the browser fixture imported from test_run_page_browser is a parameter below
"""One policy, every sink: a turn whose prompt holds personal data and a key, watched by everything at once.

OpenTelemetry (content on spans and in the details log record), the file and the Redis journal,
the run page (HTML and API, and in Chromium), ATIF and ATOF trajectories (live and rebuilt from the
journal) and a cassette: none of the raw values appears in any of them, searched
byte by byte, also JSON-escaped and base64-encoded; the provider still gets the raw prompt (unless
``apply_to_request``).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from aiohttp.test_utils import TestServer
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from redis_support import redis_prefix, redis_server  # noqa: F401 - fixtures (by name, below)
from test_run_journal_http import TIMEOUT, read_sse
from test_run_page_browser import TOKEN as PAGE_TOKEN
from test_run_page_browser import WAIT_MS as PAGE_WAIT_MS
from test_run_page_browser import Server as PageServer
from test_run_page_browser import browser  # noqa: F401 - a fixture (Debian's chromium through playwright)

from relay_runtime import adapters, cassettes, session
from relay_runtime.adapters import testing
from relay_runtime.integrations.otel import OTelExporter
from relay_runtime.integrations.run_journal import JournalSubscriber, RedisStreamStore
from relay_runtime.integrations.run_journal.routes import create_app
from relay_runtime.integrations.trajectory import AtifExporter, AtofExporter, atif_from_journal
from relay_runtime.redaction import RedactionPolicy, Rule
from tests.otel_support import Pipeline

EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
PHONE = "+44 20 7946 0958"
API_KEY = "sk-proj-Zx8Kq2LmN4pR7sT1vW3yB5cD9fG0hJ"
VALUES = (EMAIL, CARD, PHONE, API_KEY)
PROMPT = f"Hello, I am {EMAIL}. My card is {CARD}, call me on {PHONE}. Use the key {API_KEY} please."
ANSWER = f"Noted: {EMAIL}, {CARD}, {PHONE} and {API_KEY}."
# The streamed answer's e-mail comes in three chunks, as a provider splits it: no chunk holds it whole.
SPLIT = (EMAIL[:7], EMAIL[7:14], EMAIL[14:])


def forms(value: str) -> list[bytes]:
    """The byte strings ``value`` may hide as: itself, JSON-escaped, digits only, base64 at every alignment."""
    raw = value.encode()
    found = [raw, json.dumps(value).encode()[1:-1], json.dumps(value, ensure_ascii=True).encode()[1:-1]]
    digits = "".join(c for c in value if c.isdigit())
    if len(digits) >= 12:
        found.append(digits.encode())
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for pad in range(3):
            encoded = encode(b"\0" * pad + raw)
            skip = (pad * 4 + 2) // 3 + 1  # the characters that also hold the padding
            found.append(encoded[skip:-4])
    return found


def assert_clean(where: str, blob: bytes) -> None:
    for value in VALUES:
        for form in forms(value):
            assert form not in blob, f"{value!r} is in {where} as {form!r}"
    for piece in SPLIT:
        assert piece.encode() not in blob, f"{piece!r}, a piece of {EMAIL!r} a stream split, is in {where}"


def policy(apply_to_request: bool = False) -> RedactionPolicy:
    return RedactionPolicy(
        [
            Rule("redact", detector="email"),
            Rule("mask", detector="credit_card", unmasked_suffix=4),
            Rule("hash", detector="phone"),
            Rule("redact", detector="api_key"),
        ],
        hash_key="a key of at least 16 bytes",
        apply_to_request=apply_to_request,
    )


def _turn(scripted: testing.Scripted, relay_home: Path) -> None:
    coordinator = session.SESSION_COORDINATOR
    lease = coordinator.acquire_conversation(
        profile_key=session.current_profile_key(), session_id="sess-1", platform="cli"
    )
    turn = coordinator.begin_turn(lease, turn_id="run-1", task_id="task-1")
    try:
        messages = [{"role": "system", "content": f"The user is {EMAIL}"}, {"role": "user", "content": PROMPT}]
        adapters.complete(scripted.client, {"model": "gpt-x", "messages": messages})
        stream = adapters.stream(scripted.client, {"model": "gpt-x", "messages": messages[1:]})
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == f"mail {EMAIL} ok"
        lease.host.relay.tools.execute("send_mail", {"to": EMAIL, "card": CARD}, lambda args: f"sent to {PHONE}")
    finally:
        coordinator.end_turn(turn, outcome="success")
        coordinator.release_conversation(lease)


async def _page_and_api(session_dir: Path, store: Any) -> bytes:
    if store is not None:
        app = create_app(store=store, page=True)
    else:
        app = create_app(session_dir=session_dir, page=True, poll_interval=0.01)
    got: list[bytes] = []
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession(timeout=TIMEOUT) as client:
        base = f"http://127.0.0.1:{server.port}"
        for path in ("/", "/api/runs", "/ui/sessions/sess-1/runs/run-1", "/runs/run-1?session_id=sess-1"):
            async with client.get(base + path) as resp:
                assert resp.status == 200, path
                got.append(await resp.read())
        async with client.get(base + "/runs/run-1/events?session_id=sess-1") as resp:
            messages = await read_sse(resp)
            got.append(json.dumps(messages).encode())
            assert any("[REDACTED:email]" in json.dumps(m) for m in messages)  # the redacted text is shown
    return b"\n".join(got)


@pytest.mark.parametrize(
    ("journal", "apply_to_request"),
    [("file", False), ("redis", False), ("file", True)],
    ids=["file-journal", "redis-journal", "file-journal-apply-to-request"],
)
def test_one_policy_every_sink(
    relay_home: Path, tmp_path: Path, request: pytest.FixtureRequest, journal: str, apply_to_request: bool
) -> None:
    coordinator = session.SESSION_COORDINATOR
    coordinator.redaction.use(policy(apply_to_request))
    pipeline = Pipeline()
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    exporter = OTelExporter(
        pipeline.tracer_provider, pipeline.meter_provider, capture_content="SPAN_AND_EVENT",
        logger_provider=logger_provider,
    ).attach(coordinator)  # fmt: skip
    atif = AtifExporter("sess-1", agent_name="agent").attach(coordinator)
    atof_lines = io.StringIO()
    atof = AtofExporter(stream=atof_lines).attach(coordinator)
    journal_dir = tmp_path / "sessions"
    if journal == "redis":
        redis_server, redis_prefix = request.getfixturevalue("redis_server"), request.getfixturevalue("redis_prefix")
        store: Any = RedisStreamStore(redis_server.url, prefix=redis_prefix, retention=3600)
        journal_sub = JournalSubscriber(store=store).attach(coordinator)
    else:
        store = None
        journal_sub = JournalSubscriber(session_dir=journal_dir).attach(coordinator)
    scripted = testing.scripted_openai(
        testing.json_reply(testing.chat_completion_body(ANSWER)),
        testing.sse_reply(testing.openai_chat_sse(testing.chat_chunks(["mail ", *SPLIT, " ok"]))),
    )
    cassette = tmp_path / "cassette.json"
    with cassettes.use(cassette, mode="record"):
        _turn(scripted, relay_home)
    journal_sub.close()
    exporter.shutdown()
    trajectories = atif.export_json().encode() + b"\n" + atof_lines.getvalue().encode()
    atif.detach()
    atof.detach()
    assert b"[REDACTED:email]" in trajectories
    assert_clean("the ATIF and ATOF trajectories", trajectories)
    if journal == "file":
        rebuilt = json.dumps(atif_from_journal("sess-1", session_dir=journal_dir)).encode()
        assert b"[REDACTED:email]" in rebuilt
        assert_clean("the trajectory rebuilt from the journal", rebuilt)

    sent = b"".join(r.content for r in scripted.script.requests)
    if apply_to_request:
        assert_clean("the requests sent to the provider", sent)
    else:
        for value in (EMAIL, CARD, API_KEY):
            assert json.dumps(value).encode()[1:-1] in sent, "the provider must get the raw prompt"

    spans = pipeline.finished()
    assert any("gen_ai.input.messages" in (s.attributes or {}) for s in spans)
    exported = json.dumps(
        [{"name": s.name, "attributes": dict(s.attributes or {}),
          "events": [dict(e.attributes or {}) for e in s.events]} for s in spans]
    ).encode()  # fmt: skip
    assert b"[REDACTED:email]" in exported
    assert_clean("the spans", exported)
    records = [r.log_record for r in logs.get_finished_logs()]
    assert any(r.event_name == "gen_ai.client.inference.operation.details" for r in records)
    logged = "\n".join(r.to_json() for r in logs.get_finished_logs()).encode()
    assert b"[REDACTED:email]" in logged
    assert_clean("the log records", logged)
    metrics = pipeline.reader.get_metrics_data()
    assert_clean("the metrics", (metrics.to_json() if metrics else "").encode())

    if journal == "redis":
        client = redis.Redis.from_url(redis_server.url)
        dumped = b""
        for key in client.keys(f"{redis_prefix}*"):
            kind = client.type(key)
            if kind == b"stream":
                dumped += repr(client.xrange(key)).encode()
            elif kind == b"string":
                dumped += client.get(key) or b""
            elif kind == b"hash":
                dumped += repr(client.hgetall(key)).encode()
            elif kind == b"zset":
                dumped += repr(client.zrange(key, 0, -1)).encode()
            dumped += client.dump(key) or b""
        assert b"REDACTED:email" in dumped
        assert_clean("redis", dumped)
    else:
        files = sorted(journal_dir.rglob("*"))
        journal_bytes = b"".join(p.read_bytes() for p in files if p.is_file())
        assert b"[REDACTED:email]" in journal_bytes
        assert_clean("the file journal", journal_bytes)

    page = asyncio.run(_page_and_api(journal_dir, store))
    assert_clean("the run page and its API", page)

    stored = cassette.read_bytes()
    assert json.loads(stored)["redaction"] == policy(apply_to_request).fingerprint
    assert b"[REDACTED:email]" in stored
    assert_clean("the cassette", stored)


def test_the_run_page_in_chromium_shows_only_redacted_values(relay_home: Path, tmp_path: Path, browser: Any) -> None:
    from playwright.sync_api import expect

    coordinator = session.SESSION_COORDINATOR
    coordinator.redaction.use(policy())
    journal_dir = tmp_path / "sessions"
    journal = JournalSubscriber(session_dir=journal_dir).attach(coordinator)
    scripted = testing.scripted_openai(
        testing.json_reply(testing.chat_completion_body(ANSWER)),
        testing.sse_reply(testing.openai_chat_sse(testing.chat_chunks(["mail ", *SPLIT, " ok"]))),
    )
    _turn(scripted, relay_home)
    journal.close()
    server = PageServer(journal_dir)
    server.start()
    try:
        page = browser.new_context().new_page()
        page.goto(f"http://127.0.0.1:{server.port}/ui/sessions/sess-1/runs/run-1")
        expect(page.locator("#login")).to_be_visible(timeout=PAGE_WAIT_MS)
        page.fill("#token", PAGE_TOKEN)
        page.click("#login button")
        expect(page.locator("#state")).to_have_text("completed", timeout=PAGE_WAIT_MS)
        expect(page.locator("#assistant-text")).to_contain_text("[REDACTED:email]", timeout=PAGE_WAIT_MS)
        shown = (page.content() + "\n" + page.locator("body").inner_text()).encode()
    finally:
        server.stop()
    assert_clean("the run page in Chromium", shown)
