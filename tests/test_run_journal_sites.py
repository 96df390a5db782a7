"""Another site cannot read the journal: ``Host`` names checked when there is no token (DNS rebinding),
``Origin`` checked on SSE and on requests that change state. Real aiohttp servers on loopback, and a
real headless Chromium resolving a foreign name to 127.0.0.1 as a rebinding attacker would."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from test_run_journal_http import TIMEOUT, read_sse, rows_only
from test_run_page_browser import CHROMIUM_ARGS, _unavailable

from relay_runtime.integrations.run_journal import RunJournalWriter
from relay_runtime.integrations.run_journal.cli import main as journal_main
from relay_runtime.integrations.run_journal.routes import create_app

SECRET_TEXT = "the launch code is 0000"
ROUTES = (
    "/",
    "/api/runs",
    "/stats",
    "/runs/run-a?session_id=session-a",
    "/runs/run-a/events?session_id=session-a",
    "/ui/sessions/session-a/runs/run-a",
    "/ui/static/app.js",
)


def _write_run(session_dir: Path) -> None:
    writer = RunJournalWriter("session-a", "run-a", session_dir=session_dir)
    writer.append_sse_event("token", {"text": SECRET_TEXT})
    writer.append_sse_event("done", {})


@pytest_asyncio.fixture
async def open_server(tmp_path: Path) -> AsyncIterator[TestServer]:
    """No token (the default), the page on, one extra allowed name."""
    _write_run(tmp_path)
    app = create_app(session_dir=tmp_path, page=True, allowed_hosts=["journal.internal"])
    async with TestServer(app, host="127.0.0.1") as srv:
        yield srv


async def _get(srv: TestServer, path: str, **headers: str) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as client,
        client.get(srv.make_url(path), headers=headers) as resp,
    ):
        return resp.status, await resp.read()


@pytest.mark.asyncio
async def test_without_a_token_a_foreign_host_name_is_refused_on_every_route(open_server: TestServer) -> None:
    port = open_server.port
    for path in ROUTES:
        for host in (f"attacker.example:{port}", "attacker.example", f"10.9.8.7:{port}", "localhost.attacker.example"):
            status, body = await _get(open_server, path, Host=host)
            assert status == 403, (path, host)
            assert SECRET_TEXT.encode() not in body
            assert b"allowed_hosts" in body
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            "LOCALHOST.",
            f"journal.localhost:{port}",
            "journal.internal",
            f"[::1]:{port}",
        ):
            status, _ = await _get(open_server, path, Host=host)
            assert status == 200, (path, host)
    status, body = await _get(open_server, "/runs/run-a?session_id=session-a", Host="localhost")
    assert status == 200 and SECRET_TEXT.encode() in body


@pytest.mark.asyncio
async def test_sse_and_state_changing_requests_from_another_origin_are_refused(open_server: TestServer) -> None:
    port = open_server.port
    events = "/runs/run-a/events?session_id=session-a"
    for origin in ("http://attacker.example", f"http://localhost:{port + 1}", "null", "http://127.0.0.1", "junk"):
        status, body = await _get(open_server, events, Origin=origin)
        assert status == 403, origin
        assert SECRET_TEXT.encode() not in body
    # Its own page's origin, or no Origin at all (not a browser's cross-site request): served.
    async with aiohttp.ClientSession(timeout=TIMEOUT) as client:
        for headers in ({"Origin": f"http://127.0.0.1:{port}"}, {}):
            async with client.get(open_server.make_url(events), headers=headers) as resp:
                assert resp.status == 200
                assert [m["id"] for m in rows_only(await read_sse(resp))] == ["run-a:1", "run-a:2"]
        # A page of another site may not post to the login (nor to anything else).
        async with client.post(
            open_server.make_url("/ui/login"), json={"token": "x"}, headers={"Origin": "http://attacker.example"}
        ) as resp:
            assert resp.status == 403
        async with client.post(
            open_server.make_url("/ui/login"), json={"token": "x"}, headers={"Origin": f"http://127.0.0.1:{port}"}
        ) as resp:
            assert resp.status == 204  # no token: nothing to trade
    # Reading a snapshot from another origin is the browser's business (no CORS headers are sent).
    status, body = await _get(open_server, "/runs/run-a?session_id=session-a", Origin="http://attacker.example")
    assert status == 200


@pytest.mark.asyncio
async def test_with_a_token_any_host_name_may_be_used_but_origins_are_still_checked(tmp_path: Path) -> None:
    _write_run(tmp_path)
    app = create_app(session_dir=tmp_path, page=True, bearer_token="journal-secret")
    auth = "Bearer journal-secret"
    async with TestServer(app, host="127.0.0.1") as srv:
        status, body = await _get(srv, "/runs/run-a", Host="journal.example.com", Authorization=auth)
        assert status == 200 and SECRET_TEXT.encode() in body
        status, _ = await _get(srv, "/runs/run-a", Host="journal.example.com")
        assert status == 401
        status, _ = await _get(srv, "/runs/run-a/events", Authorization=auth, Origin="http://attacker.example")
        assert status == 403
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as client,
            client.post(
                srv.make_url("/ui/login"),
                json={"token": "journal-secret"},
                headers={"Origin": "http://attacker.example"},
            ) as resp,
        ):
            assert resp.status == 403  # another site cannot log a browser in


@pytest.mark.parametrize(
    "hosts", [["http://journal.internal"], ["journal.internal:8080"], ["a/b"], [""], "journal.internal", [7]]
)
def test_allowed_hosts_are_host_names(tmp_path: Path, hosts: Any) -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        create_app(session_dir=tmp_path, allowed_hosts=hosts)


def test_the_cli_serves_its_host_name_and_allow_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from relay_runtime.integrations.run_journal import cli

    apps: list[Any] = []
    monkeypatch.setattr(cli, "_run", lambda runner, *args, **kwargs: apps.append(runner.app) or 0)
    _write_run(tmp_path)
    argv = ["serve", "--session-dir", str(tmp_path), "--host", "devbox.lan", "--allow-host", "proxy.example"]
    assert journal_main(argv) == 0

    async def statuses() -> list[int]:
        async with TestServer(apps[0], host="127.0.0.1") as srv:
            return [(await _get(srv, "/api/runs", Host=name))[0] for name in ("devbox.lan", "proxy.example", "x.lan")]

    assert asyncio.run(statuses()) == [200, 200, 403]
    assert journal_main(["serve", "--session-dir", str(tmp_path), "--allow-host", "http://x"]) == 2


# -- in a real browser: a DNS-rebinding page --------------------------------------------------------


@pytest.fixture(scope="module")
def rebinding_browser() -> Iterator[Any]:
    """Chromium resolving ``rebind.test`` to 127.0.0.1: what an attacker's DNS does after the page loaded."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (it is in the dev extra)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _unavailable("Debian's chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(
                executable_path=executable,
                args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
            )
        except Exception as exc:
            _unavailable(f"chromium at {executable} did not start: {exc}")
        yield launched
        launched.close()


def test_a_rebinding_page_in_chromium_reads_nothing(rebinding_browser: Any, tmp_path: Path) -> None:
    import asyncio
    import threading

    _write_run(tmp_path)
    ready = threading.Event()
    state: dict[str, Any] = {}

    def serve() -> None:
        async def run() -> None:
            srv = TestServer(create_app(session_dir=tmp_path, page=True), host="127.0.0.1")
            await srv.start_server()
            state["port"], state["stop"], state["loop"] = srv.port, asyncio.Event(), asyncio.get_running_loop()
            ready.set()
            await state["stop"].wait()
            await srv.close()

        asyncio.run(run())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(20)
    port = state["port"]
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"http://rebind.test:{port}/")
        # To the browser the attacker's page and the journal are one origin: only the server can say no.
        answer = page.evaluate(
            """async () => {
                const runs = await fetch('/api/runs');
                const run = await fetch('/runs/run-a?session_id=session-a');
                return [runs.status, await runs.text(), run.status, await run.text()];
            }"""
        )
        assert answer[0] == 403 and answer[2] == 403
        assert SECRET_TEXT not in answer[1] + answer[3] and "run-a" not in answer[1]
        # The same page under a loopback name lists the run.
        page.goto(f"http://localhost:{port}/")
        page.locator("#runs tbody tr").first.wait_for(timeout=20_000)
        assert "run-a" in (page.locator("#runs").text_content() or "")
    finally:
        context.close()
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(20)
