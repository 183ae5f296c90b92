"""The depth policies' speed against their twins in CPU time on both sides (robust to a loaded machine, where
`ttc bench`'s wall-clock ratios are not): bench.DEPTH_CONFIGS on bench.probed_synth(100, 64) at 1, 4 and 16 times its
median trace per query; engine median of 5 calls of 50 seeds, reference median of 3 seeds (each run checked to match
the engine's), per run of the engine's mean size.

    python benchmarks/depth_speed.py [--threads 1] [--policies parallel-probe,cmc,elimination] [--calls 5]

--threads: the engine's (default one; with two, the CPU time of both counts, as `ttc bench`'s wall time does not);
--policies: the rows of these DEPTH_CONFIGS policies only (elimination: the width row, sc-beta under stability:3).
"""
import argparse
import statistics
import time

import numpy as np

import ttc.replay.bench as B
from ttc.replay.engine import depth_pool, run_rows, set_threads
from ttc.replay.policies import RunConfig
from ttc.replay.tables import make_tables

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--policies", default=",".join(p for p, _ in B.DEPTH_CONFIGS))
ap.add_argument("--calls", type=int, default=5, help="engine calls timed per row (their median)")
args = ap.parse_args()
set_threads(args.threads)
B.time.perf_counter = time.process_time  # the reference's timer in _depth_reference: CPU time too
pool = B.probed_synth(100, 64)
med, n = float(np.median(pool.tok)), pool.n_queries
tables = make_tables(64, 0.95, sc_beta=True)
S = 50
seeds = np.arange(S)
for policy, kw in B.DEPTH_CONFIGS:
    if policy not in args.policies.split(","):
        continue
    c = RunConfig(policy, unit="tokens", **kw)
    if c.depth_key() != ("whole", 0, 0, "tokens"):
        depth_pool(pool, c.depth_key())
    for m in (1, 4, 16):
        total = int(round(m * med * n))
        bt = np.full((1, S), total, np.int64)
        run_rows(pool, [c], bt[:, :1], seeds[:1], tables)
        ts = []
        for _ in range(args.calls):
            t = time.process_time()
            _, oi, _, _ = run_rows(pool, [c], bt, seeds, tables)
            ts.append(time.process_time() - t)
        eng = statistics.median(ts) / S
        refs = []
        for s in range(3):
            samples, tokens, dt = B._depth_reference(pool, c, total, s)
            assert (samples, tokens) == (int(oi[0, s, 0]), int(oi[0, s, 1]))
            refs.append(dt * oi[0, :, 0].mean() / samples)
        ref = statistics.median(refs)
        print(f"{c.label():60s} {m:>2}x engine {eng * 1e3:7.3f} ms  reference {ref * 1e3:8.1f} ms  ratio "
              f"{ref / eng:6.0f}x", flush=True)
