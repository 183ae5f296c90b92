"""A pool of text responses (math steps with boxed answers, or LiveCodeBench code-execution answers) and a backend
that answers `ttc run`'s requests from it, so that a live run scored by an oracle (prm, judge, exec) can be compared
with `ttc replay` of the same pool scored by `ttc score`. Used by tests/test_run_oracles.py and
tests/test_run_policies.py; the prm_dir and math_pool fixtures are in tests/conftest.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from ttc.harvest.pipeline import promoted_fields, queries_frame, query_seed
from ttc.harvest.run import RunRequest, execute, plan_run
from ttc.harvest.scoring import ScoreOptions
from ttc.harvest.types import Response, Sampling
from ttc.replay.engine import replay
from ttc.replay.policies import RunConfig
from ttc.replay.pool import atomic_write_parquet, samples_frame
from ttc.replay.rng import permutation

SEED = 5
WORDS = "we add the terms then check each case and simplify the sum carefully".split()


class TextPool:
    """n queries x size responses with text: math (a JSONL data set of problems with gold answers; responses of two
    "Step k:" steps ending in a boxed answer, the gold one, a wrong one, or none) or lcb (a LiveCodeBench
    code-execution data set; responses with an [ANSWER] literal, right, wrong or missing). `write(dir)` writes it as a
    pool that `ttc score` can score."""

    def __init__(self, tmp: Path, kind: str = "math", n: int = 10, size: int = 8, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.kind, self.n, self.size = kind, n, size
        self.ids = [f"q{i:02d}" for i in range(n)]
        p = rng.uniform(0.0, 0.8, n)
        p[rng.random(n) < 0.25] = 0.0
        self.path = tmp / f"{kind}.jsonl"
        rows, self.gold = [], []
        for i, q in enumerate(self.ids):
            if kind == "math":
                g = str(int(rng.integers(1, 50)))
                rows.append({"id": q, "problem": f"problem {q}: find the number", "answer": g})
            else:
                a, b = int(rng.integers(1, 9)), int(rng.integers(1, 9))
                g = str(a * 10 + b)
                rows.append({"question_id": q, "function_name": f"f{i}",
                             "code": f"def f{i}(x):\n    return x * 10 + {b}", "input": f"f{i}({a})", "output": g})
            self.gold.append(g)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.texts, self.tokens, self.answers = [], [], []
        for i in range(n):
            texts, toks, answers = [], [], []
            for _j in range(size):
                u = rng.random()
                a = self.gold[i] if u < p[i] else None if u > 0.85 else str(int(rng.integers(50, 53)))
                words = " ".join(rng.choice(WORDS, int(rng.integers(2, 7))))
                if kind == "math":
                    end = "no idea" if a is None else f"so the final answer is \\boxed{{{a}}}"
                    texts.append(f"Step 1: {words}.\n\nStep 2: {end}")
                else:
                    texts.append(f"{words}\n[ANSWER]\n{a}\n[/ANSWER]" if a is not None else f"{words} no answer")
                toks.append(int(rng.integers(3, 40)))
                answers.append(a)
            self.texts.append(texts)
            self.tokens.append(toks)
            self.answers.append(answers)

    def queries(self):
        from ttc.harvest.datasets import load_queries

        return load_queries(str(self.path))

    def write(self, pool: Path) -> Path:
        (pool / "samples").mkdir(parents=True)
        cols = {"query_id": [], "sample_idx": [], "text": [], "n_tokens": [], "finish_reason": []}
        for i, q in enumerate(self.ids):
            for j in range(self.size):
                cols["query_id"].append(q)
                cols["sample_idx"].append(j)
                cols["text"].append(self.texts[i][j])
                cols["n_tokens"].append(self.tokens[i][j])
                cols["finish_reason"].append("stop")
        atomic_write_parquet(samples_frame(cols), pool / "samples" / "part-00000.parquet")
        qs = self.queries()
        atomic_write_parquet(queries_frame(qs, {q.query_id: q.problem for q in qs}, promoted_fields(qs),
                                           str(self.path)), pool / "queries.parquet")
        (pool / "pool.json").write_text(json.dumps({"name": "text-pool"}))
        return pool


class PoolBackend:
    """Answers the request for sample k of a query (seed = query_seed + k) with the response at position k of
    replay's permutation of that query in `pool` (as loaded by load_pool) for SEED; counts calls."""

    tokenizer = None

    def __init__(self, tp: TextPool, pool):
        self.tp = tp
        self.perm = permutation(pool.off, pool.qkeys, SEED)
        self.off = pool.off
        self.row = {q: r for r, q in enumerate(pool.query_ids)}
        self.by_prompt = {q.problem: q.query_id for q in tp.queries()}
        self.calls = 0
        self.prompts_per_call: list[int] = []

    def info(self):
        return {"backend": "text-pool", "seed": SEED}

    def generate(self, prompts, sampling, seeds, stop=None):
        self.calls += 1
        self.prompts_per_call.append(len(prompts))
        out = []
        for p, s in zip(prompts, seeds):
            qid = self.by_prompt[p]
            i, r = self.tp.ids.index(qid), self.row[qid]
            k0 = s - query_seed(SEED, qid)
            rows = []
            for k in range(k0, k0 + sampling.n):
                if k >= self.tp.size:
                    rows.append(Response("beyond the pool", 1, "stop"))
                    continue
                j = int(self.perm[self.off[r] + k] - self.off[r])
                rows.append(Response(self.tp.texts[i][j], self.tp.tokens[i][j], "stop"))
            out.append(rows)
        return out


def request(tp: TextPool, out: Path, **kw) -> RunRequest:
    base = dict(out=out, model="pool-model", backend="transformers", dataset=str(tp.path), template="plain",
                sampling=Sampling(n=1, max_tokens=64, seed=SEED), budget=3.0, max_per_query=tp.size,
                retry_delay_s=0.0, progress=False)
    base.update(kw)
    return RunRequest(**base)


def live_run(tp, out, backend, **kw):
    plan = plan_run(request(tp, out, **kw))
    return execute(plan, backend, None, echo=lambda s: None)


def assert_live_equals_replay(o, tp: TextPool, pool, cfg: RunConfig, budget: float, select: str):
    """Query by query (responses, answered, capped, exhausted; the selection's correctness, the pool carrying
    ground truth beside the scores) and in total."""
    df, pq = replay(pool, [cfg], [budget], [SEED], select=select, per_query=True)
    tot, per_query = df.row(0, named=True), {r["query_id"]: r for r in pq.iter_rows(named=True)}
    for r in o.results:
        e = per_query[r["query_id"]]
        assert (r["responses"], r["answered"], r["capped"], r["exhausted"]) == \
            (e["n_drawn"], e["answered"], e["capped"], e["exhausted"]), (r["query_id"], cfg)
        gold = tp.gold[tp.ids.index(r["query_id"])]
        assert (r["selected"] >= 0 and r["answer"] == gold) == e["selected_correct"], (r["query_id"], cfg)
    s = o.summary
    assert s["spent"]["samples"] == tot["samples_used"] and s["spent"]["tokens"] == tot["tokens_used"]
    assert s["outcome"]["answered"] == tot["answered"]


def with_answers(pool_dir: Path, tp: TextPool):
    """The pool's parts with the final answers (as ttc run --oracle prm / judge reads them, the sc rule) and
    `correct` (answer == gold) added: the answers for the answer-based rules, the truth for replay to report the
    selection's correctness (ground truth does not enter a --score prm / judge allocation)."""
    from ttc.harvest.scoring import _with_columns, response_answer

    part = pool_dir / "samples" / "part-00000.parquet"
    df = pl.read_parquet(part)
    answers = [response_answer("gt", t, f) for t, f in zip(df["text"].to_list(), df["finish_reason"].to_list())]
    correct = [tp.answers[tp.ids.index(q)][j] == tp.gold[tp.ids.index(q)]
               for q, j in zip(df["query_id"].to_list(), df["sample_idx"].to_list())]
    atomic_write_parquet(_with_columns(df, {"answer": answers, "correct": correct}), part)


def samples_of(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "pool" / "samples").sort("query_id", "sample_idx")


def rerun_from_pool(out: Path, tp: TextPool, column: str, policy: str, budget_total: int, **kw):
    """The run's own pool through the live driver in sample order, the run's query order and limit."""
    from ttc.replay.live import PoolSource, run_live
    from ttc.replay.rng import query_keys, query_order

    df = samples_of(out)
    sizes = df.group_by("query_id", maintain_order=True).len()["len"].to_list()
    off = np.concatenate([[0], np.cumsum(sizes)])
    ids = df["query_id"].unique(maintain_order=True).to_list()
    ans = df["answer"].to_list()
    labels = {a: k for k, a in enumerate(sorted({a for a in ans if a is not None}))}
    correct = (df["correct"].cast(pl.Int8).to_numpy() if "correct" in df.columns else np.zeros(df.height, np.int8))
    score = correct.astype(float) if column == "gt" else df[column].to_numpy()
    src = PoolSource(off, correct, score, np.array([-1 if a is None else labels[a] for a in ans]),
                     df["n_tokens"].to_numpy(), np.arange(df.height))
    src.ready = lambda i: int(off[i + 1] - off[i])
    by_id = {q: i for i, q in enumerate(ids)}
    live = run_live(src, [tp.size] * len(ids), query_order(query_keys(ids), SEED)[0], policy=policy,
                    budget_total=budget_total, **kw)
    return {q: live["n_drawn"][by_id[q]] for q in ids}


def prm_options(prm_dir, **kw) -> ScoreOptions:
    return ScoreOptions(prm_model=str(prm_dir), prm_device="cpu", prm_engine="transformers", progress=False, **kw)
