"""Exact uniform curves against brute-force enumeration, and the efficiency gain."""
import itertools
import math

import numpy as np
import pytest

from ttc.replay.exact import best_of_k, coverage_at_k, efficiency_gain
from ttc.replay.pool import Pool


def _tiny_pool(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 7, 4)
    off = np.concatenate([[0], np.cumsum(sizes)])
    correct = (rng.random(off[-1]) < 0.4).astype(np.int8)
    score = rng.choice([0.1, 0.5, 0.5, 0.9], off[-1])  # ties on purpose
    return Pool.from_arrays(off, correct=correct, score=score)


def _brute(pool, k):
    """Average over all ordered draws of k distinct responses (every order equally likely)."""
    cov, acc = [], []
    for i in range(pool.n_queries):
        idx = range(pool.off[i], pool.off[i + 1])
        c_hits, a_hits, count = 0, 0, 0
        for draw in itertools.permutations(idx, k):
            count += 1
            c_hits += any(int(pool.correct[j]) for j in draw)
            best = draw[0]
            for j in draw[1:]:
                if pool.score[j] > pool.score[best]:  # ties keep the earliest drawn
                    best = j
            a_hits += int(pool.correct[best])
        cov.append(c_hits / count)
        acc.append(a_hits / count)
    return np.mean(cov), np.mean(acc)


@pytest.mark.parametrize("seed", range(4))
def test_exact_curves_equal_enumeration(seed):
    pool = _tiny_pool(seed)
    cov, bon = coverage_at_k(pool), best_of_k(pool)
    assert len(cov) == pool.sizes.min()
    for k in range(1, len(cov) + 1):
        c, a = _brute(pool, k)
        assert cov[k - 1] == pytest.approx(c, abs=1e-12)
        assert bon[k - 1] == pytest.approx(a, abs=1e-12)


def test_best_of_k_under_ground_truth_is_coverage():
    pool = _tiny_pool(9)
    gt = Pool.from_arrays(pool.off, correct=pool.correct)
    assert np.allclose(best_of_k(gt), coverage_at_k(gt))


def test_efficiency_gain_interpolates_and_censors():
    curve = np.array([0.5, 0.7, 0.8])
    assert efficiency_gain(curve, 0.75, 1.0) == (pytest.approx(2.5), False)
    assert efficiency_gain(curve, 0.25, 0.5) == (pytest.approx(1.0), False)  # half of k=1, over spend 0.5
    g, censored = efficiency_gain(curve, 0.9, 2.0)
    assert censored and g == pytest.approx(1.5)
    assert math.isnan(efficiency_gain(curve, float("nan"), 1.0)[0])


@pytest.mark.parametrize("conf", [0.95, 0.9375, 0.8, 0.99])
def test_sc_beta_table_equals_exact_rational_search(conf):
    from fractions import Fraction

    from ttc.replay.tables import sc_beta_table

    max_n = 60
    table = sc_beta_table(max_n, conf)
    for b in range(max_n // 2 + 1):
        want = max_n + 2
        for a in range(max(b, 1), max_n - b + 1):
            n = a + b + 1
            if Fraction(sum(math.comb(n, j) for j in range(a + 1)), 2**n) >= Fraction(str(conf)):
                want = a
                break
        assert table[b] == want, (b, table[b], want)
