"""The core's managed call with warm caches and with cold ones, beside the bare callback.

Every other benchmark times a call right after calls like it, so the code and objects it touches are
in the CPU's caches. In an agent they seldom are: between two LLM calls the SDK, the framework and the
agent's own code run, and an instrumented call finds its own code and objects evicted, and the branch
predictors trained on other code. This benchmark times four ways, each timed call preceded (outside
the timing) by:

- ``hot``: nothing but the other variant's call;
- ``evicted``: a copy of a buffer four times the size of the L2 cache, which replaces its every line
  but runs almost no Python;
- ``paused``: a 0.5 ms sleep, which touches nothing of ours; on a shared virtual machine the core
  runs other work meanwhile;
- ``cold``: a Python loop writing into every line of such a buffer, as other Python code between two
  calls would: caches evicted and the interpreter's branch predictors trained on other code.

The cold figure is what a call costs in situ: the time budgets of the framework, MCP and provider
benchmarks are all of calls made cold (after the framework's or SDK's own work). With valgrind,
the cache lines each call brings in past a simulated L2 (cachegrind) are counted too: a figure of
the code's footprint that a loaded machine cannot move, and the one to lower to make cold calls
cheaper.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import instructions
from benchmarks.bench_core import HEADERS, _content, _watched_relay, provider
from relay_runtime import LLMRequest

CALLS = 400
COUNTED_CALLS = 40
_DEFAULT_L2 = 1 << 20
_LL_MISSES = re.compile(r"LL misses:\s*([\d,]+)")


def _l2_bytes() -> int:
    """The L2 cache's size as the kernel reports it (index2 is the unified L2 on x86 and arm64)."""
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index2/size").read_text().strip()
    except OSError:
        return _DEFAULT_L2
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


class _Evictor:
    """Copies a buffer larger than the L2 cache: every line of it is replaced."""

    def __init__(self, size: int) -> None:
        self._source = bytearray(size)
        self._target = bytearray(size)

    def __call__(self) -> None:
        self._target[:] = self._source


class _OtherPython(_Evictor):
    """A Python loop writing one byte in every cache line of the buffer: the caches are evicted, and the
    branch predictors, which learn the interpreter's jumps between bytecodes, are trained on this loop."""

    def __call__(self) -> None:
        buffer = self._target
        for i in range(0, len(buffer), 64):
            buffer[i] = (buffer[i] + 1) & 255


def _pause() -> None:
    time.sleep(0.0005)


def _variants() -> dict[str, Callable[[], Any]]:
    relay = _watched_relay()
    content = _content()
    return {
        "bare": lambda: provider(LLMRequest(HEADERS, content)),
        "ours": lambda: relay.llm.execute("bench", LLMRequest(HEADERS, content), provider),
    }


def _time(variants: dict[str, Callable[[], Any]], evict: Callable[[], None] | None) -> dict[str, float]:
    """Median CPU microseconds of each variant's single calls, called in turn."""
    clock = time.thread_time_ns
    times: dict[str, list[int]] = {name: [] for name in variants}
    for _ in range(CALLS):
        for name, call in variants.items():
            if evict is not None:
                evict()
            start = clock()
            call()
            times[name].append(clock() - start)
    return {name: statistics.median(values) / 1000 for name, values in times.items()}


def _lines_brought_in(variant: str, l2: int) -> float:
    """Simulated L2 misses per call of ``variant``, each call made after an eviction (cachegrind)."""

    def misses(n: int) -> int:
        run = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={l2},16,64",
             "--cachegrind-out-file=/dev/null", sys.executable, "-m", "benchmarks.bench_cold",
             "--count", variant, str(n)],
            capture_output=True, text=True, timeout=900, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        found = _LL_MISSES.search(run.stderr)
        if run.returncode != 0 or found is None:
            raise RuntimeError(f"bench_cold --count {variant} under cachegrind failed: {run.stderr[-2000:]}")
        return int(found.group(1).replace(",", ""))

    return (misses(COUNTED_CALLS) - misses(0)) / COUNTED_CALLS


def count(variant: str, n: int) -> None:
    """The cachegrind entry: warm up, then ``n`` calls of ``variant``, each after an eviction."""
    call = _variants()[variant]
    evict = _Evictor(4 * _l2_bytes())
    instructions.counted(call, 0, warm=500)
    for _ in range(n):
        evict()
        call()


def main() -> None:
    variants = _variants()
    evict = _Evictor(4 * _l2_bytes())
    for _ in range(2000):  # warm up: specialised bytecode, free lists
        for call in variants.values():
            call()
    figures = {
        "hot": _time(variants, None),
        "evicted": _time(variants, evict),
        "paused": _time(variants, _pause),
        "cold": _time(variants, _OtherPython(4 * _l2_bytes())),
    }
    print(f"managed call (one request intercept, one subscriber), {CALLS} alternated calls, median CPU us")
    print(f"  {'':10s}" + "".join(f"{way:>9s}" for way in figures))
    for name in variants:
        print(f"  {name:10s}" + "".join(f"{by[name]:9.2f}" for by in figures.values()))
    added = {way: by["ours"] - by["bare"] for way, by in figures.items()}
    print(f"  {'added':10s}" + "".join(f"{value:9.2f}" for value in added.values())
          + f"   cold / hot: {added['cold'] / added['hot']:.1f}x")  # fmt: skip
    if instructions.available():
        l2 = _l2_bytes()
        lines = {name: _lines_brought_in(name, l2) for name in variants}
        print(f"cache lines brought in past a {l2 >> 10} KiB L2 per cold call (cachegrind):")
        for name, value in lines.items():
            print(f"  {name:10s} {value:10,.0f}")
        print(f"  {'added':10s} {lines['ours'] - lines['bare']:10,.0f}")
    sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
