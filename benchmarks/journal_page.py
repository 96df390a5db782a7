"""The run page's render time in a real headless Chromium, for runs of 3,000, 6,000 and 12,000 span rows.

Target: 12,000 rows rendered (the tree built, the run shown completed) in <= 1 s. The time is the
page's own: ``performance.now()`` when its state reads "completed", counted from the navigation's
start, so it covers loading the page, replaying the rows over SSE and building the tree. The ratio of
the 12,000-row time to the 6,000-row one shows how it grows: about 2 for linear, 4 for quadratic.

Needs Debian's chromium and the playwright package (dev extra); without them it says so and skips.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

from relay_runtime.integrations.run_journal import RunJournalWriter
from relay_runtime.integrations.run_journal.routes import create_app

SIZES = (3_000, 6_000, 12_000)
RUNS = 5
_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def write_run(session_dir: Path, run_id: str, spans: int) -> None:
    """A turn of logical calls with two attempts each, children written before their parents (as they end)."""
    writer = RunJournalWriter("bench", run_id, session_dir=session_dir)
    writer.append_sse_event("status", {"type": "run_started"})
    calls = spans // 3
    for call in range(calls):
        for attempt in (1, 2):
            writer.append_sse_event(
                "span",
                {
                    "kind": "attempt",
                    "id": f"a{call}.{attempt}",
                    "parent_id": f"c{call}",
                    "name": "llm",
                    "provider": "openai",
                    "model": "gpt-x",
                    "outcome": "failed" if attempt == 1 else "success",
                    "duration_s": 0.2,
                    "input_tokens": 120,
                    "output_tokens": 48,
                },
            )
        parent = "turn" if call < calls - 1 else None  # one top-level call, to keep a root of each kind
        call_row: dict[str, Any] = {"kind": "logical_call", "id": f"c{call}", "name": "main", "outcome": "success"}
        if parent:
            call_row["parent_id"] = parent
        writer.append_sse_event("span", call_row)
    for extra in range(spans - 3 * calls):
        writer.append_sse_event("span", {"kind": "tool", "id": f"x{extra}", "parent_id": "turn", "name": "tool"})
    writer.append_sse_event("done", {})


@contextmanager
def serving(session_dir: Path) -> Iterator[int]:
    ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            server = TestServer(create_app(session_dir=session_dir, page=True), host="127.0.0.1")
            await server.start_server()
            state["port"], state["stop"], state["loop"] = server.port, asyncio.Event(), asyncio.get_running_loop()
            ready.set()
            await state["stop"].wait()
            await server.close()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the journal server did not start")
    try:
        yield int(state["port"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def render_ms(browser: Any, port: int, run_id: str, spans: int) -> float:
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/ui/sessions/bench/runs/{run_id}")
        done = page.wait_for_function(
            """(spans) => document.getElementById('state').textContent === 'completed'
                && document.querySelectorAll('#tree li').length === spans && performance.now()""",
            arg=spans,
            timeout=120_000,
            polling="raf",
        )
        return float(done.json_value())
    finally:
        context.close()


def main() -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("run page render: skipped (the playwright package is not installed)")
        return
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        print("run page render: skipped (Debian's chromium is not installed)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp, serving(Path(tmp)) as port:
        for spans in SIZES:
            write_run(Path(tmp), f"run-{spans}", spans)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=_ARGS)
            try:
                medians = {}
                for spans in SIZES:
                    times = [render_ms(browser, port, f"run-{spans}", spans) for _ in range(RUNS)]
                    medians[spans] = statistics.median(times)
                    print(
                        f"run page, {spans:,} span rows: rendered in {medians[spans]:.0f} ms "
                        f"(median of {RUNS}: {', '.join(f'{t:.0f}' for t in times)})"
                        + ("; target <= 1000 ms" if spans == 12_000 else "")
                    )
                print(f"  12,000 / 6,000 rows: {medians[12_000] / medians[6_000]:.2f}x (linear ~2x, quadratic ~4x)")
            finally:
                browser.close()


if __name__ == "__main__":
    main()
