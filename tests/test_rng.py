"""Counter-based permutations: equal to a plain-Python reference of the hash, and uniform."""
import collections
import itertools

import numpy as np

from ttc.replay.rng import permutation, query_keys, query_order

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _stream(seed, qkey):
    return _mix(_mix((seed * G + 1) & M64) ^ qkey)


def _reference_perm(off, qkeys, seed):
    perm = []
    for i in range(len(off) - 1):
        m = off[i + 1] - off[i]
        p = list(range(off[i], off[i + 1]))
        h = _stream(seed, int(qkeys[i]))
        for k in range(m - 1):
            r = _mix((h + (k + 1) * G) & M64)
            j = k + (((r >> 32) * (m - k)) >> 32)
            p[k], p[j] = p[j], p[k]
        perm += p
    return perm


def _reference_order(qkeys, seed):
    keys = [_mix(_stream(seed, int(q)) ^ 0xD1B54A32D192ED03) for q in qkeys]
    return sorted(range(len(keys)), key=lambda i: keys[i])


def test_permutation_and_order_equal_plain_python():
    off = np.array([0, 1, 4, 11, 11 + 40], np.int64)
    qk = query_keys(["a", "b", "c", "d"])
    for seed in (0, 1, 7, 12345):
        assert permutation(off, qk, seed).tolist() == _reference_perm(off.tolist(), qk, seed)
        rank, order = query_order(qk, seed)
        assert order.tolist() == _reference_order(qk, seed)
        assert [rank[i] for i in order] == list(range(4))


def test_permutations_are_uniform():
    """All 24 orders of a 4-response query appear equally often over 24,000 seeds (chi-square, df 23)."""
    off = np.array([0, 4], np.int64)
    qk = query_keys(["q"])
    counts = collections.Counter(tuple(permutation(off, qk, s)) for s in range(24000))
    assert set(counts) == set(itertools.permutations(range(4)))
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 49.7  # 0.999 quantile of chi-square with 23 degrees of freedom


def test_permutation_follows_the_query_id_not_its_position():
    a = query_keys(["x", "y", "z"])
    off = np.array([0, 5, 10, 15], np.int64)
    full = permutation(off, a, 3)
    sub = permutation(np.array([0, 5], np.int64), query_keys(["z"]), 3)
    assert (full[10:15] - 10).tolist() == sub.tolist()
