"""What the live depth driver (replay.live.run_live_depth: ttc run --policy parallel-probe | cmc) costs beside the
generation it drives: a live run over a probed pool's traces (replay.live.PoolTraces, which costs next to nothing, so
the rest is the driver: kernel runs and bookkeeping), CPU time (time.process_time) per run, medians over seeds, with
the segments and tokens the run generated. The source promises its pool's costliest segment (segment_tokens, as
ttc run's source promises --probe-every) unless --no-bound.

    python benchmarks/live_depth.py POOL [--queries 30] [--traces 64] [--multiple 4] [--seeds 5] [--no-bound]

The budget is --multiple times the pool's median trace length per query (unit tokens, the leaderboard's depth
budgets); each query runs on its first --traces traces of the seed's permutation. The same script runs any checkout
(PYTHONPATH): before issue 30's last item the driver ran the reference twins instead of the kernels."""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


class Timed:
    """PoolTraces with its own CPU time kept apart (and the bound passed on, or not)."""

    def __init__(self, inner, bound: bool):
        self.inner, self.cpu = inner, 0.0
        if bound:
            self.segment_tokens = int(getattr(inner, "segment_tokens", 0) or 0) or _costliest(inner.pool)

    def segment(self, i, k):
        t0 = time.process_time()
        try:
            return self.inner.segment(i, k)
        finally:
            self.cpu += time.process_time() - t0


def _costliest(pool) -> int:
    """The pool's costliest segment (for a checkout whose PoolTraces promises none)."""
    most = 0
    for j in range(len(pool.tok)):
        prev = 0
        for t in pool.probe_tok[pool.probe_off[j]:pool.probe_off[j + 1]]:
            if t >= pool.tok[j]:
                break
            most, prev = max(most, int(t) - prev), int(t)
        most = max(most, int(pool.tok[j]) - prev)
    return most


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pool")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--traces", type=int, default=64)
    ap.add_argument("--multiple", type=float, default=4.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-bound", action="store_true")
    a = ap.parse_args()
    from ttc.replay.live import PoolTraces, run_live_depth
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool
    from ttc.replay.rng import permutation, query_order

    pool = load_pool(a.pool, probes=True)
    n = min(a.queries, pool.n_queries)
    sizes = np.minimum(np.diff(pool.off)[:n], a.traces)
    budget = int(round(a.multiple * float(np.median(pool.tok)))) * n
    print(f"{a.pool}: {n} queries x {int(sizes.max())} traces, budget {budget:,} tokens "
          f"({a.multiple:g} x median trace {float(np.median(pool.tok)):,.0f}), bound {'no' if a.no_bound else 'yes'}")
    for policy in ("parallel-probe", "cmc"):
        cfg = RunConfig(policy, unit="tokens")
        rows = []
        for seed in range(-1, a.seeds):  # (seed -1: compile or load the kernels, untimed)
            s = max(seed, 0)
            perm = permutation(pool.off, pool.qkeys, s)
            src = Timed(PoolTraces(pool, perm), not a.no_bound)
            rank, _ = query_order(pool.qkeys[:n], s)
            t0 = time.process_time()
            o = run_live_depth(src, sizes, rank, config=cfg, budget_total=budget)
            cpu = time.process_time() - t0 - src.cpu
            if seed >= 0:
                rows.append((cpu, o["segments"], o.get("asks", o["segments"]), o["tokens_used"],
                             sum(t[-1].tokens for q in o["traces"] for t in q)))
        med = [statistics.median(r[c] for r in rows) for c in range(5)]
        lo, hi = min(r[0] for r in rows), max(r[0] for r in rows)
        print(f"{policy:15s} driver CPU median {med[0]:.3f} s (min {lo:.3f}, max {hi:.3f}) | segments {med[1]:,.0f}, "
              f"asks {med[2]:,.0f}, tokens paid {med[3]:,.0f}, generated {med[4]:,.0f} | "
              f"{1e6 * med[0] / med[4]:.3f} us CPU per generated token")


if __name__ == "__main__":
    main()
