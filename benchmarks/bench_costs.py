"""What each of `ttc bench`'s configurations costs, measured, beside the costs its estimate reads (policies.Cost).

    python benchmarks/bench_costs.py [--seeds 20] [--budgets 4,8,16,32] [--cap 4] [--only LABEL,...]

On `ttc bench`'s synthetic pool (500 queries of 64), per configuration (every policy the bench times, and the rules of
bench.RULES under elimination) and budget (draws a query): the engine's CPU ns per decision of the budget (one thread,
--seeds seeds, after a warm-up run) and the reference's CPU us per decision (seed 0; a run stopped after --cap s of CPU
is counted on the decisions it made, a whole run on its budget's; its setup, ~0.02 s a run, included), each beside
what bench.engine_run_s and bench.reference_run_s (less the setup and the time cap) estimate from the registry. CPU
time (time.process_time), so that a loaded machine moves the numbers less than wall time would; run it to recalibrate
a Cost after a change to a policy's engine or reference code (docs/performance.md, `ttc bench`'s estimate).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ttc.replay.bench import BenchSpec, _configs, _costs, engine_run_s
from ttc.replay.engine import run_grid, set_threads
from ttc.replay.policies import Cost
from ttc.replay.reference import run_reference
from ttc.replay.rng import permutation, query_order
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables


class _Stop(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budgets", default="4,8,16,32")
    ap.add_argument("--cap", type=float, default=4.0)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    n, size = 500, 64
    budgets = [int(b) for b in a.budgets.split(",")]
    only = set(filter(None, a.only.split(",")))
    set_threads(1)
    pool = make_pool(n=n, size=size, seed=0)
    tables = make_tables(size, 0.95, sc_beta=False)
    seeds = np.arange(a.seeds)
    perm, rank = permutation(pool.off, pool.qkeys, 0), query_order(pool.qkeys, 0)[0]
    print(f"{'configuration':32} {'budget':>6} {'engine ns':>10} {'declared':>9} {'ref us':>9} {'declared':>9} "
          f"{'ref decisions':>13}")
    for c in _configs(BenchSpec(n=n, size=size)):
        if only and c.label() not in only:
            continue
        for b in budgets:
            bt = np.full((1, a.seeds), b * n, np.int64)
            run_grid(pool, [c], bt[:, :1], seeds[:1], tables)
            t = time.process_time()
            run_grid(pool, [c], bt, seeds, tables)
            engine = 1e9 * (time.process_time() - t) / (a.seeds * b * n)
            declared_engine = 1e9 * engine_run_s(c, b, n) / (b * n)
            made = {"t0": time.process_time()}

            def on_draw(run, made=made):
                made["d"] = run.samples_used
                if time.process_time() - made["t0"] > a.cap:
                    raise _Stop

            t = made["t0"]
            try:
                run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, policy=c.policy,
                              elim=c.eliminate, budget_total=b * n, on_draw=on_draw)
                d = b * n  # (a decision of the budget, as Cost counts them)
            except _Stop:
                d = made["d"]
            ref = 1e6 * (time.process_time() - t) / d
            declared_ref = sum(Cost.at(k.ref_us, b) + k.ref_scan_us * n + 1e6 * k.ref_run_s / (b * n)
                               for k in _costs(c))
            print(f"{c.label():32} {b:>6} {engine:>10.0f} {declared_engine:>9.0f} {ref:>9.1f} {declared_ref:>9.1f} "
                  f"{made.get('d', 0):>13,}", flush=True)


if __name__ == "__main__":
    main()
