"""A grid call's cost split into what a run costs before and after its decisions (docs/performance.md, "Growth with
the pool", item 5): per policy and pool size, CPU ms of one run at budget 0 (the per-seed passes and a policy's plan,
such as the oracle's walk), at 1 and at 8 responses a query, and ns per decision at 8 (one thread, the best of 3).

    python benchmarks/fixed_cost.py POLICY[,POLICY...] [SIZES]"""
import sys
import time

import numpy as np

from ttc.replay.engine import run_grid, set_threads
from ttc.replay.policies import RunConfig
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

if __name__ == "__main__":
    set_threads(1)  # _grid runs on this thread: thread_time is its CPU time
    tables = make_tables(64, 0.95, sc_beta=False)
    policies = sys.argv[1].split(",")
    for n in (int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "500,50000").split(",")):
        pool = make_pool(n=n, size=64, seed=0)
        seeds = max(2, 800_000 // (8 * n))
        for p in policies:
            res = {}
            for b in (0, 1, 8):
                bt = np.full((1, seeds), b * n, np.int64)
                run_grid(pool, [RunConfig(p)], bt[:, :1], np.arange(1), tables)
                best = np.inf
                for _ in range(3):
                    t = time.thread_time()
                    _, oi, _, _ = run_grid(pool, [RunConfig(p)], bt, np.arange(seeds), tables)
                    best = min(best, time.thread_time() - t)
                res[b] = (best / seeds, oi[0, :, 0].sum() / seeds)
            print(f"{p}, {n:,} queries: {res[0][0] * 1e3:.3f} ms a run at budget 0, {res[1][0] * 1e3:.3f} at 1, "
                  f"{res[8][0] * 1e3:.3f} at 8 ({res[8][1]:,.0f} decisions, {res[8][0] / res[8][1] * 1e9:.1f} ns each)")
