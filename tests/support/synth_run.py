"""A synthetic pool of numbered answers and a backend that answers `ttc run`'s requests from it, so that a live run
(harvest/run.py: plan_run, execute) can be compared with `ttc replay`'s engine on the same pool and seed, query by
query. Used by tests/test_run*.py and the refusal tests that need a small valid run."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ttc.harvest.confidence import ConfidenceSpec
from ttc.harvest.pipeline import query_seed
from ttc.harvest.run import RunRequest, execute, plan_run
from ttc.harvest.types import Response, Sampling
from ttc.replay.engine import replay
from ttc.replay.policies import RunConfig
from ttc.replay.pool import Pool
from ttc.replay.rng import permutation

SEED = 11


class SynthPool:
    """n queries x size responses: answers are numbers (the gold one correct, None = no answer), token counts
    random; `path` a JSONL data set whose problems name the queries."""

    def __init__(self, tmp: Path, n: int = 12, size: int = 10, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n, self.size = n, size
        self.ids = [f"q{i:02d}" for i in range(n)]
        self.gold = [str(int(g)) for g in rng.integers(1, 50, n)]
        p = rng.uniform(0.0, 0.7, n)
        p[rng.random(n) < 0.25] = 0.0  # some unsolvable
        self.answers, self.tokens = [], []
        for i in range(n):
            row = []
            for _ in range(size):
                u = rng.random()
                row.append(self.gold[i] if u < p[i] else None if u > 0.9 else str(int(rng.integers(50, 53))))
            self.answers.append(row)
            self.tokens.append([int(t) for t in rng.integers(1, 30, size)])
        self.path = tmp / "queries.jsonl"
        self.path.write_text("".join(json.dumps({"id": q, "problem": f"problem {q}", "answer": g}) + "\n"
                                     for q, g in zip(self.ids, self.gold)))

    def pool(self, gt: bool = True) -> Pool:
        """The pool as replay sees it (answer ids dense per query, as load_pool ranks them)."""
        off = np.arange(0, self.n * self.size + 1, self.size)
        ans = []
        for row in self.answers:
            labels = sorted({a for a in row if a is not None})
            ans += [-1 if a is None else labels.index(a) for a in row]
        correct = [a == self.gold[i] for i, row in enumerate(self.answers) for a in row]
        tok = [t for row in self.tokens for t in row]
        if gt:
            return Pool.from_arrays(off, correct=correct, ans=ans, tok=tok, query_ids=self.ids)
        return Pool.from_arrays(off, score=np.zeros(len(tok)), ans=ans, tok=tok, query_ids=self.ids)


class PoolBackend:
    """A backend answering from a SynthPool: the request for sample k of a query (seed = query_seed + k) gets the
    pool's response at position k of replay's permutation of that query for SEED. `fail` maps a query id to the
    number of calls holding it that fail (None: every one); `fail_calls` fails whole calls (the first ones)."""

    tokenizer = None

    def __init__(self, sp: SynthPool, seed: int = SEED, fail: dict | None = None, fail_calls: int = 0):
        self.sp, self.seed = sp, seed
        pool = sp.pool()
        self.perm = permutation(pool.off, pool.qkeys, seed)
        self.by_prompt = {f"problem {q}": i for i, q in enumerate(sp.ids)}
        self.fail, self.fail_calls = dict(fail or {}), fail_calls
        self.calls = self.attempts = 0
        self.prompts_per_call: list[int] = []

    def info(self):
        return {"backend": "pool", "seed": self.seed}

    def generate(self, prompts, sampling, seeds, stop=None):
        self.attempts += 1
        if self.fail_calls > 0:
            self.fail_calls -= 1
            raise RuntimeError("injected: the whole call fails")
        for p in prompts:
            qid = self.sp.ids[self.by_prompt[p]]
            left = self.fail.get(qid, 0)
            if left is None or left > 0:
                if left is not None:
                    self.fail[qid] = left - 1
                raise RuntimeError(f"injected: {qid} fails")
        self.calls += 1
        self.prompts_per_call.append(len(prompts))
        out = []
        for p, s in zip(prompts, seeds):
            i = self.by_prompt[p]
            k0 = s - query_seed(self.seed, self.sp.ids[i])
            rows = []
            for k in range(k0, k0 + sampling.n):
                if k >= self.sp.size:  # beyond the pool: never used (the run's --max-per-query is the pool size)
                    rows.append(Response("beyond the pool", 1, "stop"))
                    continue
                j = int(self.perm[i * self.sp.size + k]) - i * self.sp.size
                a = self.sp.answers[i][j]
                rows.append(Response("no answer here" if a is None else f"so the final answer is \\boxed{{{a}}}",
                                     self.sp.tokens[i][j], "stop"))
            out.append(rows)
        return out


def request(sp: SynthPool, out: Path, **kw) -> RunRequest:
    base = dict(out=out, model="pool-model", backend="transformers", dataset=str(sp.path), template="plain",
                sampling=Sampling(n=1, max_tokens=64, seed=SEED), budget=3.0, max_per_query=sp.size,
                retry_delay_s=0.0, progress=False)
    base.update(kw)
    return RunRequest(**base)


def run(sp, out, backend=None, **kw):
    plan = plan_run(request(sp, out, **kw))
    return execute(plan, backend or PoolBackend(sp), None, echo=lambda s: None)


def replayed(sp: SynthPool, cfg: RunConfig, budget: float, select: str, gt: bool = True):
    df, pq = replay(sp.pool(gt), [cfg], [budget], [SEED], select=select, per_query=True)
    return df.row(0, named=True), {r["query_id"]: r for r in pq.iter_rows(named=True)}


def assert_equal(o, sp, cfg, budget, select="bon", gt=True):
    tot, per_query = replayed(sp, cfg, budget, select, gt)
    by_id = {r["query_id"]: r for r in o.results}
    for qid in sp.ids:
        r, e = by_id[qid], per_query[qid]
        assert r["responses"] == e["n_drawn"], (qid, cfg)
        assert r["answered"] == e["answered"] and r["capped"] == e["capped"], (qid, cfg)
        assert r["exhausted"] == e["exhausted"], (qid, cfg)
        if gt:
            assert r["covered"] == e["covered"] and r["correct"] == e["selected_correct"], (qid, cfg)
    s = o.summary
    assert s["spent"]["samples"] == tot["samples_used"] and s["spent"]["tokens"] == tot["tokens_used"]
    assert s["outcome"]["answered"] == tot["answered"] and s["budget_total"] == tot["budget_total"]
    if gt:
        assert s["outcome"]["accuracy"] == pytest.approx(tot["accuracy"])
        assert s["outcome"]["coverage"] == pytest.approx(tot["coverage"])


def _dense(ans, off):
    out = np.array(ans, copy=True)
    for i in range(len(off) - 1):
        seg = out[off[i]:off[i + 1]]
        labels = sorted({a for a in seg if a >= 0})
        out[off[i]:off[i + 1]] = [-1 if a < 0 else labels.index(a) for a in seg]
    return out


HTTP_SEED = 5  # the seed of the runs against tests/fixtures' OpenAI-compatible server (tests/test_run_http.py)


def run_args(sp, url, out, *extra):
    """`ttc run`'s command line for sp's data set against an OpenAI-compatible server at url."""
    return ["run", "--dataset", str(sp.path), "--template", "plain", "--backend", "openai", "--base-url", url,
            "--model", "pool-model", "--api-key-env", "TTC_RUN_TEST_KEY", "--max-tokens", "64",
            "--seed", str(HTTP_SEED), "--max-per-query", str(sp.size), "--retry-delay", "0", "--no-progress",
            "--out", str(out), *extra]


# --- with confidence signals (tests/test_run_confidence.py, the side-eb runs of tests/test_run_policies.py)

SPEC = ConfidenceSpec(("mean-logprob",))


class SignalPool(SynthPool):
    """A SynthPool whose responses carry a confidence in (0, 1]: higher on correct responses on average, with ties."""

    def __init__(self, tmp):
        super().__init__(tmp, n=12, size=10, seed=3)
        rng = np.random.default_rng(7)
        self.conf = [[float(np.round(min(1.0, max(0.05, rng.uniform(0.1, 0.7) + (0.3 if a == g else 0.0))), 2))
                      for a in row] for row, g in zip(self.answers, self.gold)]

    def conf_pool(self) -> Pool:
        """The pool as replay sees it with the confidence as the score (no ground truth: --oracle confidence)."""
        base = self.pool(gt=False)
        return Pool.from_arrays(base.off, score=[c for row in self.conf for c in row], ans=base.ans, tok=base.tok,
                                query_ids=self.ids)


class SignalBackend(PoolBackend):
    """PoolBackend whose responses carry mean-logprob signals (raw = log of the pool's confidence); `asked` records
    the ConfidenceSpec each call asked for."""

    def __init__(self, sp: SignalPool):
        super().__init__(sp)
        self.asked = []

    def generate(self, prompts, sampling, seeds, stop=None, confidence=None):
        self.asked.append(confidence)
        out = super().generate(prompts, sampling, seeds, stop)
        if confidence is None:
            return out
        signed = []
        for p, s, rows in zip(prompts, seeds, out):
            i = self.by_prompt[p]
            k0 = s - query_seed(self.seed, self.sp.ids[i])
            signed.append([])
            for m, r in enumerate(rows):
                k = k0 + m
                j = int(self.perm[i * self.sp.size + k]) - i * self.sp.size if k < self.sp.size else 0
                c = self.sp.conf[i][j]
                signed[-1].append(replace(r, signals={"score_mean_logprob": c, "mean_logprob": math.log(c)}))
        return signed
