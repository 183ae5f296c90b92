"""`ttc report`: the study's tables and figures for one or more cached pools, in one command.

Each pool is replayed in at most four engine calls (the main policies with per-query output, every parameter
variant without it, the gamma sweep when it needs another score column, and the field's methods compared by name,
replay/policies.py METHODS); every table is then a view of those runs. Tables are written as data (tables/*.csv,
the columns of `summarize`) as well as Markdown (and LaTeX on request), so that tests can hold them to direct
`ttc replay` results on the same seeds: common random numbers make a configuration's results independent of what
else runs in the same call.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import platform
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console

from . import figures
from .engine import SELECT, check_budgets, get_threads, replay, set_threads
from .exact import best_of_k, coverage_at_k
from .extras import check
from .outputs import atomic_dir, check_output, write_errors
from .policies import (  # (the selection rules' parameters)
    CISC_TEMP,
    DEEPCONF_ETA,
    METHODS,
    REGISTRY,
    RunConfig,
    check_selection_params,
    in_grid,
    supported,
)
from .pool import PoolError, load_pool, sample_columns
from .run import (
    ReplayRequest,
    build_configs,
    check_budget_totals,
    check_per_query_memory,
    check_seeds,
    config_from_options,
)
from .summary import fmt_gain, fmt_mean_se, summarize, uniform_exact

RHOS = (0.25, 0.5, 0.75)
KS = (1, 2, 4, 8)
GAMMAS = (0.97, 0.98, 0.99, 1.0)
LAMBDAS = (1.0, 2.0, 3.0)
HARD_KS = (8, 16)
K_POLICIES = in_grid("K")  # the policies each parameter sweep runs (replay/policies.py's registry)
LAMBDA_POLICIES = in_grid("lambda")
GAMMA_POLICIES = in_grid("gamma")
TOKEN_POLICIES = in_grid("tokens")
CAP_POLICIES = in_grid("cap")
CAP_GRID = tuple(range(5, 201, 5))  # the spec's streaming grid (15, 20, ..., 200), extended down to 5
GROUPS = ("easy", "hard, solvable", "unsolvable")
HARD_RULE = ("hard-k: the exact probability that uniform with k responses per query (drawn without replacement "
             "from the query's pool; the whole pool when it holds fewer than k) solves the query is below 1/2, "
             "i.e. 1 - C(N - c, k) / C(N, k) < 0.5 with N responses of which c are correct. It depends on the pool "
             "only (no seed). Solvable: c > 0. Normalised coverage: coverage on the subset's solvable queries.")


@dataclass
class ReportRequest:
    pools: list
    out: Path
    budgets: list = field(default_factory=lambda: [4.0, 8.0, 16.0, 32.0])
    seeds: int = 100
    seed_start: int = 0
    score: str = "gt"
    select: str = "bon"
    cisc_temp: float = CISC_TEMP
    deepconf_eta: float = DEEPCONF_ETA
    gamma: float = 1.0
    max_samples: int = 0
    latex: bool = False
    threads: int | None = None
    force: bool = False  # replace an --out directory that `ttc report` did not write
    invalid_votes: bool = False  # each query's invalid answers as one answer category (Pool.with_invalid_votes)
    side: str | None = None  # a per-response side column (uab's confidence, side-eb's signal), read where a pool has it
    formats: tuple = ("png",)  # the figures' formats (--format): png, pdf, svg; report.md shows the first

    @property
    def fig(self) -> str:
        """The suffix report.md's figure links use: png when written (a viewer shows it), else the first."""
        return "png" if "png" in self.formats else self.formats[0]


@dataclass
class Table:
    """One table of the report: formatted cells for Markdown / LaTeX and the numbers behind them (CSV)."""

    name: str
    title: str
    header: list
    rows: list
    data: pl.DataFrame | None = None
    note: str = ""


# ------------------------------------------------------------------------------------------------ validation

def validate(req: ReportRequest):
    """Everything checkable before any work, so a typo fails in a second, not after the first pool."""
    if not req.pools:
        raise PoolError("give at least one pool directory")
    if req.select not in SELECT:
        raise PoolError(f"unknown selection {req.select!r}; choose {', '.join(SELECT)}")
    why = check_selection_params(req.cisc_temp, req.deepconf_eta)
    if why:
        raise PoolError(why)
    if req.seeds < 1:
        raise PoolError(f"--seeds must be >= 1, got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    check_budgets(req.budgets)
    if len(set(req.budgets)) != len(req.budgets):
        raise PoolError(f"--budgets lists a budget twice: {req.budgets}")
    config_from_options("elimination", gamma=req.gamma, max_samples=req.max_samples)  # RunConfig's own range checks
    set_threads(req.threads)
    check_output(req.out, flag="--out", command="report", reads=req.pools, force=req.force, kind="dir")


def supported_policies(pool) -> list[str]:
    """Every policy the pool can run (threshold elimination): oracle needs ground truth, entropy answers; as `ttc
    replay`'s default, not the slow ones (pets: its method row in the methods table runs it)."""
    return [p for p in supported(pool) if not REGISTRY[p].slow]


def _load(path, score: str, invalid_votes: bool = False, side: str | None = None):
    """The pool, and why token budgets are impossible on it (None when they are possible); its record lows when it
    has them (deepconf-online's, which the methods' table runs then); its --side column when it has one (uab's
    confidence: the policies and methods that need it run then, and are listed as not run with the reason on a pool
    without it, as a multi-pool report may mix pools with and without a confidence)."""
    side = side if side is not None and side in sample_columns(path) else None
    try:
        return load_pool(path, score=score, need_tokens=True, lows=None, invalid_votes=invalid_votes, side=side), None
    except PoolError as e:  # a real problem raises in the second load
        pool = load_pool(path, score=score, lows=None, invalid_votes=invalid_votes, side=side)
        return pool, str(e).split(": ", 1)[-1]


# ------------------------------------------------------------------------------------------ hard subsets

def uniform_solve_curves(off: np.ndarray, correct: np.ndarray, k_max: int) -> np.ndarray:
    """(queries x k_max): P(some of k responses drawn without replacement is correct) for k = 1..k_max; a query
    whose pool holds fewer than k responses draws them all. Exact in floating point: the chance of k failures is
    the product of (N - c - t) / (N - t) for t < k."""
    sizes = np.diff(off).astype(np.float64)
    c = np.add.reduceat(correct.astype(np.int64), off[:-1]).astype(np.float64)
    fail = np.ones(len(sizes))
    out = np.empty((len(sizes), k_max))
    for t in range(k_max):
        live = t < sizes
        fail = np.where(live, fail * np.clip(sizes - c - t, 0.0, None) / np.where(live, sizes - t, 1.0), fail)
        out[:, t] = 1.0 - fail
    return out


def query_groups(pool) -> pl.DataFrame:
    """Per query: pool size, correct responses, uniform's exact chance to solve it with 8 and 16 responses, and
    the subsets of HARD_RULE; group = easy (not hard-8), hard-8 and solvable, or unsolvable."""
    curves = uniform_solve_curves(pool.off, pool.correct, max(HARD_KS))
    c = np.add.reduceat(pool.correct.astype(np.int64), pool.off[:-1])
    cols = {"query_id": pool.query_ids, "responses": pool.sizes, "correct": c}
    for k in HARD_KS:
        cols[f"p_uniform_{k}"] = curves[:, k - 1]
        cols[f"hard_{k}"] = curves[:, k - 1] < 0.5
    cols["solvable"] = c > 0
    group = np.where(c == 0, GROUPS[2], np.where(cols["hard_8"], GROUPS[1], GROUPS[0]))
    return pl.DataFrame(cols).with_columns(pl.Series("group", group))


def subset_curve(pool, mask: np.ndarray) -> np.ndarray:
    """Uniform's exact coverage@k on the queries in mask, k = 1..smallest pool (as exact.coverage_at_k)."""
    k_max = int(pool.sizes.min())
    if not mask.any():
        return np.full(k_max, np.nan)
    return uniform_solve_curves(pool.off, pool.correct, k_max)[mask].mean(axis=0)


def hard_subsets(pq: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Per (config, budget): coverage on each hard subset and on its solvable part, mean and SE over seeds."""
    flags = groups.select("query_id", *[f"hard_{k}" for k in HARD_KS], "solvable")
    j = pq.select("config", "budget", "seed", "query_id", "covered").join(flags, on="query_id", how="left")
    aggs, metrics = [], []
    for k in HARD_KS:
        n_all = int(groups[f"hard_{k}"].sum())
        n_solv = int((groups[f"hard_{k}"] & groups["solvable"]).sum())
        hit = (pl.col("covered") & pl.col(f"hard_{k}")).sum()
        aggs.append((hit / n_all if n_all else pl.lit(float("nan"))).alias(f"hard_{k}_coverage"))
        aggs.append((hit / n_solv if n_solv else pl.lit(float("nan"))).alias(f"hard_{k}_normalised"))
        metrics += [f"hard_{k}_coverage", f"hard_{k}_normalised"]
    per_run = j.group_by("config", "budget", "seed", maintain_order=True).agg(*aggs)
    out = per_run.group_by("config", "budget", maintain_order=True).agg(
        pl.len().alias("seeds"),
        *[e for m in metrics for e in (pl.col(m).mean().alias(m),
                                       (pl.col(m).std() / pl.len().sqrt()).alias(f"{m}_se"))])
    return out


def allocation(pq: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Per (config, budget, group): mean responses per query (over queries and seeds) and queries in the group."""
    j = pq.select("config", "budget", "query_id", "n_drawn").join(groups.select("query_id", "group"),
                                                                  on="query_id", how="left")
    sizes = groups.group_by("group").len()
    return (j.group_by("config", "budget", "group", maintain_order=True)
            .agg(pl.col("n_drawn").mean().alias("responses_per_query"))
            .join(sizes.rename({"len": "queries"}), on="group", how="left"))


# ------------------------------------------------------------------------------------------ formatting

def _lookup(summary: pl.DataFrame) -> dict:
    return {(r["config"], r["budget"]): r for r in summary.iter_rows(named=True)}


def _b(b: float) -> str:
    return f"{b:g}"


def metric_tables(name: str, title: str, summary: pl.DataFrame, labels: list[str], budgets, same: bool,
                  note: str = "") -> list[Table]:
    """Configuration x budget tables of mean ± SE: coverage, and accuracy unless it equals coverage."""
    look = _lookup(summary)
    out = []
    for metric in ("coverage",) if same else ("coverage", "accuracy"):
        rows = [[lab] + [fmt_mean_se(look[(lab, b)][metric], look[(lab, b)][f"{metric}_se"])
                         if (lab, b) in look else "—" for b in budgets] for lab in labels]
        what = "coverage (= accuracy)" if same else metric
        out.append(Table(name if same or metric == "coverage" else f"{name}_accuracy", f"{title}: {what}",
                         ["configuration"] + [f"b={_b(b)}" for b in budgets], rows,
                         summary.filter(pl.col("config").is_in(labels)) if metric == "coverage" else None,
                         note if metric == "coverage" else ""))
    return out


def md_table(t: Table) -> str:
    head = "| " + " | ".join(t.header) + " |"
    sep = "|" + "|".join(["---"] + ["---:"] * (len(t.header) - 1)) + "|"
    body = ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in t.rows]
    return "\n".join([head, sep] + body)


def _tex(s: str) -> str:
    s = str(s).replace("\\", "\\textbackslash{}")
    for a, b in (("&", "\\&"), ("%", "\\%"), ("_", "\\_"), ("#", "\\#"), ("$", "\\$"), ("{", "\\{"), ("}", "\\}")):
        s = s.replace(a, b)
    s = s.replace("\\textbackslash\\{\\}", "\\textbackslash{}")
    return (s.replace("±", "$\\pm$").replace("—", "--").replace("≥", "$\\geq$").replace("−", "$-$")
            .replace(">", "$>$").replace("λ", "$\\lambda$").replace("≤", "$\\leq$"))


def tex_table(t: Table) -> str:
    cols = "l" + "r" * (len(t.header) - 1)
    lines = ["% generated by ttc report", "\\begin{table}[ht]", "\\centering", "\\small",
             f"\\caption{{{_tex(t.title)}}}", f"\\begin{{tabular}}{{{cols}}}", "\\toprule",
             " & ".join(_tex(h) for h in t.header) + " \\\\", "\\midrule"]
    lines += [" & ".join(_tex(c) for c in row) + " \\\\" for row in t.rows]
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ one pool

def _post_hoc_best(summary: pl.DataFrame, labels: list[str], budgets) -> dict:
    """Per budget, the configuration among labels with the highest mean coverage (ties: listed first)."""
    look = _lookup(summary)
    best = {}
    for b in budgets:
        cands = [(look[(lab, b)]["coverage"], -i, lab) for i, lab in enumerate(labels) if (lab, b) in look]
        if cands:
            best[b] = max(cands)[2]
    return best


def _paired(df: pl.DataFrame, a: str, b: str, metric: str = "coverage") -> pl.DataFrame:
    """Per budget, mean and SE over seeds of metric(a) - metric(b) on the same seeds (common random numbers)."""
    x = df.filter(pl.col("config") == a).select("budget", "seed", pl.col(metric).alias("x"))
    y = df.filter(pl.col("config") == b).select("budget", "seed", pl.col(metric).alias("y"))
    return (x.join(y, on=["budget", "seed"]).with_columns((pl.col("x") - pl.col("y")).alias("d"))
            .group_by("budget", maintain_order=True)
            .agg(pl.col("d").mean().alias("diff"), (pl.col("d").std() / pl.len().sqrt()).alias("diff_se")))


def _seed_stats(df: pl.DataFrame) -> dict:
    """Per (config, budget): mean and standard deviation over seeds (the figures' bands)."""
    g = df.group_by("config", "budget").agg(
        pl.col("coverage").mean().alias("cm"), pl.col("coverage").std().alias("cs"),
        pl.col("accuracy").mean().alias("am"), pl.col("accuracy").std().alias("as"))
    return {(r["config"], r["budget"]): r for r in g.iter_rows(named=True)}


def _cap_label(c: RunConfig, pool) -> str:
    if c.policy in ("uniform", "oracle"):
        return "— (not used)"
    if c.max_samples:
        return str(c.max_samples)
    return f"none (pool size, {int(pool.sizes.min())}–{int(pool.sizes.max())})"


def _configs(policies, pool_policies, **kw) -> list[RunConfig]:
    """build_configs of `ttc replay` (same labels, same grid) for the policies this pool supports."""
    pols = [p for p in policies if p in pool_policies]
    return build_configs(ReplayRequest(policies=pols, **kw), pols) if pols else []


@dataclass
class Runs:
    """Everything replayed for one pool, shared by the sections that turn it into tables and figures."""

    req: ReportRequest
    path: Path
    pool: object
    no_tokens: str | None
    budgets: list
    policies: list
    same: bool  # accuracy equals coverage (score gt, best-of-N), so one table per metric pair
    main: list
    variants: dict  # table name -> configurations
    variant_list: list
    df_main: pl.DataFrame
    pq: pl.DataFrame
    df_all: pl.DataFrame
    curves: tuple
    s_main: pl.DataFrame
    gamma: tuple | None  # (pool scored by the sweep's column, its configs, their runs)
    engine_s: float
    tabdir: Path
    figdir: Path
    rel: str
    methods_run: str = ""  # the methods' engine call, for the header (methods_section fills it)

    @property
    def main_labels(self) -> list[str]:
        """One line per policy in figures and main tables: two-stage at its default rho only."""
        return [c.label() for c in self.main if not (c.policy == "two-stage" and c.rho != 0.5)]

    def policy_of(self, label: str) -> str:
        return label.split("(")[0]

    def summary(self, labels) -> pl.DataFrame:
        return summarize(self.df_all.filter(pl.col("config").is_in(list(labels))), self.pool, self.req.select,
                         self.curves)


def replay_pool(path: Path, req: ReportRequest, outdir: Path, rel: str) -> Runs:
    """The pool's engine calls: main policies with per-query output, all variants, the gamma sweep if needed."""
    t0 = time.perf_counter()
    pool, no_tokens = _load(path, req.score, req.invalid_votes, req.side)
    if not pool.has_gt:
        raise PoolError(f"{path}: ttc report needs ground truth (a 'correct' column) for coverage, and this pool "
                        "has none")
    budgets = [float(b) for b in req.budgets]
    check_budget_totals(budgets, pool.n_queries)
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    pols = supported_policies(pool)
    base = dict(gamma=[req.gamma], max_samples=[req.max_samples])
    main = _configs(pols, pols, rho=list(RHOS), **base)
    variants = {
        "k": _configs(K_POLICIES, pols, K=list(KS), **base),
        "lambda": _configs(LAMBDA_POLICIES, pols, lam=list(LAMBDAS), **base),
        "caps": _configs(CAP_POLICIES, pols, gamma=[req.gamma],
                         max_samples=sorted({req.max_samples, 0, *[m for m in CAP_GRID if m < pool.sizes.max()]})),
        "token": ([] if no_tokens else
                  _configs(TOKEN_POLICIES, pols, unit="token-matched", rho=[0.5], **base)),
    }
    gamma_cfg = _configs(GAMMA_POLICIES, pols, gamma=list(GAMMAS), max_samples=[req.max_samples])
    if req.score != "gt":  # the sweep runs on this pool's own score: it joins the variants call
        variants["gamma"] = gamma_cfg
    main_labels = {c.label() for c in main}
    var_list = list({c.label(): c for g in variants.values() for c in g if c.label() not in main_labels}.values())

    # the allocation figure keeps every main run's per-query counts: refuse what cannot fit before replaying
    check_per_query_memory(len(main) * len(budgets), len(seeds), pool.n_queries,
                           "ttc report (its allocation table)")
    votes = {"cisc_temp": req.cisc_temp, "deepconf_eta": req.deepconf_eta}
    df_main, pq = replay(pool, main, budgets, seeds, select=req.select, per_query=True, **votes)
    df_var = replay(pool, var_list, budgets, seeds, select=req.select, **votes)[0] if var_list else df_main.clear()
    gamma = None
    if req.score == "gt" and pool.score_columns and gamma_cfg:
        gpool = load_pool(path, score=pool.score_columns[0], invalid_votes=req.invalid_votes)
        gamma = (gpool, gamma_cfg, replay(gpool, gamma_cfg, budgets, seeds, select=req.select, **votes)[0])
    curves = (coverage_at_k(pool), best_of_k(pool) if req.select == "bon" else None)
    tabdir = outdir / "tables"
    tabdir.mkdir(parents=True, exist_ok=True)
    return Runs(req=req, path=path, pool=pool, no_tokens=no_tokens, budgets=budgets, policies=pols,
                same=req.score == "gt" and req.select == "bon", main=main, variants=variants, variant_list=var_list,
                df_main=df_main, pq=pq, df_all=pl.concat([df_main, df_var]), curves=curves,
                s_main=summarize(df_main, pool, req.select, curves), gamma=gamma,
                engine_s=time.perf_counter() - t0, tabdir=tabdir, figdir=outdir, rel=rel)


def _header(r: Runs) -> list[str]:
    pool, req = r.pool, r.req
    calls = 1 + bool(r.variant_list) + (r.gamma is not None)
    return [f"## Pool `{pool.name}`", "",
            f"- path: `{r.path}`; {pool.n_queries} queries, {int(pool.off[-1])} responses "
            f"({int(pool.sizes.min())}–{int(pool.sizes.max())} per query); ground truth yes; answers "
            f"{'yes' if pool.has_answers else 'no'}; token counts {'no' if r.no_tokens else 'yes'}; score columns: "
            f"{', '.join(pool.score_columns) or 'none'}",
            f"- score `{pool.score_name}`, selection `{req.select}`, elimination threshold gamma {req.gamma:g}, "
            f"max_samples {req.max_samples or 'none (pool size)'}; policies: {', '.join(r.policies)}",
            f"- engine: {len(r.main)} + {len(r.variant_list)} + {len(r.gamma[1]) if r.gamma else 0} "
            f"configurations x {len(r.budgets)} budgets x {req.seeds} seeds in {calls} engine calls"
            f"{r.methods_run}, {r.engine_s:.1f} s",
            "", "<details><summary>pool.json</summary>", "", "```json",
            json.dumps(pool.meta, indent=2, ensure_ascii=False) if pool.meta else "{}", "```", "</details>", ""]


def main_section(r: Runs) -> tuple[list[Table], list[str]]:
    """Curves figure, policy x budget tables with uniform's exact row, efficiency gains and spend."""
    req, budgets, curves, same, labels = r.req, r.budgets, r.curves, r.same, r.main_labels
    st = _seed_stats(r.df_main)
    series = {m: {lab: (r.policy_of(lab), [st[(lab, b)][f"{m}m"] for b in budgets],
                        [st[(lab, b)][f"{m}s"] or 0.0 for b in budgets]) for lab in labels} for m in "ca"}
    k_hi = min(len(curves[0]), int(np.ceil(max(budgets) * 1.25)))
    ks = np.arange(1, k_hi + 1)
    panels = [{"title": "coverage (= accuracy: ground-truth score, best-of-N)" if same else "coverage",
               "ylabel": "coverage (some drawn response correct)", "series": series["c"],
               "exact": (ks, curves[0][:k_hi])}]
    if not same:
        panels.append({"title": f"accuracy (selection {req.select}, score {r.pool.score_name})",
                       "ylabel": "accuracy (selected response correct)", "series": series["a"],
                       "exact": (ks, curves[1][:k_hi]) if curves[1] is not None else None})
    figures.plot_curves(r.figdir / "curves.png", f"{r.pool.name}: mean over {req.seeds} seeds, band ±0.5 std",
                        budgets, panels, formats=req.formats)
    md = ["### Main results", "", f"![coverage and accuracy against budget]({r.rel}/curves.{req.fig})", "",
          f"Mean over {req.seeds} seeds (band: ± 0.5 standard deviation over seeds); the black line is uniform's "
          "exact expectation (coverage@k by the unbiased estimator"
          + (", best-of-k by score ranks" if not same and curves[1] is not None else "")
          + ("" if same or curves[1] is not None else f"; no exact accuracy curve exists for --select {req.select}")
          + "). x is the nominal average budget; adaptive policies may stop early and spend less (see the spend "
          "table)." + (" Under a ground-truth score ucb and gap reduce to round-robin elimination, so their lines "
                       "coincide." if req.score == "gt" else ""), ""]
    mt = metric_tables("main", "Policy x budget", r.s_main, labels, budgets, same)
    for t, curve in zip(mt, curves):
        t.rows.append(["uniform (exact)"] + [fmt_mean_se(uniform_exact(curve, b), None) if curve is not None
                                             else "—" for b in budgets])
    mt[0].data = r.s_main  # every configuration of the main call, as `ttc replay` prints it
    mt[0].note = "mean ± standard error over seeds."
    look = _lookup(r.s_main)
    header = ["configuration"] + [f"b={_b(b)}" for b in budgets]
    gain_rows = []
    for lab in labels:
        cells = []
        for b in budgets:
            x = look[(lab, b)]
            gc = fmt_gain(x["gain_coverage"], x["gain_coverage_censored"])
            cells.append(gc if same else f"{gc} / {fmt_gain(x['gain_accuracy'], x['gain_accuracy_censored'])}")
        gain_rows.append([lab] + cells)
    spend_rows = [[lab] + [f"{look[(lab, b)]['samples_per_query']:.2f} ({look[(lab, b)]['exhausted']:.1f})"
                           for b in budgets] for lab in labels]
    return mt + [
        Table("gains", "Efficiency gain" + ("" if same else " (coverage / accuracy)"), header, gain_rows, None,
              "uniform budget at which uniform's exact curve reaches the policy's mean score, divided by the samples "
              "per query the policy actually spent; `>x`: above the whole curve (lower bound); accuracy gains exist "
              "only with --select bon."),
        Table("spend", "Samples spent per query (queries that ran out of pool per run)", header, spend_rows, None,
              "a run with exhausted queries wanted more responses than the pool holds: from there on it is not "
              "faithful to live sampling.")], md


def two_stage_section(r: Runs) -> list[Table]:
    ts = [c.label() for c in r.main if c.policy == "two-stage"]
    if not ts:
        return []
    t2 = metric_tables("two_stage", "Two-stage at rho 25/50/75%", r.s_main, ts, r.budgets, r.same,
                       "stage 2 splits the rest in proportion to (sum of scores + 1) / (N + 2) over the unanswered "
                       "queries (docs/semantics.md). best: the rho with the highest mean coverage per budget, chosen "
                       "after the fact on these seeds (optimistic).")
    best = {b: row for (c, b), row in _lookup(r.s_main).items() if c.startswith("two-stage best")}
    for t, metric in zip(t2, ("coverage", "accuracy")):
        t.rows.append(["best rho (post hoc)"] + [
            f"{fmt_mean_se(best[b][metric], best[b][metric + '_se'])} (rho={best[b]['rho']:g})" if b in best else "—"
            for b in r.budgets])
    t2[0].data = r.s_main.filter(pl.col("policy") == "two-stage")
    return t2


def streaming_section(r: Runs) -> list[Table]:
    """Streaming beside round-robin elimination (same cap), their paired difference, each at its best cap."""
    if "streaming" not in r.policies:
        return []
    caps = r.variants["caps"]
    s_caps = r.summary(c.label() for c in caps)
    main_e = next(c.label() for c in r.main if c.policy == "elimination")
    main_s = next(c.label() for c in r.main if c.policy == "streaming")
    t_sv = metric_tables("streaming", "Streaming vs pool (round-robin elimination, same cap)", r.s_main,
                         [main_e, main_s], r.budgets, r.same)
    paired = _paired(r.df_main, main_s, main_e)
    paired.write_csv(r.tabdir / "streaming_paired.csv")
    d = {x["budget"]: x for x in paired.iter_rows(named=True)}
    t_sv[0].rows.append(["streaming − elimination (paired)"] + [
        f"{d[b]['diff']:+.3f}±{(d[b]['diff_se'] or 0):.3f}" if b in d else "—" for b in r.budgets])
    lc = _lookup(s_caps)
    cap_of = {c.label(): c.max_samples or "none" for c in caps}
    for pol in CAP_POLICIES:
        best = _post_hoc_best(s_caps, [c.label() for c in caps if c.policy == pol], r.budgets)
        for t, metric in zip(t_sv, ("coverage", "accuracy")):
            t.rows.append([f"{pol}, best cap (post hoc)"] + [
                f"{fmt_mean_se(lc[(best[b], b)][metric], lc[(best[b], b)][metric + '_se'])} (cap {cap_of[best[b]]})"
                if b in best else "—" for b in r.budgets])
    grid = ", ".join(str(m) for m in sorted({c.max_samples for c in caps} - {0}))
    t_sv[0].note = (f"best cap: max_samples chosen per budget from {{none, {grid}}} by mean coverage, tuned after the "
                    "fact on this same pool and these seeds (no calibration pool), so optimistic; the paired "
                    "difference uses the same permutations for both.")
    t_sv[0].data = pl.concat([r.s_main.filter(pl.col("config").is_in([main_e, main_s])), s_caps]).unique(
        ["config", "budget"], keep="first", maintain_order=True)
    return t_sv


def token_section(r: Runs) -> tuple[list[Table], str]:
    if r.no_tokens:
        return [], f"Token-matched: not applicable, {r.no_tokens}."
    labs = []
    for c in r.variants["token"]:
        plain = dataclasses.replace(c, unit="samples").label()  # the same configuration at its sample budget
        labs += [plain, c.label()]
    s_tok = r.summary(labs).filter(~pl.col("config").str.contains("post hoc"))
    return metric_tables("token_matched", "Token-matched: each run spends the tokens uniform spent at the same "
                         "sample budget and seed", s_tok, labs, r.budgets, r.same), ""


def parameter_section(r: Runs) -> tuple[list[Table], str]:
    """K, lambda and gamma sweeps, the caps every configuration used, and the cap sweep."""
    req, budgets = r.req, r.budgets
    tables = []
    for key, title in (("k", "K (responses per pull) in {1, 2, 4, 8}"),
                       ("lambda", "lambda (exploration bonus) in {1, 2, 3} for ucb and entropy")):
        labs = [c.label() for c in r.variants[key]]
        if labs:
            tables += metric_tables(key, title, r.summary(labs), labs, budgets, r.same)
    note = ""
    if "gamma" in r.variants and r.variants["gamma"]:
        labs = [c.label() for c in r.variants["gamma"]]
        tables += metric_tables("gamma", f"gamma (threshold) in {{0.97, 0.98, 0.99, 1}}, score {r.pool.score_name}",
                                r.summary(labs), labs, budgets, False)
    elif r.gamma is not None:
        gpool, cfg, df = r.gamma
        g_curves = (r.curves[0], best_of_k(gpool) if req.select == "bon" else None)
        tables += metric_tables("gamma", f"gamma (threshold) in {{0.97, 0.98, 0.99, 1}}, score {gpool.score_name}",
                                summarize(df, gpool, req.select, g_curves), [c.label() for c in cfg], budgets, False,
                                f"--score gt gives 0/1 scores, on which every gamma in (0, 1] eliminates exactly at "
                                f"the first correct response; this sweep therefore uses the pool's first score column "
                                f"({gpool.score_name}) for elimination and best-of-N, while every other table uses "
                                f"{req.score}.")
    else:
        note = ("gamma sweep: not applicable. With --score gt scores are 0/1, so every gamma in (0, 1] eliminates "
                "exactly at the first correct response (identical runs), and this pool has no score column to sweep "
                "instead.")
    capped = r.pq.group_by("config", "budget").agg(
        (pl.col("capped").sum() / pl.col("seed").n_unique()).alias("capped_per_run"))
    cp = {(x["config"], x["budget"]): x["capped_per_run"] for x in capped.iter_rows(named=True)}
    rows = [[c.label(), _cap_label(c, r.pool)] + [f"{cp[(c.label(), b)]:.1f}" for b in budgets] for c in r.main]
    tables.append(Table("max_samples", "max_samples used, and queries capped per run",
                        ["configuration", "max_samples"] + [f"capped b={_b(b)}" for b in budgets], rows,
                        capped.sort("config", "budget"),
                        "--max-samples sets the cap of every adaptive policy (uniform and oracle take none); the "
                        "sweep below shows its effect on elimination and streaming."))
    labs = [c.label() for c in r.variants["caps"]]
    if labs:
        tables += metric_tables("caps", "max_samples sweep (elimination and streaming)", r.summary(labs), labs,
                                budgets, r.same)
    return tables, note


def hard_section(r: Runs, groups: pl.DataFrame) -> list[Table]:
    """Coverage and normalised coverage on hard-8 and hard-16 from the per-query runs, with uniform's exact value."""
    budgets, labels = r.budgets, r.main_labels
    hs = hard_subsets(r.pq, groups)
    hl = _lookup(hs)
    tables, panels, exact_rows = [], [], {b: {"config": "uniform (exact)", "budget": b, "seeds": 0} for b in budgets}
    for k in HARD_KS:
        mask = groups[f"hard_{k}"].to_numpy()
        solv = mask & groups["solvable"].to_numpy()
        cu, cn = subset_curve(r.pool, mask), subset_curve(r.pool, solv)
        for b in budgets:
            exact_rows[b].update({f"hard_{k}_coverage": uniform_exact(cu, b),
                                  f"hard_{k}_normalised": uniform_exact(cn, b)})
        rows = [[lab] + [c for b in budgets for c in (
            fmt_mean_se(hl[(lab, b)][f"hard_{k}_coverage"], hl[(lab, b)][f"hard_{k}_coverage_se"]),
            fmt_mean_se(hl[(lab, b)][f"hard_{k}_normalised"], hl[(lab, b)][f"hard_{k}_normalised_se"]))]
                for lab in labels]
        rows.append(["uniform (exact)"] + [fmt_mean_se(exact_rows[b][f"hard_{k}_{m}"], None)
                                           for b in budgets for m in ("coverage", "normalised")])
        tables.append(Table(f"hard_{k}", f"hard-{k}: {int(mask.sum())} queries, {int(solv.sum())} of them solvable",
                            ["configuration"] + [h for b in budgets for h in (f"cov. b={_b(b)}", f"norm. b={_b(b)}")],
                            rows))
        panels.append({"title": f"hard-{k} ({int(solv.sum())} solvable of {int(mask.sum())} queries)",
                       "uniform": [exact_rows[b][f"hard_{k}_normalised"] for b in budgets],
                       "series": {lab: (r.policy_of(lab), [hl[(lab, b)][f"hard_{k}_normalised"] for b in budgets],
                                        [hl[(lab, b)][f"hard_{k}_normalised_se"] or 0.0 for b in budgets])
                                  for lab in labels}})
    pl.concat([hs, pl.DataFrame(list(exact_rows.values()))], how="diagonal_relaxed").write_csv(
        r.tabdir / "hard_subsets.csv")
    figures.plot_hard(r.figdir / "hard.png", f"{r.pool.name}: normalised coverage on the hard subsets "
                      f"(mean ± SE over {r.req.seeds} seeds)", budgets, panels, formats=r.req.formats)
    return tables


def allocation_section(r: Runs, groups: pl.DataFrame) -> list[Table]:
    budgets, labels = r.budgets, r.main_labels
    al = allocation(r.pq, groups)
    alk = {(x["config"], x["budget"], x["group"]): x["responses_per_query"] for x in al.iter_rows(named=True)}
    sizes = {g: int((groups["group"] == g).sum()) for g in GROUPS}
    present = [g for g in GROUPS if sizes[g]]
    rows = [[lab] + [f"{alk[(lab, b, g)]:.1f}" for b in budgets for g in present] for lab in labels]
    short = {"easy": "easy", "hard, solvable": "hard", "unsolvable": "unsolv."}
    fig_budgets = budgets if len(budgets) <= 4 else [budgets[i] for i in np.linspace(0, len(budgets) - 1, 4)
                                                                            .round().astype(int)]
    figures.plot_allocation(r.figdir / "allocation.png", f"{r.pool.name}: where the responses go (mean over "
                            f"{r.req.seeds} seeds)", fig_budgets, labels, present, sizes,
                            {(b, lab): [alk[(lab, b, g)] for g in present] for b in fig_budgets for lab in labels},
                            formats=r.req.formats)
    return [Table("allocation", "Mean responses per query by group",
                  ["configuration"] + [f"{short[g]} b={_b(b)}" for b in budgets for g in present], rows,
                  al.sort("config", "budget", "group"),
                  f"groups: easy = not hard-8 ({sizes['easy']} queries), hard = hard-8 and solvable "
                  f"({sizes['hard, solvable']}), unsolvable = no correct response in the pool ({sizes['unsolvable']}); "
                  "uniform's row is the reference.")]


# ------------------------------------------------------------------------------------------ methods compared

def method_budgets(budgets) -> list[float]:
    """The comparison's budgets: the report's, and every power of two from 1 up to the largest, so that each
    method's accuracy-vs-cost curve starts low enough to interpolate the baselines' cheap points."""
    top = max(budgets)
    return sorted({float(b) for b in budgets} | {2.0 ** k for k in range(0, 64) if 2.0 ** k <= top})


def cost_at_accuracy(costs, accs, target: float) -> tuple[float, str]:
    """The cost at which a method first reaches accuracy `target` on its curve: the points (cost, accuracy) in
    increasing cost (ties: the order given, i.e. increasing budget) joined by straight lines. Returns (cost,
    "reached"); (its cheapest cost, "at most") when its cheapest point already reaches the target (it may reach it
    for less, which the runs cannot tell); (NaN, "not reached") when no point does."""
    c, a = np.asarray(costs, float), np.asarray(accs, float)
    order = np.argsort(c, kind="stable")
    c, a = c[order], a[order]
    if not len(c) or not (a >= target).any():
        return float("nan"), "not reached"
    if a[0] >= target:
        return float(c[0]), "at most"
    k = int(np.argmax(a >= target))  # the first point at or above; the one before is below
    c0, c1, a0, a1 = c[k - 1], c[k], a[k - 1], a[k]
    return float(c0 + (target - a0) / (a1 - a0) * (c1 - c0)), "reached"


def pareto_front(costs, accs) -> np.ndarray:
    """Which points no other point dominates (as cheap or cheaper and as accurate or more, one of them strictly)."""
    c, a = np.asarray(costs, float), np.asarray(accs, float)
    dom = ((c[None, :] <= c[:, None]) & (a[None, :] >= a[:, None])
           & ((c[None, :] < c[:, None]) | (a[None, :] > a[:, None])))
    return ~dom.any(axis=1)


_UNITS = {"samples": ("samples per query", ""), "token-matched": ("tokens per query", "_tokens")}


@dataclass
class MethodRuns:
    """The comparison on one pool: which methods apply (and why the others do not), the per-run rows and their
    summary per (method, unit, budget)."""

    status: dict  # method -> (applies, reason)
    configs: dict  # (method, unit) -> RunConfig
    runs: pl.DataFrame  # method, unit, config, budget, seed, accuracy, coverage, samples/tokens per query, cost
    summary: pl.DataFrame
    units: list
    budgets: list
    engine_s: float


def method_runs(r: Runs) -> MethodRuns:
    """Every applicable method of METHODS at every comparison budget, in one engine call: methods that share a
    configuration (best-of-N, self-consistency and weighted voting are all uniform) share its runs, and each reads
    its own selection's accuracy column. Token-matched runs join when the pool has token counts."""
    t0 = time.perf_counter()
    req, pool = r.req, r.pool
    status = {name: m.applies(pool) for name, m in METHODS.items()}
    for name, m in METHODS.items():  # the side signal's reason in the report's own terms
        if not status[name][0] and "side" in m.all_needs() and pool.side is None and not m.missing():
            status[name] = (False, "needs a per-response side signal: " + (
                f"this pool has no column '{req.side}' (--side)" if req.side is not None else
                "give --side COLUMN (a confidence column of the pool's responses, e.g. score_conf)"))
    units = ["samples"] + ([] if r.no_tokens else ["token-matched"])
    budgets = method_budgets(r.budgets)
    configs, index = {}, {}
    for unit in units:
        for name, m in METHODS.items():
            if status[name][0]:
                c = m.run_config(unit=unit, gamma=req.gamma, max_samples=req.max_samples)
                run = RunConfig("uniform") if c.policy == "uniform" else c  # uniform is its own token match
                configs[(name, unit)] = c
                index.setdefault(run, len(index))
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    n, B, S = pool.n_queries, len(budgets), req.seeds
    parts = []
    if configs:
        runs = list(index)
        voting = [m.select for name, m in METHODS.items() if status[name][0] and m.select in ("cisc", "deepconf")]
        df = replay(pool, runs, budgets, seeds, select=voting[0] if voting else "bon", cisc_temp=req.cisc_temp,
                    deepconf_eta=req.deepconf_eta)[0].with_columns(
            pl.Series("_run", np.repeat(np.arange(len(runs)), B * S)))
        for name, m in METHODS.items():  # a selection rule whose accuracy the engine does not report yet
            if status[name][0] and f"accuracy_{m.select}" not in df.columns:
                status[name] = (False, f"not in this build: the engine reports no accuracy_{m.select}")
                for unit in units:
                    configs.pop((name, unit), None)
        for (name, unit), c in configs.items():
            run = index[RunConfig("uniform") if c.policy == "uniform" else c]
            sub = df.filter(pl.col("_run") == run)
            parts.append(sub.select(
                pl.lit(name).alias("method"), pl.lit(unit).alias("unit"), pl.lit(c.label()).alias("config"),
                "budget", "seed", pl.col(f"accuracy_{METHODS[name].select}").alias("accuracy"), "coverage",
                (pl.col("samples_used") / n).alias("samples_per_query"),
                (pl.col("tokens_used").cast(pl.Float64) / n).alias("tokens_per_query"), "exhausted"))
    if parts:
        runs_df = pl.concat(parts).with_columns(
            pl.when(pl.col("unit") == "samples").then(pl.col("samples_per_query"))
            .otherwise(pl.col("tokens_per_query")).alias("cost"))
    else:
        runs_df = pl.DataFrame(schema={"method": pl.String, "unit": pl.String, "config": pl.String,
                                       "budget": pl.Float64, "seed": pl.Int64, "accuracy": pl.Float64,
                                       "coverage": pl.Float64, "samples_per_query": pl.Float64,
                                       "tokens_per_query": pl.Float64, "exhausted": pl.Int64, "cost": pl.Float64})
    metrics = ("accuracy", "coverage", "samples_per_query", "tokens_per_query", "cost")
    summary = runs_df.group_by("method", "unit", "config", "budget", maintain_order=True).agg(
        pl.len().alias("seeds"),
        *[e for m in metrics
          for e in (pl.col(m).mean().alias(m), (pl.col(m).std() / pl.len().sqrt()).alias(f"{m}_se"))],
        pl.col("exhausted").mean().alias("exhausted"))
    return MethodRuns(status, configs, runs_df, summary, units, budgets, time.perf_counter() - t0)


def cost_saved(summary: pl.DataFrame) -> pl.DataFrame:
    """Per unit, baseline, baseline budget and other method: the cost at which the method first reaches the
    baseline's mean accuracy there (cost_at_accuracy on its curve of means), and the share of the baseline's cost
    it saves (1 - method cost / baseline cost; negative: it costs more)."""
    rows = []
    for unit in summary["unit"].unique(maintain_order=True):
        s = summary.filter(pl.col("unit") == unit)
        names = s["method"].unique(maintain_order=True).to_list()
        curve = {m: s.filter(pl.col("method") == m).sort("budget") for m in names}
        for base in [m for m in names if METHODS[m].baseline]:
            for x in curve[base].iter_rows(named=True):
                for m in [m for m in names if m != base]:
                    cost, how = cost_at_accuracy(curve[m]["cost"], curve[m]["accuracy"], x["accuracy"])
                    rows.append({"unit": unit, "baseline": base, "budget": x["budget"],
                                 "baseline_accuracy": x["accuracy"], "baseline_cost": x["cost"], "method": m,
                                 "method_cost": cost, "status": how,
                                 "saved": 1.0 - cost / x["cost"] if x["cost"] > 0 else float("nan")})
    return pl.DataFrame(rows, schema={"unit": pl.String, "baseline": pl.String, "budget": pl.Float64,
                                      "baseline_accuracy": pl.Float64, "baseline_cost": pl.Float64,
                                      "method": pl.String, "method_cost": pl.Float64, "status": pl.String,
                                      "saved": pl.Float64})


def _cost(c: float) -> str:
    """A cost in a table cell: 3 significant digits, whole numbers from 100 on (token counts)."""
    return f"{c:,.0f}" if c >= 100 else f"{c:.3g}"


def _saved_cell(x: dict) -> str:
    if x["status"] == "not reached":
        return "not reached"
    bound = x["status"] == "at most"
    pct = f"{100 * x['saved']:.0f}%".replace("-", "−")
    return f"{'≥' if bound else ''}{pct} ({'≤' if bound else ''}{_cost(x['method_cost'])})"


def methods_section(r: Runs) -> tuple[list[Table], list[str]]:
    """The methods of the field (replay/policies.py METHODS) side by side: accuracy, coverage and cost per budget,
    cost saved at equal accuracy against the baselines, a Pareto plot, and the methods that do not apply."""
    mr = method_runs(r)
    r.engine_s += mr.engine_s
    n_runs = len({RunConfig("uniform") if c.policy == "uniform" else c for c in mr.configs.values()})
    if n_runs:
        r.methods_run = (f", and the methods compared in one more ({n_runs} configurations x {len(mr.budgets)} "
                         "budgets)")
    req, s = r.req, mr.summary
    look = {(x["method"], x["unit"], x["budget"]): x for x in s.iter_rows(named=True)}
    applicable = [m for m in METHODS if mr.status[m][0]]
    header = ["method"] + [f"b={_b(b)}" for b in mr.budgets]
    tables, panels = [], []
    saved = cost_saved(s)
    saved.write_csv(r.tabdir / "methods_saved.csv")
    for unit in mr.units:
        what, suffix = _UNITS[unit]
        at = ("matched tokens (each run spends the tokens uniform spent at the same sample budget and seed)"
              if unit == "token-matched" else "the same average sample budget")
        pts = s.filter(pl.col("unit") == unit)
        front = pareto_front(pts["cost"], pts["accuracy"])
        pts = pts.with_columns(pl.Series("pareto", front, pl.Boolean))
        for metric in ("accuracy", "coverage"):
            tables.append(Table(
                f"methods{suffix}" + ("" if metric == "accuracy" else "_coverage"), f"Methods at {at}: {metric}",
                header, [[m] + [fmt_mean_se(look[(m, unit, b)][metric], look[(m, unit, b)][f"{metric}_se"])
                                if (m, unit, b) in look else "—" for b in mr.budgets] for m in applicable],
                pts if metric == "accuracy" else None,
                "mean ± standard error over seeds; accuracy under each method's own selection rule; every number, "
                "with the cost's standard error and the Pareto flag, in tables/methods" + suffix + ".csv."
                if metric == "accuracy" else ""))
        tokens = unit == "samples" and not r.no_tokens
        tables.append(Table(
            f"methods{suffix}_cost", f"Methods at {at}: {what} spent", header,
            [[m] + [_cost(look[(m, unit, b)]['cost']) + (f" ({look[(m, unit, b)]['tokens_per_query']:,.0f} tok)"
                                                          if tokens else "")
                    if (m, unit, b) in look else "—" for b in mr.budgets] for m in applicable], None,
            "adaptive methods stop early and may spend less than the budget: the figure draws them at the cost they "
            "spent." + (" In brackets: tokens per query." if tokens else "")))
        su = saved.filter(pl.col("unit") == unit)
        for base in su["baseline"].unique(maintain_order=True).to_list():
            rows_b = {(x["method"], x["budget"]): x
                      for x in su.filter(pl.col("baseline") == base).iter_rows(named=True)}
            tables.append(Table(
                f"methods{suffix}_saved_{base}", f"Cost saved at equal accuracy against {base} ({what})",
                ["method"] + [f"b={_b(b)}: {look[(base, unit, b)]['accuracy']:.3f}" for b in mr.budgets],
                [[m] + [_saved_cell(rows_b[(m, b)]) for b in mr.budgets] for m in applicable if m != base], None,
                f"column: {base} at that budget, and its mean accuracy; cell: the share of {base}'s cost there that "
                f"the method saves to reach the same accuracy, and its cost ({what}), read off the method's curve of "
                "mean accuracy against mean cost by linear interpolation between its budgets; ≥ / ≤: its cheapest "
                "run already reaches it (a bound); negative: it costs more; not reached: no run of it is as "
                "accurate. Every pair, in every unit: tables/methods_saved.csv."))
        panels.append({"xlabel": f"average cost ({what}, log scale)",
                       "series": {m: tuple(pts.filter(pl.col("method") == m).sort("cost")[c].fill_null(0.0).to_list()
                                           for c in ("cost", "accuracy", "accuracy_se")) for m in applicable},
                       "front": (pts.filter("pareto")["cost"].to_list(), pts.filter("pareto")["accuracy"].to_list())})
    if applicable:
        figures.plot_pareto(r.figdir / "methods.png", f"{r.pool.name}: accuracy against cost per method (mean ± SE "
                            f"over {req.seeds} seeds; Pareto front in black)", panels, list(METHODS),
                            formats=req.formats)
    md = ["### Methods compared", ""]
    md.append("Each method is a preset of the registries (replay/policies.py `METHODS`), run at the average budgets "
              f"{', '.join(_b(b) for b in mr.budgets)} (the report's and every power of two below the largest) in "
              f"one engine call on the same seeds as every other table ({mr.engine_s:.1f} s); methods sharing a "
              "configuration share its runs. Accuracy is under each method's own selection (not --select); cost is "
              "what it spent, mean over seeds. " + (
                  "The score is the ground truth (--score gt): methods that read a score read a perfect verifier, "
                  "the bandit paper's oracle setting, an upper bound for any real one."
                  if req.score == "gt" else f"The score is `{r.pool.score_name}`."))
    md.append("")
    if applicable:
        md += ["| method | what it does | configuration | selection | source |", "|---|---|---|---|---|"]
        md += [f"| {name} | {METHODS[name].doc} | {mr.configs[(name, 'samples')].label()} | "
               f"{METHODS[name].select} | {METHODS[name].citation} |" for name in applicable]
        md += ["", f"![accuracy against cost, one line per method]({r.rel}/methods.{req.fig})", ""]
    else:
        md += ["No method applies to this pool.", ""]
    skipped = [m for m in METHODS if not mr.status[m][0]]
    if skipped:
        md += ["Not applicable to this pool:", ""] + [f"- `{m}`: {mr.status[m][1]}" for m in skipped] + [""]
    pl.DataFrame({"method": list(METHODS), "applies": [mr.status[m][0] for m in METHODS],
                  "reason": [mr.status[m][1] for m in METHODS]}).write_csv(r.tabdir / "methods_status.csv")
    return tables, md


# Depth (issue 30): on a probed pool, width-only configurations (whole traces) against width x depth ones (traces
# stopped part-way) at the same token budgets, self-consistency throughout (the depth policies answer with their own
# vote). (kind, configuration): the leaderboard's depth entries at their defaults.
DEPTH_FIGURE = (("width", RunConfig("uniform", unit="tokens")),
                ("width", RunConfig("elimination", unit="tokens", eliminate="sc-beta")),
                ("depth", RunConfig("uniform", unit="tokens", depth_rule="stability", depth_m=3)),
                ("depth", RunConfig("elimination", unit="tokens", eliminate="sc-beta", depth_rule="stability",
                                    depth_m=3)),
                ("depth", RunConfig("parallel-probe", unit="tokens", chains=16)),
                ("depth", RunConfig("cmc", unit="tokens")))


def depth_section(r: Runs) -> tuple[list[Table], list[str]]:
    """Accuracy against tokens for both kinds (figure depth.png and table `depth`) on a pool with probes; nothing on
    one without (the section says so). Token budgets: the report's budgets times the pool's median trace length per
    query, so budget b buys about b whole traces per query."""
    req, pool = r.req, r.pool
    head = ["### Depth: width against width x depth at equal tokens", ""]
    if not pool.has_probes or r.no_tokens or not pool.has_answers:
        why = ("it has no probes (ttc import autotts writes them)" if not pool.has_probes else
               "it has no token counts" if r.no_tokens else "it has no answers to vote on")
        return [], head + [f"Not applicable to this pool: {why}.", ""]
    probed = load_pool(r.path, score=req.score, need_tokens=True, probes=True, invalid_votes=req.invalid_votes)
    median = float(np.median(probed.tok))
    budgets = [b * median for b in r.budgets]
    kinds = {c.label(): k for k, c in DEPTH_FIGURE}
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    t0 = time.perf_counter()
    df = replay(probed, [c for _, c in DEPTH_FIGURE], budgets, seeds, select="sc")[0]
    s = (df.group_by("config", "budget", maintain_order=True)
         .agg(pl.col("accuracy").mean().alias("accuracy"),
              (pl.col("accuracy").std() / pl.len().sqrt()).alias("accuracy_se"),
              (pl.col("tokens_used").mean() / probed.n_queries).alias("tokens_per_query"))
         .with_columns(pl.col("config").replace_strict(kinds).alias("kind"),
                       (pl.col("budget") / median).alias("budget_traces")))
    labels = list(kinds)
    name = lambda lab: f"{lab} [{kinds[lab]}]"  # noqa: E731
    series = {name(lab): tuple(s.filter(pl.col("config") == lab).sort("budget")[c].fill_null(0.0).to_list()
                               for c in ("tokens_per_query", "accuracy", "accuracy_se")) for lab in labels}
    pts = s.select("tokens_per_query", "accuracy").to_numpy()
    front = pts[pareto_front(pts[:, 0], pts[:, 1])] if len(pts) else pts
    figures.plot_pareto(r.figdir / "depth.png", f"{pool.name}: accuracy against tokens, whole traces [width] and "
                        f"traces stopped part-way [depth] (self-consistency; mean ± SE over {req.seeds} seeds)",
                        [{"xlabel": "tokens spent per query (log scale)", "series": series,
                          "front": (front[:, 0].tolist(), front[:, 1].tolist())}],
                        [name(lab) for lab in labels], formats=req.formats)
    look = {(row["config"], row["budget"]): row for row in s.iter_rows(named=True)}
    rows = [[lab, kinds[lab]] + [f"{fmt_mean_se(look[(lab, b)]['accuracy'], look[(lab, b)]['accuracy_se'])} "
                                 f"({look[(lab, b)]['tokens_per_query']:,.0f})" for b in budgets] for lab in labels]
    table = Table("depth", f"Accuracy (self-consistency) and tokens spent per query, at token budgets of b times the "
                  f"median trace ({median:,.0f} tokens) per query", ["configuration", "kind"]
                  + [f"b={_b(b)}" for b in r.budgets], rows, s,
                  "Width: whole traces; depth: traces stopped part-way (a depth rule, or the policy's own stops), "
                  "answering with their last probe. Mean ± SE over seeds (the queries fixed), tokens in parentheses; "
                  "no configuration passes its budget.")
    md = head + [f"The pool's traces carry probes (an answer every few hundred tokens), so each can be replayed as "
                 f"stopped part-way. Every configuration at the same token budgets, {req.seeds} seeds, one engine "
                 f"call ({time.perf_counter() - t0:.1f} s); the Pareto front over both kinds in black.", "",
                 f"![accuracy against tokens, width and depth]({r.rel}/depth.{req.fig})", ""]
    return [table], md


def pool_report(path: Path, req: ReportRequest, outdir: Path, rel: str) -> tuple[list, dict]:
    """Replay one pool, write its figures and tables under outdir; return its Markdown lines and timings."""
    t0 = time.perf_counter()
    r = replay_pool(path, req, outdir, rel)
    groups = query_groups(r.pool)
    groups.write_csv(r.tabdir / "queries.csv")
    main_tables, main_md = main_section(r)
    method_tables, method_md = methods_section(r)
    token_tables, token_note = token_section(r)
    param_tables, gamma_note = parameter_section(r)
    depth_tables, depth_md = depth_section(r)
    tables = (main_tables + method_tables + two_stage_section(r) + streaming_section(r) + token_tables + param_tables
              + hard_section(r, groups) + allocation_section(r, groups) + depth_tables)
    for t in tables:
        if t.data is not None:
            t.data.write_csv(r.tabdir / f"{t.name}.csv")
        if req.latex:
            (r.tabdir / f"{t.name}.tex").write_text(tex_table(t))
    by = {t.name: t for t in tables}
    md = _header(r) + main_md

    def emit(*names):
        for nm in names:
            if nm in by:
                t = by[nm]
                md.extend([f"**{t.title}**", "", md_table(t), ""] + ([t.note, ""] if t.note else []))

    emit("main", "main_accuracy", "gains", "spend")
    md.extend(method_md)
    emit(*[t.name for t in method_tables])
    md.extend(["### Two-stage", ""])
    emit("two_stage", "two_stage_accuracy")
    md.extend(["### Streaming vs pool", ""])
    emit("streaming", "streaming_accuracy")
    md.extend(["### Token-matched", ""] + ([token_note, ""] if token_note else []))
    emit("token_matched", "token_matched_accuracy")
    md.extend(["### Parameters: K, lambda, gamma, max_samples", ""])
    emit("k", "k_accuracy", "lambda", "lambda_accuracy")
    md.extend([gamma_note, ""] if gamma_note else [])
    emit("gamma", "gamma_accuracy", "max_samples", "caps", "caps_accuracy")
    md.extend(["### Hard subsets", "", HARD_RULE, "",
               "Each cell: coverage on the subset (unsolvable queries count as misses), then normalised coverage on "
               "its solvable part; mean ± SE over seeds, from the engine's per-query output.", "",
               f"![normalised coverage on hard subsets]({rel}/hard.{req.fig})", ""])
    emit(*[f"hard_{k}" for k in HARD_KS])
    md.extend(["### Allocation", "", f"![responses per query by group]({rel}/allocation.{req.fig})", ""])
    emit("allocation")
    md.extend(depth_md)
    emit("depth")
    md.append(f"Tables as data: `{rel}/tables/*.csv`" + (" and LaTeX `*.tex`." if req.latex else ".") + "\n")
    return md, {"engine_s": r.engine_s, "total_s": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------ whole report

def _versions() -> str:
    parts = [f"python {platform.python_version()}"]
    for pkg in ("ttc", "numpy", "numba", "polars", "pyarrow", "matplotlib"):
        try:
            parts.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)


def _git_commit() -> str:
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def command_line(req: ReportRequest) -> str:
    """The canonical command that regenerates this report (every option explicit)."""
    args = ["ttc", "report", *[str(p) for p in req.pools], "--out", str(req.out),
            "--budgets", ",".join(_b(b) for b in req.budgets), "--seeds", str(req.seeds),
            "--seed-start", str(req.seed_start), "--score", req.score, "--select", req.select,
            "--gamma", _b(req.gamma), "--max-samples", str(req.max_samples), "--cisc-temp", _b(req.cisc_temp),
            "--deepconf-eta", _b(req.deepconf_eta)]
    if req.latex:
        args.append("--latex")
    if req.invalid_votes:
        args.append("--invalid-votes")
    if req.side is not None:
        args += ["--side", req.side]
    return shlex.join(args)


def _slug(name: str, taken: set) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "pool"
    base, k = s, 2
    while s in taken:
        s, k = f"{base}-{k}", k + 1
    taken.add(s)
    return s


def run_report(req: ReportRequest, console: Console | None = None) -> Path:
    """Write DIR/report.md, DIR/<pool>/*.png and DIR/<pool>/tables/*; return the report's path."""
    console = console or Console()
    validate(req)
    check("matplotlib", "ttc report")  # before any replay: every pool section draws figures
    for p in req.pools:  # every pool is checked before any replay
        _load(p, req.score, req.invalid_votes, req.side)
    if req.side is not None and not any(req.side in sample_columns(p) for p in req.pools):
        raise PoolError(f"--side: no pool given has a column '{req.side}' (its columns: "
                        f"{', '.join(sample_columns(req.pools[0]))})")
    t0 = time.perf_counter()
    md = ["# ttc report", "",
          f"Generated {datetime.datetime.now().astimezone().isoformat(timespec='seconds')} by", "",
          "```bash", command_line(req), "```", "",
          f"- run from: `{Path.cwd()}`; ttc commit {_git_commit()}",
          f"- versions: {_versions()}",
          f"- seeds {req.seed_start}..{req.seed_start + req.seeds - 1} ({req.seeds}); each seed fixes one "
          "permutation per query, shared by every policy, budget and table (common random numbers)",
          f"- budgets (average samples per query; total = round(b x queries)): "
          f"{', '.join(_b(b) for b in req.budgets)}",
          f"- {get_threads()} threads; results do not depend on the thread count",
          *(["- invalid answers vote: each query's invalid answers are one answer category (--invalid-votes)"]
            if req.invalid_votes else []),
          "- semantics: docs/semantics.md; every number of a table is also in that pool's `tables/*.csv`", ""]
    with atomic_dir(req.out, "report") as out, write_errors(req.out):
        taken: set = set()
        for p in req.pools:
            pool_name = load_pool(p, score=req.score).name
            rel = _slug(pool_name, taken)
            console.print(f"replaying {p} ...", highlight=False)
            lines, info = pool_report(Path(p), req, out / rel, rel)
            md += lines
            console.print(f"  {rel}: engine {info['engine_s']:.1f} s, with tables and figures "
                          f"{info['total_s']:.1f} s", highlight=False)
        report = Path(req.out) / "report.md"
        (out / "report.md").write_text("\n".join(md).rstrip() + "\n")
    console.print(f"wrote {report} ({time.perf_counter() - t0:.1f} s)", highlight=False)
    return report
