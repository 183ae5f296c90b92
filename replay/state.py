"""Per-query allocation state: its layout in flat arrays, allocation, reset, and the lookup tables.

State is five arrays so that the kernels (replay/kernel.py) touch no Python objects: `qi` (per-query ints),
`qf` (per-query floats), `si` and `sf` (per-answer slots, indexed off[i] + answer id) and `tot` (run totals).
Column names below; docs/semantics.md defines each field.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numba import njit

# Integer codes (branched on inside the kernels; the names are the command line's).
UNIT_SAMPLES, UNIT_TOKENS = 0, 1
ELIM_NONE, ELIM_THRESHOLD, ELIM_SC_SHARE, ELIM_SC_BETA = 0, 1, 2, 3
UNITS = {"samples": UNIT_SAMPLES, "tokens": UNIT_TOKENS}
ELIMS = {"none": ELIM_NONE, "threshold": ELIM_THRESHOLD, "sc-share": ELIM_SC_SHARE, "sc-beta": ELIM_SC_BETA}

# qi columns
N, BEST_J, COVERED, N_INVALID, LEAD, LEAD_CNT, SECOND_CNT, WLEAD, ELIM, CAPPED, EXH = range(11)
QI_COLS = 11
# qf columns
SSUM, BEST, S, WLEAD_SUM = range(4)
QF_COLS = 4
# si columns (sf holds the summed score of each answer)
CNT, FIRST_J = 0, 1
# tot slots
SAMPLES, TOKENS, EXHAUSTED, STOP = range(4)


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


@njit(cache=True)
def new_state(n, total):
    """Fresh state for n queries over a pool of `total` responses."""
    qi = np.zeros((n, QI_COLS), np.int64)
    qf = np.zeros((n, QF_COLS))
    si = np.zeros((total, 2), np.int64)
    sf = np.zeros(total)
    tot = np.zeros(4, np.int64)
    for i in range(n):
        _reset_query(qi, qf, i)
    for j in range(total):
        si[j, FIRST_J] = -1
    return qi, qf, si, sf, tot


@njit(cache=True)
def _reset_query(qi, qf, i):
    for c in range(QI_COLS):
        qi[i, c] = 0
    qi[i, BEST_J] = -1
    qi[i, LEAD] = -1
    qi[i, WLEAD] = -1
    qf[i, SSUM] = 0.0
    qf[i, BEST] = -1.0
    qf[i, S] = 0.0
    qf[i, WLEAD_SUM] = -1.0


@njit(cache=True)
def reset_state(qi, qf, si, sf, tot, off, ans, perm):
    """Back to the initial state, touching only the answer slots the run used (O(draws + n))."""
    n = off.shape[0] - 1
    for i in range(n):
        base = off[i]
        for k in range(qi[i, N]):
            a = ans[perm[base + k]]
            if a >= 0:
                si[base + a, CNT] = 0
                si[base + a, FIRST_J] = -1
                sf[base + a] = 0.0
        _reset_query(qi, qf, i)
    for k in range(4):
        tot[k] = 0
