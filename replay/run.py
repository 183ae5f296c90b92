"""`ttc replay` behind the command line: build the configuration grid, run it, print and write the results."""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import field, fields, make_dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table

from .engine import (
    COMPILE_NOTE,
    SELECT,
    check_budgets,
    check_configs,
    compile_expected,
    get_threads,
    replay,
    set_threads,
)
from .errors import InputError
from .exact import best_of_k, coverage_at_k
from .outputs import check_output, parquet_writer, write_set
from .policies import (
    CISC_TEMP,
    DEEPCONF_ETA,
    DEPTH_POLICIES,
    POLICIES,
    REGISTRY,
    SWEPT,
    RunConfig,
    check_selection_params,
    config_fields,
    supported,
)
from .pool import DEFAULT_POOL, Pool, PoolError, load_pool
from .progress import progress
from .summary import fmt_gain, fmt_mean_se, summarize

ReplayRequest = make_dataclass("ReplayRequest", [
    ("pool", Optional[Path], None),
    ("policies", list, field(default_factory=list)),
    ("budgets", list, field(default_factory=lambda: [4, 8, 16, 32])),
    ("seeds", int, 100),
    ("seed_start", int, 0),
    ("score", str, "gt"),
    ("eliminate", str, "threshold"),
    ("select", str, "bon"),
    ("cisc_temp", float, CISC_TEMP),
    ("deepconf_eta", float, DEEPCONF_ETA),
    ("unit", str, "samples"),
    ("conf", float, 0.95),
    ("out", Optional[Path], None),
    ("per_query", Optional[Path], None),
    ("curve", Optional[Path], None),
    ("threads", Optional[int], None),
    ("force", bool, False),  # replace --out / --per-query / --curve files that another command (or no ttc) wrote
    ("wide", bool, False),  # print every configuration's row (the full grid) instead of the best per policy
    ("prior", Optional[str], None),  # marginal-gain: a column of queries.parquet
    ("side", Optional[str], None),  # side-eb: a column of the responses (a side signal in [0, 1])
    ("invalid_votes", bool, False),  # each query's invalid answers as one answer category (Pool.with_invalid_votes)
    *config_fields(lists=True),
])
ReplayRequest.__module__ = __name__
ReplayRequest.__doc__ = """What `ttc replay` is asked: its own options, then every RunConfig parameter under its own
name (the swept ones, policies.SWEPT, as lists), generated from RunConfig."""


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


RUN_BYTES = 200  # the results of one (configuration, budget, seed) run held in memory, rounded up


def check_seeds(seed_start: int, seeds: int):
    """Every seed seed_start .. seed_start + seeds - 1 must be an int64."""
    lo, hi = SEED_RANGE
    if seed_start < lo or seed_start + seeds - 1 > hi:
        raise InputError(f"--seed-start {seed_start} with --seeds {seeds} leaves the seed range [-2**63, 2**63 - 1]")
    from .errors import check_memory

    # at least one run per seed, each a row of the results (and its engine outputs) held until the end
    check_memory(seeds * RUN_BYTES, f"--seeds {seeds:,} (at least one run each, {RUN_BYTES} bytes a run)",
                 "use fewer seeds")


def check_budget_totals(budgets, n_queries: int):
    """A run's total budget round(b x queries) must fit the engine's integers."""
    if budgets and max(budgets) * n_queries >= MAX_BUDGET_TOTAL:
        raise InputError(f"--budgets {max(budgets):g} x {n_queries:,} queries is beyond the largest total budget "
                         f"({MAX_BUDGET_TOTAL:.3g})")


GRID_FIELDS = SWEPT  # the RunConfig fields a replay sweeps as lists


def fixed_params(req) -> dict:
    """Every other RunConfig field (after the policy), which ReplayRequest holds under the same name: read by name,
    so that a new field reaches every configuration without being threaded by hand."""
    return {f.name: getattr(req, f.name) for f in fields(RunConfig)[1:] if f.name not in GRID_FIELDS}


def build_configs(req, policies: list[str]) -> list[RunConfig]:
    """The cartesian grid of each policy over the parameter lists it uses (others stay at their defaults)."""
    configs = []
    defaults = RunConfig("uniform")
    for pol in policies:
        probe = config_from_options(pol, eliminate=req.eliminate)
        used = probe.used_params()
        grid = {name: (getattr(req, name) or [getattr(defaults, name)]) if name in used
                else [getattr(defaults, name)] for name in GRID_FIELDS}
        for vals in itertools.product(*grid.values()):
            kw = dict(zip(grid.keys(), vals))
            configs.append(config_from_options(pol, **fixed_params(req), **kw))
    return configs


def _console(pipe_width: int = 170, wide: bool = False) -> Console:
    """A terminal's own width; written to a file or a pipe, $COLUMNS if set, else `pipe_width` (ttc replay's
    default screen fits 80 and asks for 100; the wide tables of the other commands are not folded at 170). wide
    (`ttc replay --wide`, asked for by name): never narrower than pipe_width, so that no cell is cut."""
    if Console().is_terminal:
        return Console(width=max(Console().width, pipe_width)) if wide else Console()
    cols = os.environ.get("COLUMNS", "")
    width = int(cols) if cols.isdigit() and int(cols) > 0 else pipe_width
    return Console(width=max(width, pipe_width) if wide else width)


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
    # Every value of every list, whichever policies use it: RunConfig checks the ranges (each parameter's declared
    # one, policies.param_problem), the fixed parameters with the first.
    for name in GRID_FIELDS:
        for value in getattr(req, name):
            if value is not None:
                config_from_options("elimination", **fixed_params(req), **{name: value})
    targets = [(name, Path(t)) for name, t in (("--out", req.out), ("--per-query", req.per_query),
                                                 ("--curve", req.curve)) if t is not None]
    for name, target in targets:
        check_output(target, flag=name, command="replay", reads=[req.pool or DEFAULT_POOL], force=req.force)
    for (n1, t1), (n2, t2) in itertools.combinations(targets, 2):
        if t1.resolve() == t2.resolve():
            raise PoolError(f"{n1} and {n2} are the same file, {t1}")


PER_QUERY_ROW_BYTES = 160  # peak memory per --per-query row (measured: 4.4M rows, 652 MB above a run without it)


def _available_memory() -> int | None:
    from .errors import available_memory

    return available_memory()


def check_per_query_memory(rows: int, seeds: int, n_queries: int, what: str = "--per-query"):
    """Refuse, before the work, a per-query table that cannot fit in memory (it is built whole, then written)."""
    need = rows * seeds * n_queries * PER_QUERY_ROW_BYTES
    have = _available_memory()
    if have is not None and need > 0.8 * have:
        raise PoolError(f"{what} would hold {rows * seeds * n_queries:,} rows ({rows} configurations x budgets, "
                        f"{seeds:,} seeds, {n_queries:,} queries; about {need / 2**30:.1f} GiB) and this machine has "
                        f"{have / 2**30:.1f} GiB available: use fewer seeds, budgets or policies")


def _wants_probes(req) -> bool:
    """load_pool's probes argument: True when a depth policy or option is asked for (a pool without probes is
    refused in one line); else they are not read (parallel-probe runs when it is named)."""
    return bool(set(DEPTH_POLICIES) & set(req.policies)) or bool(req.trace_cap) or req.depth_rule != "whole" \
        or req.probe_cost != "tokens"


def load_for(req: ReplayRequest) -> Pool:
    """The pool a request names, with the columns its policies read and nothing more."""
    # deepconf-online's record lows: read when it is asked for (a pool without them is refused), or when no policy is
    # named and the pool has them (then it is one of the policies the pool supports); never for the others
    return load_pool(req.pool or DEFAULT_POOL, score=req.score, need_tokens=req.unit != "samples", prior=req.prior,
                     side=req.side, lows=("deepconf-online" in req.policies) if req.policies else None,
                     invalid_votes=req.invalid_votes, probes=_wants_probes(req))


def prepare(req: ReplayRequest, pool: Pool | None = None) -> tuple[Pool, list[RunConfig], range]:
    """Validate a request and build its pool (unless given one), configurations and seeds: everything before the
    engine runs, shared by `ttc replay` and the Python API (ttc.replay)."""
    validate_request(req)
    pool = load_for(req) if pool is None else pool.with_invalid_votes() if req.invalid_votes else pool
    if req.invalid_votes and not pool.has_answers:
        raise PoolError("--invalid-votes makes invalid answers one answer category, and this pool has no 'answer' "
                        "column (answer categories)")
    check_budget_totals(req.budgets, pool.n_queries)
    if req.policies:
        policies = list(dict.fromkeys(req.policies))
    else:  # (parallel-probe answers with its own vote: among all the policies only under --select sc)
        policies = [p for p in supported(pool, req.eliminate) if (p not in DEPTH_POLICIES or req.select == "sc")
                    and not REGISTRY[p].slow]
    configs = build_configs(req, policies)
    check_configs(pool, configs, req.select)
    return pool, configs, range(req.seed_start, req.seed_start + req.seeds)


def run_replay(req: ReplayRequest, console: Console | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    console = console or _console(200 if req.wide else 100, wide=req.wide)
    pool, configs, seeds = prepare(req)
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
    with progress(rows * req.seeds, "replaying", "runs", console=console,
                  note=COMPILE_NOTE if compile_expected(pool, configs, req.select) else "") as bar:
        df, pq = replay(pool, configs, req.budgets, seeds, select=req.select, conf=req.conf,
                        cisc_temp=req.cisc_temp, deepconf_eta=req.deepconf_eta,
                        per_query=req.per_query is not None, progress=bar.advance)
    curves = (coverage_at_k(pool) if pool.has_gt else None,
              best_of_k(pool) if pool.has_gt and (req.select == "bon" or req.curve) else None)
    summary = summarize(df, pool, req.select, curves)
    if req.wide:
        console.print(render_table(summary))
    else:
        for t in render_compact(summary, pool.score_name, req.select, req.seeds, console):
            console.print(t)
    exhausted = summary.filter(pl.col("exhausted") > 0)
    if exhausted.height:
        worst = exhausted.sort("exhausted", descending=True).row(0, named=True)
        console.print(f"[yellow]note[/]: {exhausted.height} (configuration, budget) rows ran out of pool on some "
                      f"queries (worst: {worst['config']} at budget {worst['budget']:g}, "
                      f"{worst['exhausted']:.1f} queries per run); those runs are not faithful to live sampling",
                      highlight=False)
    # the outputs are one set (outputs.write_set): all new, or, after a failure or a kill, all as they were
    outputs, said = [], []
    if req.out:
        outputs.append((req.out, parquet_writer(df, "replay")))
        said.append(f"wrote {df.height} runs to {req.out}")
    if req.per_query and pq is not None:
        outputs.append((req.per_query, parquet_writer(pq, "replay")))
        said.append(f"wrote {pq.height} per-query rows to {req.per_query}")
    if req.curve:
        cov = curves[0]
        outputs.append((req.curve, parquet_writer(pl.DataFrame({"k": np.arange(1, len(cov) + 1), "coverage": cov,
                                                                "best_of_k": curves[1]}), "replay")))
        said.append(f"wrote uniform's exact curves for k = 1..{len(cov)} to {req.curve}")
    if outputs:
        write_set(outputs)
    for line in said:
        console.print(line, highlight=False)
    return df, summary


def _shown_metrics(summary: pl.DataFrame, score: str, select: str) -> list[str]:
    """The metrics the short view shows: coverage, and accuracy unless it repeats coverage (best-of-N by ground
    truth selects a correct response exactly when one was drawn); none without ground truth."""
    if summary.height == 0 or not summary["coverage"].is_not_nan().any():
        return []
    return ["coverage"] if score == "gt" and select == "bon" else ["coverage", "accuracy"]


def render_compact(summary: pl.DataFrame, score: str, select: str, seeds: int, console: Console) -> list:
    """The default screen (issue 28): what adaptive allocation buys on this pool, at a glance and in a standard
    terminal. Per metric, one row per policy at its best configuration at each budget (chosen after the fact on
    these seeds, so optimistic where a policy has several; `--wide` prints every configuration) beside uniform's
    exact expectation, then the efficiency gain of the same rows; budgets that do not fit the width go to a
    table of their own rather than into cut cells."""
    from rich import box
    from rich.measure import Measurement

    s = summary.filter(~pl.col("config").str.starts_with("two-stage best"))
    budgets = sorted(s["budget"].unique().to_list())
    policies = s["policy"].unique(maintain_order=True).to_list()
    out = []
    metrics = _shown_metrics(s, score, select)
    several = s.group_by("policy").agg(pl.col("config").n_unique().alias("k")).filter(pl.col("k") > 1)
    for metric in metrics or ["samples_per_query"]:
        best = {}
        for (p, b), g in s.group_by("policy", "budget", maintain_order=True):
            best[(p, b)] = g.sort(metric, descending=True, nulls_last=True, maintain_order=True).row(0, named=True)
        blocks = []
        if metric != "samples_per_query":
            rows = [["uniform (exact)"] + [fmt_mean_se(best[(policies[0], b)][f"uniform_{metric}"], None)
                                           for b in budgets]]
            rows += [[p] + [fmt_mean_se(best[(p, b)][metric], best[(p, b)][f"{metric}_se"]) for b in budgets]
                     for p in policies]
            title = (f"{metric}: mean ± standard error over {seeds} seeds" +
                     ("; each policy at its best configuration per budget (--wide: all)" if several.height else ""))
            blocks.append((title, rows))
            if s[f"gain_{metric}"].is_nan().all() and s[f"uniform_{metric}"].is_not_nan().any():
                out.append(f"no efficiency gain on {metric}: uniform's exact {metric} falls as its budget grows "
                           "on this score (it is not correctness), so a score names no one uniform budget")
            else:
                rows = [[p] + [fmt_gain(best[(p, b)][f"gain_{metric}"], best[(p, b)][f"gain_{metric}_censored"])
                               for b in budgets] for p in policies]
                blocks.append((f"efficiency gain on {metric}: the uniform budget that matches it / the budget used",
                               rows))
        else:
            rows = [[p] + [f"{best[(p, b)][metric]:.2f}" for b in budgets] for p in policies]
            blocks.append(("samples per query (no ground truth: no coverage or accuracy)", rows))
        for title, rows in blocks:
            header = ["policy"] + [f"budget {b:g}" for b in budgets]
            # budgets in groups that fit the width, each group a table with the policy column
            def table(k, j, title=title, header=header, rows=rows):
                t = Table(title=title, title_style="dim", box=box.SIMPLE_HEAD, title_justify="left")
                t.add_column("policy", no_wrap=True)
                for c in range(k, j):
                    t.add_column(header[c], justify="right", no_wrap=True)
                for r in rows:
                    t.add_row(r[0], *r[k:j])
                return t

            k = 1
            while k < len(header):
                j = k + 1
                while j < len(header) and Measurement.get(
                        console, console.options.update_width(10_000), table(k, j + 1)).maximum <= console.width:
                    j += 1
                out.append(table(k, j))
                k = j
    return out


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


GROWTH_BOUND = 3.0  # issue 28: every policy's cost per decision within 3x from 500 to 50,000 queries


def _bench_work(spec, growth: tuple, growth_decisions: int, depth: bool, total: float, console: Console):
    """run_bench's timings under one progress bar: the grid and reference rows, the depth rows (or None) and the growth
    table (or None), with the growth table's kernels compiled on the other core on a first run (bench.side_compile)."""
    from .bench import BENCH_COMPILE_NOTE, bench, bench_compile_expected, depth_sizes, side_compile
    from .bench import growth as growth_table

    d = None
    side = side_compile(growth, spec.size)  # (a first run: the growth table's kernels on the other core)
    try:
        with progress(max(1, round(total)), "benchmarking", "estimated s of work", console=console,
                      note=BENCH_COMPILE_NOTE if bench_compile_expected(spec) else "") as bar:
            advance = bar.advance
            df, info = bench(spec, progress=advance, threads=get_threads(), side=side)
            if depth:  # the depth policies on a probed pool of their own (bench.bench_depth)
                from .bench import bench_depth

                d = bench_depth(**depth_sizes(spec), repeats=spec.repeats,
                                reference_seeds=max(spec.reference_seeds, 1), progress=advance, threads=get_threads())
            g = (growth_table(ns=growth, size=spec.size, decisions=growth_decisions, progress=advance)
                 if growth else None)
    finally:
        if side is not None and side.poll() is None:  # (interrupted before bench waited for it)
            side.terminate()
    return df, info, d, g


def _growth_table(g, growth, responses: int, console: Console) -> None:
    """The growth table and issue 28's check under it: per policy its cost per decision at each size, the largest's
    over the smallest's, and beside them the control pool's (bench.growth_cells), which splits that growth into the
    pool's bytes and the query count."""
    from .bench import GROWTH_ROUNDS, growth_ratios

    ratios = growth_ratios(g)
    ctrl = g.filter(pl.col("responses") != responses)
    sizes = sorted(set(growth))
    t = Table(title="growth with pool size at budget 8: CPU ns per decision on one thread (median of "
              f"{GROWTH_ROUNDS} rounds, the pools in turn) and the largest pool's over the smallest's (flat = 1x)"
              + (f"; control: {ctrl['queries'][0]:,} queries x {ctrl['responses'][0]:,} responses, the largest pool's "
                 f"bytes with the smallest's queries; ÷ control: the largest pool's over it, the growth the query "
                 "count makes" if ctrl.height else ""), title_style="dim")
    t.add_column("policy")
    for n in sizes:
        t.add_column(f"n={n:,}", justify="right")
    if len(sizes) > 1:
        t.add_column("growth", justify="right")
    if ctrl.height:
        t.add_column("control", justify="right")
        t.add_column("÷ control", justify="right")
    for p, r in ratios.items():
        t.add_row(p, *[f"{v:.1f}" for v in r.ns], *([f"{r.ratio:.2f}x"] if len(sizes) > 1 else []),
                  *([f"{r.control_ns:.1f}", f"{r.control_ratio:.2f}x"] if ctrl.height else []))
    console.print(t)
    if len(sizes) < 2:
        return
    # issue 28's check, with what the table cannot say on its own
    over = {p: r.ratio for p, r in ratios.items() if r.ratio > GROWTH_BOUND}
    line = (f"growth check: {len(ratios) - len(over)} of {len(ratios)} policies within {GROWTH_BOUND:g}x from "
            f"{sizes[0]:,} to {sizes[-1]:,} queries"
            + (f"; beyond: {', '.join(f'{p} {r:.2f}x' for p, r in over.items())}" if over else ""))
    if ctrl.height:
        worst = max(ratios.items(), key=lambda kv: kv[1].control_ratio)
        within = sum(r.control_ratio <= GROWTH_BOUND for r in ratios.values())
        line += (f". At the same pool bytes (the control) {within} of {len(ratios)} within {GROWTH_BOUND:g}x from "
                 f"{sizes[0]:,} to {sizes[-1]:,} queries (the most, {worst[0]} {worst[1].control_ratio:.2f}x): "
                 "what the query count adds (the heap's log n, more per-query state); the rest of a policy's growth "
                 "is the pool's bytes, lines further from the core (docs/performance.md, 'Growth with the pool')")
    console.print(line, highlight=False)


def run_bench(queries, responses, budgets, seeds, repeats, reference_seeds, growth, threads=None,
              console: Console | None = None, depth: bool = True, reference_s: float | None = None,
              growth_decisions: int | None = None):
    from .bench import (
        GROWTH_DECISIONS,
        REFERENCE_S,
        BenchSpec,
        estimate_s,
        growth_cells,
    )
    from .progress import _duration

    console = console or _console()
    if queries < 1 or responses < 1 or seeds < 1 or repeats < 1 or reference_seeds < 0:
        raise PoolError("--queries, --responses, --seeds and --repeats must be >= 1, --reference-seeds >= 0")
    reference_s = REFERENCE_S if reference_s is None else reference_s
    growth_decisions = GROWTH_DECISIONS if growth_decisions is None else growth_decisions
    if not 0 <= reference_s < math.inf:  # NaN fails
        raise PoolError(f"--reference-s must be in [0, inf) (0: every reference run to its end), got {reference_s}")
    check_budgets(budgets)
    if growth_decisions < 1:
        raise PoolError(f"--growth-decisions must be >= 1, got {growth_decisions}")
    if any(n < 1 for n in growth):
        raise PoolError(f"--growth sizes must be >= 1, got {growth}")
    from .errors import check_memory
    from .synth import ROW_BYTES

    check_memory(seeds * RUN_BYTES, f"--seeds {seeds:,}", "use fewer seeds")
    check_memory(queries * responses * ROW_BYTES, f"a synthetic pool of {queries:,} queries x {responses:,} responses",
                 "use fewer --queries or --responses")
    held = sum(n * r for n, r in growth_cells(growth, responses))  # (the growth table holds its pools together)
    check_memory(held * ROW_BYTES, f"the growth table's pools ({held:,} responses, its control's included)",
                 "use smaller --growth sizes or fewer --responses")
    set_threads(threads)
    spec = BenchSpec(n=queries, size=responses, budgets=tuple(budgets), seeds=seeds, repeats=repeats,
                     reference_seeds=reference_seeds, reference_s=reference_s)
    est = estimate_s(spec, ns=tuple(growth), decisions=growth_decisions, threads=get_threads(), depth=depth)
    total = sum(est.values())
    console.print(f"[bold]ttc bench[/]: about {_duration(total)} at these sizes (the engine "
                  f"{_duration(est['engine'])}, the reference {_duration(est['reference'])}"
                  + (f", the depth rows {_duration(est['depth'])}" if depth else "")
                  + f", the growth table {_duration(est['growth'])}; estimated from the sizes at each policy's "
                  "cost per decision measured on a 2-core machine, not counting a first compile)", highlight=False)
    # (progress in estimated seconds: each step, a row's timings or a reference run, advances it by its estimate)
    df, info, d, g = _bench_work(spec, tuple(growth), growth_decisions, depth, total, console)
    console.print(f"[bold]ttc bench[/]: synthetic pool {queries} queries x {responses} responses, "
                  f"{get_threads()} threads, median of {repeats} repeats; first call (compile or cache "
                  f"load) {info['warmup_s']:.2f} s", highlight=False)
    console.print(f"full grid: {len(spec.policies)} policies and {len(spec.rules)} rule(s) under elimination x "
                  f"{len(budgets)} budgets x {seeds} seeds = "
                  f"{info['configs'] * seeds} runs in {info['full_grid_s']:.3f} s (one timing)", highlight=False)
    t = Table(title="per policy and budget (a decision = one response handed to one query)", title_style="dim")
    for col in ("pool", "policy", "budget", "runs", "wall s", "decisions", "decisions/s", "reference dec/s",
                "reference timed on", "speed-up"):
        t.add_column(col, justify="left" if col in ("pool", "policy") else "right")
    for r in df.iter_rows(named=True):
        none = r["reference_decisions_per_s"] != r["reference_decisions_per_s"]
        t.add_row(r["pool"], r["policy"], f"{r['budget']:g}", str(r["runs"]), f"{r['wall_s']:.4f}",
                  f"{r['decisions']:,}", f"{r['decisions_per_s']:.3g}",
                  "—" if none else f"{r['reference_decisions_per_s']:.3g}",
                  "—" if none else f"{r['reference_decisions']:,}" if r["reference_decisions"] == r["reference_of"]
                  else f"{r['reference_decisions']:,} of {r['reference_of']:,}",
                  "—" if none else f"{r['speedup']:.0f}x")
    console.print(t)
    if any(r["reference_decisions"] < r["reference_of"] for r in df.iter_rows(named=True)):
        console.print(f"reference timed on: the decisions of its run(s) it made in the first {reference_s:g} s after "
                      "its first decision, where fewer than the run's (--reference-s; its rate counts everything "
                      "before its first decision)", highlight=False)
    if depth:
        from .bench import DEPTH_MULTIPLES

        t = Table(title="depth (issue 30): a synthetic probed pool, token budgets in multiples of its median trace "
                  f"({', '.join(f'{m:g}x' for m in DEPTH_MULTIPLES)}); a decision = one trace started, the reference "
                  "the policy's twin on the same runs", title_style="dim")
        for col in ("pool", "policy", "budget", "runs", "wall s", "decisions/s", "reference dec/s", "speed-up"):
            t.add_column(col, justify="left" if col in ("pool", "policy") else "right")
        for r in d.iter_rows(named=True):
            t.add_row(r["pool"], r["policy"], f"{r['budget']:g}x", str(r["runs"]), f"{r['wall_s']:.4f}",
                      f"{r['decisions_per_s']:.3g}", f"{r['reference_decisions_per_s']:.3g}", f"{r['speedup']:.0f}x")
        console.print(t)
        df = pl.concat([df, d.with_columns(pl.col("budget").cast(df.schema["budget"]))], how="diagonal_relaxed")
    if growth:
        _growth_table(g, growth, responses, console)
    return df


def run_info(path: Path, plot: Path | None = None, console: Console | None = None, force: bool = False) -> dict:
    from .info import plot_curves, pool_info

    console = console or _console()
    if plot is not None:
        check_output(plot, flag="--plot", command="info", reads=[path], force=force, kind="figure")
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
