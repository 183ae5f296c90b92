"""The L-aggregated Bayesian stop (lbayes, arXiv 2602.05395, known prior) against its source's own notebook code, on a
pool, in the source's protocol.

    python benchmarks/lbayes_source.py --source /tmp/lbayes-src/LLM_known_prior_final.ipynb
        [--pool data/lastletters-gpt35-40] [--repeats 5] [--questions 250] [--thre 0.95] [--L 2]

The source is github.com/jh9959-afk/Paper at commit 4bb951c (its notebook, checked out with `git -C <mirror> show
4bb951c:LLM_known_prior_final.ipynb > FILE`, never committed here); this script runs the notebook's first two code
cells (its helpers and stop_L2_tilde / stop_L3_tilde / stop_L4_tilde; the FEval-TTC loader's import left out, the pool
replaces its data) as they are. Its protocol (the notebook's repeat loop): per repeat r, each question's answers
resampled with replacement to 100 (bootstrap_answer_probability_tables_with_meta, seed 124 + r; an invalid answer is
None, one more category), the prior the sorted shares of those 100, then stop_L*_tilde over them in order at prob_thre;
n_stop, and the final answer (Counter.most_common of the draws so far) against the majority of the question's pool (its
mode accuracy) and against a correct answer. The engine runs the same 100 draws per question as a pool in that order
(elimination, K 1, --eliminate lbayes, --max-samples 100), invalid answers as the engine's (a draw, no vote, not in the
prior). It prints mean ± SE over repeats for both, the paired z, and how many decisions (stop draw) differ on the
questions whose 100 draws hold no invalid answer (0 expected: there the conventions coincide).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_NEW = 100  # the notebook's N_samples_new


def load_source(path: Path) -> dict:
    """The notebook's first two code cells, executed as they are (but the FEval-TTC import)."""
    nb = json.loads(path.read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"][:2]
    code = "\n".join(cells).replace("from feval_ttc import load, DatasetType, LLMType\n", "")
    ns: dict = {}
    exec(compile(code, str(path), "exec"), ns)  # noqa: S102 - the source's own code, run to compare with it
    return ns


def mean_se(x):
    x = np.asarray(x, float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="LLM_known_prior_final.ipynb of jh9959-afk/Paper")
    ap.add_argument("--pool", type=Path, default=ROOT / "data/lastletters-gpt35-40")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--questions", type=int, default=250, help="the first this many questions (the notebook: 250)")
    ap.add_argument("--thre", type=float, default=0.95)
    ap.add_argument("--L", type=int, default=2, choices=(2, 3, 4))
    args = ap.parse_args()
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool

    src = load_source(args.source)
    stop = src[f"stop_L{args.L}_tilde"]
    pool = load_pool(args.pool)
    nq = min(args.questions, pool.n_queries)
    cfg = RunConfig("elimination", eliminate="lbayes", lb_thre=args.thre, lb_l=args.L, max_samples=N_NEW)
    rows = {k: [] for k in ("s_n", "s_mode", "s_acc", "e_n", "e_mode", "e_acc", "v_n", "v_mode", "v_acc")}
    differ = clean = differ_v = 0
    t_src = t_eng = 0.0
    for r in range(args.repeats):
        rng = np.random.default_rng(124 + r)
        seqs, modes, goods = [], [], []
        for i in range(nq):
            a = pool.ans[pool.off[i]:pool.off[i + 1]]
            c = pool.correct[pool.off[i]:pool.off[i + 1]]
            labels = [None if x < 0 else str(int(x)) for x in a]
            cnt = Counter(labels)  # the notebook's bootstrap: the empirical law of the question's answers
            support = list(cnt.keys())
            probs = np.array([cnt[s] for s in support], float)
            probs /= probs.sum()
            idx = rng.choice(len(support), size=N_NEW, replace=True, p=probs)
            seqs.append([support[k] for k in idx])
            modes.append(Counter(labels).most_common(1)[0][0])
            goods.append({lab for lab, ok in zip(labels, c, strict=True) if ok and lab is not None})
        t = time.perf_counter()
        outs = []
        for seq in seqs:
            prior = sorted((v / N_NEW for v in Counter(seq).values()), reverse=True)
            outs.append(stop(seq, prior, args.thre))
        t_src += time.perf_counter() - t
        # the engine: the same draws, in order, as a pool (answer ids: the labels; None: invalid)
        ans = np.array([-1 if x is None else int(x) for seq in seqs for x in seq], np.int64)
        off = np.arange(nq + 1, dtype=np.int64) * N_NEW
        ok = np.array([int(x is not None and x in g) for seq, g in zip(seqs, goods, strict=True) for x in seq], np.int8)
        t = time.perf_counter()
        got = run_once(off, ok, ok.astype(float), ans, np.ones(len(ans), np.int64), np.arange(len(ans)),
                       np.arange(nq), cfg, N_NEW * nq)
        t_eng += time.perf_counter() - t
        # ... and with the source's convention (--invalid-votes: invalid answers one category of their own, after
        # the valid ones, as Pool.with_invalid_votes lays them out)
        top = np.array([int(pool.ans[pool.off[i]:pool.off[i + 1]].max()) for i in range(nq)])
        vans = np.where(ans < 0, np.repeat(np.maximum(top, -1) + 1, N_NEW), ans)
        vgot = run_once(off, ok, ok.astype(float), vans, np.ones(len(ans), np.int64), np.arange(len(ans)),
                        np.arange(nq), cfg, N_NEW * nq)
        per = {k: [] for k in rows}

        def sc(drawn):
            """The engine's selection (sc): the answer that reached the largest count first."""
            best, cnt, most = None, Counter(), 0
            for x in drawn:
                cnt[x] += 1
                if cnt[x] > most:
                    best, most = x, cnt[x]
            return best

        for i, (seq, out) in enumerate(zip(seqs, outs, strict=True)):
            for who, g, voting in (("e", got, False), ("v", vgot, True)):
                k = int(g["n_drawn"][i])
                best = sc([x for x in seq[:k] if voting or x is not None])
                per[f"{who}_n"].append(k)
                per[f"{who}_mode"].append(best == modes[i])
                per[f"{who}_acc"].append(best is not None and best in goods[i])
            per["s_n"].append(out["n_stop"])
            per["s_mode"].append(out["final_answer"] == modes[i])
            per["s_acc"].append(out["final_answer"] in goods[i])
            decision = (out["n_stop"], bool(out["stopped"]))
            differ_v += decision != (int(vgot["n_drawn"][i]), bool(vgot["answered"][i]))
            if None not in seq:
                clean += 1
                differ += decision != (int(got["n_drawn"][i]), bool(got["answered"][i]))
        for key in rows:
            rows[key].append(float(np.mean(per[key])))
    print(f"{args.pool.name}: the first {nq} questions, {args.repeats} repeats of {N_NEW} bootstrap draws each "
          f"(seeds 124 ..); L = {args.L}, prob_thre {args.thre}; source jh9959-afk/Paper 4bb951c; mean ± SE over "
          f"repeats")
    print(f"stop decisions that differ from the source's: engine {differ} of {clean} (the questions whose draws hold "
          f"no invalid answer), engine --invalid-votes {differ_v} of {nq * args.repeats} (all)")
    print(f"{'':24} {'draws / question':>18} {'mode accuracy':>18} {'accuracy':>18}")
    names = {"s": "source", "e": "engine", "v": "engine --invalid-votes"}
    for who in ("s", "e", "v"):
        vals = [mean_se(rows[f"{who}_{k}"]) for k in ("n", "mode", "acc")]
        print(f"{names[who]:24} " + " ".join(f"{m:9.4f} ± {se:6.4f}" for m, se in vals))
    for who in ("e", "v"):
        zs = []
        for k in ("n", "mode", "acc"):
            m, se = mean_se(np.subtract(rows[f"{who}_{k}"], rows[f"s_{k}"]))
            zs.append(m / se if se > 0 else (0.0 if m == 0 else math.inf))
        print(f"{'z, ' + names[who]:24} " + " ".join(f"{z:18.2f}" for z in zs) + "   (paired, minus the source)")
    print(f"time: source {t_src:.1f} s, engine {t_eng:.2f} s")


if __name__ == "__main__":
    main()
