"""PETS offline (Liu et al., arXiv 2602.16745) against its own released script, on one shared pool.

    python benchmarks/pets_source.py [--pool data/lastletters-gpt35-40] [--questions 40] [--B 8] [--runs 10]
        [--seeds 200] [--pets-mc N] [--source /tmp/pets-src] [--source-seed 2025]
        [--source-output saved.jsonl[,more.jsonl]]

The source (ZDCSlab/PETS at commit 92c34a6) replays a JSONL of sampled answers with
`budget_allocation/FillintheBlank_offline.py --preds FILE --B B --multi_runs R --with_baseline --vote_method mv`: per
run (seed 2025 + r) each question's answers shuffled, their majority (ties: the earliest in that order) the run's
consistency label; a warm-up of one answer each in question order, then OKG: every step, for every question with
answers left, Dirichlet(1 + counts) over 16 option buckets (a new answer once all 16 hold one is discarded, its draw
paid), the reward max_k h(alpha + e_k) - h(alpha) with h the largest argmax probability estimated from 500 Gamma
draws afresh for every evaluation, the largest reward (ties: the first question) draws its next answer; at every
K b (b = 1 .. B) the majority of each question's answers so far (ties: the earliest) against the label
(consistency) and the gold answer (accuracy); `Base`: the first b answers of each question. This script runs that
script as it is (a checkout of the commit at --source: `git -C <mirror> archive 92c34a6 budget_allocation | tar -x
-C DIR`, never committed here) on a JSONL it writes from the pool (answers as their category ids, invalid answers
left out, as the source's loader drops empty ones; the gold: the id of a correct answer, "none" when there is none),
and the engine on the same answers (a pool of the valid responses):

- engine: `RunConfig("pets", pets_mc=M)` (M: --pets-mc, by default the source's --nsamples; 0: its exact
  rewards) at total budget K b on seeds 0 .. S - 1, each query's draws voted as the source votes (majority, ties
  to the answer drawn first) against the majority of its whole pool in that seed's permutation (the source's
  label, ties likewise) and against the gold; uniform (b each) likewise for Base.

It prints consistency and accuracy per b, source (mean ± SE over its runs) beside engine (over seeds), and z =
difference / combined SE (within 2: agreement). Its output, with the command, is recorded in docs/semantics.md (pets).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "92c34a6"
MIRROR = Path("/work/.mirror/ZDCSlab+PETS/repo")


def checkout(where: Path, script: str = "FillintheBlank_offline.py") -> Path:
    """The source's budget_allocation/ at COMMIT, extracted under `where` from the fetched mirror (never committed)."""
    script_dir = where / "budget_allocation"
    if not (script_dir / script).exists():
        where.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(MIRROR), "archive", COMMIT, "budget_allocation"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return script_dir


def shared_pool(path: Path, questions: int, min_valid: int = 0):
    """The `questions` queries of a pool with at least min_valid valid answers whose valid answers agree least (the
    smallest share of the pool's majority answer, 1 for none; ties in pool order), in pool order, invalid answers
    left out, answer ids dense per query (first appearance in pool order): (off, correct, ans, gold ids, query ids).
    On an easy pool the others are settled by their first draw, and every allocation gives the same curve."""
    from ttc.replay.pool import load_pool

    pool = load_pool(path)
    if not pool.has_answers:
        sys.exit(f"error: {path} has no answers")
    share = {}
    for i in range(pool.n_queries):
        a = pool.ans[pool.off[i]:pool.off[i + 1]]
        a = a[a >= 0]
        if len(a) >= min_valid:
            share[i] = np.bincount(a).max() / len(a) if len(a) else 1.0
    picked = sorted(sorted(share, key=lambda i: share[i])[:questions])
    off, correct, ans, gold, qids = [0], [], [], [], []
    for i in picked:
        ids, g = {}, -1
        for j in range(pool.off[i], pool.off[i + 1]):
            if pool.ans[j] < 0:
                continue
            a = ids.setdefault(int(pool.ans[j]), len(ids))
            ans.append(a)
            correct.append(int(pool.correct[j]))
            if pool.correct[j] and g < 0:
                g = a
        off.append(len(ans))
        gold.append(g)
        qids.append(pool.query_ids[i])
    return np.array(off, np.int64), np.array(correct, np.int8), np.array(ans, np.int64), gold, qids


def write_jsonl(path: Path, off, ans, gold, qids):
    with path.open("w") as f:
        for i, q in enumerate(qids):
            f.write(json.dumps({"id": q, "answers": [str(int(a)) for a in ans[off[i]:off[i + 1]]],
                                "answer": str(gold[i]) if gold[i] >= 0 else "none"}) + "\n")


def run_source(script_dir: Path, preds: Path, out: Path, B: int, runs: int, nsamples: int, options: int, log: Path,
               seed: int):
    cmd = [sys.executable, "FillintheBlank_offline.py", "--preds", str(preds), "--B", str(B), "--multi_runs",
           str(runs), "--seed", str(seed), "--with_baseline", "--vote_method", "mv", "--multi_run_jsonl", str(out),
           "--accuracy_plot", "", "--consistency_plot", "", "--nsamples", str(nsamples), "--max_options", str(options)]
    with log.open("w") as f:
        subprocess.run(cmd, cwd=script_dir, check=True, stdout=f, stderr=subprocess.STDOUT)


def source_curves(outs: list, K: int, B: int):
    """{(method, metric): array runs x B} from the source's --multi_run_jsonl files (their runs together)."""
    runs = [json.loads(line) for out in outs for line in out.read_text().splitlines() if line.strip()]
    runs = [r for r in runs if r.get("type") == "run"]
    res = {}
    for method in ("OKG", "Base"):
        for metric in ("consistency", "accuracy"):
            rows = []
            for r in runs:
                pts = {int(t): float(v) for t, v in r["curves"][method][metric]}
                rows.append([pts.get(K * b, math.nan) for b in range(1, B + 1)])
            res[method, metric] = np.array(rows)
    return res


def vote(a):
    """The source's vote_majority: the most frequent, ties to the earliest."""
    if len(a) == 0:
        return -1
    counts = {}
    for x in a:
        counts[x] = counts.get(x, 0) + 1
    top = max(counts.values())
    return next(x for x in a if counts[x] == top)


def engine_curves(off, correct, ans, gold, seeds: int, B: int, options: int, mc: int = 0):
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import Pool
    from ttc.replay.rng import permutation, query_order

    n = len(off) - 1
    pool = Pool.from_arrays(off, correct=correct, ans=ans)
    tok = np.ones(len(ans), np.int64)
    res = {(m, k): np.zeros((seeds, B)) for m in ("OKG", "Base") for k in ("consistency", "accuracy")}
    cfg = RunConfig("pets", pets_options=options, pets_mc=mc)
    for s in range(seeds):
        perm = permutation(pool.off, pool.qkeys, s)
        rank, _ = query_order(pool.qkeys, s)
        drawn = [ans[perm[off[i]:off[i + 1]]] for i in range(n)]
        label = [vote(d) for d in drawn]
        for b in range(1, B + 1):
            got = run_once(off, correct, np.zeros(len(ans)), ans, tok, perm, rank, cfg, n * b)
            for method, nd in (("OKG", np.asarray(got["n_drawn"])), ("Base", np.minimum(b, np.diff(off)))):
                v = [vote(drawn[i][:nd[i]]) for i in range(n)]
                res[method, "consistency"][s, b - 1] = np.mean([v[i] == label[i] for i in range(n)])
                res[method, "accuracy"][s, b - 1] = np.mean([v[i] >= 0 and v[i] == gold[i] for i in range(n)])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", type=Path, default=ROOT / "data" / "lastletters-gpt35-40")
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--runs", type=int, default=10, help="the source's --multi_runs")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--nsamples", type=int, default=500, help="the source's --nsamples (its default)")
    ap.add_argument("--max-options", type=int, default=16, help="the source's --max_options (its default)")
    ap.add_argument("--pets-mc", type=int, default=None, help="the engine's pets_mc: 0 its exact rewards; by default "
                    "--nsamples, the source's Monte Carlo estimate")
    ap.add_argument("--source", type=Path, default=Path("/tmp/pets-src"))
    ap.add_argument("--source-seed", type=int, default=2025, help="the source's --seed (its runs: seed + r)")
    ap.add_argument("--source-output", default=None, help="the source's --multi_run_jsonl: reused when it exists; "
                    "a comma list of saved ones (runs of other --source-seed) are read together")
    args = ap.parse_args()

    off, correct, ans, gold, qids = shared_pool(args.pool, args.questions)
    K = len(qids)
    outs = [Path(p) for p in args.source_output.split(",")] if args.source_output else [args.source / "multi_run.jsonl"]
    if not outs[0].exists():
        script_dir = checkout(args.source)
        preds = args.source / "preds.jsonl"
        write_jsonl(preds, off, ans, gold, qids)
        run_source(script_dir, preds, outs[0], args.B, args.runs, args.nsamples, args.max_options,
                   outs[0].with_suffix(".log"), args.source_seed)
    src = source_curves([o for o in outs if o.exists()], K, args.B)
    mc = args.nsamples if args.pets_mc is None else args.pets_mc
    eng = engine_curves(off, correct, ans, gold, args.seeds, args.B, args.max_options, mc)
    print(f"PETS offline (ZDCSlab/PETS {COMMIT}, FillintheBlank_offline.py, {src['OKG', 'consistency'].shape[0]} runs) "
          f"vs the engine's pets, pets_mc={mc} ({args.seeds} seeds) on {args.pool.name}, its {K} least agreeing "
          f"questions, valid answers only, {args.max_options} buckets")
    for metric in ("consistency", "accuracy"):
        print(f"\n{metric}: mean ± SE; z = (engine - source) / combined SE")
        print(f"{'b':>3} {'OKG source':>16} {'pets engine':>16} {'z':>6}   {'Base source':>16} {'uniform engine':>16} "
              f"{'z':>6}")
        for b in range(args.B):
            cells = []
            for m in ("OKG", "Base"):
                x, y = src[m, metric][:, b], eng[m, metric][:, b]
                sx, sy = x.std(ddof=1) / math.sqrt(len(x)), y.std(ddof=1) / math.sqrt(len(y))
                se = math.hypot(sx, sy)
                z = (y.mean() - x.mean()) / se if se > 0 else (0.0 if y.mean() == x.mean() else math.inf)
                cells += [f"{x.mean():.4f}±{sx:.4f}", f"{y.mean():.4f}±{sy:.4f}", f"{z:+.2f}"]
            print(f"{b + 1:>3} {cells[0]:>16} {cells[1]:>16} {cells[2]:>6}   {cells[3]:>16} {cells[4]:>16} "
                  f"{cells[5]:>6}")


if __name__ == "__main__":
    main()
