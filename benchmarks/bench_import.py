"""What importing the library costs a process, beside the interpreter starting with nothing to import.

Every process that uses the library pays it once: a command-line agent, each test process, each worker
a server forks. Each figure is the median over fresh interpreters (``python -c "import X"``), the
interpreter's own start (``python -c "pass"``) subtracted, sampled in turn so that a loaded machine
moves every figure alike. The expressions the detectors need only for texts that are not ASCII are
compiled when such a text is first read (``detectors_forms``); that first read is timed too.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 15
MODULES = (
    "relay_runtime",
    "relay_runtime.adapters",
    "relay_runtime.integrations.otel",
)
# A phone number written in full-width forms: the first text that needs the expressions for other scripts.
_FIRST_WIDE = (
    "import time\n"
    "from relay_runtime import detectors\n"
    "d = detectors.detector('phone')\n"
    "t = time.perf_counter(); d.find('\\u96fb\\u8a71 \\uff0b\\uff14\\uff14 \\uff12\\uff10 \\uff17\\uff19'); "
    "first = time.perf_counter() - t\n"
    "t = time.perf_counter(); d.find('\\u96fb\\u8a71 \\uff0b\\uff14\\uff14 \\uff12\\uff10 \\uff17\\uff18'); "
    "again = time.perf_counter() - t\n"
    "print(first, again)\n"
)


def _wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    samples: dict[str, list[float]] = {"pass": [], **{m: [] for m in MODULES}}
    for _ in range(RUNS):
        samples["pass"].append(_wall("pass"))
        for module in MODULES:
            samples[module].append(_wall(f"import {module}"))
    floor = statistics.median(samples["pass"])
    print(f"import, fresh interpreter, median of {RUNS} runs in turn (wall; the interpreter's start subtracted)")
    print(f"  {'python -c pass':40s} {floor * 1e3:8.1f} ms")
    for module in MODULES:
        print(f"  {'import ' + module:40s} {(statistics.median(samples[module]) - floor) * 1e3:8.1f} ms")
    firsts, agains = [], []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", _FIRST_WIDE], check=True, capture_output=True, text=True)
        first, again = map(float, out.stdout.split())
        firsts.append(first)
        agains.append(again)
    print(
        f"  {'first text not ASCII (detector)':40s} {statistics.median(firsts) * 1e3:8.1f} ms, "
        f"then {statistics.median(agains) * 1e6:.0f} us"
    )


if __name__ == "__main__":
    main()
