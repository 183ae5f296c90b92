"""The martingale majority certificate (mmc; Cordero-Encinar & Duncan, arXiv 2510.17472) against the source's own
decider, on a pool.

    python benchmarks/mmc_source.py --source /tmp/mmc_source.py [--pool data/lastletters-gpt35-40] [--seeds 20]

The source is the file whose docstring opens "Martingale Majority Certificate (MMC) stopping rule", class
PluralityEAndDeciderPrior, from github.com/paulaoak/certified_self_consistency at 2c41622,
verl/verl/utils/statistical_certificates/MMC_stopping_rule.py (docs/semantics.md, mmc; never committed here): one
on_vote per answer, stop when both e-processes cross log(1 / delta), abstain at N_max votes. Per seed, each
question's responses in a fresh random order, its valid answers voted one by one (delta 0.05, M 3, N_max 32, its
defaults), against the engine (elimination, --eliminate mmc, --max-samples 32) on the same order:

- labels in order of first appearance ("0000", "0001", ...): the source's ties (alphabetical for its top M, the first
  character then the first seen for its final leader check) then fall as the engine's (the answer drawn first), so
  every decision must agree: the script counts the (question, seed) pairs that stop at another draw (0 expected);
- labels the pool's answer ids as strings: the source's own tie-breaking on labels that carry no order, mean draws
  and majority accuracy per seed against the engine's, mean ± SE over seeds and z (within 2: no difference shown);
- invalid answers voted as one more label ("None"), as the source would count an unparsed answer, against the engine
  (where they cost a draw and do not vote), likewise.

With `--call training`, the source's decider as its own training code calls it (verl/verl/trainer/ppo/metric_utils.py
at 2c41622, process_validation_metrics_last): labels known in advance (`labels=list(set(...))`: every distinct
answer among the question's responses, each unparsed one a label of its own, "sub_<k>"), M 2, delta 0.1 and 0.4,
min_pair_updates and min_other_updates 1, require_current_leader_match False, N_max the cap; its answer the majority
of the votes used (calc_maj_val: a max over the votes in order, ties to the first seen, unparsed answers one vote
""). Against the engine with the options that name that call (--mmc-labels pool --mmc-min-updates 1
--mmc-leader-check off --mmc-m 2), on the same three comparisons (the invalid answers of the third each a label of
their own, as that call makes them).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CAP, DELTA, M = 32, 0.05, 3  # the source's N_max, delta, M defaults


def load_source(path: Path):
    spec = importlib.util.spec_from_file_location("mmc_source", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def source_run(mod, labels, call=None, cap=CAP):
    """(votes used, stopped, winner) of the source's decider on these labels in order: its class's defaults, or
    (call: a dict with delta and cap) the training code's call, whose answer is the majority of the votes used as its
    calc_maj_val takes it (ties to the first seen; the unparsed ones, "sub_<k>" to the decider, one vote "")."""
    if call is None:
        d = mod.PluralityEAndDeciderPrior(M=M, delta=DELTA, N_max=cap)
    else:
        d = mod.PluralityEAndDeciderPrior(labels=list(set(labels)), M=2, delta=call["delta"], N_max=call["cap"],
                                          min_pair_updates=1, min_other_updates=1,
                                          require_current_leader_match=False)
    st = None
    for lab in labels:
        st = d.on_vote(lab)
        if st["stopped"] or st["abstained"]:
            break
    if st is None:
        return 0, False, None
    if call is not None:
        counts = {}
        for lab in labels[:st["n"]]:
            key = "" if lab.startswith("sub_") else lab
            counts[key] = counts.get(key, 0) + 1
        return st["n"], bool(st["stopped"]), max(counts, key=counts.get)
    winner = st["winner"] if st["stopped"] else Counter(labels[:st["n"]]).most_common(1)[0][0]
    return st["n"], bool(st["stopped"]), winner


def answer_texts(path, pool):
    """Per query (the pool's order), its distinct valid answer texts by answer id: load_pool codes an answer as its
    dense rank among the query's texts, so the sorted texts are the ids' order (checked against the pool's counts)."""
    import polars as pl

    df = pl.read_parquet(path / "samples.parquet", columns=["query_id", "answer"])
    by_query = {}
    for q, a in df.iter_rows():
        if a is not None and a != "":
            by_query.setdefault(q, []).append(a)
    out = []
    for i, q in enumerate(pool.query_ids):
        got = by_query.get(q, [])
        texts = sorted(set(got))
        ids = pool.ans[pool.off[i]:pool.off[i + 1]]
        want = [int((ids == a).sum()) for a in range(len(texts))]
        if [got.count(t) for t in texts] != want or (ids >= len(texts)).any():
            raise SystemExit(f"query {q}: the answer texts do not match the pool's answer ids")
        out.append(texts)
    return out


def mean_se(x):
    x = np.asarray(x, float)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="the source's file (PluralityEAndDeciderPrior)")
    ap.add_argument("--pool", type=Path, default=ROOT / "data/lastletters-gpt35-40")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--call", choices=("class", "training"), default="class",
                    help="the source's class at its defaults, or as its training code calls it (module docstring)")
    ap.add_argument("--cap", type=int, default=CAP, help="N_max and the engine's --max-samples")
    args = ap.parse_args()
    if args.call == "training":
        for delta in (0.1, 0.4):
            compare(args, {"delta": delta, "cap": args.cap})
    else:
        compare(args, None)


def compare(args, call):
    """The three comparisons of the module docstring, at the class's defaults (call None) or the training call's."""
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool

    mod = load_source(args.source)
    pool = load_pool(args.pool)
    off, ans, correct = pool.off, pool.ans, pool.correct
    n = pool.n_queries
    rng = np.random.default_rng(0)
    mismatch = total = 0
    keys = ("valid_n", "valid_acc", "full_n", "full_acc", "ids_n", "ids_acc", "none_n", "none_acc")
    rows = {k: [] for k in keys}
    if call is None:
        cfg = RunConfig("elimination", eliminate="mmc", mmc_delta=DELTA, mmc_m=M, max_samples=args.cap)
    else:
        cfg = RunConfig("elimination", eliminate="mmc", mmc_delta=call["delta"], mmc_m=2, max_samples=args.cap,
                        mmc_labels="pool", mmc_min_updates=1, mmc_leader_check="off")
    cap = args.cap
    texts = answer_texts(args.pool, pool) if call is not None else None
    same_ids = same_own = 0
    if call is not None:
        # the call's labels of every response (each unparsed one its own, sub_<its index + 1> in the question) and
        # the pool recoded so that they are its answers, ids in their str order (the source's ties)
        own = [[f"sub_{j - off[i] + 1}" if ans[j] < 0 else texts[i][ans[j]] for j in range(off[i], off[i + 1])]
               for i in range(n)]
        own_ans = np.concatenate([[sorted(set(lab)).index(x) for x in lab] for lab in own]).astype(np.int64)
    for _ in range(args.seeds):
        orders = [rng.permutation(np.arange(off[i], off[i + 1])) for i in range(n)]
        # the engine on the valid answers only (so that a draw is a vote, as in the first comparison)
        vidx = [o[ans[o] >= 0] for o in orders]
        voff = np.concatenate([[0], np.cumsum([len(v) for v in vidx])]).astype(np.int64)
        flat = np.concatenate(vidx).astype(np.int64)
        vans, vcor = ans[flat], correct[flat]
        got = run_once(voff, vcor, vcor.astype(float), vans, np.ones(len(flat), np.int64), np.arange(len(flat)),
                       np.arange(n), cfg, cap * n)
        # the engine on every response (invalid ones cost a draw, do not vote)
        aidx = np.concatenate(orders).astype(np.int64)
        full = run_once(off, correct[aidx], correct[aidx].astype(float), ans[aidx], np.ones(len(aidx), np.int64),
                        np.arange(len(aidx)), np.arange(n), cfg, cap * n)
        if call is not None:
            recoded = run_once(off, correct[aidx], correct[aidx].astype(float), own_ans[aidx],
                               np.ones(len(aidx), np.int64), np.arange(len(aidx)), np.arange(n), cfg, cap * n)
        per = {k: [] for k in keys}
        for i in range(n):
            v = vidx[i]
            if call is None:  # labels in the engine's tie order: first appearance
                first = {}
                for a in ans[v]:
                    first.setdefault(int(a), len(first))
                k, stopped, _ = source_run(mod, [f"{first[int(a)]:04d}" for a in ans[v]], call, cap)
            else:  # labels known in advance: ties by answer id
                k, stopped, _ = source_run(mod, [f"{int(a):04d}" for a in ans[v]], call, cap)
            total += 1
            mismatch += (k, stopped) != (int(got["n_drawn"][i]), bool(got["answered"][i]))
            per["valid_n"].append(int(got["n_drawn"][i]))
            per["valid_acc"].append(int(got["sel_sc"][i]))
            per["full_n"].append(int(full["n_drawn"][i]))
            per["full_acc"].append(int(full["sel_sc"][i]))
            gold = {int(a) for a, c in zip(ans[off[i]:off[i + 1]], correct[off[i]:off[i + 1]], strict=True)
                    if c and a >= 0}
            if call is None:
                k, _, w = source_run(mod, [str(int(a)) for a in ans[v]], call, cap)
                w = None if w is None else int(w)
            else:  # the answers' own texts, as the training code passes them
                k, stopped, w = source_run(mod, [texts[i][a] for a in ans[v]], call, cap)
                same_ids += (k, stopped) == (int(got["n_drawn"][i]), bool(got["answered"][i]))
                w = texts[i].index(w) if w in texts[i] else None
            per["ids_n"].append(k)
            per["ids_acc"].append(w is not None and w in gold)
            if call is None:
                labs = ["None" if a < 0 else str(int(a)) for a in ans[orders[i]]]
            else:  # each unparsed answer a label of its own, named by its response (the call's sub_<k>)
                labs = [own[i][j - off[i]] for j in orders[i]]
            k, stopped, w = source_run(mod, labs, call, cap)
            if call is not None:
                same_own += (k, stopped) == (int(recoded["n_drawn"][i]), bool(recoded["answered"][i]))
                w = str(texts[i].index(w)) if w in texts[i] else None
            per["none_n"].append(k)
            per["none_acc"].append(w not in (None, "None", "") and int(w) in gold)
        for key in keys:
            rows[key].append(float(np.mean(per[key])))
    if call is None:
        setting = f"the class's defaults: delta {DELTA}, M {M}, N_max {cap}"
    else:
        setting = (f"the training code's call: delta {call['delta']}, M 2, N_max {cap}, labels known, guards 1, "
                   f"no leader check")
    print(f"{args.pool.name}: {n} questions, {args.seeds} seeds; {setting}; mean ± SE over seeds")
    order = "first-appearance" if call is None else "answer-id"
    print(f"labels in {order} order (valid answers only): {mismatch} of {total} (question, seed) decisions "
          f"differ between the source and the engine")
    if call is not None:
        print(f"labels the answer texts (valid answers only): {total - same_ids} of {total} decisions differ")
        print(f"every response, each invalid answer its own label, against the engine on the pool recoded so (its "
              f"answers those labels, ids in their str order): {total - same_own} of {total} decisions differ")
    print(f"{'':44} {'draws / question':>16} {'accuracy':>16} {'z draws':>8} {'z acc':>6}  "
          f"(z: paired, engine - source)")
    for name, eng, src in (("valid answers only: engine", "valid", None),
                           ("  source, labels = the pool's answer ids" if call is None else
                            "  source, labels = the answer texts", "valid", "ids"),
                           ("every response: engine (invalid: no vote)", "full", None),
                           ("  source, invalid answers voted as 'None'" if call is None else
                            "  source, each invalid answer its own label", "full", "none")):
        who = src or eng
        dn, dns = mean_se(rows[who + "_n"])
        da, das = mean_se(rows[who + "_acc"])
        line = f"{name:44} {dn:8.3f} ± {dns:5.3f} {da:8.4f} ± {das:6.4f}"
        if src:
            zs = []
            for part in ("_n", "_acc"):
                m, se = mean_se(np.subtract(rows[eng + part], rows[src + part]))
                zs.append(m / se if se > 0 else (0.0 if m == 0 else math.inf))
            line += f" {zs[0]:8.2f} {zs[1]:6.2f}"
        print(line)

if __name__ == "__main__":
    main()
