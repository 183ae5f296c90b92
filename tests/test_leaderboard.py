"""`ttc leaderboard`: the split, the held-out flag, the aggregate arithmetic, uniform against the exact curve, the
efficiency gain, and the refusals (an empty directory, a pool without ground truth, mixed units)."""
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.exact import coverage_at_k, efficiency_gain
from ttc.replay.leaderboard import (
    LeaderboardRequest,
    aggregate,
    find_pools,
    gain_from_curve,
    rank,
    run_leaderboard,
)
from ttc.replay.pool import load_pool, samples_frame, write_pool
from ttc.replay.tune import split_queries, subset


def _pool(path: Path, n=24, m=12, seed=0, tokens=True, answers=True, gt=True, name=None):
    rng = np.random.default_rng(seed)
    p = rng.beta(0.6, 0.6, n)
    cols = {"query_id": [], "sample_idx": [], "correct": [], "answer": [], "n_tokens": []}
    for q in range(n):
        for k in range(m):
            ok = bool(rng.random() < p[q])
            cols["query_id"].append(f"q{q:03d}")
            cols["sample_idx"].append(k)
            cols["correct"].append(ok)
            cols["answer"].append("right" if ok else f"wrong{rng.integers(3)}")
            cols["n_tokens"].append(int(rng.integers(100, 1000)))
    if not tokens:
        del cols["n_tokens"]
    if not answers:
        del cols["answer"]
    if not gt:
        del cols["correct"]
        cols["score_x"] = [0.5] * (n * m)
    return write_pool(path, samples_frame(cols), {"name": name or path.name})


def _quiet():
    from rich.console import Console

    return Console(file=open("/dev/null", "w"), width=200)


def test_reports_on_the_held_out_half_and_uniform_equals_the_exact_curve(tmp_path):
    _pool(tmp_path / "a", n=30, m=16)
    req = LeaderboardRequest(pools=[tmp_path / "a"], budgets=[1, 2, 4], token_multiples=[1, 2], seeds=400,
                             figures=False)
    df = run_leaderboard(req, console=_quiet())
    pool = load_pool(tmp_path / "a")
    t_idx, r_idx = split_queries(pool.query_ids, 0.5, 0)
    assert (df["n_tune"] == len(t_idx)).all() and (df["n_report"] == len(r_idx)).all()
    exact = coverage_at_k(subset(pool, r_idx, "report"), 4)
    uni = df.filter((pl.col("policy") == "uniform") & (pl.col("track") == "coverage") & (pl.col("unit") == "samples"))
    assert uni.height == 3
    for r in uni.iter_rows(named=True):
        k = int(r["level"])
        assert r["exact_uniform"] == pytest.approx(exact[k - 1], abs=1e-12)
        assert abs(r["mean"] - exact[k - 1]) <= 3 * r["se"] + 1e-12  # the replay's mean is the exact curve's
        assert r["samples_per_query"] == pytest.approx(k)
        assert r["gain"] == pytest.approx(1.0, abs=3 * r["se"] / max(exact[k - 1] - exact[k - 2], 1e-9)
                                          if k > 1 else 0.2)
    # the oracle is the ceiling on every track, and no live policy is above it beyond noise
    for (track, unit, lvl), g in df.group_by("track", "unit", "level"):
        orc = g.filter(pl.col("role") == "oracle")["mean"][0]
        assert (g.filter(pl.col("role") != "oracle")["mean"] <= orc + 1e-9).all(), (track, unit, lvl)
    # tuned on the other half: nothing flagged
    assert not df["tuned_on_reported"].any()
    # the tracks: coverage (bon, threshold) and sc (majority answer, answer-agreement rules), in both units
    assert set(df["track"]) == {"coverage", "sc"} and set(df["unit"]) == {"samples", "tokens"}
    sc = df.filter(pl.col("track") == "sc")
    assert {"uniform", "entropy+sc-beta", "elimination+esc", "oracle"} <= set(sc["policy"])
    assert (sc.filter(pl.col("role") != "oracle")["select"] == "sc").all()
    assert not sc["base_policy"].is_in(["ucb", "gap", "side-eb", "dsc"]).any()  # they would read the ground truth


def test_holdout_zero_flags_every_tuned_number(tmp_path):
    _pool(tmp_path / "a")
    req = LeaderboardRequest(pools=[tmp_path / "a"], budgets=[2], token_multiples=[1], seeds=4, holdout=0.0,
                             tracks=["coverage"], units=["samples"], out=tmp_path / "out", figures=False)
    df = run_leaderboard(req, console=_quiet())
    tuned = df.filter(~pl.col("role").is_in(["uniform", "oracle"]))
    assert tuned.height and tuned["tuned_on_reported"].all()
    assert not df.filter(pl.col("role").is_in(["uniform", "oracle"]))["tuned_on_reported"].any()
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "elimination †" in md and "ttc leaderboard" in md and "--holdout 0" in md


def test_rank_and_aggregate_arithmetic():
    assert rank([0.5, 0.7, 0.5, float("nan")]) == [2.5, 1.0, 2.5, 4.0]
    rows = []
    # two pools, one level: A beats uniform on both, B on one; gains 2, 4 for A
    for pool, (a, b, u), (ga, gb), (ba, bb) in (("p1", (0.9, 0.8, 0.7), (2.0, 1.5), (True, True)),
                                                 ("p2", (0.6, 0.6, 0.5), (4.0, 1.0), (True, False))):
        ranks = rank([a, b, u])
        for pol, m, role, g, beat, r in (("A", a, "published", ga, ba, ranks[0]),
                                         ("B", b, "published", gb, bb, ranks[1]),
                                         ("uniform", u, "uniform", 1.0, False, ranks[2])):
            rows.append({"track": "coverage", "unit": "samples", "level": 4.0, "policy": pol, "role": role,
                         "pool": pool, "mean": m, "rank": r, "beats_uniform": beat, "beats_best": pol == "A" and
                         pool == "p1", "gain": g, "gain_censored": g == 4.0, "gap_share": 0.5})
        rows.append({"track": "coverage", "unit": "samples", "level": 4.0, "policy": "oracle", "role": "oracle",
                     "pool": pool, "mean": 1.0, "rank": float("nan"), "beats_uniform": False, "beats_best": False,
                     "gain": 9.0, "gain_censored": False, "gap_share": float("nan")})
    agg = aggregate(pl.DataFrame(rows))
    a = agg.filter(pl.col("policy") == "A").row(0, named=True)
    b = agg.filter(pl.col("policy") == "B").row(0, named=True)
    assert a["pools"] == 2 and a["mean_rank"] == pytest.approx((1 + 1.5) / 2) and a["beats_uniform"] == 2
    assert a["beats_best"] == 1 and a["median_gain"] == pytest.approx(3.0) and a["gains_censored"] == 1
    assert b["mean_rank"] == pytest.approx((2 + 1.5) / 2) and b["beats_uniform"] == 1
    assert "oracle" not in agg["policy"].to_list()
    assert agg["policy"].to_list()[0] == "A"  # sorted by mean rank


def test_gain_from_curve_is_exacts_efficiency_gain_on_integer_budgets():
    curve = np.array([0.3, 0.5, 0.6, 0.65, 0.66])
    xs = np.arange(1, 6, dtype=float)
    for score, spend in ((0.55, 2.0), (0.3, 1.0), (0.1, 0.5), (0.7, 3.0), (0.66, 5.0)):
        assert gain_from_curve(xs, curve, score, spend) == pytest.approx(efficiency_gain(curve, score, spend))
    # at uneven budgets (tokens): linear between points
    g, cens = gain_from_curve(np.array([1.0, 3.0]), np.array([0.2, 0.6]), 0.4, 1.0)
    assert g == pytest.approx(2.0) and not cens
    assert gain_from_curve(np.array([1.0, 3.0]), np.array([0.2, 0.6]), 0.7, 1.5) == (2.0, True)
    # a score equal to the curve's last point up to rounding is reached there, not beyond it
    assert gain_from_curve(xs, curve, 0.66 + 1e-15, 5.0) == (pytest.approx(1.0), False)


def test_directories_of_pools(tmp_path):
    _pool(tmp_path / "pools" / "boinf" / "a")
    _pool(tmp_path / "pools" / "boinf" / "b", seed=1)
    _pool(tmp_path / "pools" / "autotts" / "c", seed=2)
    assert [p.name for p in find_pools([tmp_path / "pools" / "boinf"])] == ["a", "b"]
    assert [p.name for p in find_pools([tmp_path / "pools"])] == ["c", "a", "b"]  # autotts/ sorts before boinf/
    with pytest.raises(Exception, match="given twice"):
        find_pools([tmp_path / "pools" / "boinf", tmp_path / "pools" / "boinf" / "a"])


def _run(*args):
    return CliRunner().invoke(app, ["leaderboard", *map(str, args)])


def test_refuses_bad_input_with_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    r = _run(tmp_path / "empty", "--seeds", "2")
    assert r.exit_code == 2 and r.output.startswith("error: ") and "holds no pools" in r.output, r.output
    _pool(tmp_path / "nogt", gt=False)
    r = _run(tmp_path / "nogt", "--seeds", "2")
    assert r.exit_code == 2 and "needs ground truth" in r.output, r.output
    _pool(tmp_path / "tok")
    _pool(tmp_path / "notok", tokens=False, seed=3)
    r = _run(tmp_path / "tok", tmp_path / "notok", "--seeds", "2", "--units", "tokens", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "mixed units" in r.output and "notok" in r.output, r.output
    assert not (tmp_path / "o").exists()
    for args, says in ((["--tracks", "verify"], "unknown track"), (["--units", "hours"], "unknown unit"),
                       (["--seeds", "1"], "--seeds must be >= 2"), (["--budgets", "0"], "finite and positive"),
                       (["--holdout", "1"], "--holdout")):
        r = _run(tmp_path / "tok", *args)
        assert r.exit_code == 2 and says in r.output, (args, r.output)
    assert len(r.output.strip().splitlines()) == 1


def test_cli_writes_every_output_and_mixes_pools_with_and_without_tokens(tmp_path):
    pytest.importorskip("matplotlib")
    _pool(tmp_path / "tok")
    _pool(tmp_path / "plain", tokens=False, answers=False, seed=4)
    r = _run(tmp_path / "tok", tmp_path / "plain", "--seeds", "3", "--budgets", "1,2", "--token-multiples", "1",
             "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    df = pl.read_parquet(out / "leaderboard.parquet")
    assert set(df.filter(pl.col("pool") == "plain")["track"]) == {"coverage"}  # no answers: no sc track
    assert set(df.filter(pl.col("pool") == "plain")["unit"]) == {"samples"}  # no token counts: samples only
    assert pl.read_parquet(out / "aggregate.parquet").height
    for kind in ("heatmap", "curves"):
        for ext in ("pdf", "png"):
            assert (out / "figures" / f"{kind}_coverage_samples.{ext}").stat().st_size > 1000
    md = (out / "leaderboard.md").read_text()
    assert md.startswith("# ttc leaderboard\n\n```bash\nttc leaderboard ") and "## Across pools" in md
    assert json.loads((out / ".ttc-output.json").read_text())["command"] == "leaderboard"


def test_depth_against_width_at_equal_tokens_on_a_probed_pool(tmp_path):
    """On a probed pool the sc track in tokens runs the width x depth entries beside the width-only ones; per token
    budget the best of each kind is the one of best tuning-half mean, both held-out at the same budget, and depth's
    difference is their paired difference over seeds. A pool without probes has no depth entries."""
    from ttc.replay.leaderboard import DEPTH_GRID, depth_vs_width

    from support.depth_pools import probed_pool_dir

    probed_pool_dir(tmp_path / "pools" / "probed", n_queries=12, max_traces=10, max_probes=8)
    _pool(tmp_path / "pools" / "plain", n=12, m=8)
    out = tmp_path / "lb"
    req = LeaderboardRequest(pools=[tmp_path / "pools"], budgets=[2], token_multiples=[1, 3], seeds=12, out=out,
                             tracks=["sc"], figures=False)
    df = run_leaderboard(req, console=_quiet())
    depth = df.filter(pl.col("kind") == "depth")
    assert set(depth["pool"]) == {"probed"} and set(depth["unit"]) == {"tokens"}
    assert set(DEPTH_GRID) <= set(depth["policy"]) and "uniform+stability" in set(depth["policy"])
    dw = depth_vs_width(df)
    assert dw.height == 2 and set(dw["pool"]) == {"probed"}
    for r in dw.iter_rows(named=True):
        cell = df.filter((pl.col("pool") == "probed") & (pl.col("unit") == "tokens") & (pl.col("level") == r["level"])
                         & (pl.col("role") != "oracle"))
        for kind in ("width", "depth"):
            g = cell.filter(pl.col("kind") == kind)
            best = g.filter(pl.col(f"is_best_{kind}"))
            assert best.height == 1 and best["policy"][0] == r[f"{kind}_policy"]
            if kind == "depth":  # (uniform's own tuning mean is not kept in its row: the depth side is checked)
                assert best["tune_mean"][0] == g["tune_mean"].max()
            assert r[f"{kind}_tokens_per_query"] <= r["budget"]  # (equal tokens: neither passes the budget)
        assert r["diff"] == pytest.approx(r["depth_mean"] - r["width_mean"], abs=1e-12)
        assert r["diff_se"] >= 0 and r["verdict"] in ("better", "worse", "within 2 SE")
    assert (out / "depth.parquet").is_file()
    assert "Depth against width at equal tokens" in (out / "leaderboard.md").read_text()
    plain = run_leaderboard(LeaderboardRequest(pools=[tmp_path / "pools" / "plain"], budgets=[2],
                                               token_multiples=[1], seeds=4, tracks=["sc"], figures=False),
                            console=_quiet())
    assert (plain["kind"] != "depth").all() and depth_vs_width(plain).height == 0
