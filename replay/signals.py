"""`ttc signals POOL`: how much each side signal a pool carries says about a query after its first k draws failed.

Why: with a ground-truth oracle and nothing else observed, every unanswered query with the same number of failures
looks alike, and round-robin elimination is close to Bayes-optimal (issue 15). A policy can only do better if the
failed responses say something about the query: their confidence, length, truncation, whether they gave an answer,
how their wrong answers agree. This measures that, per pool, in the situation a policy is in when it must decide:

- for each k in `ks` and each seed s, draw each query's first k responses in the order replay draws them
  (replay/rng.py `permutation`: the same permutation every policy sees on seed s);
- keep the queries whose k draws all failed (no correct response; queries holding fewer than k responses are left
  out);
- for each signal (a number per query, computed from those k failed draws only), the AUC for two targets:
  `solvable` (the query has a correct response somewhere in its pool) and `next` (its (k+1)-th draw is correct;
  queries holding exactly k responses are left out). AUC 0.5 = no information; above 0.5 = a higher signal means
  more likely; below 0.5 = informative in reverse (e.g. longer failed responses, less likely solvable).

The AUC reported is the mean over seeds of each seed's AUC (ties count one half). Its standard error is a
bootstrap over queries (`bootstrap` replicates, each resampling the queries with replacement once and reusing that
resample in every seed and k; the replicate's statistic is the same seed mean): the queries are the sampling unit,
so this is the uncertainty about the population of queries the pool stands for. The spread over seeds alone would
understate it (every seed sees the same queries).

Signals (whichever the pool has; pool format: replay/pool.py):
- `<score column> mean` and `<score column> max` over the k failed draws, for every score column;
- `n_tokens mean` (the length of the failed responses; null token counts are skipped);
- `truncated share`: the share of the k draws cut at the token limit (`finish_reason == 'length'`);
- `text chars mean`: the length of the response text, where the pool keeps it;
- `invalid share`: the share of the k draws with no answer (null);
- `answer agreement`: the largest share of the k draws holding one (valid, hence wrong) answer;
- `<column> (query)`: every numeric column of queries.parquet (e.g. MATH's `level`), known before any draw, except
  the ground truth that synthetic pools record (QUERY_TRUTH).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from .pool import PoolError, is_score, load_pool, read_checked, sample_columns, sample_files, verify_file
from .rng import permutation

TARGETS = ("solvable", "next")
QUERY_TRUTH = ("p_true", "solvable")  # queries.parquet columns of `ttc synth` that are the answer, not a signal
BOOTSTRAP = 200


@dataclass
class Signal:
    """One signal: `per` is "response" (values per response, aggregated over the k failed draws by `agg`: mean,
    max, share) or "query" (one value per query, e.g. metadata); `values` in the pool's order (NaN = missing)."""

    name: str
    per: str
    agg: str
    values: np.ndarray


def default_ks(max_size: int) -> list[int]:
    """1, 2, 4, ... up to the largest pool size (k = the size itself leaves no `next` draw, and no solvable query
    among those it failed, so it is left out)."""
    ks, k = [], 1
    while k < max_size:
        ks.append(k)
        k *= 2
    return ks or [1]


def _sorted_columns(path: Path, exprs: list, pool) -> pl.DataFrame:
    """Columns load_pool does not keep, in the pool's order: load_pool sorts by (query_id, sample_idx), which are
    unique, so the same sort lines the rows up; checked against the pool's offsets."""
    # read through the pool's checksums, as load_pool reads: a flipped bit in a signal column is refused, not used
    roots = {"query_id", "sample_idx"} | {c for e in exprs for c in e.meta.root_names()}
    raw = read_checked(sample_files(path), sorted(roots), path)
    df = raw.select(["query_id", "sample_idx", *exprs]).sort("query_id", "sample_idx")
    if df.height != int(pool.off[-1]):
        raise PoolError(f"{path}: the sample files changed while they were read")
    return df


def pool_signals(path: Path, pool) -> list[Signal]:
    """Every signal the pool at `path` carries (module docstring), read once."""
    path = Path(path)
    schema = dict.fromkeys(sample_columns(path))
    scores = [c for c in schema if is_score(c)]
    exprs = [pl.col(c).cast(pl.Float64) for c in scores]
    if "n_tokens" in schema:
        exprs.append(pl.col("n_tokens").cast(pl.Float64))
    if "finish_reason" in schema:
        exprs.append((pl.col("finish_reason") == "length").cast(pl.Float64).alias("truncated"))
    if "text" in schema:
        exprs.append(pl.col("text").str.len_chars().cast(pl.Float64).alias("text_chars"))
    out: list[Signal] = []
    if exprs:
        df = _sorted_columns(path, exprs, pool)
        for c in scores:
            v = df[c].to_numpy()
            out += [Signal(f"{c} mean", "response", "mean", v), Signal(f"{c} max", "response", "max", v)]
        if "n_tokens" in df.columns:
            out.append(Signal("n_tokens mean", "response", "mean", df["n_tokens"].fill_null(np.nan).to_numpy()))
        if "truncated" in df.columns:
            out.append(Signal("truncated share", "response", "mean", df["truncated"].fill_null(np.nan).to_numpy()))
        if "text_chars" in df.columns:
            out.append(Signal("text chars mean", "response", "mean", df["text_chars"].fill_null(np.nan).to_numpy()))
    if pool.has_answers:
        out.append(Signal("invalid share", "response", "mean", (pool.ans < 0).astype(np.float64)))
        out.append(Signal("answer agreement", "response", "agreement", pool.ans.astype(np.float64)))
    qfile = Path(path) / "queries.parquet"
    if qfile.exists():
        q = verify_file(qfile)  # checked against its checksum, as the samples are
        # a constant column (a synthetic pool's n_responses) cannot rank queries: left out
        numeric = [c for c, t in q.schema.items() if (t.is_numeric() or t == pl.Boolean) and c not in QUERY_TRUTH
                   and q[c].n_unique() > 1]
        if numeric:
            q = pl.DataFrame({"query_id": pool.query_ids}).join(q.select("query_id", *numeric), on="query_id",
                                                                 how="left", maintain_order="left")
            for c in numeric:
                out.append(Signal(f"{c} (query)", "query", "value",
                                  q[c].cast(pl.Float64).fill_null(np.nan).to_numpy()))
    return out


def weighted_auc(x: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The AUC of score x for labels y (ties count one half) under each row of weights W (B, m): row b counts
    query i W[b, i] times, so a bootstrap resample is a row of multiplicities. NaN where a row has no positive or
    no negative weight."""
    order = np.argsort(x, kind="stable")
    xs, ys, Ws = x[order], y[order], W[:, order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    pos = np.add.reduceat(Ws * ys, starts, axis=1)
    neg = np.add.reduceat(Ws * ~ys, starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    num = (pos * (below + 0.5 * neg)).sum(axis=1)
    den = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _prefix(values: np.ndarray, D: np.ndarray, agg: str, ks: list[int]) -> dict:
    """{k: per-query aggregate of values over the first k draws D[:, :k]} (D = -1 past a query's pool)."""
    drawn = D >= 0
    V = np.where(drawn, values[np.maximum(D, 0)], np.nan)
    if agg == "max":
        M = np.fmax.accumulate(V, axis=1)
        return {k: M[:, k - 1] for k in ks}
    if agg == "agreement":  # the largest count of one valid answer among the first k draws, over k
        n, kmax = V.shape
        A = np.where(np.isnan(V), -1, V).astype(np.int64)
        counts = np.zeros((n, int(A.max(initial=0)) + 2), np.int64)
        lead = np.zeros(n, np.int64)
        rows = np.arange(n)
        out = {}
        for t in range(kmax):
            a = A[:, t]
            ok = a >= 0
            counts[rows[ok], a[ok]] += 1
            lead[ok] = np.maximum(lead[ok], counts[rows[ok], a[ok]])
            if t + 1 in ks:
                out[t + 1] = lead / (t + 1)
        return out
    S = np.nancumsum(V, axis=1)
    C = np.cumsum(~np.isnan(V), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {k: np.where(C[:, k - 1] > 0, S[:, k - 1] / np.maximum(C[:, k - 1], 1), np.nan) for k in ks}


def measure(pool, signals: list[Signal], ks: list[int], seeds, bootstrap: int = BOOTSTRAP, boot_seed: int = 0,
            progress=None) -> pl.DataFrame:
    """One row per (target, signal, k): the seed-mean AUC, its bootstrap standard error over queries, and how many
    queries it rests on (module docstring)."""
    if not pool.has_gt:
        raise PoolError("ttc signals needs ground truth (a 'correct' column): its targets are whether a query is "
                        "solvable and whether its next response is correct")
    n, sizes = pool.n_queries, pool.sizes
    ks = sorted(set(int(k) for k in ks))
    kmax = max(ks)
    rng = np.random.default_rng(np.random.SeedSequence([boot_seed, 15]))
    W = np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1.0 / n), size=bootstrap)]).astype(np.float64)
    solvable = np.add.reduceat(pool.correct.astype(np.int64), pool.off[:-1]) > 0 if n else np.zeros(0, bool)
    cols = np.arange(kmax + 1)
    have = cols[None, :] < sizes[:, None]
    seeds = list(seeds)
    # acc[target][signal][k]: per seed, the (bootstrap + 1) AUCs; counts per k: eligible queries, positives
    acc = {t: {s.name: {k: [] for k in ks} for s in signals} for t in TARGETS}
    counts = {t: {k: [] for k in ks} for t in TARGETS}
    for seed in seeds:
        perm = permutation(pool.off, pool.qkeys, int(seed))
        idx = pool.off[:-1, None] + cols[None, :]
        D = np.where(have, perm[np.minimum(idx, len(perm) - 1)], -1)
        hit = np.where(D >= 0, pool.correct[np.maximum(D, 0)], 0)
        any_hit = np.cumsum(hit[:, :kmax], axis=1) > 0
        values = {s.name: (_prefix(s.values, D[:, :kmax], s.agg, ks) if s.per == "response"
                           else dict.fromkeys(ks, s.values)) for s in signals}
        for k in ks:
            failed = (sizes >= k) & ~any_hit[:, k - 1]
            labels = {"solvable": (failed, solvable), "next": (failed & (sizes > k), hit[:, k].astype(bool))}
            for t, (elig, y) in labels.items():
                counts[t][k].append((int(elig.sum()), int((elig & y).sum())))
                for s in signals:
                    x = values[s.name][k]
                    m = elig & ~np.isnan(x)
                    acc[t][s.name][k].append(weighted_auc(x[m], y[m], W[:, m]) if m.any()
                                             else np.full(len(W), np.nan))
            if progress:  # per (seed, k): a seed's bootstrap over every signal can take minutes (issue 27)
                progress(1)
    rows = []
    for t in TARGETS:
        for s in signals:
            for k in ks:
                A = np.array(acc[t][s.name][k])  # (seeds, 1 + bootstrap)
                defined = ~np.isnan(A[:, 0])
                with warnings.catch_warnings():  # a replicate with no defined seed: NaN, dropped below
                    warnings.simplefilter("ignore", RuntimeWarning)
                    point = float(np.nanmean(A[:, 0])) if defined.any() else float("nan")
                    reps = np.nanmean(A[:, 1:], axis=0) if defined.any() else np.full(bootstrap, np.nan)
                reps = reps[~np.isnan(reps)]
                se = float(reps.std(ddof=1)) if len(reps) > 1 else float("nan")
                c = np.array(counts[t][k], np.float64)
                rows.append({"target": t, "signal": s.name, "per": s.per, "k": k, "auc": point, "se": se,
                             "queries": float(c[:, 0].mean()), "positives": float(c[:, 1].mean()),
                             "seeds": int(defined.sum())})
    return pl.DataFrame(rows, schema={"target": pl.String, "signal": pl.String, "per": pl.String, "k": pl.Int64,
                                      "auc": pl.Float64, "se": pl.Float64, "queries": pl.Float64,
                                      "positives": pl.Float64, "seeds": pl.Int64})


# ------------------------------------------------------------------------------------------------- the command

@dataclass
class SignalsRequest:
    pool: Path | None = None
    ks: list | None = None
    seeds: int = 20
    seed_start: int = 0
    bootstrap: int = BOOTSTRAP
    out: Path | None = None
    plot: Path | None = None
    force: bool = False


def validate(req: SignalsRequest):
    """What can be refused before the pool is read."""
    from .outputs import check_output
    from .pool import DEFAULT_POOL
    from .run import check_seeds

    if req.seeds < 1:
        raise PoolError(f"--seeds must be >= 1, got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    if req.bootstrap < 2:
        raise PoolError(f"--bootstrap must be >= 2 (replicates for the standard error), got {req.bootstrap}")
    if req.ks is not None and (not req.ks or min(req.ks) < 1):
        raise PoolError(f"--ks must be draws >= 1, got {req.ks}")
    reads = [req.pool or DEFAULT_POOL]
    if req.out is not None:
        check_output(req.out, flag="--out", command="signals", reads=reads, force=req.force)
    if req.plot is not None:
        from .extras import check

        check("matplotlib", "ttc signals --plot")
        check_output(req.plot, flag="--plot", command="signals", reads=reads, force=req.force,
                     kind="figure")
    if req.out is not None and req.plot is not None and Path(req.out).resolve() == Path(req.plot).resolve():
        raise PoolError(f"--out and --plot are the same file, {req.out}")


def run_signals(req: SignalsRequest, console=None) -> pl.DataFrame:
    from .outputs import write_parquet
    from .pool import DEFAULT_POOL
    from .progress import progress
    from .run import _console

    console = console or _console()
    validate(req)
    path = Path(req.pool or DEFAULT_POOL)
    names = sample_columns(path)
    scores = [c for c in names if is_score(c)]
    # ground truth is checked here, in this command's words (load_pool's would speak of --score gt)
    pool = load_pool(path, score=scores[0] if scores else "gt") if "correct" in names else None
    if pool is None or not pool.has_gt:
        raise PoolError("ttc signals needs ground truth (a 'correct' column): its targets are whether a query is "
                        "solvable and whether its next response is correct")
    biggest = int(pool.sizes.max())
    ks = sorted(set(req.ks)) if req.ks else default_ks(biggest)
    if max(ks) >= biggest:
        raise PoolError(f"--ks: the largest k must be below the largest pool size ({biggest}): a query whose every "
                        f"response was drawn has no next response and cannot be solvable after failing them all")
    signals = pool_signals(path, pool)
    console.print(f"[bold]{pool.name}[/]: {pool.n_queries} queries, {pool.off[-1]} responses; {len(signals)} signals "
                  f"({', '.join(s.name for s in signals) or 'none'}), k = {', '.join(map(str, ks))}, {req.seeds} "
                  f"seeds, {req.bootstrap} bootstrap replicates", highlight=False)
    if not signals:
        console.print("this pool carries no side signal (no score, token, finish-reason, text or answer column and "
                      "no numeric query metadata): nothing to measure", highlight=False)
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    with progress(req.seeds * len(ks), "measuring", "seeds x k", console=console,
                  note=f"drawing {req.bootstrap:,} bootstrap replicates over the queries") as bar:
        df = measure(pool, signals, ks, seeds, req.bootstrap, req.seed_start, progress=bar.advance)
    df = df.with_columns(pl.lit(pool.name).alias("pool"), pl.lit(req.seeds).alias("n_seeds"),
                         pl.lit(req.seed_start).alias("seed_start"), pl.lit(req.bootstrap).alias("bootstrap"))
    for t in TARGETS:
        console.print(render_table(df, t))
    if req.out is not None:
        write_parquet(df, req.out, "signals")
        console.print(f"wrote {df.height} rows to {req.out}", highlight=False)
    if req.plot is not None:
        plot(df, Path(req.plot), pool.name)
        console.print(f"wrote {req.plot}", highlight=False)
    return df


TARGET_TITLE = {"solvable": "the query has a correct response in its pool",
                "next": "the next response (draw k + 1) is correct"}


def render_table(df: pl.DataFrame, target: str):
    from rich.table import Table

    sub = df.filter(pl.col("target") == target)
    ks = sorted(sub["k"].unique().to_list())
    t = Table(title=f"AUC for '{TARGET_TITLE[target]}', after k failed draws",
              caption="mean over seeds ± standard error (bootstrap over queries); 0.5 = no information, < 0.5 = "
                      "informative in reverse", title_style="bold", caption_style="dim")
    t.add_column("signal")
    for k in ks:
        t.add_column(f"k={k}", justify="right")
    first = sub.filter(pl.col("signal") == sub["signal"][0]) if sub.height else sub
    by_k = {r["k"]: r for r in first.iter_rows(named=True)}
    t.add_row("[dim]queries (positive)[/]", *[f"[dim]{_count(by_k[k]['queries'])} "
                                              f"({_count(by_k[k]['positives'])})[/]"
                                              for k in ks])
    t.add_section()
    for name in sub["signal"].unique(maintain_order=True):
        cells = {r["k"]: r for r in sub.filter(pl.col("signal") == name).iter_rows(named=True)}
        t.add_row(name, *[_auc_cell(cells[k]) for k in ks])
    return t


def _count(v: float) -> str:
    """A mean count over seeds: whole from 10 up, else to a tenth (0.3 positives a seed is not 0)."""
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _auc_cell(r: dict) -> str:
    """n/a where the AUC is undefined or rests on less than one positive (or negative) query a seed on average: the
    mean of the few seeds that had one is no measurement (issue 28: an AUC printed beside 0 positives)."""
    from .summary import fmt_mean_se

    if r["auc"] != r["auc"] or r["positives"] < 1 or r["queries"] - r["positives"] < 1:
        return "n/a"
    return fmt_mean_se(r["auc"], r["se"])


def plot(df: pl.DataFrame, out: Path, name: str):
    """AUC against k, one line per signal (error bars: ± 1 standard error), one panel per target."""
    from .extras import require
    from .outputs import save_figure

    matplotlib = require("matplotlib", "ttc signals --plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(TARGETS), figsize=(12, 4.5), dpi=120, sharey=True)
    for ax, t in zip(axes, TARGETS):
        sub = df.filter(pl.col("target") == t)
        for s in sub["signal"].unique(maintain_order=True):
            r = sub.filter(pl.col("signal") == s).sort("k")
            ax.errorbar(r["k"].to_numpy(), r["auc"].to_numpy(), yerr=r["se"].to_numpy(), marker="o", ms=4,
                        capsize=2, lw=1.4, label=s)
        ax.axhline(0.5, color="black", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(sub["k"].unique().to_list()))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("failed draws k (log scale)")
        ax.set_title(f"target: {t}", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("AUC (mean over seeds ± SE)")
    axes[-1].legend(loc="best", fontsize=7)
    fig.suptitle(f"{name}: side signals after k failed draws", fontsize=11)
    fig.tight_layout()
    save_figure(fig, out, "signals")
    plt.close(fig)
