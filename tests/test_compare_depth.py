"""`ttc compare --depth` (issue 30): on a probed pool, the leaderboard's width x depth entries against its width-only
ones at equal token budgets. Per budget each kind's best entry is the one of best tuning-part mean, both are direct
replays of their chosen configurations on the held-out part, depth - width is their paired difference over seeds and
its SE over queries the per-query differences' standard error; the numbers equal the leaderboard's depth rows for the
same pool, split, budgets and seeds (two paths to one number: the choice, the rows and the differences are each
command's own code); a pool without probes, and options of the other view, are refused in one line."""

import numpy as np
import polars as pl
import pytest
from rich.console import Console
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.compare import depth_summary, paired, verdict, with_query_se
from ttc.replay.engine import replay
from ttc.replay.leaderboard import DEPTH_GRID, LeaderboardRequest, depth_vs_width, run_leaderboard
from ttc.replay.outputs import written_by
from ttc.replay.pool import DEFAULT_POOL, PoolError, load_pool
from ttc.replay.tune import split_queries, subset

from support.depth_pools import probed_pool_dir

runner = CliRunner()
SEEDS, MULTIPLES = 8, (1, 3)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    return probed_pool_dir(tmp_path_factory.mktemp("pools") / "probed", n_queries=12, max_traces=10, max_probes=8)


@pytest.fixture(scope="module")
def compared(probed, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "out"
    r = runner.invoke(app, ["compare", str(probed), "--depth", "--token-multiples", ",".join(map(str, MULTIPLES)),
                            "--seeds", str(SEEDS), "--out", str(out)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    return r.output, out, pl.read_parquet(out / "depth.parquet")


def test_shows_depth_entries_beside_width_ones_and_writes_them(probed, compared):
    output, out, df = compared
    assert written_by(out) == "compare" and written_by(out / "depth.parquet") == "compare"
    kinds = {k: set(df.filter(pl.col("kind") == k)["entry"]) for k in ("width", "depth")}
    assert "uniform" in kinds["width"] and set(DEPTH_GRID) <= kinds["depth"] and "uniform+stability" in kinds["depth"]
    assert not kinds["width"] & kinds["depth"]
    median = float(np.median(load_pool(probed).tok))
    assert sorted(set(df["budget"])) == pytest.approx([m * median for m in MULTIPLES])
    s = depth_summary(df)
    assert s.height == len(MULTIPLES)
    for text in ("best width-only", "best width x depth", "SE over queries", *s["depth_policy"], *s["width_policy"]):
        assert text in output
    md = (out / "compare.md").read_text()
    assert md.startswith("# ttc compare --depth\n\n```bash\nttc compare ") and "--depth --token-multiples 1,3" in md
    assert set(pl.read_parquet(out / "split.parquet")["part"]) == {"tune", "report"}


def test_best_of_each_kind_and_the_difference_are_direct_replays(probed, compared):
    """Recomputed here from the pool, not read back: the chosen configuration's held-out numbers, the paired
    difference over seeds and the SE over queries."""
    _, _, df = compared
    pool = load_pool(probed, probes=True)
    t_idx, r_idx = split_queries(pool.query_ids, 0.5, 0)
    rp = subset(pool, r_idx, "report")
    from ttc.replay.leaderboard import entries

    grids = {e.label: {c.label(): c for c in e.configs} for e in entries(pool, "sc", "tokens")}
    for r in depth_summary(df).iter_rows(named=True):
        cell = df.filter(pl.col("level") == r["level"])
        for kind in ("width", "depth"):
            g = cell.filter(pl.col("kind") == kind)
            top = g.filter(pl.col("tune_mean") == g["tune_mean"].max())["entry"][0]  # ties: the first
            assert r[f"{kind}_policy"] == top
        cw = grids[r["width_policy"]][r["width_config"]]
        cd = grids[r["depth_policy"]][r["depth_config"]]
        d = replay(rp, [cw, cd], [r["budget"]], range(SEEDS), select="sc", per_query=True)
        x = {c.label(): d[0].filter(pl.col("config") == c.label()).sort("seed")["accuracy"].to_numpy()
             for c in (cw, cd)}
        assert r["width_mean"] == pytest.approx(x[cw.label()].mean(), abs=1e-12)
        assert r["depth_mean"] == pytest.approx(x[cd.label()].mean(), abs=1e-12)
        diff, se = paired(x[cd.label()], x[cw.label()])
        assert (r["diff"], r["diff_se"], r["verdict"]) == (pytest.approx(diff, abs=1e-12),
                                                          pytest.approx(se, abs=1e-12), verdict(diff, se))
        pq = d[1].with_columns(pl.col("selected_correct").cast(pl.Float64))
        per = {c.label(): pq.filter(pl.col("config") == c.label()).group_by("query_id").agg(
            pl.col("selected_correct").mean()).sort("query_id")["selected_correct"].to_numpy() for c in (cw, cd)}
        # (accuracy is the share of queries answered right: the per-query chances average to it)
        assert per[cd.label()].mean() == pytest.approx(r["depth_mean"], abs=1e-12)
        dq = per[cd.label()] - per[cw.label()]
        assert r["diff_se_queries"] == pytest.approx(dq.std(ddof=1) / np.sqrt(len(r_idx)), abs=1e-12)
        for kind in ("width", "depth"):
            assert r[f"{kind}_tokens_per_query"] <= r["budget"]  # equal tokens: neither passes the budget


def test_equals_the_leaderboards_depth_rows(probed, compared):
    """Issue 30's two views of depth against width say the same for the same pool, split, token budgets and seeds:
    the leaderboard's depth_vs_width and compare's summary, and every entry's held-out number."""
    _, _, df = compared
    lb = run_leaderboard(LeaderboardRequest(pools=[probed], tracks=["sc"], units=["tokens"],
                                            token_multiples=list(MULTIPLES), seeds=SEEDS, figures=False),
                         console=Console(file=open("/dev/null", "w")))
    mine, theirs = depth_summary(df).sort("level"), depth_vs_width(lb).sort("level")
    assert mine.height == theirs.height == len(MULTIPLES)
    for a, b in zip(mine.iter_rows(named=True), theirs.iter_rows(named=True), strict=True):
        for k in ("width_policy", "width_config", "depth_policy", "depth_config", "verdict"):
            assert a[k] == b[k], k
        for k in ("budget", "width_mean", "width_se", "width_tokens_per_query", "depth_mean", "depth_se",
                  "depth_tokens_per_query", "diff", "diff_se"):
            assert a[k] == pytest.approx(b[k], abs=1e-12), k
    # the SE over queries added to the leaderboard's rows after the fact is compare's
    paths = {"probed": str(probed)}
    theirs_q = with_query_se(depth_vs_width(lb), paths, range(SEEDS), 0.5, 0).sort("level")
    assert np.allclose(theirs_q["diff_se_queries"], mine["diff_se_queries"], atol=1e-12)
    assert (theirs_q["verdict_queries"] == mine["verdict_queries"]).all()
    with pytest.raises(PoolError, match="the rows are not of this pool"):  # rows of other seeds (or another build)
        with_query_se(depth_vs_width(lb), paths, range(1, SEEDS + 1), 0.5, 0)
    ours = df.select("level", pl.col("entry").alias("policy"), "config", "mean", "se", "tokens_per_query")
    lbs = lb.filter(pl.col("kind").is_in(["width", "depth"]))
    both = ours.join(lbs.select("level", "policy", "config", "mean", "se", "tokens_per_query"),
                     on=["level", "policy"], suffix="_lb")
    assert both.height == ours.height == lbs.height
    assert (both["config"] == both["config_lb"]).all()
    for c in ("mean", "se", "tokens_per_query"):
        assert np.allclose(both[c], both[f"{c}_lb"], atol=1e-12, equal_nan=True), c


@pytest.mark.parametrize("args, message", [
    (["{plain}", "--depth"], "needs a pool with probes"),
    (["{probed}", "--depth", "--budgets", "4"], "--budgets are the coverage view's"),
    (["{probed}", "--token-multiples", "2"], "add --depth"),
    (["{probed}", "--depth", "--policy", "uniform"], "--policy narrows the published policies of the coverage view"),
    (["{probed}", "--depth", "--token-multiples", "0"], "--token-multiples must be finite and positive"),
])
def test_bad_input_is_one_line(probed, args, message):
    fill = {"plain": DEFAULT_POOL, "probed": probed}
    r = runner.invoke(app, ["compare", *[a.format(**fill) for a in args], "--seeds", "2"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output and r.output.count("error:") == 1


def test_the_leaderboards_progress_counts_runs_and_stays_within_its_total(probed, monkeypatch):
    """The leaderboard's bar counts what replay reports, runs (configuration x budget x seed), against a total of
    runs: on a probed pool with depth's ~300 configurations it never passes 100% (it counted one per engine call and
    ran to 350%), and it ends near it (the held-out half is counted at one run per entry, an upper bound)."""
    import ttc.replay.progress as prog

    seen = {}

    class Bar:
        def __init__(self, total, *a, **k):
            seen["total"], seen["done"] = total, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def advance(self, k=1, **amounts):
            seen["done"] += k

    monkeypatch.setattr(prog, "progress", Bar)
    run_leaderboard(LeaderboardRequest(pools=[probed], tracks=["sc"], units=["tokens"], token_multiples=[1, 3],
                                       seeds=2, figures=False), console=Console(file=open("/dev/null", "w")))
    assert 0.8 * seen["total"] <= seen["done"] <= seen["total"]


def test_the_depth_tables_fit_80_and_120_columns(compared):
    """Issue 28's first-screen bar for compare --depth's tables: every line fits the terminal and no cell is cut
    (an ellipsis) at 80 and at 120 columns."""
    import io

    from rich.console import Console

    from ttc.replay.compare import render_depth, render_depth_entries

    _, _, df = compared
    for width in (80, 120):
        console = Console(width=width, file=io.StringIO(), record=True)
        for table in [*render_depth(df), render_depth_entries(df)]:
            console.print(table)
        text = console.export_text()
        assert "…" not in text, (width, text)
        assert all(len(line) <= width for line in text.splitlines()), width
