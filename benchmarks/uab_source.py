"""UAB (Nguyen, Gupta & Le, arXiv 2605.26849) against its own released allocation code, on the embedded MATH-500 pool.

    python benchmarks/uab_source.py [--seeds 20] [--budgets 2,4,8] [--tau 0.2] [--source /tmp/uab-src]

The source (manhitv/UAB at commit 9eb3c6a) runs `src/main.py --budget_mode uav_base`: phase 1 one generation per
question, its average negative log-likelihood (ANLL) the difficulty; phase 2 `utils.allocate_extra_budget(anll,
(N - 1) M, strategy='uav_base', tau, score_fn='exp')`, which greedily hands out the (N - 1) M extra generations by
argmax p (1 - p)^c with p = exp(-ANLL / tau); the final answer votes over all N_i. Generation needs a GPU and vLLM;
the allocation does not. This script runs that allocation code as it is (a checkout of the commit at --source:
`git -C <mirror> archive 9eb3c6a src | tar -x -C DIR`, never committed here; its `from vllm import SamplingParams`,
used only by the LLM-judge baseline, is satisfied by an empty stand-in module) on the pool
data/math500-llama3.1-8b-48, whose `score_conf` is exp(mean token log-probability), so ANLL = -ln(score_conf):

- source: per seed, each question's first response in the engine's permutation of that seed is its phase-1
  generation; the source's allocation of the extra draws; its N_i = 1 + extra_i first responses of the permutation
  (at most the pool's 48: the source generates without end; a cap reached is counted below);
- engine: `RunConfig("uab", uab_tau=tau)` on the same permutation and query order, total budget N M, --side score_conf.

It prints, per budget N, the share of (seed, question) pairs whose draws agree exactly, and coverage (a correct
response among the draws) and best-of-N accuracy (the highest score_conf) of both with standard errors over seeds.
Its output, with the command, is recorded in docs/semantics.md (uab).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "9eb3c6a"
MIRROR = Path("/work/.mirror/manhitv+UAB/repo")


def source_utils(where: Path):
    """The source's src/utils.py, imported from a checkout of COMMIT (made here when absent)."""
    if not (where / "src" / "utils.py").exists():
        where.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(MIRROR), "archive", COMMIT, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    if "vllm" not in sys.modules:  # only allocate_budget's LLM-judge baseline uses it
        stub = types.ModuleType("vllm")
        stub.SamplingParams = None
        sys.modules["vllm"] = stub
    spec = importlib.util.spec_from_file_location("uab_source_utils", where / "src" / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budgets", default="2,4,8", help="N: responses per question on average (the paper's 2, 4, 8)")
    ap.add_argument("--tau", type=float, default=0.2, help="the source's --tau (its default 0.2)")
    ap.add_argument("--source", type=Path, default=Path("/tmp/uab-src"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT.parent))
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool
    from ttc.replay.rng import permutation, query_order

    utils = source_utils(args.source)
    pool = load_pool(ROOT / "data" / "math500-llama3.1-8b-48", score="conf", side="score_conf")
    off, n = pool.off, pool.n_queries
    sizes = np.diff(off)
    print(f"UAB (manhitv/UAB {COMMIT}, src/utils.py allocate_extra_budget 'uav_base') vs the engine's uab on "
          f"math500-llama3.1-8b-48 ({n} questions x {sizes.max()}), tau {args.tau}, {args.seeds} seeds")
    print(f"{'N':>3} {'same draws':>11} {'capped':>7} {'coverage source':>17} {'coverage engine':>17} "
          f"{'bon source':>13} {'bon engine':>13}")
    for N in [int(b) for b in args.budgets.split(",")]:
        cfg = RunConfig("uab", uab_tau=args.tau)
        same = capped = 0
        rows = []
        for seed in range(args.seeds):
            perm = permutation(off, pool.qkeys, seed)
            rank, _ = query_order(pool.qkeys, seed)
            first = perm[off[:-1]]
            anll = -np.log(pool.side[first])
            extra = np.array(utils.allocate_extra_budget(diff_scores=anll, total_extra_budget=(N - 1) * n,
                                                         strategy="uav_base", tau=args.tau, score_fn="exp"))
            want = 1 + extra
            capped += int((want > sizes).sum())
            src_n = np.minimum(want, sizes)
            got = run_once(off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, cfg, N * n,
                           side=pool.side)
            eng_n = np.asarray(got["n_drawn"])
            same += int((src_n == eng_n).sum())
            cov, bon = [], []
            for d in (src_n, eng_n):
                c = b = 0
                for i in range(n):
                    js = perm[off[i]:off[i] + d[i]]
                    c += int(pool.correct[js].any())
                    b += int(pool.correct[js[np.argmax(pool.score[js])]]) if len(js) else 0
                cov.append(c / n)
                bon.append(b / n)
            rows.append(cov + bon)
        r = np.array(rows)
        m, se = r.mean(0), r.std(0, ddof=1) / math.sqrt(len(r)) if len(r) > 1 else np.zeros(4)
        cells = [f"{m[k]:.4f}±{se[k]:.4f}" for k in range(4)]
        print(f"{N:>3} {same / (n * args.seeds):>11.4f} {capped:>7} {cells[0]:>17} {cells[1]:>17} {cells[2]:>13} "
              f"{cells[3]:>13}")


if __name__ == "__main__":
    main()
