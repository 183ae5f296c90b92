"""The field's methods against their sources' own replay protocols, on the data the sources published.

    python benchmarks/source_protocols.py [--reps 50] [--seeds 200] [--shared ../shared]

ESC (Li et al., ICLR 2024) released its GPT-3.5 last-letters samples (`../shared/data/pools/lastletters-gpt35-40`,
from Yiwei98/ESC at commit 799157a) with the script that replays them (`early_stop_last.py`): 50 repetitions of
shuffling each question's 40 answers (Python's `random`, seeded 0, shuffled in place so repetitions compound),
windows of 5, stop at the first window whose answers are all the same string, else vote over all 40 with ties to the
answer seen first; accuracy and samples per question averaged over repetitions. This script runs that protocol, as
the source describes it, on the raw file, and the engine (`ttc replay`'s grid) on the embedded pool derived from it,
and prints both with standard errors over repetitions / seeds. Self-consistency over all 40 answers is checked
the same way (the source's `consistency_last.py` with sc_num 40).

The protocols differ in two stated ways (docs/semantics.md, `esc`): the source keeps the letters of a response
without "the answer is" as an answer, the pool stores it as invalid (73 of 20,000); the source breaks vote ties by
first appearance, the engine by the answer that reached the count first. The second row runs the source's protocol on
the pool's answers (an invalid answer agreeing with nothing): what is left between it and the engine is noise, so
a gap in the first row is the extraction's, an import-time convention, not the replay's.

Adaptive-Consistency (Aggarwal et al., EMNLP 2023) published no run on this pool; its majority (0.8) and entropy
(0.75) criteria are run here as its `scripts/eval_outputs.py` runs one (a check after every draw, at most 40 draws,
the answer `Counter.most_common(1)` gives), on the pool's answers shuffled as above, with a failed extraction (None)
counted by the criterion like any answer, as the criteria classes do: the engine with `--invalid-votes` and
`--select cisc --cisc-temp inf` (majority, ties to the answer drawn first) follows those conventions, and with its
own (an invalid answer agrees with nothing, ties to the answer that reached the count first) on the next row.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def source_answer(text: str) -> str:
    """The source's extraction: the letters after the last 'the answer is' (the whole text's when absent)."""
    return "".join(re.split(r"[^A-Za-z]", text.lower().split("the answer is")[-1]))


def vote(answers: list[str]) -> str:
    """Majority, ties to the answer seen first (a dict keeps insertion order and sorting is stable)."""
    counts: dict[str, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return max(counts, key=lambda a: counts[a])  # max returns the first of equal keys


def esc_source(rows, window: int, cap: int, reps: int):
    """Per repetition: (accuracy %, mean samples per question). rows: (gold, answers), an answer None when it
    cannot agree with any other (the pool's invalid answers)."""
    rng = random.Random(0)
    out = []
    for _ in range(reps):
        right = drawn = 0
        for gold, answers in rows:
            rng.shuffle(answers)  # in place, as the source does: each repetition shuffles the last one's order
            seen: list[str] = []
            final = None
            for w in range(cap // window):
                cur = answers[w * window:(w + 1) * window]
                seen += cur
                if cur[0] is not None and all(x == cur[0] for x in cur):
                    final = cur[0]
                    break
            drawn += (w + 1) * window
            final = vote(seen) if final is None else final
            right += final == gold
        out.append((100 * right / len(rows), drawn / len(rows)))
    return out


def ac_source(rows, rule, cap: int, reps: int):
    """Adaptive-Consistency's loop (its `scripts/eval_outputs.py` with one criterion, `min_gens` 1, at most cap
    draws) on each question's answers, shuffled as the ESC script shuffles, with a failed extraction (None) counted
    by the criterion like any answer; the answer `Counter.most_common(1)` gives (ties: the one drawn first)."""
    from collections import Counter

    rng = random.Random(0)
    out = []
    for _ in range(reps):
        right = drawn = 0
        for gold, answers in rows:
            rng.shuffle(answers)
            seq = answers[:cap]
            k = next((k for k in range(2, len(seq) + 1) if rule(seq[:k])), len(seq))
            drawn += k
            right += Counter(seq[:k]).most_common(1)[0][0] == gold
        out.append((100 * right / len(rows), drawn / len(rows)))
    return out


def ac_majority(share):
    from collections import Counter

    return lambda s: Counter(s).most_common(1)[0][1] / len(s) >= share


def ac_entropy(hmax):
    """AC's EntropyStoppingCriteria: base-2 entropy of the counts (a count of 1 appended to a lone category),
    normalised by log2 of the number of counts."""
    from collections import Counter

    def stop(s):
        counts = list(Counter(s).values())
        if len(counts) < 2:
            counts.append(1)
        t = sum(counts)
        return -sum(c / t * math.log2(c / t) for c in counts) / math.log2(len(counts)) <= hmax
    return stop


def engine_runs(pool_dir: Path, configs, budget: float, seeds: int, select: str, invalid_votes: bool = False,
                cisc_temp: float = 0.2):
    from ttc.replay.engine import replay
    from ttc.replay.pool import load_pool

    pool = load_pool(pool_dir, score="gt", invalid_votes=invalid_votes)
    df, _ = replay(pool, configs, [budget], np.arange(seeds), select=select, cisc_temp=cisc_temp)
    rows = []
    for label in dict.fromkeys(df["config"].to_list()):
        part = df.filter(df["config"] == label)
        rows.append((label, (100 * part["accuracy"]).to_list(), (part["samples_used"] / len(pool.qkeys)).to_list()))
    return rows


def mean_se(xs):
    m = statistics.fmean(xs)
    return m, (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=50, help="the source's repetitions (50 in the source)")
    ap.add_argument("--seeds", type=int, default=200, help="engine seeds")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    a = ap.parse_args()
    from ttc.replay.policies import RunConfig

    raw = a.shared / "data" / "pools" / "lastletters-gpt35-40" / "T0.7.jsonl"
    from ttc.harvest.importers import lastletters_answer

    raw_rows = [(r["answer"], r["generated_answer"]) for r in map(json.loads, raw.read_text().splitlines())]
    rows = [(gold, [source_answer(t) for t in texts]) for gold, texts in raw_rows]
    pool_rows = [(gold, [lastletters_answer(t) for t in texts]) for gold, texts in raw_rows]
    src_esc = esc_source(rows, 5, 40, a.reps)
    pool_esc = esc_source(pool_rows, 5, 40, a.reps)
    src_sc = [(100 * sum(vote(ans) == gold for gold, ans in rows) / len(rows), 40.0)]
    eng = engine_runs(ROOT / "data" / "lastletters-gpt35-40",
                      [RunConfig("elimination", K=5, eliminate="esc", max_samples=40), RunConfig("uniform")],
                      40, a.seeds, "sc")
    # Adaptive-Consistency's criteria with a failed extraction voting: the engine's --invalid-votes, and its vote
    # ties to the answer drawn first: --select cisc --cisc-temp inf
    src_acm = ac_source([(g, list(x)) for g, x in pool_rows], ac_majority(0.8), 40, a.reps)
    src_ace = ac_source([(g, list(x)) for g, x in pool_rows], ac_entropy(0.75), 40, a.reps)
    ac = [RunConfig("elimination", eliminate=rule, max_samples=40) for rule in ("ac-majority", "ac-entropy")]
    eng_ac = engine_runs(ROOT / "data" / "lastletters-gpt35-40", ac, 40, a.seeds, "cisc", invalid_votes=True,
                         cisc_temp=math.inf)
    eng_ac0 = engine_runs(ROOT / "data" / "lastletters-gpt35-40", ac, 40, a.seeds, "sc")
    print(f"last letters, GPT-3.5, 500 questions x 40 (source: {a.reps} shuffles; engine: {a.seeds} seeds)")
    print(f"{'method':<34}{'source acc %':>16}{'engine acc %':>16}{'z':>7}{'source samples':>17}"
          f"{'engine samples':>17}{'z':>7}")
    for name, src, (_label, acc, smp) in (("ESC (window 5, max 40)", src_esc, eng[0]),
                                         ("  the same, on the pool's answers", pool_esc, eng[0]),
                                         ("self-consistency, 40", src_sc, eng[1]),
                                         ("AC majority 0.8, invalid votes", src_acm, eng_ac[0]),
                                         ("  engine's own conventions", src_acm, eng_ac0[0]),
                                         ("AC entropy 0.75, invalid votes", src_ace, eng_ac[1]),
                                         ("  engine's own conventions", src_ace, eng_ac0[1])):
        (sa, sa_se), (ss, ss_se) = mean_se([x for x, _ in src]), mean_se([y for _, y in src])
        (ea, ea_se), (es, es_se) = mean_se(acc), mean_se(smp)

        def z(d, s1, s2):
            s = math.hypot(s1, s2)
            return f"{d / s:+.1f}" if s > 0 else ("0" if d == 0 else "inf")

        print(f"{name:<34}{sa:>9.2f} ± {sa_se:<4.2f}{ea:>9.2f} ± {ea_se:<4.2f}{z(ea - sa, sa_se, ea_se):>7}"
              f"{ss:>10.2f} ± {ss_se:<4.2f}{es:>10.2f} ± {es_se:<4.2f}{z(es - ss, ss_se, es_se):>7}")


if __name__ == "__main__":
    main()
