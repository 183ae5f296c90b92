"""`ttc report`: its tables equal direct `ttc replay` runs of the same configurations and seeds, the hard-subset
definition holds on a hand-built pool, the figures are real PNGs, and the command line fails cleanly."""
import json
import math
import re

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.exact import coverage_at_k
from ttc.replay.pool import load_pool
from ttc.replay.report import (
    CAP_GRID,
    GAMMAS,
    HARD_KS,
    KS,
    LAMBDAS,
    ReportRequest,
    query_groups,
    run_report,
    subset_curve,
    uniform_solve_curves,
)
from ttc.replay.run import ReplayRequest, run_replay
from ttc.replay.summary import fmt_mean_se

from support.pools import quiet, synthetic, write_pool

BUDGETS = [2.0, 4.0]
SEEDS = 3
SUMMARY_COLS = ["coverage", "coverage_se", "accuracy", "accuracy_se", "samples_per_query", "exhausted",
                "uniform_coverage", "gain_coverage"]
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    pool = synthetic(root / "synth")
    req = ReportRequest(pools=[pool], out=root / "out", budgets=BUDGETS, seeds=SEEDS, latex=True, threads=1)
    report = run_report(req, console=quiet)
    return pool, root / "out", report


def direct(pool, **kw):
    """`ttc replay` on the same pool, budgets and seeds: its summary table."""
    req = ReplayRequest(pool=pool, budgets=BUDGETS, seeds=SEEDS, **kw)
    return run_replay(req, console=quiet)


def assert_same(table_csv, summary, labels=None):
    got = pl.read_csv(table_csv)
    if labels is not None:
        got = got.filter(pl.col("config").is_in(labels))
    want = summary.filter(pl.col("config").is_in(got["config"].unique().to_list()))
    assert got.height == want.height > 0, (got["config"].to_list(), want["config"].to_list())
    j = got.join(want, on=["config", "budget"], suffix="_direct")
    assert j.height == got.height
    for col in SUMMARY_COLS:
        a, b = j[col].cast(pl.Float64).to_numpy(), j[f"{col}_direct"].cast(pl.Float64).to_numpy()
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15, equal_nan=True, err_msg=col)


# ------------------------------------------------------------------------- tables against direct replays

def test_main_table_equals_direct_replay(built):
    pool, out, _ = built
    _, summary = direct(pool)  # every policy the pool supports, two-stage at each default rho
    got = pl.read_csv(out / "synth" / "tables" / "main.csv")
    assert sorted(got["config"].unique()) == sorted(summary["config"].unique())
    assert_same(out / "synth" / "tables" / "main.csv", summary)


@pytest.mark.parametrize("name, kw", [
    ("k", dict(policies=["elimination", "ucb", "gap", "entropy"], K=list(KS))),
    ("lambda", dict(policies=["ucb", "entropy"], lam=list(LAMBDAS))),
    ("token_matched", dict(policies=["elimination", "ucb", "gap", "entropy", "two-stage", "streaming"],
                           unit="token-matched", rho=[0.5])),
    ("gamma", dict(policies=["elimination", "ucb", "gap", "entropy"], score="prm", gamma=list(GAMMAS))),
    ("two_stage", dict(policies=["two-stage"])),
])
def test_sweep_tables_equal_direct_replay(built, name, kw):
    pool, out, _ = built
    _, summary = direct(pool, **kw)
    labels = None
    if name == "token_matched":  # the table puts each policy's sample-budget run beside its token-matched run
        labels = [c for c in summary["config"].unique() if "token-matched" in c]
    assert_same(out / "synth" / "tables" / f"{name}.csv", summary, labels)


def test_cap_sweep_and_streaming_equal_direct_replay(built):
    pool, out, _ = built
    sizes = load_pool(pool).sizes
    caps = [0] + [m for m in CAP_GRID if m < sizes.max()]
    _, summary = direct(pool, policies=["elimination", "streaming"], max_samples=caps)
    assert_same(out / "synth" / "tables" / "caps.csv", summary)
    assert_same(out / "synth" / "tables" / "streaming.csv", summary)
    assert pl.read_csv(out / "synth" / "tables" / "caps.csv")["config"].n_unique() == 2 * len(caps)


def test_markdown_cells_match_the_csv(built):
    _, out, report = built
    text = report.read_text()
    main = pl.read_csv(out / "synth" / "tables" / "main.csv")
    for r in main.filter(pl.col("budget") == BUDGETS[-1]).iter_rows(named=True):
        if "post hoc" in r["config"]:
            continue
        row = re.search(rf"^\| {re.escape(r['config'])} \| (.*) \|$", text, re.M)
        assert row, r["config"]
        assert row.group(1).split(" | ")[-1] == fmt_mean_se(r["coverage"], r["coverage_se"])


def test_allocation_adds_up_to_samples_used(built):
    _, out, _ = built
    al = pl.read_csv(out / "synth" / "tables" / "allocation.csv")
    main = pl.read_csv(out / "synth" / "tables" / "main.csv")
    n = pl.read_csv(out / "synth" / "tables" / "queries.csv").height
    spent = (al.group_by("config", "budget").agg((pl.col("responses_per_query") * pl.col("queries")).sum() / n)
             .join(main, on=["config", "budget"]))
    assert spent.height == al.select("config", "budget").unique().height > 0
    np.testing.assert_allclose(spent["responses_per_query"], spent["samples_per_query"], rtol=1e-12)
    uni = al.filter((pl.col("config") == "uniform") & (pl.col("budget") == 4.0))
    np.testing.assert_allclose(uni["responses_per_query"], 4.0)  # no pool is smaller than 10


def test_hard_subsets_equal_per_query_replay(built, tmp_path):
    """Subset coverage recomputed from `ttc replay --per-query` and hard flags from exact binomials."""
    pool, out, _ = built
    pq_file = tmp_path / "pq.parquet"
    direct(pool, policies=["uniform", "elimination", "entropy"], per_query=pq_file)
    p = load_pool(pool)
    flags = {}
    for i, q in enumerate(p.query_ids):
        n, c = int(p.sizes[i]), int(p.correct[p.off[i]:p.off[i + 1]].sum())
        hard = {k: 1 - math.comb(n - c, min(k, n)) / math.comb(n, min(k, n)) < 0.5 for k in HARD_KS}
        flags[q] = (hard, c > 0)
    pq = pl.read_parquet(pq_file)
    got = pl.read_csv(out / "synth" / "tables" / "hard_subsets.csv")
    for k in HARD_KS:
        hard_q = [q for q, (h, _) in flags.items() if h[k]]
        solv_q = [q for q, (h, s) in flags.items() if h[k] and s]
        assert 0 < len(solv_q) < len(hard_q)  # the fixture has both kinds
        per_run = pq.group_by("config", "budget", "seed").agg(
            (pl.col("covered") & pl.col("query_id").is_in(hard_q)).sum().alias("hit"))
        want = per_run.group_by("config", "budget").agg(
            (pl.col("hit") / len(hard_q)).mean().alias("cov"), (pl.col("hit") / len(solv_q)).mean().alias("norm"))
        j = want.join(got, on=["config", "budget"])
        assert j.height == want.height == 3 * len(BUDGETS)
        np.testing.assert_allclose(j["cov"], j[f"hard_{k}_coverage"], rtol=1e-12)
        np.testing.assert_allclose(j["norm"], j[f"hard_{k}_normalised"], rtol=1e-12)


# ------------------------------------------------------------------------- hard-subset definition

def test_hard_definition_on_a_hand_built_pool(tmp_path):
    # (N, c): 40/1 -> P8 = 8/40, P16 = 16/40: hard-8 and hard-16; 40/2 -> P8 = 1 - (32*31)/(40*39) = 0.364,
    # P16 = 1 - (24*23)/(40*39) = 0.646: hard-8 only; 40/0: unsolvable, in both; 10/1 -> P8 = 0.8, P16 = 1 (the
    # whole pool): easy; 4/1 -> the whole pool at both: easy; 12/12: easy.
    spec = [(40, 1), (40, 2), (40, 0), (10, 1), (4, 1), (12, 12)]
    correct = [k < c for n, c in spec for k in range(n)]
    d = write_pool(tmp_path / "hand", [n for n, _ in spec], correct)
    g = query_groups(load_pool(d))
    assert g["hard_8"].to_list() == [True, True, True, False, False, False]
    assert g["hard_16"].to_list() == [True, False, True, False, False, False]
    assert g["solvable"].to_list() == [True, True, False, True, True, True]
    assert g["group"].to_list() == ["hard, solvable", "hard, solvable", "unsolvable", "easy", "easy", "easy"]
    np.testing.assert_allclose(g["p_uniform_8"], [0.2, 1 - 32 * 31 / (40 * 39), 0, 0.8, 1, 1], atol=1e-12)
    np.testing.assert_allclose(g["p_uniform_16"], [0.4, 1 - 24 * 23 / (40 * 39), 0, 1, 1, 1], atol=1e-12)


def test_uniform_solve_curves_match_the_exact_estimator(built):
    p = load_pool(built[0])
    k_max = int(p.sizes.min())
    np.testing.assert_allclose(subset_curve(p, np.ones(p.n_queries, bool)), coverage_at_k(p), rtol=1e-10)
    curves = uniform_solve_curves(p.off, p.correct, k_max)
    i = int(np.argmax(np.add.reduceat(p.correct.astype(int), p.off[:-1]) == 1))
    n = int(p.sizes[i])
    np.testing.assert_allclose(curves[i], [1 - math.comb(n - 1, k) / math.comb(n, k) for k in range(1, k_max + 1)])


# ------------------------------------------------------------------------- files and the command line

def test_figures_are_non_empty_pngs(built):
    import matplotlib.image

    _, out, _ = built
    for name in ("curves", "hard", "allocation"):
        f = out / "synth" / f"{name}.png"
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = matplotlib.image.imread(f)
        assert img.shape[0] > 300 and img.shape[1] > 500
        assert img[..., :3].std() > 0.05  # not a blank canvas


def test_report_sections_provenance_and_latex(built):
    pool, out, report = built
    text = report.read_text()
    assert "ttc report " + str(pool) in text and "--seeds 3" in text
    assert "numba " in text and "polars " in text
    assert '"model": "test fixture"' in text
    for section in ("### Main results", "### Two-stage", "### Streaming vs pool", "### Token-matched",
                    "### Hard subsets", "### Allocation", "**gamma (threshold)"):
        assert section in text, section
    assert "not applicable" not in text  # this pool has tokens and a score column
    for name in ("main", "k", "lambda", "gamma", "token_matched", "hard_8", "allocation"):
        tex = (out / "synth" / "tables" / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in tex and "\\bottomrule" in tex and "±" not in tex


def test_cli_two_pools_without_tokens_or_scores(tmp_path):
    a = synthetic(tmp_path / "a", n=12, seed=1, tokens=False, scores=False)
    b = synthetic(tmp_path / "b", n=12, seed=2, tokens=False, scores=False)
    (b / "pool.json").write_text(json.dumps({"name": "a"}))  # same name: the second gets its own directory
    r = runner.invoke(app, ["report", str(a), str(b), "--out", str(tmp_path / "rep"), "--seeds", "2",
                            "--budgets", "2,4", "--threads", "1"])
    assert r.exit_code == 0, (r.output, r.exception)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert text.count("## Pool `a`") == 2
    assert (tmp_path / "rep" / "a" / "curves.png").exists() and (tmp_path / "rep" / "a-2" / "curves.png").exists()
    assert "Token-matched: not applicable" in text and "gamma sweep: not applicable" in text


@pytest.mark.parametrize("args, pattern", [
    (["{tmp}/nope"], r"pool directory .*nope does not exist"),
    (["{pool}", "--select", "best"], r"Invalid value for '--select'.*'best' is not one of"),
    (["{pool}", "--budgets", "4,-1"], r"--budgets must be finite and positive"),
    (["{pool}", "--seeds", "0"], r"--seeds must be >= 1"),
    (["{pool}", "--score", "rm"], r"score column 'rm' does not exist"),
    (["{nogt}"], r"needs ground truth"),
])
def test_cli_errors_are_clean(tmp_path, args, pattern):
    pool = synthetic(tmp_path / "p", n=6, tokens=False, scores=False)
    nogt = tmp_path / "nogt"
    nogt.mkdir()
    pl.DataFrame({"query_id": ["a", "a"], "sample_idx": [0, 1], "score_x": [0.1, 0.9]}).write_parquet(
        nogt / "samples.parquet")
    args = [a.format(tmp=tmp_path, pool=pool, nogt=nogt) for a in args]
    r = runner.invoke(app, ["report", "--out", str(tmp_path / "rep"), "--seeds", "1", "--budgets", "2", *args]
                      + (["--score", "x"] if "nogt" in args[0] else []))  # later options win
    assert r.exit_code == 2, (r.output, r.exception)
    assert r.stderr.startswith("error:") and re.search(pattern, r.stderr), r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "rep" / "report.md").exists()


def test_invalid_votes_reach_every_table(tmp_path):
    """--invalid-votes: the report's main table is `ttc replay --invalid-votes`'s, which differs from the default's
    on a pool whose wrong answers are often invalid; the report says so and its command line repeats it."""
    pool = synthetic(tmp_path / "synth", n=16, seed=5, tokens=False, scores=False)
    r = runner.invoke(app, ["report", str(pool), "--out", str(tmp_path / "rep"), "--seeds", "3", "--budgets", "2,4",
                            "--select", "sc", "--threads", "1", "--invalid-votes"])
    assert r.exit_code == 0, (r.output, r.exception)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "invalid answers vote" in text and "--invalid-votes" in text
    _, voting = direct(pool, select="sc", invalid_votes=True)
    _, default = direct(pool, select="sc")
    assert_same(tmp_path / "rep" / "synth" / "tables" / "main.csv", voting)
    acc = lambda s: s.sort(["config", "budget"])["accuracy"].to_list()  # noqa: E731
    assert acc(voting) != acc(default)


def test_depth_figure_and_table_on_a_probed_pool(tmp_path):
    """A probed pool's report has the accuracy-vs-tokens figure with both kinds and its table, whose numbers are a
    direct replay's at the same token budgets; a pool without probes says the section does not apply."""
    from ttc.replay.engine import replay
    from ttc.replay.report import DEPTH_FIGURE

    from support.depth_pools import probed_pool_dir

    pool_dir = probed_pool_dir(tmp_path / "probed", n_queries=6, max_traces=10, max_probes=8)
    out = tmp_path / "out"
    run_report(ReportRequest(pools=[pool_dir], out=out, budgets=[1.0, 3.0], seeds=4, threads=1), console=quiet)
    sub = next(d for d in out.iterdir() if d.is_dir())
    assert (sub / "depth.png").is_file()
    t = pl.read_csv(sub / "tables" / "depth.csv")
    assert set(t["kind"]) == {"width", "depth"} and t.height == 2 * len(DEPTH_FIGURE)
    assert (t["tokens_per_query"] <= t["budget"] + 1e-9).all()  # equal budgets, none passed
    pool = load_pool(pool_dir, need_tokens=True, probes=True)
    median = float(np.median(pool.tok))
    df = replay(pool, [c for _, c in DEPTH_FIGURE], [median * 3], range(4), select="sc")[0]
    for lab, g in df.group_by("config"):
        row = t.filter((pl.col("config") == lab[0]) & (pl.col("budget_traces") == 3.0))
        assert row["accuracy"][0] == pytest.approx(g["accuracy"].mean(), abs=1e-12)
    md = (out / "report.md").read_text()
    assert "### Depth: width against width x depth at equal tokens" in md and "depth.png" in md
    plain = tmp_path / "plain"
    synthetic(plain, n=10)
    run_report(ReportRequest(pools=[plain], out=tmp_path / "out2", budgets=[2.0], seeds=2, threads=1), console=quiet)
    assert "Not applicable to this pool: it has no probes" in (tmp_path / "out2" / "report.md").read_text()
