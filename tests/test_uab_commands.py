"""uab (a policy that needs a per-response side signal) in the commands that tune and compare: `ttc compare --side`,
`ttc report --side` (its methods table) and `ttc leaderboard` (the first of --side a pool has). Where the pool has the
column, uab's number is a direct replay of its chosen configuration with that column as its side signal; where it
has none, uab is listed as not run with the reason, never a silent hole; a --side no pool has is one error line."""
import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.compare import CompareRequest, plan_pool
from ttc.replay.engine import replay
from ttc.replay.leaderboard import LeaderboardRequest, entries, run_leaderboard
from ttc.replay.policies import METHODS
from ttc.replay.pool import load_pool
from ttc.replay.report import ReportRequest, method_budgets, run_report
from ttc.replay.tune import split_queries, subset

from support.pools import quiet, write_pool

runner = CliRunner()


def conf_pool(d, n=24, m=8, seed=5, conf=True):
    """n queries x m responses with answers and, with `conf`, score_conf: a confidence higher on queries that are
    often right (what uab reads as its difficulty signal), with ties."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.5, 0.8, n)
    correct = rng.random(n * m) < np.repeat(p, m)
    answer = np.where(correct, "right", np.array(["w1", "w2"])[rng.integers(0, 2, n * m)]).tolist()
    c = np.clip(np.repeat(p, m) * 0.8 + rng.normal(0, 0.1, n * m), 0, 1).round(2)
    return write_pool(d, [m] * n, correct.tolist(), answer, scores={"conf": c.tolist()} if conf else None)


def cli(*args, code=0):
    r = runner.invoke(app, [*map(str, args)])
    assert r.exit_code == code, r.output
    return r


# ------------------------------------------------------------------------------------------------------ compare

def test_compare_runs_uab_with_side_and_its_number_is_a_direct_replay(tmp_path):
    path = conf_pool(tmp_path / "p")
    out = tmp_path / "o"
    cli("compare", path, "--policy", "uniform,uab", "--side", "score_conf", "--budgets", "2,4", "--seeds", 3,
        "--out", out)
    df = pl.read_parquet(out / "compare.parquet")
    rows = df.filter(pl.col("policy") == "uab")
    assert rows.height == 2 and (rows["role"] == "published").all()
    req = CompareRequest(pools=[path], budgets=[2, 4], seeds=3, policies=["uniform", "uab"], side="score_conf")
    plan = plan_pool(path, req)
    assert plan.skipped == {} and "uab" in plan.roles["published"]
    _, rp = plan.parts(load_pool(path, side="score_conf"))
    for r in rows.iter_rows(named=True):
        cfg = next(c for c in plan.grids["uab"] if c.label() == r["config"])
        direct = replay(rp, [cfg], [r["budget"]], range(3))[0]
        assert r["mean"] == pytest.approx(direct["coverage"].mean(), abs=1e-12)
    # uab's grid is its temperature (tune.POLICY_GRID), so the side signal changes what it does
    assert {c.uab_tau for c in plan.grids["uab"]} == {0.1, 0.2, 0.5}


def test_compare_without_side_lists_uab_as_not_run(tmp_path):
    path = conf_pool(tmp_path / "p")
    out = tmp_path / "o"
    r = cli("compare", path, "--policy", "uniform,uab", "--budgets", 2, "--seeds", 2, "--out", out)
    assert "uab: not run: needs a per-response side signal" in r.output and "give --side COLUMN" in r.output
    assert "uab" not in set(pl.read_parquet(out / "compare.parquet")["policy"])
    md = (out / "compare.md").read_text()
    assert "Not run on this pool:" in md and "- `uab`: needs a per-response side signal" in md


def test_compare_refuses_a_side_column_a_pool_lacks_in_one_line(tmp_path):
    a, b = conf_pool(tmp_path / "a"), conf_pool(tmp_path / "b", conf=False)
    r = cli("compare", a, b, "--side", "score_conf", "--budgets", 2, "--seeds", 2, code=2)
    assert r.output.count("error:") == 1 and "Traceback" not in r.output
    assert "--side: no column 'score_conf'" in r.output and str(b) in r.output


# ------------------------------------------------------------------------------------------------------- report

def test_report_runs_the_uab_method_where_the_pool_has_the_side_column(tmp_path):
    """Two pools, one with score_conf: uab's method row equals a direct replay there; on the other it is listed as
    not run, naming the column."""
    a, b = conf_pool(tmp_path / "a"), conf_pool(tmp_path / "b", conf=False)
    req = ReportRequest(pools=[a, b], out=tmp_path / "rep", budgets=[2.0, 4.0], seeds=3, side="score_conf",
                        threads=1)
    text = run_report(req, console=quiet).read_text()
    assert "--side score_conf" in text
    tab = tmp_path / "rep" / "a" / "tables"
    status = pl.read_csv(tab / "methods_status.csv")
    assert status.filter(pl.col("method") == "uab")["applies"].item()
    got = pl.read_csv(tab / "methods.csv").filter(pl.col("method") == "uab").sort("budget")
    cfg = METHODS["uab"].run_config(unit="samples", gamma=req.gamma, max_samples=req.max_samples)
    direct = replay(load_pool(a, side="score_conf"), [cfg], method_budgets(req.budgets), range(3))[0]
    assert got["budget"].to_list() == method_budgets(req.budgets)
    for x in got.iter_rows(named=True):
        d = direct.filter(pl.col("budget") == x["budget"])
        assert x["coverage"] == pytest.approx(d["coverage"].mean(), abs=1e-12)
        assert x["accuracy"] == pytest.approx(d[f"accuracy_{METHODS['uab'].select}"].mean(), abs=1e-12)
    other = pl.read_csv(tmp_path / "rep" / "b" / "tables" / "methods_status.csv").filter(pl.col("method") == "uab")
    assert not other["applies"].item() and "no column 'score_conf' (--side)" in other["reason"].item()
    assert "- `uab`: needs a per-response side signal: this pool has no column 'score_conf'" in text


def test_report_without_side_says_how_to_run_uab(tmp_path):
    a = conf_pool(tmp_path / "a")
    run_report(ReportRequest(pools=[a], out=tmp_path / "rep", budgets=[2.0], seeds=2, threads=1), console=quiet)
    row = pl.read_csv(tmp_path / "rep" / "a" / "tables" / "methods_status.csv").filter(pl.col("method") == "uab")
    assert not row["applies"].item() and "give --side COLUMN" in row["reason"].item()


def test_report_refuses_a_side_column_no_pool_has_in_one_line(tmp_path):
    a = conf_pool(tmp_path / "a")
    r = cli("report", a, "--out", tmp_path / "rep", "--side", "score_nope", "--budgets", 2, "--seeds", 2, code=2)
    assert r.output.count("error:") == 1 and "--side: no pool given has a column 'score_nope'" in r.output
    assert not (tmp_path / "rep").exists()


# -------------------------------------------------------------------------------------------------- leaderboard

def test_leaderboard_runs_uab_on_pools_with_a_confidence_and_lists_it_elsewhere(tmp_path):
    a, b = conf_pool(tmp_path / "pools" / "a"), conf_pool(tmp_path / "pools" / "b", conf=False)
    out = tmp_path / "lb"
    req = LeaderboardRequest(pools=[a, b], budgets=[2, 4], seeds=3, units=["samples"], out=out, figures=False)
    df = run_leaderboard(req, console=quiet)
    uab = df.filter(pl.col("base_policy") == "uab")
    assert set(uab["pool"]) == {"a"} and set(uab["track"]) == {"coverage", "sc"}
    assert (uab["role"] == "published").all() and (uab.filter(pl.col("track") == "sc")["select"] == "sc").all()
    pool = load_pool(a, side="score_conf")
    _, r_idx = split_queries(pool.query_ids, 0.5, 0)
    rp = subset(pool, r_idx, "report")
    grid = {c.label(): c for t in ("coverage", "sc") for e in entries(pool, t, "samples") if e.policy == "uab"
            for c in e.configs}
    assert {c.uab_tau for c in grid.values()} == {0.1, 0.2, 0.5}
    for r in uab.iter_rows(named=True):
        direct = replay(rp, [grid[r["config"]]], [r["budget"]], range(3), select=r["select"])[0]
        assert r["mean"] == pytest.approx(direct[r["metric"]].mean(), abs=1e-12)
    md = (out / "leaderboard.md").read_text()
    assert "Side signal (side-eb, uab): `score_conf`" in md and "--side score_conf,score_mean_logprob" in md
    tail = md[md.index("\n## b\n"):]
    assert "`uab` (needs a per-response side signal" in tail and "no column score_conf or score_mean_logprob" in tail


def test_leaderboard_side_option_picks_the_column(tmp_path):
    a = conf_pool(tmp_path / "a")
    args = ("leaderboard", a, "--budgets", 2, "--seeds", 2, "--tracks", "coverage", "--units", "samples")
    r = cli(*args, "--side", "score_other")
    assert "a: uab not run: needs a per-response side signal" in r.output and "no column score_other" in r.output
    r = cli(*args, "--side", "score_x,score_conf")
    assert "uab not run" not in r.output and " uab " in r.output
