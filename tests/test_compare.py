"""`ttc compare` (issue 15's comparison table): the split is disjoint, seeded and recorded; every number is flagged
when tuning and reporting data overlap; a policy's number is `ttc tune`'s chosen row (one tuner, not two); on a
synthetic pool with an informative side signal the side column is chosen on the tuning part, side-eb beats the best
published policy beyond 2 standard errors, and the gap share is (side-eb - best) / (oracle - best) of direct
replays on the held-out queries; a pool without a side signal runs side-eb without one (its control); bad input is one
`error:` line."""

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.compare import CompareRequest, gap_share, paired, plan_pool, verdict
from ttc.replay.engine import replay
from ttc.replay.outputs import written_by
from ttc.replay.policies import RunConfig
from ttc.replay.pool import DEFAULT_POOL, load_pool, samples_frame, write_pool
from ttc.replay.synth import SynthSpec, write_synth
from ttc.replay.tune import split_digest, split_queries, subset

runner = CliRunner()


def compare_cli(*args):
    r = runner.invoke(app, ["compare", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def informative(tmp_path_factory):
    """200 queries x 16 responses, hard and unsolvable ones mixed, a perfect verifier (score_rm = correct, so it
    tells a failed draw nothing) and score_side, a side signal separating solvable from unsolvable queries at AUC
    0.8 (`ttc synth --side-signal solvable:0.8`)."""
    spec = SynthSpec(queries=200, responses=16, difficulty="mixture:0.5,2,0.3", score_dist="binary", fp=0.0, fn=0.0,
                     side_signal="solvable:0.8", seed=3, tokens=0)
    return write_synth(tmp_path_factory.mktemp("synth") / "p", spec)[0]


@pytest.fixture(scope="module")
def compared(informative, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "out"
    r = compare_cli(informative, "--policy", "uniform,elimination", "--budgets", "4,8", "--seeds", 8,
                    "--holdout", 0.4, "--split-seed", 2, "--out", out)
    return r, out, pl.read_parquet(out / "compare.parquet")


def test_split_is_disjoint_seeded_and_recorded(informative, compared):
    r, out, df = compared
    assert written_by(out) == "compare" and written_by(out / "compare.parquet") == "compare"
    pool = load_pool(informative)
    t_idx, r_idx = split_queries(pool.query_ids, 0.4, 2)
    held = [pool.query_ids[i] for i in r_idx]
    split = pl.read_parquet(out / "split.parquet")
    tune = set(split.filter(pl.col("part") == "tune")["query_id"])
    report = set(split.filter(pl.col("part") == "report")["query_id"])
    assert not tune & report and tune | report == set(pool.query_ids) and report == set(held)
    assert set(df["report_digest"]) == {split_digest(held)}
    assert set(df["n_tune"]) == {len(t_idx)} and set(df["n_report"]) == {len(r_idx)} == {80}
    assert set(df["holdout"]) == {0.4} and set(df["split_seed"]) == {2} and set(df["n_seeds"]) == {8}
    md = (out / "compare.md").read_text()
    assert "ttc compare" in md and "--holdout 0.4 --split-seed 2" in md and split_digest(held) in md


def test_tuned_on_reported_flag(informative, compared, tmp_path):
    df = compared[2]
    assert not df["tuned_on_reported"].any()
    # no row marked: no † footnote on the screen or in compare.md (issue 28: it was printed anyway)
    assert "†" not in compared[0].output and "†" not in (compared[1] / "compare.md").read_text()
    out = tmp_path / "in-sample"
    r = compare_cli(informative, "--policy", "elimination", "--budgets", 4, "--seeds", 2, "--holdout", 0, "--out", out)
    df0 = pl.read_parquet(out / "compare.parquet")
    assert df0["tuned_on_reported"].all() and set(df0["n_tune"]) == {200} == set(df0["n_report"])
    assert "in-sample" in r.output and "†" in r.output
    assert set(pl.read_parquet(out / "split.parquet")["part"]) == {"tune+report"}


def test_a_policys_number_is_ttc_tunes_chosen_row(informative, compared, tmp_path):
    """compare tunes with tune's own code: elimination over DEFAULT_GRID's fields (K 1, 2; caps below the pool's 16
    responses) gives the same choice and held-out number as ttc tune with that grid, split and seeds."""
    df = compared[2]
    tuned = tmp_path / "tune.parquet"
    runner.invoke(app, ["tune", str(informative), "--policy", "elimination", "--K", "1,2", "--max-samples", "0,4,8",
                        "--budgets", "4,8", "--seeds", "8", "--holdout", "0.4", "--split-seed", "2", "--out",
                        str(tuned)])
    t = pl.read_parquet(tuned).filter((pl.col("row") == "chosen") & (pl.col("evaluated_on") == "report"))
    for row in t.iter_rows(named=True):
        c = df.filter((pl.col("policy") == "elimination") & (pl.col("budget") == row["budget"])).row(0, named=True)
        assert c["config"] == row["config"] and c["mean"] == row["mean"] and c["se"] == row["se"]


def test_gap_share_on_an_informative_synthetic_pool(informative, compared):
    df = compared[2]
    pool = load_pool(informative, side="score_side")
    r_idx = split_queries(pool.query_ids, 0.4, 2)[1]
    held = subset(pool, r_idx, "report")
    for b in (4.0, 8.0):
        g = df.filter(pl.col("budget") == b)
        new = g.filter(pl.col("policy") == "side-eb").row(0, named=True)
        best = g.filter(pl.col("is_best_published")).row(0, named=True)
        orc = g.filter(pl.col("policy") == "oracle").row(0, named=True)
        assert best["policy"] == "elimination" and new["side"] == "score_side"  # chosen on the tuning part
        assert set(g["best_published"]) == {"elimination"}
        # the oracle's number is a direct replay on the held-out queries alone (side-eb's: the next test)
        direct = replay(held, [RunConfig("oracle")], [b], range(8))[0]
        assert orc["mean"] == pytest.approx(direct["coverage"].mean(), abs=1e-12)
        # the arithmetic: mean of paired differences = difference of means (every seed present)
        assert new["vs_best"] == pytest.approx(new["mean"] - best["mean"], abs=1e-12)
        assert new["gap_share"] == pytest.approx((new["mean"] - best["mean"]) / (orc["mean"] - best["mean"]),
                                                 rel=1e-9)
        assert 0 < new["gap_share"] < 1 and new["gap_share_se"] > 0
    b4 = df.filter((pl.col("budget") == 4.0) & (pl.col("policy") == "side-eb")).row(0, named=True)
    assert b4["verdict"] == "better" and b4["vs_best"] > 2 * b4["vs_best_se"]


def test_side_eb_number_is_a_direct_replay(informative, compared):
    df = compared[2]
    pool = load_pool(informative, side="score_side")
    held = subset(pool, split_queries(pool.query_ids, 0.4, 2)[1], "report")
    from ttc.replay.tune import DEFAULT_GRID, default_grid, grid_configs

    grid = grid_configs(RunConfig("side-eb"), default_grid(RunConfig("side-eb"), 16))
    assert set(default_grid(RunConfig("side-eb"), 16)) <= set(DEFAULT_GRID)
    for r in df.filter(pl.col("policy") == "side-eb").iter_rows(named=True):
        cfg = next(c for c in grid if c.label() == r["config"])
        direct = replay(held, [cfg], [r["budget"]], range(8))[0]["coverage"]
        assert r["mean"] == pytest.approx(direct.mean(), abs=1e-12)
        assert r["se"] == pytest.approx(direct.std() / np.sqrt(8), abs=1e-12)


def test_gap_share_and_verdict_arithmetic():
    new, best, oracle = np.array([1.0, 2.0]), np.zeros(2), np.array([2.0, 4.0])
    r, se = gap_share(new, best, oracle)
    assert r == 0.5 and se == pytest.approx(0.0, abs=1e-12)  # d1 = d2 / 2 exactly: no uncertainty in the ratio
    new = np.array([0.1, 0.3, 0.2])
    r, se = gap_share(new, np.zeros(3), np.ones(3))
    assert r == pytest.approx(0.2) and se == pytest.approx(np.std(new, ddof=1) / np.sqrt(3))
    assert np.isnan(gap_share(new, np.ones(3), np.ones(3))[0])  # no gap to close
    assert paired(np.array([1.0, 3.0]), np.array([0.0, 0.0])) == (2.0, 1.0)
    assert verdict(0.3, 0.1) == "better" and verdict(-0.3, 0.1) == "worse" and verdict(0.2, 0.1) == "within 2 SE"


def test_a_pool_without_a_side_signal_runs_side_eb_without_one(tmp_path):
    """No score column: side-eb runs with no signal (0.5 for every response), its no-information control, and gets a
    verdict like any pool's: its held-out number is a direct replay of side-eb without --side."""
    out = tmp_path / "o"
    r = compare_cli(DEFAULT_POOL, "--policy", "uniform", "--budgets", 4, "--seeds", 2, "--out", out)
    df = pl.read_parquet(out / "compare.parquet")
    row = df.filter(pl.col("policy") == "side-eb").row(0, named=True)
    assert row["side"] == "none" and row["verdict"] in ("better", "worse", "within 2 SE")
    assert "no side signal" in r.output
    assert set(df["role"]) == {"published", "new", "hindsight"}
    plan = plan_pool(DEFAULT_POOL, CompareRequest(pools=[DEFAULT_POOL], budgets=[4], seeds=2, policies=["uniform"]))
    _, rp = plan.parts(load_pool(DEFAULT_POOL))
    cfg = next(c for c in plan.grids["side-eb"] if c.label() == row["config"])
    direct = replay(rp, [cfg], [4], range(2))[0]
    assert row["mean"] == pytest.approx(direct["coverage"].mean(), abs=1e-12)


def _no_truth(tmp_path):
    p = tmp_path / "nogt"
    write_pool(p, samples_frame({"query_id": ["a", "a", "b", "b"], "sample_idx": [0, 1, 0, 1],
                                 "score_x": [0.1, 0.9, 0.5, 0.5]}), meta={})
    return p


@pytest.mark.parametrize("args, message", [
    (["--holdout", "1"], "--holdout is the share"),
    (["--policy", "oracle"], "--policy oracle: not a published policy"),
    (["--policy", "side-eb"], "--policy side-eb: not a published policy"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--budgets", "0"], "--budgets must be finite and positive"),
    (["{pool}", "--side", "nope"], "--side: no column 'nope'"),
    (["{pool}", "{pool}"], "is given twice"),
    (["{nogt}"], "needs ground truth"),
    (["{pool}", "--out", "{pool}/x"], "which this command reads"),
    (["{pool}", "--out", "{mine}"], "exists and was not written by"),
    (["data/math500-llama3.1-8b-48", "--policy", "entropy"], "none of --policy entropy runs on this pool"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    fill = {"pool": DEFAULT_POOL, "nogt": _no_truth(tmp_path) if "{nogt}" in args else "", "mine": mine}
    small = (["--seeds", "2"] if "--seeds" not in args else []) + (["--budgets", "4"] if "--budgets" not in args
                                                                     else [])
    r = runner.invoke(app, ["compare", *[a.format(**fill) for a in args], *small])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output and r.output.count("error:") == 1
    assert (mine / "notes.txt").read_text() == "mine"


def test_deepconf_online_takes_part_on_a_pool_with_record_lows(tmp_path):
    """A pool with record lows: deepconf-online is one of the published policies, tuned over its own grid
    (tune.POLICY_GRID: its percentile is the share kept, not optscale's), and its number is a direct replay of the
    chosen configuration on the held-out part."""
    from ttc.replay.tune import POLICY_GRID

    from support.pools import lows_pool_dir

    path = lows_pool_dir(tmp_path)
    req = CompareRequest(pools=[path], budgets=[4], seeds=2, policies=["deepconf-online", "uniform"])
    plan = plan_pool(path, req)
    assert plan.roles["published"] == ["uniform", "deepconf-online"]
    grid = plan.grids["deepconf-online"]
    assert {c.percentile for c in grid} == set(POLICY_GRID["deepconf-online"]["percentile"])
    assert {c.tau for c in grid} == set(POLICY_GRID["deepconf-online"]["tau"])
    out = tmp_path / "o"
    compare_cli(path, "--policy", "deepconf-online,uniform", "--budgets", 4, "--seeds", 2, "--out", out)
    row = pl.read_parquet(out / "compare.parquet").filter(pl.col("policy") == "deepconf-online").row(0, named=True)
    _, rp = plan.parts(load_pool(path, lows=True))
    cfg = next(c for c in grid if c.label() == row["config"])
    assert row["mean"] == pytest.approx(replay(rp, [cfg], [4], range(2))[0]["coverage"].mean(), abs=1e-12)
