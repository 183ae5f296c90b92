"""PETS online (Liu et al., arXiv 2602.16745) against its own released streaming script, on one shared pool.

    python benchmarks/pets_online_source.py [--pool data/lastletters-gpt35-40] [--questions 100] [--b 6,8,12]
        [--runs 10] [--max-options 10] [--train-size 10] [--source /tmp/pets-src]

The source (ZDCSlab/PETS at commit 92c34a6, `budget_allocation/FillintheBlank_online.py`, checked out at --source
with `git -C <mirror> archive 92c34a6 budget_allocation | tar -x -C DIR`, never committed here) reads a JSONL of
questions {id, answers, answer, final}: the first --train-size questions train its plan on their whole pools (per
question a probit fit of the majority-accuracy curve A(k), estimated from 20,000 unseeded multinomial draws over its
10 padded options, and the chance pi that 4 answers drawn without replacement agree, from 2,000 seeded draws); the
greedy plan gives each of its two buckets (the 4 warm-up answers agree / not) a budget; each later question warms up
to 4 accepted answers, takes its bucket's budget and draws to it in file order; it prints the plan and the
predictor's accuracy (against `answer`), consistency (against `final`) and budget attempted on the test questions.

Per run r (r = 0 .. R - 1) this script writes that JSONL from the engine's seed r: the questions in the engine's query
order (rank), a test question's answers in its permutation, a training question's in pool order (the order the engine
fits on; the pool's valid answers only, as the source's loader drops empty ones; answer ids as strings), `answer` the
id of a correct answer ("none" when there is none), `final` the source's own relabelling of a shuffled pool (its
--multi-relabel-mv: the majority of the first --max-options distinct answers, ties to the earliest). It runs the
script as it is (`--data-path F --average-budget b --rng-seed r --max-options M --train-size T --no-add-conf`) and
parses what it prints; and the engine's `pets-online` at total budget b n on the same permutation and order, whose
test queries' draws are voted as the script votes (accepted answers only, ties to the earliest). The runs are paired
(the same draws), so the table gives, per b, the source's and the engine's means over the runs, their paired
difference with its SE (z: within 2 is agreement), how many runs' plans agree (the source's Monte Carlo curve against
the engine's, each with its own draws) and how many runs' test draws total the same, and `spent`: the engine's runs
that spent the whole budget b n (the engine's budget is a hard total that the training queries' own draws share, the
source's only an expectation: a run whose test draws total less than the source's with the same plan is one of these,
its last test queries cut short). Each source run's numbers are kept beside its JSONL (--source) and reused. Its
output, with the command, is recorded in docs/semantics.md (pets-online).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from pets_source import COMMIT, checkout, shared_pool, vote  # (the offline check's checkout, pool subset, vote)

ROOT = Path(__file__).resolve().parents[1]


def accepted(a, M):
    """The source's map_fillin_answer_to_option over a draw sequence: the answers among the first M distinct."""
    seen, out = set(), []
    for x in a:
        if x not in seen:
            if len(seen) >= M:
                continue
            seen.add(x)
        out.append(x)
    return out


FLOAT = r"([-+0-9.eE]+|nan)"


def run_source(script_dir: Path, data: Path, b: int, seed: int, M: int, T: int) -> dict:
    cmd = [sys.executable, "FillintheBlank_online.py", "--data-path", str(data), "--average-budget", str(b),
           "--rng-seed", str(seed), "--max-options", str(M), "--train-size", str(T), "--no-add-conf"]
    out = subprocess.run(cmd, cwd=script_dir, check=True, capture_output=True, text=True).stdout
    plan = [int(x) for x in re.search(r"^B_t: \[([^\]]*)\]", out, re.M).group(1).split()]
    m = re.search(rf"^Predictor accuracy: {FLOAT} \(consistency={FLOAT}\) on (\d+) questions", out, re.M)
    used = float(re.search(rf"^Predictor total budget \(attempted\): {FLOAT}", out, re.M).group(1))
    q = int(m.group(3))  # it prints 4 decimals: the counts they round, over its q questions
    return {"plan": plan, "accuracy": round(float(m.group(1)) * q) / q,
            "consistency": round(float(m.group(2)) * q) / q, "used": used}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", type=Path, default=ROOT / "data" / "lastletters-gpt35-40")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--b", default="6,8,12", help="average budgets (the source's --average-budget)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--max-options", type=int, default=10, help="the source's --max-options (its default)")
    ap.add_argument("--train-size", type=int, default=10, help="the source's --train-size (its default)")
    ap.add_argument("--curve-mc", type=int, default=20000, help="the engine's pets_curve_mc: the source's 20,000 "
                    "draws per curve point (seeded); 0: exact")
    ap.add_argument("--source", type=Path, default=Path("/tmp/pets-src"))
    args = ap.parse_args()

    from ttc.replay import reference
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import Pool
    from ttc.replay.rng import permutation, query_order

    script_dir = checkout(args.source, "FillintheBlank_online.py")
    M, T = args.max_options, args.train_size
    off, correct, ans, gold, qids = shared_pool(args.pool, args.questions, min_valid=4)  # (its training needs 4)
    n = len(qids)
    pool = Pool.from_arrays(off, correct=correct, ans=ans)
    tok = np.ones(len(ans), np.int64)
    cfg = RunConfig("pets-online", pets_options=M, pets_train=T, pets_curve_mc=args.curve_mc)
    budgets = [int(x) for x in args.b.split(",")]
    rows = {b: [] for b in budgets}
    for r in range(args.runs):
        perm = permutation(pool.off, pool.qkeys, r)
        rank, _ = query_order(pool.qkeys, r)
        order = sorted(range(n), key=lambda i: rank[i])
        drawn = [list(ans[perm[off[i]:off[i + 1]]]) for i in range(n)]
        final = [vote(accepted(d, M)) for d in drawn]
        data = args.source / f"online_run{r}.jsonl"
        with data.open("w") as f:  # (the training queries' answers in pool order: the engine fits on those)
            for k, i in enumerate(order):
                a = ans[off[i]:off[i + 1]] if k < T else drawn[i]
                f.write(json.dumps({"id": qids[i], "answers": [str(x) for x in a],
                                    "answer": str(gold[i]) if gold[i] >= 0 else "none",
                                    "final": str(final[i])}) + "\n")
        train = [(i, accepted(list(ans[off[i]:off[i + 1]]), M), list(ans[off[i]:off[i + 1]])) for i in order[:T]]
        fits = reference.pets_fits(train, args.curve_mc)  # (the engine's plan: its twin's, equal by the tests)
        for b in budgets:
            saved = args.source / f"online_run{r}_b{b}_M{M}_T{T}_q{n}.json"  # a source run's numbers, kept
            if saved.exists():
                src = json.loads(saved.read_text())
            else:
                src = run_source(script_dir, data, b, r, M, T)
                saved.write_text(json.dumps(src))
            got = run_once(off, correct, np.zeros(len(ans)), ans, tok, perm, rank, cfg, b * n)
            nd = np.asarray(got["n_drawn"])
            test = order[T:]
            v = [vote(accepted(drawn[i][:nd[i]], M)) for i in test]
            eng = {"plan": reference.pets_plan(fits, float(b), reference.PETS_BMAX),
                   "accuracy": float(np.mean([v[k] >= 0 and v[k] == gold[i] for k, i in enumerate(test)])),
                   "consistency": float(np.mean([v[k] == final[i] for k, i in enumerate(test)])),
                   "used": float(nd[test].sum()), "spent": got["samples_used"] == b * n}
            rows[b].append((src, eng))
            print(f"run {r} b {b}: source plan {src['plan']} used {src['used']:.0f} acc {src['accuracy']:.4f} "
                  f"cons {src['consistency']:.4f} | engine plan {eng['plan']} used {eng['used']:.0f} acc "
                  f"{eng['accuracy']:.4f} cons {eng['consistency']:.4f}", file=sys.stderr)
    print(f"PETS online (ZDCSlab/PETS {COMMIT}, FillintheBlank_online.py) vs the engine's pets-online on "
          f"{args.pool.name}: its {n} least agreeing queries (>= 4 valid answers), valid answers only, {M} options, "
          f"{T} training queries, pets_curve_mc={args.curve_mc}, {args.runs} paired runs (engine seed r = source "
          f"run r's order, draws and --rng-seed); metrics over the {n - T} test queries, as the source scores them")
    print(f"{'b':>3} {'metric':>12} {'source':>16} {'engine':>16} {'diff ± SE':>18} {'z':>6} {'plans =':>8} "
          f"{'used =':>7} {'spent':>5}")
    for b in budgets:
        same_plan = sum(s["plan"] == e["plan"] for s, e in rows[b])
        same_used = sum(s["used"] == e["used"] for s, e in rows[b])
        spent = sum(e["spent"] for _, e in rows[b])
        for metric in ("accuracy", "consistency", "used"):
            x = np.array([s[metric] for s, _ in rows[b]])
            y = np.array([e[metric] for _, e in rows[b]])
            d = y - x
            R = len(d)
            sd = d.std(ddof=1) / math.sqrt(R) if R > 1 else math.nan
            z = d.mean() / sd if sd > 0 else (0.0 if d.mean() == 0 else math.inf)
            sx = x.std(ddof=1) / math.sqrt(R) if R > 1 else math.nan
            sy = y.std(ddof=1) / math.sqrt(R) if R > 1 else math.nan
            print(f"{b:>3} {metric:>12} {x.mean():>8.4f}±{sx:<7.4f} {y.mean():>8.4f}±{sy:<7.4f} "
                  f"{d.mean():>+9.4f}±{sd:<8.4f} {z:>+6.2f} {same_plan:>4}/{R:<3} {same_used:>3}/{R:<3} {spent:>5}")


if __name__ == "__main__":
    main()
