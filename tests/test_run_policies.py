"""`ttc run` with the newer policies' options: optscale (--warmup, --percentile), marginal-gain (--prior COLUMN,
--prior-strength), dsc (--judge) and side-eb (--side COLUMN, --bins, --refresh). For each, a live run against a
backend answering from a pool equals `ttc replay` of that pool on the same seed (replay.engine.replay, and through
the command line `ttc replay POOL` with the same option strings), query by query and in total; marginal-gain's
predictions come from the run's query input and side-eb's side signal is a score column the run records (here a
--confidence signal), and the run's own pool carries both, so that its replay with --prior / --side reproduces the
run; bad input is one error, nothing written."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.run import RunError, RunRequest, execute, plan_run  # noqa: E402
from ttc.replay.engine import replay, run_once  # noqa: E402
from ttc.replay.errors import InputError  # noqa: E402
from ttc.replay.live import PoolSource, run_live  # noqa: E402
from ttc.replay.policies import REGISTRY, RunConfig  # noqa: E402
from ttc.replay.pool import load_pool  # noqa: E402
from ttc.replay.rng import query_keys, query_order  # noqa: E402

from support.equivalence import config_kwargs, configs, pools  # noqa: E402
from support.synth_run import SEED, SPEC, SignalBackend, SynthPool, assert_equal, request  # noqa: E402  # noqa: E402
from support.synth_run import run as run_pool  # noqa: E402

SIDE = "score_mean_logprob"  # the column --confidence mean-logprob records: the side signal of these tests


class PriorPool(SynthPool):
    """A SynthPool whose responses carry a confidence (SignalBackend returns it as the mean-logprob signal) that says
    something of the query: a failed draw's is higher on a query that other draws solve (the side signal side-eb
    learns from), a correct draw's higher still; and whose data set also holds `pred`, each query's predicted success
    probability: its pool's success rate, rounded, 0 and 1 written as JSON integers (a column of mixed ints and
    floats, which the run's queries.parquet must still hold as one Float64 column)."""

    def __init__(self, tmp):
        super().__init__(tmp, n=24, size=10, seed=3)
        rng = np.random.default_rng(7)
        rates = [sum(a == g for a in row) / len(row) for row, g in zip(self.answers, self.gold)]
        self.conf = [[float(np.round(min(1.0, max(0.05, 0.15 + 0.6 * r + rng.uniform(-0.1, 0.1)
                                                  + (0.2 if a == g else 0.0))), 2)) for a in row]
                     for row, g, r in zip(self.answers, self.gold, rates)]
        self.pred = [0 if r == 0 else 1 if r >= 0.6 else round(r, 1) for r in rates]
        rows = [json.loads(x) for x in self.path.read_text().splitlines()]
        self.path.write_text("".join(json.dumps({**r, "pred": p}) + "\n" for r, p in zip(rows, self.pred)))
        self.side = np.array([c for row in self.conf for c in row])

    def replay_pool(self, prior: bool = False, side: bool = False):
        """The pool as `ttc replay --prior pred --side score_mean_logprob` loads it (prior and side optional)."""
        return dataclasses.replace(self.pool(), prior=np.array(self.pred, float) if prior else None,
                                   side=self.side if side else None)


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return PriorPool(tmp_path_factory.mktemp("prior"))


def run(sp, out, backend=None, **kw):
    return execute(plan_run(request(sp, out, **kw)), backend or SignalBackend(sp), None, echo=lambda s: None)


def assert_replays(o, pool, cfg, budget, select="bon"):
    """o (a run) equals replay of `pool` query by query (responses, answered, capped, exhausted, covered, the
    selection's correctness) and in total."""
    df, pq = replay(pool, [cfg], [budget], [SEED], select=select, per_query=True)
    tot, per_query = df.row(0, named=True), {r["query_id"]: r for r in pq.iter_rows(named=True)}
    for r in o.results:
        e = per_query[r["query_id"]]
        assert (r["responses"], r["answered"], r["capped"], r["exhausted"], r["covered"], r["correct"]) == (
            e["n_drawn"], e["answered"], e["capped"], e["exhausted"], e["covered"], e["selected_correct"]), \
            (r["query_id"], cfg)
    s = o.summary
    assert (s["spent"]["samples"], s["spent"]["tokens"], s["outcome"]["answered"]) == (
        tot["samples_used"], tot["tokens_used"], tot["answered"])
    assert s["outcome"]["accuracy"] == pytest.approx(tot["accuracy"])


def drawn(o) -> list[int]:
    return [r["responses"] for r in o.results]


# ------------------------------------------------------------------------------------------ the parameters

@pytest.mark.parametrize("unit, budget", [("samples", 4.0), ("tokens", 50.0)])
@pytest.mark.parametrize("policy, kw", [
    ("optscale", dict(warmup=2, percentile=0.2, max_samples=6)),
    ("optscale", dict(warmup=4, percentile=0.01)),
    ("dsc", dict(K=2, judge=4, eliminate="sc-beta", max_samples=8)),
    ("dsc", dict(K=3, judge=2)),
    ("marginal-gain", dict(K=2, prior_strength=5.0, max_samples=7)),
    ("side-eb", dict(bins=2, refresh=3, prior_strength=4.0, max_samples=8)),
])
def test_the_newer_policies_parameters_equal_replay(sp, tmp_path, policy, kw, unit, budget):
    o = run_pool(sp, tmp_path / "out", policy=policy, unit=unit, budget=budget, **kw)
    cfg = RunConfig(policy, unit=unit, **kw)
    assert_equal(o, sp, cfg, budget)
    # the parameters are the run's, recorded: its label and pool.json say them
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["config"] == cfg.label() and o.summary["config"] == cfg.label()
    assert all(meta["allocation"]["parameters"][p] == getattr(cfg, p) for p in kw)


def test_the_parameters_change_the_run(sp, tmp_path):
    """Not a vacuous equality: each parameter given above moves the allocation away from its default's."""
    for policy, kw in (("optscale", dict(warmup=2, percentile=0.2, max_samples=6)), ("dsc", dict(K=2, judge=4)),
                       ("marginal-gain", dict(K=2, prior_strength=5.0, max_samples=7))):
        a = run_pool(sp, tmp_path / f"{policy}-a", policy=policy, budget=4.0)
        b = run_pool(sp, tmp_path / f"{policy}-b", policy=policy, budget=4.0, **kw)
        assert drawn(a) != drawn(b), policy


def test_every_config_field_reaches_the_run():
    """RunRequest holds the policy's RunConfig (`config`) and re-lists none of its fields: every RunConfig field given
    to RunRequest under its own name lands in the config, RunConfig's default otherwise (eliminate stays the
    request's: None, the oracle's default); a depth field (replay only) is refused in one line when planned; and the
    command line declares the newer policies' parameters for ttc replay and ttc run alike."""
    from ttc import cli
    from ttc.harvest.types import Sampling
    from ttc.replay.policies import DEPTH_FIELDS

    req = {f.name: f for f in dataclasses.fields(RunRequest)}
    assert "config" in req and not set(req) & ({f.name for f in dataclasses.fields(RunConfig)} - {"eliminate"})
    base = dict(out=Path("/nonexistent/unused"), model="m", backend="transformers", dataset="x", budget=2.0,
                sampling=Sampling(n=1, max_tokens=8))
    r = RunRequest(**base, policy="ucb")
    assert r.config == RunConfig("ucb") and r.eliminate is None and r.policy == "ucb" and r.unit == "samples"
    other = dataclasses.asdict(RunConfig("elimination", unit="tokens", K=2, gamma=0.5, lam=2.0, eps=0.02,
                                         max_samples=5, rho=0.25, tau=0.6, m_min=4, share=0.7, hmax=0.5, warmup=4,
                                         percentile=0.1, prior_strength=3.0, judge=8, bins=2, refresh=3,
                                         dirichlet_conf=0.9, horizon=1, depth_rule="stability", depth_m=2,
                                         trace_cap=100, probe_cost="autotts", chains=8, stable=5, patience=3,
                                         probe_warmup=2, cmc_beta=0.25, bf=5.0, bf_mc=10, mmc_delta=0.1,
                                         mmc_m=4, lb_thre=0.99, lb_l=3, uab_tau=1.0, pets_options=4,
                                         pets_mc=30, pets_train=3, pets_curve_mc=0))
    for name, value in other.items():
        if name in ("policy", "eliminate"):
            continue
        assert value != getattr(RunConfig("elimination"), name), f"give {name} a value other than its default"
        got = RunRequest(**base, policy="elimination", **{name: value})
        assert getattr(got.config, name) == value, name
        if name in DEPTH_FIELDS:
            with pytest.raises(RunError, match="replay only"):
                plan_run(got)
    import typer.main

    group = typer.main.get_command(cli.app)
    for command in ("replay", "run"):  # each parameter's option: tests/test_params_once.py
        assert {"prior", "side"} <= {p.name for p in group.commands[command].params}, command


# ------------------------------------------------------------------------------------------ marginal-gain --prior

@pytest.mark.parametrize("kw", [dict(), dict(K=2, prior_strength=8.0, max_samples=6)])
def test_marginal_gain_with_a_prior_equals_replay_with_it(sp, tmp_path, kw):
    o = run(sp, tmp_path / "out", policy="marginal-gain", prior="pred", budget=3.0, **kw)
    cfg = RunConfig("marginal-gain", **kw)
    assert_replays(o, sp.replay_pool(prior=True), cfg, 3.0)
    without = run(sp, tmp_path / "plain", policy="marginal-gain", budget=3.0, **kw)
    assert drawn(o) != drawn(without)  # the predictions moved the budget
    # the run's pool holds the predictions in queries.parquet, as one Float64 column, and ttc replay --prior reads it
    qf = pl.read_parquet(tmp_path / "out" / "pool" / "queries.parquet")
    assert qf.schema["pred"] == pl.Float64
    pool = load_pool(tmp_path / "out" / "pool", prior="pred")
    want = dict(zip(sp.ids, map(float, sp.pred)))
    assert list(pool.prior) == [want[q] for q in pool.query_ids]
    # ... so the run's pool in sample order, with its predictions, gives the run's allocation again
    assert rerun_from_pool(tmp_path / "out", "marginal-gain", 3.0 * sp.n, kw, prior="pred") == drawn(o)
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["prior"]["column"] == "pred" and o.summary["prior"] == "pred"


def rerun_from_pool(out: Path, policy: str, budget_total: float, kw: dict, prior=None, side=None,
                    sp_size: int = 10) -> list[int]:
    """run_live over the run's own pool read in sample order (replay/live.PoolSource), with the run's query order:
    the allocation the pool reproduces."""
    pool = load_pool(out / "pool", prior=prior, side=side)
    ids = pool.query_ids
    src = PoolSource(pool.off, pool.correct, pool.score, pool.ans, pool.tok, np.arange(int(pool.off[-1])),
                     side=pool.side)
    results = {r["query_id"]: r for r in pl.read_parquet(out / "results.parquet").iter_rows(named=True)}
    got = run_live(src, [sp_size] * len(ids), query_order(query_keys(ids), SEED)[0], prior=pool.prior,
                   config=RunConfig(policy, **kw), budget_total=int(round(budget_total)))
    by_id = dict(zip(ids, got["n_drawn"]))
    return [by_id[q] for q in results]


def test_marginal_gain_reads_the_prior_from_a_batch_file(sp, tmp_path):
    """--batch: the prediction is a top-level key of each request line; the run equals the one from the data set."""
    batch = tmp_path / "requests.jsonl"
    batch.write_text("".join(json.dumps({"custom_id": q, "method": "POST", "url": "/v1/chat/completions", "gold": g,
                                         "pred": p,
                                         "body": {"messages": [{"role": "user", "content": f"problem {q}"}]}})
                             + "\n" for q, g, p in zip(sp.ids, sp.gold, sp.pred)))
    o = run(sp, tmp_path / "out", policy="marginal-gain", prior="pred", budget=3.0, dataset=None, batch=batch,
            template=None)
    assert_replays(o, sp.replay_pool(prior=True), RunConfig("marginal-gain"), 3.0)
    assert load_pool(tmp_path / "out" / "pool", prior="pred").prior is not None


# ------------------------------------------------------------------------------------------ side-eb --side

@pytest.mark.parametrize("unit, budget", [("samples", 3.0), ("tokens", 40.0)])
@pytest.mark.parametrize("kw", [dict(), dict(bins=4, refresh=1, max_samples=8), dict(bins=4, refresh=2,
                                                                                     prior_strength=3.0)])
def test_side_eb_with_a_recorded_signal_equals_replay_with_it(sp, tmp_path, unit, budget, kw):
    """--oracle gt decides what answered means, the --confidence signal recorded beside it is the side signal."""
    o = run(sp, tmp_path / "out", policy="side-eb", confidence=SPEC, side=SIDE, unit=unit, budget=budget, **kw)
    cfg = RunConfig("side-eb", unit=unit, **kw)
    assert_replays(o, sp.replay_pool(side=True), cfg, budget)
    # not vacuous: without the signal (0.5 everywhere, replay's default) the allocation differs on this pool
    _, pq = replay(sp.replay_pool(), [cfg], [budget], [SEED], per_query=True)
    assert drawn(o) != pq.sort("query_id")["n_drawn"].to_list()
    # the run's pool holds the column, and the pool in sample order with --side gives the run's allocation again
    pool = load_pool(tmp_path / "out" / "pool", side=SIDE)
    assert pool.side is not None and pool.side.min() >= 0.05
    assert rerun_from_pool(tmp_path / "out", "side-eb", o.summary["budget_total"], {"unit": unit, **kw},
                           side=SIDE) == drawn(o)
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["side"] == SIDE and o.summary["side"] == SIDE


def test_side_eb_without_a_side_signal_is_replay_without_one(sp, tmp_path):
    """Without --side every response's side signal is 0.5 live as in replay: the recorded confidence is not read."""
    a = run(sp, tmp_path / "a", policy="side-eb", confidence=SPEC, side=SIDE, budget=3.0)
    b = run(sp, tmp_path / "b", policy="side-eb", confidence=SPEC, budget=3.0)
    assert drawn(a) != drawn(b)
    assert_replays(b, sp.replay_pool(), RunConfig("side-eb"), 3.0)


def test_a_killed_side_eb_run_resumes_with_the_side_signal_read_back(sp, tmp_path):
    whole = run(sp, tmp_path / "whole", policy="side-eb", confidence=SPEC, side=SIDE, budget=3.0)

    class Killed(SignalBackend):
        def generate(self, *a, **k):
            if self.calls == 4:
                raise KeyboardInterrupt
            return super().generate(*a, **k)

    with pytest.raises(KeyboardInterrupt):
        run(sp, tmp_path / "cut", Killed(sp), policy="side-eb", confidence=SPEC, side=SIDE, budget=3.0)
    rest = SignalBackend(sp)
    resumed = run(sp, tmp_path / "cut", rest, policy="side-eb", confidence=SPEC, side=SIDE, budget=3.0)
    assert resumed.resumed and rest.calls == whole.summary["cost"]["backend_calls"] - 4
    assert [(r["responses"], r["selected"], r["correct"]) for r in resumed.results] == \
        [(r["responses"], r["selected"], r["correct"]) for r in whole.results]


def test_a_backend_without_the_side_signal_is_one_error(sp, tmp_path):
    from ttc.replay.errors import UserError

    from support.synth_run import PoolBackend

    class Silent(SignalBackend):
        def generate(self, prompts, sampling, seeds, stop=None, confidence=None):
            return PoolBackend.generate(self, prompts, sampling, seeds, stop)

    with pytest.raises(UserError, match="no confidence signals"):
        run(sp, tmp_path / "out", Silent(sp), policy="side-eb", confidence=SPEC, side=SIDE, budget=2.0)


# ------------------------------------------------------------------------------------------ the live driver

@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_with_prior_and_side_equals_the_engine(unit, data):
    """run_live over a pool-backed source whose responses carry a side signal, with per-query predictions, equals
    one engine run on the same permutation with the same prior and side (marginal-gain and side-eb, random pools,
    every parameter drawn)."""
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools())
    n, total = len(off) - 1, int(off[-1])
    prior = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), min_size=n, max_size=n)))
    side = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=total,
                                       max_size=total)))
    for policy in ("marginal-gain", "side-eb"):
        cfg, budget = data.draw(configs(total, int(tok.sum()), policy, unit, live=True))
        src = PoolSource(off, correct, score, ans, tok, perm, side=side)
        live = run_live(src, np.diff(off), rank, budget_total=budget, prior=prior, **config_kwargs(cfg))
        want = run_once(*pool, cfg, budget, prior=prior, side=side)
        for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc"):
            assert [int(v) for v in live[key]] == list(np.asarray(want[key]).astype(int)), (key, cfg)
        assert (live["samples_used"], live["tokens_used"]) == (want["samples_used"], want["tokens_used"])


def test_the_live_driver_refuses_bad_signals():
    src = PoolSource(np.array([0, 1]), np.zeros(1), np.zeros(1), np.zeros(1, int), np.zeros(1, int), np.arange(1),
                     side=np.array([1.5]))
    with pytest.raises(ValueError, match="side signal 1.5 is outside"):
        run_live(src, [1], [0], policy="side-eb", budget_total=1)
    ok = PoolSource(np.array([0, 1]), np.zeros(1), np.zeros(1), np.zeros(1, int), np.zeros(1, int), np.arange(1))
    for prior in ([1.2], [np.nan], [0.5, 0.5]):
        with pytest.raises(ValueError, match="prior"):
            run_live(ok, [1], [0], policy="marginal-gain", budget_total=1, prior=prior)


# ------------------------------------------------------------------------------------------ bad input

def _data(tmp_path, sp, values) -> str:
    path = tmp_path / "q.jsonl"
    rows = [{"id": q, "problem": f"problem {q}", "answer": g, **({} if v is ... else {"pred": v})}
            for q, g, v in zip(sp.ids, sp.gold, values)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("kw, message", [
    (dict(policy="ucb", prior="pred"), "--prior is read by --policy marginal-gain; --policy ucb would ignore it"),
    (dict(policy="elimination", side=SIDE, confidence=SPEC), "--side is read by --policy side-eb"),
    (dict(policy="marginal-gain", prior="nope"),
     "the queries of --dataset .* have no column 'nope' \\(fields: pred\\)"),
    (dict(policy="marginal-gain", prior="task"), "keeps the name 'task'"),
    (dict(policy="side-eb", side=SIDE), "--oracle gt records none: add a --confidence signal"),
    (dict(policy="side-eb", side="score_tail", confidence=SPEC), "this run records score_mean_logprob"),
    (dict(policy="side-eb", side="correct", confidence=SPEC), "this run records score_mean_logprob"),
    (dict(policy="optscale", warmup=0), "warmup must be"),
    (dict(policy="optscale", percentile=1.0), "percentile must be"),
    (dict(policy="dsc", judge=1), "judge must be"),
    (dict(policy="side-eb", bins=0), "bins must be"),
    (dict(policy="side-eb", refresh=0), "refresh"),
    (dict(policy="marginal-gain", prior_strength=0.0), "prior_strength must be"),
    (dict(policy="streaming", stream=True, batch=Path("-"), dataset=None, prior="pred"),
     "--prior is read by --policy marginal-gain"),
])
def test_bad_requests_are_one_error_and_write_nothing(sp, tmp_path, kw, message):
    with pytest.raises(InputError, match=message):
        plan_run(request(sp, tmp_path / "out", **kw))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("at, value, message", [
    (11, 1.5, "query 'q11' has 1.5, outside \\[0, 1\\]"),
    (11, float("nan"), "query 'q11' has nan, outside"),
    (3, "high", "query 'q03' has 'high', not a number"),
    (3, True, "query 'q03' has True, not a number"),
    (5, None, "query 'q05' has none"),
    (5, ..., "query 'q05' has none"),  # (no such key on its line)
])
def test_a_bad_prediction_is_one_error_naming_the_query(sp, tmp_path, at, value, message):
    values = [0.5] * sp.n
    values[at] = value
    with pytest.raises(RunError, match=message):
        plan_run(request(sp, tmp_path / "out", policy="marginal-gain", prior="pred",
                         dataset=_data(tmp_path, sp, values)))
    assert not (tmp_path / "out").exists()


def test_a_batch_line_without_a_prediction_is_named(sp, tmp_path):
    batch = tmp_path / "requests.jsonl"
    lines = [{"custom_id": q, "method": "POST", "url": "/v1/completions", "gold": g, "body": {"prompt": f"problem {q}"},
              **({"pred": 0.5} if k != 1 else {})} for k, (q, g) in enumerate(zip(sp.ids, sp.gold))]
    batch.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(RunError, match=f"--prior pred: {batch}:2 has none"):
        plan_run(request(sp, tmp_path / "out", policy="marginal-gain", prior="pred", dataset=None, batch=batch,
                         template=None))
    with pytest.raises(RunError, match="no line of --batch .* has a top-level 'p2'"):
        plan_run(request(sp, tmp_path / "out", policy="marginal-gain", prior="p2", dataset=None, batch=batch,
                         template=None))
    assert not (tmp_path / "out").exists()


def test_a_resume_with_other_predictions_or_another_side_signal_is_refused(sp, tmp_path):
    run(sp, tmp_path / "mg", policy="marginal-gain", prior="pred", budget=2.0)
    other = _data(tmp_path, sp, [0.5] * sp.n)
    with pytest.raises(RunError, match="another configuration.*allocation.prior"):
        plan_run(request(sp, tmp_path / "mg", policy="marginal-gain", prior="pred", budget=2.0, dataset=other))
    with pytest.raises(RunError, match="another configuration.*allocation.prior"):
        plan_run(request(sp, tmp_path / "mg", policy="marginal-gain", budget=2.0))
    run(sp, tmp_path / "eb", policy="side-eb", confidence=SPEC, side=SIDE, budget=2.0)
    with pytest.raises(RunError, match="another configuration.*allocation.side"):
        plan_run(request(sp, tmp_path / "eb", policy="side-eb", confidence=SPEC, budget=2.0))


# ------------------------------------------------------------------------------------------ the command line

def write_pool(sp: PriorPool, out: Path) -> Path:
    """sp as a pool on disk: answers, correctness, token counts, the confidence as score_mean_logprob, and pred in
    queries.parquet (what ttc replay --prior pred --side score_mean_logprob reads)."""
    from ttc.replay.pool import samples_frame
    from ttc.replay.pool import write_pool as write

    rows = {"query_id": [], "sample_idx": [], "answer": [], "correct": [], "n_tokens": [], SIDE: []}
    for i, q in enumerate(sp.ids):
        for k in range(sp.size):
            rows["query_id"].append(q)
            rows["sample_idx"].append(k)
            rows["answer"].append(sp.answers[i][k])
            rows["correct"].append(sp.answers[i][k] == sp.gold[i])
            rows["n_tokens"].append(sp.tokens[i][k])
            rows[SIDE].append(sp.conf[i][k])
    queries = pl.DataFrame({"query_id": sp.ids, "gold": sp.gold, "pred": [float(p) for p in sp.pred]})
    return write(out, samples_frame(rows), {"name": "prior-and-side"}, queries=queries)


@pytest.mark.parametrize("options, run_only", [
    (["--policy", "optscale", "--warmup", "2", "--percentile", "0.2", "--max-samples", "6"], []),
    (["--policy", "dsc", "--K", "2", "--judge", "4", "--eliminate", "sc-beta", "--max-samples", "8"], []),
    (["--policy", "marginal-gain", "--prior", "pred", "--prior-strength", "4", "--K", "2"], []),
    (["--policy", "side-eb", "--side", SIDE, "--bins", "4", "--refresh", "2", "--prior-strength", "3"],
     ["--confidence", "mean-logprob"]),
    (["--policy", "side-eb", "--side", SIDE, "--unit", "tokens"], ["--confidence", "mean-logprob"]),
])
def test_the_command_line_run_equals_the_command_line_replay(sp, tmp_path, monkeypatch, options, run_only):
    """`ttc run OPTIONS` against a backend answering from the pool equals `ttc replay POOL OPTIONS`, the same option
    strings, query by query and in total (the backend is put in place of the model's: the command line's path from
    its options to the run is the one under test)."""
    from typer.testing import CliRunner

    import ttc.harvest.run.command as hr  # (the command's path: run_command)
    from ttc import cli

    real = hr.execute
    monkeypatch.setattr(hr, "load_tokenizer", lambda *a, **k: None)
    monkeypatch.setattr(hr, "execute", lambda plan, backend, tok, **kw: real(plan, SignalBackend(sp), None, **kw))
    pool = write_pool(sp, tmp_path / "pool")
    budget = "40" if "tokens" in options else "3"
    runner = CliRunner()
    r = runner.invoke(cli.app, ["run", "--dataset", str(sp.path), "--template", "plain", "--model", "pool-model",
                                "--backend", "transformers", "--max-tokens", "64", "--seed", str(SEED),
                                "--max-per-query", str(sp.size), "--no-progress", "--budget", budget, "--out",
                                str(tmp_path / "run"), *options, *run_only])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli.app, ["replay", str(pool), "--budgets", budget, "--seeds", "1", "--seed-start", str(SEED),
                                "--per-query", str(tmp_path / "pq.parquet"), "--out", str(tmp_path / "r.parquet"),
                                *options])
    assert r.exit_code == 0, r.output
    got = pl.read_parquet(tmp_path / "run" / "results.parquet").sort("query_id")
    want = pl.read_parquet(tmp_path / "pq.parquet").sort("query_id")
    assert got["query_id"].to_list() == want["query_id"].to_list()
    for a, b in (("responses", "n_drawn"), ("answered", "answered"), ("exhausted", "exhausted"),
                 ("capped", "capped"), ("covered", "covered"), ("correct", "selected_correct")):
        assert got[a].to_list() == want[b].to_list(), a
    total = pl.read_parquet(tmp_path / "r.parquet").row(0, named=True)
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (summary["spent"]["samples"], summary["spent"]["tokens"]) == (total["samples_used"], total["tokens_used"])
    assert summary["config"] == total["config"]


def test_the_command_line_refuses_in_one_line(sp, tmp_path):
    from typer.testing import CliRunner

    from ttc import cli

    # (transformers: its extra is here, so the option is what is refused, not vllm's absence)
    r = CliRunner().invoke(cli.app, ["run", "--dataset", str(sp.path), "--model", "m", "--max-tokens", "8",
                                     "--backend", "transformers", "--budget", "2", "--out", str(tmp_path / "o"),
                                     "--policy", "ucb", "--prior", "pred"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert [ln for ln in r.output.splitlines() if ln.startswith("error:")] == [
        "error: --prior is read by --policy marginal-gain; --policy ucb would ignore it"], r.output
    assert not (tmp_path / "o").exists()
    assert REGISTRY["marginal-gain"].inputs == ("prior",) and REGISTRY["side-eb"].inputs == ("side",)


# ------------------------------------------------------------------------------------------ side-eb with a PRM

from support.text_run import SEED as TEXT_SEED  # noqa: E402
from support.text_run import PoolBackend as TextBackend  # noqa: E402
from support.text_run import assert_live_equals_replay, live_run, prm_options, with_answers  # noqa: E402

# (prm_dir and math_pool: tests/conftest.py)


def test_side_eb_reads_a_prm_score_as_its_side_signal(prm_dir, math_pool, tmp_path):
    """--oracle prm --score prm_min decides what answered means (a threshold), --side score_prm_last is the side
    signal: both columns the PRM writes for every response. Equal to replay of the pool `ttc score --oracle prm`
    scored, with --score prm_min --side score_prm_last (batch size 1: the tiny PRM's padded batches may differ in the
    last bits)."""
    from ttc.harvest.scoring import score_pool

    tp = math_pool
    opts = prm_options(prm_dir, prm_batch_size=1)
    pool_dir = tp.write(tmp_path / "scored")
    score_pool(pool_dir, ["prm"], opts)
    with_answers(pool_dir, tp)
    pool = load_pool(pool_dir, score="prm_min", side="score_prm_last")
    kw = dict(gamma=0.98, bins=4, refresh=1)  # (a high bar: failed draws to learn from)
    o = live_run(tp, tmp_path / "out", TextBackend(tp, pool), policy="side-eb", oracle="prm", scoring=opts,
                 side="score_prm_last", select="bon", budget=2.0, **kw)
    assert_live_equals_replay(o, tp, pool, RunConfig("side-eb", **kw), 2.0, "bon")
    _, pq = replay(dataclasses.replace(pool, side=None), [RunConfig("side-eb", **kw)], [2.0], [TEXT_SEED],
                   per_query=True)
    assert drawn(o) != [dict(zip(pq["query_id"], pq["n_drawn"]))[r["query_id"]] for r in o.results]  # it was read
    assert load_pool(tmp_path / "out" / "pool", score="prm_min", side="score_prm_last").side is not None
