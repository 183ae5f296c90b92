"""pets-online under the engine's hard budget, and its cost per run.

    python benchmarks/pets_online_budget.py [--pool data/lastletters-gpt35-40] [--b 4,8] [--seeds 20]

Per budget b and seed: pets-online (pets_options 10, the source's; pets_curve_mc 20,000 and 0) and uniform at total
budget b n on the same permutation and order; prints the sc accuracy of both, their paired difference (mean ± SE over
seeds), and how many queries the run left with no draw at all (the plan holds the budget only in expectation, so the
end of the order can find it spent). Then the CPU time of one run (time.process_time, the mean of 5 after a warm one)
of each on the pool and on `ttc bench`'s synthetic pool (500 x 64), at b = 8. Its output is recorded in
docs/semantics.md (pets-online).
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main():
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool
    from ttc.replay.rng import permutation, query_order
    from ttc.replay.synth import make_pool

    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", type=Path, default=ROOT / "data" / "lastletters-gpt35-40")
    ap.add_argument("--b", default="4,8")
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    pool = load_pool(args.pool)
    n = pool.n_queries
    configs = {"pets-online": RunConfig("pets-online", pets_options=10),
               "pets-online exact": RunConfig("pets-online", pets_options=10, pets_curve_mc=0)}

    def run(p, cfg, budget, seed):
        perm = permutation(p.off, p.qkeys, seed)
        rank, _ = query_order(p.qkeys, seed)
        return run_once(p.off, p.correct, p.score, p.ans, p.tok, perm, rank, cfg, budget)

    print(f"{args.pool.name}, {n} queries, {args.seeds} seeds: sc accuracy, paired difference to uniform, queries "
          f"with no draw (mean, max)")
    for b in [int(x) for x in args.b.split(",")]:
        uni = np.array([np.mean(run(pool, RunConfig("uniform"), b * n, s)["sel_sc"]) for s in range(args.seeds)])
        print(f"b = {b}: uniform {uni.mean():.4f} ± {uni.std(ddof=1) / math.sqrt(len(uni)):.4f}")
        for name, cfg in configs.items():
            got = [run(pool, cfg, b * n, s) for s in range(args.seeds)]
            acc = np.array([np.mean(g["sel_sc"]) for g in got])
            d = acc - uni
            starved = np.array([(np.asarray(g["n_drawn"]) == 0).sum() for g in got])
            print(f"  {name}: {acc.mean():.4f} ± {acc.std(ddof=1) / math.sqrt(len(acc)):.4f}, paired "
                  f"{d.mean():+.4f} ± {d.std(ddof=1) / math.sqrt(len(d)):.4f}; no draw {starved.mean():.1f}, "
                  f"{starved.max()}")
    print("CPU ms per run at b = 8 (mean of 5 after a warm one)")
    for label, p in ((args.pool.name, pool), ("synthetic 500 x 64", make_pool(n=500, size=64, seed=0))):
        for name, cfg in (("uniform", RunConfig("uniform")), *configs.items()):
            run(p, cfg, 8 * p.n_queries, 0)
            t = time.process_time()
            for _ in range(5):
                run(p, cfg, 8 * p.n_queries, 0)
            print(f"  {label}: {name} {(time.process_time() - t) / 5 * 1e3:.1f}")


if __name__ == "__main__":
    main()
