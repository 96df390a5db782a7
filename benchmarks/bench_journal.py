"""Run journal: append throughput, summary cold and cached, reading after a cursor, and SSE under load.

Targets: >= 100,000 appends/s without fsync; the last 10 rows of a 100,000-row
journal in < 5 ms and within 2x of the same read on a 100-row journal; 200 SSE
clients replaying a 10 MB run keep the server under 300 MB resident, 40 stalled
readers of that run under 200 MB (and are dropped after the write timeout); the run page renders
12,000 span rows in <= 1 s in headless Chromium (``journal_page``).

The SSE figures come from ``relay-runtime journal serve`` in its own process
(its peak resident memory is its VmHWM) with the clients in this one.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from benchmarks import journal_page, journal_stores
from relay_runtime.integrations.run_journal import RunJournalWriter, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal.journal import SUMMARY_CACHE

RUNS = 5
SSE_RUNS = 3
MB = 1_000_000

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the load driver the tests use
from journal_load import ServerProcess, get_json, replay, stalled_reader, write_run  # noqa: E402


def _median_s(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _fill(root: Path, run_id: str, rows: int) -> RunJournalWriter:
    writer = RunJournalWriter("bench", run_id, session_dir=root, fsync="terminal")
    for i in range(rows):
        writer.append_sse_event("token", {"text": f"token {i} of the answer "})
    return writer


def bench_append(root: Path, rows: int = 20_000) -> list[float]:
    rates = []
    for run in range(RUNS):
        writer = RunJournalWriter("bench", f"append-{run}", session_dir=root, fsync="terminal")
        payload = {"text": "a token of the answer "}
        start = time.perf_counter()
        for _ in range(rows):
            writer.append_sse_event("token", payload)
        rates.append(rows / (time.perf_counter() - start))
    return rates


def bench_floor(root: Path, rows: int = 20_000) -> list[float]:
    """The same system calls an append makes (flock, fstat, write, unlock) with nothing else: the ceiling."""
    line = (
        b'{"version":1,"event_id":"r:1","seq":1,"run_id":"r","session_id":"s","event":"token","type":"token",'
        b'"created_at":1.0,"terminal":false,"terminal_state":null,"payload":{"text":"a token of the answer "}}\n'
    )
    rates = []
    for run in range(RUNS):
        fd = os.open(root / f"floor-{run}.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            start = time.perf_counter()
            for _ in range(rows):
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.fstat(fd)
                os.write(fd, line)
                fcntl.flock(fd, fcntl.LOCK_UN)
            rates.append(rows / (time.perf_counter() - start))
        finally:
            os.close(fd)
    return rates


def bench_summary(root: Path, rows: int = 10_000) -> tuple[float, float]:
    _fill(root, "summary", rows)

    def cold() -> None:
        SUMMARY_CACHE.clear()
        latest_run_summary("bench", "summary", session_dir=root)

    cold_s = _median_s(cold, RUNS)
    latest_run_summary("bench", "summary", session_dir=root)
    cached_s = _median_s(lambda: latest_run_summary("bench", "summary", session_dir=root), 200)
    return cold_s, cached_s


def bench_tail(root: Path, rows: int, repeat: int = 200) -> float:
    run_id = f"tail-{rows}"
    _fill(root, run_id, rows)
    cursor = rows - 10

    def read() -> None:
        got = read_run_events("bench", run_id, after_seq=cursor, session_dir=root)["events"]
        assert len(got) == 10

    read()
    return statistics.median(_median_s(read, repeat) for _ in range(RUNS))


async def _replay_crowd(url: str, clients: int) -> list[float]:
    """Seconds from the start to each client's last byte."""
    connector = aiohttp.TCPConnector(limit=0)  # the default pool would queue all but 100 of them
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(base_url=url, connector=connector, timeout=timeout) as client:
        done = await asyncio.gather(*(replay(client, "/runs/big/events", timeout=900) for _ in range(clients)))
        assert len({(r.status, r.messages, r.last_id) for r in done}) == 1, "clients were sent different streams"
        return [r.seconds for r in done]


def bench_sse_replay(root: Path, clients: int = 200, size: int = 10 * MB) -> list[dict[str, float]]:
    """``clients`` SSE clients at once replaying one finished run of ``size`` bytes, on a fresh server each run."""
    write_run(root, "big", size, session_id="load")
    runs = []
    for _ in range(SSE_RUNS):
        # Every client comes from 127.0.0.1: let that one address hold them all (streams and connections).
        extra = ("--max-streams-per-client", str(clients), "--max-connections-per-client", str(clients + 8))
        with ServerProcess(root, extra=extra) as srv:
            idle = srv.memory_kib()["VmRSS"]
            cpu = srv.cpu_seconds()
            client_cpu = time.process_time()
            seconds = asyncio.run(_replay_crowd(srv.url, clients))
            client_cpu = time.process_time() - client_cpu
            memory = srv.memory_kib()
            runs.append(
                {
                    "idle_mib": idle / 1024,
                    "peak_mib": memory["VmHWM"] / 1024,
                    "last_byte_s": max(seconds),
                    "median_client_s": statistics.median(seconds),
                    "server_cpu_s": srv.cpu_seconds() - cpu,
                    "client_cpu_s": client_cpu,
                }
            )
    return runs


async def _stall(url: str, readers: int, hold: float) -> dict[str, int]:
    sockets = [stalled_reader(url, "/runs/big/events") for _ in range(readers)]
    try:
        await asyncio.sleep(hold)
        async with aiohttp.ClientSession(base_url=url) as client:
            _, stats = await get_json(client, "/stats")
    finally:
        for sock in sockets:
            sock.close()
    return stats


def bench_stalled(root: Path, readers: int = 40, write_timeout: float = 5.0) -> dict[str, float]:
    """``readers`` clients that never read, held past the write timeout: peak memory and how many were dropped."""
    with ServerProcess(root, write_timeout=write_timeout) as srv:
        idle = srv.memory_kib()["VmRSS"]
        stats = asyncio.run(_stall(srv.url, readers, write_timeout + 3))
        return {
            "idle_mib": idle / 1024,
            "peak_mib": srv.memory_kib()["VmHWM"] / 1024,
            "dropped": stats.get("sse_dropped_slow", 0),
            "open": stats.get("sse_open", 0),
        }


def _print_sse(root: Path) -> None:
    runs = bench_sse_replay(root)
    med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(
        f"SSE replay, 200 clients x 10 MB run (server in its own process, {SSE_RUNS} runs, medians): "
        f"peak RSS {med['peak_mib']:.0f} MiB (idle {med['idle_mib']:.0f}; target < 300), "
        f"time to last byte {med['last_byte_s']:.1f} s (median client {med['median_client_s']:.1f} s), "
        f"server CPU {med['server_cpu_s']:.1f} s, clients' CPU {med['client_cpu_s']:.1f} s"
    )
    print("  runs: " + "; ".join(f"peak {r['peak_mib']:.0f} MiB, last byte {r['last_byte_s']:.1f} s" for r in runs))
    stalled = bench_stalled(root)
    print(
        f"40 stalled readers of that run: peak RSS {stalled['peak_mib']:.0f} MiB (idle {stalled['idle_mib']:.0f}; "
        f"target < 200), dropped after the 5 s write timeout: {stalled['dropped']:.0f} of 40, "
        f"still open: {stalled['open']:.0f}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        root = Path(tmp)
        rates = bench_append(root)
        print(
            f"append (no fsync): median {statistics.median(rates):,.0f} rows/s "
            f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; target >= 100,000)"
        )
        floor = bench_floor(root)
        print(
            f"  floor on this machine now (bare flock+fstat+write+unlock): {statistics.median(floor):,.0f} rows/s; "
            f"appends reach {statistics.median(rates) / statistics.median(floor):.0%} of it"
        )
        cold_s, cached_s = bench_summary(root)
        print(f"summary of 10,000 rows: cold {cold_s * 1e3:.1f} ms, cached {cached_s * 1e6:.1f} us (medians)")
        small = bench_tail(root, 100)
        large = bench_tail(root, 100_000)
        print(
            f"last 10 rows after a cursor: 100-row journal {small * 1e6:.0f} us, "
            f"100,000-row journal {large * 1e6:.0f} us (target < 5 ms), ratio {large / small:.2f}x (target <= 2x)"
        )
        _print_sse(root)

    journal_stores.main()  # across processes: Redis Streams beside the file store
    journal_page.main()  # the run page's render time in headless Chromium


if __name__ == "__main__":
    main()
