"""What a cache miss costs on this machine, the unit of docs/performance.md's breakdown of the growth with the pool:
CPU ns per 8-byte load at random cache lines of a working set of each size, loads that depend on each other (a
pointer chase: each address is the last load's value, as a decision's chain of the heap's top, the query's record,
its permutation entry, the response and its answer slot) and independent ones (addresses known in advance: as many in
flight as the core allows, as prefetched lines are).

    python benchmarks/miss_cost.py [MB,MB,...] [--loads N]
"""
import argparse
import time

import numba
import numpy as np


@numba.njit(cache=True)
def chase(nxt, steps):
    p = 0
    for _ in range(steps):
        p = nxt[p]
    return p


@numba.njit(cache=True)
def gather(idx, a):
    s = 0
    for k in range(idx.shape[0]):
        s += a[idx[k]]
    return s


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="?", default="0.25,1,3,8,32,100,400")
    ap.add_argument("--loads", type=int, default=2_000_000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print("working set | dependent loads, ns each | independent loads, ns each")
    for mb in map(float, a.sizes.split(",")):
        lines = max(2, int(mb * 1e6 / 64))
        at = rng.permutation(lines) * 8  # one int64 a line, its lines in one random cycle
        nxt = np.zeros(lines * 8, np.int64)
        nxt[at] = np.roll(at, -1)
        idx = rng.integers(0, lines, a.loads) * 8
        chase(nxt, 1000)
        gather(idx[:1000], nxt)
        t = time.thread_time()
        chase(nxt, a.loads)
        dep = (time.thread_time() - t) * 1e9 / a.loads
        t = time.thread_time()
        gather(idx, nxt)
        ind = (time.thread_time() - t) * 1e9 / a.loads
        print(f"{mb:g} MB | {dep:.1f} | {ind:.1f}")
