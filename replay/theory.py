"""`ttc theory`: the spec's growth rates, measured.

The spec (ALGORITHMS.md, "Theory to demonstrate") says that with per-query success probabilities p_i, to answer
every query (some drawn response correct) with high probability, uniform needs a total budget of order
n * max_i 1/p_i, round-robin elimination sum_i 1/p_i, and explore-then-commit with a fixed first stage of m
responses per query sum_i max(m, 1/p_i). This module measures those budgets on synthetic pools of growing n and
sets them against the rates.

Pools. For each n, `ttc synth`'s generator with p_i = (i + 1) / n (difficulty `linear`: sum 1/p_i = n H_n,
n max 1/p_i = n^2) and exact counts: query i holds N_i = max(m + 1, ceil(depth / p_i)) responses of which
exactly round(p_i N_i) (>= depth) are correct, so every query is solvable in its pool, the pool's own rate is
p_i, and the draw order is the only randomness left, as in live sampling (up to drawing without replacement
from a deep pool).

What is measured. For a seed s, let B_s be the smallest total budget (samples) at which the policy, replayed on
seed s's permutations, covers every query. Every policy here covers more with more budget on the same seed (a
run at B + 1 extends the run at B, or, for two-stage, gives each query at least as many responses), so the
fraction of seeds covering everything at B is nondecreasing in B, and the budget needed with probability
1 - delta is the smallest B where that fraction reaches 1 - delta: the ceil((1 - delta) S)-th smallest B_s.
It is found two ways that must agree, and the output says whether they do:
- engine (`--engine bisect`): doubling then bisection over B, each step one replay (replay/engine.py run_grid)
  of the policy at budget B on all S seeds; exact to the sample. The default `--engine check` replays only B
  and B - 1: covering at B and not at B - 1 is, by monotonicity, exactly what bisection would return, at two
  replays instead of ~20 (the difference is minutes at n = 1000);
- direct: from each seed's first-success positions F_i (1-based position of query i's first correct response
  in its permutation) and query order, B_s in closed form:
  - uniform gives every query floor(B/n) responses and the first B mod n queries in order one more, so
    B_s = n (M - 1) + 1 + (largest rank among the queries with F_i = M), M = max_i F_i;
  - elimination (round-robin, threshold on ground truth) stops query i after exactly F_i draws, so
    B_s = sum_i F_i;
  - two-stage with a fixed first stage m (the engine's two-stage at rho = (n m + 1/2) / B, so that stage 1 is
    floor(rho B) = n m samples; at B <= n m it is uniform, stage 1 cut short): the queries U with F_i > m are
    unanswered after stage 1, and under a ground-truth oracle they all have the same stage-2 weight 1/(m + 2)
    (docs/semantics.md), so stage 2 is uniform over U: B_s = n m + |U| (D - 1) + 1 + (largest position in U, in
    query order, of a query with F_i - m = D), D = max over U of F_i - m;
  - etc-adaptive, a reference that is not an engine policy: m responses to every query, then round-robin
    elimination over the rest, B_s = sum_i max(m, F_i). It is the policy that pays the spec's
    sum_i max(m, 1/p_i).
Uniform is measured directly only: its share reaches B/n ~ n max 1/p_i responses per query, far beyond the
pools of easy queries, which the engine would count as exhausted and whose leftover share it would hand to the
other queries (live sampling cannot), so replaying it on these ragged pools would flatter it. Elimination never
exhausts (a query stops at its first correct response, which its pool holds); two-stage's stage 2 may exhaust
a query whose allocation exceeds its pool, but that query has then drawn its whole pool, correct response
included, so coverage is what live sampling gives.

The predicted curves are the spec's rates times one constant per policy fitted to the measured points
(geometric mean of measured / predicted): a rate is confirmed when measured / predicted stays flat as n grows,
i.e. when the log-log slopes agree. For the engine's two-stage the table also gives the rate its pinned stage 2
implies, n m + sum_i (1 - p_i)^m max_i 1/p_i (the expected number of queries stage 1 leaves unanswered, each
given what the hardest needs): a non-adaptive stage 2 that cannot tell hard from merely unlucky queries pays
like uniform on them.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from .engine import run_grid
from .extras import check, require
from .outputs import atomic_dir, check_output, write_errors
from .policies import RunConfig
from .pool import Pool, PoolError
from .rng import permutation, query_order
from .synth import SynthSpec, generate_arrays, to_pool
from .tables import make_tables

POLICIES = ("uniform", "elimination", "two-stage", "etc-adaptive")
RATES = {
    "uniform": "n max 1/p_i",
    "elimination": "sum 1/p_i",
    "two-stage": "sum max(m, 1/p_i)",
    "etc-adaptive": "sum max(m, 1/p_i)",
}
PINNED_RATE = "n m + sum (1-p_i)^m max 1/p_i"
ENGINE = ("elimination", "two-stage")  # measured with the engine as well as directly
ENGINE_MODES = ("check", "bisect", "off")


@dataclass(frozen=True)
class TheorySetting:
    ns: tuple = (10, 20, 50, 100, 200, 500, 1000)
    delta: float = 0.1
    trials: int = 200
    m: int = 4
    depth: int = 64
    seed: int = 0
    engine: str = "check"  # bisect: full engine bisection; check: the engine confirms B and B - 1; off

    def check(self):
        if not self.ns or any(n < 2 for n in self.ns):
            raise PoolError(f"--sizes takes query counts >= 2, got {list(self.ns)}")
        if len(set(self.ns)) != len(self.ns):
            raise PoolError(f"--sizes lists a size twice: {list(self.ns)}")
        if not 0.0 < self.delta < 1.0:
            raise PoolError(f"--delta must be in (0, 1), got {self.delta}")
        if self.trials < 1:
            raise PoolError(f"--seeds must be >= 1, got {self.trials}")
        if self.m < 1:
            raise PoolError(f"--m (two-stage's first stage per query) must be >= 1, got {self.m}")
        if self.depth < 1:
            raise PoolError(f"--depth must be >= 1, got {self.depth}")
        if self.seed < 0:
            raise PoolError(f"--seed-start must be >= 0, got {self.seed}")
        if self.engine not in ENGINE_MODES:
            raise PoolError(f"--engine must be one of {', '.join(ENGINE_MODES)}, got {self.engine!r}")
        # each size's pool holds about n (m + 1) + depth n (ln n + 1) responses (p_i = i/n needs depth / p_i each)
        from .errors import check_memory
        from .synth import ROW_BYTES

        check_memory(self.trials * len(self.ns) * 200, f"--seeds {self.trials:,} x {len(self.ns)} sizes",
                     "use fewer seeds")
        rows = max(n * (self.m + 1) + self.depth * n * (math.log(n) + 1) for n in self.ns)
        check_memory(rows * ROW_BYTES, f"a theory pool of about {rows:,.0f} responses (--sizes {max(self.ns):,}, "
                     f"--m {self.m:,}, --depth {self.depth:,})", "use smaller --sizes, --m or --depth")


def linear_rates(n: int) -> np.ndarray:
    return np.arange(1, n + 1) / n


def theory_pool(n: int, m: int, depth: int, seed: int = 0) -> Pool:
    """Linear success rates, exact counts, pools deep enough that every query is solvable and stage 1 fits."""
    p = linear_rates(n)
    sizes = np.maximum(m + 1, np.ceil(depth / p - 1e-9).astype(np.int64))
    spec = SynthSpec(queries=n, responses=depth, difficulty="linear", score_dist="none", tokens=0,
                     exact_counts=True, seed=seed)
    return to_pool(spec, generate_arrays(spec, sizes))


def draw_order(pool: Pool, seeds) -> tuple[np.ndarray, np.ndarray]:
    """(F, rank), each (seeds, n): F[s, i] = 1-based position of query i's first correct response in seed s's
    permutation (the engine's own, replay/rng.py), rank[s, i] = query i's place in seed s's query order."""
    n = pool.n_queries
    seeds = list(seeds)
    F = np.empty((len(seeds), n), np.int64)
    R = np.empty((len(seeds), n), np.int64)
    for t, s in enumerate(seeds):
        perm = permutation(pool.off, pool.qkeys, s)
        hits = np.flatnonzero(pool.correct[perm])
        q = np.searchsorted(pool.off, hits, side="right") - 1
        solved, first = np.unique(q, return_index=True)
        if len(solved) < n:
            missing = sorted(set(range(n)) - set(solved.tolist()))
            raise PoolError(f"query {pool.query_ids[missing[0]]} has no correct response: no budget covers it")
        F[t] = hits[first] - pool.off[:-1] + 1
        R[t] = query_order(pool.qkeys, s)[0]
    return F, R


def need_uniform(F: np.ndarray, rank: np.ndarray) -> np.ndarray:
    n = F.shape[1]
    M = F.max(axis=1)
    last = np.where(F == M[:, None], rank, -1).max(axis=1)
    return n * (M - 1) + 1 + last


def need_elimination(F: np.ndarray) -> np.ndarray:
    return F.sum(axis=1)


def need_two_stage(F: np.ndarray, rank: np.ndarray, m: int) -> np.ndarray:
    S, n = F.shape
    out = need_uniform(F, rank)  # every query answered within stage 1: stage 1 cut short is uniform
    for s in range(S):
        U = np.flatnonzero(F[s] > m)
        if len(U) == 0:
            continue
        U = U[np.argsort(rank[s, U])]
        gap = F[s, U] - m
        D = gap.max()
        out[s] = n * m + len(U) * (D - 1) + 1 + np.flatnonzero(gap == D).max()
    return out


def need_etc_adaptive(F: np.ndarray, m: int) -> np.ndarray:
    return np.maximum(F, m).sum(axis=1)


def quantile_budget(per_seed: np.ndarray, delta: float) -> int:
    """The smallest B with at least (1 - delta) of the seeds needing no more than B."""
    k = math.ceil(round((1.0 - delta) * len(per_seed), 9))
    return int(np.sort(per_seed)[max(k, 1) - 1])


def smallest_budget(frac_ok, lo: int, target: float) -> tuple[int, int]:
    """Smallest integer B > lo with frac_ok(B) >= target, for frac_ok nondecreasing in B and failing at lo:
    double until it holds, then bisect. Returns (B, evaluations)."""
    evals = 0
    hi = max(2 * lo, lo + 1)
    while True:
        evals += 1
        if frac_ok(hi) >= target:
            break
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        evals += 1
        if frac_ok(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi, evals


def engine_config(policy: str, n: int, m: int, budget: int) -> RunConfig:
    if policy == "uniform" or (policy == "two-stage" and budget <= n * m):
        return RunConfig("uniform")
    if policy == "elimination":
        return RunConfig("elimination")
    if policy == "two-stage":
        return RunConfig("two-stage", rho=(n * m + 0.5) / budget)  # floor(rho * B) = n m
    raise PoolError(f"no engine policy for {policy!r}")


def engine_runs(pool: Pool, policy: str, budget: int, seeds, m: int, tables=None) -> tuple[np.ndarray, np.ndarray]:
    """(covered every query, queries exhausted) per seed, replaying `policy` at total budget `budget`."""
    seeds = np.asarray(list(seeds), np.int64)
    tables = tables or make_tables(int(pool.sizes.max()), 0.95, sc_beta=False)
    cfg = engine_config(policy, pool.n_queries, m, budget)
    out_f, out_i, _, _ = run_grid(pool, [cfg], np.full((1, len(seeds)), budget, np.int64), seeds, tables)
    return out_f[0, :, 0] == 1.0, out_i[0, :, 2]


def engine_budget(pool: Pool, policy: str, seeds, delta: float, m: int) -> tuple[int, int, float]:
    """(budget needed with probability 1 - delta by bisection over engine replays, evaluations, mean queries
    exhausted per run at that budget)."""
    tables = make_tables(int(pool.sizes.max()), 0.95, sc_beta=False)
    B, evals = smallest_budget(lambda b: engine_runs(pool, policy, b, seeds, m, tables)[0].mean(),
                               pool.n_queries - 1, 1.0 - delta)
    return B, evals, float(engine_runs(pool, policy, B, seeds, m, tables)[1].mean())


def engine_needs(pool: Pool, policy: str, seeds, m: int) -> np.ndarray:
    """Per seed, the smallest budget at which the engine's replay covers every query: the same doubling and
    bisection as engine_budget, run for all seeds at once (each seed its own bracket). Only the engine is
    consulted, so tests can hold the closed forms to it."""
    seeds = np.asarray(list(seeds), np.int64)
    n = pool.n_queries
    tables = make_tables(int(pool.sizes.max()), 0.95, sc_beta=False)

    def ok(budgets):
        res = np.zeros(len(seeds), bool)
        cfgs = {}
        for t, b in enumerate(budgets):  # one replay per distinct configuration (two-stage's rho depends on B)
            cfgs.setdefault(engine_config(policy, n, m, int(b)), []).append(t)
        for cfg, idx in cfgs.items():
            out_f, _, _, _ = run_grid(pool, [cfg], np.asarray(budgets, np.int64)[idx][None, :], seeds[idx], tables)
            res[idx] = out_f[0, :, 0] == 1.0
        return res

    lo = np.full(len(seeds), n - 1, np.int64)
    hi = np.full(len(seeds), 2 * n, np.int64)
    while True:
        good = ok(hi)
        if good.all():
            break
        lo = np.where(good, lo, hi)
        hi = np.where(good, hi, 2 * hi)
    while (hi - lo > 1).any():
        mid = (lo + hi) // 2
        good = ok(mid)
        open_ = hi - lo > 1
        hi = np.where(open_ & good, mid, hi)
        lo = np.where(open_ & ~good, mid, lo)
    return hi


def engine_check(pool: Pool, policy: str, seeds, delta: float, m: int, budget: int) -> tuple[int | None, float]:
    """Whether the engine confirms `budget` as the smallest with at least 1 - delta of the seeds covering every
    query: it does at `budget` and not at `budget - 1` (by monotonicity, what bisection would return). Returns
    (budget, or None when not confirmed; mean queries exhausted per run at budget)."""
    tables = make_tables(int(pool.sizes.max()), 0.95, sc_beta=False)
    ok, exh = engine_runs(pool, policy, budget, seeds, m, tables)
    below = engine_runs(pool, policy, budget - 1, seeds, m, tables)[0] if budget > 1 else np.zeros(1, bool)
    return (budget if ok.mean() >= 1.0 - delta > below.mean() else None), float(exh.mean())


def predicted(policy: str, p: np.ndarray, m: int) -> float:
    inv = 1.0 / p
    if policy == "uniform":
        return len(p) * inv.max()
    if policy == "elimination":
        return inv.sum()
    return np.maximum(m, inv).sum()


def pinned_two_stage_rate(p: np.ndarray, m: int) -> float:
    return len(p) * m + ((1.0 - p) ** m).sum() * (1.0 / p).max()


def measure(setting: TheorySetting, progress=None) -> pl.DataFrame:
    """One row per (n, policy): the budget needed with probability 1 - delta, measured, and the rates."""
    setting.check()
    seeds = range(setting.seed, setting.seed + setting.trials)
    rows = []
    for n in setting.ns:
        t0 = time.perf_counter()
        pool = theory_pool(n, setting.m, setting.depth, setting.seed)
        p = linear_rates(n)
        F, rank = draw_order(pool, seeds)
        direct = {"uniform": need_uniform(F, rank), "elimination": need_elimination(F),
                  "two-stage": need_two_stage(F, rank, setting.m), "etc-adaptive": need_etc_adaptive(F, setting.m)}
        for pol in POLICIES:
            per_seed = direct[pol]
            B = quantile_budget(per_seed, setting.delta)
            row = {"n": n, "policy": pol, "budget": B, "budget_per_query": B / n, "mean_need": float(per_seed.mean()),
                   "predicted": predicted(pol, p, setting.m), "rate": RATES[pol],
                   "pinned_rate": pinned_two_stage_rate(p, setting.m) if pol == "two-stage" else None,
                   "method": "direct", "engine_budget": None, "engine_agrees": None, "engine_evals": None,
                   "exhausted": None, "responses": int(pool.off[-1])}
            if setting.engine != "off" and pol in ENGINE:
                if setting.engine == "bisect":
                    EB, evals, exh = engine_budget(pool, pol, seeds, setting.delta, setting.m)
                else:
                    EB, exh = engine_check(pool, pol, seeds, setting.delta, setting.m, B)
                    evals = 2
                row.update(method=f"engine {setting.engine}", engine_budget=EB, engine_agrees=EB == B,
                           engine_evals=evals, exhausted=exh)
            rows.append(row)
        if progress:
            progress(n, time.perf_counter() - t0)
    df = pl.DataFrame(rows, infer_schema_length=None)
    df = df.with_columns((pl.col("budget") / pl.col("predicted")).alias("ratio"))
    fit = fitted_constants(df)
    return df.with_columns(pl.col("policy").replace_strict(fit, return_dtype=pl.Float64).alias("fitted_c"))


def fitted_constants(df: pl.DataFrame, column: str = "predicted") -> dict:
    """Per policy, the constant c minimising the squared log error of c * rate against the measured budgets."""
    return {pol: float(np.exp(np.mean(np.log(g["budget"].to_numpy() / g[column].to_numpy()))))
            for (pol,), g in df.group_by("policy", maintain_order=True)}


def slope(x, y) -> float:
    """Least-squares slope of log y on log x (nan with a single point)."""
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else float("nan")


COLORS = {"uniform": "#1f77b4", "elimination": "#2ca02c", "two-stage": "#d62728", "etc-adaptive": "#9467bd"}
MARKERS = {"uniform": "o", "elimination": "s", "two-stage": "D", "etc-adaptive": "^"}


def plot(df: pl.DataFrame, setting: TheorySetting, out: Path, formats=("png",)):
    matplotlib = require("matplotlib", "ttc theory --out")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=130)
    ns_dense = np.unique(np.geomspace(min(setting.ns), max(setting.ns), 60).round().astype(int))
    for pol in POLICIES:
        g = df.filter(pl.col("policy") == pol).sort("n")
        if g.height == 0:
            continue
        c = g["fitted_c"][0]
        label = {"two-stage": f"two-stage, fixed m={setting.m} (engine)",
                 "etc-adaptive": f"m={setting.m}, then elimination (direct; reference)"}.get(pol, pol)
        ax.plot(g["n"], g["budget"], MARKERS[pol], color=COLORS[pol], ms=7, label=f"{label}: measured",
                zorder=3)
        curve = [c * predicted(pol, linear_rates(n), setting.m) for n in ns_dense]
        ax.plot(ns_dense, curve, "-", color=COLORS[pol], lw=1.4, alpha=0.8,
                label=f"{c:.2g} x {RATES[pol]} (fitted)")
        if pol == "two-stage":
            cp = fitted_constants(g.with_columns(pl.col("pinned_rate").alias("pin")), "pin")[pol]
            ax.plot(ns_dense, [cp * pinned_two_stage_rate(linear_rates(n), setting.m) for n in ns_dense], ":",
                    color=COLORS[pol], lw=1.6, label=f"{cp:.2g} x ({PINNED_RATE}): two-stage as pinned")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("queries n (p_i = i/n)")
    ax.set_ylabel(f"total budget to cover every query w.p. {1 - setting.delta:g} (samples)")
    ax.set_title(f"Budget needed vs the spec's growth rates (points: {setting.trials} seeds each; lines: "
                 "rate x fitted constant)", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left", ncol=1, framealpha=0.9)
    fig.tight_layout()
    for fmt in formats:  # (png at the report's 200 dpi; pdf and svg vector, for a paper)
        fig.savefig(out.with_suffix(f".{fmt}"), dpi=200 if fmt == "png" else None)
    plt.close(fig)


def run_theory(setting: TheorySetting, out: Path | None = None, console=None, force: bool = False,
               formats: tuple = ("png",)) -> pl.DataFrame:
    from rich.console import Console
    from rich.table import Table

    setting.check()
    console = console or Console(width=None if Console().is_terminal else 150)
    if out is not None:  # before the measurements, not after them
        check_output(out, flag="--out", command="theory", force=force, kind="dir")
        check("matplotlib", "ttc theory --out")
    console.print(
        f"[bold]ttc theory[/]: p_i = i/n, pools of max(m+1, ceil({setting.depth}/p_i)) responses per query with "
        f"exactly round(p_i N_i) correct; {setting.trials} seeds per n; two-stage and etc-adaptive use m = "
        f"{setting.m}.\nBudget = the smallest total B at which at least {1 - setting.delta:g} of the seeds cover "
        f"every query (the ceil({1 - setting.delta:g} S)-th smallest per-seed need). "
        + "Per-seed needs in closed form from the draw order (F_i = position of query i's first correct "
        "response in the engine's permutation; replay/theory.py derives each). "
        + {"check": "Elimination and two-stage are confirmed by the engine: replayed on all seeds, at least "
                    f"{1 - setting.delta:g} cover every query at B and fewer at B - 1 (coverage grows with B, so this "
                    "is what bisection over B finds; --engine bisect runs the full bisection).",
           "bisect": "Elimination and two-stage are also found by bisection over B, replaying the engine on all "
                     "seeds at each step; the table says whether it agrees.",
           "off": "Engine replays skipped (--engine off)."}[setting.engine]
        + " Uniform is closed form only: on these ragged pools its share would exhaust the easy queries' pools.",
        highlight=False)
    t_start = time.perf_counter()
    df = measure(setting, progress=lambda n, s: console.print(f"  n = {n}: {s:.1f} s", highlight=False))
    wall = time.perf_counter() - t_start
    t = Table(title=f"budget needed w.p. {1 - setting.delta:g}; ratio = measured / rate; c = fitted constant",
              title_style="dim")
    for col in ("n", "policy", "measured B", "B / n", "mean need", "rate", "predicted", "ratio", "how",
                "exhausted/run"):
        t.add_column(col, justify="left" if col in ("policy", "rate", "how") else "right")
    mismatches = []
    last = None
    for r in df.iter_rows(named=True):
        if last is not None and r["n"] != last:
            t.add_section()
        last = r["n"]
        how = "closed form"
        if r["engine_agrees"] is not None:
            if not r["engine_agrees"]:
                mismatches.append(r)
            how = (f"= engine ({r['engine_evals']} replays)" if r["engine_agrees"]
                   else f"[red]engine disagrees ({r['engine_budget']})[/]")
        exh = "" if r["exhausted"] is None else f"{r['exhausted']:.1f}"
        t.add_row(str(r["n"]), r["policy"], f"{r['budget']:,}", f"{r['budget_per_query']:.1f}",
                  f"{r['mean_need']:,.0f}", r["rate"], f"{r['predicted']:,.0f}", f"{r['ratio']:.3f}", how, exh)
    console.print(t)
    lines = []
    for pol in POLICIES:
        g = df.filter(pl.col("policy") == pol).sort("n")
        ratios = g["ratio"].to_numpy()
        lines.append(f"  {pol:<13} slope measured {slope(g['n'], g['budget']):.2f}, rate "
                     f"{slope(g['n'], g['predicted']):.2f}; c = {g['fitted_c'][0]:.3g}; measured/rate from "
                     f"{ratios[0]:.3g} (n={g['n'][0]}) to {ratios[-1]:.3g} (n={g['n'][-1]})")
    g = df.filter(pl.col("policy") == "two-stage").sort("n")
    pr = (g["budget"] / g["pinned_rate"]).to_numpy()
    lines.append(f"  two-stage against its pinned rate {PINNED_RATE}: slope {slope(g['n'], g['pinned_rate']):.2f}, "
                 f"measured/rate from {pr[0]:.3g} to {pr[-1]:.3g}")
    console.print("log-log slopes over n (a rate holds when the slopes agree and the ratio stays flat):\n"
                  + "\n".join(lines), highlight=False)
    console.print("note: with a ground-truth oracle every query two-stage leaves unanswered after stage 1 gets the "
                  "same stage-2 weight (docs/semantics.md), so its stage 2 is uniform over them: it pays about "
                  f"{PINNED_RATE}, not sum max(m, 1/p_i); etc-adaptive (m each, then elimination) is what pays the "
                  "spec's rate.", highlight=False)
    if mismatches:
        console.print(f"[red]warning[/]: the engine and the closed form disagree on {len(mismatches)} rows; "
                      "the numbers above are not trustworthy", highlight=False)
    console.print(f"wall time {wall:.1f} s", highlight=False)
    if out is not None:
        with atomic_dir(out, "theory") as tmp, write_errors(out):
            df.write_csv(tmp / "theory.csv")
            plot(df, setting, tmp / "theory.png", formats)
        names = ", ".join(str(out / f"theory.{f}") for f in formats)
        console.print(f"wrote {names} and {out / 'theory.csv'}", highlight=False)
    return df
