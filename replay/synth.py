"""Small synthetic pools for tests: per-query success rates, noisy scores, repeated wrong answers, tokens."""
import numpy as np

from replay.pool import Pool


def make_pool(n=60, size=24, seed=0, ragged=False, scores="noisy", answers=True, tokens=True) -> Pool:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(max(2, size // 3), size + 1, n) if ragged else np.full(n, size)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    p = rng.beta(0.6, 0.9, n)
    p[rng.random(n) < 0.15] = 0.0  # a mass of unsolvable queries
    correct = np.concatenate([rng.random(m) < p[i] for i, m in enumerate(sizes)]).astype(np.int8)
    if scores == "gt":
        score = None
    else:
        noise = rng.normal(0, 0.25, len(correct))
        score = np.clip(0.25 + 0.5 * correct + noise, 0, 1).round(2)  # rounding makes ties
    ans = None
    if answers:
        # correct = answer 0; wrong answers drawn from 3 repeating ones, some invalid (-1)
        wrong = rng.integers(1, 4, len(correct))
        ans = np.where(correct == 1, 0, wrong)
        ans[(correct == 0) & (rng.random(len(correct)) < 0.2)] = -1
        # per-query ids must be < pool size
        for i, m in enumerate(sizes):
            seg = ans[off[i]:off[i + 1]]
            seg[seg >= m] = -1
    tok = rng.integers(50, 400, len(correct)) if tokens else None
    return Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok, name=f"synthetic-{seed}")
