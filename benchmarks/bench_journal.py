"""Run journal: append throughput, summary cold and cached, reading after a cursor in small and large journals.

Targets: >= 50,000 appends/s without fsync; the last 10 rows of a 100,000-row
journal in < 5 ms and within 2x of the same read on a 100-row journal.
"""

from __future__ import annotations

import fcntl
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import journal_stores
from relay_runtime.integrations.run_journal import RunJournalWriter, latest_run_summary, read_run_events
from relay_runtime.integrations.run_journal.journal import SUMMARY_CACHE

RUNS = 5


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


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        root = Path(tmp)
        rates = bench_append(root)
        print(
            f"append (no fsync): median {statistics.median(rates):,.0f} rows/s "
            f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}; target >= 50,000)"
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

    journal_stores.main()  # across processes: Redis Streams beside the file store


if __name__ == "__main__":
    main()
