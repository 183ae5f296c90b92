"""Counter-based randomness for replay: common random numbers that do not depend on threads or policies.

Every random choice is a pure function of (seed, query key, counter) through the splitmix64 finaliser
(replay/kernel.py), so a query's permutation is the same for every policy, budget and thread count, and a query
keeps its permutation when the pool is subset (hard subsets) or reordered: the key is a hash of the query_id,
not its position.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .kernel import fill_permutation, fill_query_order


def query_key(query_id: str) -> int:
    """Stable 64-bit key of a query id (blake2b), so permutations follow the query, not its row."""
    return int.from_bytes(hashlib.blake2b(query_id.encode("utf-8"), digest_size=8).digest(), "little")


def query_keys(query_ids) -> np.ndarray:
    return np.array([query_key(q) for q in query_ids], dtype=np.uint64)


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
