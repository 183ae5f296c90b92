"""Small pools written to disk for the commands that read a pool directory (report, compare, tune): a ragged synthetic
pool with answers, tokens and a score, and one with deepconf-online's record lows; and a console that swallows what
those commands print."""
import io
import json

import numpy as np
import polars as pl
from rich.console import Console

from ttc.replay.pool import samples_frame
from ttc.replay.pool import write_pool as write_samples

quiet = Console(file=io.StringIO(), width=200)


def write_pool(d, sizes, correct, answer=None, tokens=None, scores=None, name=None):
    """A pool directory from per-response lists grouped by query (query ids q00, q01, ...)."""
    d.mkdir(parents=True)
    qid = [f"q{i:02d}" for i, s in enumerate(sizes) for _ in range(s)]
    cols = {"query_id": qid, "sample_idx": [k for s in sizes for k in range(s)],
            "correct": [bool(c) for c in correct]}
    if answer is not None:
        cols["answer"] = answer
    if tokens is not None:
        cols["n_tokens"] = tokens
    for k, v in (scores or {}).items():
        cols[f"score_{k}"] = v
    pl.DataFrame(cols).write_parquet(d / "samples.parquet")
    (d / "pool.json").write_text(json.dumps({"name": name or d.name, "model": "test fixture"}))
    return d


def synthetic(d, n=40, seed=4, tokens=True, scores=True):
    """Ragged pool: Beta success rates with a share of unsolvable queries, repeating wrong answers, invalid
    outputs, a noisy score with ties, token counts."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(12, 49, n)
    p = rng.beta(0.3, 1.0, n)
    p[rng.random(n) < 0.15] = 0.0
    correct = rng.random(sizes.sum()) < np.repeat(p, sizes)
    ans = np.where(correct, "right", np.array(["w1", "w2", "w3"])[rng.integers(0, 3, sizes.sum())]).astype(object)
    ans[(~correct) & (rng.random(sizes.sum()) < 0.3)] = None
    score = np.clip(0.3 + 0.6 * correct + rng.normal(0, 0.2, sizes.sum()), 0, 1).round(2)
    return write_pool(d, sizes.tolist(), correct.tolist(), ans.tolist(),
                      rng.integers(20, 300, sizes.sum()).tolist() if tokens else None,
                      {"prm": score.tolist()} if scores else None)


def lows_pool_dir(tmp_path, with_lows=True):
    """6 queries x 8 responses with answers, tokens and two record lows each (none with with_lows=False)."""
    rng = np.random.default_rng(3)
    rows = []
    for q in range(6):
        for k in range(8):
            t = int(rng.integers(5, 40))
            pos = sorted(rng.choice(t, size=2, replace=False).tolist())
            val = sorted(rng.uniform(1, 10, 2).tolist(), reverse=True)
            rows.append({"query_id": f"q{q}", "sample_idx": k, "correct": bool(rng.random() < 0.5),
                         "answer": str(int(rng.integers(0, 3))), "n_tokens": t, "conf_lows_pos": pos,
                         "conf_lows": val})
    df = samples_frame(rows)
    if not with_lows:
        df = df.drop("conf_lows_pos", "conf_lows")
    return write_samples(tmp_path / ("lows" if with_lows else "plain"), df, meta={"name": "t"})
