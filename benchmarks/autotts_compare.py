"""ttc's Parallel-Probe against AutoTTS's own replay evaluator (github.com/zhengkid/AutoTTS,
efficient_reasoning_controller/eval/, the commit in docs/semantics.md), on the same files and the same shuffles.

The source evaluates a method on each question under 100 shuffles of its 128 traces (random.Random(seed).shuffle,
seeds 0..99) and reports the accuracy and the mean tokens per question. Its Parallel-Probe is deterministic given
a shuffle, so the engine is run on exactly those permutations (kernel.parallel_probe_once under the source's
conventions: every probe paid (probe cost "autotts"), "ERR" an answer that votes (invalid votes), correct = the
answer string equals the gold string) and compared question by question, seed by seed: the answers' correctness
and the tokens must be equal, not close.

    python benchmarks/autotts_compare.py --source /tmp/autotts/efficient_reasoning_controller/eval \
        --data ../shared/data/pools/autotts-128 --seeds 100 --chains 2,4,8,16,32,64

The source is checked out outside the project (git archive of the mirror into /tmp); its code is imported, never
copied. Prints one markdown row per (file, chains): both accuracies, both mean token costs, mismatches.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np


def file_arrays(path: Path):
    """One AutoTTS file as the engine's flat arrays in the source's conventions: per question its traces in file
    order; answers coded per question by first appearance, "ERR" a category of its own; correct = string equality
    with the gold answer; probe offsets 500 k."""
    data = json.loads(path.read_text())
    off, tok, ans, ok, poff, ptok, pans, pok = [0], [], [], [], [0], [], [], []
    for q in data:
        gold = q["gold_answer"]
        codes: dict = {}

        def code(s, codes=codes):
            return codes.setdefault(s, len(codes))

        freq = q["probe_freq"]
        for probes, total, final in q["each_branch"]:
            tok.append(int(total))
            ans.append(code(final))
            ok.append(int(final == gold))
            for k, a in enumerate(probes):
                ptok.append(freq * (k + 1))
                pans.append(code(a))
                pok.append(int(a == gold))
            poff.append(len(ptok))
        off.append(len(tok))
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return data, i64(off), i64(tok), i64(ans), np.asarray(ok, np.int8), i64(poff), i64(ptok), i64(pans), \
        np.asarray(pok, np.int8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", type=Path, required=True, help="AutoTTS's efficient_reasoning_controller/eval")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--chains", default="2,4,8,16,32,64")
    ap.add_argument("--files", default="", help="comma-separated file stems (default: all)")
    ap.add_argument("--cmc", type=Path, default=None, help="AutoTTS's discovered controller instead: the method.py "
                    "of its search round r0004 (logs/search_history/r0004/code_base/method.py), its OptimalController "
                    "(CMC) at each --betas against ttc's cmc")
    ap.add_argument("--betas", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--whole", action="store_true", help="the whole-trace baselines instead: the source's ASC "
                    "(threshold 0.95) and ESC (window 8) against ttc's elimination with sc-beta / esc, --select sc, "
                    "invalid answers voting")
    a = ap.parse_args()
    if a.whole:
        return whole_baselines(a)
    if a.cmc is not None:
        return cmc_against_source(a)
    sys.path.insert(0, str(a.source))
    from data_loader import Question  # the source's
    from method import Parallel_Probe

    from ttc.replay.kernel import (
        DEPTH_WHOLE,
        PROBE_COST_AUTOTTS,
        UNIT_TOKENS,
        answer_offsets,
        depth_view,
        parallel_probe_once,
    )

    files = sorted(a.data.glob("*.json"))
    if a.files:
        files = [f for f in files if f.stem in a.files.split(",")]
    print("| file | chains | source acc % | ttc acc % | source tokens/question | ttc tokens/question | SE acc | "
          "mismatches (answers, tokens) | seconds (source, ttc) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in files:
        data, off, tok, ans, ok, poff, ptok, pans, pok = file_arrays(f)
        n = len(off) - 1
        m_all = len(tok)
        end_tok, end_ans, end_ok, reach = (np.empty(m_all, np.int64), np.empty(m_all, np.int64),
                                           np.empty(m_all, np.int8), np.empty(m_all, np.int64))
        depth_view(poff, ptok, pans, pok, tok, ans, ok, DEPTH_WHOLE, 1, 0, PROBE_COST_AUTOTTS, end_tok, end_ans, end_ok,
                   reach)
        top = ans.copy()
        for j in range(m_all):
            if poff[j + 1] > poff[j]:
                top[j] = max(top[j], pans[poff[j]:poff[j + 1]].max())
        aoff = answer_offsets(off, top)
        for chains in [int(c) for c in a.chains.split(",")]:
            src_acc, src_cost, eng_acc, eng_cost = [], [], [], []
            bad_a = bad_t = 0
            t_src = t_eng = 0.0
            for s in range(a.seeds):
                t0 = time.perf_counter()
                method = Parallel_Probe(num_chains=chains, T=40, prune_patience=7, warm_up=15)
                sc, sk = [], []
                for info in data:
                    qq = Question(info, seed=s)
                    right, cost = qq.solve(method)
                    sc.append(int(right))
                    sk.append(cost)
                t1 = time.perf_counter()
                perm = np.empty(m_all, np.int64)
                for i in range(n):
                    idx = list(range(off[i + 1] - off[i]))
                    random.Random(s).shuffle(idx)  # the source's shuffle of its branch list
                    perm[off[i]:off[i + 1]] = off[i] + np.asarray(idx)
                qi, tot, _, paid = parallel_probe_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans,
                                                       end_ok, perm, np.arange(n, dtype=np.int64), chains, 40, 7, 15,
                                                       UNIT_TOKENS, 2**62)
                ek = [int(paid[off[i]:off[i + 1]].sum()) for i in range(n)]  # (positions past the chains: 0)
                t2 = time.perf_counter()
                t_src += t1 - t0
                t_eng += t2 - t1
                ea = qi[:, 6].tolist()
                assert sum(ek) == tot[1]
                bad_a += sum(int(x != y) for x, y in zip(sc, ea, strict=True))
                bad_t += sum(int(x != y) for x, y in zip(sk, ek, strict=True))
                src_acc.append(np.mean(sc))
                eng_acc.append(np.mean(ea))
                src_cost.append(np.mean(sk))
                eng_cost.append(np.mean(ek))
            se = float(np.std(eng_acc, ddof=1) / np.sqrt(len(eng_acc))) if len(eng_acc) > 1 else float("nan")
            print(f"| {f.stem} | {chains} | {100 * np.mean(src_acc):.2f} | {100 * np.mean(eng_acc):.2f} | "
                  f"{np.mean(src_cost):,.0f} | {np.mean(eng_cost):,.0f} | {100 * se:.2f} | {bad_a}, {bad_t} of "
                  f"{n * a.seeds} | {t_src:.1f}, {t_eng:.2f} |", flush=True)


def cmc_against_source(a):
    """The source's CMC (its OptimalController of search round r0004, with the data loader of eval/) against the
    engine's kernel.cmc_once on the same shuffles, question by question, with the source's conventions."""
    import importlib.util

    sys.path.insert(0, str(a.source))
    from data_loader import Question  # the source's
    spec = importlib.util.spec_from_file_location("cmc_source", a.cmc)
    src = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(src)

    from ttc.replay.engine import cmc_knobs
    from ttc.replay.kernel import DEPTH_WHOLE, PROBE_COST_AUTOTTS, UNIT_TOKENS, answer_offsets, cmc_once, depth_view

    files = sorted(a.data.glob("*.json"))
    if a.files:
        files = [f for f in files if f.stem in a.files.split(",")]
    print("| file | beta | source acc % | ttc acc % | source tokens/question | ttc tokens/question | SE acc | "
          "mismatches (answers, tokens) |")
    print("|---|---|---|---|---|---|---|---|")
    for f in files:
        data, off, tok, ans, ok, poff, ptok, pans, pok = file_arrays(f)
        n, m_all = len(off) - 1, len(tok)
        end_tok, end_ans, end_ok, reach = (np.empty(m_all, np.int64), np.empty(m_all, np.int64),
                                           np.empty(m_all, np.int8), np.empty(m_all, np.int64))
        depth_view(poff, ptok, pans, pok, tok, ans, ok, DEPTH_WHOLE, 1, 0, PROBE_COST_AUTOTTS, end_tok, end_ans, end_ok,
                   reach)
        top = ans.copy()
        for j in range(m_all):
            if poff[j + 1] > poff[j]:
                top[j] = max(top[j], pans[poff[j]:poff[j + 1]].max())
        aoff = answer_offsets(off, top)
        for beta in [float(b) for b in a.betas.split(",")]:
            kn, kf = cmc_knobs(beta)
            src_acc, src_cost, eng_acc, eng_cost = [], [], [], []
            bad_a = bad_t = 0
            for s in range(a.seeds):
                method = src.OptimalController(config={"beta": beta})
                sc, sk = [], []
                for info in data:
                    right, cost = Question(info, seed=s).solve(method)
                    sc.append(int(right))
                    sk.append(cost)
                perm = np.empty(m_all, np.int64)
                for i in range(n):
                    idx = list(range(off[i + 1] - off[i]))
                    random.Random(s).shuffle(idx)
                    perm[off[i]:off[i + 1]] = off[i] + np.asarray(idx)
                qi, _, paid = cmc_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, perm,
                                       np.arange(n, dtype=np.int64), kn, kf, UNIT_TOKENS, 2**62)
                ea = qi[:, 4].tolist()
                ek = [int(paid[off[i]:off[i + 1]].sum()) for i in range(n)]
                bad_a += sum(int(x != y) for x, y in zip(sc, ea, strict=True))
                bad_t += sum(int(x != y) for x, y in zip(sk, ek, strict=True))
                src_acc.append(np.mean(sc))
                eng_acc.append(np.mean(ea))
                src_cost.append(np.mean(sk))
                eng_cost.append(np.mean(ek))
            se = float(np.std(eng_acc, ddof=1) / np.sqrt(len(eng_acc))) if len(eng_acc) > 1 else float("nan")
            print(f"| {f.stem} | {beta:g} | {100 * np.mean(src_acc):.2f} | {100 * np.mean(eng_acc):.2f} | "
                  f"{np.mean(src_cost):,.0f} | {np.mean(eng_cost):,.0f} | {100 * se:.2f} | {bad_a}, {bad_t} of "
                  f"{n * a.seeds} |", flush=True)


def whole_baselines(a):
    """ASC and ESC, the source's whole-trace baselines, against ttc's elimination policy with the sc-beta rule
    (Adaptive-Consistency's Beta test at conf 0.95, K = 1) and the esc rule (windows of K = 8), capped at
    max_samples, on the source's shuffles, question by question. Both read final answers only; "ERR" is an answer
    like any other (the source's strings; ttc --invalid-votes)."""
    sys.path.insert(0, str(a.source))
    from data_loader import Question  # the source's
    from method import ASCMethod, ESCMethod

    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig

    files = sorted(a.data.glob("*.json"))
    if a.files:
        files = [f for f in files if f.stem in a.files.split(",")]
    print("| file | method | max samples | source acc % | ttc acc % (ties to the first drawn) | "
          "source tokens/question | ttc tokens/question | SE acc | mismatches (answers, tokens) | "
          "answers that differ under --select sc (ties "
          "to the answer reaching the count first) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in files:
        data, off, tok, _, ok, *_ = file_arrays(f)
        n = len(off) - 1
        ans = np.empty(len(tok), np.int64)
        for i, q in enumerate(data):  # final answers only, dense per question (every string, "ERR" too, votes)
            codes: dict = {}
            for k, b in enumerate(q["each_branch"]):
                ans[off[i] + k] = codes.setdefault(b[2], len(codes))
        for name, ms in (("ASC", [2, 4, 8, 16, 32, 64]), ("ESC", [16, 32, 64])):
            for m in [x for x in ms if x in [int(c) for c in a.chains.split(",")]]:
                src_acc, src_cost, eng_acc, eng_cost = [], [], [], []
                bad_a = bad_t = bad_sc = 0
                cfg = (RunConfig("elimination", K=1, eliminate="sc-beta", max_samples=m) if name == "ASC"
                       else RunConfig("elimination", K=8, eliminate="esc", max_samples=m))
                for s in range(a.seeds):
                    method = ASCMethod(max_samples=m, threshold=0.95) if name == "ASC" else \
                        ESCMethod(max_samples=m, window_size=8)
                    sc, sk = [], []
                    for info in data:
                        right, cost = Question(info, seed=s).solve(method)
                        sc.append(int(right))
                        sk.append(cost)
                    perm = np.empty(len(tok), np.int64)
                    for i in range(n):
                        idx = list(range(off[i + 1] - off[i]))
                        random.Random(s).shuffle(idx)
                        perm[off[i]:off[i + 1]] = off[i] + np.asarray(idx)
                    # the source's majority breaks ties by the answer drawn first: ttc's cisc at T = inf is that vote
                    o = run_once(off, ok, ok.astype(float), ans, tok, perm, np.arange(n), cfg, 10**9,
                                 votes=(float("inf"), 10.0))
                    ea = o["sel_cisc"].astype(int).tolist()
                    bad_sc += sum(int(x != y) for x, y in zip(sc, o["sel_sc"].astype(int).tolist(), strict=True))
                    ek = [int(tok[perm[off[i]:off[i] + o["n_drawn"][i]]].sum()) for i in range(n)]
                    bad_a += sum(int(x != y) for x, y in zip(sc, ea, strict=True))
                    bad_t += sum(int(x != y) for x, y in zip(sk, ek, strict=True))
                    src_acc.append(np.mean(sc))
                    eng_acc.append(np.mean(ea))
                    src_cost.append(np.mean(sk))
                    eng_cost.append(np.mean(ek))
                se = float(np.std(eng_acc, ddof=1) / np.sqrt(len(eng_acc))) if len(eng_acc) > 1 else float("nan")
                print(f"| {f.stem} | {name} | {m} | {100 * np.mean(src_acc):.2f} | {100 * np.mean(eng_acc):.2f} | "
                      f"{np.mean(src_cost):,.0f} | {np.mean(eng_cost):,.0f} | {100 * se:.2f} | {bad_a}, {bad_t} of "
                      f"{n * a.seeds} | {bad_sc} |", flush=True)


if __name__ == "__main__":
    main()
