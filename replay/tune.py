"""`ttc tune`: choose a policy's hyperparameters honestly, and say so when a number is not honest.

Why: `ttc replay --lambda 1,2,3` shows the best lambda on the same queries and seeds it reports, so the best row is
optimistic (it was picked because its noise was lucky, and because it fits this pool). A number meant to predict how
a setting does on new queries has to be measured on queries the choice never saw. So `ttc tune`:

1. splits the pool's queries in two with a seeded split (`holdout` of them held out for reporting, the rest for
   tuning; `split_seed`; recorded in every output row with a digest of the held-out ids, and written whole with
   `split_out`), or tunes on one pool and reports on another (`report_pool`);
2. runs the whole parameter grid on the tuning part in one engine call (engine.replay takes every configuration
   and budget at once), and at each budget chooses the configuration with the highest mean metric over seeds
   (ties: the first in grid order);
3. runs the same grid on the reporting part in one more call, and reports there the chosen configuration, the
   policy's (or method's) default one (nothing tuned) and the paired difference between them over seeds.

Every row carries `tuned_on_reported`: True when the configuration it reports was chosen on data that overlaps the
data it is measured on (the same pool directory and some query in both): the chosen configuration's own score on
the tuning part, the best configuration on the reporting part chosen after the fact ("post hoc", shown for the
size of the optimism), and everything when `holdout` is 0 (tune and report on the whole pool). Tables mark such
rows with a dagger. Seeds are the same on both parts: the parts hold different queries, so no permutation is
shared.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .errors import InputError
from .pool import Pool, PoolError

ROWS = ("chosen", "default", "post-hoc best")
MARK = "†"  # a result tuned on the data it reports


# ---------------------------------------------------------------------------------------------------- the split

def split_queries(query_ids: list, holdout: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(tune, report): sorted positions into query_ids. A seeded permutation of the positions of the ids in sorted
    order (load_pool sorts them), the first round(holdout x n) held out for reporting; the same ids, share and seed
    always give the same split. holdout 0: both parts are every query (tuned on what is reported)."""
    n = len(query_ids)
    if holdout == 0:
        every = np.arange(n)
        return every, every
    order = np.argsort(np.asarray(query_ids, dtype=object), kind="stable")
    perm = order[np.random.default_rng(np.random.SeedSequence([split_seed, 0x70E])).permutation(n)]
    k = int(round(holdout * n))
    if not 0 < k < n:
        raise InputError(f"--holdout {holdout:g} of {n} queries leaves {'no' if k == 0 else 'every'} query held "
                         f"out; choose a share that leaves some on each side")
    return np.sort(perm[k:]), np.sort(perm[:k])


def split_digest(ids) -> str:
    """A short digest of a list of query ids (the held-out part), recorded so that a split can be checked."""
    return hashlib.blake2b("\n".join(map(str, ids)).encode(), digest_size=8).hexdigest()


def _runs(off, which) -> tuple[np.ndarray, np.ndarray]:
    """The entries of the runs off[k] .. off[k + 1] for k in `which`, one run after another: (their positions, the
    offsets of the runs among them)."""
    lens = off[which + 1] - off[which]
    new = np.zeros(len(which) + 1, np.int64)
    np.cumsum(lens, out=new[1:])
    return np.repeat(off[which], lens) + (np.arange(int(new[-1])) - np.repeat(new[:-1], lens)), new


def subset(pool: Pool, idx, label: str) -> Pool:
    """The pool restricted to the queries at positions idx (sorted), every column and property kept: a query keeps
    its id, hence its permutation and its place in the query order of every seed (replay/rng.py), so replaying the
    sub-pool is replaying those queries alone."""
    idx = np.asarray(idx, np.int64)
    rows, off = _runs(pool.off, idx)
    # the per-query prior, the per-response side signal and record lows too: left whole, they would pair the
    # sub-pool's queries with other queries' values (side-eb, marginal-gain and deepconf-online would read the wrong
    # query's signal)
    lows = None
    if pool.lows is not None:  # deepconf-online's record lows: each response's run of entries
        loff, lpos, lval = pool.lows
        at, new_loff = _runs(loff, rows)
        lows = (new_loff, lpos[at], lval[at])
    probes = {}
    if pool.probe_off is not None:  # the depth policies' probes: each response's run of them, as the lows
        at, new_poff = _runs(pool.probe_off, rows)
        probes = dict(probe_off=new_poff, probe_tok=pool.probe_tok[at], probe_ans=pool.probe_ans[at],
                      probe_ok=pool.probe_ok[at])
    return dataclasses.replace(pool, query_ids=[pool.query_ids[i] for i in idx], off=off, correct=pool.correct[rows],
                               score=pool.score[rows], ans=pool.ans[rows], tok=pool.tok[rows],
                               prior=None if pool.prior is None else pool.prior[idx],
                               side=None if pool.side is None else pool.side[rows], lows=lows,
                               meta={**pool.meta, "name": f"{pool.name}/{label}"}, **probes)


# ------------------------------------------------------------------------------------------------- the request

@dataclass
class TuneRequest:
    pool: Path | None = None
    policy: str | None = None
    method: str | None = None
    grid: dict = field(default_factory=dict)  # RunConfig field -> values
    budgets: list = field(default_factory=lambda: [4, 8, 16, 32])
    seeds: int = 100
    seed_start: int = 0
    score: str = "gt"
    eliminate: str | None = None
    select: str | None = None
    metric: str | None = None
    unit: str = "samples"
    holdout: float | None = None
    split_seed: int = 0
    report_pool: Path | None = None
    conf: float = 0.95
    cisc_temp: float | None = None
    deepconf_eta: float | None = None
    out: Path | None = None
    split_out: Path | None = None
    threads: int | None = None
    force: bool = False
    invalid_votes: bool = False  # each query's invalid answers as one answer category (Pool.with_invalid_votes)
    side: str | None = None  # a column of the responses read as their side signal (side-eb's, uab's confidence)


def _fields() -> dict:
    """RunConfig's tunable fields and their type (int, float or str: depth's depth_rule and probe_cost, whose values
    RunConfig checks): every field but policy, unit and eliminate."""
    from .policies import RunConfig

    d = RunConfig("uniform")
    kind = lambda v: str if isinstance(v, str) else int if isinstance(v, int) else float  # noqa: E731
    return {f.name: kind(getattr(d, f.name)) for f in dataclasses.fields(RunConfig)
            if f.name not in ("policy", "unit", "eliminate")}


def tunable_params(base, grid: dict) -> tuple:
    """The fields a grid may vary for `base`: those its policy uses, and depth's, which no registry entry lists
    (docs/semantics.md, Depth): the trace cap and the probe cost apply to every policy, the depth rule to the width
    policies (parallel-probe and cmc stop their traces themselves), depth_m where the stability rule is in play."""
    from .policies import DEPTH_POLICIES

    used = base.used_params() + ("trace_cap", "probe_cost")
    if base.policy not in DEPTH_POLICIES:
        used += ("depth_rule",)
        if base.depth_rule == "stability" or "stability" in grid.get("depth_rule", ()):
            used += ("depth_m",)
    return used


def flag_name(name: str) -> str:
    return "--lambda" if name == "lam" else f"--{name.replace('_', '-')}" if name != "K" else "--K"


def base_config(req: TuneRequest):
    """(the untuned configuration, the selection rule, the name of what is tuned)."""
    from .policies import METHODS, REGISTRY, SELECTION_RULES
    from .run import config_from_options

    if (req.policy is None) == (req.method is None):
        raise InputError("give one of --policy NAME or --method NAME (a METHODS entry) to tune")
    if req.method is not None:
        if req.method not in METHODS:
            raise InputError(f"unknown method {req.method!r}; choose from {', '.join(METHODS)}")
        m = METHODS[req.method]
        why = m.missing()
        if why:
            raise InputError(f"method {req.method} is not in this build: {why}")
        if req.select is not None and req.select != m.select:
            raise InputError(f"--select: method {req.method} selects by {m.select}; tune --policy "
                             f"{m.config['policy']} to choose another selection")
        if req.eliminate is not None and req.eliminate != m.config.get("eliminate", "threshold"):
            raise InputError(f"--eliminate: method {req.method} fixes its elimination rule; tune --policy "
                             f"{m.config['policy']} to choose another")
        try:
            return m.run_config(unit=req.unit), m.select, req.method
        except ValueError as e:
            raise InputError(str(e)) from None
    if req.policy not in REGISTRY:
        raise InputError(f"unknown policy {req.policy!r}; choose from {', '.join(REGISTRY)}")
    select = req.select or "bon"
    if select not in SELECTION_RULES:
        raise InputError(f"unknown selection {select!r}; choose from {', '.join(SELECTION_RULES)}")
    return (config_from_options(req.policy, unit=req.unit, eliminate=req.eliminate or "threshold"), select,
            req.policy)


def grid_configs(base, grid: dict) -> list:
    """The cartesian product of grid (field -> values) over base, in the order given (the first is the tie-break).
    A field the configuration does not use is refused: tuning it would only multiply identical runs."""
    if not grid:
        raise InputError(f"give at least one parameter grid to tune (e.g. --lambda 1,2,3); {base.label()} uses "
                         f"{', '.join(flag_name(p) for p in tunable_params(base, {}) if p != 'eliminate') or 'none'}")
    known = _fields()
    used = tunable_params(base, grid)
    for name, values in grid.items():
        if name not in known:
            raise InputError(f"--grid: RunConfig has no field {name!r}; tunable: {', '.join(known)}")
        if name not in used:
            raise InputError(f"{flag_name(name)} does not apply to {base.label()}: it uses "
                             f"{', '.join(flag_name(p) for p in used if p != 'eliminate') or 'no parameter'}")
        if not values:
            raise InputError(f"{flag_name(name)}: no values")
    configs = []
    for vals in itertools.product(*grid.values()):
        try:
            c = dataclasses.replace(base, **{k: known[k](v) for k, v in zip(grid, vals)})
        except ValueError as e:
            raise InputError(str(e)) from None
        if c.label() not in [d.label() for d in configs]:  # lambda None and its default value are one config
            configs.append(c)
    return configs


# The search space when none is given (`ttc compare` tunes every policy over it): per RunConfig field, the values
# tried, the field's default among them (so the untuned configuration is a candidate). A policy is tuned over the
# fields it uses (RunConfig.used_params), so a policy with more knobs gets a larger grid. gamma, the threshold
# rule's own parameters and refresh stay at their defaults: under --score gt every gamma in (0, 1] eliminates at
# the first correct response, and the rules' knobs belong to the rule, not the policy.
DEFAULT_GRID = {
    "K": (1, 2),
    "max_samples": (0, 4, 8, 16, 32),  # 0 = no cap; caps at or above the largest pool size are dropped (no cap too)
    "lam": (0.5, 1.0, 3.0),  # ucb's default 1 and entropy's 3 both in it
    "eps": (0.01, 0.1),
    "rho": (0.25, 0.5, 0.75),
    "warmup": (1, 3),
    "percentile": (0.05, 0.2),
    "prior_strength": (1.0, 2.0, 8.0),
    "judge": (8, 32),
    "bins": (2, 3, 5),
    "horizon": (0, 1),
    "uab_tau": (0.1, 0.2, 0.5),  # uab's temperature: the source's 0.2 and either side
}


# Where a field means something else to a policy: deepconf-online's percentile is the share of warm-up traces kept
# above its threshold (DeepConf-low 0.1, -high 0.9), not optscale's chance of no success; its warm-up is of whole traces
# (the paper's 16, fewer on small pools); tau its consensus (the paper's 0.95)
POLICY_GRID = {
    "deepconf-online": {"warmup": (2, 8), "percentile": (0.1, 0.9), "tau": (0.9, 0.95)},
}


def default_grid(base, max_size: int) -> dict:
    """DEFAULT_GRID (and the policy's POLICY_GRID) restricted to the fields `base` uses; a cap of max_size or more is
    no cap (0 stands for it). Empty for a policy without parameters (uniform, oracle): its one configuration is the
    grid."""
    table = {**DEFAULT_GRID, **POLICY_GRID.get(base.policy, {})}
    grid = {f: table[f] for f in base.used_params() if f in table}
    if "max_samples" in grid:
        grid["max_samples"] = tuple(v for v in grid["max_samples"] if v == 0 or v < max_size)
    return grid


def validate(req: TuneRequest):
    """What can be refused before a pool is read."""
    from .engine import check_budgets
    from .outputs import check_output
    from .policies import CISC_TEMP, DEEPCONF_ETA, check_selection_params
    from .pool import DEFAULT_POOL
    from .run import check_seeds

    if req.metric not in (None, "coverage", "accuracy"):
        raise InputError(f"--metric must be coverage or accuracy, got {req.metric!r}")
    if req.unit not in ("samples", "tokens", "token-matched"):
        raise InputError(f"unknown budget unit {req.unit!r}; choose samples, tokens or token-matched")
    check_budgets(req.budgets)
    if req.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    if req.report_pool is not None and req.holdout is not None:
        raise InputError("--holdout splits one pool; with --report-pool the whole of POOL tunes and the whole of "
                         "--report-pool reports: give one or the other")
    if req.holdout is not None and not 0.0 <= req.holdout < 1.0:
        raise InputError(f"--holdout is the share of queries held out for reporting, in [0, 1) (0: tune and report "
                         f"on every query, flagged), got {req.holdout}")
    if not 0.0 < req.conf < 1.0:
        raise InputError(f"--conf must be in (0, 1), got {req.conf}")
    why = check_selection_params(CISC_TEMP if req.cisc_temp is None else req.cisc_temp,
                                 DEEPCONF_ETA if req.deepconf_eta is None else req.deepconf_eta)
    if why:
        raise InputError(why)
    reads = [req.pool or DEFAULT_POOL] + ([req.report_pool] if req.report_pool is not None else [])
    targets = [(f, t) for f, t in (("--out", req.out), ("--split-out", req.split_out)) if t is not None]
    for flag, target in targets:
        check_output(target, flag=flag, command="tune", reads=reads, force=req.force)
    if len(targets) == 2 and Path(targets[0][1]).resolve() == Path(targets[1][1]).resolve():
        raise InputError(f"--out and --split-out are the same file, {req.out}")


# --------------------------------------------------------------------------------------------------- the work

def _summary(df: pl.DataFrame, metric: str, n: int) -> pl.DataFrame:
    return (df.with_columns(pl.col(metric).alias("_m"))
            .group_by("config", "budget", maintain_order=True)
            .agg(pl.col("_m").mean().alias("mean"), (pl.col("_m").std() / pl.len().sqrt()).alias("se"),
                 pl.len().alias("seeds"), (pl.col("samples_used").mean() / n).alias("samples_per_query")))


def _paired(df: pl.DataFrame, metric: str, a: str, b: str, budget: float) -> tuple[float, float]:
    """Mean and standard error over seeds of metric(a) - metric(b) at budget (common random numbers: same seeds)."""
    sub = df.filter(pl.col("budget") == budget)
    x = sub.filter(pl.col("config") == a).sort("seed")[metric].to_numpy()
    y = sub.filter(pl.col("config") == b).sort("seed")[metric].to_numpy()
    d = x - y
    return float(d.mean()), (float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"))


def with_default(configs: list, default) -> tuple[list, object]:
    """(every run the tuning needs, the default as the grid holds it): the grid plus the default configuration when
    the grid lacks it (lambda None and 1 are the same run, so the grid's own copy of it stands in)."""
    same = [c for c in configs if c.label() == default.label()]
    return (list(configs), same[0]) if same else (list(configs) + [default], default)


def tune(tune_pool: Pool, report_pool: Pool, configs: list, default, budgets, seeds, *, select: str, metric: str,
         overlap: bool, conf: float = 0.95, replay_kw: dict | None = None, progress=None,
         same_data: bool = False) -> pl.DataFrame:
    """The tuning itself, on two pools already split (module docstring): one engine call per part (one in all when
    same_data: the parts are the same pool). Returns the rows of the result table, without provenance columns."""
    from .engine import replay

    runs, default = with_default(configs, default)
    kw = dict(select=select, conf=conf, progress=progress, **(replay_kw or {}))
    df_t = replay(tune_pool, runs, budgets, seeds, **kw)[0]
    df_r = df_t if same_data else replay(report_pool, runs, budgets, seeds, **kw)[0]
    return choose(df_t, df_r, configs, default, budgets, metric=metric, overlap=overlap,
                  n_tune=tune_pool.n_queries, n_report=report_pool.n_queries)


def choose(df_t: pl.DataFrame, df_r: pl.DataFrame, configs: list, default, budgets, *, metric: str, overlap: bool,
           n_tune: int, n_report: int) -> pl.DataFrame:
    """The choice and its rows, from runs already made: df_t and df_r hold (at least) every configuration of
    `configs` and `default` at every budget, on the tuning and the reporting part (the same seeds). Separate from
    the runs so that `ttc compare` tunes many policies from one engine call per part, by the same rule as ttc tune."""
    runs, default = with_default(configs, default)
    labels = [c.label() for c in runs]
    df_t, df_r = (d.filter(pl.col("config").is_in(labels)) for d in (df_t, df_r))
    s_t, s_r = _summary(df_t, metric, n_tune), _summary(df_r, metric, n_report)
    order = {c.label(): i for i, c in enumerate(configs)}
    by_label = {c.label(): c for c in runs}
    rows = []

    def row(kind, part, label, s, budget, flag, diff=(float("nan"), float("nan"))):
        r = s.filter((pl.col("config") == label) & (pl.col("budget") == budget)).row(0, named=True)
        c = by_label[label]
        rows.append({"budget": float(budget), "row": kind, "evaluated_on": part, "config": label,
                     "metric": metric, "mean": r["mean"], "se": r["se"], "seeds": r["seeds"],
                     "samples_per_query": r["samples_per_query"], "vs_default": diff[0], "vs_default_se": diff[1],
                     "tuned_on_reported": flag,
                     **{f.name: (getattr(c, f.name) if f.name != "lam" else c.lam_value)  # every RunConfig field
                        for f in dataclasses.fields(c)[2:]}})  # after the policy and the unit

    def best(s, budget):
        cand = s.filter((pl.col("budget") == budget) & pl.col("config").is_in(list(order)))
        cand = cand.with_columns(pl.col("config").replace_strict(order, return_dtype=pl.Int64).alias("_i"),
                                 pl.col("mean").fill_nan(-np.inf).alias("_key"))
        return cand.sort(["_key", "_i"], descending=[True, False])["config"][0]

    dlabel = default.label()
    for b in budgets:
        chosen = best(s_t, b)
        row("chosen", "tune", chosen, s_t, b, True)
        row("chosen", "report", chosen, s_r, b, overlap, _paired(df_r, metric, chosen, dlabel, b))
        row("default", "report", dlabel, s_r, b, False)
        row("post-hoc best", "report", best(s_r, b), s_r, b, True)
    return pl.DataFrame(rows)


def run_tune(req: TuneRequest, console=None) -> pl.DataFrame:
    from .engine import check_configs, set_threads
    from .outputs import parquet_writer, write_set
    from .policies import CISC_TEMP, DEEPCONF_ETA, METHODS
    from .pool import DEFAULT_POOL, load_pool
    from .progress import progress
    from .run import _console, check_budget_totals

    console = console or _console()
    validate(req)
    set_threads(req.threads)
    base, select, what = base_config(req)
    configs = grid_configs(base, req.grid)
    metric = req.metric or ("accuracy" if req.method else "coverage")
    path = Path(req.pool or DEFAULT_POOL)
    lows = base.policy == "deepconf-online"  # its record lows, read only for it (as ttc replay does)
    probes = any(c.needs_probes() for c in configs + [base])  # depth's probes, read only when a run stops traces
    pool = load_pool(path, score=req.score, need_tokens=req.unit != "samples", invalid_votes=req.invalid_votes,
                     lows=lows, side=req.side, probes=probes)
    if not pool.has_gt:
        raise PoolError(f"ttc tune needs ground truth (a 'correct' column) to score {metric}, and {path} has none")
    if req.report_pool is not None:
        rpath = Path(req.report_pool)
        rpool = load_pool(rpath, score=req.score, need_tokens=req.unit != "samples", invalid_votes=req.invalid_votes,
                          lows=lows, side=req.side, probes=probes)
        if not rpool.has_gt:
            raise PoolError(f"ttc tune needs ground truth in --report-pool {rpath}, and it has none")
        same_dir = rpath.resolve() == path.resolve()
        overlap = same_dir and bool(set(pool.query_ids) & set(rpool.query_ids))
        tune_pool, report_pool = pool, rpool
        holdout, n_report_ids = None, rpool.query_ids
        same_data = same_dir
    else:
        holdout = 0.5 if req.holdout is None else req.holdout
        t_idx, r_idx = split_queries(pool.query_ids, holdout, req.split_seed)
        same_data = holdout == 0
        overlap = same_data
        tune_pool = pool if same_data else subset(pool, t_idx, "tune")
        report_pool = pool if same_data else subset(pool, r_idx, "report")
        n_report_ids = report_pool.query_ids
    for p in (tune_pool, report_pool):
        check_budget_totals(req.budgets, p.n_queries)
        check_configs(p, configs + [base], select)
        if req.method is not None:
            ok, why = METHODS[req.method].applies(p)
            if not ok:
                raise PoolError(f"method {req.method} cannot run on {p.name}: {why}")
    seeds = range(req.seed_start, req.seed_start + req.seeds)
    kw = {"cisc_temp": CISC_TEMP if req.cisc_temp is None else req.cisc_temp,
          "deepconf_eta": DEEPCONF_ETA if req.deepconf_eta is None else req.deepconf_eta}
    where = (f"tuned on {tune_pool.name} ({tune_pool.n_queries} queries), reported on {report_pool.name} "
             f"({report_pool.n_queries})" if not same_data else
             f"tuned and reported on {pool.name} ({pool.n_queries} queries): every number is in-sample {MARK}")
    console.print(f"[bold]ttc tune[/] {what}: {len(configs)} configurations x {len(req.budgets)} budgets x "
                  f"{req.seeds} seeds; metric {metric}, select {select}; {where}"
                  + ("; invalid answers vote" if req.invalid_votes else "")
                  + (f"; split: {holdout:g} held out, --split-seed {req.split_seed}" if holdout else ""),
                  highlight=False)
    runs = len(with_default(configs, base)[0]) * len(req.budgets) * req.seeds
    with progress(runs * (1 if same_data else 2), "tuning", "runs", console=console) as bar:
        df = tune(tune_pool, report_pool, configs, base, req.budgets, seeds, select=select, metric=metric,
                  overlap=overlap, conf=req.conf, replay_kw=kw, progress=bar.advance, same_data=same_data)
    df = df.with_columns(
        pl.lit(what).alias("tuned"), pl.lit(req.method is not None).alias("is_method"),
        pl.lit(select).alias("select"), pl.lit(req.unit).alias("unit"), pl.lit(pool.score_name).alias("score"),
        pl.lit(req.invalid_votes).alias("invalid_votes"),
        pl.lit(float(kw["cisc_temp"])).alias("cisc_temp"), pl.lit(float(kw["deepconf_eta"])).alias("deepconf_eta"),
        pl.lit(str(path)).alias("tune_pool"), pl.lit(str(req.report_pool or path)).alias("report_pool"),
        pl.lit(tune_pool.n_queries).alias("n_tune"), pl.lit(report_pool.n_queries).alias("n_report"),
        pl.lit(holdout, dtype=pl.Float64).alias("holdout"),
        pl.lit(req.split_seed if req.report_pool is None else None, dtype=pl.Int64).alias("split_seed"),
        pl.lit(split_digest(n_report_ids)).alias("report_digest"),
        pl.lit(req.seed_start).alias("seed_start"), pl.lit(req.seeds).alias("n_seeds"))
    console.print(render_table(df))
    console.print(f"{MARK} tuned on the data it reports (optimistic): the chosen configuration's own score where it "
                  "was chosen, and the best configuration picked after the fact on the reporting part", style="dim",
                  highlight=False)
    outputs, said = [], []  # one set (outputs.write_set): all new, or all as they were
    if req.out is not None:
        outputs.append((req.out, parquet_writer(df, "tune")))
        said.append(f"wrote {df.height} rows to {req.out}")
    if req.split_out is not None:
        part = np.full(pool.n_queries, "report" if same_data or req.report_pool is not None else "tune", dtype=object)
        if not same_data and req.report_pool is None:
            part[r_idx] = "report"
        split = pl.DataFrame({"query_id": pool.query_ids, "part": part.tolist(), "pool": str(path)})
        if req.report_pool is not None:
            split = pl.concat([split.with_columns(pl.lit("tune").alias("part")),
                               pl.DataFrame({"query_id": report_pool.query_ids, "part": "report",
                                             "pool": str(req.report_pool)})])
        elif same_data:
            split = split.with_columns(pl.lit("tune+report").alias("part"))
        outputs.append((req.split_out, parquet_writer(split, "tune")))
        said.append(f"wrote the split ({split.height} queries) to {req.split_out}")
    if outputs:
        write_set(outputs)
    for line in said:
        console.print(line, highlight=False)
    return df


def render_table(df: pl.DataFrame):
    from rich.table import Table

    from .summary import fmt_mean_se

    metric = df["metric"][0] if df.height else "metric"
    t = Table(title=f"{metric}: mean ± standard error over seeds; {MARK} = tuned on the data it reports",
              title_style="dim")
    for col, just in (("budget", "right"), ("row", "left"), ("measured on", "left"), ("configuration", "left"),
                      (metric, "right"), ("vs default", "right"), ("samples/q", "right")):
        t.add_column(col, justify=just)
    last = None
    for r in df.iter_rows(named=True):
        if last is not None and r["budget"] != last:
            t.add_section()
        last = r["budget"]
        diff = "" if r["vs_default"] != r["vs_default"] else fmt_mean_se(r["vs_default"], r["vs_default_se"])
        if diff and not diff.startswith("-"):
            diff = "+" + diff
        t.add_row(f"{r['budget']:g}", r["row"], r["evaluated_on"], r["config"],
                  fmt_mean_se(r["mean"], r["se"]) + (f" {MARK}" if r["tuned_on_reported"] else "  "), diff,
                  f"{r['samples_per_query']:.2f}")
    return t
