"""Time per event that an ATOF / ATIF exporter adds, ours beside NeMo Relay's, in the same run.

The work: scopes opened and closed and marks made under one conversation scope, three
events an iteration. Each variant is that work with one exporter attached, minus the
same work with nothing attached, divided by the events: so the figure is everything
attaching the exporter costs, including building the events the relay would otherwise
skip (ours builds none for a relay nobody watches).

Two figures per exporter: what the agent's thread pays (the work itself, timed without the
exporter's flush: the events are handed over and the agent goes on), and everything the
exporter costs the process (CPU of all threads, each sample ending with its flush: ATOF,
every line written; ATIF, the trajectory exported). Wall-clock medians are printed beside
the CPU ones; on a shared machine they also count time the process sat descheduled.

Budget: at most 2 us per event for ours on the agent's thread, and less than NeMo Relay's
exporter adds.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from relay_runtime import Relay
from relay_runtime import conventions as cv
from relay_runtime.integrations.trajectory import AtifExporter, AtofExporter

ROUNDS = 9
ITERATIONS = 2000
EVENTS = 3 * ITERATIONS + 2
BUDGET_US = 2.0

_cpu = time.process_time  # every thread of the process: work an exporter hands to its own thread counts
_thread = time.thread_time  # the agent's thread alone
_clock = time.perf_counter


Sample = tuple[float, float, float, float]  # agent cpu, agent wall, total cpu, total wall (us per event)


def _median_sample(work: Callable[[], None], finish: Callable[[], Any], rounds: int) -> Sample:
    samples: list[Sample] = []
    work()  # warm up
    finish()
    for _ in range(rounds):
        c, t, w = _cpu(), _thread(), _clock()
        work()
        t1, w1 = _thread(), _clock()
        finish()
        c2, w2 = _cpu(), _clock()
        samples.append((t1 - t, w1 - w, c2 - c, w2 - w))
    return tuple(statistics.median(s[i] for s in samples) / EVENTS * 1e6 for i in range(4))  # type: ignore[return-value]


def _ours_work(relay: Relay) -> Callable[[], None]:
    scope = relay.scope
    meta = {cv.KIND: cv.CONVERSATION, cv.SESSION_ID: "bench"}

    def run() -> None:
        with scope.scope("conversation", "agent", metadata=meta) as top:
            for i in range(ITERATIONS):
                handle = scope.push("step", "function", input=i)
                scope.mark("note", data=i, parent=handle)
                scope.pop(handle, output=i)
        del top

    return run


def _nemo_work(nr: Any) -> Callable[[], None]:
    def run() -> None:
        with nr.scope.scope("conversation", nr.ScopeType.Agent) as top:
            for i in range(ITERATIONS):
                handle = nr.scope.push("step", nr.ScopeType.Function, input=i)
                nr.scope.event("note", handle=handle, data=i)
                nr.scope.pop(handle, output=i)
        del top

    return run


def _line(label: str, sample: Sample) -> None:
    print(
        f"  {label:<38} agent thread {sample[0]:7.3f} cpu {sample[1]:7.3f} wall"
        f"   | all threads, flushed {sample[2]:7.3f} cpu {sample[3]:7.3f} wall  (us/event)"
    )


def bench_ours() -> dict[str, Sample]:
    out: dict[str, Sample] = {}
    out["bare"] = _median_sample(_ours_work(Relay()), lambda: None, ROUNDS)

    relay = Relay()
    atof = AtofExporter(stream=io.StringIO()).attach(relay)

    def atof_finish() -> None:
        atof.force_flush()
        atof._out.seek(0)  # the in-memory "file" is emptied each sample, as a file would stay small
        atof._out.truncate()

    out["atof"] = _median_sample(_ours_work(relay), atof_finish, ROUNDS)
    atof.shutdown()

    relay = Relay()
    atif = AtifExporter().attach(relay)

    def atif_finish() -> None:
        atif.export("bench")
        atif.clear()

    out["atif"] = _median_sample(_ours_work(relay), atif_finish, ROUNDS)
    atif.detach()
    return out


def bench_nemo() -> dict[str, Sample] | None:
    try:
        import nemo_relay as nr
    except ImportError:
        print("nemo_relay: not installed (make bench installs the [bench] extra); skipped")
        return None
    import tempfile

    out: dict[str, Sample] = {}
    out["bare"] = _median_sample(_nemo_work(nr), nr.subscribers.flush, ROUNDS)
    directory = tempfile.mkdtemp(prefix="nemo-atof-")
    config = nr.AtofExporterConfig()
    config.output_directory = directory
    config.filename = "bench.jsonl"
    config.mode = nr.AtofExporterMode.Overwrite
    atof = nr.AtofExporter(config)
    atof.register("bench-atof")
    try:
        out["atof"] = _median_sample(_nemo_work(nr), atof.force_flush, ROUNDS)
    finally:
        atof.shutdown()
        atof.deregister("bench-atof")
    atif = nr.AtifExporter("bench", "agent", "0")
    atif.register("bench-atif")

    def nemo_atif_finish() -> None:
        nr.subscribers.flush()
        atif.export()
        atif.clear()

    try:
        out["atif"] = _median_sample(_nemo_work(nr), nemo_atif_finish, ROUNDS)
    finally:
        atif.deregister("bench-atif")
    return out


def _minus(a: Sample, b: Sample) -> Sample:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


def main() -> None:
    print(__doc__.split("\n\n")[0])
    print(f"{ITERATIONS} iterations of push / mark / pop under one scope ({EVENTS} events), medians of {ROUNDS}")
    # Ours and NeMo's sampled in turn, three times over: a noisy neighbour slows both alike.
    ours_runs: list[dict[str, Sample]] = []
    nemo_runs: list[dict[str, Sample]] = []
    for _ in range(3):
        ours_runs.append(bench_ours())
        nemo = bench_nemo()
        if nemo is not None:
            nemo_runs.append(nemo)

    def med(runs: list[dict[str, Sample]], key: str) -> Sample:
        return tuple(statistics.median(r[key][i] for r in runs) for i in range(4))  # type: ignore[return-value]

    names = {"atof": "AtofExporter", "atif": "AtifExporter"}
    ours = {k: med(ours_runs, k) for k in ("bare", "atof", "atif")}
    _line("ours: the work, nothing attached", ours["bare"])
    added = {key: _minus(ours[key], ours["bare"]) for key in names}
    for key, name in names.items():
        _line(f"ours: added by {name}", added[key])
    if nemo_runs:
        theirs = {k: med(nemo_runs, k) for k in ("bare", "atof", "atif")}
        _line("nemo_relay: the work, nothing attached", theirs["bare"])
        for key, name in names.items():
            nemo_added = _minus(theirs[key], theirs["bare"])
            _line(f"nemo_relay: added by {name}", nemo_added)
            ratios = [nemo_added[i] / added[key][i] if added[key][i] > 0 else float("inf") for i in range(4)]
            print(
                f"  {name}: nemo added / ours added: agent thread {ratios[0]:.1f}x cpu, {ratios[1]:.1f}x wall;"
                f" all threads {ratios[2]:.1f}x cpu, {ratios[3]:.1f}x wall"
            )
    for key, name in names.items():
        agent = added[key][0]
        verdict = "within" if agent <= BUDGET_US else "OVER"
        print(f"  {name}: {agent:.3f} us/event on the agent's thread (cpu), {verdict} the {BUDGET_US} us budget")


if __name__ == "__main__":
    main()
