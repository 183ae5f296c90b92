"""Exact expectations of uniform best-of-k (no replay noise), and the efficiency gain read off them."""
from __future__ import annotations

import numpy as np

from .pool import Pool


def _log_comb(n, k, lf):
    """log C(n, k) elementwise for integer arrays, from a log-factorial table; -inf where k > n."""
    n = np.asarray(n, np.int64)
    k = np.asarray(k, np.int64)
    ok = (k <= n) & (k >= 0)
    nn, kk = np.broadcast_arrays(n, k)
    out = np.full(nn.shape, -np.inf)
    m = np.broadcast_to(ok, nn.shape)
    out[m] = lf[nn[m]] - lf[kk[m]] - lf[nn[m] - kk[m]]
    return out


def _log_factorials(n_max: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n_max + 1, dtype=np.float64)))])


def coverage_at_k(pool: Pool, k_max: int | None = None) -> np.ndarray:
    """coverage@k for k = 1..k_max (default: the smallest pool), by the unbiased estimator
    1 - C(N - c, k) / C(N, k), averaged over queries. Element k-1 is coverage@k."""
    sizes = pool.sizes
    k_max = int(sizes.min()) if k_max is None else k_max
    c = np.add.reduceat(pool.correct.astype(np.int64), pool.off[:-1])
    ks = np.arange(1, k_max + 1)
    lf = _log_factorials(int(sizes.max()))
    total = np.zeros(k_max)
    for lo in range(0, len(sizes), 256):  # blocks of queries keep the (queries x k) arrays small
        s, cc = sizes[lo:lo + 256, None], c[lo:lo + 256, None]
        total += np.exp(_log_comb(s - cc, ks[None, :], lf) - _log_comb(s, ks[None, :], lf)).sum(axis=0)
    return 1.0 - total / len(sizes)


def best_of_k(pool: Pool, k_max: int | None = None) -> np.ndarray:
    """Expected accuracy of best-of-k by score (ties: earliest drawn, i.e. uniform among the tied) for
    k = 1..k_max, exactly from the score ranks of each query's pool. Element k-1 is best-of-k.

    For a group of g tied responses (gc of them correct) with `above` responses scoring higher in a query of m,
    P(the best of k drawn is in the group) = [C(m - above, k) - C(m - above - g, k)] / C(m, k), and the pick is
    correct with probability gc / g. The groups of every query are found at once (one sort), so the cost is a
    few array passes rather than a Python loop over queries."""
    sizes = pool.sizes
    k_max = int(sizes.min()) if k_max is None else k_max
    ks = np.arange(1, k_max + 1)
    lf = _log_factorials(int(sizes.max()))
    n = pool.n_queries
    q = np.repeat(np.arange(n), sizes)
    order = np.lexsort((-pool.score, q))  # by query, best score first
    qs, ss = q[order], pool.score[order]
    start = np.ones(len(qs), bool)  # the first response of each (query, score) group
    start[1:] = (qs[1:] != qs[:-1]) | (ss[1:] != ss[:-1])
    first = np.flatnonzero(start)
    g = np.diff(np.append(first, len(qs)))
    gc = np.add.reduceat(pool.correct[order].astype(np.float64), first)
    gq = qs[first]
    above = first - pool.off[gq]  # responses of the same query ranked above the group
    m = sizes[gq]
    total = np.zeros(k_max)
    for lo in range(0, len(first), 1024):  # blocks of groups keep the (groups x k) arrays small
        sl = slice(lo, lo + 1024)
        mm, aa, gg = m[sl, None], above[sl, None], g[sl, None]
        lc = _log_comb(mm, ks[None, :], lf)
        p_top = (np.exp(_log_comb(mm - aa, ks[None, :], lf) - lc)
                 - np.exp(_log_comb(mm - aa - gg, ks[None, :], lf) - lc))
        total += (p_top * (gc[sl] / g[sl])[:, None]).sum(axis=0)
    return total / n


def efficiency_gain(curve: np.ndarray, score: float, spend: float) -> tuple[float, bool]:
    """Uniform budget k* (per query) at which the exact curve reaches `score`, over `spend` (the policy's
    average samples per query). The curve is linear between integer k and 0 at k = 0. Returns (gain,
    censored): censored when the score exceeds the curve's last point, and then gain = k_max / spend is a
    lower bound. NaN where the curve falls anywhere (best-of-k by a score that is not correctness, e.g. math500's
    confidence): a score then does not name one uniform budget, and the first budget reaching it made uniform's own
    gain against itself 0.03x-0.37x there (issue 28)."""
    if not np.isfinite(score) or spend <= 0 or not monotone(curve):
        return float("nan"), False
    ys = np.concatenate([[0.0], curve])
    if score > ys[-1]:
        return (len(ys) - 1) / spend, True
    k = int(np.searchsorted(ys, score, side="left"))  # first point >= score
    if k == 0:
        return 0.0, False
    lo, hi = ys[k - 1], ys[k]
    frac = 1.0 if hi == lo else (score - lo) / (hi - lo)
    return (k - 1 + frac) / spend, False


def monotone(curve: np.ndarray) -> bool:
    """Uniform's exact curve never falls as k grows (coverage never does; best-of-k by a score may)."""
    c = np.asarray(curve, np.float64)
    return bool(np.all(np.diff(c) >= -1e-12))


def sc_at_k(pool: Pool, ks) -> np.ndarray:
    """Expected accuracy of self-consistency (the majority of k drawn responses' valid answers; ties among the
    leading answers are broken uniformly, as both the engine's rule (the answer that reached the count first) and
    the first-drawn rule are: the tied answers hold equal counts, so the random draw order is symmetric in them;
    no valid answer: wrong) for each k in ks, averaged over queries, exactly.

    Per query, answer classes b (n_b responses, correct or not) and the invalid responses: P(a correct answer a
    wins) = sum over its count c >= 1 of C(n_a, c) W_c(k - c, t) / (1 + t) / C(N, k), W_c(s, t) the ways to draw s
    responses from the others with every other valid answer at most c, t of them exactly c (a DP over the other
    classes). A class's draws go up to min(c, n_b), so each c costs O(N) array operations: fine for pools of a few
    hundred per query."""
    from math import comb

    ks = [int(k) for k in ks]
    out = np.zeros(len(ks))
    for i in range(pool.n_queries):
        a0, a1 = pool.off[i], pool.off[i + 1]
        ans, ok = pool.ans[a0:a1], pool.correct[a0:a1]
        N = a1 - a0
        ids, counts = np.unique(ans[ans >= 0], return_counts=True)
        right = {int(a): bool(ok[ans == a].any()) for a in ids}
        n_inv = int((ans < 0).sum())
        for kk, k in enumerate(ks):
            if k > N:
                raise ValueError(f"k = {k} is more than query {pool.query_ids[i]!r}'s {N} responses")
            p = 0.0
            for a, na in zip(ids, counts, strict=True):
                if not right[int(a)]:
                    continue
                others = [int(n) for b, n in zip(ids, counts, strict=True) if b != a]
                T = len(others) + 1
                for c in range(1, min(int(na), k) + 1):
                    W = np.zeros((k - c + 1, T))  # W[s, t]
                    W[0, 0] = 1.0
                    for nb in others:
                        nw = np.zeros_like(W)
                        for x in range(0, min(c, nb, k - c) + 1):
                            w = comb(nb, x)
                            if x == c:
                                nw[x:, 1:] += w * W[:k - c + 1 - x, :-1]
                            else:
                                nw[x:, :] += w * W[:k - c + 1 - x, :]
                        W = nw
                    if n_inv:
                        nw = np.zeros_like(W)
                        for x in range(0, min(n_inv, k - c) + 1):
                            nw[x:, :] += comb(n_inv, x) * W[:k - c + 1 - x, :]
                        W = nw
                    p += comb(int(na), c) * float((W[k - c, :] / np.arange(1, T + 1)).sum())
            out[kk] += p / comb(N, k)
    return out / pool.n_queries
