"""mmc's cost per decision against its reference's, in CPU time, interleaved (docs/semantics.md, mmc).

    python benchmarks/mmc_cost.py [--repeats 3] [--seeds 20] [--threads N]

On `ttc bench`'s synthetic pool (200 queries of 64), elimination with mmc at its defaults: per budget (8 and 32 a
query), each repeat times the engine on --seeds seeds (one run_grid call) and then the reference on 2 of them, so that
a load change on a shared machine hits both; CPU time (time.process_time: the engine's threads count in full), medians
over the repeats. `ttc bench` times wall clock on its own grid; this isolates the rule. A grid call has a fixed cost
(its Python set-up and its threads: ~0.1 ms of CPU in one thread, ~0.15 ms in two, docs/performance.md, "The grid
call's fixed cost"), which 20 seeds at budget 8 spread at a few ns a decision; more seeds spread it thinner.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ttc.replay.engine import run_grid, set_threads
from ttc.replay.policies import RunConfig
from ttc.replay.reference import run_reference
from ttc.replay.rng import permutation, query_order
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None, help="the grid's threads (default: every core)")
    args = ap.parse_args()
    set_threads(args.threads)
    n, size, seeds = 200, 64, np.arange(args.seeds)
    pool = make_pool(n=n, size=size, seed=0)
    tables = make_tables(size, 0.95, sc_beta=False)
    cfg = RunConfig("elimination", eliminate="mmc")
    run_grid(pool, [cfg], np.full((1, 1), 8 * n, np.int64), seeds[:1], tables)  # compile or load the kernels
    runs = [(permutation(pool.off, pool.qkeys, s), query_order(pool.qkeys, s)[0]) for s in range(2)]
    for b in (8, 32):
        eng, ref = [], []
        for _ in range(args.repeats):
            t = time.process_time()
            _, out_i, _, _ = run_grid(pool, [cfg], np.full((1, len(seeds)), b * n, np.int64), seeds, tables)
            eng.append((time.process_time() - t) / int(out_i[0, :, 0].sum()))
            for perm, rank in runs:
                t = time.process_time()
                r = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank,
                                  policy=cfg.policy, elim=cfg.eliminate, budget_total=b * n)
                ref.append((time.process_time() - t) / r["samples_used"])
        e, rf = statistics.median(eng), statistics.median(ref)
        print(f"budget {b}: engine {e * 1e9:.0f} ns, reference {rf * 1e6:.1f} us per decision: {rf / e:.0f}x")


if __name__ == "__main__":
    main()
