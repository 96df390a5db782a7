"""The run page in a real headless Chromium: a run followed live across two server restarts and a reload.

Chromium is Debian's (``apt-get install chromium``), driven by the ``playwright`` package with
``executable_path`` set, since ``playwright install`` cannot download here. Without them the test
skips with the reason, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from process_support import LineReader

from relay_runtime.integrations.run_journal import latest_run_summary, read_run_events

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"  # git-ignored: screenshots a person can look at
SESSION, RUN, TOKEN = "web-session", "run-live-1", "page-secret-7f3a"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000

# Writes the run in batches, one per line read on stdin, so the test decides when each lands.
WRITER = textwrap.dedent(
    """
    import json, sys
    from relay_runtime.integrations.run_journal import RunJournalWriter
    writer = RunJournalWriter(sys.argv[1], sys.argv[2], session_dir=sys.argv[3])
    for line in sys.stdin:
        for event, payload in json.loads(line):
            writer.append_sse_event(event, payload)
        print("written", flush=True)
    """
)

HOSTILE_ARGS = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"


def _tokens(words: str) -> list[tuple[str, dict[str, Any]]]:
    return [("token", {"text": word + " "}) for word in words.split()]


BATCHES: list[list[tuple[str, Any]]] = [
    [
        ("status", {"type": "run_started", "task_id": "t-1"}),
        (
            "runtime_model",
            {
                "session_id": SESSION,
                "stream_id": RUN,
                "model": "claude-x",
                "provider": "anthropic",
                "fallback_active": False,
                "phase": "observed_output",
            },
        ),
        *_tokens("Let me look that up for you."),
        ("tool", {"name": "search", "args": {"query": HOSTILE_ARGS}}),
        ("tool_result", {"name": "search", "outcome": "success", "duration_ms": 12.5, "result": "x" * 600}),
    ],
    [*_tokens("The answer is <b>forty-two</b> & nothing else;"), *_tokens("it was written while the server was down.")],
    [*_tokens("A second restart loses nothing either.")],
    [
        # As a streamed fallback is written: the first route's words and its failed attempt, then the second
        # route's first words before its warning (they start the answer the summary and the page end with).
        *_tokens("Words of a stream cut"),
        (
            "span",
            {
                "kind": "attempt",
                "id": "a1",
                "parent_id": "c1",
                "name": "llm",
                "provider": "openai",
                "model": "gpt-x",
                "outcome": "failed",
                "duration_s": 0.2,
                "error_type": "RateLimitError",
            },
        ),
        *_tokens("After"),
        (
            "warning",
            {
                "type": "fallback",
                "message": "Switched to fallback: claude-x (anthropic)",
                "from_provider": "openai",
                "from_model": "gpt-x",
                "to_provider": "anthropic",
                "to_model": "claude-x",
            },
        ),
        *_tokens("the reload, the page follows on."),
        (
            "span",
            {
                "kind": "attempt",
                "id": "a2",
                "parent_id": "c1",
                "name": "llm",
                "provider": "anthropic",
                "model": "claude-x",
                "outcome": "success",
                "duration_s": 1.4,
                "input_tokens": 120,
                "output_tokens": 48,
                "cost": {"amount": 0.0123, "currency": "USD"},
            },
        ),
        ("cost", {"amount": 0.0123, "currency": "USD", "attempt_id": "a2"}),
        ("span", {"kind": "logical_call", "id": "c1", "name": "main", "outcome": "success", "duration_s": 1.7}),
        ("done", {"usage": {"input_tokens": 120, "output_tokens": 48}}),
    ],
]


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser test cannot run under CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (it is in the dev extra)")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _unavailable("Debian's chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        except Exception as exc:  # any launch failure means no browser, said plainly
            _unavailable(f"chromium at {executable} did not start: {exc}")
        yield launched
        launched.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``relay-runtime journal serve`` in its own process, killed and restarted on the same port."""

    def __init__(self, session_dir: Path) -> None:
        self.session_dir = session_dir
        self.port = _free_port()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [str(Path(sys.executable).parent / "relay-runtime"), "journal", "serve"]
        command += ["--port", str(self.port), "--session-dir", str(self.session_dir), "--token", TOKEN]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = LineReader(self.proc.stdout).next(timeout=30)  # type: ignore[arg-type]
        assert f"http://127.0.0.1:{self.port}/" in line, line

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)  # no goodbye: the page sees a dropped connection
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path / "sessions")
    yield running
    running.stop()


def _writer_process(server: Server, env: dict[str, str] | None = None) -> Iterator[Any]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, SESSION, RUN, str(server.session_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = LineReader(proc.stdout)  # type: ignore[arg-type]

    def write(batch: list[tuple[str, Any]]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(batch) + "\n")
        proc.stdin.flush()
        assert lines.next(timeout=30).strip() == "written"

    yield write
    if proc.stdin is not None:
        proc.stdin.close()
    proc.wait(timeout=10)


@pytest.fixture
def writer(server: Server) -> Iterator[Any]:
    yield from _writer_process(server)


def test_the_page_follows_a_run_across_restarts_and_a_reload(browser: Any, server: Server, writer: Any) -> None:
    from playwright.sync_api import expect

    server.start()
    context = browser.new_context()
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    writer(BATCHES[0])
    page.goto(f"http://127.0.0.1:{server.port}/ui/sessions/{SESSION}/runs/{RUN}")

    # The token is asked for once; a wrong one is refused and shows nothing.
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    page.fill("#token", "not-the-token")
    page.click("#login button")
    expect(page.locator("#login-error")).to_have_text("That token was refused.", timeout=WAIT_MS)
    expect(page.locator("#assistant-text")).to_have_text("")
    page.fill("#token", TOKEN)
    page.click("#login button")
    expect(page.locator("#login")).to_be_hidden(timeout=WAIT_MS)

    def shows(batches: int) -> None:
        words = [p["text"] for batch in BATCHES[:batches] for e, p in batch if e == "token"]
        expect(page.locator("#assistant-text")).to_have_text("".join(words), timeout=WAIT_MS)

    shows(1)
    expect(page.locator("#state")).to_have_text("running")

    for batch in (1, 2):  # twice: kill the server, write while it is down, start it again
        server.kill()
        expect(page.locator("#connection")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#connection")).to_have_text("reconnecting…")
        writer(BATCHES[batch])
        server.start()
        shows(batch + 1)
        expect(page.locator("#connection")).to_be_hidden(timeout=WAIT_MS)

    page.reload()  # the whole run so far, then it follows on
    shows(3)
    writer(BATCHES[3])
    shows(4)
    expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)

    # Exactly the journal's text, nothing twice; the last message is the summary's last assistant text.
    rows = read_run_events(SESSION, RUN, session_dir=server.session_dir)["events"]
    journal_text = "".join(r["payload"]["text"] for r in rows if r["event"] == "token")
    assert page.locator("#assistant-text").text_content() == journal_text
    summary = latest_run_summary(SESSION, RUN, session_dir=server.session_dir)
    assert summary is not None
    assert page.locator("#assistant-text .message").last.text_content() == summary["last_assistant_text"]
    assert summary["last_assistant_text"] == "After the reload, the page follows on. "

    # Rows are text, never markup.
    assert page.evaluate("window.__pwned") is None
    assert HOSTILE_ARGS in (page.locator("#tools").text_content() or "")
    assert page.locator("#assistant-text b").count() == 0
    # The tool's long result is folded; the call tree shows the fallback's two attempts under their call.
    assert page.locator("#tools details").count() == 1
    expect(page.locator("#tree > li")).to_have_count(1)
    expect(page.locator("#tree > li > ul > li")).to_have_count(2)
    assert "RateLimitError" in (page.locator("#tree").text_content() or "")
    assert "0.0123 USD" in (page.locator("#tree").text_content() or "")
    expect(page.locator("#notices")).to_have_text("fallback: openai / gpt-x → anthropic / claude-x")

    cookie = next(c for c in context.cookies() if c["name"] == "relay_journal_auth")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["value"] != TOKEN
    assert not [url for url in urls if TOKEN in url], "the token must never appear in a URL"

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run-page.png"), full_page=True)

    # The list of runs links to it, with its final state.
    page.goto(f"http://127.0.0.1:{server.port}/")
    row = page.locator("#runs tbody tr")
    expect(row).to_have_count(1, timeout=WAIT_MS)
    expect(row.locator("td").nth(2)).to_have_text("completed")
    expect(row.locator("td").nth(5)).to_have_text("0.0123 USD")
    row.locator("a").click()
    expect(page).to_have_url(f"http://127.0.0.1:{server.port}/ui/sessions/{SESSION}/runs/{RUN}")
    expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)
    context.close()


ODD_ROWS: list[tuple[str, Any]] = [
    *_tokens("Before the odd rows."),
    ("token", "a payload that is a string"),
    ("token", {"text": "y" * 40_000}),  # over the writer's 16 KiB cap: stored truncated
    ("tool", {"name": "write_file", "args": {"text": "z" * 40_000}}),
    ("span", {"kind": "attempt"}),  # no id: not a node of the tree
    *_tokens("After them."),
    ("error", {"type": "ProviderError", "message": "the provider failed"}),
]


@pytest.fixture
def small_cap_writer(server: Server) -> Iterator[Any]:
    yield from _writer_process(server, {**os.environ, "RELAY_JOURNAL_MAX_ROW_BYTES": str(16 * 1024)})


def test_the_page_waits_for_a_run_and_shows_odd_rows_as_they_are(
    browser: Any, server: Server, small_cap_writer: Any
) -> None:
    from playwright.sync_api import expect

    server.start()
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{server.port}/ui/sessions/{SESSION}/runs/{RUN}")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    page.fill("#token", TOKEN)
    page.click("#login button")
    # Opened before the run's first row: it waits, and does not claim a lost connection.
    expect(page.locator("#state")).to_have_text("waiting for the run to start", timeout=WAIT_MS)
    expect(page.locator("#connection")).to_be_hidden()

    small_cap_writer(ODD_ROWS)
    expect(page.locator("#state")).to_have_text("errored", timeout=WAIT_MS)
    text = page.locator("#assistant-text").text_content() or ""
    assert text.startswith("Before the odd rows. [… text of row 6 not kept: ")
    assert "y" * 100 not in text
    notices = page.locator("#notices li").all_text_contents()
    assert notices[0].startswith("row 5 (token) has a payload that is not an object: a payload that is a string")
    assert notices[1].startswith("row 6 (token) was ") and "over the journal's row cap" in notices[1]
    assert notices[2].startswith("row 7 (tool) was ")
    assert notices[3] == "error: the provider failed" or notices[3] == "ProviderError: the provider failed"
    assert "write_file (truncated)" in (page.locator("#tools").text_content() or "")
    assert page.locator("#tree li").count() == 0
    # The message after the truncated tool call is a new one, as the summary says.
    summary = latest_run_summary(SESSION, RUN, session_dir=server.session_dir)
    assert summary is not None and summary["terminal_state"] == "errored"
    assert page.locator("#assistant-text .message").last.text_content() == summary["last_assistant_text"]
    context.close()


def _span(span_id: str, parent_id: str | None, name: str) -> tuple[str, dict[str, Any]]:
    payload: dict[str, Any] = {"kind": "attempt", "id": span_id, "name": name, "outcome": "success", "duration_s": 0.1}
    if parent_id is not None:
        payload["parent_id"] = parent_id
    return ("span", payload)


ODD_TREE: list[tuple[str, Any]] = [
    _span("child", "call", "arrives-before-its-parent"),
    _span("self", "self", "its-own-parent"),
    _span("b", "c", "cycle-b"),
    _span("c", "b", "cycle-c"),
    _span("orphan", "never-written", "parent-never-arrives"),
    _span("call", None, "the-call"),
    _span("late", "child", "grandchild"),
    ("done", {}),
]


def test_the_tree_shows_every_span_even_one_that_is_its_own_parent_or_in_a_cycle(
    browser: Any, server: Server, writer: Any
) -> None:
    from playwright.sync_api import expect

    server.start()
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    writer(ODD_TREE)
    page.goto(f"http://127.0.0.1:{server.port}/ui/sessions/{SESSION}/runs/{RUN}")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    page.fill("#token", TOKEN)
    page.click("#login button")
    expect(page.locator("#state")).to_have_text("completed", timeout=WAIT_MS)
    assert errors == []  # no HierarchyRequestError, nothing dropped
    lines = page.locator("#tree .line").all_text_contents()
    names = ["arrives-before-its-parent", "its-own-parent", "cycle-b", "cycle-c", "parent-never-arrives"]
    for name in [*names, "the-call", "grandchild"]:
        assert sum(name in line for line in lines) == 1, (name, lines)

    # The child that came first moved under its parent, and its own child under it.
    def count(selector: str) -> int:
        return int(page.locator(selector).count())

    assert count("#tree > li[data-id='call'] > ul > li[data-id='child'] > ul > li[data-id='late']") == 1
    # The span that is its own parent, and the one closing the cycle, are at the top and marked.
    top = page.locator("#tree > li > .line").all_text_contents()
    assert "its own parent" in next(line for line in top if "its-own-parent" in line)
    # b waited for c at the top; c went under b; b, adopted by c, would contain its own parent: it stays.
    assert "in a cycle" in next(line for line in top if "cycle-b" in line)
    assert count("#tree > li[data-id='b'] > ul > li[data-id='c']") == 1
    assert page.locator("#tree li.cycle").count() == 2
    # A span whose parent never arrives is shown at the top, unmarked.
    assert any("parent-never-arrives" in line and "⟲" not in line for line in top)
    context.close()
