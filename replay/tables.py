"""Lookup tables the kernels read: k log k and log k for entropy, and the sc-beta stopping table."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def make_tables(max_n: int, conf: float):
    """(T, L, min_a): T[k] = k log k and L[k] = log k (math.log, shared with the reference), sc-beta table."""
    T = np.zeros(max_n + 2)
    L = np.zeros(max_n + 2)
    for k in range(1, max_n + 2):
        L[k] = math.log(k)
        T[k] = k * math.log(k)
    return T, L, sc_beta_table(max_n, conf)


def sc_beta_table(max_n: int, conf: float) -> np.ndarray:
    """min_a[b]: the smallest leading count a that stops sc-beta when the runner-up has b (a + b <= max_n).

    P(p1 > p2) with p1 ~ Beta(a+1, b+1) is P(X > 1/2) = P(Binomial(a+b+1, 1/2) <= a), evaluated exactly in
    rational arithmetic; it grows with a, so the rule is a >= min_a[b]. Unreachable entries hold max_n + 2."""
    target = Fraction(str(conf))
    out = np.full(max_n + 2, max_n + 2, dtype=np.int64)
    for b in range(0, max_n // 2 + 1):
        a = max(b, 1)
        while a + b <= max_n:
            n = a + b + 1
            if Fraction(sum(math.comb(n, j) for j in range(a + 1)), 2**n) >= target:
                out[b] = a
                break
            a += 1
    return out
