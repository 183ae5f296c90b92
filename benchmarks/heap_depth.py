"""How deep an index policy's sift goes as the pool grows: a model, not the engine (docs/performance.md, "Growth with
the pool", item 6). UCB's index (mean + lam / sqrt(draws)) on n queries whose responses score in [0, 1] (0.5 x a
uniform plus 0.5 with the query's own success rate p ~ U(0, 1)), budget 8 a query, at most 64 draws each, in the
engine's heap shape (HEAP_D-ary, the pulled entry sifted down from the root with a hole). Prints the levels the sift
went down, as a mean and a distribution, at each size.

    python benchmarks/heap_depth.py [SIZES] [--arity 4]

A pulled query's index falls below most others', so its sift runs to the bottom levels, whose lines the pool's
draws push out of L2 between visits: the heap's log n steps, each a possible miss."""
import argparse
import math

import numba
import numpy as np


@numba.njit(cache=True)
def depths(n, budget, lam, arity, seed):
    np.random.seed(seed)
    p = np.random.rand(n)
    cnt = np.zeros(n)
    ssum = np.zeros(n)
    hk = np.full(n + 1, np.inf)
    hq = np.arange(n + 1)
    size = n
    hist = np.zeros(32, np.int64)
    for _ in range(budget * n):
        if size == 0:
            break
        i = hq[0]
        s = 0.5 * np.random.rand() + (0.5 if np.random.rand() < p[i] else 0.0)
        cnt[i] += 1
        ssum[i] += s
        k = ssum[i] / cnt[i] + lam / math.sqrt(cnt[i])
        if cnt[i] >= 64:  # its pool exhausted: the last entry moves to the top
            size -= 1
            k, i = hk[size], hq[size]
            hk[size] = -np.inf
        pos, d = 0, 0
        while True:
            c = arity * pos + 1
            if c >= size:
                break
            b = c
            for u in range(c + 1, min(c + arity, size)):
                if hk[u] > hk[b]:
                    b = u
            if hk[b] <= k:
                break
            hk[pos], hq[pos] = hk[b], hq[b]
            pos, d = b, d + 1
        hk[pos], hq[pos] = k, i
        hist[d] += 1
    return hist


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="?", default="500,5000,50000")
    ap.add_argument("--arity", type=int, default=4)
    a = ap.parse_args()
    for n in (int(x) for x in a.sizes.split(",")):
        h = depths(n, 8, 1.0, a.arity, 0)
        tot = h.sum()
        levels = math.ceil(math.log((a.arity - 1) * n + 1, a.arity))
        top = np.flatnonzero(h)[-1] + 1
        print(f"{n:,} queries ({levels} levels): mean depth {(h * np.arange(32)).sum() / tot:.2f}; "
              + ", ".join(f"{d}: {h[d] / tot:.1%}" for d in range(top)))
