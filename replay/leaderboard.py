"""`ttc leaderboard POOL_OR_DIR...`: every policy and rule combination that makes sense for each pool, tuned on a
seeded half of its queries and reported on the other half, against uniform and the hindsight oracle; then the
same policies across pools.

Why a command of its own and not `ttc compare` grown: compare asks one question (does this project's own policy beat
the best published one on this pool), with the full tuning grid replayed on both halves. A leaderboard asks "for my
kind of pool, which policy should I use and what does it save", over dozens of pools at once, so it (1) covers the
self-consistency setting too (no verifier: answer agreement stops a query, the majority answer is given), (2) adds
token budgets, and (3) replays on the held-out half only each policy's chosen configuration, not its whole grid:
half the work, which the time bound over 40 pools needs. The split, the sub-pools and the choice rule are tune's
(tune.split_queries, tune.subset: best mean on the tuning half, ties to the first in grid order), so a number here is
the "chosen / report" row of `ttc tune` with the same grid, split and seeds.

Tracks (one leaderboard each; a pool enters the tracks it can support):
- coverage: a verifier is available (the ground truth): a query stops at its first correct response (threshold rule
  on `--score gt`), the metric is coverage. Every live policy the pool supports, over LEADERBOARD_GRID; the ceiling is
  the hindsight oracle (each query up to its first correct response, cheapest first).
- sc: no verifier: a query stops when its answers agree (each answer-agreement rule of the registry), the answer
  given is the majority one (`--select sc`), the metric is accuracy. The policies that read no score (uniform,
  elimination, streaming, entropy: the others would read the ground truth as their score) with each rule, e.g.
  `entropy+sc-beta` (the seed paper's setting for reasoning models). The ceiling is the oracle's coverage at the same
  budget: no selection is right on a query where no drawn response is.

Depth (issue 30): on a pool with probes (`ttc import autotts`), the sc track in tokens also runs the width x depth
entries (role "depth"): parallel-probe and cmc, which stop traces part-way on their own, and each sc entry with its
traces under the answer-stability rule (`<entry>+stability`, depth_m in DEPTH_M), tuned alike. Per pool and token
budget, `depth_vs_width` sets the best width-only entry (uniform and the published ones, chosen on the tuning half)
against the best width x depth entry (chosen alike): both held-out, at the same token budget, and their paired
difference with its SE. The coverage track has no depth entries: a verifier that stops a query at its first correct
response leaves nothing for a stopped trace's early answer to add.

Side signal: each pool's side column is the first of `--side` (default CONFIDENCE_COLUMNS) it has; side-eb and uab
read it (uab in both tracks: coverage, and sc with its source's majority vote). A pool with none runs uab nowhere,
and the policies it cannot run are listed with the reason under its tables (leaderboard.md) and in the console.

Units: samples (budgets `--budgets` per query, default 1, 2, 4, 8, 16: reasoning pools saturate early) and tokens
(`--token-multiples` of the pool's median response length per query), on pools with token counts.

Per pool, track, unit and budget, each policy's row: held-out coverage and accuracy (mean ± SE over seeds, the
held-out queries fixed), samples and tokens spent per query, efficiency gain (the budget uniform needs to match the
policy's held-out metric / what the policy spent: uniform's exact coverage@k curve for coverage in samples, uniform
replayed at every integer budget up to the largest otherwise; censored when the policy beats uniform's last point),
the paired difference from uniform and from the best published adaptive policy (chosen on the tuning half) with its
SE and a verdict beyond 2 SE, the share of the uniform-to-oracle gap closed (delta-method SE, compare.gap_share) and
the rank by held-out metric among the live policies (1 = best, ties averaged). Across pools: each policy's mean rank,
the pools where it beats uniform (and the best published) beyond 2 SE and its median efficiency gain.

Outputs (`--out DIR`, one directory written atomically): leaderboard.parquet (the rows above), aggregate.parquet,
leaderboard.md (the tables, with the command that regenerates them) and figures/ (per track and unit a policy x pool
heatmap of efficiency gains and a grid of per-pool curves, PDF and PNG).
"""
from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .errors import InputError
from .pool import PoolError

TRACKS = ("coverage", "sc")
UNITS = ("samples", "tokens")
SC_POLICIES = ("elimination", "streaming", "entropy")  # the live policies that read no score (answers only)
# the live policies that read no score and take no rule, each run alone in the sc track with the majority vote (uab:
# its source votes over all its generations)
SC_ALONE = ("uab",)
# uab's confidence (exp(mean token log-prob)) by pool format, the first a pool has being its side column (as probes are
# read where a pool has them): the importers' score_conf (harvest/importers.py) and the column harvest and ttc run
# record with --confidence mean-logprob (harvest/registry.py's mean-logprob signal). `--side` replaces the list.
CONFIDENCE_COLUMNS = ("score_conf", "score_mean_logprob")
EXCLUDED = ("gap-literal",)  # the paper's printed formula, kept in the registry for comparison only
# The leaderboard's search space: tune.DEFAULT_GRID narrowed to each parameter's main values (the leaderboard runs
# every policy on dozens of pools; the full grid's K and five caps multiply its cost tenfold for little change).
LEADERBOARD_GRID = {
    "K": (1,),
    "max_samples": (0, 16),
    "lam": (0.5, 1.0, 3.0),
    "eps": (0.01, 0.1),
    "rho": (0.25, 0.5, 0.75),
    "warmup": (1, 3),
    "percentile": (0.05, 0.2),
    "prior_strength": (2.0, 8.0),
    "judge": (8, 32),
    "bins": (3,),
    "horizon": (0, 1),
    "uab_tau": (0.2, 0.1, 0.5),  # uab's temperature: the source's 0.2 and either side, as tune's grid
}
# An answer-agreement rule's own window where the rule reads K: ESC stops on a window of K identical answers, so K = 1
# stops every query at its first draw (ESC's paper uses windows of 4 to 8)
RULE_GRID = {"esc": {"K": (4, 8)}}
# depth's entries and grids (module docstring): parallel-probe's chain counts (AutoTTS's evaluator runs 64; fewer suit
# smaller budgets), cmc's one knob, the stability rule's window
DEPTH_GRID = {"parallel-probe": {"chains": (64, 8, 16, 32)}, "cmc": {"cmc_beta": (0.5, 0.0, 0.25, 0.75, 1.0)}}
DEPTH_M = (3, 6)
SE_METHOD = ("over seeds on the held-out queries (the queries fixed); differences paired over seeds (common random "
             "numbers: a seed gives every policy the same permutation of each query's responses)")


@dataclass
class LeaderboardRequest:
    pools: list = field(default_factory=list)
    embedded: bool = False
    budgets: list = field(default_factory=lambda: [1, 2, 4, 8, 16])
    token_multiples: list = field(default_factory=lambda: [1, 2, 4, 8, 16])
    tracks: list = field(default_factory=lambda: list(TRACKS))
    units: list | None = None  # None: samples everywhere, tokens where the pool has token counts
    seeds: int = 100
    seed_start: int = 0
    holdout: float = 0.5
    split_seed: int = 0
    out: Path | None = None
    figures: bool = True
    threads: int | None = None
    force: bool = False
    sides: list = field(default_factory=lambda: list(CONFIDENCE_COLUMNS))  # side columns, the first a pool has


# ------------------------------------------------------------------------------------------------------ the pools

def is_pool_dir(p: Path) -> bool:
    return p.is_dir() and ((p / "samples.parquet").is_file() or (p / "samples").is_dir())


def find_pools(args, embedded: bool = False) -> list[Path]:
    """The pools named: a pool directory itself, or a directory of pools (its subdirectories that are pools, one or
    two levels down: pools/ holding boinf/ and autotts/ counts); the embedded ones with `embedded`."""
    from .data import embedded_pools

    found = []
    for a in args:
        p = Path(a)
        if not p.exists():
            raise InputError(f"{p} does not exist")
        if is_pool_dir(p):
            found.append(p)
            continue
        if not p.is_dir():
            raise InputError(f"{p} is neither a pool directory nor a directory of pools")
        inner = sorted(d for d in p.iterdir() if is_pool_dir(d))
        if not inner:
            inner = sorted(d for sub in sorted(p.iterdir()) if sub.is_dir() for d in sub.iterdir() if is_pool_dir(d))
        if not inner:
            raise InputError(f"{p} holds no pools (a pool is a directory with samples.parquet)")
        found += inner
    if embedded:
        found += embedded_pools()
    if not found:
        raise InputError("no pools given: name pool directories or directories of pools (or --embedded)")
    from .compare import distinct_pools

    return distinct_pools(found)


def validate(req: LeaderboardRequest) -> list[Path]:
    from .engine import check_budgets
    from .outputs import check_output
    from .run import check_seeds

    check_budgets(req.budgets)
    check_budgets(req.token_multiples, "--token-multiples")
    if req.seeds < 2:
        raise InputError(f"--seeds must be >= 2 (standard errors are over seeds), got {req.seeds}")
    check_seeds(req.seed_start, req.seeds)
    if not 0.0 <= req.holdout < 1.0:
        raise InputError(f"--holdout is the share of queries held out for reporting, in [0, 1) (0: tune and report "
                         f"on every query, flagged), got {req.holdout}")
    for t in req.tracks:
        if t not in TRACKS:
            raise InputError(f"--tracks: unknown track {t!r}; choose from {', '.join(TRACKS)}")
    if not req.tracks:
        raise InputError("--tracks: no track given")
    if not req.sides:
        raise InputError("--side: no column given")
    for u in req.units or []:
        if u not in UNITS:
            raise InputError(f"--units: unknown unit {u!r}; choose from {', '.join(UNITS)}")
    paths = find_pools(req.pools, req.embedded)
    if req.out is not None:
        check_output(req.out, flag="--out", command="leaderboard", reads=paths, force=req.force, kind="dir")
    return paths


@dataclass
class Entry:
    """One leaderboard contestant on one pool and track: its label (policy, or policy+rule), role ("uniform",
    "published", "new", "oracle") and the configurations of its grid (the first is its default)."""

    label: str
    policy: str
    role: str
    configs: list
    select: str

    @property
    def kind(self) -> str:
        """width (whole traces: uniform, published, new), depth (traces stopped part-way) or oracle."""
        return self.role if self.role in ("depth", "oracle") else "width"


def entries(pool, track: str, unit: str) -> list[Entry]:
    """The combinations that make sense for `pool` on `track` in `unit` (module docstring)."""
    from .engine import check_configs
    from .policies import ELIMINATION_RULES, REGISTRY, RunConfig, supported
    from .tune import grid_configs

    size = int(pool.sizes.max())

    def grid(base):
        from dataclasses import replace as _r

        fields = {f: v for f, v in {**LEADERBOARD_GRID, **RULE_GRID.get(base.eliminate, {})}.items()
                  if f in base.used_params() or f in RULE_GRID.get(base.eliminate, {})}
        if "max_samples" in fields:
            fields["max_samples"] = tuple(v for v in fields["max_samples"] if v == 0 or v < size)
        cfgs = grid_configs(base, fields) if fields else [base]
        default = _r(base, **{f: v[0] for f, v in RULE_GRID.get(base.eliminate, {}).items()})
        return [default] + [c for c in cfgs if c.label() != default.label()]

    out = []
    if track == "coverage":
        for p in supported(pool):
            spec = REGISTRY[p]
            if p in EXCLUDED or spec.slow or not spec.live and p != "oracle":
                continue
            role = ("uniform" if p == "uniform" else "oracle" if not spec.live else
                    "published" if spec.published else "new")
            cfgs = grid(RunConfig(p, unit=unit))
            try:
                check_configs(pool, cfgs, "bon")
            except PoolError:
                continue
            out.append(Entry(p, p, role, cfgs, "bon"))
        return out
    if not pool.has_answers:
        return []
    out.append(Entry("uniform", "uniform", "uniform", [RunConfig("uniform", unit=unit)], "sc"))
    rules = [r for r, spec in ELIMINATION_RULES.items() if "answers" in spec.needs]
    for p in SC_POLICIES:
        for r in rules:
            cfgs = grid(RunConfig(p, unit=unit, eliminate=r))
            try:
                check_configs(pool, cfgs, "sc")
            except PoolError:
                continue
            out.append(Entry(f"{p}+{r}", p, "published", cfgs, "sc"))
    for p in SC_ALONE:
        if p in supported(pool):
            cfgs = grid(RunConfig(p, unit=unit))
            try:
                check_configs(pool, cfgs, "sc")
            except PoolError:
                continue
            out.append(Entry(p, p, "published", cfgs, "sc"))
    if unit == "tokens" and pool.probe_off is not None:
        out += depth_entries(out, unit)
    out.append(Entry("oracle", "oracle", "oracle", [RunConfig("oracle", unit=unit)], "bon"))
    return out


def not_run(pool, tracks) -> dict:
    """The live policies the tracks would run that this pool cannot, each with why (NEEDS's words; uab without a
    side column names the columns looked for): listed under the pool's tables, so a missing row is never a silent
    hole."""
    from .policies import REGISTRY, lacking, supported

    sup = set(supported(pool))
    if "coverage" in tracks:
        cands = [p for p, spec in REGISTRY.items() if spec.live and not spec.slow and p not in EXCLUDED]
    else:
        cands = list(SC_ALONE) if pool.has_answers else []
    return {p: lacking(pool, p) for p in cands if p not in sup}


def depth_entries(width: list, unit: str) -> list[Entry]:
    """The sc track's width x depth entries on a probed pool (module docstring): each width entry's grid under the
    stability rule at every DEPTH_M, then parallel-probe and cmc over DEPTH_GRID (their defaults first)."""
    from dataclasses import replace

    from .policies import RunConfig
    from .tune import grid_configs

    out = []
    for e in width:
        cfgs = [replace(c, depth_rule="stability", depth_m=m) for m in DEPTH_M for c in e.configs]
        out.append(Entry(f"{e.label}+stability", e.policy, "depth", cfgs, "sc"))
    for p, grid in DEPTH_GRID.items():
        out.append(Entry(p, p, "depth", grid_configs(RunConfig(p, unit=unit), grid), "sc"))
    return out


@dataclass
class PoolPlan:
    path: Path
    pool: object
    t_idx: np.ndarray
    r_idx: np.ndarray
    tune: object
    report: object
    median_tokens: float | None
    work: list  # (track, unit, budgets, levels, entries)
    side: str | None = None  # the side column read (the first of --side the pool has)
    skipped: dict = field(default_factory=dict)  # policy -> why this pool cannot run it (not_run)

    @property
    def same(self) -> bool:
        return len(self.t_idx) == len(self.r_idx) == self.pool.n_queries


def plan_pool(path: Path, req: LeaderboardRequest) -> PoolPlan:
    from .pool import load_pool, sample_files
    from .run import check_budget_totals
    from .tune import split_queries, subset

    if "correct" not in pl.read_parquet_schema(sample_files(path)[0]):
        raise PoolError(f"ttc leaderboard needs ground truth (a 'correct' column) to score coverage and accuracy, and "
                        f"{path} has none (grade it first: ttc score, or ttc import ... --gold)")
    # depth's probes: read only where a depth entry can run (the sc track in tokens, on a pool that has them)
    probes = ("sc" in req.tracks and "tokens" in (req.units or UNITS)
              and "probe_answer" in pl.read_parquet_schema(sample_files(path)[0]))
    names = pl.read_parquet_schema(sample_files(path)[0]).names()
    side = next((c for c in req.sides if c in names), None)
    pool = load_pool(path, probes=probes, side=side)
    if not pool.has_gt:
        raise PoolError(f"ttc leaderboard needs ground truth, and {path}'s 'correct' column is entirely null")
    units = req.units or list(UNITS)
    median = median_tokens(path, pool)
    if "tokens" in units and median is None and req.units is not None:
        raise PoolError(f"mixed units: --units tokens asks for token budgets, and {path} has no token counts "
                        "(n_tokens); leave it out or use --units samples")
    t_idx, r_idx = split_queries(pool.query_ids, req.holdout, req.split_seed)
    same = len(t_idx) == len(r_idx) == pool.n_queries
    tp, rp = (pool, pool) if same else (subset(pool, t_idx, "tune"), subset(pool, r_idx, "report"))
    work = []
    for unit in units:
        if unit == "tokens" and median is None:
            continue
        levels = list(req.budgets) if unit == "samples" else list(req.token_multiples)
        budgets = [float(b) if unit == "samples" else float(b) * median for b in levels]
        for n in {len(t_idx), len(r_idx)}:
            check_budget_totals(budgets, n)
        for track in req.tracks:
            es = entries(pool, track, unit)
            if es:
                work.append((track, unit, budgets, levels, es))
    skipped = not_run(pool, req.tracks)
    if side is None:
        skipped = {p: f"{why}: no column {' or '.join(req.sides)}" if "side signal" in why else why
                   for p, why in skipped.items()}
    return PoolPlan(path, pool, t_idx, r_idx, tp, rp, median, work, side, skipped)


def median_tokens(path: Path, pool) -> float | None:
    """The pool's median response length, the unit of its token budgets (None: no token counts, or all zero); a
    pool with some lengths null is refused (a token budget needs every length). compare's depth view reads it too, so
    that its budgets are the leaderboard's."""
    from .pool import sample_files

    if not pool.has_tokens:
        return None
    t = pl.scan_parquet(sample_files(path)).select(pl.col("n_tokens").null_count()).collect().item()
    if t:
        raise PoolError(f"{path}: 'n_tokens' is null for {t} responses: a token budget needs every length")
    median = float(np.median(pool.tok))
    return median if median > 0 else None


def calls(plan: PoolPlan) -> int:
    """Engine calls (each over every seed) the pool takes: per track and unit one on the tuning half, one per budget
    on the held-out half, uniform's dense curve and the oracle."""
    return sum((0 if plan.same else 1) + len(b) + 2 for _, _, b, _, _ in plan.work)


def runs(plan: PoolPlan) -> int:
    """The engine's runs (configuration x budget, each over every seed) the pool takes, which the progress bar
    counts (replay reports runs made): its tuning calls whole, on the held-out half at most one per entry and budget
    (entries that choose the same configuration share it), uniform's dense curve and the oracle. (Counting one per
    engine call, as calls() does, let a pool with depth's ~300 configurations run the bar to 350%.)"""
    total = 0
    for _, _, b, levels, es in plan.work:
        live = [e for e in es if e.role != "oracle"]
        for select in {e.select for e in live}:
            grp = [e for e in live if e.select == select]
            total += len({c.label() for e in grp for c in e.configs}) * len(b)
            total += sum(e.role != "uniform" for e in grp) * len(b)
        total += len(dense_levels(levels)) + len(b)
    return total


# --------------------------------------------------------------------------------------------------- the work

def metric_of(track: str) -> str:
    return "coverage" if track == "coverage" else "accuracy"


def _tune_means(df: pl.DataFrame, metric: str) -> dict:
    s = df.group_by("config", "budget").agg(pl.col(metric).mean().alias("m"))
    return {(r["config"], r["budget"]): r["m"] for r in s.iter_rows(named=True)}


def choose(entry: Entry, means: dict, budget: float):
    """The configuration with the best mean on the tuning half (ties: the first in grid order, the default first)."""
    best, key = entry.configs[0], -math.inf
    for c in entry.configs:
        m = means.get((c.label(), budget), float("nan"))
        m = -math.inf if not np.isfinite(m) else m
        if m > key:
            best, key = c, m
    return best, key


def dense_levels(levels: list) -> list[float]:
    """The budgets (in units of the level: samples, or multiples of the median length) uniform is replayed at for
    its curve: every integer up to the largest level, and the levels themselves."""
    top = int(math.ceil(max(levels)))
    return sorted(set(float(k) for k in range(1, top + 1)) | {float(v) for v in levels})


def gain_from_curve(xs: np.ndarray, ys: np.ndarray, score: float, spend: float) -> tuple[float, bool]:
    """The budget at which uniform's curve (xs increasing, ys its metric; (0, 0) before the first point, linear
    between points, running maximum) reaches `score`, over `spend`; censored (a lower bound) when the score is above
    the curve's last point. exact.efficiency_gain on a curve at arbitrary budgets."""
    if not np.isfinite(score) or not spend > 0:
        return float("nan"), False
    x = np.concatenate([[0.0], xs])
    y = np.concatenate([[0.0], np.maximum.accumulate(ys)])
    # a policy that equals uniform (the same draws: budget 1, or a rule that never stops early) gets uniform's value
    # summed in another order: a last-bit difference must not read as beating uniform's curve
    score = score - 1e-12
    if score > y[-1]:
        return float(x[-1] / spend), True
    k = int(np.searchsorted(y, score, side="left"))
    if k == 0:
        return 0.0, False
    lo, hi = y[k - 1], y[k]
    frac = 1.0 if hi == lo else (score - lo) / (hi - lo)
    return float((x[k - 1] + frac * (x[k] - x[k - 1])) / spend), False


def _ms(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), (float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan"))


def run_pool(plan: PoolPlan, req: LeaderboardRequest, progress=None) -> pl.DataFrame:
    """The rows of one pool (module docstring)."""
    from .compare import gap_share, paired, verdict
    from .engine import replay
    from .exact import coverage_at_k
    from .policies import RunConfig

    seeds = range(req.seed_start, req.seed_start + req.seeds)
    rows = []
    for track, unit, budgets, levels, es in plan.work:
        metric = metric_of(track)
        per_unit = 1.0 if unit == "samples" else plan.median_tokens
        live = [e for e in es if e.role != "oracle"]
        # 1. every configuration of every live entry on the tuning half, one call per selection rule
        chosen = {}
        for select in sorted({e.select for e in live}):
            grp = [e for e in live if e.select == select]
            cfgs = list({c.label(): c for e in grp for c in e.configs}.values())
            df_t = replay(plan.tune, cfgs, budgets, seeds, select=select, progress=progress)[0]
            means = _tune_means(df_t, metric)
            for e in grp:
                for b in budgets:
                    chosen[e.label, b] = choose(e, means, b)
        tuned = dict(chosen)  # (uniform's too: the best width-only entry is chosen among every width entry)
        # 2. on the held-out half: per budget, each entry's chosen configuration (uniform: its dense curve below)
        rep = {}
        for b in budgets:
            for select in sorted({e.select for e in live if e.role != "uniform"}):
                grp = [e for e in live if e.select == select and e.role != "uniform"]
                cfgs = list({chosen[e.label, b][0].label(): chosen[e.label, b][0] for e in grp}.values())
                df = replay(plan.report, cfgs, [b], seeds, select=select, progress=progress)[0].sort("seed")
                for e in grp:
                    rep[e.label, b] = df.filter(pl.col("config") == chosen[e.label, b][0].label())
        # 3. uniform at every integer level (its curve), with the track's selection; 4. the oracle (the ceiling)
        uni = next(e for e in es if e.role == "uniform")
        dl = dense_levels(levels)
        dense_b = [v * per_unit for v in dl]
        du = replay(plan.report, uni.configs[:1], dense_b, seeds, select=uni.select, progress=progress)[0].sort("seed")
        for b in budgets:
            rep[uni.label, b] = du.filter(pl.col("budget") == b)
            chosen[uni.label, b] = (uni.configs[0], float("nan"))
        # uniform's curve against what it spent (a pool can run out before a budget is spent)
        curve_y = np.array([du.filter(pl.col("budget") == b)[metric].mean() for b in dense_b])
        used = "samples_used" if unit == "samples" else "tokens_used"
        curve_x = np.array([du.filter(pl.col("budget") == b)[used].mean() for b in dense_b]) / (
            plan.report.n_queries * per_unit)
        exact = None
        if unit == "samples" and track == "coverage":
            exact = coverage_at_k(plan.report)  # to the smallest query's size: gains beyond the largest budget
        do = replay(plan.report, [RunConfig("oracle", unit=unit)], budgets, seeds, progress=progress)[0].sort("seed")
        oracle = next((e for e in es if e.role == "oracle"), None)
        for b, lvl in zip(budgets, levels):
            x_uni = rep[uni.label, b][metric].to_numpy()
            x_orc = do.filter(pl.col("budget") == b)["coverage"].to_numpy()
            pub = [e for e in live if e.role == "published"]
            best = max(pub, key=lambda e: (chosen[e.label, b][1], -pub.index(e))) if pub else None
            x_best = rep[best.label, b][metric].to_numpy() if best else None
            # width against depth (module docstring): each kind's best entry, chosen on the tuning half
            by_kind = {}
            for kind in ("width", "depth"):
                cand = [e for e in live if e.kind == kind]
                if cand:
                    by_kind[kind] = max(cand, key=lambda e: (tuned[e.label, b][1], -cand.index(e)))
            x_width = rep[by_kind["width"].label, b][metric].to_numpy() if "depth" in by_kind else None
            cells = []
            for e in live + ([oracle] if oracle else []):
                d = do.filter(pl.col("budget") == b) if e.role == "oracle" else rep[e.label, b]
                x = d[metric].to_numpy() if e.role != "oracle" or track == "coverage" else d["coverage"].to_numpy()
                cov, acc = _ms(d["coverage"].to_numpy()), _ms(d["accuracy"].to_numpy())
                spend_s = float(d["samples_used"].mean()) / plan.report.n_queries
                spend_t = (float(d["tokens_used"].mean()) / plan.report.n_queries) if plan.pool.has_tokens else None
                spend = spend_s if unit == "samples" else spend_t / per_unit
                m = float(x.mean())
                if exact is not None:
                    g, cens = gain_from_curve(np.arange(1, len(exact) + 1, dtype=float), exact, m, spend)
                else:
                    g, cens = gain_from_curve(curve_x, curve_y, m, spend)
                vs_u = paired(x, x_uni) if e.role not in ("uniform", "oracle") else (float("nan"), float("nan"))
                vs_b = (paired(x, x_best) if best is not None and e.role in ("published", "new") and e is not best
                        else (float("nan"), float("nan")))
                gs = gap_share(x, x_uni, x_orc) if e.role in ("published", "new") else (float("nan"), float("nan"))
                vs_w = paired(x, x_width) if x_width is not None and e.kind == "depth" else (float("nan"), float("nan"))
                cfg = chosen[e.label, b][0] if e.role != "oracle" else e.configs[0]
                cells.append({
                    "pool": plan.pool.name, "pool_path": str(plan.path), "model": plan.pool.meta.get("model"),
                    "dataset": plan.pool.meta.get("dataset"), "track": track, "unit": unit, "level": float(lvl),
                    "budget": float(b), "policy": e.label, "base_policy": e.policy, "role": e.role,
                    "config": cfg.label(), "select": e.select, "metric": metric,
                    "tune_mean": float(chosen[e.label, b][1]) if e.role not in ("uniform", "oracle") else float("nan"),
                    "mean": m, "se": _ms(x)[1], "coverage": cov[0], "coverage_se": cov[1], "accuracy": acc[0],
                    "accuracy_se": acc[1], "samples_per_query": spend_s, "tokens_per_query": spend_t,
                    "exact_uniform": (float(exact[int(lvl) - 1]) if exact is not None and e.role == "uniform"
                                      and float(lvl).is_integer() and int(lvl) <= len(exact) else float("nan")),
                    "gain": g, "gain_censored": cens, "vs_uniform": vs_u[0], "vs_uniform_se": vs_u[1],
                    "beats_uniform": bool(vs_u[0] > 2 * vs_u[1]) if np.isfinite(vs_u[1]) else False,
                    "verdict_uniform": verdict(*vs_u) if e.role in ("published", "new") else None,
                    "best_published": best.label if best else None, "is_best_published": e is best,
                    "vs_best": vs_b[0], "vs_best_se": vs_b[1],
                    "beats_best": bool(vs_b[0] > 2 * vs_b[1]) if np.isfinite(vs_b[1]) else False,
                    "oracle_mean": float(x_orc.mean()), "gap_share": gs[0], "gap_share_se": gs[1],
                    "tuned_on_reported": plan.same and e.role not in ("uniform", "oracle"),
                    "kind": e.kind, "is_best_width": by_kind.get("width") is e and "depth" in by_kind,
                    "is_best_depth": by_kind.get("depth") is e, "vs_best_width": vs_w[0], "vs_best_width_se": vs_w[1],
                })
            ranks = rank([c["mean"] for c in cells if c["role"] != "oracle"])
            for c, r in zip([c for c in cells if c["role"] != "oracle"], ranks):
                c["rank"] = r
            for c in cells:
                c.setdefault("rank", float("nan"))
            rows += cells
    return pl.DataFrame(rows, schema=SCHEMA, strict=False).with_columns(
        pl.lit(float(req.holdout)).alias("holdout"), pl.lit(req.split_seed, dtype=pl.Int64).alias("split_seed"),
        pl.lit(len(plan.t_idx), dtype=pl.Int64).alias("n_tune"),
        pl.lit(len(plan.r_idx), dtype=pl.Int64).alias("n_report"),
        pl.lit(req.seed_start, dtype=pl.Int64).alias("seed_start"),
        pl.lit(req.seeds, dtype=pl.Int64).alias("n_seeds"),
        pl.lit(plan.median_tokens, dtype=pl.Float64).alias("median_tokens"))


def rank(values: list[float]) -> list[float]:
    """Ranks, 1 = the largest, ties sharing the mean of their places (NaN ranks last)."""
    v = np.array([-np.inf if not np.isfinite(x) else x for x in values])
    order = np.argsort(-v, kind="stable")
    out = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        out[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out.tolist()


SCHEMA = {"pool": pl.String, "pool_path": pl.String, "model": pl.String, "dataset": pl.String, "track": pl.String,
          "unit": pl.String, "level": pl.Float64, "budget": pl.Float64, "policy": pl.String, "base_policy": pl.String,
          "role": pl.String, "config": pl.String, "select": pl.String, "metric": pl.String,
          "tune_mean": pl.Float64, "mean": pl.Float64, "se": pl.Float64, "coverage": pl.Float64,
          "coverage_se": pl.Float64, "accuracy": pl.Float64, "accuracy_se": pl.Float64,
          "samples_per_query": pl.Float64, "tokens_per_query": pl.Float64, "exact_uniform": pl.Float64,
          "gain": pl.Float64, "gain_censored": pl.Boolean, "vs_uniform": pl.Float64, "vs_uniform_se": pl.Float64,
          "beats_uniform": pl.Boolean, "verdict_uniform": pl.String, "best_published": pl.String,
          "is_best_published": pl.Boolean, "vs_best": pl.Float64, "vs_best_se": pl.Float64, "beats_best": pl.Boolean,
          "oracle_mean": pl.Float64, "gap_share": pl.Float64, "gap_share_se": pl.Float64,
          "tuned_on_reported": pl.Boolean, "kind": pl.String, "is_best_width": pl.Boolean,
          "is_best_depth": pl.Boolean, "vs_best_width": pl.Float64, "vs_best_width_se": pl.Float64, "rank": pl.Float64}


def aggregate(df: pl.DataFrame) -> pl.DataFrame:
    """Across pools, per track, unit, level and policy (the live ones): the pools it ran on, its mean rank, the
    pools where it beats uniform beyond 2 SE, those where it beats the best published adaptive policy beyond 2 SE,
    and its median efficiency gain (gains_censored: how many of the gains are lower bounds, the policy beating
    uniform's last point; the median counts them at their bound)."""
    live = df.filter(pl.col("role") != "oracle")
    return (live.group_by("track", "unit", "level", "policy", maintain_order=True)
            .agg(pl.col("role").first(), pl.len().alias("pools"), pl.col("rank").mean().alias("mean_rank"),
                 pl.col("beats_uniform").sum().alias("beats_uniform"), pl.col("beats_best").sum().alias("beats_best"),
                 pl.col("gain").median().alias("median_gain"), pl.col("gain_censored").sum().alias("gains_censored"),
                 pl.col("gap_share").median().alias("median_gap_share"))
            .sort("track", "unit", "level", "mean_rank"))


DEPTH_SE = ("the SE is over seeds on the held-out queries (which traces each query draws and in which order; the "
            "queries fixed), the difference paired over seeds (common random numbers): it does not cover which "
            "queries were held out, so on a pool of 15 held-out queries a difference beyond 2 SE is a statement "
            "about these queries")


def depth_vs_width(df: pl.DataFrame) -> pl.DataFrame:
    """Per pool, track, unit and budget where depth entries ran: the best width-only entry against the best width x
    depth entry (each chosen on the tuning half), held-out mean ± SE, tokens spent per query, and depth's paired
    difference from width with its SE and verdict (DEPTH_SE)."""
    from .compare import verdict

    keys = ["pool", "track", "unit", "level", "budget"]
    cols = ["policy", "config", "mean", "se", "tokens_per_query"]
    w = df.filter(pl.col("is_best_width")).select(*keys, *[pl.col(c).alias(f"width_{c}") for c in cols])
    d = df.filter(pl.col("is_best_depth")).select(*keys, *[pl.col(c).alias(f"depth_{c}") for c in cols],
                                                  pl.col("vs_best_width").alias("diff"),
                                                  pl.col("vs_best_width_se").alias("diff_se"))
    out = w.join(d, on=keys, how="inner", maintain_order="left")
    return out.with_columns(pl.struct("diff", "diff_se").map_elements(
        lambda r: verdict(r["diff"], r["diff_se"]), return_dtype=pl.String).alias("verdict"))


DEPTH_HEAD = ("pool", "budget", "best width-only", "accuracy", "tokens / query", "best width x depth", "accuracy",
              "tokens / query", "depth - width")


def depth_rows(dw: pl.DataFrame) -> list[list[str]]:
    rows = []
    for r in dw.iter_rows(named=True):
        diff = f"{r['diff']:+.3f}±{r['diff_se']:.3f}" + (" *" if r["verdict"] != "within 2 SE" else "")
        rows.append([r["pool"], _level(r["unit"], r["level"]), r["width_config"], _mse(r["width_mean"], r["width_se"]),
                     f"{r['width_tokens_per_query']:,.0f}", r["depth_config"], _mse(r["depth_mean"], r["depth_se"]),
                     f"{r['depth_tokens_per_query']:,.0f}", diff])
    return rows


def render_depth(dw: pl.DataFrame):
    from .compare import sectioned_table

    return sectioned_table("depth against width at equal token budgets (held-out accuracy, sc track; * beyond 2 SE)",
                           DEPTH_HEAD, depth_rows(dw))


# --------------------------------------------------------------------------------------------------- the command

def command_line(req: LeaderboardRequest) -> str:
    args = ["ttc", "leaderboard", *[str(p) for p in req.pools]]
    if req.embedded:
        args.append("--embedded")
    args += ["--budgets", ",".join(f"{b:g}" for b in req.budgets),
             "--token-multiples", ",".join(f"{b:g}" for b in req.token_multiples),
             "--tracks", ",".join(req.tracks), "--seeds", str(req.seeds), "--seed-start", str(req.seed_start),
             "--holdout", f"{req.holdout:g}", "--split-seed", str(req.split_seed)]
    if req.units is not None:
        args += ["--units", ",".join(req.units)]
    if not req.figures:
        args.append("--no-figures")
    args += ["--side", ",".join(req.sides)]
    if req.out is not None:
        args += ["--out", str(req.out)]
    return shlex.join(args)


def run_leaderboard(req: LeaderboardRequest, console=None) -> pl.DataFrame:
    from .engine import set_threads
    from .outputs import MARK as OUTPUT_MARK
    from .outputs import atomic_dir
    from .progress import progress
    from .run import _console

    console = console or _console()
    t0 = time.perf_counter()
    paths = validate(req)
    set_threads(req.threads)
    plans = [plan_pool(p, req) for p in paths]  # every pool read and checked before the first engine call
    if not any(p.work for p in plans):
        raise InputError("no track applies to any pool given (the sc track needs answers)")
    t_load = time.perf_counter() - t0
    n_calls = sum(calls(p) for p in plans)
    console.print(f"{len(plans)} pools, {sum(len(p.work) for p in plans)} (track, unit) leaderboards, "
                  f"{n_calls} engine calls x {req.seeds} seeds; loaded in {t_load:.1f} s", highlight=False)
    for p in plans:
        for name, why in p.skipped.items():
            console.print(f"  {p.pool.name}: {name} not run: {why}", highlight=False)
    t1 = time.perf_counter()
    with progress(sum(runs(p) for p in plans) * req.seeds, "leaderboard", "runs", console=console) as bar:
        df = pl.concat([run_pool(p, req, progress=bar.advance) for p in plans])
    elapsed = time.perf_counter() - t1
    agg = aggregate(df)
    dw = depth_vs_width(df)
    console.print(render(agg), highlight=False)
    if dw.height:
        console.print(render_depth(dw), highlight=False)
        console.print(DEPTH_SE[0].upper() + DEPTH_SE[1:] + ".", style="dim", highlight=False)
    console.print(f"held-out {', '.join(TRACKS)}; standard errors {SE_METHOD}. {elapsed:.1f} s replaying, "
                  f"{t_load:.1f} s loading.", style="dim", highlight=False)
    if req.out is not None:
        cmd = command_line(req)
        with atomic_dir(req.out, "leaderboard") as tmp:
            df.write_parquet(tmp / "leaderboard.parquet", metadata={OUTPUT_MARK: "leaderboard"})
            agg.write_parquet(tmp / "aggregate.parquet", metadata={OUTPUT_MARK: "leaderboard"})
            if dw.height:
                dw.write_parquet(tmp / "depth.parquet", metadata={OUTPUT_MARK: "leaderboard"})
            (tmp / "leaderboard.md").write_text(markdown(df, agg, cmd, elapsed,
                                                         {p.pool.name: (p.side, p.skipped) for p in plans}))
            if req.figures:
                from .figures import leaderboard_figures

                leaderboard_figures(df, tmp / "figures")
        console.print(f"wrote leaderboard.parquet ({df.height} rows), aggregate.parquet, "
                      + ("depth.parquet, " if dw.height else "") + "leaderboard.md"
                      + (" and figures/" if req.figures else "") + f" to {req.out}", highlight=False)
    return df


# ------------------------------------------------------------------------------------------------------ tables

def _mse(m, se, pct: bool = False) -> str:
    if m is None or not np.isfinite(m):
        return "—"
    if pct:
        return f"{m:.1%}±{se:.1%}" if se is not None and np.isfinite(se) else f"{m:.1%}"
    return f"{m:.3f}±{se:.3f}" if se is not None and np.isfinite(se) else f"{m:.3f}"


def _gain(g, censored) -> str:
    if g is None or not np.isfinite(g):
        return "—"
    return f"{'≥' if censored else ''}{g:.2f}x"


def _level(unit: str, lvl: float) -> str:
    return f"{lvl:g}" if unit == "samples" else f"{lvl:g}x median"


def aggregate_rows(agg: pl.DataFrame) -> list[list[str]]:
    rows = []
    for r in agg.iter_rows(named=True):
        rows.append([r["track"], r["unit"], _level(r["unit"], r["level"]), r["policy"], f"{r['mean_rank']:.2f}",
                     f"{r['beats_uniform']}/{r['pools']}",
                     "—" if r["role"] == "uniform" else f"{r['beats_best']}/{r['pools']}",
                     _gain(r["median_gain"], False) + (f" ({r['gains_censored']} ≥)" if r["gains_censored"] else ""),
                     _mse(r["median_gap_share"], None, True)])
    return rows


AGG_HEAD = ("track", "unit", "budget", "policy", "mean rank", "beats uniform (pools)", "beats best published (pools)",
            "median gain (lower bounds)", "median gap closed")


def render(agg: pl.DataFrame):
    from .compare import sectioned_table

    return sectioned_table("across pools (held-out): mean rank, pools beating uniform / the best published adaptive "
                           "policy beyond 2 SE, median efficiency gain", AGG_HEAD, aggregate_rows(agg),
                           key=lambda row: tuple(row[:3]))


POOL_HEAD = ("policy", "config", "coverage", "accuracy", "spent / query", "gain", "vs uniform", "gap closed", "rank")


def pool_rows(sub: pl.DataFrame) -> list[list[str]]:
    rows = []
    for r in sub.sort("rank", nulls_last=True).iter_rows(named=True):
        unit = r["unit"]
        spent = (f"{r['samples_per_query']:.2f}" if unit == "samples" else f"{r['tokens_per_query']:,.0f} tok")
        vs = ("—" if not np.isfinite(r["vs_uniform"]) else
              f"{r['vs_uniform']:+.3f}±{r['vs_uniform_se']:.3f}" + (" *" if r["beats_uniform"] else ""))
        rows.append([r["policy"] + (" †" if r["tuned_on_reported"] else ""), r["config"].removeprefix(r["base_policy"])
                     or "(default)", _mse(r["coverage"], r["coverage_se"]), _mse(r["accuracy"], r["accuracy_se"]),
                     spent, _gain(r["gain"], r["gain_censored"]), vs, _mse(r["gap_share"], r["gap_share_se"], True),
                     "—" if not np.isfinite(r["rank"]) else f"{r['rank']:g}"])
    return rows


def table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(df: pl.DataFrame, agg: pl.DataFrame, command: str, elapsed: float, sides: dict | None = None) -> str:
    """sides: pool -> (its side column or None, {policy it cannot run: why}), stated under its heading."""
    first = df.row(0, named=True)
    pools = df["pool"].unique(maintain_order=True).to_list()
    parts = [f"# ttc leaderboard\n\n```bash\n{command}\n```\n",
             f"{len(pools)} pools; each policy's parameters chosen on a seeded half of each pool's queries (holdout "
             f"{first['holdout']:g}, split seed {first['split_seed']}), every number measured on the other half over "
             f"{first['n_seeds']} seeds from {first['seed_start']}. Standard errors {SE_METHOD}. Gain: the budget "
             "uniform needs to match the policy's held-out metric / the budget the policy spent (≥: the policy beats "
             "uniform's last point). Gap closed: (policy - uniform) / (oracle - uniform). * beyond 2 SE. "
             "† tuned on the data it reports (holdout 0). Replay time "
             f"{elapsed:.0f} s.\n",
             "## Across pools\n", table(AGG_HEAD, aggregate_rows(agg))]
    dw = depth_vs_width(df)
    if dw.height:
        parts += ["\n## Depth against width at equal tokens\n",
                  "Per probed pool and token budget, the best width-only entry (whole traces) against the best width x "
                  "depth entry (traces stopped part-way), each chosen on the tuning half, both measured on the "
                  f"held-out half at the same token budget (sc track: accuracy). Standard errors: {DEPTH_SE}. "
                  "* beyond 2 SE.\n", table(DEPTH_HEAD, depth_rows(dw))]
    for name in pools:
        sub = df.filter(pl.col("pool") == name)
        r0 = sub.row(0, named=True)
        parts.append(f"\n## {name}\n\n{r0['model'] or ''} {r0['dataset'] or ''} — {r0['n_tune']} queries tune, "
                     f"{r0['n_report']} report" + (f"; median response {r0['median_tokens']:,.0f} tokens"
                                                   if r0["median_tokens"] else ""))
        side, left = (sides or {}).get(name, (None, {}))
        if side is not None:
            parts.append(f"\nSide signal (side-eb, uab): `{side}`.")
        if left:
            parts.append("\nNot run on this pool: " + "; ".join(f"`{p}` ({why})" for p, why in left.items()) + ".")
        for (track, unit, lvl), g in sub.group_by("track", "unit", "level", maintain_order=True):
            parts.append(f"\n### {track}, {unit} budget {_level(unit, lvl)} (metric: {g['metric'][0]})\n")
            parts.append(table(POOL_HEAD, pool_rows(g)))
    return "\n".join(parts) + "\n"
