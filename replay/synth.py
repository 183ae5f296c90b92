"""Synthetic pools: per-query success rates from a Beta with a mass of unsolvable queries, noisy scores with
ties, repeating wrong answers and invalid outputs, token counts. Used by the tests and `ttc bench`."""
from __future__ import annotations

import numpy as np

from .pool import Pool


def make_pool(n=60, size=24, seed=0, ragged=False, scores="noisy", answers=True, tokens=True) -> Pool:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(max(2, size // 3), size + 1, n) if ragged else np.full(n, size)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    p = rng.beta(0.6, 0.9, n)
    p[rng.random(n) < 0.15] = 0.0  # a mass of unsolvable queries
    correct = (rng.random(total) < np.repeat(p, sizes)).astype(np.int8)
    score = None
    if scores != "gt":
        noise = rng.normal(0, 0.25, total)
        score = np.clip(0.25 + 0.5 * correct + noise, 0, 1).round(2)  # rounding makes ties
    ans = None
    if answers:
        # correct = answer 0; wrong answers repeat among 3 (ids 1..3), a fifth of them invalid (-1);
        # per-query ids must stay below the query's pool size
        ans = np.where(correct == 1, 0, rng.integers(1, 4, total))
        ans[(correct == 0) & (rng.random(total) < 0.2)] = -1
        ans[ans >= np.repeat(sizes, sizes)] = -1
    tok = rng.integers(50, 400, total) if tokens else None
    return Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok, name=f"synthetic-{n}x{size}-{seed}")
