"""`ttc bench`: how fast the replay engine is, against its own plain-Python reference on the same work."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from .engine import run_grid
from .policies import ELIMINATION_RULES, REGISTRY, Cost, RunConfig
from .reference import run_reference
from .rng import permutation, query_order
from .synth import make_pool
from .tables import make_tables

# every policy a synthetic pool (replay/synth.py: no token confidences) can run: all but deepconf-online and the depth
# ones. The slow ones too (pets): `slow` keeps a policy out of the default grids for its compile (run_one's reading
# specialisation), which the bench compiles anyway for RULES, and its decisions are timed like the others'
POLICIES = tuple(p for p, e in REGISTRY.items() if not {"lows", "probes"} & e.needs)

# the elimination rules timed on rows of their own, under elimination (a policy's row runs its default rule,
# threshold): the per-query stops of issue 29, whose checks cost more than a count comparison
RULES = ("boinf", "mmc", "lbayes")


# A reference run is timed on its decisions up to the first one this many seconds after its first decision, not to
# its end: boinf's reference (a Python Monte Carlo of 1,000 draws per check, 50-100 decisions a second) took 7 minutes
# of the default bench run to the end. Its rate stays decisions over seconds, the seconds from the call (setup, and a
# plan made before the first decision, as pets-online's, always whole); the table says on how many decisions.
REFERENCE_S = 3.0


@dataclass
class BenchSpec:
    n: int = 500
    size: int = 64
    budgets: tuple = (4, 8, 16, 32)
    seeds: int = 100
    repeats: int = 3
    policies: tuple = tuple(POLICIES)
    reference_seeds: int = 1  # the reference runs this many seeds per (policy, budget); 0 = skip it
    rules: tuple = RULES  # elimination rules timed under `elimination` besides the policies at their defaults
    reference_s: float = REFERENCE_S  # a reference run stops this long after its first decision (0: never)


GROWTH_NS = (500, 5000, 50000)
GROWTH_DECISIONS = 400_000  # per growth cell and round (seeds scaled to it)
GROWTH_ROUNDS = 3  # each cell timed this many times, the sizes in turn; the median kept
GROWTH_N0 = 500  # the pool size the engine's costs (policies.Cost) were measured at
# what a decision costs grows by its memory traffic's share, at most GROWTH_MEM_NS, times (n / GROWTH_N0) **
# GROWTH_EXP - 1 (the growth table; pets' and pets-online's compute does not grow with the pool)
GROWTH_EXP, GROWTH_MEM_NS = 0.3, 300.0
GROWTH_ROUND_S = 0.5  # a cell's round makes fewer decisions than GROWTH_DECISIONS where they take longer (growth_runs)
POOL_S_PER_RESPONSE = 2e-7  # synth.make_pool's cost
REF_SETUP_S = 6e-7  # per response: run_reference's lists of the pool and its input checks


def growth_cells(ns, size: int) -> list[tuple[int, int]]:
    """The growth table's pools as (queries, responses per query): one per size of `ns` with `size` responses each,
    and, when the sizes differ, a control with the smallest size's queries and the largest pool's responses
    (500 x 6,400 beside 50,000 x 64). Its decisions do the work of the smallest pool's (the same heap, the same
    per-query state) on as many bytes as the largest's, so the largest's cost over the control's is what the query
    count adds and the control's over the smallest's is what the pool's bytes add, the memory hierarchy's share
    (docs/performance.md, "Growth with the pool")."""
    cells = [(n, size) for n in dict.fromkeys(ns)]
    lo, hi = min(ns, default=0), max(ns, default=0)
    if lo < hi and round(size * hi / lo) > size:
        cells.append((lo, round(size * hi / lo)))
    return cells


def _costs(c: RunConfig) -> tuple[Cost, ...]:
    """Configuration c's costs (policies.Cost): its policy's, and its elimination rule's check where it has one."""
    p = REGISTRY[c.policy]
    return (p.cost, ELIMINATION_RULES[c.eliminate].cost) if "eliminate" in p.params else (p.cost,)


def _configs(spec: "BenchSpec") -> list[RunConfig]:
    return [RunConfig(p) for p in spec.policies] + [RunConfig("elimination", eliminate=r) for r in spec.rules]


def engine_run_s(c: RunConfig, b: float, n: int) -> float:
    """CPU seconds of one engine run of c on n queries at b draws a query (one thread)."""
    return sum(k.engine_run_s + 1e-9 * Cost.at(k.engine_ns, b) * b * n for k in _costs(c))


def reference_run_s(c: RunConfig, b: float, n: int, size: int, cap_s: float) -> float:
    """Seconds of one reference run of c on n x size responses at b draws a query: its setup, what it does before its
    first decision, and its decisions up to cap_s after the first (time_reference)."""
    ks = _costs(c)
    per = sum(1e-6 * (Cost.at(k.ref_us, b) + k.ref_scan_us * n) for k in ks)
    run = b * n * per
    return REF_SETUP_S * n * size + sum(k.ref_run_s for k in ks) + (min(run, cap_s + per) if cap_s else run)


def estimate_s(spec: BenchSpec, ns=GROWTH_NS, decisions: int = GROWTH_DECISIONS, growth_rounds: int = GROWTH_ROUNDS,
               threads: int = 2, depth: bool = False) -> dict:
    """Seconds each phase of `ttc bench` will take, from the sizes alone and each configuration's costs
    (policies.Cost): the engine's timings (the full grid once, each row `repeats` times, on `threads`), the
    reference's runs (each up to spec.reference_s after its first decision), the depth rows, the growth table."""
    runs = sum(engine_run_s(c, b, spec.n) for c in _configs(spec) for b in spec.budgets)
    engine = (1 + spec.repeats) * spec.seeds * runs / threads
    reference = spec.reference_seeds * sum(reference_run_s(c, b, spec.n, spec.size, spec.reference_s)
                                           for c in _configs(spec) for b in spec.budgets)
    growth = sum(n * r * POOL_S_PER_RESPONSE
                 + sum(growth_cell_s(p, n, decisions, growth_rounds, bytes_n=n * r / spec.size) for p in spec.policies)
                 for n, r in growth_cells(ns, spec.size))
    out = {"engine": engine, "reference": reference, "growth": growth}
    if depth:
        out["depth"] = depth_estimate_s(**depth_sizes(spec), repeats=spec.repeats,
                                        reference_seeds=max(spec.reference_seeds, 1), threads=threads)
    return out


def _growth_run_s(policy: str, n: int, budget: int, bytes_n: float | None) -> float:
    """Estimated CPU seconds of one growth run (seed): its decisions at the policy's costs, each dearer on a larger
    pool (GROWTH_EXP; a pool as large as `bytes_n` queries' of the table's size: the control of growth_cells has the
    largest size's)."""
    c = RunConfig(policy)
    mem = min(GROWTH_MEM_NS, sum(Cost.at(k.engine_ns, budget) for k in _costs(c)))
    grow = max(0.0, ((bytes_n or n) / GROWTH_N0) ** GROWTH_EXP - 1)
    return engine_run_s(c, budget, n) + 1e-9 * budget * n * mem * grow


def growth_runs(policy: str, n: int, decisions: int, budget: int = 8, bytes_n: float | None = None) -> int:
    """The seeds of one growth cell's round: about `decisions` decisions, fewer for a policy whose decisions would
    take more than GROWTH_ROUND_S of CPU (pets-online's at 500 queries, its plan per run: 3.7 s a round at 400,000
    decisions; a median of three half-second rounds is as steady a rate)."""
    runs = max(1, decisions // (budget * n))
    return max(1, min(runs, int(GROWTH_ROUND_S / _growth_run_s(policy, n, budget, bytes_n))))


def growth_cell_s(policy: str, n: int, decisions: int, rounds: int, budget: int = 8, bytes_n: float | None = None
                  ) -> float:
    """CPU seconds of one growth cell on one thread: one seed to warm up, then `rounds` timings of growth_runs'
    seeds."""
    run = _growth_run_s(policy, n, budget, bytes_n)
    return (rounds * growth_runs(policy, n, decisions, budget, bytes_n) + 1) * run


# A first `ttc bench` compiles two specialisations of the kernel every policy runs in before its first timing: the
# arrays' (17-18 s) and the one with the reading rules' and policies' code (RULES, pets, uab; 73 s), measured on the
# 2-core machine with an empty cache (docs/performance.md, "ttc bench").
BENCH_COMPILE_NOTE = ("compiling the engine's kernels once (about 1 min 30 s on a 2-core machine; later runs load "
                      "them from numba's cache)")


def bench_compile_expected(spec: BenchSpec) -> bool:
    """Whether bench(spec)'s grids will compile a kernel (neither in this process nor in numba's cache index): the
    progress bar then says so rather than sitting at 0 for a minute and a half. False when numba's cache cannot be
    read (only the note is lost)."""
    from .engine import grid_kernels, kernel_missing

    have = grid_kernels()
    if have is None:
        return False
    pool = make_pool(n=spec.n, size=spec.size, seed=0)
    configs = _configs(spec)
    return any(kernel_missing(have, pool, cs) for cs in [configs[:1], configs])


def _median_time(fn, repeats, after=None):
    """(median seconds of `repeats` calls of fn, its last output); after() is called after each (progress)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        if after:
            after()
    return statistics.median(times), out


class _Stop(Exception):
    """Raised from the reference's on_draw at the time cap: the run ends there."""


def time_reference(pool, c: RunConfig, total: int, seed: int, cap_s: float) -> tuple[int, float, bool]:
    """One reference run of configuration c on `seed` with budget `total`, timed from the call: (decisions made,
    seconds, whether it ran to its end). With cap_s it stops at its first decision more than cap_s after its first
    one (everything before the first decision, a plan included, always whole)."""
    perm = permutation(pool.off, pool.qkeys, seed)
    rank = query_order(pool.qkeys, seed)[0]
    seen = {}

    def on_draw(run):
        now = time.perf_counter()
        first = seen.setdefault("first", now)
        seen["decisions"] = run.samples_used
        if now - first > cap_s:
            raise _Stop

    t = time.perf_counter()
    try:
        r = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, policy=c.policy,
                          elim=c.eliminate, budget_total=total, on_draw=on_draw if cap_s else None)
    except _Stop:
        return seen["decisions"], time.perf_counter() - t, False
    return r["samples_used"], time.perf_counter() - t, True


def bench(spec: BenchSpec, progress=None, threads: int = 2, side=None) -> tuple[pl.DataFrame, dict]:
    """Rows per (policy, budget): runs, median wall time, decisions/s, and the speed-up over the reference.

    A decision is one pull (K = 1: one response handed to one query). The reference is timed on
    `reference_seeds` seeds of the same pool, policy and budget (the median of their decisions per second, as
    the engine's time is the median of its repeats), each run up to spec.reference_s after its first decision
    (reference_decisions: how many decisions its rate was measured on, of reference_of: its runs' decisions in
    the engine), and the ratio compares decisions per second. `progress` is told the estimated seconds of each
    step done (estimate_s's), so that a bar in those units moves with the time. side: a process compiling other
    kernels meanwhile (side_compile's) or None; it is waited for before the first timing, so that no timing shares
    the machine with it."""
    step = progress or (lambda s: None)
    pool = make_pool(n=spec.n, size=spec.size, seed=0)
    tables = make_tables(spec.size, 0.95, sc_beta=False)
    seeds = np.arange(spec.seeds)
    configs = _configs(spec)
    rows_cfg = [c for c in configs for _ in spec.budgets]
    totals = np.array([[int(b * spec.n)] * spec.seeds for _ in configs for b in spec.budgets], np.int64)
    row_engine = [spec.seeds * engine_run_s(c, b, spec.n) / threads for c in configs for b in spec.budgets]
    t0 = time.perf_counter()
    run_grid(pool, rows_cfg[:1], totals[:1, :1], seeds[:1], tables)  # compile or load the kernels
    warmup = time.perf_counter() - t0
    # (the full grid once: its rows are timed `repeats` times each below, and at the defaults a full grid is a
    # quarter of the engine's time, most of it pets', pets-online's, boinf's and lbayes' rows; its runs tick the
    # progress as they end, an equal share each)
    t0 = time.perf_counter()
    run_grid(pool, rows_cfg, totals, seeds, tables, tick=lambda k: step(sum(row_engine) * k / totals.size))
    full = time.perf_counter() - t0
    if side is not None:
        side.wait()
    # Every engine row is timed before any reference run: on the 2-core VM this was measured on, the engine's
    # calls in the first ~70 ms after a second of single-threaded Python ran 1.6x slower in 2 trials of 4
    # (the idle core coming back), which would charge the machine's wake-up to the engine.
    rows = []
    for (c, b), est in zip([(c, b) for c in configs for b in spec.budgets], row_engine, strict=True):
        bt = np.full((1, spec.seeds), int(b * spec.n), np.int64)
        wall, (_, out_i, _, _) = _median_time(lambda c=c, bt=bt: run_grid(pool, [c], bt, seeds, tables),
                                              spec.repeats, lambda est=est: step(est))
        decisions = int(out_i[0, :, 0].sum())
        rows.append({"pool": f"{spec.n}x{spec.size}", "policy": c.label(), "budget": b, "runs": spec.seeds,
                     "wall_s": wall, "decisions": decisions, "decisions_per_s": decisions / wall,
                     "reference_decisions_per_s": float("nan"), "speedup": float("nan"),
                     "reference_decisions": 0,
                     "reference_of": int(out_i[0, :spec.reference_seeds, 0].sum())})
    for row, c in zip(rows, rows_cfg, strict=True):
        if not spec.reference_seeds:
            break
        rates = []
        for s in range(spec.reference_seeds):
            d, dt, _ = time_reference(pool, c, int(row["budget"] * spec.n), s, spec.reference_s)
            rates.append(d / dt)
            row["reference_decisions"] += d
            step(reference_run_s(c, row["budget"], spec.n, spec.size, spec.reference_s))
        row["reference_decisions_per_s"] = statistics.median(rates)  # robust to one preempted run
        row["speedup"] = row["decisions_per_s"] / row["reference_decisions_per_s"]
    return pl.DataFrame(rows), {"full_grid_s": full, "warmup_s": warmup, "configs": len(rows_cfg),
                                "seeds": spec.seeds}


def _growth_big_pool(size: int):
    """The smallest synthetic pool of `size` responses a query whose grids read the packed records (engine.packed_type:
    at least PREFETCH_FROM responses), as the growth table's larger pools do."""
    from .kernel import PREFETCH_FROM

    return make_pool(n=-(-PREFETCH_FROM // size), size=size, seed=0)


def growth_kernels_missing(ns, size: int, policies=tuple(POLICIES)) -> list[str]:
    """The policies whose kernel for the growth table's large pools (the packed records' specialisation of the kernel
    every policy runs in) is neither compiled in this process nor in numba's cache index: [] when no size reaches
    PREFETCH_FROM responses, or when numba's cache cannot be read (then nothing can be compiled ahead for this
    process either)."""
    from .engine import grid_kernels, kernel_missing
    from .kernel import PREFETCH_FROM

    have = grid_kernels()
    if have is None or not any(n * size >= PREFETCH_FROM for n in ns):
        return []
    pool = _growth_big_pool(size)
    return [p for p in policies if kernel_missing(have, pool, [RunConfig(p)])]


def compile_growth_kernels(size: int, policies) -> None:
    """Compile the growth table's large-pool kernels for these policies into numba's cache: a run of each at budget 1
    on the smallest pool that reads the packed records (the types, not the sizes, make a kernel). `ttc bench` runs it
    in a process of its own at low priority while it compiles the small pool's kernels, on the core that compile
    leaves idle (side_compile)."""
    import os

    if hasattr(os, "nice"):
        os.nice(10)  # (a machine of one core: the bench's own compile first)
    pool = _growth_big_pool(size)
    tables = make_tables(size, 0.95, sc_beta=False)
    for p in policies:
        run_grid(pool, [RunConfig(p)], np.full((1, 1), pool.n_queries, np.int64), np.arange(1), tables)


def side_compile(ns, size: int, policies=tuple(POLICIES)):
    """Start compile_growth_kernels in another process (a subprocess.Popen) for the growth table's kernels numba's
    cache lacks (a first `ttc bench`: ~1 min of compile the table would otherwise wait for, docs/performance.md, "ttc
    bench"), or None when none is missing. numba writes each kernel to its cache as it is compiled, and this process
    loads it from there when the table runs it; a kernel the other process has not finished is compiled here as
    before, so a failure there costs only the time it would have saved (its output is discarded: it would cut into
    the progress line). The child gets this process's sys.path, so it imports the same ttc, and runs nothing else
    of it (multiprocessing's spawn re-ran the caller's script, which a script without a __main__ guard cannot take)."""
    import subprocess
    import sys

    missing = growth_kernels_missing(ns, size, policies)
    if not missing:
        return None
    code = (f"import sys; sys.path[:] = {sys.path!r}; from {__name__} import compile_growth_kernels; "
            f"compile_growth_kernels({size!r}, {tuple(missing)!r})")
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:  # (no interpreter to start: the table compiles them itself, as before)
        return None


def growth(ns=GROWTH_NS, size=64, budget=8, decisions=GROWTH_DECISIONS, rounds=GROWTH_ROUNDS,
           policies=tuple(POLICIES), progress=None) -> pl.DataFrame:
    """Cost per decision as the pool grows, at a fixed amount of work per point (seeds scaled so each point makes
    about `decisions` decisions a round, growth_runs): flat = linear work, a slow rise = the heap's log n and the memory
    hierarchy, which growth_cells' control pool tells apart. Each cell is timed in CPU time of the one thread that
    runs it (the kernel runs on this thread), the pools in turn round after round (in order, then backwards) and the
    median of the rounds kept: on a machine other jobs share, wall time moved one cell 2x between runs, while one
    thread's CPU time and the interleaving keep the sizes comparable (docs/performance.md, "Growth with the pool")."""
    from .engine import get_threads, set_threads

    step = progress or (lambda s: None)
    cells = growth_cells(ns, size)

    def cell_s(p, n, r, k):  # growth_cell_s of this cell at k rounds (the control as large as the largest pool)
        return growth_cell_s(p, n, decisions, k, budget, bytes_n=n * r / size)

    times = {(p, c): [] for p in policies for c in cells}
    runs = {}
    threads = get_threads()
    set_threads(1)
    try:
        pools, tables = {}, {}
        for n, r in cells:
            pools[n, r] = make_pool(n=n, size=r, seed=0)
            if r not in tables:
                tables[r] = make_tables(r, 0.95, sc_beta=False)
            step(n * r * POOL_S_PER_RESPONSE)
        for p in policies:
            for n, r in cells:  # compile or load, and touch the pool once
                run_grid(pools[n, r], [RunConfig(p)], np.full((1, 1), budget * n, np.int64), np.arange(1), tables[r])
                step(cell_s(p, n, r, 0))
        for k in range(rounds):
            for p in policies:
                for n, r in (cells if k % 2 == 0 else cells[::-1]):
                    seeds = np.arange(growth_runs(p, n, decisions, budget, bytes_n=n * r / size))
                    bt = np.full((1, len(seeds)), budget * n, np.int64)
                    t = time.thread_time()
                    _, out_i, _, _ = run_grid(pools[n, r], [RunConfig(p)], bt, seeds, tables[r])
                    cpu = time.thread_time() - t
                    d = int(out_i[0, :, 0].sum())
                    times[p, (n, r)].append(cpu / max(1, d))
                    runs[p, (n, r)] = (len(seeds), d)
                    step(cell_s(p, n, r, 1) - cell_s(p, n, r, 0))
    finally:
        set_threads(threads)
    rows = []
    for p in policies:
        for n, r in cells:
            per = statistics.median(times[p, (n, r)])
            rows.append({"queries": n, "responses": r, "policy": p, "budget": budget, "runs": runs[p, (n, r)][0],
                         "rounds": rounds, "decisions": runs[p, (n, r)][1], "cpu_ns_per_decision": 1e9 * per,
                         "decisions_per_s": 1 / per})
    return pl.DataFrame(rows)


class Growth(NamedTuple):
    """A policy's line of the growth table: its CPU ns per decision at each size (ascending) and the largest's over
    the smallest's; with a control pool (growth_cells), its ns there and the largest's over it (None without)."""
    ns: list
    ratio: float
    control_ns: float | None
    control_ratio: float | None


def growth_ratios(g: pl.DataFrame) -> dict[str, Growth]:
    """Per policy, its Growth (the growth check: a policy whose work per decision grows with the pool shows it
    here, and its control ratio says how much of that is the query count rather than the pool's bytes)."""
    out = {}
    size = g["responses"].min()
    for p in g["policy"].unique(maintain_order=True):
        mine = g.filter(pl.col("policy") == p)
        sub = mine.filter(pl.col("responses") == size).sort("queries")
        ns = sub["cpu_ns_per_decision"].to_list()
        ctrl = mine.filter(pl.col("responses") != size)["cpu_ns_per_decision"].to_list()
        c = ctrl[0] if ctrl else None
        out[p] = Growth(ns, ns[-1] / ns[0], c, ns[-1] / c if c else None)
    return out


# ------------------------------------------------------------------------------------------------------- depth
# The depth policies (issue 30) on a synthetic probed pool, each against its reference twin (replay/reference_depth.py;
# a width policy under a depth rule against replay/reference.py on the stopped traces): parallel-probe and cmc at
# their defaults (AutoTTS's evaluator's), and elimination with sc-beta under the stability rule. Token budgets in
# multiples of the pool's median trace length, as the leaderboard's.
DEPTH_CONFIGS = (("parallel-probe", {}), ("cmc", {}),
                 ("elimination", {"eliminate": "sc-beta", "depth_rule": "stability", "depth_m": 3}))
DEPTH_MULTIPLES = (1, 4, 16)
PROBE_STEP = 500  # tokens between probes, as AutoTTS's
DEPTH_N, DEPTH_SIZE, DEPTH_SEEDS = 100, 64, 50  # the depth rows' largest pool and seeds
DEPTH_S = 11.0  # bench_depth at its defaults, CPU seconds (depth_estimate_s)


def probed_synth(n: int = 100, size: int = 64, seed: int = 0):
    """make_pool's queries (correctness and answers: answer 0 the correct one) as reasoning traces probed every
    PROBE_STEP tokens: 10 to 60 probes each (5,000 to 30,000 tokens, AutoTTS's range), each probe the trace's final
    answer with a probability rising from 0.2 to 1 along the trace, else a wrong or no answer (so the stability rule
    and the consensus stops have something to find, late)."""
    import dataclasses

    pool = make_pool(n=n, size=size, seed=seed, tokens=False)
    rng = np.random.default_rng([seed, 0xDE])
    total = int(pool.off[-1])
    k = rng.integers(10, 61, total)
    tok = PROBE_STEP * k + rng.integers(1, PROBE_STEP, total)
    poff = np.zeros(total + 1, np.int64)
    np.cumsum(k, out=poff[1:])
    at = np.arange(int(poff[-1])) - np.repeat(poff[:-1], k)  # each probe's place in its trace, 0 ..
    final = np.repeat(pool.ans, k)
    keep = rng.random(len(at)) < 0.2 + 0.8 * (at + 1) / np.repeat(k, k)
    pans = np.where(keep, final, rng.integers(-1, 4, len(at))).astype(np.int64)
    return dataclasses.replace(pool, tok=tok.astype(np.int64), has_tokens=True, probe_off=poff,
                               probe_tok=(PROBE_STEP * (at + 1)).astype(np.int64), probe_ans=pans,
                               probe_ok=pans == 0, has_probes=True)


def _depth_reference(pool, c, total: int, seed: int) -> tuple[int, int, float]:
    """One reference run of configuration c on seed `seed`: (traces started, tokens, seconds)."""
    from . import reference_depth as ref
    from .engine import depth_view_arrays
    from .reference import run_reference

    perm = permutation(pool.off, pool.qkeys, seed)
    rank, order = query_order(pool.qkeys, seed)
    if c.policy not in ("parallel-probe", "cmc"):
        tok, ans, ok, _ = depth_view_arrays(pool, c.depth_key())  # the stopped traces (their twin: test_depth)
        t = time.perf_counter()
        r = run_reference(pool.off, ok, ok.astype(np.float64), ans, tok, perm, rank, policy=c.policy,
                          unit=c.unit, elim=c.eliminate, budget_total=total)
        return r["samples_used"], r["tokens_used"], time.perf_counter() - t
    traces = []
    for i in range(pool.n_queries):
        q = []
        for p in range(pool.off[i], pool.off[i + 1]):
            j = perm[p]
            probes = list(zip(pool.probe_tok[pool.probe_off[j]:pool.probe_off[j + 1]].tolist(),
                              pool.probe_ans[pool.probe_off[j]:pool.probe_off[j + 1]].tolist(),
                              pool.probe_ok[pool.probe_off[j]:pool.probe_off[j + 1]].astype(int).tolist(),
                              strict=True))
            q.append((probes, int(pool.tok[j]), int(pool.ans[j]), int(pool.correct[j])))
        traces.append(q)
    t = time.perf_counter()
    if c.policy == "cmc":
        _, samples, tokens = ref.cmc(traces, list(order), total, beta=c.cmc_beta, unit=c.unit)
    else:
        _, samples, tokens = ref.parallel_probe(traces, list(order), total, chains=c.chains, T=c.stable,
                                                patience=c.patience, warm=c.probe_warmup, unit=c.unit)
    return samples, tokens, time.perf_counter() - t


def depth_sizes(spec: BenchSpec) -> dict:
    """The depth rows' pool and seeds for a bench of these sizes: at most DEPTH_N x DEPTH_SIZE, DEPTH_SEEDS."""
    return {"n": min(spec.n, DEPTH_N), "size": min(spec.size, DEPTH_SIZE), "seeds": min(spec.seeds, DEPTH_SEEDS)}


def depth_estimate_s(n: int, size: int, seeds: int, repeats: int, reference_seeds: int, threads: int = 2) -> float:
    """Seconds of bench_depth at these sizes: DEPTH_S measured at its largest (DEPTH_N x DEPTH_SIZE, DEPTH_SEEDS, 3
    repeats, 1 reference seed), where most of it is the references' runs and their pools as Python lists (in
    proportion to the traces) and the kernels' cache loads; the engine's runs are a few per cent."""
    return DEPTH_S * (0.3 + 0.7 * n * size * reference_seeds / (DEPTH_N * DEPTH_SIZE))


def bench_depth(n: int = DEPTH_N, size: int = DEPTH_SIZE, multiples=DEPTH_MULTIPLES, seeds: int = DEPTH_SEEDS,
                repeats: int = 3, reference_seeds: int = 1, configs=DEPTH_CONFIGS, progress=None,
                threads: int = 2) -> pl.DataFrame:
    """Rows per (depth configuration, token budget) on probed_synth(n, size): the engine's runs (every seed, median of
    `repeats` timings, as bench's), their traces started and the reference's on `reference_seeds` seeds. A decision
    is one trace started (the samples a run spends; the ratio of rates is the same per run whatever is counted, as
    the engine and the reference make the same runs); the reference's runs must match the engine's (traces and
    tokens) or this raises. The depth view of a width policy is built once per pool and is not timed on either
    side."""
    from .engine import depth_pool, run_rows

    step = progress or (lambda s: None)
    est = depth_estimate_s(n, size, seeds, repeats, reference_seeds, threads)
    pool = probed_synth(n, size)
    median = float(np.median(pool.tok))
    tables = make_tables(size, 0.95, sc_beta=True)
    seed_arr = np.arange(seeds)
    rows = []
    for policy, kw in configs:
        c = RunConfig(policy, unit="tokens", **kw)
        if c.depth_key() != ("whole", 0, 0, "tokens"):
            depth_pool(pool, c.depth_key())  # (the view, built once and kept: not timed)
        for m in multiples:
            total = int(round(m * median * n))
            bt = np.full((1, seeds), total, np.int64)
            run_rows(pool, [c], bt[:, :1], seed_arr[:1], tables)  # compile or load
            wall, (_, out_i, _, _) = _median_time(lambda c=c, bt=bt: run_rows(pool, [c], bt, seed_arr, tables),
                                                  repeats)
            decisions = int(out_i[0, :, 0].sum())
            ref_rates = []
            for s in range(reference_seeds):
                samples, tokens, dt = _depth_reference(pool, c, total, s)
                if (samples, tokens) != (int(out_i[0, s, 0]), int(out_i[0, s, 1])):
                    raise AssertionError(f"{c.label()} at {total}: the reference made {samples} traces, {tokens} "
                                         f"tokens on seed {s}; the engine {out_i[0, s, :2].tolist()}")
                ref_rates.append(samples / dt)
                step(est / (len(configs) * len(multiples) * reference_seeds))
            rate = decisions / wall
            ref_rate = statistics.median(ref_rates) if ref_rates else float("nan")
            rows.append({"pool": f"{n}x{size} probed", "policy": c.label(), "budget": float(m), "runs": seeds,
                         "wall_s": wall, "decisions": decisions, "decisions_per_s": rate,
                         "reference_decisions_per_s": ref_rate, "speedup": rate / ref_rate})
    return pl.DataFrame(rows)
