"""side-eb's --horizon 1 against --horizon 0 and elimination, paired, as docs/semantics.md reports it: one synthetic
pool per seed (0-199; 200 queries x 16 responses, `mixture:0.5,2,0.3`, a perfect verifier, side signal
`solvable:AUC` for AUC 0.8 and 0.5), coverage at budgets 4 and 8 of the three on the same seed; prints the mean
paired differences in coverage points with their SEs and how many pools differ at all. About a minute of CPU after
the compile.

    python benchmarks/side_eb_horizon.py [POOLS]
"""
import dataclasses
import sys

import numpy as np

from ttc.replay.engine import run_grid
from ttc.replay.policies import RunConfig
from ttc.replay.synth import SynthSpec, generate_arrays, to_pool
from ttc.replay.tables import make_tables

N, SIZE = 200, 16
CONFIGS = [RunConfig("elimination"), RunConfig("side-eb", horizon=0), RunConfig("side-eb", horizon=1)]


def coverage_points(auc: float, budget: int, pools: int) -> np.ndarray:
    """pools x 3: coverage points of elimination, side-eb horizon 0 and horizon 1, one pool and seed per row."""
    rows = []
    for s in range(pools):
        spec = SynthSpec(queries=N, responses=SIZE, difficulty="mixture:0.5,2,0.3", score_dist="binary", fp=0.0,
                         fn=0.0, side_signal=f"solvable:{auc}", seed=s, tokens=0)
        a = generate_arrays(spec)
        pool = dataclasses.replace(to_pool(spec, a), side=a["side"])
        out_f, _, _, _ = run_grid(pool, CONFIGS, np.full((len(CONFIGS), 1), budget * N, np.int64),
                                  np.array([s], np.int64), make_tables(SIZE, 0.95))
        rows.append(out_f[:, 0, 0] * 100)
    return np.array(rows)


def mean_se(d: np.ndarray) -> str:
    return f"{d.mean():+.3f} (SE {d.std(ddof=1) / np.sqrt(len(d)):.3f})"


if __name__ == "__main__":
    pools = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for auc in (0.8, 0.5):
        for budget in (4, 8):
            c = coverage_points(auc, budget, pools)
            h = c[:, 2] - c[:, 1]
            print(f"solvable:{auc} budget {budget}: horizon 1 - 0 {mean_se(h)}, {int((h != 0).sum())} of {pools} "
                  f"pools differ; against elimination: horizon 1 {mean_se(c[:, 2] - c[:, 0])}, "
                  f"horizon 0 {mean_se(c[:, 1] - c[:, 0])}", flush=True)
