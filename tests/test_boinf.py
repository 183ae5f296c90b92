"""Best-of-Infinity's adaptive sampling (boinf, arXiv 2509.21091) as an elimination rule: its Bayes factor against a
closed form and against its source's Monte Carlo estimate, hand-computed stops, and the engine against the reference
on random pools under every policy that takes a rule (both units). benchmarks/boinf_source.py runs the source's own
script beside the engine on a Best-of-Infinity file."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import run_once
from ttc.replay.kernel import BOINF_ALPHA, boinf_bayes_factor, boinf_lead_prob, boinf_stop_prob
from ttc.replay.live import run_live
from ttc.replay.policies import RunConfig
from ttc.replay.reference import boinf_lead_prob as ref_prob
from ttc.replay.reference import boinf_stop_prob as ref_stop

from support.equivalence import _compare, pools
from support.live_sources import OneAtATime, Relabelled, _assert_same


def _slots(lead_cnt, others, invalid=0):
    """One query's answer slots: invalid answers in slot 0, the leading answer (id 0) in slot 1, the others after."""
    si = np.zeros((2 + len(others), 2), np.int64)
    si[0, 0], si[1, 0] = invalid, lead_cnt
    for k, c in enumerate(others):
        si[2 + k, 0] = c
    return si


def _prob(lead_cnt, others, invalid=0):
    si = _slots(lead_cnt, others, invalid)
    return boinf_lead_prob(si, np.int64(0), np.int64(len(si)), np.int64(0), np.int64(lead_cnt), BOINF_ALPHA)


def _bf(lead_cnt, others, invalid=0):
    si = _slots(lead_cnt, others, invalid)
    return boinf_bayes_factor(si, np.int64(0), np.int64(len(si)), np.int64(0), np.int64(lead_cnt), BOINF_ALPHA)


def _stop(lead_cnt, others, bf, mc=1000):
    si = _slots(lead_cnt, others)
    return boinf_stop_prob(si, np.int64(0), np.int64(len(si)), np.int64(0), np.int64(lead_cnt), BOINF_ALPHA,
                           float(bf), np.int64(mc))


STATES = [(1, ()), (2, ()), (1, (1,)), (3, (1,)), (5, (2, 1)), (10, (3, 3, 2, 1, 1, 1)), (1, (1, 1, 1)), (7, (7,)),
          (12, (5, 4, 3, 2, 2, 1, 1)), (20, (19, 3)), (30, (1,) * 5), (40, ()), (25, (10,) * 6)]


@pytest.mark.parametrize("lead_cnt,others", STATES)
def test_lead_probability_equals_the_closed_form(lead_cnt, others):
    """The engine's trapezoid rule against the reference's closed form (exact rationals but one power, 60 digits)."""
    assert abs(_prob(lead_cnt, others) - ref_prob(lead_cnt, tuple(sorted(others, reverse=True)))) < 1e-13


def test_lead_probability_by_hand():
    """One answer drawn once: P(G_2 > G_1.3) for independent Gamma(2) and Gamma(1.3) is the integral of
    x e^-x P(1.3, x), = sum_{i<=1} Gamma(1.3 + i) / (Gamma(1.3) i! 2^(1.3 + i)) = 2^-1.3 (1 + 1.3 / 2) = 0.6701;
    invalid answers do not vote."""
    p = 2.0 ** -1.3 * (1.0 + 1.3 / 2.0)
    assert abs(_prob(1, ()) - p) < 1e-14
    assert abs(_bf(1, ()) - 2 * p / (1 - p)) < 1e-12  # m = 1 answer and the bucket: (1 + 1) P / (1 - P)
    assert _prob(4, (2,), invalid=9) == _prob(4, (2,))


def _source_bf(counts, rng, n_samples=1000):
    """calculate_bayes_factor_mc of jkomiyama/BoInf-code-publish boinf/test_main.py (commit fbcb097), its counts
    holding the unknown bucket's 0.3 last, with a given generator."""
    alpha = np.array(counts) + 1.0
    samples = rng.dirichlet(alpha, n_samples)
    max_idx = np.argmax(counts)
    hits = np.sum(samples[:, max_idx] == np.max(samples, axis=1))
    if hits == 0:
        return 0.0, 0.0
    p = hits / n_samples
    q = 1.0 - p
    if q == 0:
        largest = max(counts) / sum(counts)
        second = sorted(counts, reverse=True)[1] / sum(counts)
        gap = max(largest - second, 0.0001)
        q = np.exp(- max(counts) * gap * gap / 2)
    return len(counts) * p / q, p


@pytest.mark.parametrize("lead_cnt,others", [(1, ()), (3, (1,)), (5, (2, 1)), (7, (7,)), (12, (5, 4, 3, 2, 2, 1, 1))])
def test_probability_within_the_sources_monte_carlo(lead_cnt, others):
    """The source's estimate of P with 200,000 Dirichlet draws lies within 4 standard errors of the engine's P."""
    rng = np.random.default_rng(7)
    _, p_mc = _source_bf([lead_cnt, *others, BOINF_ALPHA], rng, 200_000)
    p = _prob(lead_cnt, others)
    assert abs(p_mc - p) <= 4 * math.sqrt(p * (1 - p) / 200_000) + 1e-12


@pytest.mark.parametrize("lead_cnt,others,bf", [(2, (), 10), (2, (), 9), (3, (1,), 10), (5, (2, 1), 16), (1, (1,), 2),
                                                 (9, (), 100), (10, (), 100), (30, (), 1e7), (12, (5, 4, 3), 30)])
def test_stop_probability_is_the_sources_monte_carlo(lead_cnt, others, bf):
    """The chance the engine gives the source's check of stopping against the frequency of its own estimate (1,000
    Dirichlet draws, its Hoeffding branch where all favour the mode) reaching bf over 4,000 checks: within 4 SE.
    Two answers drawn, none else: P = 0.822 and BF = 9.23, so bf 10 stops only on a high estimate (the source stops
    there about one check in six), bf 9 mostly; one answer drawn 9 or 10 times crosses 100 on the Hoeffding term."""
    rng = np.random.default_rng(1)
    hits = sum(_source_bf([lead_cnt, *others, BOINF_ALPHA], rng)[0] >= bf for _ in range(4000))
    p = _stop(lead_cnt, others, bf)
    assert abs(hits / 4000 - p) <= 4 * math.sqrt(max(p * (1 - p), 1e-4) / 4000), (hits / 4000, p)


def test_stop_probability_equals_the_reference_and_the_hoeffding_branch():
    """Against the reference's binomial sum at 40 digits (P^1000 turns P's 1e-16 into 1e-12 here); the Hoeffding
    term decides where every draw favours the mode: one answer 30 times gives 2 exp(30 (29.7 / 30.3)^2 / 2) = 3.6e6
    (P^1000 = 0.9997), so bf 1e6 stops almost surely and 1e7 almost never, where the paper's Bayes factor (5e8)
    would stop at both."""
    for lead_cnt, others, bf, mc in [(2, (), 10, 1000), (3, (1,), 10, 1000), (5, (2, 1), 16, 1000),
                                     (12, (5, 4, 3), 30, 1000), (30, (), 1e6, 1000), (4, (2,), 5, 10),
                                     (7, (7,), 2, 50)]:
        assert abs(_stop(lead_cnt, others, bf, mc) - ref_stop(lead_cnt, list(others), bf, mc)) < 1e-10
    g = 30 / 30.3 - 0.3 / 30.3
    assert 3.6e6 < 2 / math.exp(-30 * g * g / 2) < 3.7e6
    assert _stop(30, (), 1e6) > 0.999 and _stop(30, (), 1e7) < 0.001 and _bf(30, ()) > 1e8


def _drawn(answers, bf, mc=0):
    m = len(answers)
    correct = np.zeros(m, np.int8)
    got = run_once(np.array([0, m]), correct, correct.astype(float), np.array(answers, np.int64),
                   np.ones(m, np.int64), np.arange(m), np.zeros(1, np.int64),
                   RunConfig("elimination", eliminate="boinf", bf=bf, bf_mc=mc), m)
    return int(got["n_drawn"][0]), bool(got["answered"][0])


def test_stops_by_hand():
    """The paper's rule (--bf-mc 0). 0 0 0 0 1 0 0 0: after one draw BF = 2 P(G_2 > G_1.3) / (1 - P) = 4.06, after
    two 9.23, after three (P = 0.9054) 19.1; a second answer at draw 5 costs its Bayes factor the gain of three
    draws; invalid answers (-1) cost a draw and do not vote."""
    seq = [0, 0, 0, 0, 1, 0, 0, 0]
    assert _drawn(seq, 4.0) == (1, True)
    assert _drawn(seq, 5.0) == (2, True)
    assert _drawn(seq, 9.2) == (2, True)
    assert _drawn(seq, 10.0) == (3, True)
    assert _drawn(seq, 300.0) == (8, False)
    assert _drawn([-1, -1, 0, 0], 5.0) == (4, True)
    assert 2.0 < _bf(1, (1,)) < 2.1  # a 1-1 tie: 3 P / (1 - P), P = 0.4065: the source's B = 2 stops on a tie


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_boinf_equals_the_reference(unit, data):
    """Engine and reference on the same permutations: every policy that takes a rule, pulls of 1 to 4, caps."""
    pool = data.draw(pools(max_size=14))
    total = int(pool[0][-1])
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "gap", "entropy", "two-stage", "streaming", "dsc",
                                               "marginal-gain", "side-eb"])),
                    unit=unit, K=data.draw(st.integers(1, 4)), eliminate="boinf",
                    max_samples=data.draw(st.integers(0, 12)),
                    bf=data.draw(st.sampled_from([2.0, 4.0, 9.2, 30.0, 300.0])),
                    bf_mc=data.draw(st.sampled_from([0, 10, 50])))
    hi = total + 3 if unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_equals_replay(unit, data):
    """A live run over a pool-backed source (answers relabelled, so only their equality can matter; responses
    arriving one at a time) decides as the replay of that pool on the same permutation: the source's Monte Carlo is
    drawn from the draws' tokens and scores, which both see alike."""
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools(max_size=14))
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "streaming", "two-stage"])), unit=unit,
                    K=data.draw(st.integers(1, 3)), eliminate="boinf", max_samples=data.draw(st.integers(0, 10)),
                    bf=data.draw(st.sampled_from([2.0, 4.0, 9.2, 30.0])), bf_mc=data.draw(st.sampled_from([0, 50])))
    budget = data.draw(st.integers(0, (int(off[-1]) if unit == "samples" else int(tok.sum())) + 3))
    source = data.draw(st.sampled_from([Relabelled, OneAtATime]))(off, correct, score, ans, tok, perm)
    live = run_live(source, np.diff(off), rank, budget_total=budget, config=cfg)
    _assert_same(live, run_once(*pool, cfg, budget), (cfg, budget))


def test_the_rules_doc_names_the_kernels_unknown_bucket():
    from ttc.replay.kernel import BOINF_ALPHA
    from ttc.replay.policies import ELIMINATION_RULES

    assert f"unknown bucket of {BOINF_ALPHA:g} " in ELIMINATION_RULES["boinf"].doc
