"""Lookup tables the kernels read: k log k and log k for entropy, and the sc-beta stopping table."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def make_tables(max_n: int, conf: float, sc_beta: bool = True):
    """(T, L, min_a): T[k] = k log k and L[k] = log k (math.log, shared with the reference), and the sc-beta
    table (only computed when a run uses sc-beta; otherwise a table that never stops)."""
    T = np.zeros(max_n + 2)
    L = np.zeros(max_n + 2)
    for k in range(1, max_n + 2):
        L[k] = math.log(k)
        T[k] = k * math.log(k)
    min_a = sc_beta_table(max_n, conf) if sc_beta else np.full(max_n + 2, max_n + 2, np.int64)
    return T, L, min_a


def _beta_stops(a: int, b: int, conf: float, log_fact: np.ndarray) -> bool:
    """P(Binomial(a+b+1, 1/2) <= a) >= conf: in floating point, and exactly in rational arithmetic when the
    float is within 1e-9 of conf (where rounding could flip the answer)."""
    n = a + b + 1
    j = np.arange(a + 1)
    p = float(np.exp(log_fact[n] - log_fact[j] - log_fact[n - j] - n * math.log(2.0)).sum())
    if abs(p - conf) > 1e-9:
        return p >= conf
    return Fraction(sum(math.comb(n, i) for i in range(a + 1)), 2**n) >= Fraction(str(conf))


def sc_beta_table(max_n: int, conf: float) -> np.ndarray:
    """min_a[b]: the smallest leading count a that stops sc-beta when the runner-up has b (a + b <= max_n).

    P(p1 > p2) with p1 ~ Beta(a+1, b+1) is P(X > 1/2) = P(Binomial(a+b+1, 1/2) <= a); it grows with a and falls
    with b, so the rule is a >= min_a[b] and min_a never decreases: one pass, O(max_n) evaluations.
    Unreachable entries hold max_n + 2."""
    out = np.full(max_n + 2, max_n + 2, dtype=np.int64)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, max_n + 3, dtype=np.float64)))])
    a = 1
    for b in range(0, max_n // 2 + 1):
        a = max(a, b, 1)
        while a + b <= max_n and not _beta_stops(a, b, conf, log_fact):
            a += 1
        if a + b > max_n:
            break
        out[b] = a
    return out
