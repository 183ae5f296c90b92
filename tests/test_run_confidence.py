"""`ttc run` with confidence signals: --confidence records them in the run's pool as `ttc harvest` does, and
--oracle confidence lets the policy read one as its score (a live run that needs no gold answer and no extra model).
The backend here answers from a synthetic pool and returns each response's signals from a per-response confidence;
live must equal replay of that pool with the confidence as the score."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from ttc.harvest.confidence import ConfidenceSpec
from ttc.harvest.run import RunError, execute, plan_run
from ttc.replay.engine import replay
from ttc.replay.policies import RunConfig

from support.synth_run import SEED, SPEC, PoolBackend, SignalBackend, SignalPool, request


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return SignalPool(tmp_path_factory.mktemp("signals"))


def run(sp, out, backend=None, **kw):
    backend = backend or SignalBackend(sp)
    plan = plan_run(request(sp, out, **kw))
    return execute(plan, backend, None, echo=lambda s: None), backend


@pytest.mark.parametrize("policy, kw, select", [
    ("ucb", dict(K=2, lam=0.5, eliminate="threshold", gamma=0.8), "weighted"),
    ("ucb", dict(K=2, lam=0.5), "weighted"),
    ("elimination", dict(eliminate="threshold", gamma=0.9), "bon"),
    ("elimination", dict(eliminate="sc-share", tau=0.5, m_min=2), "weighted"),
    ("gap", dict(eliminate="threshold", gamma=0.7), "bon"),
])
def test_oracle_confidence_equals_replay_with_the_confidence_as_score(sp, tmp_path, policy, kw, select):
    o, backend = run(sp, tmp_path / "out", oracle="confidence", confidence=SPEC, policy=policy, select=select,
                     budget=4.0, **kw)
    assert all(a == SPEC for a in backend.asked)  # log-probs asked for on every call
    cfg = RunConfig(policy, **{"eliminate": "sc-share", **kw})  # (sc-share: --oracle confidence's default rule)
    df, pq = replay(sp.conf_pool(), [cfg], [4.0], [SEED], select=select, per_query=True)
    e = {r["query_id"]: r for r in pq.iter_rows(named=True)}
    for r in o.results:
        assert r["responses"] == e[r["query_id"]]["n_drawn"], r["query_id"]
        assert r["answered"] == e[r["query_id"]]["answered"], r["query_id"]
        assert r["correct"] is None  # no ground truth
    assert o.summary["spent"]["samples"] == df["samples_used"][0]
    # the pool holds the signal and its raw value, in [0, 1] and its log, as ttc harvest writes them
    samples = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    assert {"score_mean_logprob", "mean_logprob", "answer"} <= set(samples.columns)
    assert np.allclose(np.log(samples["score_mean_logprob"].to_numpy()), samples["mean_logprob"].to_numpy())
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["generation"]["confidence"]["signals"] == ["mean-logprob"]
    assert meta["allocation"]["score"] == "score_mean_logprob"


def test_confidence_with_ground_truth_records_the_signals_and_changes_nothing(sp, tmp_path):
    plain, b0 = run(sp, tmp_path / "plain", policy="elimination", budget=3.0)
    rec, b1 = run(sp, tmp_path / "rec", policy="elimination", budget=3.0, confidence=SPEC)
    assert b0.asked == [None] * len(b0.asked) and all(a == SPEC for a in b1.asked)
    assert [r["responses"] for r in plain.results] == [r["responses"] for r in rec.results]
    assert [r["correct"] for r in plain.results] == [r["correct"] for r in rec.results]
    samples = pl.read_parquet(tmp_path / "rec" / "pool" / "samples")
    assert "score_mean_logprob" in samples.columns and samples["score_mean_logprob"].null_count() == 0
    assert "score_mean_logprob" not in pl.read_parquet(tmp_path / "plain" / "pool" / "samples").columns


def test_a_resume_with_other_signals_is_refused(sp, tmp_path):
    run(sp, tmp_path / "out", policy="uniform", budget=2.0, confidence=SPEC)
    with pytest.raises(RunError, match="confidence"):
        plan_run(request(sp, tmp_path / "out", policy="uniform", budget=2.0,
                         confidence=ConfidenceSpec(("mean-logprob", "tail"))))


@pytest.mark.parametrize("kw, message", [
    (dict(oracle="confidence"), "name one with --confidence"),
    (dict(oracle="confidence", confidence=SPEC, score="tail"), "--score tail: --oracle confidence reads one of"),
])
def test_bad_confidence_requests_are_one_error_and_write_nothing(sp, tmp_path, kw, message):
    with pytest.raises(RunError, match=message):
        plan_run(request(sp, tmp_path / "out", **kw))
    assert not (tmp_path / "out").exists()


def test_a_backend_that_returns_no_signals_is_one_error(sp, tmp_path):
    class Silent(SignalBackend):
        def generate(self, prompts, sampling, seeds, stop=None, confidence=None):
            return PoolBackend.generate(self, prompts, sampling, seeds, stop)

    from ttc.replay.errors import UserError

    with pytest.raises(UserError, match="no confidence signals"):
        run(sp, tmp_path / "out", Silent(sp), oracle="confidence", confidence=SPEC, policy="uniform", budget=2.0)


def test_the_command_line_takes_confidence(sp, tmp_path):
    """--confidence on ttc run is the harvest option group (one declaration); a bad signal name is one line."""
    from typer.testing import CliRunner

    from ttc import cli

    r = CliRunner().invoke(cli.app, ["run", "--model", "m", "--out", str(tmp_path / "o"), "--budget", "2",
                                     "--max-tokens", "8", "--dataset", str(sp.path), "--confidence", "nope"])
    assert r.exit_code == 2 and "nope" in r.output and "Traceback" not in r.output
