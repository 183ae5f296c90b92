"""pets' cost per decision against its reference's, in CPU time, interleaved (docs/semantics.md, pets).

    python benchmarks/pets_cost.py [--repeats 3] [--seeds 10] [--budgets 4,8,16,32] [--mc 0]

On `ttc bench`'s synthetic pool (500 queries of 64), pets at its defaults (16 option buckets, exact rewards; --mc N:
the source's Monte Carlo convention): per budget (draws a query), each repeat times the engine on --seeds seeds
(run_grid) and then the reference on seed 0, so that a load change on a shared machine hits both. The reference's
memo of rewards (reference._okg_reward, an lru_cache) is emptied before each of its runs, so each run pays its own
quadratures as a fresh process does, as the engine's runs do. CPU time (time.process_time: the engine's threads
count in full), medians over the repeats. The reference scans every query per decision, so its cost per decision
grows with the pool; the engine's does not.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ttc.replay.engine import run_grid
from ttc.replay.policies import RunConfig
from ttc.replay.reference import _okg_reward, run_reference
from ttc.replay.rng import permutation, query_order
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budgets", default="4,8,16,32")
    ap.add_argument("--mc", type=int, default=0)
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    n, size, seeds = args.n, 64, np.arange(args.seeds)
    pool = make_pool(n=n, size=size, seed=0)
    tables = make_tables(size, 0.95, sc_beta=False)
    cfg = RunConfig("pets", pets_mc=args.mc)
    run_grid(pool, [cfg], np.full((1, 1), n, np.int64), seeds[:1], tables)  # compile or load the kernels
    perm, rank = permutation(pool.off, pool.qkeys, 0), query_order(pool.qkeys, 0)[0]
    for b in map(int, args.budgets.split(",")):
        eng, ref = [], []
        for _ in range(args.repeats):
            t = time.process_time()
            _, out_i, _, _ = run_grid(pool, [cfg], np.full((1, len(seeds)), b * n, np.int64), seeds, tables)
            eng.append((time.process_time() - t) / int(out_i[0, :, 0].sum()))
            _okg_reward.cache_clear()
            t = time.process_time()
            r = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, policy="pets",
                              budget_total=b * n, pets_mc=args.mc)
            ref.append((time.process_time() - t) / r["samples_used"])
        e, rf = statistics.median(eng), statistics.median(ref)
        each = f"engine {' '.join(f'{x * 1e6:.2f}' for x in eng)}; reference {' '.join(f'{x * 1e6:.0f}' for x in ref)}"
        print(f"budget {b}: engine {e * 1e6:.2f} us, reference {rf * 1e6:.0f} us per decision: {rf / e:.0f}x ({each})",
              flush=True)


if __name__ == "__main__":
    main()
