"""Decisions per second as the pool grows, on one thread (docs/performance.md, "Growth with the pool"):
`python benchmarks/growth.py DECISIONS POLICY[,POLICY...] SIZE[,SIZE...] [RESPONSES]`, e.g.
`python benchmarks/growth.py 800000 side-eb,elimination,ucb,uniform 500,50000`. One thread, so that the pool's size
and not the number of seeds (one per thread at the largest size) decides the cost per decision. RESPONSES (default
64) per query: `... 800000 ucb 500 6400` is a pool as large as 50,000 x 64 with the heap and per-query state of 500
queries (the memory hierarchy's share of the growth, docs/performance.md)."""
import sys

from ttc.replay.bench import growth, growth_ratios
from ttc.replay.engine import set_threads

if __name__ == "__main__":
    set_threads(1)
    decisions, policies = int(sys.argv[1]), tuple(sys.argv[2].split(","))
    sizes = tuple(map(int, sys.argv[3].split(",")))
    responses = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    g = growth(ns=sizes, size=responses, decisions=decisions, repeats=1, policies=policies)
    for p, (rates, ratio) in growth_ratios(g).items():
        print(f"{p}: " + ", ".join(f"{n:,} queries {r:,.0f}/s" for n, r in zip(sorted(sizes), rates, strict=True))
              + (f"; growth {ratio:.1f}x" if len(sizes) > 1 else "") + f" ({responses} responses per query)")
