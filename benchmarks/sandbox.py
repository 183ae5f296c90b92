"""Throughput of the code sandbox: trivial programs per second through run_many, with OS isolation on
(`--sandbox strict`: bubblewrap namespaces) and off (`--sandbox guard`: the in-process guard only), and with either
verdict: `whole` (the program and its assertion in one process: LiveCodeBench execution, HumanEval's own check) or
`checked` (a Checked item: the program in one process, the test in a checker that calls it across: HumanEval's
default since issue 27).

Each repeat is one run_many call, runner start-up and self-check included (what a `ttc score --oracle exec` or a
`ttc import humaneval` pays), so short runs understate the steady rate. Prints every repeat and the median.

Usage: python benchmarks/sandbox.py [--programs 1000] [--workers 2] [--repeats 5] [--modes strict,guard]
                                    [--verdicts whole,checked]

Run against a checkout that predates the runner (no `sandbox=` argument), it measures that checkout's sandbox once
per repeat under the label "fresh-interpreter" (each program a new interpreter with the guard).
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time

from ttc.harvest.oracles import sandbox

PROGRAM = "def f(x):\n    return x + 1\n\nassert f(1) == 2\n"


def item(verdict: str):
    if verdict == "checked":
        return sandbox.Checked("def f(x):\n    return x + 1\n", "", "assert f(1) == 2\n", "f")
    return PROGRAM


def rate(n: int, workers: int, mode: str | None, verdict: str = "whole") -> float:
    kw = {} if mode is None else {"sandbox": mode}
    t0 = time.perf_counter()
    out = sandbox.run_many([item(verdict)] * n, workers=workers, timeout_s=10, **kw)
    dt = time.perf_counter() - t0
    bad = [r for r in out if not r.passed]
    if bad:
        raise SystemExit(f"{len(bad)} of {n} trivial programs did not pass: {bad[0]}")
    return n / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modes", default="strict,guard")
    ap.add_argument("--verdicts", default="whole,checked")
    args = ap.parse_args()
    modern = "sandbox" in inspect.signature(sandbox.run_many).parameters
    modes = args.modes.split(",") if modern else [None]
    # a checkout before issue 27 has no Checked items: the whole-program verdict only
    verdicts = [v for v in args.verdicts.split(",") if v == "whole" or hasattr(sandbox, "Checked")]
    if modern:
        info = sandbox.describe()
        print(f"isolation on this machine: {info['level']} ({info['reason']})")
    for mode in modes:
        if mode == "strict" and modern and sandbox.describe()["level"] != "namespaces":
            print("strict: skipped, this machine gives no namespaces")
            continue
        for verdict in verdicts:
            rate(min(args.programs, 20), args.workers, mode, verdict)  # warm: the probe, the page cache
            rates = [rate(args.programs, args.workers, mode, verdict) for _ in range(args.repeats)]
            label = f"{mode or 'fresh-interpreter'} {verdict}"
            print(f"{label:>23}: {statistics.median(rates):7.1f} programs/s median of {args.repeats} "
                  f"({', '.join(f'{r:.1f}' for r in rates)}), {args.programs} programs, workers={args.workers}")


if __name__ == "__main__":
    main()
