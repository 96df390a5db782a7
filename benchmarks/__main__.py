"""Run every ``benchmarks/bench_*.py`` module's ``main()`` in turn (or those named on the command line)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main(argv: list[str]) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv] or names
    for name in wanted:
        if name not in names:
            raise SystemExit(f"no benchmark {name!r}; have {names}")
        print(f"\n=== {name} ===", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
