"""lbayes' CPU time per run where the leaderboard spends it: its elimination+lbayes entry (both configurations of its
grid) on an AutoTTS pool's tuning half at the sc track's token budgets (1, 2, 4, 8, 16 times the median trace), one
grid call over --seeds seeds, as the leaderboard calls it; interleaved with a baseline checkout.

    python benchmarks/lbayes_speed.py --pool /tmp/ttc-results/pools/autotts/Qwen3-0.6B-aime2024 \\
        [--base /tmp/ppbase5] [--seeds 20] [--repeats 3]

Each measurement is a fresh process (this tree, then the baseline's PYTHONPATH, alternately --repeats times): after
one warm-up call (numba's cache loaded, nothing timed), the CPU time (time.process_time: every thread) of the grid
call over the runs it made (configurations x budgets x seeds). It prints each process's ms per run and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from pathlib import Path
from ttc.replay.engine import replay
from ttc.replay.leaderboard import LeaderboardRequest, plan_pool
path, seeds, rule = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
plan = plan_pool(path, LeaderboardRequest(pools=[path], tracks=["sc"], units=["tokens"]))
_, _, budgets, _, entries = plan.work[0]
cfgs = next(e for e in entries if e.label == f"elimination+{rule}").configs
replay(plan.tune, cfgs, budgets[:1], range(1), select="sc")  # (warm: the kernel loaded from numba's cache)
t = time.process_time()
df = replay(plan.tune, cfgs, budgets, range(seeds), select="sc")[0]
cpu = time.process_time() - t
runs = len(cfgs) * len(budgets) * seeds
print(json.dumps({"ms_per_run": 1000 * cpu / runs, "runs": runs, "samples": float(df["samples_used"].mean())}))
"""


def measure(pythonpath: str, pool: Path, seeds: int, rule: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run([sys.executable, "-c", CHILD, str(pool), str(seeds), rule], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, required=True, help="an AutoTTS pool (ttc import autotts)")
    ap.add_argument("--base", help="the baseline's PYTHONPATH dir (its ttc), measured alternately with this tree")
    ap.add_argument("--here", default=str(ROOT.parent) if ROOT.name == "ttc" else os.environ.get("PYTHONPATH", ""),
                    help="this tree's PYTHONPATH dir (default: the environment's)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rule", default="lbayes", help="the entry elimination+RULE (another rule: a yardstick)")
    args = ap.parse_args()
    got = {"this tree": [], "base": []}
    for _ in range(args.repeats):
        for who, pp in (("this tree", args.here), ("base", args.base)):
            if pp is None:
                continue
            r = measure(pp, args.pool, args.seeds, args.rule)
            got[who].append(r["ms_per_run"])
            print(f"{who}: {r['ms_per_run']:.3f} ms/run ({r['runs']} runs, {r['samples']:.1f} samples a run)",
                  flush=True)
    for who, xs in got.items():
        if xs:
            print(f"{who}: median {statistics.median(xs):.3f} ms/run of CPU over {len(xs)} processes "
                  f"({', '.join(f'{x:.3f}' for x in xs)})")


if __name__ == "__main__":
    main()
