"""`ttc replay` behind the command line: build the configuration grid, run it, print and write the results."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table

from .engine import SELECT, check_budgets, check_configs, get_threads, replay, set_threads
from .exact import best_of_k, coverage_at_k
from .errors import InputError
from .policies import CISC_TEMP, DEEPCONF_ETA, POLICIES, RunConfig, check_selection_params, supported
from .outputs import check_output, write_parquet
from .pool import DEFAULT_POOL, PoolError, load_pool
from .progress import progress
from .summary import fmt_gain, fmt_mean_se, summarize


@dataclass
class ReplayRequest:
    pool: Path | None = None
    policies: list = field(default_factory=list)
    budgets: list = field(default_factory=lambda: [4, 8, 16, 32])
    seeds: int = 100
    seed_start: int = 0
    score: str = "gt"
    eliminate: str = "threshold"
    gammas: list = field(default_factory=lambda: [1.0])
    select: str = "bon"
    cisc_temp: float = CISC_TEMP
    deepconf_eta: float = DEEPCONF_ETA
    unit: str = "samples"
    Ks: list = field(default_factory=lambda: [1])
    lams: list | None = None
    eps: float = 0.01
    max_samples: list = field(default_factory=lambda: [0])
    rhos: list = field(default_factory=lambda: [0.25, 0.5, 0.75])
    taus: list = field(default_factory=lambda: [0.5])
    m_min: int = 3
    share: float = 0.8
    hmax: float = 0.75
    conf: float = 0.95
    out: Path | None = None
    per_query: Path | None = None
    curve: Path | None = None
    threads: int | None = None
    force: bool = False  # replace --out / --per-query / --curve files that another command (or no ttc) wrote
    warmup: int = 3  # optscale
    percentile: float = 0.05  # optscale
    prior: str | None = None  # marginal-gain: a column of queries.parquet
    prior_strength: float = 2.0  # marginal-gain
    judge: int = 32  # dsc
    side: str | None = None  # side-eb: a column of the responses (a side signal in [0, 1])
    bins: int = 3  # side-eb
    refresh: int = 8  # side-eb
    horizon: int = 0  # side-eb
    dirichlet_conf: float = 0.95  # ac-dirichlet
    bf: float = 10.0  # boinf
    bf_mc: int = 1000  # boinf
    invalid_votes: bool = False  # each query's invalid answers as one answer category (Pool.with_invalid_votes)


def config_from_options(policy: str, **params) -> RunConfig:
    """A RunConfig built from the user's options. RunConfig refuses a bad parameter with a plain ValueError; here, the
    one place where options become configurations, that is the user's mistake, so it becomes an InputError (printed
    as `error: ...`). A RunConfig the project builds itself that fails is a bug and stays a ValueError."""
    try:
        return RunConfig(policy, **params)
    except ValueError as e:
        raise InputError(str(e)) from None


SEED_RANGE = (-(2**63), 2**63 - 1)  # seeds are int64 in the engine
MAX_BUDGET_TOTAL = 2**62  # a run's total budget, round(b x queries), is an int64


def check_seeds(seed_start: int, seeds: int):
    """Every seed seed_start .. seed_start + seeds - 1 must be an int64."""
    lo, hi = SEED_RANGE
    if seed_start < lo or seed_start + seeds - 1 > hi:
        raise InputError(f"--seed-start {seed_start} with --seeds {seeds} leaves the seed range [-2**63, 2**63 - 1]")


def check_budget_totals(budgets, n_queries: int):
    """A run's total budget round(b x queries) must fit the engine's integers."""
    if budgets and max(budgets) * n_queries >= MAX_BUDGET_TOTAL:
        raise InputError(f"--budgets {max(budgets):g} x {n_queries:,} queries is beyond the largest total budget "
                         f"({MAX_BUDGET_TOTAL:.3g})")


# The RunConfig fields a replay sweeps as lists (ReplayRequest's Ks, gammas, lams, max_samples, rhos, taus).
GRID_FIELDS = ("K", "gamma", "lam", "max_samples", "rho", "tau")


def fixed_params(req: ReplayRequest) -> dict:
    """Every other RunConfig field (after the policy), which ReplayRequest holds under the same name: read by name,
    so that a new field reaches every configuration without being threaded by hand."""
    return {f.name: getattr(req, f.name) for f in fields(RunConfig)[1:] if f.name not in GRID_FIELDS}


def build_configs(req: ReplayRequest, policies: list[str]) -> list[RunConfig]:
    """The cartesian grid of each policy over the parameter lists it uses (others stay at their defaults)."""
    configs = []
    for pol in policies:
        probe = config_from_options(pol, eliminate=req.eliminate)
        used = probe.used_params()
        grid = {
            "K": req.Ks if "K" in used else [1],
            "gamma": req.gammas if "gamma" in used else [1.0],
            "lam": (req.lams or [None]) if "lam" in used else [None],
            "max_samples": req.max_samples if "max_samples" in used else [0],
            "rho": req.rhos if "rho" in used else [0.5],
            "tau": req.taus if "tau" in used else [0.5],
        }
        for vals in itertools.product(*grid.values()):
            kw = dict(zip(grid.keys(), vals))
            configs.append(config_from_options(pol, **fixed_params(req), **kw))
    return configs


def _console() -> Console:
    """A terminal's own width; 170 columns when piped, so the tables are not folded."""
    return Console(width=None if Console().is_terminal else 170)


def validate_request(req: ReplayRequest):
    """Everything that can be checked before reading the pool or computing, so mistakes fail fast."""
    if req.unit not in ("samples", "tokens", "token-matched"):
        raise PoolError(f"unknown budget unit {req.unit!r}; choose samples, tokens or token-matched")
    if req.select not in SELECT:
        raise PoolError(f"unknown selection {req.select!r}; choose {', '.join(SELECT)}")
    why = check_selection_params(req.cisc_temp, req.deepconf_eta)
    if why:
        raise PoolError(why)
    check_budgets(req.budgets)
    if req.seeds < 1:
        raise PoolError(f"--seeds must be >= 1, got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    if not 0.0 < req.conf < 1.0:
        raise PoolError(f"--conf must be in (0, 1), got {req.conf}")
    set_threads(req.threads)
    unknown = [p for p in req.policies if p not in POLICIES]
    if unknown:
        raise PoolError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}")
    if any(not 0 <= l < math.inf for l in (req.lams or [])):  # NaN fails both comparisons
        raise PoolError(f"--lambda must be finite numbers >= 0, got {req.lams}")
    if not 0 <= req.eps < math.inf:
        raise PoolError(f"--eps must be a finite number >= 0, got {req.eps}")
    if any(not 0.0 <= g <= 1.0 for g in req.gammas):
        raise PoolError(f"--gamma must be in [0, 1] (scores are), got {req.gammas}")
    # Every value of every list, whichever policies use it: RunConfig checks the ranges.
    for K, ms, rho, tau in itertools.zip_longest(req.Ks, req.max_samples, req.rhos, req.taus):
        config_from_options("elimination", K=K or 1, max_samples=ms or 0, rho=rho if rho is not None else 0.5,
                            tau=tau if tau is not None else 0.5, **fixed_params(req))
    targets = [(name, Path(t)) for name, t in (("--out", req.out), ("--per-query", req.per_query),
                                                 ("--curve", req.curve)) if t is not None]
    for name, target in targets:
        check_output(target, flag=name, command="replay", reads=[req.pool or DEFAULT_POOL], force=req.force)
    for (n1, t1), (n2, t2) in itertools.combinations(targets, 2):
        if t1.resolve() == t2.resolve():
            raise PoolError(f"{n1} and {n2} are the same file, {t1}")


PER_QUERY_ROW_BYTES = 160  # peak memory per --per-query row (measured: 4.4M rows, 652 MB above a run without it)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_per_query_memory(rows: int, seeds: int, n_queries: int, what: str = "--per-query"):
    """Refuse, before the work, a per-query table that cannot fit in memory (it is built whole, then written)."""
    need = rows * seeds * n_queries * PER_QUERY_ROW_BYTES
    have = _available_memory()
    if have is not None and need > 0.8 * have:
        raise PoolError(f"{what} would hold {rows * seeds * n_queries:,} rows ({rows} configurations x budgets, "
                        f"{seeds:,} seeds, {n_queries:,} queries; about {need / 2**30:.1f} GiB) and this machine has "
                        f"{have / 2**30:.1f} GiB available: use fewer seeds, budgets or policies")


def run_replay(req: ReplayRequest, console: Console | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    console = console or _console()
    validate_request(req)
    path = req.pool or DEFAULT_POOL
    # deepconf-online's record lows: read when it is asked for (a pool without them is refused), or when no policy is
    # named and the pool has them (then it is one of the policies the pool supports); never for the others
    pool = load_pool(path, score=req.score, need_tokens=req.unit != "samples", prior=req.prior,
                     side=req.side, lows=("deepconf-online" in req.policies) if req.policies else None,
                     invalid_votes=req.invalid_votes)
    if req.invalid_votes and not pool.has_answers:
        raise PoolError("--invalid-votes makes invalid answers one answer category, and this pool has no 'answer' "
                        "column (answer categories)")
    check_budget_totals(req.budgets, pool.n_queries)
    if req.policies:
        policies = list(dict.fromkeys(req.policies))
    else:
        policies = supported(pool, req.eliminate)
    configs = build_configs(req, policies)
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    check_configs(pool, configs, req.select)
    if req.curve and not pool.has_gt:
        raise PoolError("--curve needs ground truth (a 'correct' column), and this pool has none")

    rows = len(configs) * len(req.budgets)
    if req.per_query is not None:
        check_per_query_memory(rows, req.seeds, pool.n_queries)
    console.print(f"[bold]{pool.name}[/]: {pool.n_queries} queries, {pool.off[-1]} responses "
                  f"({pool.sizes.min()}–{pool.sizes.max()} per query); score {pool.score_name}, select "
                  f"{req.select}, eliminate {req.eliminate}, unit {req.unit}, {req.seeds} seeds"
                  + ("; invalid answers vote" if pool.invalid_votes else "")
                  + (f"; {rows * req.seeds:,} runs" if rows * req.seeds >= 100_000 else ""), highlight=False)
    with progress(req.seeds, "replaying", "seeds", console=console) as bar:
        df, pq = replay(pool, configs, req.budgets, seeds, select=req.select, conf=req.conf,
                        cisc_temp=req.cisc_temp, deepconf_eta=req.deepconf_eta,
                        per_query=req.per_query is not None, progress=bar.advance)
    curves = (coverage_at_k(pool) if pool.has_gt else None,
              best_of_k(pool) if pool.has_gt and (req.select == "bon" or req.curve) else None)
    summary = summarize(df, pool, req.select, curves)
    console.print(render_table(summary))
    exhausted = summary.filter(pl.col("exhausted") > 0)
    if exhausted.height:
        worst = exhausted.sort("exhausted", descending=True).row(0, named=True)
        console.print(f"[yellow]note[/]: {exhausted.height} (configuration, budget) rows ran out of pool on some "
                      f"queries (worst: {worst['config']} at budget {worst['budget']:g}, "
                      f"{worst['exhausted']:.1f} queries per run); those runs are not faithful to live sampling",
                      highlight=False)
    if req.out:
        write_parquet(df, req.out, "replay")
        console.print(f"wrote {df.height} runs to {req.out}", highlight=False)
    if req.per_query and pq is not None:
        write_parquet(pq, req.per_query, "replay")
        console.print(f"wrote {pq.height} per-query rows to {req.per_query}", highlight=False)
    if req.curve:
        cov = curves[0]
        write_parquet(pl.DataFrame({"k": np.arange(1, len(cov) + 1), "coverage": cov, "best_of_k": curves[1]}),
                      req.curve, "replay")
        console.print(f"wrote uniform's exact curves for k = 1..{len(cov)} to {req.curve}", highlight=False)
    return df, summary


def render_table(summary: pl.DataFrame) -> Table:
    t = Table(title="mean ± standard error over seeds; gain = uniform budget needed to match / budget used",
              title_style="dim")
    for col, just in (("budget", "right"), ("policy", "left"), ("coverage", "right"), ("uniform cov.", "right"),
                      ("gain cov.", "right"), ("accuracy", "right"), ("uniform acc.", "right"),
                      ("gain acc.", "right"), ("samples/q", "right"), ("exhausted", "right")):
        t.add_column(col, justify=just)
    last_budget = None
    for r in summary.sort("budget", maintain_order=True).iter_rows(named=True):
        if last_budget is not None and r["budget"] != last_budget:
            t.add_section()
        last_budget = r["budget"]
        t.add_row(f"{r['budget']:g}", r["config"], fmt_mean_se(r["coverage"], r["coverage_se"]),
                  fmt_mean_se(r["uniform_coverage"], None),
                  fmt_gain(r["gain_coverage"], r["gain_coverage_censored"]),
                  fmt_mean_se(r["accuracy"], r["accuracy_se"]), fmt_mean_se(r["uniform_accuracy"], None),
                  fmt_gain(r["gain_accuracy"], r["gain_accuracy_censored"]), f"{r['samples_per_query']:.2f}",
                  f"{r['exhausted']:.1f}")
    return t


def run_bench(queries, responses, budgets, seeds, repeats, reference_seeds, growth, threads=None,
              console: Console | None = None):
    from .bench import BenchSpec, bench, growth as growth_table

    console = console or _console()
    if queries < 1 or responses < 1 or seeds < 1 or repeats < 1 or reference_seeds < 0:
        raise PoolError("--queries, --responses, --seeds and --repeats must be >= 1, --reference-seeds >= 0")
    check_budgets(budgets)
    if any(n < 1 for n in growth):
        raise PoolError(f"--growth sizes must be >= 1, got {growth}")
    set_threads(threads)
    spec = BenchSpec(n=queries, size=responses, budgets=tuple(budgets), seeds=seeds, repeats=repeats,
                     reference_seeds=reference_seeds)
    with progress((len(spec.policies) + len(spec.rules)) * len(budgets), "benchmarking", console=console) as bar:
        df, info = bench(spec, progress=bar.advance)
    console.print(f"[bold]ttc bench[/]: synthetic pool {queries} queries x {responses} responses, "
                  f"{get_threads()} threads, median of {repeats} repeats; first call (compile or cache "
                  f"load) {info['warmup_s']:.2f} s", highlight=False)
    console.print(f"full grid: {len(spec.policies)} policies and {len(spec.rules)} rule(s) under elimination x "
                  f"{len(budgets)} budgets x {seeds} seeds = "
                  f"{info['configs'] * seeds} runs in {info['full_grid_s']:.3f} s", highlight=False)
    t = Table(title="per policy and budget (a decision = one response handed to one query)", title_style="dim")
    for col in ("pool", "policy", "budget", "runs", "wall s", "decisions", "decisions/s", "reference dec/s",
                "speed-up"):
        t.add_column(col, justify="left" if col in ("pool", "policy") else "right")
    for r in df.iter_rows(named=True):
        t.add_row(r["pool"], r["policy"], f"{r['budget']:g}", str(r["runs"]), f"{r['wall_s']:.4f}",
                  f"{r['decisions']:,}", f"{r['decisions_per_s']:.3g}",
                  "—" if r["reference_decisions_per_s"] != r["reference_decisions_per_s"]
                  else f"{r['reference_decisions_per_s']:.3g}",
                  "—" if r["speedup"] != r["speedup"] else f"{r['speedup']:.0f}x")
    console.print(t)
    if growth:
        g = growth_table(ns=tuple(growth), size=responses, repeats=max(1, min(repeats, 3)))
        t = Table(title="growth with pool size at budget 8 (about 4M decisions per cell): decisions/s",
                  title_style="dim")
        t.add_column("policy")
        for n in growth:
            t.add_column(f"n={n:,}", justify="right")
        for p in g["policy"].unique(maintain_order=True):
            sub = g.filter(pl.col("policy") == p)
            t.add_row(p, *[f"{v:.3g}" for v in sub["decisions_per_s"]])
        console.print(t)
    return df


def run_info(path: Path, plot: Path | None = None, console: Console | None = None, force: bool = False) -> dict:
    from .info import plot_curves, pool_info

    console = console or _console()
    if plot is not None:
        check_output(plot, flag="--plot", command="info", reads=[path], force=force)
    info = pool_info(path)
    lo, med, hi = info["per_query"]
    console.print(f"[bold]{info['name']}[/]: {info['queries']} queries, {info['responses']} responses "
                  f"(per query min {lo}, median {med:g}, max {hi})", highlight=False)
    for key in ("model", "dataset", "source"):
        if key in info["meta"]:
            console.print(f"  {key}: {info['meta'][key]}", highlight=False)
    console.print(f"  columns: {', '.join(info['columns'])}", highlight=False)
    console.print(f"  ground truth: {'yes' if info['has_gt'] else 'no'}; answers: "
                  f"{'yes' if info['has_answers'] else 'no'}"
                  + (f" ({info['invalid_fraction']:.1%} invalid)" if info["has_answers"] else "")
                  + f"; token counts: {'yes' if info['has_tokens'] else 'no'}"
                  + (f" (mean {info['mean_tokens']:.0f})" if info["has_tokens"] else "")
                  + f"; scores: {', '.join(info['score_columns']) or 'none'}", highlight=False)
    if not info["has_gt"]:
        console.print("  no ground truth: coverage, curves and score agreement need a 'correct' column")
        return info
    console.print(f"  pass@1 {info['pass_at_1']:.3f}; never solved in the pool {info['never_solved']:.1%}; "
                  f"solved by every response {info['always_solved']:.1%}", highlight=False)
    cov = info["coverage_at_k"]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= len(cov)]
    if len(cov) not in ks:
        ks.append(len(cov))
    t = Table(title="uniform's exact curves", title_style="dim")
    t.add_column("k", justify="right")
    t.add_column("coverage@k", justify="right")
    for col in info["best_of_k"]:
        t.add_column(f"best-of-k {col}", justify="right")
    for k in ks:
        t.add_row(str(k), f"{cov[k - 1]:.3f}", *[f"{c[k - 1]:.3f}" for c in info["best_of_k"].values()])
    console.print(t)
    for col, rows in info["agreement"].items():
        t = Table(title=f"{col} >= gamma against ground truth", title_style="dim")
        for h in ("gamma", "flagged", "precision", "recall"):
            t.add_column(h, justify="right")
        for r in rows:
            t.add_row(f"{r['gamma']:g}", f"{r['flagged']:.3f}", f"{r['precision']:.3f}", f"{r['recall']:.3f}")
        console.print(t)
    if plot is not None:
        plot_curves(info, Path(plot))
        console.print(f"wrote {plot}", highlight=False)
    return info
