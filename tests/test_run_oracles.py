"""`ttc run` with the oracles scored through harvest/scoring.py's OracleImpl classes (harvest.scoring.LiveScorer):
prm (the tiny in-process PRM of tests/support/tiny_prm.py), judge (a scripted judge backend) and exec (LiveCodeBench
code execution in the sandbox).

For each: a live run against a backend answering from a pool equals `ttc replay` of that pool scored by `ttc score`
with the same oracle (replay.engine.replay, the engine every `ttc replay` runs), query by query; the live pool carries
the columns and the oracle record `ttc score` writes; the live pool read back in sample order gives the run's
allocation again; each round's new responses are scored in one oracle call, timed in the cost accounting; a resume
reads the scores back; changed scorer settings on resume are refused; what cannot work is refused before anything is
written."""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.run import RunRequest, execute, plan_run  # noqa: E402
from ttc.harvest.scoring import ScoreOptions, score_pool  # noqa: E402
from ttc.harvest.types import Response, Sampling  # noqa: E402
from ttc.replay.engine import replay  # noqa: E402
from ttc.replay.errors import InputError  # noqa: E402
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.pool import load_pool  # noqa: E402

from support.text_run import (  # noqa: E402
    SEED,
    PoolBackend,
    TextPool,
    assert_live_equals_replay,
    live_run,
    prm_options,
    request,
    rerun_from_pool,
    samples_of,
    with_answers,
)

# ------------------------------------------------------------------------------------------------------- prm

@pytest.mark.parametrize("policy, kw, select", [
    ("ucb", dict(gamma=0.5), "weighted"),
    ("elimination", dict(gamma=0.45), "bon"),
    ("gap", dict(gamma=0.5, eps=0.05), "weighted"),
])
def test_prm_live_equals_replay_of_the_pool_scored_by_ttc_score(prm_dir, math_pool, tmp_path, policy, kw, select):
    """The scores come from the tiny PRM both times: by `ttc score --oracle prm` over the whole pool, and live, one
    batch per backend call with other responses beside them (batch size 1 here: the tiny model's padded batches
    may differ in the last bits, which a threshold could notice). The allocation is replay's exactly."""
    tp = math_pool
    opts = prm_options(prm_dir, prm_batch_size=1)
    pool_dir = tp.write(tmp_path / "scored")
    score_pool(pool_dir, ["prm"], opts)
    with_answers(pool_dir, tp)
    pool = load_pool(pool_dir, score="prm_min")
    backend = PoolBackend(tp, pool)
    o = live_run(tp, tmp_path / "out", backend, policy=policy, oracle="prm", scoring=opts, select=select, budget=3.0,
                 **kw)
    cfg = RunConfig(policy, **kw)
    assert_live_equals_replay(o, tp, pool, cfg, 3.0, select)
    # the scores the policy saw are the ones ttc score wrote for those responses
    live = samples_of(tmp_path / "out")
    scored = pl.read_parquet(pool_dir / "samples").select("query_id", "text", "score_prm_min").unique()
    joined = live.join(scored, on=["query_id", "text"], how="left", suffix="_ttc_score")
    assert joined["score_prm_min_ttc_score"].null_count() == 0
    assert joined["score_prm_min"].to_list() == joined["score_prm_min_ttc_score"].to_list()
    # the run's own pool, read back in sample order, gives the allocation again
    again = rerun_from_pool(tmp_path / "out", tp, "score_prm_min", policy, 3 * tp.n, **kw)
    assert again == {r["query_id"]: r["responses"] for r in o.results if r["generated"]}


def test_prm_pool_carries_what_ttc_score_writes_and_one_oracle_call_per_round(prm_dir, math_pool, tmp_path):
    tp = math_pool
    opts = prm_options(prm_dir)
    pool_dir = tp.write(tmp_path / "source")
    score_pool(pool_dir, ["prm"], opts)
    backend = PoolBackend(tp, load_pool(pool_dir, score="prm_min"))
    calls = []
    from ttc.harvest import scoring

    real = scoring.PRMSession.columns

    def counting(self, queries, texts, finish_reasons, where="this batch"):
        calls.append(len(texts))
        return real(self, queries, texts, finish_reasons, where)

    scoring.PRMSession.columns = counting
    try:
        o = live_run(tp, tmp_path / "out", backend, policy="elimination", oracle="prm", scoring=opts, gamma=0.5,
                     score="prm_last", budget=3.0)
    finally:
        scoring.PRMSession.columns = real
    assert len(calls) == backend.calls == o.summary["this_process"]["backend_calls"]  # one oracle call per round
    assert calls == backend.prompts_per_call and sum(calls) == o.summary["cost"]["responses_generated"]
    assert o.summary["this_process"]["score_s"] > 0 and o.summary["cost"]["score_s"] > 0
    assert o.summary["this_process"]["scorer_load_s"] > 0
    assert o.summary["outcome"]["accuracy"] is None and all(r["correct"] is None for r in o.results)
    # columns and types as ttc score writes them; the oracle record's configuration equal to ttc score's
    live = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    ref = pl.read_parquet(pool_dir / "samples")
    for c in ("score_prm_min", "score_prm_last", "score_prm_prod", "prm_steps"):
        assert live.schema[c] == ref.schema[c]
    assert "answer" in live.columns and "correct" not in live.columns
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    ref_meta = json.loads((pool_dir / "pool.json").read_text())
    from ttc.harvest.pipeline import RUNTIME_KEYS

    def cfg(rec):
        return {k: v for k, v in rec.items() if k not in RUNTIME_KEYS}

    assert cfg(meta["oracles"]["prm"]) == cfg(ref_meta["oracles"]["prm"])
    assert set(meta["oracles"]["prm"]) == set(ref_meta["oracles"]["prm"])
    assert meta["oracles"]["prm"]["runtime"]["responses"] == o.summary["cost"]["responses_generated"]
    assert meta["allocation"]["score"] == "score_prm_last" and meta["allocation"]["scorer"] == cfg(
        ref_meta["oracles"]["prm"])
    # ttc score --oracle prm over the live pool (a copy) writes the values the run wrote
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "out" / "pool", copy)
    score_pool(copy, ["prm"], opts)
    again = pl.read_parquet(copy / "samples").sort("query_id", "sample_idx")
    mine = live.sort("query_id", "sample_idx")
    np.testing.assert_allclose(again["score_prm_last"].to_numpy(), mine["score_prm_last"].to_numpy(), rtol=1e-5)
    # replay reads the live pool with the run's score column
    assert load_pool(tmp_path / "out" / "pool", score="prm_last").score_name == "score_prm_last"


def test_prm_resume_reads_the_scores_back_and_refuses_other_scorer_settings(prm_dir, math_pool, tmp_path):
    """Killed after its second backend call: the rerun reads the scores back from the parts (no rescoring of what
    was written), scores only the new responses, and ends as an uninterrupted run; other scorer settings or another
    --score are a changed configuration."""
    tp = math_pool
    opts = prm_options(prm_dir)
    pool_dir = tp.write(tmp_path / "source")
    kw = dict(policy="ucb", oracle="prm", scoring=opts, gamma=0.5, budget=3.0)
    whole = live_run(tp, tmp_path / "whole", PoolBackend(tp, _plain_pool(pool_dir)), **kw)

    class Killed(PoolBackend):
        def generate(self, *a, **k):
            if self.calls == 2:
                raise KeyboardInterrupt
            return super().generate(*a, **k)

    with pytest.raises(KeyboardInterrupt):
        live_run(tp, tmp_path / "out", Killed(tp, _plain_pool(pool_dir)), **kw)
    for other, what in ((dict(scoring=prm_options(prm_dir, prm_step_mode="blank")), "scorer.step_mode"),
                        (dict(score="prm_prod"), "allocation.score")):
        with pytest.raises(InputError, match=f"another configuration.*{what}"):
            plan_run(request(tp, tmp_path / "out", **{**kw, **other}))
    rest = PoolBackend(tp, _plain_pool(pool_dir))
    o = live_run(tp, tmp_path / "out", rest, **kw)
    assert o.resumed and rest.calls == whole.summary["cost"]["backend_calls"] - 2
    keep = ("query_id", "status", "responses", "generated", "selected", "answer", "text")
    assert [{k: r[k] for k in keep} for r in o.results] == [{k: r[k] for k in keep} for r in whole.results]
    a = samples_of(tmp_path / "whole")
    b = samples_of(tmp_path / "out")
    assert a.equals(b)


def _plain_pool(pool_dir: Path):
    """A pool loaded only for its layout (offsets and query keys: the backend's permutation)."""
    from ttc.replay.pool import Pool

    df = pl.read_parquet(pool_dir / "samples").sort("query_id", "sample_idx")
    sizes = df.group_by("query_id", maintain_order=True).len()["len"].to_numpy()
    off = np.concatenate([[0], np.cumsum(sizes)])
    return Pool.from_arrays(off, score=np.zeros(df.height), query_ids=df["query_id"].unique(
        maintain_order=True).to_list())


# ----------------------------------------------------------------------------------------------------- judge

class MatchingJudge:
    """A judge backend that says yes when the solution's boxed answer is the reference one (one verdict per
    prompt, seeded from the prompt, as harvest.judge asks); counts its calls."""

    tokenizer = None

    def __init__(self):
        self.calls = 0

    def generate(self, prompts, sampling, seeds):
        self.calls += 1
        out = []
        for p in prompts:
            gold = p.split("Reference answer:\n", 1)[1].split("\n", 1)[0].strip()
            solution = p.split("Solution to check:\n", 1)[1]
            m = re.findall(r"\\boxed\{([^}]*)\}", solution)
            yes = bool(m) and m[-1].strip() == gold
            out.append([Response(f"Checked.\nVerdict: {'yes' if yes else 'no'}", 4, "stop")] * sampling.n)
        return out

    def info(self):
        return {"backend": "matching-judge"}


def test_judge_live_equals_replay_of_the_pool_scored_by_ttc_score(math_pool, tmp_path):
    tp = math_pool
    judge = MatchingJudge()
    opts = ScoreOptions(judge_model="matching-judge", judge_factory=lambda o: judge, progress=False)
    pool_dir = tp.write(tmp_path / "scored")
    score_pool(pool_dir, ["judge"], opts)
    with_answers(pool_dir, tp)
    pool = load_pool(pool_dir, score="judge")
    judge.calls = 0
    backend = PoolBackend(tp, pool)
    o = live_run(tp, tmp_path / "out", backend, policy="elimination", oracle="judge", scoring=opts, budget=3.0)
    assert_live_equals_replay(o, tp, pool, RunConfig("elimination"), 3.0, "bon")
    assert judge.calls == backend.calls  # one judge call per round
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    ref = json.loads((pool_dir / "pool.json").read_text())
    assert {k: v for k, v in meta["oracles"]["judge"].items() if k not in ("scored", "seconds", "versions",
                                                                           "runtime")} == \
        {k: v for k, v in ref["oracles"]["judge"].items() if k not in ("scored", "seconds", "versions", "runtime")}
    assert load_pool(tmp_path / "out" / "pool", score="judge").score_name == "score_judge"
    again = rerun_from_pool(tmp_path / "out", tp, "score_judge", "elimination", 3 * tp.n)
    assert again == {r["query_id"]: r["responses"] for r in o.results if r["generated"]}


def test_judge_needs_gold_on_every_batch_line(tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"messages": [{"role": "user", "content": "hi"}]}}) + "\n")
    opts = ScoreOptions(judge_model="j", judge_factory=lambda o: MatchingJudge(), progress=False)
    req = RunRequest(out=tmp_path / "out", model="m", backend="transformers", batch=batch, oracle="judge",
                     scoring=opts, sampling=Sampling(n=1, max_tokens=8), budget=2.0, progress=False)
    with pytest.raises(InputError, match="--oracle judge needs a gold answer"):
        plan_run(req)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------------ exec

def test_exec_live_equals_replay_of_the_pool_scored_by_ttc_score(tmp_path):
    tp = TextPool(tmp_path, "lcb", n=8, size=6, seed=3)
    opts = ScoreOptions(workers=2, progress=False)
    pool_dir = tp.write(tmp_path / "scored")
    score_pool(pool_dir, ["exec"], opts)
    pool = load_pool(pool_dir, score="gt")
    backend = PoolBackend(tp, pool)
    o = live_run(tp, tmp_path / "out", backend, policy="ucb", oracle="exec", scoring=opts, budget=3.0)
    assert_live_equals_replay(o, tp, pool, RunConfig("ucb"), 3.0, "bon")
    df, _ = replay(pool, [RunConfig("ucb")], [3.0], [SEED], select="bon")
    assert o.summary["outcome"]["coverage"] == pytest.approx(df["coverage"][0])
    assert o.summary["outcome"]["accuracy"] == pytest.approx(df["accuracy"][0])
    assert all(r["covered"] is not None for r in o.results)
    live = samples_of(tmp_path / "out")
    ref = pl.read_parquet(pool_dir / "samples").select("query_id", "text", "answer", "correct").unique()
    joined = live.join(ref, on=["query_id", "text"], suffix="_ttc_score")
    assert joined.height == live.height
    assert joined["correct"].to_list() == joined["correct_ttc_score"].to_list()
    assert joined["answer"].to_list() == joined["answer_ttc_score"].to_list()
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["oracles"]["exec"]["sandbox"] == json.loads((pool_dir / "pool.json").read_text())[
        "oracles"]["exec"]["sandbox"]
    assert load_pool(tmp_path / "out" / "pool", score="gt").has_gt


def test_exec_refusals_before_anything_is_written(tmp_path, math_pool):
    lcb = TextPool(tmp_path, "lcb", n=3, size=4)
    broken = tmp_path / "no-input.jsonl"
    broken.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "input"}) + "\n"
                              for line in lcb.path.read_text().splitlines()))
    cases = [
        (dict(dataset=str(broken), task="lcb-exec"), "missing column 'input'"),
        (dict(dataset=str(broken)), "missing column 'input' for lcb-exec"),
        (dict(dataset=str(math_pool.path)), "--oracle exec runs LiveCodeBench.*missing column 'question_id'"),
    ]
    for kw, message in cases:
        with pytest.raises(InputError, match=message):
            plan_run(request(lcb, tmp_path / "out", oracle="exec", **kw))
        assert not (tmp_path / "out").exists()


def test_a_prm_that_cannot_load_is_one_error_and_nothing_written(math_pool, tmp_path):
    fake = tmp_path / "not-a-prm"
    fake.mkdir()
    (fake / "config.json").write_text("{}")
    opts = ScoreOptions(prm_model=str(fake), prm_device="cpu", prm_engine="transformers", progress=False)
    plan = plan_run(request(math_pool, tmp_path / "out", oracle="prm", scoring=opts))
    with pytest.raises(InputError, match="cannot be loaded"):
        execute(plan, None, None, echo=lambda s: None)
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="not a model directory"):
        plan_run(request(math_pool, tmp_path / "out", oracle="prm", scoring=ScoreOptions(
            prm_model=str(tmp_path / "missing"))))
    assert not (tmp_path / "out").exists()


def test_prm_in_a_stream(prm_dir, math_pool, tmp_path):
    """--stream with --oracle prm: each query's responses scored as they come (one PRM call per backend call), the
    pool carrying the PRM's columns and its record, each result equal to the streaming policy run alone on the
    run's own pool."""
    from ttc.harvest.run import execute_stream

    tp = math_pool
    opts = prm_options(prm_dir)
    lines = [json.dumps({"custom_id": q, "method": "POST", "url": "/v1/chat/completions",
                         "body": {"messages": [{"role": "user", "content": f"problem {q}: find the number"}]}})
             for q in tp.ids]
    batch = tmp_path / "requests.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    plan = plan_run(RunRequest(out=tmp_path / "out", model="pool-model", backend="transformers", batch=batch,
                               stream=True, policy="streaming", oracle="prm", scoring=opts, gamma=0.5,
                               max_samples=5, max_per_query=tp.size, budget=3.0, progress=False, retry_delay_s=0.0,
                               sampling=Sampling(n=1, max_tokens=64, seed=SEED)))
    backend = PoolBackend(tp, _plain_pool(tp.write(tmp_path / "source")))
    o = execute_stream(plan, backend, None, lines=list(enumerate(lines, 1)), echo=lambda s: None)
    assert [r["query_id"] for r in o.results] == tp.ids and o.summary["cost"]["score_s"] > 0
    samples = samples_of(tmp_path / "out")
    assert {"score_prm_min", "prm_steps", "answer"} <= set(samples.columns)
    assert samples.height == sum(r["generated"] for r in o.results)
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["oracles"]["prm"]["runtime"]["responses"] == samples.height
    from ttc.replay.live import PoolSource, run_live

    spent = 0
    for t, r in enumerate(o.results):  # the streaming policy alone on the query's responses, with its bank
        q = samples.filter(pl.col("query_id") == r["query_id"])
        src = PoolSource(np.array([0, q.height]), np.zeros(q.height, np.int8), q["score_prm_min"].to_numpy(),
                         np.full(q.height, -1), q["n_tokens"].to_numpy(), np.arange(q.height))
        src.ready = lambda i, h=q.height: h
        bank = round(3.0 * (t + 1)) - spent
        live = run_live(src, [q.height], [0], policy="streaming", budget_total=bank, gamma=0.5, max_samples=5)
        assert live["n_drawn"][0] == r["responses"], r["query_id"]
        spent += r["responses"]


# ------------------------------------------------------------------------------------ the command line, end to end

def test_command_line_prm_end_to_end_with_the_tiny_models(prm_dir, tmp_path):
    """`ttc run --oracle prm` with the tiny transformers model generating and the tiny PRM scoring: the run's pool
    loads in `ttc replay --score prm_min`, `ttc info` reads it, and a rerun resumes without generating."""
    from typer.testing import CliRunner

    from ttc.cli import app

    from support.tiny_model import make_tiny_model

    lm = make_tiny_model(tmp_path / "tiny-lm", chat=True)
    math = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    out = tmp_path / "run"
    args = ["run", "--dataset", str(math), "--model", str(lm), "--backend", "transformers", "--max-tokens", "12",
            "--seed", "3", "--max-per-query", "8", "--no-progress", "--out", str(out), "--policy", "ucb",
            "--budget", "3", "--oracle", "prm", "--prm-model", str(prm_dir), "--prm-device", "cpu",
            "--prm-engine", "transformers", "--gamma", "0.6", "--score", "prm_last"]
    runner = CliRunner()
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "with --oracle prm" in r.output and "scoring" in r.output
    summary = json.loads((out / "run.json").read_text())
    assert summary["cost"]["score_s"] > 0 and summary["this_process"]["scorer_load_s"] > 0
    meta = json.loads((out / "pool" / "pool.json").read_text())
    assert meta["oracles"]["prm"]["model"] == str(prm_dir) and meta["allocation"]["score"] == "score_prm_last"
    r = runner.invoke(app, ["replay", str(out / "pool"), "--score", "prm_last", "--budgets", "2", "--seeds", "1",
                            "--policy", "uniform", "--out", str(tmp_path / "replayed")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "generated nothing" in r.output, r.output
