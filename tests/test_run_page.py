"""The run page's server side on a real aiohttp server: files, the token-for-cookie trade, the guard, the CLI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from relay_runtime.integrations.run_journal import RunJournalWriter, append_run_event
from relay_runtime.integrations.run_journal.page import COOKIE, MAX_LOGIN_BODY, cookie_value
from relay_runtime.integrations.run_journal.routes import create_app

TOKEN = "s3cret-token"
TIMEOUT = aiohttp.ClientTimeout(total=20)


async def _serve(tmp_path: Path, token: str | None) -> TestServer:
    app = create_app(session_dir=tmp_path, poll_interval=0.01, bearer_token=token, page=True)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest_asyncio.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[TestServer]:
    RunJournalWriter("s1", "r1", session_dir=tmp_path).append_sse_event("token", {"text": "<b>hi</b>"})
    server = await _serve(tmp_path, TOKEN)
    try:
        yield server
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_pages_and_assets_are_served_without_data_and_with_a_strict_policy(guarded: TestServer) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
        for path, kind in [
            ("/", "text/html"),
            ("/ui/sessions/s1/runs/r1", "text/html"),
            ("/ui/static/app.js", "text/javascript"),
            ("/ui/static/style.css", "text/css"),
        ]:
            async with client.get(guarded.make_url(path)) as response:
                assert response.status == 200, path
                assert response.content_type == kind
                assert "script-src 'self'" in response.headers["Content-Security-Policy"]
                body = await response.text()
                assert "<b>hi</b>" not in body and TOKEN not in body
        async with client.get(guarded.make_url("/ui/static/../page.py")) as response:
            assert response.status == 404
        async with client.get(guarded.make_url("/ui/static/missing.js")) as response:
            assert response.status == 404


@pytest.mark.asyncio
async def test_the_token_is_traded_once_for_a_strict_httponly_cookie(guarded: TestServer) -> None:
    # unsafe: aiohttp's jar, unlike a browser's, keeps no cookies for an IP address unless told to.
    async with aiohttp.ClientSession(timeout=TIMEOUT, cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        async with client.get(guarded.make_url("/runs/r1?session_id=s1")) as response:
            assert response.status == 401
        async with client.post(guarded.make_url("/ui/login"), json={"token": "wrong"}) as response:
            assert response.status == 401
            assert COOKIE not in response.cookies
        async with client.post(guarded.make_url("/ui/login"), json={"token": TOKEN}) as response:
            assert response.status == 204
            morsel = response.cookies[COOKIE]
            assert morsel["httponly"] is True and morsel["samesite"] == "Strict" and morsel["path"] == "/"
            assert morsel.value == cookie_value(TOKEN) and TOKEN not in morsel.value
        # The session now sends the cookie: the data routes answer.
        async with client.get(guarded.make_url("/runs/r1?session_id=s1")) as response:
            assert response.status == 200
            assert (await response.json())["last_assistant_text"] == "<b>hi</b>"


@pytest.mark.asyncio
async def test_the_guard_takes_the_header_or_the_cookie_and_nothing_else(guarded: TestServer) -> None:
    url = guarded.make_url("/runs/r1?session_id=s1")
    async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
        for headers, status in [
            ({"Authorization": f"Bearer {TOKEN}"}, 200),
            ({"Authorization": "Bearer nope"}, 401),
            ({"Cookie": f"{COOKIE}={cookie_value(TOKEN)}"}, 200),
            ({"Cookie": f"{COOKIE}={TOKEN}"}, 401),  # the cookie is derived from the token, not the token
            ({"Cookie": f"{COOKIE}={cookie_value('other')}"}, 401),
            ({"Cookie": f"{COOKIE}="}, 401),
        ]:
            async with client.get(url, headers=headers) as response:
                assert response.status == status, headers


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not json", 400),
        (b"[]", 400),
        (b'{"token": 7}', 400),
        (b"\xff\xfe", 400),
        (b'{"token": "' + b"x" * MAX_LOGIN_BODY + b'"}', 413),
    ],
)
async def test_a_bad_login_body_is_a_4xx(guarded: TestServer, body: bytes, status: int) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as client,
        client.post(guarded.make_url("/ui/login"), data=body) as response,
    ):
        assert response.status == status
        assert "error" in await response.json()


@pytest.mark.asyncio
async def test_without_a_token_the_login_has_nothing_to_trade(tmp_path: Path) -> None:
    server = await _serve(tmp_path, None)
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as client,
            client.post(server.make_url("/ui/login"), json={"token": "anything"}) as response,
        ):
            assert response.status == 204
            assert COOKIE not in response.cookies
    finally:
        await server.close()


def test_serve_help_and_bad_arguments() -> None:
    command = [sys.executable, "-m", "relay_runtime.integrations.run_journal.cli", "serve"]
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    for option in ("--host", "--port", "--session-dir", "--token", "--max-streams-per-client"):
        assert option in done.stdout
    assert "loopback" in done.stdout
    bad = subprocess.run([*command, "--port", "70000"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--port" in bad.stderr
    empty = subprocess.run([*command, "--token", ""], capture_output=True, text=True, timeout=60, check=False)
    assert empty.returncode == 2 and "--token" in empty.stderr
    streams = subprocess.run(
        [*command, "--max-streams-per-client", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert streams.returncode == 2 and "max_streams_per_client must be a positive integer" in streams.stderr


@pytest.mark.asyncio
async def test_the_run_list_is_newest_first_with_state_and_duration(tmp_path: Path) -> None:
    append_run_event("s-old", "r-old", "status", {"type": "run_started"}, session_dir=tmp_path, created_at=1000.0)
    append_run_event("s-old", "r-old", "done", {}, session_dir=tmp_path, created_at=1002.5)
    append_run_event("s-new", "r-new", "token", {"text": "x"}, session_dir=tmp_path, created_at=2000.0)
    server = await _serve(tmp_path, TOKEN)
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
            async with client.get(server.make_url("/api/runs")) as response:
                assert response.status == 401
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with client.get(server.make_url("/api/runs"), headers=headers) as response:
                runs = (await response.json())["runs"]
    finally:
        await server.close()
    assert [(r["session_id"], r["run_id"], r["terminal_state"]) for r in runs] == [
        ("s-new", "r-new", "running"),
        ("s-old", "r-old", "completed"),
    ]
    assert runs[0]["duration_s"] is None and runs[0]["started_at"] == 2000.0
    assert runs[1]["duration_s"] == 2.5


@pytest.mark.asyncio
async def test_a_cost_row_holding_half_a_surrogate_pair_does_not_take_the_run_list_down(tmp_path: Path) -> None:
    # A lone surrogate has no UTF-8 form: the writer stores it escaped, and it reads back as itself.
    append_run_event("s", "r", "cost", {"amount": 0.5, "currency": "US\ud83d"}, session_dir=tmp_path)
    append_run_event("s", "r", "done", {}, session_dir=tmp_path)
    server = await _serve(tmp_path, None)
    try:
        url = server.make_url("/api/runs")
        async with aiohttp.ClientSession(timeout=TIMEOUT) as client, client.get(url) as response:
            assert response.status == 200
            runs = (await response.json())["runs"]
    finally:
        await server.close()
    assert [(r["run_id"], r["terminal_state"], r["cost"]["currency"]) for r in runs] == [("r", "completed", "US\ud83d")]
