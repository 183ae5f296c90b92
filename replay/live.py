"""Live allocation: run a policy against a source of responses instead of a cached pool, on the compiled engine.

A policy only ever asks for "the k-th response of query i" (docs/semantics.md: the k-th entry of the query's
permutation). `run_live` runs the engine's own `run_one` over the responses received so far, in the order they
were received (the identity permutation): the run stops at the first response that does not exist yet
(kernel.NEED), keeping the pulls it made and leaving no trace of the one it could not finish, the driver asks the
source for it, and the run goes on from there (the engine keeps its scheduler's state in the scratch W). Inside a
block of round-robin rounds the budget pays in full, whose order is free, the engine instead defers a query that
lacks a response and goes on with the others, stopping only when every query left in the block waits (W.dfr). The
run is thus one engine run cut where responses were missing, each decision made once. Live therefore equals replay
by construction: `PoolSource` answers from a pool and a permutation, and a live run over it is one engine run on
that permutation; `harvest.live.BackendSource` answers by generating and scoring, drawing the k-th response of a
query with the seed its k-th pool sample would have had, so a live run equals a replay of the pool that
`ttc harvest` writes with the same model, template and seed (taken in sample order).

A source must answer a repeated request with the same response. Answers may be any hashable labels: only their
equality matters. Optional methods let a source work in batches: `watch(next_k)` tells it, through
next_k(i), which response each query would ask for next at the moment the run stopped (None: no more;
next_k.all() gives them all as an array, -1 for None), so it can generate for every such query in one call;
`ready(i)` says how many responses of query i it holds already, which the driver takes without stopping the run for
each, and `fresh()` which queries' counts grew since it was last asked (so the driver need not ask every query).
A source with `slots` > 0 and `arrive(waiting, ahead)` (harvest.live.BackendSource over a backend that takes
concurrent calls) is not asked one response at a time: when a run stops, arrive gets every query it waits on (with
how many responses its pull wants) and the active ones with nothing received ahead, keeps requests for them in
flight, and returns once some responses came (and which waiting queries failed); the driver takes them and runs the
engine again. A query whose response comes early thus goes on while others of its round are still generated.

A source that cannot produce a query's next response (its requests keep failing) raises `Unavailable`: the driver
then gives that query the responses it received so far as its whole pool (its size becomes that count, so the
engine marks it exhausted when a pull wants more) and runs again. The run is then exactly the replay of a pool in
which that query holds only those responses, and every other query goes on as before.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Hashable, Protocol, Sequence

import numpy as np

from .engine import cmc_knobs, outcome, pool_arrays, scratch
from .kernel import (
    BEST_J,
    CAPPED,
    ELIM,
    EXH,
    FIRST_J,
    LEAD,
    MISSING_SEGMENT,
    NEED,
    SAMPLES,
    TOKENS,
    WLEAD,
    N,
    cmc_live,
    parallel_probe_live,
    run_one_any,
)
from .policies import DEPTH_POLICIES, ELIMINATION_RULES, REGISTRY, RunConfig
from .tables import make_tables

LIVE_POLICIES = tuple(name for name, p in REGISTRY.items() if p.live)  # the oracle needs hindsight


@dataclass(frozen=True)
class Observed:
    """One scored response as a policy sees it. side: its side signal in [0, 1] (side-eb's --side: a score the source
    records beside the oracle's, e.g. a confidence; 0.5 when there is none, which is what replay's engine puts in
    every slot without --side, so a source without side signals runs side-eb as replay does without one); lows: its
    record lows (deepconf-online)."""

    correct: bool
    score: float              # in [0, 1]
    answer: Hashable | None   # None = invalid / no answer
    n_tokens: int = 0
    side: float = 0.5
    # deepconf-online's record lows of the response's group confidence: (positions, values), as the pool's
    # conf_lows_pos / conf_lows hold them (None: not recorded; deepconf-online refuses such a response)
    lows: tuple | None = None


class Unavailable(Exception):
    """Raised by a source for a response it cannot produce (its requests keep failing): the query keeps what it has
    received (run_live's module docstring). The message says why; run_live reports it in out["failed"]."""


class ResponseSource(Protocol):
    def response(self, i: int, k: int) -> Observed:
        """The k-th response of query i (k = 0, 1, ... in the order the policy receives them)."""
        ...


class PoolSource:
    """Responses of a pool in the order of a permutation (perm[off[i] + k] = the k-th response of query i); side: the
    pool's per-response side signal (None: none, 0.5)."""

    def __init__(self, off, correct, score, ans, tok, perm, side=None, lows=None):
        self.off, self.correct, self.score, self.ans, self.tok, self.perm = off, correct, score, ans, tok, perm
        self.side, self.lows = side, lows  # lows: the pool's record lows (loff, lpos, lval), None: none

    def response(self, i: int, k: int) -> Observed:
        j = int(self.perm[int(self.off[i]) + k])
        a = int(self.ans[j])
        lows = None
        if self.lows is not None:
            loff, lpos, lval = self.lows
            a0, a1 = int(loff[j]), int(loff[j + 1])
            lows = (tuple(int(x) for x in lpos[a0:a1]), tuple(float(x) for x in lval[a0:a1]))
        return Observed(bool(self.correct[j]), float(self.score[j]), None if a < 0 else a, int(self.tok[j]),
                        0.5 if self.side is None else float(self.side[j]), lows)

    def ready(self, i: int) -> int:
        return int(self.off[i + 1] - self.off[i])


class _Received:
    """The responses received so far, laid out as a pool: query i's k-th response at off[i] + k."""

    def __init__(self, source: ResponseSource, sizes: np.ndarray):
        self.source, self.sizes = source, sizes
        self.off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        total = int(self.off[-1])
        self.correct = np.zeros(total, np.int8)
        self.score = np.zeros(total)
        self.ans = np.full(total, -1, np.int64)
        self.tok = np.zeros(total, np.int64)
        self.side = np.full(total, 0.5)
        self.have = np.zeros(len(sizes), np.int64)
        # record lows (deepconf-online): response j's are lpos / lval[lstart[j] .. lend[j]], appended as they come
        self.lstart, self.lend = np.zeros(total, np.int64), np.zeros(total, np.int64)
        self.lpos, self.lval, self.nl = np.empty(64, np.int64), np.empty(64), 0
        self.need_lows = False
        self.responses: list[list[Observed]] = [[] for _ in sizes]
        self._labels = [dict() for _ in sizes]  # answer -> per-query id, in order of first appearance
        self.source_s = 0.0  # seconds spent inside the source (generation, scoring), not in the driver

    def resized(self, i: int) -> "_Received":
        """The same responses with query i's size cut to what it has received (it can get no more)."""
        sizes = self.sizes.copy()
        sizes[i] = self.have[i]
        new = _Received(self.source, sizes)
        new.source_s, new.need_lows = self.source_s, self.need_lows
        for q, rs in enumerate(self.responses):
            for r in rs:
                new.put(q, r)
        return new

    def take(self, i: int):
        k = int(self.have[i])
        t0 = time.perf_counter()
        try:
            r = self.source.response(i, k)
        finally:
            self.source_s += time.perf_counter() - t0
        self.put(i, r)

    def put(self, i: int, r: Observed):
        k = int(self.have[i])
        if not 0.0 <= r.score <= 1.0:
            raise ValueError(f"query {i} response {k}: score {r.score} is outside [0, 1]")
        if r.n_tokens < 0:
            raise ValueError(f"query {i} response {k}: negative token count {r.n_tokens}")
        if not 0.0 <= r.side <= 1.0:
            raise ValueError(f"query {i} response {k}: side signal {r.side} is outside [0, 1]")
        j = int(self.off[i]) + k
        self.correct[j] = 1 if r.correct else 0
        self.score[j] = float(r.score)
        labels = self._labels[i]
        self.ans[j] = -1 if r.answer is None else labels.setdefault(r.answer, len(labels))
        self.tok[j] = int(r.n_tokens)
        self.side[j] = float(r.side)
        if r.lows is not None:
            pos, val = r.lows
            if len(pos) != len(val):
                raise ValueError(f"query {i} response {k}: {len(pos)} record-low positions and {len(val)} values")
            m = len(pos)
            if self.nl + m > len(self.lpos):  # room doubled: the engine is handed fresh views on each run (dc())
                grow = max(2 * len(self.lpos), self.nl + m)
                self.lpos = np.concatenate([self.lpos[:self.nl], np.empty(grow - self.nl, np.int64)])
                self.lval = np.concatenate([self.lval[:self.nl], np.empty(grow - self.nl)])
            self.lpos[self.nl:self.nl + m] = pos
            self.lval[self.nl:self.nl + m] = val
            self.lstart[j], self.lend[j] = self.nl, self.nl + m
            self.nl += m
        elif self.need_lows:
            raise ValueError(f"query {i} response {k}: deepconf-online needs each response's record lows of its "
                             "group confidence (Observed.lows; ttc run records them with --confidence group-lows)")
        self.responses[i].append(r)
        self.have[i] = k + 1

    def dc(self) -> tuple:
        """The record lows received so far as deepconf-online's kernel reads them (engine.lows_arg's form)."""
        from .engine import frozen

        return (frozen(self.lstart, np.int64), frozen(self.lend, np.int64), frozen(self.lpos[:self.nl], np.int64),
                frozen(self.lval[:self.nl], np.float64))

    def take_ready(self):
        """Take what the source holds already. A source with `fresh()` (the queries whose responses grew since the
        last call) is asked only about those: a loop over every query per engine run cost more than the run."""
        ready = getattr(self.source, "ready", None)
        if ready is None:
            return
        fresh = getattr(self.source, "fresh", None)
        t0 = time.perf_counter()
        which = sorted(fresh()) if fresh is not None else range(len(self.sizes))
        self.source_s += time.perf_counter() - t0
        for i in which:
            t0 = time.perf_counter()
            count = int(ready(i))
            self.source_s += time.perf_counter() - t0
            for _ in range(min(count, int(self.sizes[i])) - int(self.have[i])):
                self.take(i)


def run_live(source: ResponseSource, sizes: Sequence[int], rank: Sequence[int], *, policy: str | None = None,
             budget_total: int, config: RunConfig | None = None, conf: float = 0.95, prior: Sequence | None = None,
             on_run: Callable[[dict], None] | None = None, elim: str | None = None, **params) -> dict:
    """Run one policy live. sizes[i] bounds the responses query i may receive (its pool size in replay; beyond it
    the query is exhausted); rank[i] is query i's position in the run's query order. Returns the engine's
    outcome as plain lists and ints (replay.engine.outcome: per-query n_drawn, answered, covered, exhausted_q,
    capped, sel_*; totals),
    plus `responses`: the responses each query was allocated, in order; `selected`: for each selection rule (bon,
    weighted, sc) the index, among its responses, of the one each query selects (-1: none); `failed`: query ->
    the reason its source raised Unavailable (the query kept what it had); `sizes`: each query's final size;
    `received`: how many responses the source gave (with a token budget a query's next response may be received
    and then not fit); `runs`: engine runs; `source_s` / `driver_s`: seconds inside the source and in the driver
    (engine runs and bookkeeping). on_run, when given, is called after every engine run with the state it
    reached: {"samples", "tokens", "answered", "runs"} (a progress display). prior: per-query predicted success
    probabilities (marginal-gain; None: none); each response's side signal (side-eb) is its Observed.side. The
    configuration is `config`, a RunConfig given whole (a driver that
    holds one), or else the policy and RunConfig's fields as keywords (`params`: unit, K, gamma, ...; `elim` is
    `eliminate` under the reference's name)."""
    cfg, sizes, prior = _checked(config, policy, elim, params, sizes, rank, prior)
    n = len(sizes)
    got = _Received(source, sizes)
    deepconf = cfg.policy == "deepconf-online"
    got.need_lows = deepconf
    # deepconf-online's warm-up: its whole traces per query; the traces after it are stopped at the query's threshold
    warm = (cfg.warmup if cfg.max_samples == 0 else min(cfg.warmup, cfg.max_samples)) if deepconf else 0
    failed: dict[int, str] = {}
    t_start = time.perf_counter()
    tables = make_tables(int(sizes.max(initial=1)), conf, sc_beta=cfg.eliminate == "sc-beta")
    order = np.argsort(np.asarray(rank, np.int64), kind="stable")
    record = cfg.record()[0]
    W = None

    def warming() -> bool:  # deepconf-online before its thresholds: a query wants no trace beyond its warm-up
        return deepconf and W is not None and W.sch[0]["stage"] == 0

    def next_k(i: int):
        qs = W.qs
        active = qs[ELIM][i] == 0 and qs[CAPPED][i] == 0 and qs[EXH][i] == 0 and not (warming() and qs[N][i] >= warm)
        return int(qs[N][i]) if active and qs[N][i] < got.sizes[i] else None

    def next_all() -> np.ndarray:
        """next_k for every query at once: the index of its next response, -1 for None."""
        qs = W.qs
        active = (qs[ELIM] == 0) & (qs[CAPPED] == 0) & (qs[EXH] == 0) & (qs[N] < got.sizes)
        if warming():
            active &= qs[N] < warm
        return np.where(active, qs[N], -1)

    next_k.all = next_all  # type: ignore[attr-defined]

    def threshold(i: int) -> float | None:
        """deepconf-online: query i's threshold once the warm-up has set it (None before): a source that can stop a
        trace mid-way (harvest.live.BackendSource over a backend that `stops`) stops its traces after the warm-up
        there, saving the tokens the run does not pay for; one that cannot generates them whole, and the run pays
        the same either way (the engine cuts each at its first record low below the threshold)."""
        return float(W.ex[i, 0]) if deepconf and W is not None and W.sch[0]["stage"] == 1 else None

    if hasattr(source, "watch"):
        source.watch(next_k)
    stops = deepconf and callable(getattr(source, "confidence_stop", None))
    if stops:
        source.confidence_stop(threshold, warm)
    asynchronous = getattr(source, "slots", 0) > 0 and callable(getattr(source, "arrive", None))
    runs = 0
    P = None
    ok = False
    try:
        while True:
            got.take_ready()
            if P is None:  # (again after a query's size was cut: the run then starts over)
                # Views of the received arrays (they show later responses) with answer slots for as many answers
                # as a query may receive, so that the engine's state stays valid as responses arrive.
                slots = got.sizes + 1
                P = pool_arrays(got.off, got.correct, got.score, got.ans, got.tok, tables, got.have, prior, got.side,
                                aoff=np.concatenate([[0], np.cumsum(slots)]))
                W = scratch(n, int(P.aoff[-1]), np.arange(len(got.correct)), order, cfg.bins, live=True)
            # (goes on where the last call stopped; every rule compiled in, so that every live run shares one
            # specialisation of the kernel: see kernel.READING_RULES)
            run_one_any(P, W, record, np.int64(budget_total), np.int64(0), True, True, got.dc() if deepconf else None)
            runs += 1
            if on_run is not None:
                on_run({"samples": int(W.tot[SAMPLES]), "tokens": int(W.tot[TOKENS]),
                        "answered": int(W.qs[ELIM].sum()), "runs": runs})
            need = int(W.tot[NEED])
            if need == 0:
                break
            if asynchronous:  # every query the run waits on, and those it may want next, asked for at once
                t0 = time.perf_counter()
                lost = source.arrive(*_wanted(W, got, order, next_all(), need))
                got.source_s += time.perf_counter() - t0
                for i, why in sorted(lost.items()):
                    failed[i] = why or "failed"
                    got = got.resized(i)
                    P = None
                continue
            try:
                got.take(need - 1)
            except Unavailable as e:
                failed[need - 1] = str(e) or type(e).__name__
                got = got.resized(need - 1)
                P = None
        ok = True
    finally:
        if hasattr(source, "watch"):
            source.watch(None)  # the run is over: nothing more to batch for
        if stops:
            source.confidence_stop(None, 0)
        if asynchronous:
            source.close(keep=ok)
    return _result(P, W, got, failed, runs, time.perf_counter() - t_start)


def _checked(config, policy, elim, params, sizes, rank, prior):
    """run_live's arguments checked: its RunConfig (given whole, or a policy and its fields as keywords), the sizes
    and the prior as arrays."""
    if (config is None) == (policy is None):
        raise ValueError("give run_live a policy or a config, not both")
    if elim is not None:
        params["eliminate"] = elim
    cfg = config if config is not None else RunConfig(policy, **params)
    if cfg.policy not in LIVE_POLICIES:
        raise ValueError(f"policy {cfg.policy!r} cannot run live (choose from {', '.join(LIVE_POLICIES)})")
    if not ELIMINATION_RULES[cfg.eliminate].live:
        raise ValueError(f"elimination rule {cfg.eliminate!r} reads the query's whole pool (hindsight) and cannot run "
                         f"live")
    if cfg.hindsight_values():
        raise ValueError(f"{', '.join(cfg.hindsight_values())} reads the query's whole pool (hindsight) and cannot run "
                         f"live")
    sizes = _checked_sizes(sizes, rank, "response")
    n = len(sizes)
    if prior is not None:
        prior = np.asarray(prior, np.float64)
        if prior.shape != (n,) or not ((prior >= 0.0) & (prior <= 1.0)).all():  # (NaN fails too)
            raise ValueError("prior must hold one predicted success probability in [0, 1] per query")
    return cfg, sizes, prior


def _checked_sizes(sizes, rank, item: str) -> np.ndarray:
    """run_live's and run_live_depth's per-query sizes as an int64 vector, checked against the query order `rank`."""
    sizes = np.asarray(sizes, np.int64).reshape(-1)
    n = len(sizes)
    if len(rank) != n or sorted(int(r) for r in rank) != list(range(n)):
        raise ValueError("rank must be a permutation of 0..n-1 with one entry per query")
    if (sizes < 1).any():
        raise ValueError(f"every query must allow at least one {item} (sizes >= 1)")
    return sizes


def _result(P, W, got: _Received, failed: dict, runs: int, seconds: float) -> dict:
    """run_live's outcome as plain lists and ints, with what the driver saw (see run_live)."""
    out = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in outcome(P, W).items()}
    out["responses"] = [got.responses[i][:int(out["n_drawn"][i])] for i in range(len(got.sizes))]
    out["selected"] = _selected(P, W)
    out["failed"] = failed
    out["sizes"] = got.sizes.tolist()
    out["runs"] = runs
    out["received"] = int(got.have.sum())
    out["source_s"] = got.source_s
    out["driver_s"] = seconds - got.source_s
    return out


def _wanted(W, got: _Received, order: np.ndarray, nxt: np.ndarray, need: int) -> tuple[list, list]:
    """For a source with slots (arrive): the queries the stopped run waits on, each with how many responses it
    wants (its count drawn + the pull's size): the deferred queries of a block of round-robin rounds
    (kernel.run_one's dfr), or the one query whose pull stopped; then, in rank order, the other active queries that
    have received nothing beyond what they drew (the run is likely to want their next response)."""
    if W.sch[0]["resume"] == 2:
        q = W.dfr[:int(W.sch[0]["nd"]), 0]
        upto = W.qs[N][q] + W.sch[0]["rr_k"]
    else:
        q = np.array([need - 1])
        upto = W.qs[N][q] + W.sch[0]["want"]
    ahead = (nxt >= 0) & (nxt >= got.have)
    ahead[q] = False
    return list(zip(q.tolist(), upto.tolist())), order[ahead[order]].tolist()


def _selected(P, W) -> dict[str, list[int]]:
    """The response each selection rule picks for each query, as its index among the query's responses (-1:
    none), read from the engine's state exactly as replay.kernel.selections reads it for correctness: bon the
    first response with the highest score, weighted and sc the first response of the leading answer."""
    n = len(P.off) - 1
    out: dict[str, list[int]] = {"bon": [], "weighted": [], "sc": []}
    for i in range(n):
        base = int(P.off[i])
        j = int(W.qs[BEST_J][i])
        out["bon"].append(j - base if j >= 0 and W.qs[N][i] > 0 else -1)
        for rule, col in (("weighted", WLEAD), ("sc", LEAD)):
            a = int(W.qs[col][i])
            j = int(W.si[int(P.aoff[i]) + 1 + a, FIRST_J]) if a >= 0 else -1
            out[rule].append(j - base if j >= 0 else -1)
    return out


# ---------------------------------------------------------------------------------------------- depth policies live
# parallel-probe and cmc (docs/semantics.md, "Depth") advance each trace a segment at a time and decide between
# segments. Their live run is the engine's own kernels (kernel.parallel_probe / cmc, through parallel_probe_live /
# cmc_live) over the segments generated so far, laid out as replay's records with a MISSING record where a trace's next
# segment is still to come: a run that reaches one stops and names it, the driver asks the source for it and runs the
# kernel again from the start on the grown records (the same decisions by construction: each reads only what it
# read before, plus what came). A run that reaches a missing segment goes on collecting the others it surely reaches
# whatever that segment holds (the other traces of the same step, the other queries' steps of the round, round 0's
# every start), paying each wanted one the most a segment may cost (the source's segment_tokens; unknown: it stops at
# the first under a token budget), and what the waiting query may still spend in its step (cmc: the rest of a burst,
# a widening's starts) likewise, until it comes back to a waiting query (kernel.depth_want, depth_sure). The source is
# asked for them together, and nothing the run would not explore is generated (but for the one segment, or start,
# that did not fit and ended the run: the last the run reads, not always the last asked for). The run is then,
# decision for decision, the replay of a pool holding the traces as far as they were generated (tests/test_run_depth.py
# checks it against the engine's replay, and the segments asked for against the reference twins' lazy reads).

@dataclass(frozen=True)
class Segment:
    """A trace after one more segment: its length so far in tokens (the offset of the probe that ends the segment,
    or the trace's end), the answer it then holds (its probe's, or its final answer when finished; None: none) and
    that answer's correctness."""

    tokens: int
    answer: Hashable | None
    correct: bool
    finished: bool


class TraceSource(Protocol):
    """Optional, beside segment(): `segments(wants)` serves a list of (query, trace) at once (one segment each, in
    order; a trace appears at most once per call), which a batched backend can generate together; `segment_tokens`
    (int) promises that no segment runs more tokens past its trace's previous one (the driver then asks for the
    segments a run surely reaches together under a token budget too; a segment that breaks the promise is an
    error)."""

    def segment(self, i: int, k: int) -> Segment:
        """Advance trace k of query i (k = 0, 1, ... in the order the policy starts them) by one segment: the first
        call starts it. Never called again after a finished segment."""
        ...


class PoolTraces:
    """The traces of a probed pool (load_pool(probes=True)) in the order of a permutation, served a segment (one
    probe, or the end) at a time: trace k of query i is response perm[off[i] + k], its segments its probes before
    its end (`--probe-cost tokens`: a probe at or past the end is never reached) and then its end. `served` counts the
    segments asked for (a test reads it to see that the run generated only what it explored)."""

    def __init__(self, pool, perm):
        if not pool.has_probes:
            raise ValueError("PoolTraces needs a pool with probes (load_pool(probes=True))")
        self.pool, self.perm = pool, perm
        self.at: dict[tuple[int, int], int] = {}
        self.served = 0
        self.segment_tokens = _costliest_segment(pool)

    def segment(self, i: int, k: int) -> Segment:
        p = self.pool
        if not 0 <= k < int(p.off[i + 1] - p.off[i]):
            raise ValueError(f"query {i} has no trace {k} (it holds {int(p.off[i + 1] - p.off[i])})")
        j = int(self.perm[int(p.off[i]) + k])
        e = self.at.get((i, k), 0)
        self.at[(i, k)] = e + 1
        self.served += 1
        total = int(p.tok[j])
        probes = [m for m in range(int(p.probe_off[j]), int(p.probe_off[j + 1])) if int(p.probe_tok[m]) < total]
        if e < len(probes):
            m = probes[e]
            a = int(p.probe_ans[m])
            return Segment(int(p.probe_tok[m]), None if a < 0 else a, bool(p.probe_ok[m]), False)
        if e > len(probes):
            raise ValueError(f"query {i} trace {k} was asked for a segment after its end")
        a = int(p.ans[j])
        return Segment(total, None if a < 0 else a, bool(p.correct[j]), True)


def _costliest_segment(pool) -> int:
    """The most tokens a segment of the pool's traces runs (a reachable probe past the one before it, or the end past
    the last reachable probe): PoolTraces' segment_tokens."""
    tok = np.asarray(pool.tok, np.int64)
    poff, ptok = np.asarray(pool.probe_off, np.int64), np.asarray(pool.probe_tok, np.int64)
    j = np.repeat(np.arange(len(tok)), np.diff(poff))
    keep = ptok < tok[j]  # (a probe at or past the end is never reached)
    j, ptok = j[keep], ptok[keep]
    prev = np.where(np.r_[False, j[1:] == j[:-1]], np.r_[0, ptok[:-1]], 0)
    last = np.zeros(len(tok), np.int64)
    last[j] = ptok  # (in order: each trace's last reachable probe)
    return int(max((ptok - prev).max(initial=0), (tok - last).max(initial=0)))


class _LiveRecords:
    """The segments a live depth run has received, as the depth kernels read them (kernel.depth_records' records: tokens
    at the record's end, 4 * (answer + 1) + 2 * (it ends the trace) + correct): trace p (the k-th of query i, at
    p = off[i] + k) at rows p * width on, then MISSING_SEGMENT where its next segment is still to come (width doubles
    when a trace outgrows it). The trace cap applies as replay's depth view applies it: a probe at the cap is a
    record and the trace ends there holding it, and a segment running past the cap ends the trace at the cap (cost
    the cap) holding its last probe's answer. Answers are coded per query in order of first appearance."""

    def __init__(self, sizes: np.ndarray, cap: int):
        self.off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.cap, self.width = int(cap), 4
        total = int(self.off[-1])
        self.rec = np.full((total * self.width, 2), MISSING_SEGMENT, np.int64)
        self.nrec = np.zeros(total, np.int64)  # records held per trace
        self.first: dict[int, list[int]] = {}  # per trace, each segment's first record (in its rows)
        self.segments: dict[int, list[Segment]] = {}
        self.labels: list[dict] = [{} for _ in sizes]
        self.slots = np.ones(len(sizes), np.int64)  # answer slots per query: its answers and the invalid one
        self.seg = 0  # the costliest segment held

    def aoff(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.slots)]).astype(np.int64)

    def code(self, i: int, answer: Hashable | None) -> int:
        if answer is None:
            return -1
        labels = self.labels[i]
        if answer not in labels:
            labels[answer] = len(labels)
            self.slots[i] += 1
        return labels[answer]

    def add(self, i: int, p: int, s: Segment, bound: int):
        """Trace p's next segment (query i's), which its source promised to cost at most `bound` tokens (<= 0:
        no promise)."""
        k = p - int(self.off[i])
        n, w = int(self.nrec[p]), self.width
        row = p * w + n
        segs = self.segments.setdefault(p, [])
        if n and self.rec[row - 1, 1] & 2:
            raise ValueError(f"query {i} trace {k} was served a segment after its end")
        if s.tokens < 0 or (segs and s.tokens < segs[-1].tokens):
            raise ValueError(f"query {i} trace {k}: segment at {s.tokens} tokens, after "
                             f"{segs[-1].tokens if segs else 0}")
        a = self.code(i, s.answer)
        ok = int(bool(s.correct)) if a >= 0 else 0
        paid = int(self.rec[row - 1, 0]) if n else 0
        cap = self.cap
        if cap and s.tokens > cap:  # it ran past the cap: it ends there, holding its last probe's answer
            last = int(self.rec[row - 1, 1]) if n else 0
            records = [(cap, (last & ~3) + 2 + (last & 1))]
        else:
            records = [(s.tokens, 4 * (a + 1) + 2 * bool(s.finished) + ok)]
            if cap and s.tokens == cap and not s.finished:
                records.append((cap, 4 * (a + 1) + 2 + ok))
        cost = records[0][0] - paid
        if 0 < bound < cost:
            raise ValueError(f"query {i} trace {k}: a segment of {cost} tokens, more than the {bound} its source "
                             "promised (segment_tokens)")
        if n + len(records) >= w:  # (room for the records and a MISSING after them)
            self._grow(n + len(records) + 1)
            w, row = self.width, p * self.width + n
        for r, (tok, c) in enumerate(records):
            self.rec[row + r] = tok, c
        self.nrec[p] = n + len(records)
        self.first.setdefault(p, []).append(n)
        segs.append(s)
        self.seg = max(self.seg, cost)

    def _grow(self, need: int):
        w = self.width
        while w < need:
            w *= 2
        total = len(self.nrec)
        rec = np.full((total * w, 2), MISSING_SEGMENT, np.int64)
        rec.reshape(total, w, 2)[:, :self.width] = self.rec.reshape(total, self.width, 2)
        self.rec, self.width = rec, w

    def paid(self, p: int, t_r: int) -> int:
        """How many of trace p's segments a run that left its next record at t_r read (paid)."""
        return sum(1 for f in self.first.get(p, ()) if f < t_r - p * self.width)


def run_live_depth(source: TraceSource, sizes: Sequence[int], rank: Sequence[int], *, config: RunConfig,
                   budget_total: int) -> dict:
    """Run parallel-probe or cmc live over `source` (a TraceSource) on the engine's kernels: sizes[i] bounds query
    i's traces, rank[i] is its position in the run's query order, the budget (config.unit: samples or tokens) is
    shared by the batch as replay shares it (docs/semantics.md: round 0 starts every query's first traces in rank
    order, then one step per query per round; the first start or segment that does not fit ends the run, and is
    generated but not paid). Returns per query `answer` (the label the policy holds; None: none), `correct`,
    `answered` (it stopped on its own rule), `started` (traces paid for), `traces` (per trace, the segments
    generated: what the run's pool records), `paid` (per trace, how many of them the run paid: all but the one that
    did not fit and ended it, if any), and `samples_used` / `tokens_used`, `segments` (generated in all), `asks`
    (the source's batches: run_live_depth's comment block), `runs` (kernel runs) and `driver_s` / `source_s`."""
    if config.policy not in DEPTH_POLICIES:
        raise ValueError(f"run_live_depth runs {', '.join(DEPTH_POLICIES)}, not {config.policy!r}")
    if config.unit not in ("samples", "tokens"):
        raise ValueError(f"--unit {config.unit} is replay only for {config.policy}: a live run pays samples or tokens")
    if config.probe_cost != "tokens":
        raise ValueError("--probe-cost autotts is replay only: a live trace pays the tokens it ran")
    sizes = _checked_sizes(sizes, rank, "trace")
    n = len(sizes)
    t0 = time.perf_counter()
    timed = _TimedTraces(source)
    got = _LiveRecords(sizes, config.trace_cap)
    order = np.argsort(np.asarray(rank, np.int64), kind="stable").astype(np.int64)
    bound = int(getattr(source, "segment_tokens", 0) or 0)
    unit, budget, off = config.kernel_unit, int(budget_total), got.off
    pp = config.policy == "parallel-probe"
    knobs = None if pp else cmc_knobs(config.cmc_beta)
    runs = 0
    while True:
        if pp:
            qi, tot, t_r, want = parallel_probe_live(off, got.aoff(), got.rec, got.width, order, config.chains,
                                                     config.stable, config.patience, config.probe_warmup, unit,
                                                     budget, bound)
        else:  # (seg bounds every segment the run may read: the wanted ones too)
            seg = got.seg if config.unit == "samples" else max(got.seg, bound) if bound > 0 else 1 << 62
            qi, tot, t_r, want = cmc_live(off, got.aoff(), got.rec, got.width, seg, order, *knobs, unit, budget,
                                          bound)
        runs += 1
        m = int(want[0])
        if m == 0:
            break
        ps = [int(p) for p in want[1:m + 1]]
        qs = [int(q) for q in np.searchsorted(off, ps, side="right") - 1]
        for p, i, s in zip(ps, qs, timed.segments([(i, p - int(off[i])) for p, i in zip(ps, qs, strict=True)]),
                             strict=True):
            got.add(i, p, s, bound)
    # per query: (answer, correct, state, started) in the policy's own columns (kernel.depth_tally's)
    cols = (5, 6, 4) if pp else (3, 4, 2)
    answers = [{v: a for a, v in labels.items()} for labels in got.labels]
    traces, paid = [], []
    for i in range(n):
        ps = [p for p in range(int(off[i]), int(off[i + 1])) if p in got.segments]
        traces.append([list(got.segments[p]) for p in ps])
        paid.append([got.paid(p, int(t_r[p])) if p - off[i] < qi[i, 0] else 0 for p in ps])
    seconds = time.perf_counter() - t0
    return {"answer": [answers[i].get(int(qi[i, cols[0]])) for i in range(n)],
            "correct": [bool(qi[i, cols[1]]) for i in range(n)], "answered": [bool(qi[i, cols[2]] == 2)
                                                                             for i in range(n)],
            "started": [int(qi[i, 0]) for i in range(n)], "traces": traces, "paid": paid,
            "samples_used": int(tot[SAMPLES]), "tokens_used": int(tot[TOKENS]), "segments": timed.calls,
            "asks": timed.asks, "runs": runs, "source_s": timed.seconds, "driver_s": seconds - timed.seconds}


class _TimedTraces:
    """A TraceSource counted and timed (the driver's own seconds are the rest): `calls` segments served, `asks` the
    batches asked for."""

    def __init__(self, source: TraceSource):
        self.source, self.calls, self.asks, self.seconds = source, 0, 0, 0.0

    def segments(self, wants: list[tuple[int, int]]) -> list[Segment]:
        """The next segment of each (query, trace) in `wants`, in order: in one call to a source with segments()
        (a batched backend serves them together), else one segment() each."""
        t0 = time.perf_counter()
        self.asks += 1
        try:
            batch = getattr(self.source, "segments", None)
            if batch is not None:
                out = list(batch(wants))
                if len(out) != len(wants):
                    raise ValueError(f"the source served {len(out)} segments for {len(wants)} asked")
                self.calls += len(out)
                return out
            out = []
            for i, k in wants:
                out.append(self.source.segment(i, k))
                self.calls += 1
            return out
        finally:
            self.seconds += time.perf_counter() - t0
