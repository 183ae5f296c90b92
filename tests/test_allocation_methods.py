"""optscale, marginal-gain and dsc (issue 14): small examples worked by hand from docs/semantics.md, the --prior
column's validation, and runs on the embedded pools. The engine equals the reference on random pools in
test_equivalence.py (it draws every policy of the registry) and live equals replay in test_live.py."""
import math

import numpy as np
import polars as pl
import pytest

from ttc.replay.engine import replay, run_once
from ttc.replay.kernel import optscale_target
from ttc.replay.policies import RunConfig
from ttc.replay.pool import PoolError, load_pool, samples_frame, write_pool
from ttc.replay.reference import optscale_target as optscale_target_ref
from ttc.replay.reference import run_reference

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _pool(scores, answers=None):
    """Queries in rank order 0, 1, ...; each receives its responses in the order given (perm = identity)."""
    sizes = [len(s) for s in scores]
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    score = np.array([x for s in scores for x in s], float)
    ans = np.array([a for q in answers for a in q] if answers else [-1] * len(score), np.int64)
    return off, (score >= 1.0).astype(np.int8), score, ans, np.ones(len(score), np.int64), \
        np.arange(len(score), dtype=np.int64), np.arange(len(sizes), dtype=np.int64)


@pytest.mark.parametrize("drawn, wins, expect", [
    (3, 1, 8),    # (2/3)^7 = 0.059 > 0.05 >= (2/3)^8 = 0.039
    (3, 3, 3),    # p = 1: N = 1, raised to the warm-up
    (3, 0, 20),   # no success: the cap (the source's max_N)
    (4, 1, 11),   # (3/4)^10 = 0.056, (3/4)^11 = 0.042
    (5, 4, 3),    # (1/5)^2 = 0.04: N = 2, raised to the warm-up
])
def test_optscale_target_by_hand(drawn, wins, expect):
    for f in (optscale_target, optscale_target_ref):
        assert f(drawn, wins, 3, 20, 0.05) == expect
    if wins:  # the definition: the fewest N with (1 - p)^N <= 0.05
        q = (drawn - wins) / drawn
        assert expect == max(3, next(k for k in range(1, 21) if q ** k <= 0.05))


def test_optscale_draws_each_query_to_its_own_n():
    # query 0: one success in its 3 warm-up draws -> N = 8; query 1: three -> N = 3; query 2: none -> the cap (6)
    data = _pool([[0, 1, 0] + [0] * 17, [1, 1, 1] + [0] * 17, [0] * 20])
    cfg = RunConfig("optscale", max_samples=6)
    got = run_once(*data, cfg, 100)
    assert list(got["n_drawn"]) == [6, 3, 6]  # query 0's N = 8 is capped at max_samples = 6
    got = run_once(*data, RunConfig("optscale"), 100)
    assert list(got["n_drawn"]) == [8, 3, 20]  # no cap: the pool size is the largest N
    assert list(got["capped"]) == [True, True, True] and not any(got["answered"])
    # a binding budget: the warm-up (9), then one response per round to the queries below their N
    got = run_once(*data, RunConfig("optscale"), 13)
    assert list(got["n_drawn"]) == [5, 3, 5]


def test_marginal_gain_follows_the_predictions_and_the_failures():
    # no draw ever succeeds: the index of a query is c p / (c + N), c = 2
    data = _pool([[0] * 5, [0] * 5, [0] * 5])
    prior = np.array([0.9, 0.2, 0.5])
    got = run_once(*data, RunConfig("marginal-gain"), 3, prior=prior)
    # 0.9 first; then 1.8 / 3 = 0.6 > 0.5: query 0 again; then 1.8 / 4 = 0.45 < 0.5: query 2
    assert list(got["n_drawn"]) == [2, 0, 1]
    ref = run_reference(*data, policy="marginal-gain", budget_total=3, prior=list(prior))
    assert ref["n_drawn"] == [2, 0, 1]
    # a query solved (a score >= gamma) gains nothing more: eliminated by the threshold rule
    data = _pool([[1, 0, 0], [0] * 5])
    got = run_once(*data, RunConfig("marginal-gain"), 4, prior=np.array([0.9, 0.1]))
    assert list(got["n_drawn"]) == [1, 3] and list(got["answered"]) == [True, False]
    # without predictions every unsolved query has 1 / (N + 2): round-robin over them, as elimination
    data = _pool([[0, 0, 1, 0], [0, 1, 0, 0], [0] * 4])
    assert list(run_once(*data, RunConfig("marginal-gain"), 7)["n_drawn"]) == \
        list(run_once(*data, RunConfig("elimination"), 7)["n_drawn"])


def test_dsc_partition_and_windows_by_hand():
    """Four queries, first-draw scores 0.9, 0.8, 0.5, 0.1 (the ranking: 0, 1, 2, 3); windows K = 2, the esc rule (a
    window is one answer), two judges per midpoint, at most 6 each. Midpoint 2 judges positions 1 and 2: query 1's
    first window (a, a) stops, query 2's (a, b) does not: the boundary is left of 2. Midpoint 1 judges 0 and 1: both
    stop, so 0 and 1 are easy. Then windows for 2 and 3, round-robin: 2 stops at its sixth draw (a, a), 3 never."""
    a, b, c, d, e, f = range(6)
    scores = [[0.9] + [0.0] * 5, [0.8] + [0.0] * 5, [0.5] + [0.0] * 5, [0.1] + [0.0] * 6]
    answers = [[a, a, b, b, b, b], [a, a, b, b, b, b], [a, b, a, b, a, a], [a, b, c, d, e, f, a]]
    data = _pool(scores, answers)
    cfg = RunConfig("dsc", K=2, eliminate="esc", judge=2, max_samples=6)
    got = run_once(*data, cfg, 100)
    assert list(got["n_drawn"]) == [2, 2, 6, 6]
    assert list(got["answered"]) == [True, True, True, False] and list(got["capped"]) == [False, False, True, True]
    ref = run_reference(*data, policy="dsc", budget_total=100, K=2, elim="esc", judge=2, max_samples=6)
    assert ref["n_drawn"] == [2, 2, 6, 6]
    # an easy query never judged keeps its single ranking draw: midpoint 2 of 5 judges 1, 2 (easy: 0 .. 2), then
    # midpoint 4 judges 3, 4; query 0 is the one never judged
    scores5 = [[0.9] + [0.0] * 3] * 5
    answers5 = [[a, a, a, a]] * 5
    got = run_once(*_pool(scores5, answers5), RunConfig("dsc", K=2, eliminate="esc", judge=2), 100)
    assert sorted(got["n_drawn"]) == [1, 2, 2, 2, 2] and all(got["answered"])


@pytest.fixture
def prior_pool(tmp_path):
    qids = ["a", "b", "c"]
    samples = samples_frame({"query_id": [q for q in qids for _ in range(4)], "sample_idx": list(range(4)) * 3,
                             "correct": [False, True, False, False] * 3})

    def make(values, name="p", dtype=pl.Float64):
        out = tmp_path / f"pool{len(list(tmp_path.iterdir()))}"
        write_pool(out, samples, {}, pl.DataFrame({"query_id": qids, name: values}, schema_overrides={name: dtype}))
        return out
    return make


def test_prior_column_is_read_in_query_order(prior_pool):
    pool = load_pool(prior_pool([0.25, 1.0, 0.0]), prior="p")
    assert pool.prior.tolist() == [0.25, 1.0, 0.0]
    df, _ = replay(pool, [RunConfig("marginal-gain")], [2], range(3))
    assert df.height == 3


@pytest.mark.parametrize("values, column, message", [
    ([0.1, 0.2, 0.3], "q", "no column 'q'"),
    ([0.1, None, 0.3], "p", "1 null or NaN"),
    ([0.1, float("nan"), 0.3], "p", "1 null or NaN"),
    ([0.1, 1.5, 0.3], "p", r"outside \[0, 1\]"),
    (["x", "y", "z"], "p", "must hold numbers"),
])
def test_a_bad_prior_column_is_one_error(prior_pool, values, column, message):
    path = prior_pool(values, dtype=pl.String if isinstance(values[0], str) else pl.Float64)
    with pytest.raises(PoolError, match=message):
        load_pool(path, prior=column)


def test_a_prior_needs_queries_parquet(tmp_path):
    write_pool(tmp_path / "p", samples_frame({"query_id": ["a"], "sample_idx": [0], "correct": [True]}), {})
    with pytest.raises(PoolError, match="no queries.parquet"):
        load_pool(tmp_path / "p", prior="p")


def test_the_methods_on_the_embedded_pools():
    """Budgets that never bind: optscale spends at least its warm-up and at most the cap on each query; dsc with the
    source's settings (windows of 4, the Beta rule at 0.95, at most 40) is self-consistency's accuracy at a fraction of
    its cost on last letters; marginal-gain runs with the math pool's confidence."""
    ll = load_pool(ROOT / "data" / "lastletters-gpt35-40")
    n = ll.n_queries
    df, pq = replay(ll, [RunConfig("optscale", max_samples=16)], [40], range(20), per_query=True)
    assert pq["n_drawn"].min() >= 3 and pq["n_drawn"].max() <= 16
    df, _ = replay(ll, [RunConfig("dsc", K=4, eliminate="sc-beta", max_samples=40),
                        RunConfig("uniform")], [40], range(20), select="sc")
    dsc, sc = (df.filter(pl.col("policy") == p) for p in ("dsc", "uniform"))
    assert dsc["samples_used"].mean() / n < 10
    assert abs(dsc["accuracy"].mean() - sc["accuracy"].mean()) < 0.02
    math500 = load_pool(ROOT / "data" / "math500-llama3.1-8b-48", score="conf")
    df, _ = replay(math500, [RunConfig("marginal-gain", gamma=0.9)], [8], range(5))
    assert df["samples_used"].max() <= 8 * math500.n_queries and not math.isnan(df["coverage"].mean())


def test_replay_command_line_takes_the_new_options(prior_pool, tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app
    path = prior_pool([0.25, 1.0, 0.0])
    r = CliRunner().invoke(app, ["replay", str(path), "--policy", "optscale,marginal-gain,dsc", "--prior", "p",
                                 "--prior-strength", "4", "--warmup", "2", "--percentile", "0.1", "--judge", "2",
                                 "--budgets", "2", "--seeds", "3", "--out", str(tmp_path / "r.parquet")])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(tmp_path / "r.parquet")
    assert set(df["policy"]) == {"optscale", "marginal-gain", "dsc"}
    assert set(df["warmup"]) == {2} and set(df["judge"]) == {2} and set(df["prior_strength"]) == {4.0}
    bad = CliRunner().invoke(app, ["replay", str(path), "--policy", "marginal-gain", "--prior", "nope"])
    assert bad.exit_code == 2 and "error:" in bad.output and "no column 'nope'" in bad.output
    bad = CliRunner().invoke(app, ["replay", str(path), "--policy", "optscale", "--percentile", "1.5"])
    assert bad.exit_code == 2 and "percentile must be in (0, 1)" in bad.output
