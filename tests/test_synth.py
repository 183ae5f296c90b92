"""Synthetic pools: reproducible by seed, statistics that match their parameters (within 4 standard errors), a
pool format that replay and info accept, and clear errors on bad parameters."""
import hashlib
import json
import math
from dataclasses import asdict

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.pool import load_pool
from ttc.replay.synth import SynthSpec, generate, generate_arrays, make_pool, to_pool

runner = CliRunner()


def within(observed, expected, se, k=4.0):
    return abs(observed - expected) <= k * se


def digest(pool):
    h = hashlib.sha256()
    for a in (pool.off, pool.correct, pool.score, pool.ans, pool.tok):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("kwargs, expected", [
    ({}, "7650955450cb341e"),
    ({"n": 30, "size": 12, "ragged": True, "seed": 3}, "08e731aad015e5ad"),
    ({"n": 50, "size": 16, "ragged": True, "scores": "gt", "seed": 2}, "38803ba2ca061bfb"),
    ({"n": 20, "size": 8, "answers": False, "tokens": False, "seed": 9}, "f3828168863c1967"),
])
def test_make_pool_output_unchanged(kwargs, expected):
    """Tests and `ttc bench` numbers rely on make_pool; digests recorded before `ttc synth` was added."""
    assert digest(make_pool(**kwargs)) == expected


def write(tmp_path, name, *args):
    r = runner.invoke(app, ["synth", "--out", str(tmp_path / name), *map(str, args)])
    assert r.exit_code == 0, r.output
    return tmp_path / name


def test_same_seed_identical_files_different_seed_different(tmp_path):
    a = write(tmp_path, "a", "--queries", 40, "--responses", 16, "--seed", 7)
    b = write(tmp_path, "b", "--queries", 40, "--responses", 16, "--seed", 7)
    c = write(tmp_path, "c", "--queries", 40, "--responses", 16, "--seed", 8)
    files = ("samples.parquet", "queries.parquet", "pool.json")
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
        assert (a / f).read_bytes() != (c / f).read_bytes(), f


def test_pool_json_records_every_parameter_and_regenerates(tmp_path):
    out = write(tmp_path, "p", "--queries", 30, "--responses", 10, "--difficulty", "beta:2,5", "--fp", 0.2,
                "--tokens", 0, "--seed", 11, "--exact-counts")
    meta = json.loads((out / "pool.json").read_text())
    assert meta["seed"] == 11 and meta["parameters"]["fp"] == 0.2 and meta["parameters"]["exact_counts"]
    spec = SynthSpec(**meta["parameters"])
    assert asdict(spec).keys() == meta["parameters"].keys()
    samples, queries, _ = generate(spec)
    assert samples.equals(pl.read_parquet(out / "samples.parquet"))
    assert queries.equals(pl.read_parquet(out / "queries.parquet"))
    assert "n_tokens" not in samples.columns


def test_components_draw_from_their_own_streams():
    base = generate_arrays(SynthSpec(queries=50, responses=20, seed=4))
    other = generate_arrays(SynthSpec(queries=50, responses=20, seed=4, fp=0.3, invalid_rate=0.4, tokens=100))
    assert np.array_equal(base["correct"], other["correct"]) and np.array_equal(base["p"], other["p"])
    assert not np.array_equal(base["score"], other["score"]) and not np.array_equal(base["ans"], other["ans"])


@pytest.fixture(scope="module")
def big():
    spec = SynthSpec(queries=300, responses=400, difficulty="mixture:0.8,1.2,0.2", fp=0.07, fn=0.15, gamma=0.7,
                     score_dist="beta:3,1", wrong_answers=5, answer_skew=1.5, invalid_rate=0.1,
                     invalid_rate_unsolvable=0.6, tokens=250, tokens_sigma=0.6, tokens_wrong=2.0, seed=1)
    return spec, generate_arrays(spec)


def test_correctness_follows_p(big):
    spec, a = big
    m = spec.responses
    c = np.add.reduceat(a["correct"].astype(np.int64), a["off"][:-1])
    p = a["p"]
    assert (c[p == 0] == 0).all()
    var = m * p * (1 - p)
    assert within(c.sum(), (m * p).sum(), math.sqrt(var.sum()))
    mid = (p > 0.05) & (p < 0.95)
    z = (c[mid] - m * p[mid]) / np.sqrt(var[mid])
    assert np.abs(z).max() < 4.5 and mid.sum() > 150


def test_unsolvable_share_and_beta_mean():
    n = 4000
    p = generate_arrays(SynthSpec(queries=n, responses=1, difficulty="mixture:2,3,0.3", seed=2))["p"]
    assert within((p == 0).mean(), 0.3, math.sqrt(0.3 * 0.7 / n))
    solvable = p[p > 0]
    a, b = 2, 3
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    assert within(solvable.mean(), a / (a + b), sd / math.sqrt(len(solvable)))
    lin = generate_arrays(SynthSpec(queries=8, responses=3, difficulty="linear"))["p"]
    assert np.array_equal(lin, np.arange(1, 9) / 8)


def test_reward_model_fp_fn_and_shape(big):
    spec, a = big
    correct, score = a["correct"], a["score"]
    flagged = score >= spec.gamma
    wrong = ~correct
    assert within(flagged[wrong].mean(), spec.fp, math.sqrt(spec.fp * (1 - spec.fp) / wrong.sum()))
    assert within((~flagged[correct]).mean(), spec.fn, math.sqrt(spec.fn * (1 - spec.fn) / correct.sum()))
    assert score.min() >= 0 and score.max() <= 1
    pos = score[flagged]
    x = (pos - spec.gamma) / (1 - spec.gamma)  # Beta(3, 1): mean 3/4, variance 3/80
    assert within(x.mean(), 0.75, math.sqrt(3 / 80 / len(x)))
    for gamma in (1.0, 0.3):
        s = SynthSpec(queries=100, responses=50, gamma=gamma, fp=0.1, fn=0.2, seed=3)
        g = generate_arrays(s)
        hit = g["score"] >= gamma
        assert (g["score"][~hit] < gamma).all() and (g["score"][hit] <= 1.0).all()
        if gamma == 1.0:
            assert (g["score"][hit] == 1.0).all()  # a positive verdict at gamma 1 is a score of exactly 1
        assert within(hit[~g["correct"]].mean(), 0.1, math.sqrt(0.09 / (~g["correct"]).sum()))
        assert within((~hit[g["correct"]]).mean(), 0.2, math.sqrt(0.16 / g["correct"].sum()))
    binary = generate_arrays(SynthSpec(queries=20, responses=20, score_dist="binary", seed=1))["score"]
    assert set(np.unique(binary)) <= {0.0, 1.0}
    assert generate_arrays(SynthSpec(queries=5, responses=5, score_dist="none"))["score"] is None


def test_answers_cluster_and_invalid_on_unsolvable(big):
    spec, a = big
    ans, correct = a["ans"], a["correct"]
    qp = np.repeat(a["p"], a["sizes"])
    assert (ans[correct] == 0).all() and (ans[~correct] != 0).all()
    for mask, rate in ((~correct & (qp > 0), spec.invalid_rate), (~correct & (qp == 0), spec.invalid_rate_unsolvable)):
        assert within((ans[mask] < 0).mean(), rate, math.sqrt(rate * (1 - rate) / mask.sum()))
    valid_wrong = ans[~correct & (ans > 0)]
    k = np.arange(1, spec.wrong_answers + 1)
    w = k ** -spec.answer_skew
    w /= w.sum()
    counts = np.bincount(valid_wrong, minlength=spec.wrong_answers + 1)[1:]
    assert counts.sum() == len(valid_wrong) and valid_wrong.max() <= spec.wrong_answers
    share = counts / counts.sum()
    assert all(within(share[j], w[j], math.sqrt(w[j] * (1 - w[j]) / counts.sum())) for j in range(len(k)))
    assert share[0] > share[1] > share[-1]  # skewed: the first wrong answer dominates


def test_tokens_lognormal_longer_when_wrong(big):
    spec, a = big
    tok, correct = a["tok"], a["correct"]
    assert tok.min() >= 1
    for mask, mean in ((correct, spec.tokens), (~correct, spec.tokens * spec.tokens_wrong)):
        t = tok[mask]
        assert within(t.mean(), mean, t.std(ddof=1) / math.sqrt(len(t)))
    logsd = np.log(tok[correct]).std()
    assert abs(logsd - spec.tokens_sigma) < 0.05


def test_exact_counts():
    spec = SynthSpec(queries=40, responses=37, difficulty="beta:1,1", exact_counts=True, seed=6)
    a = generate_arrays(spec)
    c = np.add.reduceat(a["correct"].astype(np.int64), a["off"][:-1])
    assert np.array_equal(c, np.rint(a["p"] * 37).astype(int))
    first_half = np.add.reduceat(a["correct"][np.arange(a["off"][-1]) % 37 < 18].astype(np.int64),
                                 np.arange(0, 40 * 18, 18))
    assert 0 < first_half.sum() < c.sum()  # positions are shuffled, not all at the front


def test_replay_and_info_accept_the_pool(tmp_path):
    out = write(tmp_path, "p", "--queries", 60, "--responses", 24, "--seed", 2)
    spec = SynthSpec(queries=60, responses=24, seed=2)
    loaded, mem = load_pool(out, score="rm"), to_pool(spec, generate_arrays(spec))
    for k in ("off", "correct", "score", "ans", "tok"):
        assert np.array_equal(getattr(loaded, k), getattr(mem, k)), k
    assert loaded.query_ids == mem.query_ids
    r = runner.invoke(app, ["info", str(out)])
    assert r.exit_code == 0 and "score_rm >= gamma" in r.output, r.output
    r = runner.invoke(app, ["replay", "--pool", str(out), "--score", "rm", "--gamma", "0.5", "--seeds", "3",
                            "--budgets", "4", "--select", "sc", "--policy", "uniform,elimination,entropy"])
    assert r.exit_code == 0 and "entropy" in r.output, r.output
    r = runner.invoke(app, ["replay", "--pool", str(out), "--unit", "tokens", "--budgets", "900", "--seeds", "2",
                            "--policy", "uniform,ucb"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, message", [
    (["--difficulty", "gamma:1,2"], "unknown --difficulty"),
    (["--difficulty", "mixture:1,2"], "needs 3 comma-separated numbers"),
    (["--difficulty", "mixture:1,2,1.5"], "U in [0, 1]"),
    (["--difficulty", "beta:0,2"], "A > 0 and B > 0"),
    (["--fp", "1.5"], "--fp is a probability"),
    (["--invalid-rate-unsolvable", "-0.1"], "--invalid-rate-unsolvable is a probability"),
    (["--gamma", "0"], "--gamma must be in (0, 1]"),
    (["--score-dist", "normal"], "unknown --score-dist"),
    (["--wrong-answers", "0"], "--wrong-answers must be >= 1"),
    (["--queries", "0"], "--queries and --responses must be >= 1"),
    (["--tokens", "-5"], "--tokens must be in [0, 1e6]"),
])
def test_bad_arguments(tmp_path, args, message):
    r = runner.invoke(app, ["synth", "--out", str(tmp_path / "p"), *args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p").exists()


def test_refuses_non_empty_out(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "keep.txt").write_text("x")
    r = runner.invoke(app, ["synth", "--out", str(tmp_path / "p")])
    assert r.exit_code == 2 and "not an empty directory" in r.output
    assert [f.name for f in (tmp_path / "p").iterdir()] == ["keep.txt"]
