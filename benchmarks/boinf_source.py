"""Best-of-Infinity's adaptive sampling (Komiyama et al., arXiv 2509.21091) against its own released script, on one
of its files.

    python benchmarks/boinf_source.py [--file ../shared/data/pools/boinf-80/analysis_aime2025_Qwen3-4B.jsonl]
        [--trials 100] [--source /tmp/boinf-src] [--source-output saved.txt]

The source (jkomiyama/BoInf-code-publish at commit fbcb097) replays a file with `boinf/test_main.py FILE
--analyze-bayes`: per trial and question, answers drawn with replacement from its all_answers (empty answers dropped
at load), after each draw the Bayes factor over the counts plus an unknown bucket of 0.3 (its Dirichlet estimated
from 1,000 draws), stop at B or at 100 draws, the answer Counter.most_common gives (ties to the answer seen first),
correct when it equals the gold string; it prints, per B in 2 .. 1e15, the mean accuracy and draws per question over
trials with 2 standard deviations / sqrt(trials). This script runs that script as it is (a checkout of the commit at
--source: `git -C <mirror> archive fbcb097 boinf | tar -x -C DIR`, never committed here) and the engine on the
same file:

- engine, source protocol: per trial, each question's 100 draws resampled with replacement from its answers (the
  engine draws without replacement from a pool, so a pool of i.i.d. resamples is the source's sampling), elimination
  with --eliminate boinf --bf B --max-samples 100, majority with ties to the answer drawn first (--select cisc
  --cisc-temp inf);
- engine, its own conventions: `ttc replay`'s grid on the file as a pool (its 80 answers without replacement, so at
  most 80 draws; --select sc, ties to the answer that reached the count first).

It prints both beside the source with standard errors, and z = difference / combined SE for the first row (within 2:
agreement). Its output, with the commands, is recorded in docs/semantics.md (boinf).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "fbcb097"
BS = [2, 5, 7, 10, 30, 100, 300, 1000, 3000, 10000, 10**7, 10**10, 10**15]  # the source's sweep (--b-bfs default)
CAP = 100  # the source's max_samples for the sweep (--n-samples default)


def load(path: Path):
    """(gold, answers, tokens) per question, in the source's problem order, as its loader gives them: empty answers
    dropped, the gold answer stripped (its normalize_answer_format; the all_answers strings are kept as they are)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: r["problem_num"])
    out = []
    for r in rows:
        pairs = [(str(a), int(t)) for a, t in r["all_answers"] if a is not None and str(a).strip() != ""]
        gold = re.sub(r"\\dfrac", r"\\frac", re.sub(r"\^\\circ", "", re.sub(r"\^\{\\circ\}", "", r["gold_answer"])))
        out.append((gold.strip(), [a for a, _ in pairs], [t for _, t in pairs]))
    return out


def arrays(questions, draws):
    """The flat pool arrays (off, correct, ans, tok) of the questions with draws[i] the response indices of question
    i (answer ids: dense, in order of first appearance)."""
    off, correct, ans, tok = [0], [], [], []
    for (gold, answers, tokens), idx in zip(questions, draws, strict=True):
        ids = {}
        for k in idx:
            a = answers[k]
            ans.append(ids.setdefault(a, len(ids)))
            correct.append(int(a == gold))
            tok.append(tokens[k])
        off.append(len(ans))
    return (np.array(off, np.int64), np.array(correct, np.int8), np.array(ans, np.int64), np.array(tok, np.int64))


def engine_source_protocol(questions, trials: int, seed: int = 0):
    """Per B: per-trial (accuracy, mean draws per question) on fresh with-replacement resamples, one pool holding
    every trial's questions (a query per (trial, question)), run once per B."""
    from ttc.replay.engine import run_once
    from ttc.replay.policies import RunConfig

    rng = np.random.default_rng(seed)
    n = len(questions)
    draws = [rng.integers(0, len(q[1]), CAP) for _ in range(trials) for q in questions]
    off, correct, ans, tok = arrays(questions * trials, draws)
    m = len(off) - 1
    out = {}
    for B in BS:
        cfg = RunConfig("elimination", eliminate="boinf", bf=float(B), max_samples=CAP)
        got = run_once(off, correct, correct.astype(float), ans, tok, np.arange(len(ans)), np.arange(m), cfg,
                       CAP * m, votes=(math.inf, 10.0))
        acc = np.asarray(got["sel_cisc"], float).reshape(trials, n).mean(axis=1)
        drawn = np.asarray(got["n_drawn"], float).reshape(trials, n).mean(axis=1)
        out[B] = (acc, drawn)
    return out


def engine_own(questions, seeds: int):
    """Per B: per-seed (accuracy, mean draws) of `ttc replay`'s grid on the file as a pool (written with write_pool,
    as `ttc import boinf` would: sample_idx in source order, correct = the answer equals the gold string)."""
    import polars as pl

    from ttc.replay.engine import replay
    from ttc.replay.policies import RunConfig
    from ttc.replay.pool import load_pool, samples_frame, write_pool

    rows = {"query_id": [], "sample_idx": [], "answer": [], "correct": [], "n_tokens": []}
    for i, (gold, answers, tokens) in enumerate(questions):
        for k, (a, t) in enumerate(zip(answers, tokens, strict=True)):
            rows["query_id"].append(str(i))
            rows["sample_idx"].append(k)
            rows["answer"].append(a)
            rows["correct"].append(a == gold)
            rows["n_tokens"].append(t)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_pool(Path(tmp) / "pool", samples_frame(rows), {"source": "boinf", "commit": COMMIT})
        pool = load_pool(path)
        configs = [RunConfig("elimination", eliminate="boinf", bf=float(B), max_samples=CAP) for B in BS]
        df, _ = replay(pool, configs, [CAP], range(seeds), select="sc")
    out = {}
    for B, c in zip(BS, configs, strict=True):
        part = df.filter(pl.col("config") == c.label())
        out[B] = (part["accuracy"].to_numpy(), part["samples_used"].to_numpy() / pool.n_queries)
    return out


def run_source(source: Path, file: Path, trials: int) -> str:
    """The source's script on the file, as its README runs it (plots to a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(source / "boinf" / "test_main.py"), str(file.resolve()), "--analyze-bayes",
               "--no-analyze-fixed", "--n-trials", str(trials)]
        env = {"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(source / "boinf")}
        return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=True).stdout


def parse_source(text: str) -> dict:
    """B -> (accuracy, its SE, mean draws, its SE) from the source's summary (its ± is 2 SD / sqrt(trials))."""
    out = {}
    for m in re.finditer(r"Adapt\s+B=(\d+)\s+([\d.]+) ±\s+([\d.]+)\s+([\d.]+) ±\s+([\d.]+)", text):
        B, acc, ci, n, nci = m.groups()
        out[int(B)] = (float(acc), float(ci) / 2, float(n), float(nci) / 2)
    return out


def mean_se(x):
    """Mean and its SE with the population SD, as the source's np.std (ddof 0)."""
    x = np.asarray(x, float)
    return float(x.mean()), float(x.std() / math.sqrt(len(x)))


def z(diff: float, se1: float, se2: float, half_unit: float) -> float:
    """The difference in combined standard errors, less the source's print rounding (its accuracy to 4 decimals, its
    draws to 1: half a unit either way is no difference); 0 where none is left, inf where there is a difference and
    no noise to measure it by."""
    d = max(0.0, abs(diff) - half_unit)
    se = math.hypot(se1, se2)
    return 0.0 if d == 0 else math.copysign(d / se if se > 0 else math.inf, diff)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path,
                    default=ROOT.parent / "shared/data/pools/boinf-80/analysis_aime2025_Qwen3-4B.jsonl")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--source", type=Path, default=Path("/tmp/boinf-src"),
                    help=f"a checkout of jkomiyama/BoInf-code-publish at {COMMIT} (its boinf/ folder)")
    ap.add_argument("--source-output", type=Path, help="the source's saved output instead of running it")
    args = ap.parse_args()
    questions = load(args.file)
    text = args.source_output.read_text() if args.source_output else run_source(args.source, args.file, args.trials)
    src = parse_source(text)
    trials = args.trials
    ours = engine_source_protocol(questions, trials)
    own = engine_own(questions, trials)
    print(f"{args.file.name}: {len(questions)} questions, {trials} trials / seeds; source {COMMIT}; mean ± SE")
    print(f"{'B':>8} | {'source acc':>15} {'draws':>13} | {'engine (source protocol)':>29} {'z acc':>6} "
          f"{'z draws':>7} | {'engine own (ttc replay)':>27}")
    worst, beyond = 0.0, 0
    for B in BS:
        if B not in src:
            continue
        sa, sa_se, sn, sn_se = src[B]
        (ea, ea_se), (en, en_se) = mean_se(ours[B][0]), mean_se(ours[B][1])
        (oa, oa_se), (on, on_se) = mean_se(own[B][0]), mean_se(own[B][1])
        za, zn = z(ea - sa, ea_se, sa_se, 5e-5), z(en - sn, en_se, sn_se, 0.05)
        worst = max(worst, abs(za), abs(zn))
        beyond += (abs(za) > 2) + (abs(zn) > 2)
        print(f"{B:>8.0e} | {sa:.4f} ± {sa_se:.4f} {sn:6.2f} ± {sn_se:4.2f} | {ea:.4f} ± {ea_se:.4f} {en:6.2f} ± "
              f"{en_se:4.2f} {za:6.2f} {zn:7.2f} | {oa:.4f} ± {oa_se:.4f} {on:6.2f} ± {on_se:4.2f}")
    n_z = 2 * sum(1 for B in BS if B in src)
    print(f"largest |z| (engine, source protocol, against the source): {worst:.2f}; beyond 2: {beyond} of {n_z} "
          f"(noise alone: about {0.0455 * n_z:.1f} expected)")


if __name__ == "__main__":
    main()
