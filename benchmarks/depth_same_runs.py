"""Whether two checkouts make the same depth runs: every output of parallel-probe's and cmc's grids (coverage,
accuracy, traces, tokens, answered, and per query the traces drawn and the flags) over 18 configurations (parallel-probe
with four settings, cmc at five betas, in both units) at budgets of 0.3 to 40 times the median trace per query, 30
seeds, on bench.probed_synth(100, 64), probed_synth(37, 20, seed=3) and every pool under --pools (AutoTTS imports:
`ttc import autotts ... --out DIR`). Exit status 1 and the differing cells when any output differs.

    python benchmarks/depth_same_runs.py BASE_DIR [NEW_DIR] [--pools DIR]

A kernel change that keeps the depth policies' semantics must leave every cell equal (the equivalence tests compare
each policy with its twin on small pools; this compares the whole grid with the checkout before the change)."""
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
from pathlib import Path
import numpy as np
import ttc.replay.bench as B
from ttc.replay.engine import run_rows, set_threads
from ttc.replay.pool import load_pool
from ttc.replay.policies import RunConfig
from ttc.replay.tables import make_tables

set_threads(1)
pools = {"synth": B.probed_synth(100, 64), "synth2": B.probed_synth(37, 20, seed=3)}
if sys.argv[2]:
    for d in sorted(Path(sys.argv[2]).iterdir()):
        if d.is_dir():
            pools[d.name] = load_pool(d, probes=True)
tables = make_tables(128, 0.95, sc_beta=True)
cfgs = [RunConfig("parallel-probe", unit=u, **kw) for u in ("tokens", "samples") for kw in
        ({}, {"chains": 8, "stable": 3, "patience": 2, "probe_warmup": 1},
         {"chains": 16, "stable": 5, "patience": 1, "probe_warmup": 0},
         {"chains": 3, "stable": 2, "patience": 3, "probe_warmup": 2})]
cfgs += [RunConfig("cmc", unit=u, cmc_beta=b) for u in ("tokens", "samples") for b in (0.0, 0.25, 0.5, 0.8, 1.0)]
out = {}
S = 30
seeds = np.arange(S)
for name, pool in pools.items():
    med, n = float(np.median(pool.tok)), pool.n_queries
    for m in (0.3, 1, 2.5, 4, 16, 40):
        bt = np.array([[round(m * med * n) if c.unit == "tokens" else round(m * n)] * S for c in cfgs], np.int64)
        for k, a in enumerate(run_rows(pool, cfgs, bt, seeds, tables, per_query=True)):
            out[f"{name} {m}x output {k}"] = a
np.savez(sys.argv[1], **out)
"""


def run(root: Path, out: Path, pools: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(out), pools], cwd=root, capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": _path(root)})
    if r.returncode:
        sys.exit(f"{root}: {r.stderr[-2000:]}")
    return dict(np.load(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path, nargs="?", default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--pools", default="", help="a directory of probed pools (each a subdirectory)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run(a.base, Path(tmp) / "base.npz", a.pools)
        new = run(a.new, Path(tmp) / "new.npz", a.pools)
    bad = [k for k in base if k not in new or not np.array_equal(base[k], new[k])]
    print(f"{len(base)} cells compared, {len(bad)} differ" + (": " + ", ".join(bad[:20]) if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
