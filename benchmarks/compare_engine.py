"""Per-decision cost of the replay engine in two checkouts, measured in one run (interleaved, one thread).

    python benchmarks/compare_engine.py BASE_DIR [NEW_DIR] [--rounds 5] [--queries 500] [--responses 64]
        [--policies uniform,ucb,...] [--budgets 4,8,16,32] [--one-policy]

BASE_DIR / NEW_DIR are repository roots (e.g. `git worktree add /tmp/base <commit>`); NEW_DIR defaults to this
checkout. Each round runs every policy at every budget (default: all, 4, 8, 16, 32; 100 seeds, `ttc bench`'s
synthetic pool) in a fresh process per checkout, alternating which goes first; the table gives the median over rounds
of ns per decision (one response drawn) and new / base, and the seconds of one grid call with every row. Both
checkouts compile once before timing (their own numba caches). --one-policy: each policy's own rows run the kernel
compiled for that policy alone (engine.only_arg, as `ttc replay --policy P` does) in a checkout that has one, the
kernel every policy runs in otherwise (the full grid always runs that one)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import importlib, json, sys, time
import numpy as np
try:  # the package layout (ttc.replay); a checkout from before it (issue 25) had replay/ at the top
    importlib.import_module("ttc.replay.engine")
    P = "ttc.replay"
except ImportError:
    P = "replay"
engine = importlib.import_module(P + ".engine")
run_grid = engine.run_grid
POLICIES, RunConfig = (getattr(importlib.import_module(P + ".policies"), n) for n in ("POLICIES", "RunConfig"))
make_pool = importlib.import_module(P + ".synth").make_pool
make_tables = importlib.import_module(P + ".tables").make_tables
n, size = int(sys.argv[1]), int(sys.argv[2])
if hasattr(engine, "set_threads"):
    engine.set_threads(1)
else:
    import numba
    numba.set_num_threads(1)
pool = make_pool(n=n, size=size, seed=0)
tables = make_tables(size, 0.95, sc_beta=False)
seeds = np.arange(100)
out = {}
run_grid(pool, [RunConfig("uniform")], np.full((1, 1), 4 * n, np.int64), seeds[:1], tables)
pols, buds = sys.argv[3].split(","), [int(b) for b in sys.argv[4].split(",")]
one = sys.argv[5] == "1" and hasattr(engine, "only_arg")
kw = lambda p: {"only": engine.only_arg([RunConfig(p)])} if one else {}
cfgs = [RunConfig(p) for p in pols for b in buds]
totals = np.array([[b * n] * len(seeds) for p in pols for b in buds], np.int64)
t = []
for _ in range(3):  # every configuration in one grid call: what `ttc replay` does
    t0 = time.thread_time()
    run_grid(pool, cfgs, totals, seeds, tables)
    t.append(time.thread_time() - t0)
out["full grid (s)"] = min(t)
for p in sys.argv[3].split(","):
    for b in map(int, sys.argv[4].split(",")):
        totals = np.full((1, len(seeds)), b * n, np.int64)
        run_grid(pool, [RunConfig(p)], totals[:, :2], seeds[:2], tables, **kw(p))
        best = []
        for _ in range(3):
            t = time.thread_time()
            _, oi, _, _ = run_grid(pool, [RunConfig(p)], totals, seeds, tables, **kw(p))
            best.append(time.thread_time() - t)
        out[f"{p}@{b}"] = min(best) * 1e9 / max(1, int(oi[:, :, 0].sum()))
print(json.dumps(out))
"""


def _path(root: Path) -> str:
    """What to put on PYTHONPATH so that `ttc` is this checkout (the repository root is the package: a directory
    holding a link named ttc to it), or, for a checkout from before the package, the root itself."""
    if not (root / "__init__.py").is_file():
        return str(root)
    link = Path(tempfile.gettempdir()) / f"compare-engine-{abs(hash(str(root.resolve())))}"
    link.mkdir(exist_ok=True)
    if not (link / "ttc").exists():
        (link / "ttc").symlink_to(root.resolve())
    return str(link)


def run(root: Path, n: int, size: int, policies: str, budgets: str, one: bool = False) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(size), policies, budgets, str(int(one))], cwd=root,
                       capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": _path(root)})
    if r.returncode:
        sys.exit(f"{root}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path, nargs="?", default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--responses", type=int, default=64)
    ap.add_argument("--policies", default="uniform,elimination,ucb,gap,gap-literal,entropy,two-stage,streaming,oracle")
    ap.add_argument("--budgets", default="4,8,16,32")
    ap.add_argument("--one-policy", action="store_true")
    a = ap.parse_args()
    res = {"base": [], "new": []}
    for r in range(a.rounds):
        order = ("base", "new") if r % 2 == 0 else ("new", "base")
        for which in order:
            res[which].append(run(getattr(a, which), a.queries, a.responses, a.policies, a.budgets, a.one_policy))
    keys = list(res["base"][0])
    print(f"ns per decision, median of {a.rounds} rounds (each the best of 3), 1 thread, "
          f"{a.queries} x {a.responses} pool, 100 seeds")
    print("| policy@budget | base | new | new / base |\n|---|---|---|---|")
    ratios = []
    for k in keys:
        b = statistics.median(x[k] for x in res["base"])
        m = statistics.median(x[k] for x in res["new"])
        if k.startswith("full grid"):
            print(f"| {k}, every row in one call | {b:.3f} | {m:.3f} | {m / b:.2f} |")
            continue
        ratios.append(m / b)
        print(f"| {k} | {b:.1f} | {m:.1f} | {m / b:.2f} |")
    print(f"median ratio {statistics.median(ratios):.3f}, range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
