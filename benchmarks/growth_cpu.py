"""Cost per decision at several pool sizes in CPU time, each size timed in turn round after round (docs/performance.md,
"Growth with the pool"): on a machine other jobs share, wall time moved one cell 2x between runs, while the thread's
CPU time and the interleaving keep the sizes comparable.

    python benchmarks/growth_cpu.py POLICY[,POLICY...] SIZE[,SIZE...] [--responses 64] [--rounds 5] [--decisions N]

Prints, per policy, the median over rounds of ns of CPU per decision at each size (budget 8 per query, one thread,
seeds so that a cell makes about N decisions) and the largest size's over the smallest's."""
import argparse
import statistics
import time

import numpy as np

from ttc.replay.engine import run_grid, set_threads
from ttc.replay.policies import RunConfig
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("policies")
    ap.add_argument("sizes")
    ap.add_argument("--responses", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decisions", type=int, default=800_000)
    a = ap.parse_args()
    set_threads(1)  # _grid runs on this thread: thread_time is its CPU time
    sizes = [int(x) for x in a.sizes.split(",")]
    policies = a.policies.split(",")
    tables = make_tables(a.responses, 0.95, sc_beta=False)
    pools = {n: make_pool(n=n, size=a.responses, seed=0) for n in sizes}
    ns = {(p, n): [] for p in policies for n in sizes}
    for p in policies:
        for n in sizes:  # compile or load, and touch the pool once
            run_grid(pools[n], [RunConfig(p)], np.full((1, 1), 8 * n, np.int64), np.arange(1), tables)
    for r in range(a.rounds):
        for p in policies:
            for n in (sizes if r % 2 == 0 else sizes[::-1]):
                seeds = np.arange(max(1, a.decisions // (8 * n)))
                bt = np.full((1, len(seeds)), 8 * n, np.int64)
                t = time.thread_time()
                _, oi, _, _ = run_grid(pools[n], [RunConfig(p)], bt, seeds, tables)
                ns[p, n].append((time.thread_time() - t) * 1e9 / max(1, int(oi[0, :, 0].sum())))
    print(f"ns of CPU per decision, median of {a.rounds} rounds, {a.responses} responses per query, budget 8")
    for p in policies:
        med = [statistics.median(ns[p, n]) for n in sizes]
        print(f"{p}: " + ", ".join(f"{n:,} {m:.1f}" for n, m in zip(sizes, med, strict=True))
              + (f"; growth {med[-1] / med[0]:.2f}x" if len(sizes) > 1 else ""))
