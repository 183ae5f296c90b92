"""`ttc synth --side-signal`: a side-information column whose informativeness is designed (solvable:AUC; 0.5 the
no-information control), drawn from its own random stream so every other column stays as it was."""
import json
import math

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.pool import load_pool
from ttc.replay.synth import SynthError, SynthSpec, generate, generate_arrays, side_shift

runner = CliRunner()


def test_default_has_no_side_column_and_the_others_do_not_move():
    plain, _, _ = generate(SynthSpec(queries=50, responses=8, seed=3))
    side, _, meta = generate(SynthSpec(queries=50, responses=8, seed=3, side_signal="solvable:0.8"))
    assert "score_side" not in plain.columns and "score_side" in side.columns
    assert side.drop("score_side").equals(plain)  # its own stream: correct, answers, scores, tokens unchanged
    assert meta["parameters"]["side_signal"] == "solvable:0.8" and "score_side" in meta["derivation"]


def test_shift_gives_the_designed_auc():
    for auc in (0.5, 0.6, 0.75, 0.9, 0.3):
        d = side_shift(auc)
        assert 0.5 * (1 + math.erf(d / math.sqrt(2) / math.sqrt(2))) == pytest.approx(auc)  # Phi(d / sqrt(2))
    assert side_shift(0.5) == 0.0


@pytest.mark.parametrize("auc", [0.5, 0.7])
def test_realised_auc_of_wrong_responses_matches_the_design(auc):
    """Over every wrong response, solvable queries' signals against unsolvable ones': within 4 Hanley-McNeil
    standard errors of the design (responses are independent given their query's kind)."""
    a = generate_arrays(SynthSpec(queries=300, responses=16, seed=1, side_signal=f"solvable:{auc}",
                                  difficulty="mixture:0.5,1.5,0.3"))
    _, _, meta = generate(SynthSpec(queries=300, responses=16, seed=1, side_signal=f"solvable:{auc}",
                                    difficulty="mixture:0.5,1.5,0.3"))
    got = meta["realised"]["side_auc_wrong"]
    solvable = np.repeat(np.add.reduceat(a["correct"].astype(int), a["off"][:-1]) > 0, a["sizes"])[~a["correct"]]
    n1, n0 = int(solvable.sum()), int((~solvable).sum())
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    se = math.sqrt((auc * (1 - auc) + (n1 - 1) * (q1 - auc**2) + (n0 - 1) * (q2 - auc**2)) / (n1 * n0))
    assert abs(got - auc) <= 4 * se, (got, se)
    assert np.all((a["side"] > 0) & (a["side"] < 1))


@pytest.mark.parametrize("value, message", [
    ("solvable:1", "needs an AUC in (0, 1)"),
    ("solvable:x", "needs 1 comma-separated numbers"),
    ("rate:0.7", "unknown --side-signal"),
])
def test_bad_side_signal(value, message):
    with pytest.raises(SynthError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SynthSpec(side_signal=value)


def test_cli_writes_a_loadable_pool_with_the_column(tmp_path):
    out = tmp_path / "p"
    r = runner.invoke(app, ["synth", "--out", str(out), "--queries", "40", "--responses", "8",
                            "--side-signal", "solvable:0.75"])
    assert r.exit_code == 0, r.output
    assert "score_side (solvable:0.75)" in r.output
    pool = load_pool(out, score="side")
    assert pool.score_name == "score_side"
    meta = json.loads((out / "pool.json").read_text())
    assert meta["parameters"]["side_signal"] == "solvable:0.75"
    assert pl.read_parquet(out / "samples.parquet")["score_side"].is_between(0, 1).all()
    r = runner.invoke(app, ["synth", "--out", str(tmp_path / "q"), "--side-signal", "solvable:2"])
    assert r.exit_code == 2 and r.output.startswith("error:") and "Traceback" not in r.output
