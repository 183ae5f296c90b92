"""Live allocation: run a policy step by step against a source of responses instead of a cached pool.

A policy only ever asks for "the k-th response of query i" (docs/semantics.md: the k-th entry of the query's
permutation). `run_live` runs the plain-Python reference's per-step logic (replay/reference.py: the same
schedulers the engine's tests hold to exact equality) with those requests answered by a `ResponseSource`:
`PoolSource` answers from a pool and a permutation, so a live run over it equals `ttc replay` on the same
permutations exactly; `harvest.live.BackendSource` answers by generating and scoring, drawing the k-th
response of a query with the seed its k-th pool sample would have had, so a live run equals a replay of the
pool that `ttc harvest` writes with the same model, template and seed (taken in sample order).

A source must answer a repeated request with the same response (a response that did not fit a token budget is
asked for again by the next pull). Answers may be any hashable labels: only their equality matters. A source with
a `watch(next_k)` method is told, through next_k(i), which response each query would ask for next (None: no more),
so that it can generate for many queries in one batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol, Sequence

from . import reference as ref

LIVE_POLICIES = tuple(p for p in ref.POLICIES if p != "oracle")  # the oracle needs hindsight


@dataclass(frozen=True)
class Observed:
    """One scored response as a policy sees it."""

    correct: bool
    score: float              # in [0, 1]
    answer: Hashable | None   # None = invalid / no answer
    n_tokens: int = 0


class ResponseSource(Protocol):
    def response(self, i: int, k: int) -> Observed:
        """The k-th response of query i (k = 0, 1, ... in the order the policy receives them)."""
        ...


class PoolSource:
    """Responses of a pool in the order of a permutation (perm[off[i] + k] = the k-th response of query i)."""

    def __init__(self, off, correct, score, ans, tok, perm):
        self.off, self.correct, self.score, self.ans, self.tok, self.perm = off, correct, score, ans, tok, perm

    def response(self, i: int, k: int) -> Observed:
        j = int(self.perm[int(self.off[i]) + k])
        a = int(self.ans[j])
        return Observed(bool(self.correct[j]), float(self.score[j]), None if a < 0 else a, int(self.tok[j]))


class _LiveRun(ref._Run):
    """The reference's run state, its responses fetched from a source as the policy asks for them."""

    def __init__(self, source: ResponseSource, sizes: Sequence[int], unit: str, elim_params):
        off = [0]
        for m in sizes:
            off.append(off[-1] + int(m))
        super().__init__(off, [], [], [], [], None, unit, elim_params)
        self.source = source
        self._labels = [dict() for _ in sizes]   # answer -> per-query id, in order of first appearance
        self._index = {}                          # (i, k) -> position in the growing response arrays
        if hasattr(source, "watch"):
            source.watch(self._next_k)

    def _next_k(self, i: int):
        s = self.q[i]
        return s.N if s.active() and s.N < s.pool else None

    def next_response(self, i):
        k = self.q[i].N
        j = self._index.get((i, k))
        if j is None:
            r = self.source.response(i, k)
            if not 0.0 <= r.score <= 1.0:
                raise ValueError(f"query {i} response {k}: score {r.score} is outside [0, 1]")
            labels = self._labels[i]
            a = -1 if r.answer is None else labels.setdefault(r.answer, len(labels))
            j = len(self.correct)
            self.correct.append(1 if r.correct else 0)
            self.score.append(float(r.score))
            self.ans.append(a)
            self.tok.append(int(r.n_tokens))
            self._index[(i, k)] = j
        return j


def run_live(source: ResponseSource, sizes: Sequence[int], rank: Sequence[int], *, policy: str,
             budget_total: int, unit: str = "samples", K: int = 1, elim: str = "threshold", gamma: float = 1.0,
             lam: float | None = None, eps: float = 0.01, max_samples: int = 0, rho: float = 0.5, tau: float = 0.5,
             m_min: int = 3, conf: float = 0.95) -> dict:
    """Run one policy live. sizes[i] bounds the responses query i may receive (its pool size in replay; beyond it
    the query is exhausted); rank[i] is query i's position in the run's query order. Returns the reference's
    outcome dict (per-query n_drawn, answered, covered, exhausted_q, sel_*; totals), plus `responses`: the
    responses each query received, in order."""
    if policy not in LIVE_POLICIES:
        raise ValueError(f"policy {policy!r} cannot run live (choose from {', '.join(LIVE_POLICIES)})")
    if unit not in ref.UNITS or elim not in ref.ELIMS:
        raise ValueError(f"unknown unit {unit!r} or elimination rule {elim!r}")
    if len(sizes) != len(rank) or sorted(int(r) for r in rank) != list(range(len(rank))):
        raise ValueError("rank must be a permutation of 0..n-1 with one entry per query")
    run = _LiveRun(source, sizes, unit, (float(gamma), float(tau), int(m_min), conf))
    out = ref.run_policy(run, [int(r) for r in rank], policy=policy, budget_total=budget_total, K=K, elim=elim,
                         gamma=gamma, lam=lam, eps=eps, max_samples=max_samples, rho=rho)
    if hasattr(source, "watch"):
        source.watch(None)  # the run is over: nothing more to batch for
    out["responses"] = [[source.response(i, k) for k in range(run.q[i].N)] for i in range(run.n)]
    return out
