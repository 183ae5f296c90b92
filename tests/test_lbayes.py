"""The L-aggregated Bayesian stop (lbayes, arXiv 2602.05395, known prior) as an elimination rule: its posterior
against the exact rationals of the reference and by hand, hand-computed stops, the engine against the reference on
random pools under every policy that takes a rule (both units), and its refusal to run live (its prior is the
query's whole pool). benchmarks/lbayes_source.py runs the source's notebook code beside the engine."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay import engine
from ttc.replay.engine import replay, run_once
from ttc.replay.kernel import lbayes_posterior
from ttc.replay.live import run_live
from ttc.replay.policies import RunConfig
from ttc.replay.pool import Pool
from ttc.replay.reference import lbayes_posterior as ref_posterior
from ttc.replay.reference import run_reference
from ttc.replay.rng import permutation, query_order

from support.equivalence import config_kwargs, pools
from support.lbayes_each import lbayes_posterior_each
from support.live_sources import Relabelled


def _post(counts, n, n1, n2, uniq, L, n3=0):
    p = np.sort(np.array(counts, float) / sum(counts))[::-1]
    return lbayes_posterior(p / p.sum(), np.int64(n), np.int64(n1), np.int64(n2), np.int64(n3), np.int64(uniq),
                            np.int64(L))


def test_posterior_by_hand():
    """Prior shares 1/2, 3/10, 1/5 (pool counts 5, 3, 2). Draws a, a, b: each other category can take the one draw
    left, so hypothesis i weighs p_i^2 (1 - p_i): 0.125 / (0.125 + 0.063 + 0.032) = 0.5682. Five draws of a, three
    of b, two of c (n1 = 5 = the five draws left): a spread of all five on one other category ties the head and
    counts half, so S_i = (1 - p_i)^5 - (the others' p^5) / 2, and the posterior is 0.6654."""
    assert abs(_post([5, 3, 2], 3, 2, 1, 2, 2) - 0.125 / 0.22) < 1e-14
    p = [0.5, 0.3, 0.2]
    like = [p[i] ** 5 * ((1 - p[i]) ** 5 - sum(p[j] ** 5 for j in range(3) if j != i) / 2) for i in range(3)]
    assert abs(_post([5, 3, 2], 10, 5, 3, 3, 2) - like[0] / sum(like)) < 1e-14
    assert abs(like[0] / sum(like) - 0.66537) < 1e-4
    assert _post([7], 3, 3, 0, 1, 2) == 1.0  # one answer in the pool: certain at once


def test_l4_posterior_by_hand():
    """L = 4 (the notebook's L4_posterior_tilde): prior shares 0.4, 0.3, 0.2, 0.1 and draws a, a, b, c: no draw is
    left outside the three heads (S = 1), so hypothesis i weighs p_i^2 times the sum over ordered pairs (j, k) of
    the others of p_j p_k: 0.16 x 0.22 = 0.0352, 0.09 x 0.28 = 0.0252, 0.04 x 0.38 = 0.0152, 0.01 x 0.52 = 0.0052, and
    the posterior is 0.0352 / 0.0808 = 0.4356. Below three distinct answers drawn it is L = 3's ("back to L = 3")."""
    assert abs(_post([4, 3, 2, 1], 4, 2, 1, 3, 4, n3=1) - 0.0352 / 0.0808) < 1e-14
    assert ref_posterior([4, 3, 2, 1], 4, 2, 1, 3, 4, 1) == Fraction(352, 808)
    assert _post([4, 3, 2, 1], 5, 3, 2, 2, 4) == _post([4, 3, 2, 1], 5, 3, 2, 2, 3)
    assert _post([4, 3, 2, 1], 4, 2, 1, 3, 4, n3=1) != _post([4, 3, 2, 1], 4, 2, 1, 3, 3)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(1, 9), min_size=1, max_size=5),
       draws=st.lists(st.integers(0, 4), min_size=1, max_size=12), L=st.sampled_from([2, 3, 4]))
def test_posterior_equals_the_exact_one(counts, draws, L):
    """The engine's log-space recursion (the source's Algorithm 2) against the reference's exact rationals."""
    seen = {}
    for a in draws:
        seen[a] = seen.get(a, 0) + 1
    c = sorted(seen.values(), reverse=True) + [0, 0]
    n1, n2, n3 = c[:3]
    got = _post(counts, len(draws), n1, n2, len(seen), L, n3)
    want = ref_posterior(counts, len(draws), n1, n2, len(seen), L, n3)
    assert abs(got - float(want)) < 1e-12


def _vote_prefixes(rng, p, draws):
    """(n, n1, n2, n3, uniq) after each vote of a sequence drawn from the prior p, as the rule check sees them."""
    c = np.zeros(len(p), np.int64)
    for a in rng.choice(len(p), size=draws, p=p):
        c[a] += 1
        s = np.sort(c)[::-1]
        yield c.sum(), s[0], s[1] if len(p) > 1 else 0, s[2] if len(p) > 2 else 0, int((c > 0).sum())


def test_posterior_equals_the_direct_computation():
    """lbayes_posterior (each distinct recursion once: the L = 2 prefix, one hypothesis per run of equal shares, L = 3
    and 4's memo of S) against the direct computation it replaced (lbayes_posterior_each, one recursion per
    hypothesis), on random vote sequences over priors with many equal shares (as a pool's answers drawn once or
    twice give): the same floats, so the same decision at any threshold."""
    rng = np.random.default_rng(29)
    checked = 0
    for _ in range(60):
        k = int(rng.integers(1, 30))
        counts = rng.integers(1, 5, k) * rng.choice([1, 1, 1, 7], k)  # (ties, and a few large counts)
        p = np.sort(counts / counts.sum())[::-1]
        p = p / p.sum()
        for n, n1, n2, n3, uniq in _vote_prefixes(rng, p, int(rng.integers(1, 30))):
            for L in (2, 3, 4) if k <= 10 else (2, 3):
                args = (p, np.int64(n), np.int64(n1), np.int64(n2), np.int64(n3), np.int64(uniq), np.int64(L))
                assert lbayes_posterior(*args) == lbayes_posterior_each(*args), (counts, n, n1, n2, n3, uniq, L)
                checked += 1
    assert checked > 2000


def _pool_with_many_answers(seed):
    """Queries of 5 to 40 answers and one of 70 over skewed answer laws: the leaderboard's reasoning pools in
    small."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(5, 41)) for _ in range(5)] + [70]
    ans = []
    for m in sizes:
        law = rng.dirichlet(np.full(int(rng.integers(1, 12)), 0.5))
        a = rng.choice(len(law), size=m, p=law)
        a[rng.random(m) < 0.1] = -1
        ans.append(a)
    ans = np.concatenate(ans)
    off = np.concatenate([[0], np.cumsum(sizes)])
    return Pool.from_arrays(off, correct=(ans == 0).astype(np.int8), ans=ans, tok=rng.integers(1, 9, len(ans)))


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@pytest.mark.parametrize("memo_bytes", [None, 11_000])
def test_the_grids_memo_keeps_every_decision(unit, memo_bytes, monkeypatch):
    """A grid that runs lbayes memoises its posterior per (query, draws, leader's count) for all its seeds and
    configurations (kernel.PoolArrays.lbm); run_once has no memo. Seed by seed, on the grid's permutations, every
    query's draws and stop are run_once's, at L 2, 3 and 4, under elimination, capped, and entropy; with the memo
    sized to the largest query, and cut to 20 draws (past them computed each time)."""
    if memo_bytes is not None:
        monkeypatch.setattr(engine, "LB_MEMO_BYTES", memo_bytes)
        m = engine.lbayes_memo(6, 70)
        assert m.shape[0] == 6 and 0 < m.nbytes <= memo_bytes and m.shape[1] < 41 * 42 // 2  # (cut below 40 draws)
    pool = _pool_with_many_answers(3)
    cfgs = [RunConfig("elimination", unit=unit, eliminate="lbayes", lb_thre=t, lb_l=L, max_samples=cap)
            for t in (0.9, 0.95) for L in (2, 3, 4) for cap in (0, 16)]
    cfgs.append(RunConfig("entropy", unit=unit, eliminate="lbayes"))
    seeds = range(8)
    for k in (6, 9):  # (two calls: the second finds the memo the first filled, kept on the pool)
        per = k if unit == "samples" else k * float(np.median(pool.tok))
        _, pq = replay(pool, cfgs, [per], seeds, select="sc", per_query=True)
        for s in seeds:
            perm = permutation(pool.off, pool.qkeys, s)
            rank, _ = query_order(pool.qkeys, s)
            for c in cfgs:
                got = run_once(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, c,
                               int(round(per * pool.n_queries)))
                rows = pq.filter((pq["seed"] == s) & (pq["config"] == c.label()))
                assert rows["n_drawn"].to_list() == list(got["n_drawn"]), (c.label(), s)
                assert rows["answered"].to_list() == list(got["answered"]), (c.label(), s)
    memo = pool.__dict__["_lbayes_memo"][2]
    assert np.isfinite(memo).any()  # (kept and filled)


def _drawn(answers, thre, L=2):
    m = len(answers)
    correct = np.zeros(m, np.int8)
    got = run_once(np.array([0, m]), correct, correct.astype(float), np.array(answers, np.int64),
                   np.ones(m, np.int64), np.arange(m), np.zeros(1, np.int64),
                   RunConfig("elimination", eliminate="lbayes", lb_thre=thre, lb_l=L), m)
    return int(got["n_drawn"][0]), bool(got["answered"][0])


def test_stops_by_hand():
    """The pool 0 0 0 0 0 1 1 1 2 2 in that order: after k draws of 0 the posterior is 0.5^k / (0.5^k + 0.3^k +
    0.2^k): 0.5, 0.658, 0.781, 0.865, 0.919; the sixth (a 1) brings it to 0.889 and it falls from there (0.848,
    0.797, 0.732, 0.665). Invalid answers cost a draw, do not vote and are not in the prior."""
    seq = [0] * 5 + [1] * 3 + [2] * 2
    assert _drawn(seq, 0.5) == (1, True)
    assert _drawn(seq, 0.85) == (4, True)
    assert _drawn(seq, 0.9) == (5, True)
    assert _drawn(seq, 0.92) == (10, False)
    assert _drawn([-1, 0, -1] + seq[1:] + [-1], 0.85) == (6, True)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lbayes_equals_the_reference(unit, data):
    """Engine and reference on the same permutations: every policy that takes a rule, pulls of 1 to 4, caps, L 2, 3
    and 4 (thresholds off the simple fractions a posterior can equal exactly)."""
    pool = data.draw(pools(max_size=12))
    off, correct, score, ans, tok, perm, rank = pool
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "gap", "entropy", "two-stage", "streaming", "dsc",
                                               "marginal-gain", "side-eb"])),
                    unit=unit, K=data.draw(st.integers(1, 4)), eliminate="lbayes",
                    max_samples=data.draw(st.integers(0, 12)),
                    lb_thre=data.draw(st.sampled_from([0.62, 0.83, 0.953, 0.991])),
                    lb_l=data.draw(st.sampled_from([2, 3, 4])))
    budget = data.draw(st.integers(0, int(off[-1]) + 3 if unit == "samples" else int(tok.sum()) + 5))
    ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=budget,
                        **config_kwargs(cfg))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget)
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc"):
        assert list(np.asarray(got[key]).astype(int)) == [int(v) for v in ref[key]], (key, cfg, budget)
    for key in ("samples_used", "tokens_used", "exhausted"):
        assert got[key] == ref[key], (key, cfg, budget)


def test_it_does_not_run_live():
    """Its prior is the query's whole pool, which a live run does not have yet: refused, as the oracle is."""
    off = np.array([0, 3])
    source = Relabelled(off, np.zeros(3, np.int8), np.zeros(3), np.array([0, 0, 1]), np.ones(3, np.int64),
                        np.arange(3))
    with pytest.raises(ValueError, match="hindsight"):
        run_live(source, [3], [0], budget_total=3, config=RunConfig("elimination", eliminate="lbayes"))


@pytest.mark.parametrize("bad", [{"lb_thre": 0.0}, {"lb_thre": 1.5}, {"lb_l": 5}, {"lb_l": 1}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError, match="--lb-"):
        RunConfig("elimination", eliminate="lbayes", **bad)


def test_the_reference_is_exact():
    """One case in rationals: shares 1/2, 1/2 and a 1-1 draw: both hypotheses alike, the posterior exactly 1/2."""
    assert ref_posterior([4, 4], 2, 1, 1, 2, 2) == Fraction(1, 2)
    assert math.isclose(_post([4, 4], 2, 1, 1, 2, 2), 0.5)


def test_ttc_run_refuses_it():
    """`ttc run --eliminate lbayes` is one `error:` line (a RunError), before any model is loaded."""
    from types import SimpleNamespace

    from ttc.harvest.run.request import RunError, check_oracle

    req = SimpleNamespace(oracle="sc", confidence=None, out="out")
    with pytest.raises(RunError, match="--eliminate lbayes needs hindsight"):
        check_oracle(req, RunConfig("elimination", eliminate="lbayes"), "sc")
