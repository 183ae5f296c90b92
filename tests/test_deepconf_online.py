"""deepconf-online (DeepConf's online mode, docs/semantics.md): a hand-computed run, its threshold against numpy's
percentile (the source's), and the command line's refusals. The engine equals its reference on random pools in
tests/test_equivalence.py (run_once and the lazy grid)."""

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.engine import replay, run_once
from ttc.replay.policies import RunConfig
from ttc.replay.pool import load_pool
from ttc.replay.reference import deepconf_threshold, run_reference

from support.pools import lows_pool_dir

# one query of 6 responses, drawn in sample order; lowest group confidences 5, 3, 4 in the warm-up
TOK = [10, 20, 30, 40, 50, 60]
LOWS = [([9], [5.0]), ([4, 12], [6.0, 3.0]), ([29], [4.0]),     # warm-up (whole, whatever their lows)
        ([2, 7, 30], [9.0, 3.5, 2.0]),                            # below s = 4: stops at position 7, pays 8 tokens
        ([49], [4.5]),                                            # at or above 4: whole, votes with weight 4.5
        ([59], [4.2])]
ANS = [0, 1, 0, 1, 1, 0]
CORRECT = [1, 0, 1, 1, 0, 1]


def _lows_arrays(lists):
    loff = np.concatenate([[0], np.cumsum([len(p) for p, _ in lists])]).astype(np.int64)
    return loff, np.array([x for p, _ in lists for x in p], np.int64), np.array([x for _, v in lists for x in v])


def _run(cfg, budget, lists=LOWS, ans=ANS):
    args = ([0, 6], CORRECT, [0.5] * 6, ans, TOK, list(range(6)), [0])
    got = run_once(*args, cfg, budget, lows=_lows_arrays(lists))
    ref = run_reference(*args, budget_total=budget, policy=cfg.policy, unit=cfg.unit, warmup=cfg.warmup,
                        percentile=cfg.percentile, tau=cfg.tau, max_samples=cfg.max_samples, lows=lists)
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_weighted", "sel_sc", "sel_bon"):
        assert [int(x) for x in got[key]] == [int(x) for x in ref[key]], key
    assert (got["samples_used"], got["tokens_used"]) == (ref["samples_used"], ref["tokens_used"])
    return got


def test_a_hand_computed_run():
    # warm-up of 3: lows 5, 3, 4; percentile 0.5 keeps the top half: s = the median, 4. Votes: response 0 (answer 0,
    # weight 5) and 2 (answer 0, weight 4); response 1 (3 < 4) is whole but does not vote. Consensus 9 / 9 >= 0.95:
    # the query stops after its warm-up.
    got = _run(RunConfig("deepconf-online", warmup=3, percentile=0.5, tau=0.95), 100)
    assert got["n_drawn"].tolist() == [3] and got["answered"].tolist() == [True] and got["tokens_used"] == 60
    # a warm-up of 2 (lows 5, 3: s = 4 by interpolation) leaves one vote, response 0's: consensus 5 / 5 at once
    got = _run(RunConfig("deepconf-online", warmup=2, percentile=0.5, tau=0.95), 100)
    assert got["n_drawn"].tolist() == [2] and got["tokens_used"] == 30 and got["answered"].tolist() == [True]
    # answers 1 for the warm-up's votes: response 0 votes 1 (weight 5), response 2 votes 0 (4): 5/9 < 0.6; response 3
    # stops at its first low below 4 (position 7: 8 tokens, no vote); response 4 votes 1 (4.5): 9.5 / 13.5 >= 0.6
    lists = LOWS
    args = ([0, 6], CORRECT, [0.5] * 6, [1, 1, 0, 1, 1, 0], TOK, list(range(6)), [0])
    cfg = RunConfig("deepconf-online", warmup=3, percentile=0.5, tau=0.7)
    for unit, budget in (("samples", 100), ("tokens", 1000)):
        cfg = RunConfig("deepconf-online", unit=unit, warmup=3, percentile=0.5, tau=0.7)
        got = run_once(*args, cfg, budget, lows=_lows_arrays(lists))
        assert got["n_drawn"].tolist() == [5] and got["samples_used"] == 5, unit  # a stopped trace: one sample
        assert got["tokens_used"] == 10 + 20 + 30 + 8 + 50 and got["answered"].tolist() == [True]
        assert got["sel_weighted"].tolist() == [True]  # answer 1 wins; its first vote is response 0, correct
    # a token budget that pays the stopped trace's 8 tokens but not response 4's 50 ends there
    got = run_once(*args, RunConfig("deepconf-online", unit="tokens", warmup=3, percentile=0.5, tau=0.7), 60 + 8 + 49,
                   lows=_lows_arrays(lists))
    assert got["n_drawn"].tolist() == [4] and got["tokens_used"] == 68 and got["answered"].tolist() == [False]
    # a cap of 4 (the per-query budget): capped after the stopped trace
    got = _run(RunConfig("deepconf-online", warmup=3, percentile=0.5, tau=0.99, max_samples=4), 100,
               ans=[1, 1, 0, 1, 1, 0])
    assert got["n_drawn"].tolist() == [4] and got["answered"].tolist() == [False] and got["tokens_used"] == 68


@pytest.mark.parametrize("keep", [10, 90])
def test_threshold_is_numpys_percentile(keep):
    """The source: conf_bar = np.percentile(min_confs, 100 - confidence_percentile); confidence_percentile 10 keeps
    the top 10% (DeepConf-low), 90 the top 90% (DeepConf-high); percentile here is that share, keep / 100."""
    rng = np.random.default_rng(keep)
    for m in list(range(1, 40)) + [64, 128, 512]:
        for _ in range(5):
            v = np.round(rng.uniform(1, 15, m), rng.integers(1, 6)).tolist()
            want = float(np.percentile(v, 100 - keep))
            # (numpy's interpolation index differs from (m - 1) (1 - p) by ulps: docs/semantics.md)
            assert deepconf_threshold(v, keep / 100) == pytest.approx(want, rel=1e-13, abs=0), (m, v)


def test_command_line(tmp_path):
    runner = CliRunner()
    plain = lows_pool_dir(tmp_path, with_lows=False)
    r = runner.invoke(app, ["replay", str(plain), "--policy", "deepconf-online", "--seeds", "2", "--budgets", "4"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.count("\n") == 1 and "deepconf-online needs each response's record lows" in r.output
    lows = lows_pool_dir(tmp_path)
    r = runner.invoke(app, ["replay", str(lows), "--policy", "deepconf-online,uniform", "--seeds", "3", "--budgets",
                            "4,8", "--warmup", "2", "--percentile", "0.1", "--tau", "0.95", "--select", "weighted",
                            "--unit", "tokens", "--out", str(tmp_path / "r.parquet")])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(tmp_path / "r.parquet")
    online = df.filter(pl.col("policy") == "deepconf-online")
    assert online.height == 6 and online["config"][0] == "deepconf-online(warmup=2, percentile=0.1, tau=0.95, tokens)"
    assert (online["tokens_used"] <= online["budget_total"]).all() and online["accuracy_cisc"].is_nan().all()
    r = runner.invoke(app, ["replay", str(lows), "--policy", "deepconf-online", "--select", "cisc", "--seeds", "1"])
    assert r.exit_code == 2 and "--select cisc votes over every drawn response" in r.output
    # without --policy, a pool with the record lows runs it among every policy it supports; without them, not
    r = runner.invoke(app, ["replay", str(lows), "--seeds", "1", "--budgets", "4",
                            "--out", str(tmp_path / "a.parquet")])
    assert r.exit_code == 0, r.output
    assert "deepconf-online" in pl.read_parquet(tmp_path / "a.parquet")["policy"].to_list()
    r = runner.invoke(app, ["replay", str(plain), "--seeds", "1", "--budgets", "4",
                            "--out", str(tmp_path / "b.parquet")])
    assert r.exit_code == 0 and "deepconf-online" not in pl.read_parquet(tmp_path / "b.parquet")["policy"].to_list()


def test_grid_equals_run_once_and_refuses_without_lows(tmp_path):
    pool = load_pool(lows_pool_dir(tmp_path), lows=True)
    cfg = RunConfig("deepconf-online", warmup=3, percentile=0.5, tau=0.8)
    df, _ = replay(pool, [cfg], [5], range(4), select="weighted")
    assert df.height == 4 and (df["samples_used"] <= 30).all()
    pool.lows = None
    with pytest.raises(Exception, match="needs each response's record lows"):
        replay(pool, [cfg], [5], range(2))
