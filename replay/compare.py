"""`ttc compare [POOL...]`: issue 15's comparison table from one command: every published policy, each tuned on
held-out queries, against this project's own policies (side-eb) tuned alike, and the hindsight oracle.

Why a command of its own and not a mode of `ttc tune`: tune answers "which parameters for this one policy", with a
grid the user gives; the comparison needs every policy the pool supports, each over its own grid (tune.DEFAULT_GRID
and POLICY_GRID, by the fields the policy uses), side-eb's side column chosen from what the pool has, the oracle, and
a verdict per (pool, budget). It reuses tune's machinery whole: the split (tune.split_queries, recorded by
tune.split_digest and written per query), the sub-pools (tune.subset) and the choice (tune.choose: best mean on the
tuning part, ties to the first in grid order, every row flagged tuned_on_reported when tuning and reported data
overlap). So a policy's number here is the "chosen / report" row `ttc tune --policy P` with the same grid, split and
seeds prints.

For each pool and budget (metric: coverage under ground truth, the issue's target):
- each published policy (the registry's `published` and `live` entries the pool supports; `--policy` narrows them):
  its grid runs on the tuning part, the best configuration there is measured on the held-out part;
- the best published policy: the one whose chosen configuration scored best *on the tuning part*. The choice of
  policy is one more hyperparameter, so it is made where the others are, and its held-out number stays honest;
- each of this project's policies (`published` False: side-eb), tuned alike, its side column one more choice on the
  tuning part among the pool's per-response score columns (`--side COLUMN` fixes one); a pool with none runs it
  without a signal (side "none": 0.5 for every response, its no-information control, which the issue's "never worse"
  is about there; `ttc signals` shows what signal a pool has);
- the hindsight oracle (the registry's policies that are not `live`), untuned: the ceiling;
- side-eb minus the best published, paired over seeds on the held-out queries (common random numbers: seed s gives
  every policy the same permutation of each query's responses), mean ± standard error of the per-seed differences;
  "better" / "worse" beyond 2 standard errors, else "within 2 SE". The standard error is over seeds with the
  held-out queries fixed: it says whether the difference is more than the draw order's luck on these queries, not
  how it would vary over other queries from the same population;
- the share of the gap closed: (side-eb - best published) / (oracle - best published), from the held-out means;
  its standard error by the delta method over the same seeds (the ratio of two paired means). Undefined (NaN) when
  the oracle is not above the best published policy.

All pools are read and checked, and every output refused or accepted, before the first engine call. The outputs
(`--out DIR`): compare.parquet (one row per pool, budget and policy, with the split and the comparison), compare.md
(the tables as markdown, with the command that regenerates them) and split.parquet (each query's part), written as
one directory atomically.

`--depth` (issue 30) asks another question with the same split and choice rule: on pools with probes, the
leaderboard's width x depth entries against its width-only ones at equal token budgets, without a verifier (the
depth view, at the end of this module); its outputs are depth.parquet, compare.md and split.parquet.
"""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .errors import InputError
from .pool import PoolError

METRIC = "coverage"
SE_METHOD = ("paired over seeds on the held-out queries (common random numbers), standard deviation of the per-seed "
             "differences / sqrt(seeds); the held-out queries fixed")
ROLES = ("published", "new", "hindsight")
NO_SIDE = "none"  # the side of a new policy on a pool without a score column: no signal, 0.5 everywhere


@dataclass
class CompareRequest:
    pools: list = field(default_factory=list)  # empty: every embedded pool
    budgets: list = field(default_factory=lambda: [4, 8, 16, 32])
    seeds: int = 100
    seed_start: int = 0
    holdout: float = 0.5
    split_seed: int = 0
    policies: list | None = None  # published policies to compare (default: every one the pool supports)
    side: str | None = None  # the new policies' side column (default: chosen on the tuning part)
    out: Path | None = None
    threads: int | None = None
    force: bool = False
    depth: bool = False  # the depth view instead (the module's end): width x depth against width-only at equal tokens
    token_multiples: list = field(default_factory=lambda: [1, 2, 4, 8, 16])  # its budgets: the leaderboard's


def published_policies() -> list[str]:
    from .policies import REGISTRY

    return [n for n, p in REGISTRY.items() if p.published and p.live]


def pool_paths(req: CompareRequest) -> list[Path]:
    from .data import embedded_pools

    if not req.pools:
        found = embedded_pools()
        if not found:
            raise InputError("no embedded pools were found (the package ttc.data); give POOL directories")
        return found
    return distinct_pools([Path(p) for p in req.pools])


def distinct_pools(paths: list[Path]) -> list[Path]:
    """The pools, refusing one given twice (under any two spellings of its path): its numbers would count twice."""
    seen = {}
    for p in paths:
        r = p.resolve()
        if r in seen:
            raise InputError(f"pool {p} is given twice (as {seen[r]} too)")
        seen[r] = p
    return paths


def validate(req: CompareRequest) -> list[Path]:
    """What can be refused before a pool is read; returns the pools."""
    from .engine import check_budgets
    from .outputs import check_output
    from .run import check_seeds

    check_budgets(req.budgets)
    if req.depth:
        check_budgets(req.token_multiples, "--token-multiples")
        if req.policies is not None:
            raise InputError("--policy narrows the published policies of the coverage view; the depth view (--depth) "
                             "compares every width and depth entry of the leaderboard's sc track")
    if req.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    if not 0.0 <= req.holdout < 1.0:
        raise InputError(f"--holdout is the share of queries held out for reporting, in [0, 1) (0: tune and report "
                         f"on every query, flagged), got {req.holdout}")
    if req.policies is not None:
        allowed = published_policies()
        if not req.policies:
            raise InputError("--policy: no policy given")
        for p in req.policies:
            if p not in allowed:
                raise InputError(f"--policy {p}: not a published policy (the oracle and this project's own are always "
                                 f"compared); choose from {', '.join(allowed)}")
    paths = pool_paths(req)
    if req.out is not None:
        check_output(req.out, flag="--out", command="compare", reads=paths, force=req.force, kind="dir")
    return paths


# ---------------------------------------------------------------------------------------------------- the plan

@dataclass
class PoolPlan:
    """One pool, read and checked: its parts, the policies by role and their grids, the side columns to try."""

    path: Path
    pool: object
    t_idx: np.ndarray
    r_idx: np.ndarray
    grids: dict  # policy -> list of RunConfig
    roles: dict  # role -> [policy]
    sides: list  # candidate side columns for the new policies
    side_pools: dict  # column -> the pool loaded with it as its side signal (NO_SIDE: with none)
    skipped: dict = field(default_factory=dict)  # published policy left out -> why (uab without --side)

    @property
    def same(self) -> bool:
        return len(self.t_idx) == len(self.r_idx) == self.pool.n_queries

    def parts(self, pool):
        from .tune import subset

        return (pool, pool) if self.same else (subset(pool, self.t_idx, "tune"), subset(pool, self.r_idx, "report"))

    def runs(self, policy):
        """A policy's grid, and its default when the grid lacks it (choose() measures the chosen against it)."""
        from .policies import RunConfig
        from .tune import with_default

        return with_default(self.grids[policy], RunConfig(policy))[0]

    def work(self, budgets, seeds: int) -> int:
        """The work this pool takes, in query-runs (a run of one configuration at one budget and seed, times the
        queries it runs on), which progress counts: every engine call's, on the tuning part and on the held-out
        part, not one unit per call (compare said "28 s left" and ran 100 s more)."""
        main = sum(len(self.runs(p)) for r in ("published", "hindsight") for p in self.roles[r])
        new = sum(len(self.runs(p)) for p in self.roles["new"]) * len(self.side_pools)
        queries = len(self.t_idx) + (0 if self.same else len(self.r_idx))
        return (main + new) * len(budgets) * seeds * queries


def side_columns(path: Path, side: str | None) -> list[str]:
    """The columns a new policy may read as its side signal: `side` when given, else every per-response score column
    of the pool (numbers in [0, 1] that the pool format already validates: confidences, reward-model scores)."""
    from .pool import is_score, sample_columns

    names = sample_columns(path)
    if side is not None:
        if side not in names:
            raise PoolError(f"{path}: --side: no column '{side}' (columns: {', '.join(names)})")
        return [side]
    return [c for c in names if is_score(c)]


def plan_pool(path: Path, req: CompareRequest) -> PoolPlan:
    from .engine import check_configs
    from .policies import REGISTRY, RunConfig, lacking, supported
    from .pool import load_pool, sample_columns
    from .run import check_budget_totals
    from .tune import default_grid, grid_configs, split_queries

    # ground truth is checked first, in this command's words (load_pool's would speak of --score gt)
    # (record lows read when the pool has them: deepconf-online then takes part, as in ttc replay; the --side column
    # too, checked first in this command's words: uab, a published policy, reads it as its confidence)
    if "correct" not in sample_columns(path):
        raise PoolError(f"ttc compare needs ground truth (a 'correct' column) to score coverage, and {path} has none")
    if req.side is not None:
        side_columns(path, req.side)
    pool = load_pool(path, lows=None, side=req.side)
    if not pool.has_gt:
        raise PoolError(f"ttc compare needs ground truth (a 'correct' column) to score coverage, and {path} has none")
    sup = supported(pool)
    wanted = [p for p, spec in REGISTRY.items() if spec.published and spec.live
              and (p in req.policies if req.policies is not None else not spec.slow)]
    skipped = {p: lacking(pool, p) + (" (give --side COLUMN)" if "side" in REGISTRY[p].needs else "")
               for p in wanted if p not in sup}
    roles = {"published": [p for p in sup if p in wanted],
             "new": [p for p in sup if not REGISTRY[p].published and REGISTRY[p].live],
             "hindsight": [p for p in sup if not REGISTRY[p].live]}
    if not roles["published"]:
        raise PoolError(f"{path}: none of --policy {','.join(req.policies or [])} runs on this pool (it supports "
                        f"{', '.join(p for p in sup if REGISTRY[p].published and REGISTRY[p].live)})")
    t_idx, r_idx = split_queries(pool.query_ids, req.holdout, req.split_seed)
    for n in {len(t_idx), len(r_idx)}:
        check_budget_totals(req.budgets, n)
    size = int(pool.sizes.max())
    grids = {}
    for p in (q for r in ROLES for q in roles[r]):
        base = RunConfig(p)
        grid = default_grid(base, size)
        grids[p] = grid_configs(base, grid) if grid else [base]
        check_configs(pool, grids[p], "bon")
    sides = (side_columns(path, req.side) or [NO_SIDE]) if roles["new"] else []
    # the loader checks each column: present, numbers in [0, 1]
    side_pools = {c: load_pool(path, side=None if c == NO_SIDE else c) for c in sides}
    return PoolPlan(path, pool, t_idx, r_idx, grids, roles, sides, side_pools, skipped)


# --------------------------------------------------------------------------------------------------- the work

def _per_seed(df: pl.DataFrame, label: str, budget: float) -> np.ndarray:
    return (df.filter((pl.col("config") == label) & (pl.col("budget") == budget)).sort("seed")[METRIC]
            .to_numpy())


def paired(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of x - y over seeds (x[s], y[s] from the same seed)."""
    d = x - y
    return float(d.mean()), (float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"))


def gap_share(new: np.ndarray, best: np.ndarray, oracle: np.ndarray) -> tuple[float, float]:
    """The share of the gap between the best published policy and the oracle that the new policy closes, from
    per-seed values: mean(new - best) / mean(oracle - best), and its delta-method standard error over seeds,
    sqrt((v1 - 2 r c12 + r^2 v2) / (S m2^2)) with v, c the sample (co)variances of the two differences. NaN when
    the oracle is not above the best published policy (no gap to close)."""
    d1, d2 = new - best, oracle - best
    m1, m2 = float(d1.mean()), float(d2.mean())
    if not m2 > 0:
        return float("nan"), float("nan")
    r = m1 / m2
    S = len(d1)
    if S < 2:
        return r, float("nan")
    c = np.cov(d1, d2, ddof=1)
    var = (c[0, 0] - 2 * r * c[0, 1] + r * r * c[1, 1]) / (S * m2 * m2)
    return r, float(np.sqrt(max(var, 0.0)))


def verdict(diff: float, se: float) -> str:
    if not np.isfinite(se):
        return "n/a (one seed)"
    return "better" if diff > 2 * se else "worse" if diff < -2 * se else "within 2 SE"


def compare_pool(plan: PoolPlan, req: CompareRequest, progress=None) -> pl.DataFrame:
    """The rows of one pool (module docstring): one per (budget, policy)."""
    from .engine import replay
    from .policies import RunConfig
    from .tune import choose, split_digest

    seeds = range(req.seed_start, req.seed_start + req.seeds)
    n_t, n_r = len(plan.t_idx), len(plan.r_idx)
    kw = dict(metric=METRIC, overlap=plan.same, n_tune=n_t, n_report=n_r)

    def run(pool, configs):
        tp, rp = plan.parts(pool)

        def tick(part):  # progress in query-runs (PoolPlan.work)
            return None if progress is None else (lambda k: progress(k * part.n_queries))

        df_t = replay(tp, configs, req.budgets, seeds, progress=tick(tp))[0]
        return df_t, (df_t if plan.same else replay(rp, configs, req.budgets, seeds, progress=tick(rp))[0])

    runs = plan.runs

    main = [c for r in ("published", "hindsight") for p in plan.roles[r] for c in runs(p)]
    frames = {None: run(plan.pool, main)}
    for col, pool in plan.side_pools.items():
        frames[col] = run(pool, [c for p in plan.roles["new"] for c in runs(p)])
    chosen = {}  # (policy, side) -> choose()'s rows
    for r in ROLES:
        for p in plan.roles[r]:
            for col in (plan.sides if r == "new" else [None]):
                chosen[p, col] = choose(*frames[col], plan.grids[p], RunConfig(p), req.budgets, **kw)

    def pick(p, col, b):
        rows = chosen[p, col].filter(pl.col("budget") == float(b))
        tune = rows.filter((pl.col("row") == "chosen") & (pl.col("evaluated_on") == "tune")).row(0, named=True)
        rep = rows.filter((pl.col("row") == "chosen") & (pl.col("evaluated_on") == "report")).row(0, named=True)
        return tune, rep

    out = []
    for b in req.budgets:
        b = float(b)
        entries = {}  # policy -> (role, side, tune row, report row)
        for r in ROLES:
            for p in plan.roles[r]:
                cols = plan.sides if r == "new" else [None]
                # a new policy's side column: the one whose chosen configuration is best on the tuning part
                scored = [(pick(p, c, b), c) for c in cols]
                (tune, rep), col = max(scored, key=lambda s: (np.nan_to_num(s[0][0]["mean"], nan=-np.inf),
                                                               -cols.index(s[1])))
                entries[p] = (r, col, tune, rep)
        pub = plan.roles["published"]
        best = max(pub, key=lambda p: (np.nan_to_num(entries[p][2]["mean"], nan=-np.inf), -pub.index(p)))
        x_best = _per_seed(frames[None][1], entries[best][3]["config"], b)
        oracle = plan.roles["hindsight"][0] if plan.roles["hindsight"] else None
        x_oracle = _per_seed(frames[None][1], entries[oracle][3]["config"], b) if oracle else None
        for p, (r, col, tune, rep) in entries.items():
            row = {"pool": plan.pool.name, "pool_path": str(plan.path), "budget": b, "policy": p, "role": r,
                   "config": rep["config"], "side": col, "tune_mean": tune["mean"], "mean": rep["mean"],
                   "se": rep["se"], "seeds": rep["seeds"], "samples_per_query": rep["samples_per_query"],
                   "tuned_on_reported": rep["tuned_on_reported"], "is_best_published": p == best,
                   "best_published": best, "vs_best": float("nan"), "vs_best_se": float("nan"),
                   "verdict": None, "gap_share": float("nan"), "gap_share_se": float("nan")}
            if r == "new":
                x = _per_seed(frames[col][1], rep["config"], b)
                row["vs_best"], row["vs_best_se"] = paired(x, x_best)
                row["verdict"] = verdict(row["vs_best"], row["vs_best_se"])
                if x_oracle is not None:
                    row["gap_share"], row["gap_share_se"] = gap_share(x, x_best, x_oracle)
            out.append(row)
    return pl.DataFrame(out, schema=SCHEMA).with_columns(
        pl.lit(float(req.holdout), dtype=pl.Float64).alias("holdout"),
        pl.lit(req.split_seed, dtype=pl.Int64).alias("split_seed"),
        pl.lit(n_t, dtype=pl.Int64).alias("n_tune"), pl.lit(n_r, dtype=pl.Int64).alias("n_report"),
        pl.lit(split_digest([plan.pool.query_ids[i] for i in plan.r_idx])).alias("report_digest"),
        pl.lit(req.seed_start, dtype=pl.Int64).alias("seed_start"), pl.lit(req.seeds, dtype=pl.Int64).alias("n_seeds"),
        pl.lit(METRIC).alias("metric"), pl.lit(SE_METHOD).alias("se_method"))


SCHEMA = {"pool": pl.String, "pool_path": pl.String, "budget": pl.Float64, "policy": pl.String, "role": pl.String,
          "config": pl.String, "side": pl.String, "tune_mean": pl.Float64, "mean": pl.Float64, "se": pl.Float64,
          "seeds": pl.Int64, "samples_per_query": pl.Float64, "tuned_on_reported": pl.Boolean,
          "is_best_published": pl.Boolean, "best_published": pl.String,
          "vs_best": pl.Float64, "vs_best_se": pl.Float64, "verdict": pl.String, "gap_share": pl.Float64,
          "gap_share_se": pl.Float64}


def split_frame(plan: PoolPlan) -> pl.DataFrame:
    part = np.full(plan.pool.n_queries, "tune+report" if plan.same else "tune", dtype=object)
    if not plan.same:
        part[plan.r_idx] = "report"
    return pl.DataFrame({"pool": str(plan.path), "query_id": plan.pool.query_ids, "part": part.tolist()})


def command_line(req: CompareRequest) -> str:
    """The canonical command that regenerates the table (every option explicit)."""
    args = ["ttc", "compare", *[str(p) for p in req.pools]]
    args += (["--depth", "--token-multiples", ",".join(f"{b:g}" for b in req.token_multiples)] if req.depth else
             ["--budgets", ",".join(f"{b:g}" for b in req.budgets)])
    args += ["--seeds", str(req.seeds), "--seed-start", str(req.seed_start), "--holdout", f"{req.holdout:g}",
            "--split-seed", str(req.split_seed)]
    if req.policies is not None:
        args += ["--policy", ",".join(req.policies)]
    if req.side is not None:
        args += ["--side", req.side]
    if req.out is not None:
        args += ["--out", str(req.out)]
    return shlex.join(args)


def run_compare(req: CompareRequest, console=None) -> pl.DataFrame:
    from .engine import set_threads
    from .outputs import MARK as OUTPUT_MARK
    from .outputs import atomic_dir
    from .progress import progress
    from .run import _console

    console = console or _console()
    paths = validate(req)
    set_threads(req.threads)
    if req.depth:
        return run_depth(req, paths, console)
    plans = [plan_pool(p, req) for p in paths]
    for plan in plans:
        n_cfg = sum(len(plan.grids[p]) for r in ROLES for p in plan.roles[r])
        side = (f"; side column{'s' if len(plan.sides) > 1 else ''} tried: {', '.join(plan.sides)}"
                + (" (the pool has no score column: no side signal)" if plan.sides == [NO_SIDE] else "")
                if plan.sides else "")
        split = ("tuned and reported on every query: every number is in-sample †" if plan.same else
                 f"tuned on {len(plan.t_idx)} queries, reported on the {len(plan.r_idx)} held out (--holdout "
                 f"{req.holdout:g}, --split-seed {req.split_seed})")
        console.print(f"[bold]{plan.pool.name}[/]: {n_cfg} configurations of {sum(map(len, plan.roles.values()))} "
                      f"policies x {len(req.budgets)} budgets x {req.seeds} seeds; {split}{side}", highlight=False)
        for p, why in plan.skipped.items():
            console.print(f"  {p}: not run: {why}", highlight=False)
    t0 = time.perf_counter()
    with progress(sum(p.work(req.budgets, req.seeds) for p in plans), "comparing", "query-runs",
                  console=console) as bar:
        df = pl.concat([compare_pool(plan, req, progress=bar.advance) for plan in plans])
    elapsed = time.perf_counter() - t0
    console.print(render_table(df))
    for name in df["pool"].unique(maintain_order=True):
        console.print(render_policies(df.filter(pl.col("pool") == name)))
    mark = "† tuned on the data it reports (--holdout 0). " if df["tuned_on_reported"].any() else ""
    console.print(f"{mark}Standard errors: {SE_METHOD}. {elapsed:.1f} s.", style="dim", highlight=False)
    if req.out is not None:
        with atomic_dir(req.out, "compare") as tmp:
            df.write_parquet(tmp / "compare.parquet", metadata={OUTPUT_MARK: "compare"})
            pl.concat([split_frame(p) for p in plans]).write_parquet(tmp / "split.parquet",
                                                                     metadata={OUTPUT_MARK: "compare"})
            (tmp / "compare.md").write_text(markdown(df, command_line(req),
                                                     {p.pool.name: p.skipped for p in plans}))
        console.print(f"wrote compare.parquet ({df.height} rows), compare.md and split.parquet to {req.out}",
                      highlight=False)
    return df


def run_depth(req: CompareRequest, paths: list, console) -> pl.DataFrame:
    """run_compare's depth view: every pool planned (and refused) before the first engine call, as there."""
    from .outputs import MARK as OUTPUT_MARK
    from .outputs import atomic_dir
    from .progress import progress

    plans = [plan_depth(p, req) for p in paths]
    for plan in plans:
        kinds = {k: sum(e.kind == k for e in plan.entries) for k in ("width", "depth")}
        split = ("tuned and reported on every query: every number is in-sample †" if plan.same else
                 f"tuned on {len(plan.t_idx)} queries, reported on the {len(plan.r_idx)} held out")
        console.print(f"[bold]{plan.pool.name}[/]: {kinds['width']} width-only and {kinds['depth']} width x depth "
                      f"entries ({len(plan.configs())} configurations) x {len(plan.budgets)} token budgets (median "
                      f"response {plan.median:,.0f} tokens) x {req.seeds} seeds; {split}", highlight=False)
    t0 = time.perf_counter()
    with progress(sum(p.work(req.seeds) for p in plans), "comparing", "query-runs", console=console) as bar:
        df = pl.concat([compare_depth(plan, req, progress=bar.advance) for plan in plans])
    elapsed = time.perf_counter() - t0
    for table in render_depth(df):
        console.print(table)
    for name in df["pool"].unique(maintain_order=True):
        console.print(render_depth_entries(df.filter(pl.col("pool") == name)))
    mark = "† tuned on the data it reports (--holdout 0). " if df["tuned_on_reported"].any() else ""
    console.print(f"{mark}Standard errors: {DEPTH_SE_METHOD}. {elapsed:.1f} s.", style="dim", highlight=False)
    if req.out is not None:
        with atomic_dir(req.out, "compare") as tmp:
            df.write_parquet(tmp / "depth.parquet", metadata={OUTPUT_MARK: "compare"})
            pl.concat([split_frame(p) for p in plans]).write_parquet(tmp / "split.parquet",
                                                                     metadata={OUTPUT_MARK: "compare"})
            (tmp / "compare.md").write_text(depth_markdown(df, command_line(req)))
        console.print(f"wrote depth.parquet ({df.height} rows), compare.md and split.parquet to {req.out}",
                      highlight=False)
    return df


# ---------------------------------------------------------------------------------------------------- tables

def _mse(m, se) -> str:
    from .summary import fmt_mean_se

    return fmt_mean_se(m, se)


def _signed(m, se) -> str:
    if m is None or not np.isfinite(m):
        return "—"
    return f"{m:+.4f}±{se:.4f}" if np.isfinite(se) else f"{m:+.4f}"  # differences are small: one digit more


def _share(m, se) -> str:
    if m is None or not np.isfinite(m):
        return "—"
    return f"{m:.1%}±{se:.1%}" if np.isfinite(se) else f"{m:.1%}"


def _dagger(r) -> str:
    return " †" if r["tuned_on_reported"] else ""


def summary_rows(df: pl.DataFrame) -> list[list[str]]:
    """One row per (pool, budget) and new policy: the comparison, as text cells (the rich and markdown tables)."""
    rows = []
    for (pool, b), g in df.group_by("pool", "budget", maintain_order=True):
        best = g.filter(pl.col("is_best_published")).row(0, named=True)
        hind = g.filter(pl.col("role") == "hindsight")
        orc = hind.row(0, named=True) if hind.height else None
        for r in g.filter(pl.col("role") == "new").iter_rows(named=True):
            new = f"{r['policy']} [{r['side']}] {_mse(r['mean'], r['se'])}{_dagger(r)}"
            diff, verd, share = _signed(r["vs_best"], r["vs_best_se"]), r["verdict"], _share(r["gap_share"],
                                                                                             r["gap_share_se"])
            rows.append([pool, f"{b:g}", f"{best['policy']} {_mse(best['mean'], best['se'])}{_dagger(best)}", new,
                         diff, verd, (_mse(orc["mean"], orc["se"]) + _dagger(orc)) if orc else "—", share])
    return rows


SUMMARY_HEAD = ("pool", "budget", "best published (tuned)", "new policy [side column]", "new - best", "verdict",
                "oracle", "gap closed")


def render_table(df: pl.DataFrame):
    return sectioned_table(f"{METRIC} on the held-out queries: mean ± standard error over seeds; best published = "
                           "best on the tuning part; new - best paired over seeds; gap closed = (new - best) / "
                           "(oracle - best)", SUMMARY_HEAD, summary_rows(df),
                           right=("budget", "new - best", "gap closed"))


def sectioned_table(title: str, heads, rows, key=lambda row: row[0], right=()):
    """A rich table of string rows (markup escaped), a section rule wherever key(row) changes (compare's and the
    leaderboard's tables); the columns named in `right` right-justified; a word longer than its column folds onto
    the next line instead of ending in an ellipsis (a policy or parameter name at 80 columns)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, title_style="dim")
    for h in heads:
        t.add_column(h, justify="right" if h in right else "left", overflow="fold")
    last = None
    for row in rows:
        if last is not None and key(row) != last:
            t.add_section()
        last = key(row)
        t.add_row(*map(escape, row))
    return t


def policy_rows(df: pl.DataFrame) -> tuple[list, list[list[str]]]:
    """Per pool: one row per policy, one cell per budget (held-out coverage, the chosen configuration)."""
    budgets = sorted(df["budget"].unique().to_list())
    rows = []
    for p in df["policy"].unique(maintain_order=True):
        cells = {r["budget"]: r for r in df.filter(pl.col("policy") == p).iter_rows(named=True)}
        first = next(iter(cells.values()))
        rows.append([f"{p} ({first['role']})"] + [
            f"{_mse(cells[b]['mean'], cells[b]['se'])}{_dagger(cells[b])}"
            f"{' *' if cells[b]['is_best_published'] else ''}"
            f" {cells[b]['config'].removeprefix(p) or '(default)'}" + (f" [{cells[b]['side']}]" if cells[b]['side']
                                                                      else "")
            for b in budgets])
    return budgets, rows


def render_policies(df: pl.DataFrame):
    from rich.markup import escape
    from rich.table import Table

    budgets, rows = policy_rows(df)
    t = Table(title=f"{df['pool'][0]}: every policy, held-out {METRIC} of the configuration chosen on the tuning part "
                    "(* = best published, chosen there)", title_style="dim")
    t.add_column("policy")
    for b in budgets:
        t.add_column(f"budget {b:g}", justify="right")
    for r in rows:
        t.add_row(*map(escape, r))
    return t


def markdown(df: pl.DataFrame, command: str, skipped: dict | None = None) -> str:
    """skipped: pool -> {published policy it could not run: why}, listed under the pool's table."""
    def table(head, rows):
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(lines)

    first = df.row(0, named=True)
    parts = [f"# ttc compare\n\n```bash\n{command}\n```\n",
             f"Metric: {METRIC} (ground truth) on the held-out queries (holdout {first['holdout']:g}, split seed "
             f"{first['split_seed']}), {first['n_seeds']} seeds from {first['seed_start']}. Each policy's parameters "
             f"were chosen on the tuning part (replay/tune.py DEFAULT_GRID over the fields it uses); the best "
             f"published policy too. Standard errors: {SE_METHOD}. Gap closed = (new - best) / (oracle - best), "
             f"delta-method standard error."
             + (" † tuned on the data it reports." if df["tuned_on_reported"].any() else "") + "\n",
             table(SUMMARY_HEAD, summary_rows(df))]
    for name in df["pool"].unique(maintain_order=True):
        sub = df.filter(pl.col("pool") == name)
        budgets, rows = policy_rows(sub)
        r0 = sub.row(0, named=True)
        parts.append(f"\n## {name}\n\n{r0['n_tune']} queries tune, {r0['n_report']} report (digest "
                     f"{r0['report_digest']}). Held-out {METRIC} of each policy's chosen configuration "
                     f"(* = best published):\n")
        parts.append(table(["policy"] + [f"budget {b:g}" for b in budgets], rows))
        left = (skipped or {}).get(name, {})
        if left:
            parts.append("\nNot run on this pool:\n\n" + "\n".join(f"- `{p}`: {why}" for p, why in left.items()))
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------ the depth view (--depth)
# Issue 30: on a pool with probes (each trace's answer so far, `ttc import autotts`), width x depth policies against
# width-only ones at equal tokens. The contestants are the leaderboard's sc track in tokens (leaderboard.entries: the
# width entries, uniform and each score-free policy with each answer-agreement rule, and the depth ones, each of those
# under the answer-stability rule, parallel-probe and cmc), so the two commands compare the same things; the budgets
# are the leaderboard's too (--token-multiples of the pool's median response length). As in the leaderboard, only each
# entry's chosen configuration is replayed on the held-out part (the full grid there, this command's habit in its
# coverage view, doubled the time of a view of some 300 configurations, for numbers no table shows); the choice, the
# rows and the differences are this module's own code, so a depth row here and the leaderboard's are two paths to one
# number (tests/test_compare_depth.py checks they agree).

DEPTH_METRIC = "accuracy"  # no verifier: answer agreement stops a query and its majority answer is given
DEPTH_SE_METHOD = ("SE over seeds: the held-out queries fixed, the draw order's luck on them (differences paired over "
                   "seeds, common random numbers); SE over queries: the standard deviation of the per-query "
                   "differences (each averaged over seeds) / sqrt(held-out queries), the queries taken as a sample "
                   "of their population (approximate: a budget is shared across queries, so their outcomes are not "
                   "independent)")


@dataclass
class DepthPlan:
    """One probed pool, read and checked: its parts, its token budgets and the leaderboard's sc entries in tokens."""

    path: Path
    pool: object
    t_idx: np.ndarray
    r_idx: np.ndarray
    median: float  # the pool's median response length: the unit of --token-multiples
    budgets: list  # tokens per query
    entries: list  # leaderboard.Entry, width and depth kinds (no oracle)
    side: str | None  # uab's confidence column (the leaderboard's choice: --side, else the first it looks for)

    @property
    def same(self) -> bool:
        return len(self.t_idx) == len(self.r_idx) == self.pool.n_queries

    def parts(self):
        from .tune import subset

        return ((self.pool, self.pool) if self.same else
                (subset(self.pool, self.t_idx, "tune"), subset(self.pool, self.r_idx, "report")))

    def configs(self) -> list:
        return list({c.label(): c for e in self.entries for c in e.configs}.values())

    def work(self, seeds: int) -> int:
        """Query-runs (PoolPlan.work): every configuration at every budget and seed on the tuning part, at most one
        per entry on the held-out part (entries that choose the same configuration share its run)."""
        held = 0 if self.same else len(self.entries) * len(self.r_idx)
        return (len(self.configs()) * len(self.t_idx) + held) * len(self.budgets) * seeds


def plan_depth(path: Path, req: CompareRequest) -> DepthPlan:
    from .leaderboard import CONFIDENCE_COLUMNS, entries, median_tokens
    from .pool import load_pool, sample_columns
    from .run import check_budget_totals
    from .tune import split_queries

    names = sample_columns(path)
    if "correct" not in names:
        raise PoolError(f"ttc compare needs ground truth (a 'correct' column) to score accuracy, and {path} has none")
    if "probe_answer" not in names:
        raise PoolError(f"ttc compare --depth needs a pool with probes (each trace's answer so far, as `ttc import "
                        f"autotts` writes), and {path} has none: its depth rows cannot be replayed")
    side = side_columns(path, req.side)[0] if req.side is not None else next(
        (c for c in CONFIDENCE_COLUMNS if c in names), None)
    pool = load_pool(path, probes=True, side=side)  # (the leaderboard's side: --side, else the first it looks for)
    if not pool.has_gt:
        raise PoolError(f"ttc compare needs ground truth, and {path}'s 'correct' column is entirely null")
    median = median_tokens(path, pool)
    if median is None:
        raise PoolError(f"ttc compare --depth compares at token budgets, and {path} has no token counts (n_tokens)")
    t_idx, r_idx = split_queries(pool.query_ids, req.holdout, req.split_seed)
    budgets = [float(m) * median for m in req.token_multiples]
    for n in {len(t_idx), len(r_idx)}:
        check_budget_totals(budgets, n)
    es = [e for e in entries(pool, "sc", "tokens") if e.role != "oracle"]
    return DepthPlan(path, pool, t_idx, r_idx, median, budgets, es, side)


def _kind_best(es: list, tune_key) -> dict:
    """kind -> the entry of best tuning-part mean (ties: the first in entry order), as the leaderboard chooses."""
    out = {}
    for kind in ("width", "depth"):
        cand = [e for e in es if e.kind == kind]
        if cand:
            out[kind] = max(cand, key=lambda e: (tune_key(e), -cand.index(e)))
    return out


def query_se(part, cfg_a, cfg_b, budget: float, seeds, means: bool = False):
    """The SE over queries of a - b's held-out accuracy (DEPTH_SE_METHOD): per query, each configuration's chance of
    a right answer over the seeds, their difference's standard deviation over queries / sqrt(queries). With means,
    (se, a's accuracy, b's accuracy) from the same replay (with_query_se checks its rows against them)."""
    from .engine import replay

    pq = replay(part, [cfg_a, cfg_b], [budget], seeds, select="sc", per_query=True)[1]
    per = (pq.group_by("config", "query_id").agg(pl.col("selected_correct").cast(pl.Float64).mean().alias("p"))
           .pivot(on="config", index="query_id", values="p"))
    a, b = per[cfg_a.label()].to_numpy(), per[cfg_b.label()].to_numpy()
    se = float((a - b).std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else float("nan")
    return (se, float(a.mean()), float(b.mean())) if means else se


def with_query_se(summary: pl.DataFrame, paths: dict, seeds, holdout: float, split_seed: int) -> pl.DataFrame:
    """Rows of the leaderboard's depth_vs_width (pool, budget, the two best entries and configurations) with
    diff_se_queries and verdict_queries added: depth - width's SE over the held-out queries (query_se), from replays
    of the two chosen configurations on each pool's held-out part (paths: pool name -> its directory; the split and
    seeds the leaderboard ran with). So a leaderboard run made without it gets the SE over queries after the fact,
    at the cost of two configurations per row, not of the tuning grid."""
    from .leaderboard import CONFIDENCE_COLUMNS, entries
    from .pool import load_pool, sample_columns
    from .tune import split_queries, subset

    out = []
    for name in summary["pool"].unique(maintain_order=True):
        path = Path(paths[name])
        names = sample_columns(path)
        pool = load_pool(path, probes=True, side=next((c for c in CONFIDENCE_COLUMNS if c in names), None))
        _, r_idx = split_queries(pool.query_ids, holdout, split_seed)
        rp = pool if len(r_idx) == pool.n_queries else subset(pool, r_idx, "report")
        grid = {(e.label, c.label()): c for e in entries(pool, "sc", "tokens") for c in e.configs}
        for r in summary.filter(pl.col("pool") == name).iter_rows(named=True):
            key_d, key_w = (r["depth_policy"], r["depth_config"]), (r["width_policy"], r["width_config"])
            if key_d not in grid or key_w not in grid:
                raise PoolError(f"{name}: {key_d[1] if key_d not in grid else key_w[1]} is no configuration of this "
                                "build's depth entries: the rows come from another version")
            q, m_d, m_w = query_se(rp, grid[key_d], grid[key_w], r["budget"], seeds, means=True)
            # (the replays must give the rows' own numbers: else the rows are of another pool, split, seeds or build)
            if not (abs(m_d - r["depth_mean"]) < 1e-9 and abs(m_w - r["width_mean"]) < 1e-9):
                raise PoolError(f"{name} at budget {r['budget']:g}: the held-out replays give {m_d:.6f} and {m_w:.6f}, "
                                f"the rows {r['depth_mean']:.6f} and {r['width_mean']:.6f}: the rows are not of this "
                                "pool, split, seeds and build")
            out.append({**r, "diff_se_queries": q, "verdict_queries": verdict(r["diff"], q)})
    return pl.DataFrame(out, schema={**summary.schema, "diff_se_queries": pl.Float64, "verdict_queries": pl.String})


def compare_depth(plan: DepthPlan, req: CompareRequest, progress=None) -> pl.DataFrame:
    """The depth view's rows of one pool: one per (token budget, entry), the best of each kind flagged, each depth
    entry's paired difference from the best width-only one, and for the best depth entry that difference's SE over
    queries too."""
    from .engine import replay
    from .leaderboard import _tune_means, choose
    from .tune import split_digest

    seeds = range(req.seed_start, req.seed_start + req.seeds)
    tp, rp = plan.parts()
    cfgs = plan.configs()

    def tick(part):  # progress in query-runs (DepthPlan.work)
        return None if progress is None else (lambda k: progress(k * part.n_queries))

    df_t = replay(tp, cfgs, plan.budgets, seeds, select="sc", progress=tick(tp))[0]
    means = _tune_means(df_t, DEPTH_METRIC)
    rows = []
    for lvl, b in zip(req.token_multiples, plan.budgets, strict=True):
        chosen = {e.label: choose(e, means, b) for e in plan.entries}
        best = _kind_best(plan.entries, lambda e, chosen=chosen: chosen[e.label][1])
        df_r = df_t.filter(pl.col("budget") == b) if plan.same else replay(
            rp, list({c.label(): c for c, _ in chosen.values()}.values()), [b], seeds, select="sc",
            progress=tick(rp))[0]
        held = {e.label: df_r.filter((pl.col("config") == chosen[e.label][0].label()) & (pl.col("budget") == b))
                .sort("seed") for e in plan.entries}
        x_w = held[best["width"].label][DEPTH_METRIC].to_numpy()
        for e in plan.entries:
            d = held[e.label]
            x = d[DEPTH_METRIC].to_numpy()
            diff = paired(x, x_w) if e.kind == "depth" else (float("nan"), float("nan"))
            q_se = (query_se(rp, chosen[e.label][0], chosen[best["width"].label][0], b, seeds)
                    if e is best.get("depth") else float("nan"))
            rows.append({
                "pool": plan.pool.name, "pool_path": str(plan.path), "level": float(lvl), "budget": float(b),
                "entry": e.label, "base_policy": e.policy, "kind": e.kind, "config": chosen[e.label][0].label(),
                "tune_mean": float(chosen[e.label][1]), "mean": float(x.mean()),
                "se": float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan"),
                "tokens_per_query": float(d["tokens_used"].mean()) / rp.n_queries,
                "is_best_width": e is best["width"], "is_best_depth": e is best.get("depth"),
                "vs_best_width": diff[0], "vs_best_width_se": diff[1],
                "verdict": verdict(*diff) if e.kind == "depth" else None,
                "vs_best_width_se_queries": q_se,
                "verdict_queries": verdict(diff[0], q_se) if np.isfinite(q_se) else None,
                "tuned_on_reported": plan.same})
    return pl.DataFrame(rows, schema=DEPTH_SCHEMA).with_columns(
        pl.lit(plan.median, dtype=pl.Float64).alias("median_tokens"),
        pl.lit(float(req.holdout), dtype=pl.Float64).alias("holdout"),
        pl.lit(req.split_seed, dtype=pl.Int64).alias("split_seed"),
        pl.lit(len(plan.t_idx), dtype=pl.Int64).alias("n_tune"),
        pl.lit(len(plan.r_idx), dtype=pl.Int64).alias("n_report"),
        pl.lit(split_digest([plan.pool.query_ids[i] for i in plan.r_idx])).alias("report_digest"),
        pl.lit(req.seed_start, dtype=pl.Int64).alias("seed_start"), pl.lit(req.seeds, dtype=pl.Int64).alias("n_seeds"),
        pl.lit(DEPTH_METRIC).alias("metric"), pl.lit(DEPTH_SE_METHOD).alias("se_method"))


DEPTH_SCHEMA = {"pool": pl.String, "pool_path": pl.String, "level": pl.Float64, "budget": pl.Float64,
                "entry": pl.String, "base_policy": pl.String, "kind": pl.String, "config": pl.String,
                "tune_mean": pl.Float64, "mean": pl.Float64, "se": pl.Float64, "tokens_per_query": pl.Float64,
                "is_best_width": pl.Boolean, "is_best_depth": pl.Boolean, "vs_best_width": pl.Float64,
                "vs_best_width_se": pl.Float64, "verdict": pl.String, "vs_best_width_se_queries": pl.Float64,
                "verdict_queries": pl.String, "tuned_on_reported": pl.Boolean}


def depth_summary(df: pl.DataFrame) -> pl.DataFrame:
    """Per pool and token budget: the best width-only entry against the best width x depth one, in the columns of
    the leaderboard's depth_vs_width (so the two can be set side by side), with the SE over queries added."""
    keys = ["pool", "level", "budget"]
    cols = ["entry", "config", "mean", "se", "tokens_per_query"]
    w = df.filter(pl.col("is_best_width")).select(*keys, *[pl.col(c).alias(f"width_{c}") for c in cols])
    d = df.filter(pl.col("is_best_depth")).select(
        *keys, *[pl.col(c).alias(f"depth_{c}") for c in cols], pl.col("vs_best_width").alias("diff"),
        pl.col("vs_best_width_se").alias("diff_se"), "verdict", pl.col("vs_best_width_se_queries").alias(
            "diff_se_queries"), "verdict_queries", "tuned_on_reported")
    return (w.join(d, on=keys, how="inner", maintain_order="left")
            .rename({"width_entry": "width_policy", "depth_entry": "depth_policy"}))


DEPTH_HEAD = ("pool", "budget", "best width-only", "accuracy", "tokens / query", "best width x depth", "accuracy",
              "tokens / query", "depth - width ± SE over seeds", "± SE over queries")


def depth_rows(summary: pl.DataFrame) -> list[list[str]]:
    rows = []
    for r in summary.iter_rows(named=True):
        mark = " †" if r["tuned_on_reported"] else ""
        rows.append([r["pool"], f"{r['level']:g}x median ({r['budget']:,.0f})", r["width_policy"] + mark,
                     _mse(r["width_mean"], r["width_se"]), f"{r['width_tokens_per_query']:,.0f}",
                     r["depth_policy"] + mark, _mse(r["depth_mean"], r["depth_se"]),
                     f"{r['depth_tokens_per_query']:,.0f}", f"{_signed(r['diff'], r['diff_se'])} ({r['verdict']})",
                     f"±{r['diff_se_queries']:.4f} ({r['verdict_queries']})"
                     if r["diff_se_queries"] is not None and np.isfinite(r["diff_se_queries"]) else "—"])
    return rows


def _in_tokens(config: str, policy: str) -> str:
    """A configuration's label without its policy and its unit (every entry of the view counts tokens)."""
    inner = config.removeprefix(policy).strip().removeprefix("(").removesuffix(")")
    kept = [kv for kv in inner.split(", ") if kv and kv != "tokens"]
    return f"({', '.join(kept)})" if kept else "(default)"


def depth_entry_rows(df: pl.DataFrame) -> tuple[list, list[list[str]]]:
    """Per pool: one row per entry (width ones first), one cell per token budget: held-out accuracy, tokens spent
    per query, the chosen configuration; * marks each kind's best (chosen on the tuning part)."""
    levels = sorted(df["level"].unique().to_list())
    rows = []
    for kind in ("width", "depth"):
        sub = df.filter(pl.col("kind") == kind)
        for name in sub["entry"].unique(maintain_order=True):
            cells = {r["level"]: r for r in sub.filter(pl.col("entry") == name).iter_rows(named=True)}
            rows.append([f"{name} ({kind})"] + [
                f"{_mse(c['mean'], c['se'])}{' *' if c['is_best_width'] or c['is_best_depth'] else ''} "
                f"{c['tokens_per_query']:,.0f} tok {_in_tokens(c['config'], c['base_policy'])}"
                for c in (cells[v] for v in levels)])
    return levels, rows


def render_depth(df: pl.DataFrame) -> list:
    """One table per pool (its name in the title) of four columns whose cells wrap at spaces, long names folding:
    the ten columns of the markdown (DEPTH_HEAD) cut cells at 80 and 120 columns."""
    from rich.markup import escape
    from rich.table import Table

    summary, tables = depth_summary(df), []
    for name in summary["pool"].unique(maintain_order=True):
        t = Table(title=f"{name}: depth against width at equal token budgets: held-out {DEPTH_METRIC} (no verifier: "
                        "answer agreement, majority answer), mean ± SE over seeds, tokens per query; each kind's best "
                        "chosen on the tuning part", title_style="dim")
        for h in ("budget", "best width-only", "best width x depth",
                  "depth - width ± SE over seeds; ± SE over queries"):
            t.add_column(h, overflow="fold")
        for r in depth_rows(summary.filter(pl.col("pool") == name)):
            t.add_row(*map(escape, (r[1], f"{r[2]} {r[3]} {r[4]} tok", f"{r[5]} {r[6]} {r[7]} tok",
                                    f"{r[8]}; {r[9]}")))
        tables.append(t)
    return tables


def render_depth_entries(df: pl.DataFrame):
    levels, rows = depth_entry_rows(df)
    return sectioned_table(f"{df['pool'][0]}: every entry, held-out {DEPTH_METRIC} of the configuration chosen on the "
                           "tuning part, tokens spent per query (* = best of its kind)",
                           ["entry"] + [f"{v:g}x median" for v in levels], rows, key=lambda row: row[0].endswith(
                               "(depth)"))


def depth_markdown(df: pl.DataFrame, command: str) -> str:
    def table(head, rows):
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows])

    first = df.row(0, named=True)
    parts = [f"# ttc compare --depth\n\n```bash\n{command}\n```\n",
             f"Metric: {DEPTH_METRIC} (no verifier: answer agreement stops a query, its majority answer is given) on "
             f"the held-out queries (holdout {first['holdout']:g}, split seed {first['split_seed']}), "
             f"{first['n_seeds']} seeds from {first['seed_start']}, at token budgets in multiples of each pool's "
             "median response length. The entries are the leaderboard's sc track in tokens; each entry's parameters "
             "were chosen on the tuning part, and each kind's best entry too. Standard errors: "
             f"{DEPTH_SE_METHOD}. A difference is called only beyond 2 SE."
             + (" † tuned on the data it reports." if df["tuned_on_reported"].any() else "") + "\n",
             table(DEPTH_HEAD, depth_rows(depth_summary(df)))]
    for name in df["pool"].unique(maintain_order=True):
        sub = df.filter(pl.col("pool") == name)
        r0 = sub.row(0, named=True)
        levels, rows = depth_entry_rows(sub)
        parts += [f"\n## {name}\n\n{r0['n_tune']} queries tune, {r0['n_report']} report (digest "
                  f"{r0['report_digest']}); median response {r0['median_tokens']:,.0f} tokens. Every entry "
                  "(* = best of its kind):\n",
                  table(["entry"] + [f"{v:g}x median" for v in levels], rows)]
    return "\n".join(parts) + "\n"
