"""`ttc info POOL`: what to check before trusting a pool."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .exact import best_of_k, coverage_at_k
from .extras import require
from .outputs import save_figure
from .pool import Pool, load_pool, resolve_score, sample_columns

GAMMAS = (0.5, 0.7, 0.9, 0.97, 1.0)


def pool_info(path) -> dict:
    """Facts about a pool: sizes, columns, difficulty, uniform's exact curves, and how each score column agrees
    with ground truth (precision and recall of `score >= gamma`)."""
    path = Path(path)
    names = sample_columns(path)
    score_cols = [c for c in names if c.startswith("score_")]
    base = load_pool(path, score="gt" if "correct" in names else resolve_score(names, score_cols[0]) if score_cols
                     else "gt")
    sizes = base.sizes
    info = {"name": base.name, "meta": base.meta, "queries": base.n_queries, "responses": int(base.off[-1]),
            "per_query": (int(sizes.min()), float(np.median(sizes)), int(sizes.max())),
            "columns": names, "has_gt": base.has_gt, "has_answers": base.has_answers,
            "has_tokens": base.has_tokens, "score_columns": score_cols}
    if base.has_tokens:
        info["mean_tokens"] = float(base.tok.mean())
    if base.has_answers:
        info["invalid_fraction"] = float((base.ans < 0).mean())
    if base.has_gt:
        per_q = np.add.reduceat(base.correct.astype(np.int64), base.off[:-1])
        info["pass_at_1"] = float(base.correct.mean())
        info["never_solved"] = float((per_q == 0).mean())
        info["always_solved"] = float((per_q == sizes).mean())
        info["coverage_at_k"] = coverage_at_k(base)
        info["best_of_k"] = {}
        info["agreement"] = {}
        for col in score_cols:
            pool = load_pool(path, score=col)
            info["best_of_k"][col] = best_of_k(pool)
            info["agreement"][col] = _agreement(pool)
    return info


def _agreement(pool: Pool) -> list[dict]:
    rows = []
    correct = pool.correct.astype(bool)
    for g in GAMMAS:
        pos = pool.score >= g
        tp = int((pos & correct).sum())
        rows.append({"gamma": g, "flagged": float(pos.mean()),
                     "precision": tp / pos.sum() if pos.sum() else float("nan"),
                     "recall": tp / correct.sum() if correct.sum() else float("nan")})
    return rows


def plot_curves(info: dict, out: Path):
    matplotlib = require("matplotlib", "ttc info --plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    cov = info["coverage_at_k"]
    k = np.arange(1, len(cov) + 1)
    ax.plot(k, cov, lw=2.2, color="black", label="coverage@k (some response correct)")
    for col, curve in info["best_of_k"].items():
        ax.plot(k, curve, lw=1.6, label=f"best-of-k by {col}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("responses per query, k (log scale)")
    ax.set_ylabel("fraction of queries")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{info['name']}: uniform's exact curves ({info['queries']} queries)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    save_figure(fig, out, "info")
    plt.close(fig)
