"""PETS offline (arXiv 2602.16745, github.com/ZDCSlab/PETS budget_allocation/FillintheBlank_offline.py): OKG over
per-query Dirichlet answer buckets. The argmax probability against closed forms and the source's own Monte Carlo
estimator, hand-computed decisions, engine == reference on random pools in both units, live == replay.
benchmarks/pets_source.py replays the source's script on a shared pool beside the engine."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from ttc.replay.engine import run_once
from ttc.replay.kernel import okg_lead_prob, okg_mc_h, okg_mc_reward, okg_memo_reward, okg_probs, okg_reward
from ttc.replay.live import run_live
from ttc.replay.policies import RunConfig
from ttc.replay.reference import okg_lead_prob as ref_prob
from ttc.replay.reference import okg_mc_reward as ref_mc_reward
from ttc.replay.reference import okg_probs as ref_probs
from ttc.replay.reference import okg_reward as ref_reward
from ttc.replay.reference import pets_counts

from support.equivalence import _compare, pools
from support.live_sources import OneAtATime, Relabelled, _assert_same


def _prob(c):
    return okg_lead_prob(np.array(c, np.int64), len(c))


def _reward(c):
    return okg_reward(np.array(c, np.int64), len(c))


def _two_bucket(a, b):
    """P(X > 1/2), X ~ Beta(a + 1, b + 1), exactly: P(Binomial(a + b + 1, 1/2) <= a)."""
    n = a + b + 1
    return float(sum(Fraction(math.comb(n, k), 2 ** n) for k in range(a + 1)))


@pytest.mark.parametrize("a,b", [(0, 0), (1, 0), (3, 1), (5, 5), (12, 3), (40, 37), (60, 2)])
def test_two_buckets_equal_the_closed_form(a, b):
    assert abs(_prob([a, b]) - _two_bucket(a, b)) < 1e-7


@pytest.mark.parametrize("m", [2, 3, 16, 64])
def test_equal_counts_split_evenly(m):
    for c in (0, 1, 7):
        assert abs(_prob([c] * m) - 1 / m) < 1e-7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=2, max_size=16))
def test_engine_and_reference_give_the_same_bits(counts):
    c = sorted(counts, reverse=True)
    assert _prob(c) == ref_prob(c)
    assert _reward(c) == ref_reward(c)


def test_the_sources_monte_carlo_estimates_the_same_probability():
    """The source's _estimate_I_vector (argmax of Gamma(alpha) draws), written out here with 200,000 draws, agrees
    with the quadrature within 4 of its standard errors."""
    rng = np.random.default_rng(7)
    for c in ([2, 1, 0, 0], [5, 3, 3, 0, 0, 0], [1] + [0] * 15, [9, 8, 1, 0]):
        alpha = np.array(c, float) + 1.0
        draws = 200_000
        p = float(np.mean(np.argmax(rng.gamma(alpha, size=(draws, len(c))), axis=1) == 0))
        assert abs(p - _prob(c)) < 4 * math.sqrt(p * (1 - p) / draws) + 1e-9, c


def _probs(c):
    out = np.empty(len(c))
    okg_probs(np.array(c, np.int64), len(c), out)
    return out


@pytest.mark.parametrize("c", [[0] * 16, [1] + [0] * 15, [2, 1, 0, 0], [5, 3, 3, 1], [9, 8, 1, 0], [30, 29, 1, 0]])
def test_the_whole_argmax_vector(c):
    """pets_mc's I vector: a distribution (sums to 1 within its coarser quadrature's error), its leading entry
    okg_lead_prob's, equal counts equal entries, the reference's bits."""
    p = _probs(c)
    assert abs(p.sum() - 1) < 1e-5 and abs(p[0] - _prob(c)) < 1e-5
    assert all(p[t] == p[t - 1] for t in range(1, len(c)) if c[t] == c[t - 1])
    assert list(p) == ref_probs(c)


def test_the_monte_carlo_estimate_has_the_sources_law():
    """okg_mc_h draws the source's _estimate_I_vector's max (argmax counts of 500 Gamma vectors) from the exact I:
    over 3000 keys its mean and spread equal those of the source's estimator, written out here (3000 repeats), within
    4 SE. The estimate is biased up where buckets tie (the max of noisy equal shares): the bias the source's rewards
    carry, which a mean of exact values would not show."""
    rng = np.random.default_rng(3)
    for c in ([1] + [0] * 15, [2, 2, 1, 0, 0, 0], [0, 0, 0, 0]):
        alpha = np.array(c, float) + 1.0
        src = np.array([np.bincount(np.argmax(rng.gamma(alpha, size=(500, len(c))), axis=1), minlength=len(c)).max()
                        / 500 for _ in range(3000)])
        p, cnt = _probs(c), np.empty(len(c), np.int64)
        eng = np.array([okg_mc_h(p, len(c), 500, np.uint64(k * 7919 + 1), cnt) for k in range(3000)])
        se = math.sqrt(src.var() / 3000 + eng.var() / 3000)
        assert abs(src.mean() - eng.mean()) < 4 * se, (c, src.mean(), eng.mean())
        assert 0.8 < eng.std() / src.std() < 1.25, (c, src.std(), eng.std())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=2, max_size=16), st.integers(1, 200), st.integers(0, 2**64 - 1))
def test_monte_carlo_rewards_give_the_same_bits(counts, mc, key):
    c = sorted(counts, reverse=True)
    got = okg_mc_reward(np.array(c, np.int64), len(c), mc, np.uint64(key))
    assert got == ref_mc_reward(c, mc, key)


@njit
def _memo_reward(c, nb, mh, mk, mv):
    return okg_memo_reward(c, c.shape[0], nb, mh, mk, mv)


def _through_memo(c, memo):
    nb = sum(1 for v in c if v > 0)
    return _memo_reward(np.array(c, np.int64), nb, *memo)


def _memo(cap, m):
    return np.zeros(cap, np.uint64), np.empty((cap, m), np.int64), np.empty(cap)


def test_the_memo_gives_okg_rewards_bits_and_serves_what_it_holds():
    """pets' memo of rewards by count vector (okg_memo_reward): every answer okg_reward's bits, in a table that holds
    them all and in one of 2 slots that must overwrite (a miss only recomputes); a vector it holds is served from it
    (a poisoned value comes back), one it does not hold is computed (the poison never leaks to another vector)."""
    rng = np.random.default_rng(3)
    vecs = [sorted(rng.choice([0, 0, 1, 2, 3, 9], 6).tolist(), reverse=True) for _ in range(60)]
    vecs += [[2, 1, 0, 0, 0, 0], [2, 1, 1, 0, 0, 0], [2, 1, 1, 1, 1, 1], [2, 1, 1, 1, 1, 0]]  # prefixes of each other
    vecs += vecs[:20]  # repeats: hits in the large table
    for cap in (1024, 2):
        memo = _memo(cap, 6)
        for c in vecs:
            assert _through_memo(c, memo) == _reward(c), (cap, c)
    memo = _memo(1024, 6)
    held = {tuple(c) for c in vecs[:30]}
    for c in held:
        _through_memo(list(c), memo)
    used = memo[0] != 0
    assert used.sum() == len(held)
    memo[2][used] = -7.0
    for c in {tuple(c) for c in vecs}:
        assert _through_memo(list(c), memo) == (-7.0 if c in held else _reward(list(c))), c


def test_rewards_by_hand():
    """Two buckets: h(a, b) = P(Beta(a + 1, b + 1) > 1/2) = P(Binomial(a + b + 1, 1/2) <= a)."""
    # (0, 0): h = 1/2; a draw into either: h(1, 0) = 3/4; reward 1/4
    assert abs(_reward([0, 0]) - 1 / 4) < 1e-7
    # (1, 0): h = 3/4; into the leader: h(2, 0) = 7/8 (+1/8); into the other: a tie, 1/2 (-1/4): reward 1/8
    assert abs(_reward([1, 0]) - 1 / 8) < 1e-7
    # (1, 1): h = 1/2 -> h(2, 1) = 11/16: 3/16; (2, 1): 11/16 -> h(3, 1) = 13/16: 1/8
    assert abs(_reward([1, 1]) - 3 / 16) < 1e-7
    assert abs(_reward([2, 1]) - 1 / 8) < 1e-7
    # a query in a tie gains more from a draw than one whose lead is settled
    assert _reward([6, 6, 0, 0]) > 0.1 > 0.001 > _reward([12, 0, 0, 0])
    # the buckets: first M distinct valid answers; later new ones and invalid answers count in none
    assert pets_counts([0, 1, 0, -1, 2, 3, 2], 3) == [2, 2, 1]
    assert pets_counts([-1, -1], 2) == [0, 0]


def test_decisions_by_hand():
    """Three queries, two buckets (pets_options 2), identity permutation, rank = index. The warm-up draws one each
    (every index +inf until then); each then holds (1, 0): reward 1/8 each, a tie that rank breaks: query 0's second
    draw disagrees, (1, 1): 3/16, the largest, so it draws the fifth too."""
    off = np.array([0, 4, 8, 12], np.int64)
    ans = np.array([0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0], np.int64)
    data = (off, np.zeros(12, np.int8), np.zeros(12), ans, np.ones(12, np.int64), np.arange(12), np.arange(3))
    cfg = RunConfig("pets", pets_options=2)
    assert [list(run_once(*data, cfg, b)["n_drawn"]) for b in (2, 3, 4, 5)] == [[1, 1, 0], [1, 1, 1], [2, 1, 1],
                                                                               [3, 1, 1]]
    for budget in range(13):  # and the reference on the same data, to the end of the pools
        _compare(data, cfg, budget)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pets_equals_the_reference(unit, data):
    pool = data.draw(pools(max_size=10))
    total = int(pool[0][-1])
    cfg = RunConfig("pets", unit=unit, K=data.draw(st.integers(1, 3)), max_samples=data.draw(st.integers(0, 8)),
                    pets_options=data.draw(st.sampled_from([2, 3, 16])))
    hi = total + 3 if unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pets_mc_equals_the_reference(unit, data):
    """The source's Monte Carlo convention: the reference draws the same noisy rewards (same keys, same hashes)."""
    pool = data.draw(pools(max_size=8))
    total = int(pool[0][-1])
    cfg = RunConfig("pets", unit=unit, K=data.draw(st.integers(1, 2)), max_samples=data.draw(st.integers(0, 6)),
                    pets_options=data.draw(st.sampled_from([2, 3, 16])), pets_mc=data.draw(st.integers(1, 40)))
    hi = total + 3 if unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


def test_pets_mc_spreads_the_third_draws():
    """Exactly, every query holding one answer outranks every query holding two, so all draw their second before
    any draws a third; with the source's 500-draw estimates (noise ~0.03 against gaps of ~0.01) some third draws come
    first: on 20 queries whose answers all differ, at budget 40, exact gives 2 each, pets_mc=500 does not."""
    n = 20
    off = np.arange(0, 8 * n + 1, 8, dtype=np.int64)
    ans = np.tile(np.arange(8, dtype=np.int64), n)
    data = (off, np.zeros(8 * n, np.int8), np.zeros(8 * n), ans, np.ones(8 * n, np.int64), np.arange(8 * n),
            np.arange(n))
    assert list(run_once(*data, RunConfig("pets"), 2 * n)["n_drawn"]) == [2] * n
    nd = np.asarray(run_once(*data, RunConfig("pets", pets_mc=500), 2 * n)["n_drawn"])
    assert nd.sum() == 2 * n and nd.max() >= 3


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_equals_replay(unit, data):
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools(max_size=10))
    cfg = RunConfig("pets", unit=unit, max_samples=data.draw(st.integers(0, 8)),
                    pets_options=data.draw(st.sampled_from([2, 16])), pets_mc=data.draw(st.sampled_from([0, 0, 30])))
    budget = data.draw(st.integers(0, (int(off[-1]) if unit == "samples" else int(tok.sum())) + 3))
    source = data.draw(st.sampled_from([Relabelled, OneAtATime]))(off, correct, score, ans, tok, perm)
    live = run_live(source, np.diff(off), rank, budget_total=budget, config=cfg)
    _assert_same(live, run_once(*pool, cfg, budget), (cfg, budget))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_consistency_column_equals_the_reference(data):
    """`consistency` (the self-consistency rate, PETS's objective): the drawn majority is a majority of the whole
    pool, per (configuration, seed) as the reference counts it on that seed's permutation."""
    from ttc.replay.engine import run_grid
    from ttc.replay.pool import Pool
    from ttc.replay.reference import run_reference
    from ttc.replay.rng import permutation, query_order
    from ttc.replay.tables import make_tables

    off, correct, score, ans, tok, _, _ = data.draw(pools(max_size=10))
    pool = Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok)
    cfgs = [RunConfig(p) for p in ("pets", "uniform", "entropy")]
    seeds = np.arange(3)
    budgets = np.full((3, 3), data.draw(st.integers(0, int(off[-1]) + 2)), np.int64)
    out_f, _, _, _ = run_grid(pool, cfgs, budgets, seeds, make_tables(int(np.diff(off).max()), 0.95))
    for s in seeds:
        perm, (rank, _) = permutation(pool.off, pool.qkeys, int(s)), query_order(pool.qkeys, int(s))
        for c, cfg in enumerate(cfgs):
            ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=int(budgets[c, s]),
                                policy=cfg.policy)
            assert out_f[c, s, 6] == ref["consistency"], (cfg, s)


def test_replay_reports_the_consistency_rate():
    from ttc.replay.engine import replay
    from ttc.replay.pool import Pool

    # query 0: answers 0, 0, 1 (majority 0); query 1: 0, 1, 1 (majority 1); budget 3 each draws them all
    off = np.array([0, 3, 6])
    pool = Pool.from_arrays(off, correct=np.array([1, 1, 0, 0, 1, 1], np.int8), ans=np.array([0, 0, 1, 0, 1, 1]))
    df = replay(pool, [RunConfig("uniform")], [3], range(2))[0]
    assert df["consistency"].to_list() == [1.0, 1.0]
    bare = Pool.from_arrays(off, correct=np.array([1, 1, 0, 0, 1, 1], np.int8))
    assert np.isnan(replay(bare, [RunConfig("uniform")], [3], range(1))[0]["consistency"][0])
