"""Counter-based randomness for replay: common random numbers that do not depend on threads or policies.

Every random choice is a pure function of (seed, query key, counter) through the splitmix64 finaliser, so a
query's permutation is the same for every policy, budget and thread count, and a query keeps its permutation
when the pool is subset (hard subsets) or reordered: the key is a hash of the query_id, not its position.
"""
from __future__ import annotations

import hashlib

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_RANK_SALT = np.uint64(0xD1B54A32D192ED03)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_ONE = np.uint64(1)


def query_key(query_id: str) -> int:
    """Stable 64-bit key of a query id (blake2b), so permutations follow the query, not its row."""
    return int.from_bytes(hashlib.blake2b(query_id.encode("utf-8"), digest_size=8).digest(), "little")


def query_keys(query_ids) -> np.ndarray:
    return np.array([query_key(q) for q in query_ids], dtype=np.uint64)


@njit(cache=True)
def mix64(z):
    """splitmix64 finaliser (a bijection on uint64 with full avalanche)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True)
def seed_stream(seed, qkey):
    return mix64(mix64(np.uint64(seed) * _GOLDEN + _ONE) ^ qkey)


@njit(cache=True)
def fill_permutation(off, qkeys, seed, perm):
    """perm[off[i] + k] = global index of the k-th response query i receives (forward Fisher-Yates).

    The first k entries depend only on the first k counters, so a policy that draws k responses sees the
    same k whatever it does later."""
    n = off.shape[0] - 1
    for i in range(n):
        a = off[i]
        m = off[i + 1] - a
        for k in range(m):
            perm[a + k] = a + k
        h = seed_stream(seed, qkeys[i])
        for k in range(m - 1):
            r = mix64(h + np.uint64(k + 1) * _GOLDEN)
            j = k + np.int64(r % np.uint64(m - k))
            t = perm[a + k]
            perm[a + k] = perm[a + j]
            perm[a + j] = t


@njit(cache=True)
def fill_query_order(qkeys, seed, rank, order):
    """order: the per-run random order of queries; rank[i]: position of query i in it."""
    n = qkeys.shape[0]
    keys = np.empty(n, dtype=np.uint64)
    for i in range(n):
        keys[i] = mix64(seed_stream(seed, qkeys[i]) ^ _RANK_SALT)
    o = np.argsort(keys, kind="mergesort")
    for p in range(n):
        order[p] = o[p]
        rank[o[p]] = p


def permutation(off: np.ndarray, qkeys: np.ndarray, seed: int) -> np.ndarray:
    perm = np.empty(int(off[-1]), dtype=np.int64)
    fill_permutation(off, qkeys, np.int64(seed), perm)
    return perm


def query_order(qkeys: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, order) for one seed."""
    n = qkeys.shape[0]
    rank = np.empty(n, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    fill_query_order(qkeys, np.int64(seed), rank, order)
    return rank, order
