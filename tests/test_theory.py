"""`ttc theory`: the closed-form budgets agree with the engine's replays seed by seed, the bisection finds the
smallest budget, elimination beats uniform on a heterogeneous pool, and the command runs and refuses bad input."""
import math

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.pool import Pool
from ttc.replay.synth import SynthSpec, generate_arrays, to_pool
from ttc.replay.theory import (
    TheorySetting,
    draw_order,
    engine_budget,
    engine_check,
    engine_needs,
    engine_runs,
    linear_rates,
    measure,
    need_elimination,
    need_etc_adaptive,
    need_two_stage,
    need_uniform,
    predicted,
    quantile_budget,
    smallest_budget,
    theory_pool,
)

runner = CliRunner()
M = 4


@pytest.fixture(scope="module")
def tiny():
    """Equal pools of 300 responses, p_i = i/6 exactly: no policy here can exhaust a query before covering it."""
    spec = SynthSpec(queries=6, responses=300, difficulty="linear", score_dist="none", tokens=0, exact_counts=True,
                     seed=3)
    return to_pool(spec, generate_arrays(spec))


def test_closed_forms_equal_engine_replays_seed_by_seed(tiny):
    seeds = range(12)
    F, rank = draw_order(tiny, seeds)
    direct = {"uniform": need_uniform(F, rank), "elimination": need_elimination(F),
              "two-stage": need_two_stage(F, rank, M)}
    assert (F >= 1).all() and (F[:, -1] == 1).all()  # p = 1: first draw correct
    for pol, need in direct.items():
        assert np.array_equal(engine_needs(tiny, pol, seeds, M), need), pol
        # and directly: each seed covers everything at its need and not one sample earlier
        for s, b in zip(seeds, need):
            assert engine_runs(tiny, pol, int(b), [s], M)[0].all()
            assert not engine_runs(tiny, pol, int(b) - 1, [s], M)[0].any()
    assert (direct["elimination"] <= direct["uniform"]).all()


def test_uniform_budget_by_bisection_equals_direct_computation(tiny):
    seeds = range(20)
    F, rank = draw_order(tiny, seeds)
    for delta in (0.1, 0.5):
        want = quantile_budget(need_uniform(F, rank), delta)
        got, evals, exhausted = engine_budget(tiny, "uniform", seeds, delta, M)
        assert got == want and exhausted == 0.0 and evals > 2
        assert engine_check(tiny, "uniform", seeds, delta, M, want)[0] == want
        assert engine_check(tiny, "uniform", seeds, delta, M, want + 1)[0] is None  # not the smallest


def test_coverage_is_monotone_in_budget(tiny):
    seeds = range(6)
    for pol in ("uniform", "elimination", "two-stage"):
        covered = np.array([engine_runs(tiny, pol, b, seeds, M)[0] for b in range(5, 90)])
        assert (np.diff(covered.astype(int), axis=0) >= 0).all(), pol  # once covered, covered at every larger B


def test_smallest_budget_on_hand_made_functions():
    calls = []

    def frac(b):
        calls.append(b)
        return min(1.0, b / 100)

    assert smallest_budget(frac, 0, 0.9) == (90, len(calls))
    needs = np.array([7, 3, 12, 5, 5, 40, 9, 11, 2, 6])
    for delta in (0.05, 0.1, 0.3, 0.5, 0.95):
        b, _ = smallest_budget(lambda x: (needs <= x).mean(), 1, 1 - delta)
        assert b == quantile_budget(needs, delta)
        assert (needs <= b).mean() >= 1 - delta > (needs <= b - 1).mean()
    assert quantile_budget(needs, 0.1) == 12 and quantile_budget(needs, 0.05) == 40  # 9 of 10, then all 10


def test_hand_made_pool_every_response_correct():
    """Every draw correct: each policy needs exactly one response per query, whatever the permutation."""
    off = np.arange(0, 5 * 8 + 1, 8)
    pool = Pool.from_arrays(off, correct=np.ones(40, np.int8))
    seeds = range(10)
    for pol in ("uniform", "elimination", "two-stage"):
        assert engine_budget(pool, pol, seeds, 0.1, 2)[0] == 5
        assert (engine_needs(pool, pol, seeds, 2) == 5).all()
    F, rank = draw_order(pool, seeds)
    assert (need_etc_adaptive(F, 2) == 10).all()  # m = 2 each, paid even when the first is correct


def test_elimination_needs_less_than_uniform_on_heterogeneous_pool():
    spec = SynthSpec(queries=30, responses=400, difficulty="beta:2,3", score_dist="none", tokens=0,
                     exact_counts=True, seed=5)
    pool = to_pool(spec, generate_arrays(spec))
    assert (np.add.reduceat(pool.correct, pool.off[:-1]) > 0).all()  # every query solvable in its pool
    seeds = range(40)
    diff = engine_needs(pool, "uniform", seeds, M) - engine_needs(pool, "elimination", seeds, M)
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    assert diff.mean() > 4 * se > 0


def test_measure_rows_and_rates():
    setting = TheorySetting(ns=(8, 16), trials=30, m=3, depth=16, engine="bisect")
    df = measure(setting)
    assert df.height == 8 and df["engine_agrees"].drop_nulls().all()
    assert df.filter(pl.col("engine_agrees").is_not_null())["policy"].to_list() == ["elimination", "two-stage"] * 2
    for r in df.iter_rows(named=True):
        p = linear_rates(r["n"])
        assert r["predicted"] == pytest.approx(predicted(r["policy"], p, 3))
        assert r["ratio"] == pytest.approx(r["budget"] / r["predicted"])
    n = 16
    assert predicted("uniform", linear_rates(n), 3) == pytest.approx(n * n)
    assert predicted("elimination", linear_rates(n), 3) == pytest.approx(n * sum(1 / k for k in range(1, n + 1)))
    pool = theory_pool(16, 3, 16)
    assert (pool.sizes >= 4).all() and (np.add.reduceat(pool.correct, pool.off[:-1]) >= 16).all()


def test_cli_fast_setting(tmp_path):
    r = runner.invoke(app, ["theory", "--sizes", "5,10", "--seeds", "20", "--out", str(tmp_path / "th")])
    assert r.exit_code == 0, r.output
    assert "= engine (2 replays)" in r.output and "slope measured" in r.output and "disagree" not in r.output
    assert (tmp_path / "th" / "theory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pl.read_csv(tmp_path / "th" / "theory.csv").height == 8


@pytest.mark.parametrize("args, message", [
    (["--sizes", "1,5"], "--sizes takes query counts >= 2"),
    (["--sizes", "5,x"], "--sizes takes comma-separated numbers"),
    (["--sizes", "5,5"], "--sizes lists a size twice"),
    (["--delta", "0"], "--delta must be in (0, 1)"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--m", "0"], "--m"),
    (["--engine", "maybe"], "Invalid value for '--engine'"),
])
def test_cli_bad_arguments(args, message):
    r = runner.invoke(app, ["theory", *args])
    assert r.exit_code == 2, r.output
    assert f"error: {message}" in r.output and "Traceback" not in r.output


def test_cli_out_is_a_file(tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    r = runner.invoke(app, ["theory", "--sizes", "4", "--seeds", "2", "--out", str(f)])
    assert r.exit_code == 2 and "is a file" in r.output
