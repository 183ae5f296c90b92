"""`ttc report`'s comparison of the field's methods (replay/policies.py METHODS): its numbers equal direct engine
replays of the same configurations, its standard errors are numpy's on those runs, "cost saved" interpolates as
stated on a hand-made curve, methods a pool cannot run are listed with the reason, the Pareto figure is a PNG, and
a failure while building it leaves the previous report whole."""
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ttc.replay import figures
from ttc.replay.engine import replay
from ttc.replay.policies import METHODS, Method, RunConfig, markdown_methods
from ttc.replay.pool import load_pool
from ttc.replay.report import ReportRequest, cost_at_accuracy, cost_saved, method_budgets, pareto_front, run_report

from support.pools import quiet, synthetic

BUDGETS = [2.0, 4.0]
SEEDS = 4
README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A report on a pool with answers, a score column and token counts (every method applies, token-matched
    runs join), scored by that column with a threshold that eliminates."""
    root = tmp_path_factory.mktemp("methods")
    pool = synthetic(root / "synth")
    req = ReportRequest(pools=[pool], out=root / "out", budgets=BUDGETS, seeds=SEEDS, score="prm", gamma=0.8,
                        latex=True, threads=1)
    return pool, req, run_report(req, console=quiet)


def direct(pool_dir, req, name, unit):
    """engine.replay of the method's configuration on the report's budgets and seeds: its per-run rows."""
    pool = load_pool(pool_dir, score=req.score)
    cfg = METHODS[name].run_config(unit=unit, gamma=req.gamma, max_samples=req.max_samples)
    df = replay(pool, [cfg], method_budgets(req.budgets), range(req.seed_start, req.seed_start + req.seeds))[0]
    return pool, cfg, df


@pytest.mark.parametrize("unit, csv", [("samples", "methods.csv"), ("token-matched", "methods_tokens.csv")])
def test_comparison_equals_direct_replay(built, unit, csv):
    pool_dir, req, report = built
    got = pl.read_csv(report.parent / "synth" / "tables" / csv)
    # every method applies to this pool but deepconf-online (no record lows: synthetic pools have no tokens' data)
    # and uab (no side signal: the report loads none)
    applies = {name: m for name, m in METHODS.items() if not {"lows", "side"} & m.all_needs()}
    assert sorted(got["method"].unique()) == sorted(applies) and len(applies) == len(METHODS) - 2
    assert (got["unit"] == unit).all()
    for name, m in applies.items():
        pool, cfg, df = direct(pool_dir, req, name, unit)
        rows = got.filter(pl.col("method") == name).sort("budget")
        assert rows["budget"].to_list() == method_budgets(BUDGETS) and (rows["seeds"] == SEEDS).all()
        assert (rows["config"] == cfg.label()).all()
        n = pool.n_queries
        for b, x in zip(rows["budget"], rows.iter_rows(named=True)):
            d = df.filter(pl.col("budget") == b)
            acc = d[f"accuracy_{m.select}"].to_numpy()
            cost = (d["samples_used"] if unit == "samples" else d["tokens_used"]).to_numpy() / n
            for col, v in (("accuracy", acc), ("coverage", d["coverage"].to_numpy()), ("cost", cost),
                           ("samples_per_query", d["samples_used"].to_numpy() / n),
                           ("tokens_per_query", d["tokens_used"].to_numpy() / n)):
                assert x[col] == pytest.approx(v.mean(), rel=1e-12, abs=1e-15), (name, b, col)
                # the standard error over seeds: sample standard deviation / sqrt(seeds), numpy's on the rows
                assert x[f"{col}_se"] == pytest.approx(v.std(ddof=1) / math.sqrt(len(v)), rel=1e-12, abs=1e-15)


def test_selection_is_the_methods_own(built):
    """best-of-n, self-consistency and weighted-vote share uniform's runs and differ only in the selection."""
    _, _, report = built
    got = pl.read_csv(report.parent / "synth" / "tables" / "methods.csv")
    share = got.filter(pl.col("method").is_in(["best-of-n", "self-consistency", "weighted-vote"]))
    assert (share["config"] == "uniform").all()
    by = {m: share.filter(pl.col("method") == m).sort("budget") for m in ("best-of-n", "self-consistency")}
    np.testing.assert_array_equal(by["best-of-n"]["coverage"], by["self-consistency"]["coverage"])
    assert (by["best-of-n"]["accuracy"] != by["self-consistency"]["accuracy"]).any()


def test_cost_at_accuracy_on_a_hand_made_curve():
    costs, accs = [1, 2, 4, 8], [0.5, 0.6, 0.7, 0.65]
    assert cost_at_accuracy(costs, accs, 0.65) == (pytest.approx(3.0), "reached")  # halfway from 2 to 4
    assert cost_at_accuracy(costs, accs, 0.68) == (pytest.approx(3.6), "reached")  # the first crossing
    assert cost_at_accuracy(costs, accs, 0.6) == (2.0, "reached")  # a point itself
    assert cost_at_accuracy(costs, accs, 0.5) == (1.0, "at most")  # the cheapest point already reaches it
    assert cost_at_accuracy(costs, accs, 0.3) == (1.0, "at most")
    c, how = cost_at_accuracy(costs, accs, 0.71)
    assert math.isnan(c) and how == "not reached"
    order = [3, 1, 0, 2]  # the order of the points does not matter: the curve runs in increasing cost
    assert cost_at_accuracy(np.take(costs, order), np.take(accs, order), 0.65) == (pytest.approx(3.0), "reached")
    # an adaptive method that saturates: several budgets at the same cost
    assert cost_at_accuracy([1, 2, 4.5, 4.5], [0.8, 0.85, 0.9, 0.95], 0.92) == (pytest.approx(4.5), "reached")


def test_cost_saved_against_the_baselines():
    base = METHODS["self-consistency"]
    assert base.baseline and METHODS["best-of-n"].baseline and not METHODS["adaptive-consistency"].baseline
    s = pl.DataFrame({"method": ["self-consistency"] * 3 + ["adaptive-consistency"] * 3, "unit": ["samples"] * 6,
                      "budget": [2.0, 4.0, 8.0] * 2, "cost": [2.0, 4.0, 8.0, 1.5, 3.0, 3.0],
                      "accuracy": [0.6, 0.7, 0.75, 0.55, 0.72, 0.73]})
    got = cost_saved(s)
    assert got["baseline"].unique().to_list() == ["self-consistency"]
    x = {r["budget"]: r for r in got.iter_rows(named=True)}
    # 0.6: between (1.5, 0.55) and (3, 0.72) at 1.5 + 0.05 / 0.17 * 1.5; 0.7: 1.5 + 0.15 / 0.17 * 1.5
    for b, want in ((2.0, 1.5 + 0.05 / 0.17 * 1.5), (4.0, 1.5 + 0.15 / 0.17 * 1.5)):
        assert x[b]["status"] == "reached" and x[b]["method_cost"] == pytest.approx(want)
        assert x[b]["saved"] == pytest.approx(1 - want / b)
    assert x[8.0]["status"] == "not reached" and math.isnan(x[8.0]["saved"])


def test_saved_table_reads_the_method_curves(built):
    _, _, report = built
    tab = report.parent / "synth" / "tables"
    s = pl.concat([pl.read_csv(tab / "methods.csv"), pl.read_csv(tab / "methods_tokens.csv")])
    saved = pl.read_csv(tab / "methods_saved.csv")
    assert set(saved["baseline"]) == {m for m, x in METHODS.items() if x.baseline}
    assert set(saved["unit"]) == {"samples", "token-matched"}
    for r in saved.iter_rows(named=True):
        curve = s.filter((pl.col("method") == r["method"]) & (pl.col("unit") == r["unit"]))
        cost, how = cost_at_accuracy(curve["cost"], curve["accuracy"], r["baseline_accuracy"])
        assert how == r["status"] and (math.isnan(cost) or cost == pytest.approx(r["method_cost"], rel=1e-12))


def test_pareto_front():
    costs, accs = [1, 2, 2, 4, 3, 8], [0.5, 0.7, 0.6, 0.8, 0.8, 0.79]
    assert pareto_front(costs, accs).tolist() == [True, True, False, False, True, False]


def test_pareto_flags_in_the_table(built):
    _, _, report = built
    s = pl.read_csv(report.parent / "synth" / "tables" / "methods.csv")
    np.testing.assert_array_equal(s["pareto"].to_numpy(), pareto_front(s["cost"], s["accuracy"]))
    assert s["pareto"].any()


# ------------------------------------------------------------------------- what does not apply, and why

def test_methods_a_pool_cannot_run_are_listed_with_the_reason(tmp_path):
    """The embedded MATH-500 pool has no answers: the voting methods are listed as not applicable."""
    pool = Path(__file__).resolve().parent.parent / "data" / "math500-llama3.1-8b-48"
    req = ReportRequest(pools=[pool], out=tmp_path / "rep", budgets=[2.0], seeds=2, score="conf", threads=1)
    text = run_report(req, console=quiet).read_text()
    section = text[text.index("### Methods compared"):text.index("### Two-stage")]
    for name in ("self-consistency", "weighted-vote", "adaptive-consistency"):
        assert f"- `{name}`: needs answer categories (an 'answer' column), and this pool has none" in section
    assert "- `best-of-n`" not in section and "| best-of-n |" in section
    status = pl.read_csv(tmp_path / "rep" / "math500-llama3.1-8b-48" / "tables" / "methods_status.csv")
    assert status.filter(~pl.col("applies"))["method"].to_list() == [
        name for name, m in METHODS.items() if "answers" in m.all_needs()]
    assert {"self-consistency", "weighted-vote", "adaptive-consistency", "esc", "cisc"} <= set(
        status.filter(~pl.col("applies"))["method"].to_list())
    # only best-of-N is a baseline here
    assert pl.read_csv(tmp_path / "rep" / "math500-llama3.1-8b-48" / "tables" / "methods_saved.csv")[
        "baseline"].unique().to_list() == ["best-of-n"]


def test_applies_reads_the_parts_and_the_pool(tmp_path):
    no_score = load_pool(synthetic(tmp_path / "p", n=6, tokens=False, scores=False))  # --score gt: 0/1 varies
    assert METHODS["best-of-n"].applies(no_score) == (True, "")
    const = tmp_path / "c"
    synthetic(const, n=6, tokens=False)
    df = pl.read_parquet(const / "samples.parquet").with_columns(pl.lit(0.5).alias("score_prm"))
    df.write_parquet(const / "samples.parquet")
    ok, why = METHODS["weighted-vote"].applies(load_pool(const, score="prm"))
    assert not ok and why == "needs a score that varies between responses, and this pool has none"
    assert METHODS["adaptive-consistency"].all_needs() == {"answers"}  # from sc-beta and sc
    assert METHODS["elimination"].all_needs() == {"score"}


@pytest.mark.parametrize("method, why", [
    (Method("future", "d", "c", {"policy": "no-such-policy"}), "policy 'no-such-policy' is not in this build"),
    (Method("future", "d", "c", {"policy": "elimination", "eliminate": "no-such-rule"}),
     "elimination rule 'no-such-rule' is not in this build"),
    (Method("future", "d", "c", {"policy": "uniform"}, "no-such-selection"),
     "selection rule 'no-such-selection' is not in this build"),
    (Method("future", "d", "c", {"policy": "elimination", "no_such_field": 5}),
     "RunConfig has no field 'no_such_field'"),
    (Method("future", "d", "c", {"policy": "uniform"}, needs=frozenset({"telepathy"})),
     "it needs 'telepathy', which this build cannot check"),
])
def test_a_method_whose_parts_have_not_landed_is_skipped_with_the_reason(tmp_path, monkeypatch, method, why):
    assert why in method.missing()
    pool = load_pool(synthetic(tmp_path / "p", n=6, tokens=False, scores=False))
    ok, reason = method.applies(pool)
    assert not ok and reason.startswith("not in this build: ") and why in reason
    monkeypatch.setitem(METHODS, "future", method)
    req = ReportRequest(pools=[tmp_path / "p"], out=tmp_path / "rep", budgets=[2.0], seeds=1, threads=1)
    text = run_report(req, console=quiet).read_text()
    assert f"- `future`: not in this build: {why}" in text


def test_run_config_takes_only_the_options_it_uses():
    assert METHODS["best-of-n"].run_config(gamma=0.5, max_samples=7) == RunConfig("uniform")
    assert METHODS["elimination"].run_config(gamma=0.5, max_samples=7) == RunConfig("elimination", gamma=0.5,
                                                                                    max_samples=7)
    ac = METHODS["adaptive-consistency"].run_config(gamma=0.5, max_samples=7, unit="token-matched")
    assert ac == RunConfig("elimination", K=1, eliminate="sc-beta", max_samples=40, unit="token-matched")


def test_readme_lists_the_methods():
    assert markdown_methods() in README, "README's methods table: paste replay.policies.markdown_methods()"


# ------------------------------------------------------------------------- files

def test_pareto_figure_is_a_png(built):
    import matplotlib.image

    _, _, report = built
    f = report.parent / "synth" / "methods.png"
    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(f)
    assert img.shape[0] > 300 and img.shape[1] > 900  # two panels: samples and tokens
    assert img[..., :3].std() > 0.05
    assert "![accuracy against cost, one line per method](synth/methods.png)" in report.read_text()


def test_markdown_and_latex(built):
    _, _, report = built
    text = report.read_text()
    assert "### Methods compared" in text and "**Cost saved at equal accuracy against self-consistency" in text
    assert "**Methods at matched tokens" in text
    tex = (report.parent / "synth" / "tables" / "methods_saved_self-consistency.tex").read_text()
    assert "\\begin{tabular}" in tex and "≤" not in tex and "≥" not in tex and "−" not in tex


def test_a_failure_in_the_comparison_leaves_the_previous_report_whole(tmp_path, monkeypatch):
    pool = synthetic(tmp_path / "p", n=8, tokens=False, scores=False)
    req = ReportRequest(pools=[pool], out=tmp_path / "rep", budgets=[2.0], seeds=1, threads=1)
    before = run_report(req, console=quiet).read_text()
    listing = sorted(p.name for p in tmp_path.iterdir())

    def broken(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(figures, "plot_pareto", broken)
    req.seeds = 2
    with pytest.raises(Exception, match="No space left"):
        run_report(req, console=quiet)
    assert (tmp_path / "rep" / "report.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no half-written directory beside it
