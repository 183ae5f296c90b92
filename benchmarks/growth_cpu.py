"""Cost per decision at several pool sizes in CPU time, `ttc bench`'s growth table for chosen policies and sizes
(replay/bench.py growth: one thread, each size timed in turn round after round, the median of the rounds; on a machine
other jobs share, wall time moved one cell 2x between runs, while the thread's CPU time and the interleaving keep the
sizes comparable; docs/performance.md, "Growth with the pool").

    python benchmarks/growth_cpu.py POLICY[,POLICY...] SIZE[,SIZE...] [--responses 64] [--rounds 3] [--decisions N]

Prints, per policy, the median over rounds of ns of CPU per decision at each size (budget 8 per query, seeds so that a
cell makes about N decisions a round) and the largest size's over the smallest's; with two sizes or more, also at the
control (bench.growth_cells: the smallest size's queries, the largest pool's responses, 500 x 6,400 beside 50,000 x 64)
and the largest size's over it, the growth the query count makes."""
import argparse

from ttc.replay.bench import GROWTH_DECISIONS, GROWTH_ROUNDS, growth, growth_ratios

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("policies")
    ap.add_argument("sizes")
    ap.add_argument("--responses", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=GROWTH_ROUNDS)
    ap.add_argument("--decisions", type=int, default=GROWTH_DECISIONS)
    a = ap.parse_args()
    sizes = tuple(int(x) for x in a.sizes.split(","))
    g = growth(ns=sizes, size=a.responses, decisions=a.decisions, rounds=a.rounds,
               policies=tuple(a.policies.split(",")))
    print(f"ns of CPU per decision, median of {a.rounds} rounds, {a.responses} responses per query, budget 8")
    for p, r in growth_ratios(g).items():
        print(f"{p}: " + ", ".join(f"{n:,} {m:.1f}" for n, m in zip(sorted(set(sizes)), r.ns, strict=True))
              + (f"; growth {r.ratio:.2f}x" if len(set(sizes)) > 1 else "")
              + (f"; control {r.control_ns:.1f}, the largest over it {r.control_ratio:.2f}x" if r.control_ns else ""))
