"""Depth against width at equal tokens on a directory of probed pools (`ttc import autotts ... --out DIR`): uniform
and elimination (sc-beta) on whole traces, the same under the answer-stability rule, parallel-probe and cmc, each with
--select sc, 100 seeds, token budgets of 50k / 100k / 200k per query; prints one markdown table per budget (accuracy %
+- SE over seeds).

    python benchmarks/depth_vs_width.py DIR
"""
import sys
from pathlib import Path

import polars as pl

from ttc.replay.engine import replay
from ttc.replay.policies import RunConfig
from ttc.replay.pool import load_pool

cfgs = [RunConfig("uniform", unit="tokens"),
        RunConfig("uniform", unit="tokens", depth_rule="stability", depth_m=3),
        RunConfig("uniform", unit="tokens", depth_rule="stability", depth_m=6),
        RunConfig("elimination", unit="tokens", eliminate="sc-beta"),
        RunConfig("elimination", unit="tokens", eliminate="sc-beta", depth_rule="stability", depth_m=6),
        RunConfig("parallel-probe", unit="tokens", chains=8),
        RunConfig("parallel-probe", unit="tokens", chains=16),
        RunConfig("cmc", unit="tokens", cmc_beta=0.5)]
budgets = [50_000, 100_000, 200_000]
rows = []
for d in sorted(Path(sys.argv[1]).iterdir()):
    pool = load_pool(d, probes=True)
    df, _ = replay(pool, cfgs, budgets, range(100), select="sc")
    g = df.group_by("config", "budget", maintain_order=True).agg(
        acc=pl.col("accuracy").mean(), se=pl.col("accuracy").std() / 10,
        tok=pl.col("tokens_used").mean() / pool.n_queries)
    for r in g.iter_rows(named=True):
        rows.append((d.name, r["config"], r["budget"], r["acc"], r["se"], r["tok"]))
out = pl.DataFrame(rows, schema=["pool", "config", "budget", "acc", "se", "tok"], orient="row")
if len(sys.argv) > 2:
    out.write_parquet(Path(sys.argv[2]))
for b in budgets:
    t = out.filter(pl.col("budget") == b).with_columns(
        cell=pl.format("{} ± {}", (pl.col("acc") * 100).round(1), (pl.col("se") * 100).round(1)))
    piv = t.pivot(on="config", index="pool", values="cell")
    print(f"\n### {b:,} tokens per query\n")
    print("| " + " | ".join(piv.columns) + " |")
    print("|" + "---|" * len(piv.columns))
    for r in piv.iter_rows():
        print("| " + " | ".join(str(x) for x in r) + " |")
