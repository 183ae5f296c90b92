"""`ttc bench`: how fast the replay engine is, against its own plain-Python reference on the same work."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import polars as pl

from .engine import run_grid
from .policies import REGISTRY, RunConfig
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


GROWTH_NS = (500, 5000, 50000)
GROWTH_DECISIONS = 1_000_000  # per growth cell (seeds scaled to it)
# What `ttc bench` costs, measured on the shared 2-core machine (docs/performance.md), for its estimate before it
# starts: the engine's decisions per second (all policies, two threads; the slowest, side-eb, ~2M/s) and the
# reference's cost per decision, a constant plus a scan of the queries for the six index policies (about 3,000
# decisions/s on 500 queries, 30,000 for the round-robin ones).
ENGINE_RATE = 5e6
GROWTH_RATE = 3e6
REF_CONST_S = 3.3e-5
REF_SCAN_S = 6e-7


def estimate_s(spec: BenchSpec, ns=GROWTH_NS, decisions: int = GROWTH_DECISIONS, growth_repeats: int = 1) -> dict:
    """Seconds each phase of `ttc bench` will take, from the sizes alone (the rates above): the engine's timings
    (the full grid and each row, `repeats` times), the reference's runs, the growth table's cells."""
    per_seed = sum(spec.n * b for b in spec.budgets) * len(spec.policies)  # at most: a policy may spend less
    engine = 2 * spec.repeats * spec.seeds * per_seed / ENGINE_RATE
    scan = 6 / 14  # the share of index policies, whose reference scans every query per decision
    reference = spec.reference_seeds * per_seed * (REF_CONST_S + scan * REF_SCAN_S * spec.n)
    growth = sum(len(spec.policies) * (1 + growth_repeats) * decisions / GROWTH_RATE + n * spec.size * 2e-7
                 for n in ns)
    return {"engine": engine, "reference": reference, "growth": growth}


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench(spec: BenchSpec, progress=None) -> tuple[pl.DataFrame, dict]:
    """Rows per (policy, budget): runs, median wall time, decisions/s, and the speed-up over the reference.

    A decision is one pull (K = 1: one response handed to one query). The reference is timed on
    `reference_seeds` seeds of the same pool, policy and budget (the median of their decisions per second, as
    the engine's time is the median of its repeats), and the ratio compares decisions per second."""
    step = _steps(progress, estimate_s(spec, ns=()))
    pool = make_pool(n=spec.n, size=spec.size, seed=0)
    tables = make_tables(spec.size, 0.95, sc_beta=False)
    seeds = np.arange(spec.seeds)
    configs = [RunConfig(p) for p in spec.policies] + [RunConfig("elimination", eliminate=r) for r in spec.rules]
    rows_cfg = [c for c in configs for _ in spec.budgets]
    totals = np.array([[int(b * spec.n)] * spec.seeds for _ in configs for b in spec.budgets], np.int64)
    t0 = time.perf_counter()
    run_grid(pool, rows_cfg[:1], totals[:1, :1], seeds[:1], tables)  # compile or load the kernels
    warmup = time.perf_counter() - t0
    full, _ = _median_time(lambda: run_grid(pool, rows_cfg, totals, seeds, tables), spec.repeats)
    step("engine", 0.5)
    # Every engine row is timed before any reference run: on the 2-core VM this was measured on, the engine's
    # calls in the first ~70 ms after a second of single-threaded Python ran 1.6x slower in 2 trials of 4
    # (the idle core coming back), which would charge the machine's wake-up to the engine.
    rows = []
    for c in configs:
        for b in spec.budgets:
            bt = np.full((1, spec.seeds), int(b * spec.n), np.int64)
            wall, (_, out_i, _, _) = _median_time(lambda c=c, bt=bt: run_grid(pool, [c], bt, seeds, tables),
                                                  spec.repeats)
            decisions = int(out_i[0, :, 0].sum())
            rows.append({"pool": f"{spec.n}x{spec.size}", "policy": c.label(), "budget": b, "runs": spec.seeds,
                         "wall_s": wall, "decisions": decisions, "decisions_per_s": decisions / wall,
                         "reference_decisions_per_s": float("nan"), "speedup": float("nan")})
            step("engine", 0.5 * b / sum(spec.budgets) / len(configs))
    runs = [(permutation(pool.off, pool.qkeys, s), query_order(pool.qkeys, s)[0]) for s in range(spec.reference_seeds)]
    for row, c in zip(rows, [c for c in configs for _ in spec.budgets]):
        if runs:
            rates = []
            for perm, rank in runs:
                t = time.perf_counter()
                r = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank,
                                  policy=c.policy, elim=c.eliminate, budget_total=int(row["budget"] * spec.n))
                rates.append(r["samples_used"] / (time.perf_counter() - t))
            row["reference_decisions_per_s"] = statistics.median(rates)  # robust to one preempted run
            row["speedup"] = row["decisions_per_s"] / row["reference_decisions_per_s"]
            step("reference", row["budget"] / sum(spec.budgets) / len(configs))
    return pl.DataFrame(rows), {"full_grid_s": full, "warmup_s": warmup, "configs": len(rows_cfg),
                                "seeds": spec.seeds}


def _steps(progress, est: dict):
    """step(phase, share): tells `progress` (in estimated seconds) that this share of a phase's estimate is done."""
    def step(phase, share):
        if progress:
            progress(est[phase] * share)
    return step


def growth(ns=GROWTH_NS, size=64, budget=8, decisions=GROWTH_DECISIONS, repeats=1,
           policies=tuple(POLICIES), progress=None) -> pl.DataFrame:
    """Decisions per second as the pool grows, at a fixed amount of work per point (seeds scaled so each
    point makes about `decisions` decisions): flat = linear work, a slow fall = the heap's log n."""
    step = _steps(progress, {"growth": 1.0})
    cells = len(ns) * len(policies)
    est = estimate_s(BenchSpec(size=size, policies=tuple(policies)), ns, decisions, repeats)["growth"]
    rows = []
    tables = make_tables(size, 0.95, sc_beta=False)
    for n in ns:
        pool = make_pool(n=n, size=size, seed=0)
        seeds = np.arange(max(1, decisions // (budget * n)))
        for p in policies:
            bt = np.full((1, len(seeds)), budget * n, np.int64)
            run_grid(pool, [RunConfig(p)], bt[:, :1], seeds[:1], tables)
            wall, (_, out_i, _, _) = _median_time(
                lambda pool=pool, p=p, bt=bt, seeds=seeds: run_grid(pool, [RunConfig(p)], bt, seeds, tables), repeats)
            d = int(out_i[0, :, 0].sum())
            rows.append({"queries": n, "policy": p, "budget": budget, "runs": len(seeds), "wall_s": wall,
                         "decisions": d, "decisions_per_s": d / wall})
            step("growth", est / cells)
    return pl.DataFrame(rows)


def growth_ratios(g: pl.DataFrame) -> dict:
    """Per policy: its decisions/s at each size, and its cost per decision at the largest size over the smallest
    (the growth check: a policy whose work per decision grows with the pool shows it here)."""
    out = {}
    for p in g["policy"].unique(maintain_order=True):
        sub = g.filter(pl.col("policy") == p).sort("queries")
        rates = sub["decisions_per_s"].to_list()
        out[p] = (rates, rates[0] / rates[-1])
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


def bench_depth(n: int = 100, size: int = 64, multiples=DEPTH_MULTIPLES, seeds: int = 50, repeats: int = 3,
                reference_seeds: int = 1, configs=DEPTH_CONFIGS) -> pl.DataFrame:
    """Rows per (depth configuration, token budget) on probed_synth(n, size): the engine's runs (every seed, median of
    `repeats` timings, as bench's), their traces started and the reference's on `reference_seeds` seeds. A decision
    is one trace started (the samples a run spends; the ratio of rates is the same per run whatever is counted, as
    the engine and the reference make the same runs); the reference's runs must match the engine's (traces and
    tokens) or this raises. The depth view of a width policy is built once per pool and is not timed on either
    side."""
    from .engine import depth_pool, run_rows

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
            rate = decisions / wall
            ref_rate = statistics.median(ref_rates) if ref_rates else float("nan")
            rows.append({"pool": f"{n}x{size} probed", "policy": c.label(), "budget": float(m), "runs": seeds,
                         "wall_s": wall, "decisions": decisions, "decisions_per_s": rate,
                         "reference_decisions_per_s": ref_rate, "speedup": rate / ref_rate})
    return pl.DataFrame(rows)
