"""pets-online (PETS's streaming allocation, FillintheBlank_online.py at commit 92c34a6): its exact curve and
agreement chance against enumeration and the source's own exact function, its plan's guarantees, hand-computed runs,
and the engine against the reference on the same permutations (docs/semantics.md, pets-online)."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import run_once
from ttc.replay.policies import REGISTRY, RunConfig
from ttc.replay.reference import (
    PETS_K0,
    ndtri,
    pets_accepted,
    pets_agree4,
    pets_curve,
    pets_fit,
    pets_fits,
    pets_gain,
    pets_plan,
)

from support.equivalence import _compare, pools


def _brute_curve(counts, k):
    """A(k) by enumerating every sequence of k draws: the top share's answer wins, a tie among w counts 1 / w."""
    tot = sum(counts)
    p = [c / tot for c in counts]
    top = max(range(len(p)), key=lambda i: p[i])
    s = 0.0
    for seq in itertools.product(range(len(p)), repeat=k):
        cnt = [seq.count(i) for i in range(len(p))]
        w = [i for i in range(len(p)) if cnt[i] == max(cnt)]
        if top in w:
            s += math.prod(p[i] for i in seq) / len(w)
    return s


@pytest.mark.parametrize("counts", [[5, 3, 2], [4, 4, 1, 1], [7], [3, 3], [2, 1, 1, 1], [6, 0, 2]])
def test_curve_is_the_enumeration(counts):
    A = pets_curve(counts, 6)
    assert A[0] == 0.5
    for k in range(1, 7):
        assert abs(A[k] - _brute_curve([c for c in counts if c], k)) < 1e-13, (counts, k)


def test_curve_is_the_sources_exact_one():
    """The source's exact_prob_pick_argmax_multinom4 enumerates exactly for 4 options: its values on counts
    (20, 15, 9, 4), printed by the source's function at commit 92c34a6 (python -c 'import FillintheBlank_online as F;
    F.exact_prob_pick_argmax_multinom4(np.array([20, 15, 9, 4.]), k)')."""
    A = pets_curve([20, 15, 9, 4])
    for k, want in ((5, 0.5116403838734573), (17, 0.6586816470863955), (32, 0.7426722631512649)):
        assert abs(A[k] - want) < 1e-14


def test_curve_estimate_has_the_sources_law():
    """pets_curve_mc: each point is the mean of N outcomes drawn from the exact law (the top wins alone: 1, tied
    with t others: 1 / (1 + t), loses: 0), as the source's mean over N multinomial draws; its mean over keys is the
    exact A(k) within 4 SE, and, as the source's, a curve whose failures are rarer than 1 / N reads 1 exactly (the
    probit then clips it to 1 - 1e-12: the source's fits lean on that, docs/semantics.md)."""
    exact = pets_curve([5, 3, 2])
    for k in (3, 8):
        est = np.array([pets_curve([5, 3, 2], mc=100, key=key)[k] for key in range(300)])
        assert abs(est.mean() - exact[k]) < 4 * est.std(ddof=1) / math.sqrt(len(est)), k
        assert est.std() > 0
    assert pets_curve([35, 3, 2], mc=20000, key=7)[32] == 1.0 > pets_curve([35, 3, 2])[32]
    # mc draws reproduce: the same key, the same estimate
    assert pets_curve([4, 3, 1], mc=50, key=3) == pets_curve([4, 3, 1], mc=50, key=3)


def test_quantile_agreement_and_gain():
    from statistics import NormalDist

    for p in (1e-12, 1e-5, 0.02, 0.3, 0.5, 0.77, 0.999, 1 - 1e-12):
        assert abs(ndtri(p) - NormalDist().inv_cdf(p)) < 1e-14 * max(1.0, abs(ndtri(p)))
    # the chance that 4 draws without replacement agree: C(c, 4) summed over C(n, 4)
    assert pets_agree4([4, 1]) == 1 / 5 and pets_agree4([2, 2]) == 0.0 and pets_agree4([9]) == 1.0
    assert pets_agree4([5, 4]) == (5 + 1) / 126
    # a curve that saturates (A = 1: the clipped probit, a = 0 but for the fit's rounding) gains nothing from a draw
    a, b = pets_fit(pets_curve([8]))
    assert abs(a) < 1e-15 and abs(b - ndtri(1 - 1e-12)) < 1e-12 and pets_gain(4, a, b) == 0.0
    # the gain is the normal cdf's difference
    nd = NormalDist()
    for k, a, b in ((4, 0.3, -0.5), (10, 1.2, -2.0), (7, 0.05, 1.0)):
        want = nd.cdf(a * math.sqrt(k + 1) + b) - nd.cdf(a * math.sqrt(k) + b)
        assert abs(pets_gain(k, a, b) - want) < 1e-14


def test_accepted_answers():
    """The first M distinct valid answers are options; a later new one and an invalid answer are discarded."""
    assert pets_accepted([0, 1, -1, 2, 0, 2, 1], 2) == [0, 1, 0, 1]
    assert pets_accepted([3, 3, 3], 2) == [3, 3, 3]


@settings(max_examples=60, deadline=None)
@given(pools_=st.lists(st.lists(st.integers(0, 4), min_size=4, max_size=30), min_size=1, max_size=4),
       bbar=st.floats(1.0, 40.0), bmax=st.integers(4, 64))
def test_plan_keeps_its_expected_budget(pools_, bbar, bmax):
    """The greedy plan starts both buckets at K0 and adds a draw only while sum(pi B) stays within bbar (or when
    K0 alone is over it, stays at K0), never past bmax; more budget never gives a bucket less."""
    fits = pets_fits([(i, pets_accepted(p, 10), p) for i, p in enumerate(pools_)])
    B = pets_plan(fits, bbar, bmax)
    assert all(PETS_K0 <= x <= max(PETS_K0, bmax) for x in B)
    g = sum(pets_agree4(list(np.bincount(p)[np.bincount(p) > 0])) for p in pools_) / len(pools_)
    pi = (g / (1 + 1e-12), (1 - g) / (1 + 1e-12))
    if B != [PETS_K0, PETS_K0]:
        assert pi[0] * B[0] + pi[1] * B[1] <= bbar + 1e-9
    more = pets_plan(fits, bbar + 5.0, bmax)
    assert more[0] >= B[0] and more[1] >= B[1]


def _data(ans_rows, rank=None):
    sizes = [len(r) for r in ans_rows]
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    t = int(off[-1])
    ans = np.array([a for r in ans_rows for a in r], np.int64)
    return (off, np.zeros(t, np.int8), np.zeros(t), ans, np.ones(t, np.int64), np.arange(t),
            np.arange(len(sizes)) if rank is None else np.array(rank, np.int64))


def test_a_saturated_plan_by_hand():
    """One training query whose pool is unanimous: A(k) = 1 for every k, so a = 0 and no draw gains anything; pi =
    (1, 0) and bucket 1's a = b = 0 gains nothing either: the plan is (4, 4), and every query stops at 4 accepted
    answers. Query 1's third draw is invalid (paid, not accepted): 5 draws; query 2 (pets_options 2) discards its
    third answer, new once 0 and 1 hold the options: 5 draws; query 3 runs out of pool in its warm-up (3 draws)."""
    data = _data([[0] * 8, [0, 1, -1, 0, 1, 1, 1], [0, 1, 2, 1, 1, 0, 0], [0, 1, 1]])
    cfg = RunConfig("pets-online", pets_train=1, pets_options=2)
    got = run_once(*data, cfg, 100)
    assert list(got["n_drawn"]) == [4, 5, 5, 3] and list(got["exhausted_q"]) == [0, 0, 0, 1]
    # the budget ends the run in order: query 2 gets the one draw left after 4 + 5 + ...
    assert list(run_once(*data, cfg, 10)["n_drawn"]) == [4, 5, 1, 0]
    for budget in range(0, 20):
        _compare(data, cfg, budget)


def test_the_buckets_get_different_budgets():
    """Training on a mix of easy and split pools gives the disagreeing bucket more: with the same pools streamed, a
    query whose first 4 answers agree stops at the agreeing bucket's budget and one that disagrees draws more; the
    training queries are streamed too (rank 0 and 1: they come first)."""
    easy = [0] * 15 + [1]
    split = [0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 0, 2, 0, 1, 0, 0]
    rows = [easy, split, easy, split, [0, 0, 0, 0] + [1, 2] * 6, [0, 1, 0, 1] + [0] * 12]
    data = _data(rows)
    cfg = RunConfig("pets-online", pets_train=2, pets_curve_mc=0)
    got = np.asarray(run_once(*data, cfg, 8 * len(rows))["n_drawn"])
    agree, disagree = got[4], got[5]
    assert agree >= PETS_K0 and disagree > agree  # the plan differs from the fixed baseline
    assert got[0] == got[2] == agree and got[1] == got[3] == disagree
    for budget in (0, 20, 48, 64, 96):
        _compare(data, cfg, budget)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pets_online_equals_the_reference(unit, data):
    pool = data.draw(pools(max_size=12))
    total = int(pool[0][-1])
    cfg = RunConfig("pets-online", unit=unit, max_samples=data.draw(st.sampled_from([0, 0, 5, 8])),
                    pets_options=data.draw(st.sampled_from([2, 3, 10])), pets_train=data.draw(st.integers(1, 5)),
                    pets_curve_mc=data.draw(st.sampled_from([0, 1, 9, 60])))
    hi = total + 3 if unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pets_online_equals_the_reference_on_larger_pools(data):
    """Pools of 20 to 40 answers over few values and budgets of 4 to 20 per query, where the plans leave K0."""
    n = data.draw(st.integers(3, 8))
    rows = [data.draw(st.lists(st.integers(-1, 3), min_size=20, max_size=40)) for _ in range(n)]
    off, correct, score, ans, tok, _, _ = _data(rows)
    perm = np.concatenate([off[i] + np.array(data.draw(st.permutations(range(len(r))))) for i, r in enumerate(rows)])
    rank = np.array(data.draw(st.permutations(range(n))), np.int64)
    cfg = RunConfig("pets-online", pets_options=data.draw(st.sampled_from([3, 10])),
                    pets_train=data.draw(st.integers(1, n)), pets_curve_mc=data.draw(st.sampled_from([0, 40])))
    _compare((off, correct, score, ans, tok, perm.astype(np.int64), rank), cfg, data.draw(st.integers(4, 20)) * n)


def test_registry_entry():
    """Replay only (its plan reads the training queries' whole pools); it reads answers."""
    p = REGISTRY["pets-online"]
    assert p.code == 17 and not p.live and "answers" in p.needs
    assert p.params == ("max_samples", "pets_options", "pets_train", "pets_curve_mc")
    with pytest.raises(ValueError, match="--pets-train"):
        RunConfig("pets-online", pets_train=0)
