"""The journal across processes: Redis Streams beside the file store (``bench_journal`` runs this).

Figures: appends per second for one writer (direct, and pipelined as the
subscriber's background writer sends them) and for 4 writer processes on one
run; and the time from an append in this process to the SSE event from a server
in another process (p50/p99). Redis runs here with ``appendfsync always``, the
configuration the durability tests use (a direct append then waits for its
own fsync; one figure with ``everysec`` shows the difference). Targets: >= 20,000 rows/s for one
pipelined writer; p99 append-to-browser <= 10 ms on loopback.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROWS = 20_000
WRITERS = 4
LATENCY_SAMPLES = 400
RUNS = 3
_PAYLOAD = {"text": "a token of the answer "}


# --- child processes ---------------------------------------------------------------------------


def _store(where: str) -> Any:
    from relay_runtime.integrations.run_journal import FileStore, RedisStreamStore

    return RedisStreamStore(where) if where.startswith("redis://") else FileStore(where)


def _child_write(where: str, mode: str, rows: int, run_id: str) -> None:
    store = _store(where)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.time()
    if mode == "pipelined":
        batch = 256
        for first in range(0, rows, batch):
            pending = [store.prepare("bench", run_id, "token", _PAYLOAD) for _ in range(min(batch, rows - first))]
            store.append_many(pending)
    else:
        for _ in range(rows):
            store.append("bench", run_id, "token", _PAYLOAD)
    print(json.dumps([start, time.time()]), flush=True)


def _child_serve(where: str) -> None:
    from aiohttp import web

    from relay_runtime.integrations.run_journal.routes import create_app

    async def serve() -> None:
        runner = web.AppRunner(create_app(store=_store(where), heartbeat=5.0))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.to_thread(sys.stdin.read)
        await runner.cleanup()

    asyncio.run(serve())


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.journal_stores", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


# --- Redis for the run ---------------------------------------------------------------------------


def _start_redis(data_dir: Path, fsync: str = "always") -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir), "--save", ""]
    data_dir.mkdir(parents=True, exist_ok=True)
    args += ["--appendonly", "yes", "--appendfsync", fsync, "--logfile", str(data_dir / "redis.log")]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    process.kill()
    return None


# --- measurements --------------------------------------------------------------------------------


def bench_writers(where: str, mode: str, writers: int, rows: int, tag: str) -> float:
    """Rows per second over all ``writers`` processes appending to one run at once."""
    children = [_spawn("write", where, mode, str(rows), f"{tag}-{mode}-{writers}") for _ in range(writers)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        spans = [json.loads(child.stdout.readline()) for child in children if child.stdout is not None]
    finally:
        for child in children:
            child.wait(60)
    return writers * rows / (max(end for _, end in spans) - min(start for start, _ in spans))


async def _latency(where: str, run_id: str, samples: int) -> list[float]:
    import aiohttp

    server = _spawn("serve", where)
    store = _store(where)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        store.append("bench", run_id, "status", {})
        sent: dict[int, float] = {}
        got: dict[int, float] = {}

        def write() -> None:
            for _ in range(samples):
                time.sleep(0.003)
                t0 = time.perf_counter()
                seq = store.append("bench", run_id, "token", _PAYLOAD)["seq"]
                sent[seq] = t0
            store.append("bench", run_id, "done", {})

        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as client:
            url = f"http://127.0.0.1:{port}/runs/{run_id}/events?session_id=bench"
            async with client.get(url, headers={"Last-Event-ID": f"{run_id}:1"}) as resp:
                writer = threading.Thread(target=write)
                writer.start()
                async for line in resp.content:  # until the server ends the stream after the terminal row
                    if line.startswith(b"id: "):
                        got[int(line.rsplit(b":", 1)[1])] = time.perf_counter()
                writer.join()
        return sorted(got[seq] - t0 for seq, t0 in sent.items() if seq in got)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(30)
        close = getattr(store, "close", None)
        if close is not None:
            close()


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-journal-stores-") as tmp:
        root = Path(tmp)
        redis = _start_redis(root)
        if redis is None:
            print("redis-server not found (apt-get install redis-server): Redis figures skipped")
            return
        process, url = redis
        try:
            files = str(root / "files")
            cases = [
                ("file", files, "direct", 1),
                ("file", files, "direct", WRITERS),
                ("redis", url, "direct", 1),
                ("redis", url, "pipelined", 1),
                ("redis", url, "direct", WRITERS),
                ("redis", url, "pipelined", WRITERS),
            ]
            print(f"appends/s, one run, medians of {RUNS} runs (noisy shared 2-core machine):")
            for name, where, mode, writers in cases:
                rows = ROWS // writers if mode == "direct" and name == "redis" else ROWS
                rates = [bench_writers(where, mode, writers, rows, f"{name}{i}") for i in range(RUNS)]
                target = "  (target >= 20,000)" if (name, mode, writers) == ("redis", "pipelined", 1) else ""
                print(
                    f"  {name:5} {mode:9} {writers} writer{'s' if writers > 1 else ' '}: "
                    f"{statistics.median(rates):>9,.0f} rows/s "
                    f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}){target}"
                )
            relaxed = _start_redis(root / "everysec", "everysec")
            if relaxed is not None:
                try:
                    for mode in ("direct", "pipelined"):
                        rates = [bench_writers(relaxed[1], mode, 1, ROWS // 4, f"everysec{i}") for i in range(RUNS)]
                        print(
                            f"  redis {mode:9} 1 writer , appendfsync everysec: "
                            f"{statistics.median(rates):>9,.0f} rows/s (runs: {', '.join(f'{r:,.0f}' for r in rates)})"
                        )
                finally:
                    relaxed[0].terminate()
                    relaxed[0].wait(10)
            print(f"append in this process -> SSE event from a server process ({LATENCY_SAMPLES} rows, 3 ms apart):")
            for name, where in (("redis", url), ("file", files)):
                lat = asyncio.run(_latency(where, f"latency-{name}", LATENCY_SAMPLES))
                target = " (target p99 <= 10 ms)" if name == "redis" else " (the file store polls every 50 ms)"
                print(
                    f"  {name:5}: p50 {_pct(lat, 0.5) * 1e3:.2f} ms, p99 {_pct(lat, 0.99) * 1e3:.2f} ms, "
                    f"max {lat[-1] * 1e3:.2f} ms over {len(lat)} rows{target}"
                )
        finally:
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "write":
        _child_write(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "serve":
        _child_serve(sys.argv[2])
    else:
        main()
