"""The summary table: means and standard errors over seeds, the best-rho row, uniform's exact values."""
import numpy as np
import polars as pl

from ttc.replay.engine import replay
from ttc.replay.exact import coverage_at_k
from ttc.replay.policies import RunConfig
from ttc.replay.summary import summarize
from ttc.replay.synth import make_pool


def test_summary_means_best_rho_and_uniform_exact():
    pool = make_pool(n=40, size=16, seed=11)
    cfgs = [RunConfig("uniform")] + [RunConfig("two-stage", rho=r) for r in (0.25, 0.5, 0.75)]
    df, _ = replay(pool, cfgs, [2, 6], range(15))
    s = summarize(df, pool, "bon")
    for b in (2, 6):
        runs = df.filter((pl.col("policy") == "two-stage") & (pl.col("budget") == b))
        means = runs.group_by("rho").agg(pl.col("coverage").mean()).sort(["coverage", "rho"], descending=[True, False])
        best = s.filter(pl.col("config").str.starts_with("two-stage best") & (pl.col("budget") == b)).row(0, named=True)
        assert best["coverage"] == means["coverage"][0]
        assert best["config"] == f"two-stage best (rho={means['rho'][0]}, post hoc)"
        u = s.filter((pl.col("config") == "uniform") & (pl.col("budget") == b)).row(0, named=True)
        x = df.filter((pl.col("policy") == "uniform") & (pl.col("budget") == b))["coverage"].to_numpy()
        assert np.isclose(u["coverage"], x.mean())
        assert np.isclose(u["coverage_se"], x.std(ddof=1) / np.sqrt(len(x)))
        assert u["uniform_coverage"] == coverage_at_k(pool)[b - 1]
