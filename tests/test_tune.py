"""`ttc tune`: a deterministic, recorded split; held-out numbers that equal a direct replay of the chosen
configuration on the held-out queries alone; `tuned_on_reported` set exactly when tuning and reporting data
overlap; one-line refusals."""
import math

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.engine import replay
from ttc.replay.outputs import written_by
from ttc.replay.policies import RunConfig
from ttc.replay.pool import DEFAULT_POOL, Pool, load_pool
from ttc.replay.tune import split_digest, split_queries, subset

runner = CliRunner()
ARGS = ["--policy", "elimination", "--max-samples", "2,4,0", "--budgets", "2,4", "--seeds", "4"]


def tune_cli(*args):
    r = runner.invoke(app, ["tune", *args])
    assert r.exit_code == 0, r.output
    return r


def test_split_is_deterministic_disjoint_and_seeded():
    ids = [f"q{i:03d}" for i in range(101)]
    t, r = split_queries(ids, 0.3, 7)
    t2, r2 = split_queries(ids, 0.3, 7)
    assert np.array_equal(t, t2) and np.array_equal(r, r2)
    assert len(r) == 30 and len(t) == 71 and not set(t) & set(r) and set(t) | set(r) == set(range(101))
    assert not np.array_equal(split_queries(ids, 0.3, 8)[1], r)  # another seed, another split
    every = split_queries(ids, 0.0, 7)
    assert np.array_equal(every[0], np.arange(101)) and np.array_equal(every[1], np.arange(101))


def test_subset_keeps_every_column_and_replays_like_a_pool_of_those_queries():
    pool = load_pool(DEFAULT_POOL)
    idx = np.array([3, 10, 11, 400])
    sub = subset(pool, idx, "x")
    rows = np.concatenate([np.arange(pool.off[i], pool.off[i + 1]) for i in idx])
    built = Pool.from_arrays(np.concatenate([[0], np.cumsum(pool.sizes[idx])]), correct=pool.correct[rows],
                             ans=pool.ans[rows], query_ids=[pool.query_ids[i] for i in idx])
    cfg = [RunConfig("elimination"), RunConfig("entropy")]
    a = replay(sub, cfg, [3], range(5), select="sc")[0]
    b = replay(built, cfg, [3], range(5), select="sc")[0]
    assert a.select("coverage", "accuracy", "samples_used").equals(b.select("coverage", "accuracy", "samples_used"))
    assert sub.has_answers and sub.score_name == pool.score_name and sub.query_ids == built.query_ids


def test_held_out_rows_equal_a_direct_replay_of_the_chosen_config(tmp_path):
    out, split = tmp_path / "t.parquet", tmp_path / "split.parquet"
    tune_cli(*ARGS, "--holdout", "0.4", "--split-seed", "3", "--out", str(out), "--split-out", str(split))
    df = pl.read_parquet(out)
    assert written_by(out) == "tune" and written_by(split) == "tune"
    pool = load_pool(DEFAULT_POOL)
    t_idx, r_idx = split_queries(pool.query_ids, 0.4, 3)
    # the split is recorded: its parameters and digest in every row, the assignment in --split-out
    assert set(df["holdout"]) == {0.4} and set(df["split_seed"]) == {3}
    held = [pool.query_ids[i] for i in r_idx]
    assert set(df["report_digest"]) == {split_digest(held)}
    assert set(df["n_report"]) == {len(r_idx)} and set(df["n_tune"]) == {len(t_idx)}
    s = pl.read_parquet(split)
    assert sorted(s.filter(pl.col("part") == "report")["query_id"].to_list()) == sorted(held)
    assert s.filter(pl.col("part") == "tune").height == len(t_idx)
    # held-out numbers: a direct replay of the chosen configuration on a pool of the held-out queries only
    rows = np.concatenate([np.arange(pool.off[i], pool.off[i + 1]) for i in r_idx])
    heldout = Pool.from_arrays(np.concatenate([[0], np.cumsum(pool.sizes[r_idx])]), correct=pool.correct[rows],
                               ans=pool.ans[rows], query_ids=held)
    for r in df.filter((pl.col("row") == "chosen") & (pl.col("evaluated_on") == "report")).iter_rows(named=True):
        cfg = RunConfig("elimination", max_samples=r["max_samples"])
        assert cfg.label() == r["config"]
        direct = replay(heldout, [cfg], [r["budget"]], range(4))[0]
        assert r["mean"] == pytest.approx(direct["coverage"].mean(), abs=1e-12)
        assert r["se"] == pytest.approx(direct["coverage"].std() / 2, abs=1e-12)
    # the choice is the best mean on the tuning part
    tuned = {}
    for r in df.filter(pl.col("evaluated_on") == "tune").iter_rows(named=True):
        tuned[r["budget"]] = r["mean"]
    rows_t = np.concatenate([np.arange(pool.off[i], pool.off[i + 1]) for i in t_idx])
    tpool = Pool.from_arrays(np.concatenate([[0], np.cumsum(pool.sizes[t_idx])]), correct=pool.correct[rows_t],
                             ans=pool.ans[rows_t], query_ids=[pool.query_ids[i] for i in t_idx])
    grid = [RunConfig("elimination", max_samples=m) for m in (2, 4, 0)]
    means = replay(tpool, grid, [2, 4], range(4))[0].group_by("config", "budget").agg(pl.col("coverage").mean())
    for b, best in tuned.items():
        assert best == pytest.approx(means.filter(pl.col("budget") == b)["coverage"].max())


def flags(df):
    return {(r["row"], r["evaluated_on"]): r["tuned_on_reported"] for r in df.iter_rows(named=True)}


def test_flag_set_exactly_when_tuning_and_reporting_data_overlap(tmp_path):
    split = tmp_path / "a.parquet"
    tune_cli(*ARGS, "--out", str(split))
    assert flags(pl.read_parquet(split)) == {("chosen", "tune"): True, ("chosen", "report"): False,
                                             ("default", "report"): False, ("post-hoc best", "report"): True}
    same = tmp_path / "b.parquet"
    r = tune_cli(*ARGS, "--holdout", "0", "--out", str(same))
    assert "in-sample" in r.output
    assert flags(pl.read_parquet(same))[("chosen", "report")] is True
    again = tmp_path / "c.parquet"  # the same pool given as the reporting pool: the same data
    tune_cli(*ARGS, "--report-pool", str(DEFAULT_POOL), "--out", str(again))
    assert flags(pl.read_parquet(again))[("chosen", "report")] is True
    # another pool of the same queries' responses: no overlap of data
    other = tmp_path / "other"
    other.mkdir()
    for f in ("samples.parquet", "queries.parquet", "pool.json"):
        (other / f).write_bytes((DEFAULT_POOL / f).read_bytes())
    elsewhere = tmp_path / "d.parquet"
    r = tune_cli(*ARGS, "--report-pool", str(other), "--out", str(elsewhere))
    df = pl.read_parquet(elsewhere)
    assert flags(df)[("chosen", "report")] is False and set(df["report_pool"]) == {str(other)}
    assert "†" in r.output


def test_method_tunes_its_own_selection(tmp_path):
    out = tmp_path / "m.parquet"
    tune_cli("--method", "adaptive-consistency", "--max-samples", "8,40", "--budgets", "4", "--seeds", "3", "--out",
             str(out))
    df = pl.read_parquet(out)
    assert set(df["select"]) == {"sc"} and set(df["metric"]) == {"accuracy"}
    assert set(df["eliminate"]) == {"sc-beta"}
    assert df.filter(pl.col("row") == "default")["config"][0] == "elimination(eliminate=sc-beta, max_samples=40)"


@pytest.mark.parametrize("args, message", [
    (["--policy", "ucb", "--rho", "0.5"], "--rho does not apply to ucb"),
    (["--policy", "ucb"], "give at least one parameter grid"),
    (["--policy", "ucb", "--method", "esc", "--K", "1"], "give one of --policy NAME or --method NAME"),
    (["--method", "nope", "--K", "1"], "unknown method 'nope'"),
    (["--policy", "nope", "--K", "1"], "unknown policy 'nope'"),
    (["--policy", "ucb", "--lambda", "1", "--holdout", "1"], "--holdout is the share"),
    (["--policy", "ucb", "--lambda", "1", "--holdout", "0.5", "--report-pool", "data/math500-llama3.1-8b-48"],
     "give one or the other"),
    (["--policy", "ucb", "--grid", "nofield=1"], "RunConfig has no field 'nofield'"),
    (["--policy", "ucb", "--lambda", "-1"], "lambda must be a finite number >= 0"),
    (["--policy", "ucb", "--lambda", "1", "--metric", "speed"], "--metric must be coverage or accuracy"),
    (["--method", "self-consistency", "--select", "bon", "--lambda", "1"], "selects by sc"),
])
def test_bad_input_is_one_line(args, message):
    r = runner.invoke(app, ["tune", *args, "--seeds", "2", "--budgets", "2"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output and r.output.count("error:") == 1


def test_subset_carries_each_querys_own_side_signal_and_prior():
    """A sub-pool pairs each kept query with its own per-response side signal and per-query prior (side-eb and
    marginal-gain read them): left whole, they would be read against other queries' responses."""
    import dataclasses

    pool = load_pool(DEFAULT_POOL)
    total = int(pool.off[-1])
    pool = dataclasses.replace(pool, side=np.arange(total) / total, prior=np.linspace(0, 1, pool.n_queries))
    idx = np.array([1, 7, 300])
    sub = subset(pool, idx, "x")
    rows = np.concatenate([np.arange(pool.off[i], pool.off[i + 1]) for i in idx])
    assert np.array_equal(sub.side, pool.side[rows]) and np.array_equal(sub.prior, pool.prior[idx])
    bare = subset(dataclasses.replace(pool, side=None, prior=None), idx, "y")
    assert bare.side is None and bare.prior is None


def test_invalid_votes_reach_the_tuned_runs(tmp_path):
    args = ["--method", "ac-majority", "--share", "0.6,0.8", "--budgets", "8", "--seeds", "3"]
    r = tune_cli(*args, "--invalid-votes", "--out", str(tmp_path / "v.parquet"))
    assert "invalid answers vote" in r.output
    tune_cli(*args, "--out", str(tmp_path / "d.parquet"))
    v, d = pl.read_parquet(tmp_path / "v.parquet"), pl.read_parquet(tmp_path / "d.parquet")
    assert v["invalid_votes"].all() and not d["invalid_votes"].any()
    cost = [c for c in v.columns if "samples" in c or "cost" in c]
    assert cost and v.select(cost).to_dicts() != d.select(cost).to_dicts()


def test_the_vote_parameters_reach_the_runs(tmp_path):
    args = ["--policy", "elimination", "--select", "cisc", "--metric", "accuracy", "--max-samples", "2,4", "--budgets",
            "4", "--seeds", "3"]
    tune_cli(*args, "--cisc-temp", "0.05", "--out", str(tmp_path / "a.parquet"))
    tune_cli(*args, "--cisc-temp", "inf", "--out", str(tmp_path / "b.parquet"))
    a, b = pl.read_parquet(tmp_path / "a.parquet"), pl.read_parquet(tmp_path / "b.parquet")
    assert set(a["cisc_temp"]) == {0.05} and set(b["cisc_temp"]) == {math.inf}
    assert a["mean"].to_list() != b["mean"].to_list()  # (--score gt: a low T weighs the correct answers up)
    r = runner.invoke(app, ["tune", *args, "--cisc-temp", "0"])
    assert r.exit_code == 2 and "--cisc-temp must be >= 1/700" in r.output


def test_subset_carries_each_responses_own_record_lows_and_deepconf_online_tunes(tmp_path):
    """deepconf-online reads each response's record lows: a sub-pool keeps its queries' own (replaying it equals
    replaying a pool of those queries alone), and `ttc tune --policy deepconf-online` loads them."""
    from support.pools import lows_pool_dir

    path = lows_pool_dir(tmp_path)
    pool = load_pool(path, lows=True)
    idx = np.array([1, 4, 5])
    sub = subset(pool, idx, "x")
    keep = pl.read_parquet(path / "samples.parquet").filter(pl.col("query_id").is_in([pool.query_ids[i] for i in idx]))
    from ttc.replay.pool import write_pool

    alone = load_pool(write_pool(tmp_path / "alone", keep, meta={"name": "t"}), lows=True)
    cfg = [RunConfig("deepconf-online", warmup=2, percentile=0.5, tau=0.8, unit="tokens")]
    a = replay(sub, cfg, [60], range(6), select="weighted")[0]
    b = replay(alone, cfg, [60], range(6), select="weighted")[0]
    cols = ("accuracy", "samples_used", "tokens_used")
    assert a.select(*cols).equals(b.select(*cols))
    r = tune_cli(str(path), "--policy", "deepconf-online", "--grid", "percentile=0.1,0.5", "--budgets", "6", "--seeds",
                 "3")
    assert "deepconf-online(percentile=0.1)" in r.output


def test_subset_carries_each_responses_own_probes_and_depth_tunes(tmp_path):
    """The depth policies read each trace's probes: a sub-pool keeps its queries' own (replaying it equals replaying a
    pool of those queries alone, for parallel-probe, cmc and a width policy under a depth rule), and `ttc tune`
    loads them and tunes depth's parameters (the depth rule and its m, the trace cap) beside a policy's own."""
    from support.depth_pools import probed_pool_dir

    path = probed_pool_dir(tmp_path / "probed")
    pool = load_pool(path, probes=True)
    keep = [1, 4, 5, 7]
    sub = subset(pool, np.array(keep), "x")
    alone = load_pool(probed_pool_dir(tmp_path / "alone", keep=keep), probes=True)
    cfgs = [RunConfig("parallel-probe", unit="tokens", chains=3, stable=2, patience=2, probe_warmup=1),
            RunConfig("cmc", unit="tokens", cmc_beta=0.3),
            RunConfig("elimination", unit="tokens", eliminate="sc-share", depth_rule="stability", depth_m=2),
            RunConfig("uniform", unit="tokens", trace_cap=1500)]
    cols = ("config", "accuracy", "samples_used", "tokens_used")
    a = replay(sub, cfgs, [3000], range(6), select="sc")[0]
    b = replay(alone, cfgs, [3000], range(6), select="sc")[0]
    assert a.select(*cols).equals(b.select(*cols))
    whole = replay(pool, cfgs, [3000], range(6), select="sc")[0]
    assert not a.select(*cols).equals(whole.select(*cols))  # (the sub-pool is not the whole pool by accident)
    r = tune_cli(str(path), "--policy", "elimination", "--eliminate", "sc-share", "--unit", "tokens", "--select", "sc",
                 "--metric", "accuracy", "--depth-rule", "whole,stability", "--depth-m", "2,3", "--budgets", "3000",
                 "--seeds", "3", "--holdout", "0.5")
    assert "depth=stability:2" in r.output
    r = tune_cli(str(path), "--policy", "parallel-probe", "--unit", "tokens", "--select", "sc", "--metric",
                 "accuracy", "--chains", "2,4", "--trace-cap", "0,1500", "--budgets", "3000", "--seeds", "3")
    assert "parallel-probe: 4 configurations" in r.output  # (2 chains x 2 caps)
    # depth_m without the stability rule would only repeat one configuration; parallel-probe has no depth rule
    for args, says in ((["--policy", "uniform", "--depth-m", "2,3"], "--depth-m does not apply"),
                       (["--policy", "parallel-probe", "--depth-rule", "stability"], "--depth-rule does not apply")):
        r = runner.invoke(app, ["tune", str(path), "--unit", "tokens", "--select", "sc", *args])
        assert r.exit_code == 2 and says in r.output, r.output
