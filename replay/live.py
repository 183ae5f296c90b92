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

from .engine import outcome, pool_arrays, scratch
from .kernel import (
    BEST_J,
    CAPPED,
    ELIM,
    EXH,
    FIRST_J,
    LEAD,
    NEED,
    SAMPLES,
    TOKENS,
    WLEAD,
    N,
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
# segments, so they cannot be one engine run cut where whole responses are missing, as run_live is. Their live driver
# instead runs the policies' plain-Python twins (replay/reference_depth.py, which match the engine run for run and
# AutoTTS's source on all its files) on traces whose events are produced by the source only when the policy first
# reads them: each read is a segment the policy explores, so a trace the policy prunes or a query it stops is never
# generated further. The run is then, decision for decision, the replay of a pool holding the traces as far as they
# were generated (tests/test_run_depth.py checks it against the engine).

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
    def segment(self, i: int, k: int) -> Segment:
        """Advance trace k of query i (k = 0, 1, ... in the order the policy starts them) by one segment: the first
        call starts it. Called at most once more after a finished segment never."""
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


class _LiveTrace:
    """One trace's events (reference_depth.trace_events' form: (cumulative cost, answer id, correct, finished)) as
    far as the policy has read them: indexing an event not produced yet asks the source for the next segment. The
    trace cap applies as replay's depth view applies it: a probe at the cap is an event, and a trace running past
    the cap ends there (cost the cap) holding its last probe's answer."""

    def __init__(self, source: TraceSource, i: int, k: int, cap: int, code: Callable[[Hashable | None], int]):
        self.source, self.i, self.k, self.cap, self.code = source, i, k, cap, code
        self.events: list[tuple[int, int, int, bool]] = []
        self.segments: list[Segment] = []

    def __getitem__(self, e: int):
        while len(self.events) <= e:
            if self.events and self.events[-1][3]:
                raise IndexError(f"query {self.i} trace {self.k} has ended")
            self._more()
        return self.events[e]

    def _more(self):
        s = self.source.segment(self.i, self.k)
        if s.tokens < 0 or (self.segments and s.tokens < self.segments[-1].tokens):
            raise ValueError(f"query {self.i} trace {self.k}: segment at {s.tokens} tokens, after "
                             f"{self.segments[-1].tokens if self.segments else 0}")
        self.segments.append(s)
        a = self.code(s.answer)
        ok = int(bool(s.correct)) if a >= 0 else 0
        cap = self.cap
        if cap and s.tokens > cap:  # it ran past the cap: it ends there, holding its last probe's answer
            last = self.events[-1] if self.events else (0, -1, 0, False)
            self.events.append((cap, last[1], last[2], True))
        elif s.finished:
            self.events.append((s.tokens, a, ok, True))
        else:
            self.events.append((s.tokens, a, ok, False))
            if cap and s.tokens == cap:
                self.events.append((cap, a, ok, True))


class _LiveQuery:
    """A query's traces as the reference's schedulers index them (traces[:chains], traces[pos], len): each made on
    first use, none generated before the policy reads its first event."""

    def __init__(self, source: TraceSource, i: int, size: int, cap: int):
        self.source, self.i, self.size, self.cap = source, i, size, cap
        self.labels: dict[Hashable, int] = {}
        self.traces: list[_LiveTrace] = []

    def code(self, answer: Hashable | None) -> int:
        return -1 if answer is None else self.labels.setdefault(answer, len(self.labels))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[m] for m in range(*k.indices(self.size))]
        if not 0 <= k < self.size:
            raise IndexError(k)
        while len(self.traces) <= k:
            self.traces.append(_LiveTrace(self.source, self.i, len(self.traces), self.cap, self.code))
        return self.traces[k]


def run_live_depth(source: TraceSource, sizes: Sequence[int], rank: Sequence[int], *, config: RunConfig,
                   budget_total: int) -> dict:
    """Run parallel-probe or cmc live over `source` (a TraceSource): sizes[i] bounds query i's traces, rank[i] is its
    position in the run's query order, the budget (config.unit: samples or tokens) is shared by the batch as replay
    shares it (docs/semantics.md: round 0 starts every query's first traces in rank order, then one step per query
    per round; the first start or segment that does not fit ends the run, and is generated but not paid). Returns
    per query `answer` (the label the policy holds; None: none), `correct`, `answered` (it stopped on its own rule),
    `started` (traces paid for), `traces` (per trace, the segments generated: what the run's pool records), `paid`
    (per trace, how many of them the run paid: all but the one that did not fit and ended it, if any), and
    `samples_used` / `tokens_used`, `segments` (generated in all) and `driver_s` / `source_s`."""
    from .reference_depth import cmc_events, parallel_probe_events

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
    queries = [_LiveQuery(timed, i, int(sizes[i]), config.trace_cap) for i in range(n)]
    order = [int(q) for q in np.argsort(np.asarray(rank, np.int64), kind="stable")]
    # the policy's parameters (its registry entry's), under the twins' own names where they differ
    kw = {_TWIN_NAMES.get(name, name): getattr(config, name) for name in REGISTRY[config.policy].params}
    run = parallel_probe_events if config.policy == "parallel-probe" else cmc_events
    out, samples, tokens = run(queries, order, int(budget_total), unit=config.unit, **kw)
    answers = [{v: a for a, v in q.labels.items()} for q in queries]
    traces = [[list(t.segments) for t in q.traces if t.segments] for q in queries]
    paid = [[len(t) for t in q] for q in traces]
    if timed.last is not None:  # the segment (or start) that did not fit and ended the run: generated, not paid
        i, k = timed.last
        cap = config.trace_cap
        ran = sum(min(t[-1].tokens, cap) if cap else t[-1].tokens for q in traces for t in q)
        if ran > tokens or len(traces[i]) > out[i][3]:
            paid[i][k] -= 1
    seconds = time.perf_counter() - t0
    return {"answer": [answers[i].get(int(a)) for i, (a, _, _, _) in enumerate(out)],
            "correct": [bool(ok) for _, ok, _, _ in out], "answered": [bool(d) for _, _, d, _ in out],
            "started": [int(s) for _, _, _, s in out], "traces": traces, "paid": paid,
            "samples_used": int(samples), "tokens_used": int(tokens), "segments": timed.calls,
            "source_s": timed.seconds, "driver_s": seconds - timed.seconds}


_TWIN_NAMES = {"stable": "T", "probe_warmup": "warm", "cmc_beta": "beta"}  # RunConfig's -> reference_depth's


class _TimedTraces:
    """A TraceSource counted and timed (the driver's own seconds are the rest)."""

    def __init__(self, source: TraceSource):
        self.source, self.calls, self.seconds, self.last = source, 0, 0.0, None

    def segment(self, i: int, k: int) -> Segment:
        self.last = (i, k)
        t0 = time.perf_counter()
        try:
            return self.source.segment(i, k)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - t0
