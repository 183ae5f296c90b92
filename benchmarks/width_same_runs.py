"""Whether two checkouts make the same width runs: every output of run_grid (coverage, accuracies, samples, tokens,
exhausted, answered, and per query the draws and flags) for the width policies a synthetic pool can run (all but
deepconf-online and the pets pair) and elimination under nine rules at K 1 and 2, in both units, at 0.5 to 40 times
the pool's size (samples) or its mean response (tokens) per query, 7 seeds, two threads, on a ragged make_pool(120,
32) and the stability:3 depth view of bench.probed_synth(60, 32), each with a side signal. Exit status 1 and the
differing cells when any output differs.

    python benchmarks/width_same_runs.py BASE_DIR [NEW_DIR]

A change to the grid's machinery or the scheduler that keeps the runs must leave every cell equal (the equivalence
tests compare each policy with the reference on small pools; this compares whole grids with the checkout before)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from compare_engine import _path

CHILD = r"""
import sys
import numpy as np
import ttc.replay.bench as B
from ttc.replay.engine import depth_pool, run_grid, set_threads
from ttc.replay.policies import DEPTH_POLICIES, POLICIES, RunConfig
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

set_threads(2)
width = [p for p in POLICIES if p not in DEPTH_POLICIES and p not in ("deepconf-online", "pets", "pets-online")]
rules = ["threshold", "sc-beta", "sc-share", "ac-majority", "esc", "ac-entropy", "ac-dirichlet", "mmc", "lbayes"]
pools = {"ragged": make_pool(n=120, size=32, seed=11, ragged=True)}
pools["depth"] = depth_pool(B.probed_synth(60, 32), RunConfig("elimination", depth_rule="stability",
                                                               depth_m=3).depth_key())
rng = np.random.default_rng(0)
out = {}
for name, pool in pools.items():
    pool.side = rng.random(len(pool.score))
    tables = make_tables(int(pool.sizes.max()), 0.95, sc_beta=True)
    n, mean_tok = pool.n_queries, float(pool.tok.mean())
    for unit in ("samples", "tokens"):
        cfgs = [RunConfig(p, unit=unit) for p in width] + [RunConfig("elimination", unit=unit, eliminate=r, K=k)
                                                          for r in rules for k in (1, 2)]
        for m in (0.5, 2, 6, 15, 40):
            b = int(m * n) if unit == "samples" else int(m * n * mean_tok)
            res = run_grid(pool, cfgs, np.full((len(cfgs), 7), b, np.int64), np.arange(7), tables, per_query=True)
            for k, a in enumerate(res):
                out[f"{name} {unit} {m}x output {k}"] = a
np.savez(sys.argv[1], **out)
"""


def run(root: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(out)], cwd=root, capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": _path(root)})
    if r.returncode:
        sys.exit(f"{root}: {r.stderr[-2000:]}")
    return dict(np.load(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path, nargs="?", default=Path(__file__).resolve().parent.parent)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run(a.base, Path(tmp) / "base.npz")
        new = run(a.new, Path(tmp) / "new.npz")
    bad = [k for k in base if k not in new or not np.array_equal(base[k], new[k])]
    print(f"{len(base)} cells compared, {len(bad)} differ" + (": " + ", ".join(bad[:20]) if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
