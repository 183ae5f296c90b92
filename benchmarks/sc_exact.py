"""SC@k over final answers: the engine's uniform + --select sc against the exact expectation (replay.exact.sc_at_k)
on every pool of a directory (the 8 AutoTTS pools: `ttc import autotts ../shared/data/pools/autotts-128 --out DIR`).

    python benchmarks/sc_exact.py DIR --seeds 2000 --ks 1,2,4,8,16,32,64,128

Prints a markdown row per (pool, k): exact, engine mean ± SE over seeds, (engine - exact) / SE. At k = the pool
size every seed draws the whole pool, so the engine's number is exact too (the tie rule aside).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ttc.replay.engine import replay
from ttc.replay.exact import sc_at_k
from ttc.replay.policies import RunConfig
from ttc.replay.pool import load_pool


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pools", type=Path)
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--ks", default="1,2,4,8,16,32,64,128")
    ap.add_argument("--seed-start", type=int, default=0)
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    print("| pool | k | exact SC@k | engine (mean ± SE) | z |")
    print("|---|---|---|---|---|")
    worst, beyond, rows = 0.0, 0, 0
    for d in sorted(p for p in a.pools.iterdir() if (p / "samples.parquet").exists()):
        pool = load_pool(d)
        exact = sc_at_k(pool, ks)
        df, _ = replay(pool, [RunConfig("uniform")], ks, range(a.seed_start, a.seed_start + a.seeds), select="sc")
        for k, e in zip(ks, exact, strict=True):
            acc = df.filter(df["budget"] == k)["accuracy"].to_numpy()
            se = acc.std(ddof=1) / np.sqrt(len(acc))
            # (every seed the same, at k = the pool size: SE 0 up to rounding; the difference must then be rounding)
            if acc.max() == acc.min():  # every seed drew the same outcome (k near the pool size): no SE to compare with
                print(f"| {d.name} | {k} | {e:.10f} | {acc.mean():.10f} (every seed) | - |", flush=True)
                continue
            z = (acc.mean() - e) / se
            worst = max(worst, abs(z))
            beyond += abs(z) > 2
            rows += 1
            print(f"| {d.name} | {k} | {e:.4f} | {acc.mean():.4f} ± {se:.4f} | {z:+.2f} |", flush=True)
    print(f"\nlargest |z|: {worst:.2f}; beyond 2 SE: {beyond} of {rows} rows")


if __name__ == "__main__":
    main()
