"""The cost of checking a pool's checksums on load (issue 27): load_pool reads the columns a replay needs and checks
each against the digest its writer embedded (replay/pool.py read_checked). Writes a synthetic pool with `ttc synth`
(5M responses by default: 78,125 queries x 64) once, then times, best of --repeat, in this process:

- read: the same columns read by polars with no check (the floor),
- checked: the same read through read_checked (decode + per-column digests),
- load_pool: the whole load (checks, validation, sort, answer ids).

Usage: python benchmarks/pool_checksum.py [--queries 78125] [--responses 64] [--repeat 3] [--pool DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=78_125)
    ap.add_argument("--responses", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pool", type=Path, default=None, help="reuse (or create) the pool here")
    a = ap.parse_args()
    from ttc.replay.pool import column_digests, load_pool, read_checked, sample_files

    tmp = None
    pool = a.pool
    if pool is None:
        tmp = tempfile.TemporaryDirectory()
        pool = Path(tmp.name) / "pool"
    if not (pool / "samples.parquet").exists():
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ttc.cli", "synth", "--out", str(pool), "--queries", str(a.queries),
                        "--responses", str(a.responses)], check=True)
        print(f"ttc synth: {time.perf_counter() - t:.1f} s")
    files = sample_files(pool)
    cols = [c for c in ("query_id", "sample_idx", "correct", "answer", "n_tokens")
            if c in pl.read_parquet_schema(files[0])]
    rows = pl.scan_parquet(files).select(pl.len()).collect().item()
    load_pool(pool)  # warm: imports, page cache
    frame = pl.read_parquet(files, columns=cols)
    t_read = best(lambda: pl.read_parquet(files, columns=cols), a.repeat)
    t_digest = best(lambda: column_digests(frame), a.repeat)
    t_checked = best(lambda: read_checked(files, cols), a.repeat)
    t_load = best(lambda: load_pool(pool), a.repeat)
    print(f"pool: {rows:,} responses, columns read: {', '.join(cols)}")
    print(f"read (no check)     {t_read:7.3f} s")
    print(f"digests alone       {t_digest:7.3f} s")
    print(f"read + check        {t_checked:7.3f} s   (+{t_checked - t_read:.3f} s)")
    print(f"load_pool (whole)   {t_load:7.3f} s   (check = {100 * (t_checked - t_read) / t_load:.0f}% of it)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
