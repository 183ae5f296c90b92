"""Peak memory of loading and replaying a large pool (issue target: 500 queries x 10,000 responses < 2 GiB).

Writes a synthetic pool to a temporary directory, then runs `ttc replay` on it in a child process and reports
the child's peak RSS (ru_maxrss). Usage: python benchmarks/memory.py [--queries 500] [--responses 10000]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ttc.replay.synth import make_pool


def write_pool(path: Path, n: int, m: int):
    pool = make_pool(n=n, size=m, seed=0)
    sizes = pool.sizes
    pl.DataFrame({
        "query_id": np.repeat(np.array(pool.query_ids), sizes),
        "sample_idx": np.concatenate([np.arange(k) for k in sizes]),
        "correct": pool.correct.astype(bool),
        "answer": pl.Series(pool.ans).cast(pl.String).replace("-1", None),
        "n_tokens": pool.tok,
        "score_rm": pool.score,
        "text": pl.Series(["x" * 200] * len(pool.score)),  # a text column replay must not read
    }).write_parquet(path / "samples.parquet")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--responses", type=int, default=10_000)
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_pool(d, args.queries, args.responses)
        size_mb = (d / "samples.parquet").stat().st_size / 2**20
        cmd = ["ttc", "replay", str(d), "--seeds", str(args.seeds), "--score", "rm", "--gamma", "0.9",
               "--budgets", "4,8,16,32"]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
        print(f"pool {args.queries} x {args.responses} = {args.queries * args.responses:,} rows "
              f"({size_mb:.0f} MiB Parquet): ttc replay, all policies, {args.seeds} seeds: "
              f"peak RSS {peak:.2f} GiB, wall {wall:.1f} s")
        return 0 if peak < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
