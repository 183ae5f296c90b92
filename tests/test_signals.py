"""`ttc signals`: the AUC of each side signal after k failed draws, checked against a brute-force count on the
permutations replay draws, against designed synthetic signals (ttc synth --side-signal), and through the command
line (table, Parquet, plot, one-line errors)."""
import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.outputs import written_by
from ttc.replay.pool import Pool, load_pool
from ttc.replay.rng import permutation
from ttc.replay.signals import Signal, default_ks, measure, pool_signals, weighted_auc
from ttc.replay.synth import SynthSpec, write_synth

runner = CliRunner()
MATH = "data/math500-llama3.1-8b-48"


def brute_auc(x, y):
    """Mann-Whitney over all pairs, ties one half."""
    pos, neg = x[y], x[~y]
    if not len(pos) or not len(neg):
        return np.nan
    d = pos[:, None] - neg[None, :]
    return ((d > 0) + 0.5 * (d == 0)).mean()


def test_weighted_auc_matches_pairs_and_multiplicities():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, 40).astype(float)  # ties
    y = rng.random(40) < 0.4
    assert weighted_auc(x, y, np.ones((1, 40)))[0] == pytest.approx(brute_auc(x, y))
    w = rng.integers(0, 3, 40)
    rep = np.repeat(np.arange(40), w)  # a weight is a multiplicity: the same as repeating the rows
    assert weighted_auc(x, y, w[None, :].astype(float))[0] == pytest.approx(brute_auc(x[rep], y[rep]))
    assert np.isnan(weighted_auc(x, np.zeros(40, bool), np.ones((1, 40)))[0])


def test_measure_equals_a_brute_force_count_on_replays_permutations():
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 9, 40)  # ragged: some queries hold fewer than k responses
    off = np.concatenate([[0], np.cumsum(sizes)])
    p = np.where(rng.random(40) < 0.3, 0.0, rng.random(40) * 0.5)
    correct = (rng.random(off[-1]) < np.repeat(p, sizes)).astype(np.int8)
    score = rng.random(off[-1]).round(1)
    ans = np.where(correct == 1, 0, rng.integers(-1, 3, off[-1]))
    pool = Pool.from_arrays(off, correct=correct, score=score, ans=ans)
    signals = [Signal("s mean", "response", "mean", score), Signal("s max", "response", "max", score),
               Signal("agree", "response", "agreement", ans.astype(float))]
    ks, seeds = [1, 2, 4], [0, 1, 2]
    df = measure(pool, signals, ks, seeds, bootstrap=20)
    solvable = np.array([correct[off[i]:off[i + 1]].any() for i in range(40)])
    for k in ks:
        per_seed = {(t, s.name): [] for t in ("solvable", "next") for s in signals}
        for seed in seeds:
            perm = permutation(pool.off, pool.qkeys, seed)
            for t in ("solvable", "next"):
                xs = {s.name: [] for s in signals}
                ys = []
                for i in range(40):
                    drawn = perm[off[i]:off[i] + min(k, sizes[i])]
                    if sizes[i] < k or correct[drawn].any() or (t == "next" and sizes[i] == k):
                        continue
                    ys.append(solvable[i] if t == "solvable" else bool(correct[perm[off[i] + k]]))
                    xs["s mean"].append(score[drawn].mean())
                    xs["s max"].append(score[drawn].max())
                    a = ans[drawn]
                    xs["agree"].append(np.bincount(a[a >= 0]).max() / k if (a >= 0).any() else 0.0)
                for s in signals:
                    per_seed[(t, s.name)].append(brute_auc(np.array(xs[s.name]), np.array(ys, bool)))
        for (t, name), v in per_seed.items():
            row = df.filter((pl.col("target") == t) & (pl.col("signal") == name) & (pl.col("k") == k)).row(
                0, named=True)
            want = np.nanmean(v) if not np.isnan(v).all() else np.nan
            assert row["auc"] == pytest.approx(want, nan_ok=True), (t, name, k)
            assert row["seeds"] == int((~np.isnan(v)).sum())


def test_embedded_pool_signals_and_default_ks():
    pool = load_pool(MATH)
    names = [s.name for s in pool_signals(MATH, pool)]
    assert names == ["score_conf mean", "score_conf max", "level (query)"]  # level: queries.parquet metadata
    assert default_ks(48) == [1, 2, 4, 8, 16, 32] and default_ks(40) == [1, 2, 4, 8, 16, 32]


@pytest.fixture(scope="module")
def side_pools(tmp_path_factory):
    base = tmp_path_factory.mktemp("side")
    out = {}
    for auc in (0.5, 0.8):
        spec = SynthSpec(queries=400, responses=24, seed=5, side_signal=f"solvable:{auc}",
                         difficulty="mixture:0.5,1.5,0.3")
        out[auc], _ = write_synth(base / f"auc{auc}", spec)
    return out


@pytest.mark.parametrize("auc", [0.5, 0.8])
def test_signals_recover_the_designed_auc(side_pools, auc):
    """The designed AUC of one failed response's side signal (k = 1, solvable) is what ttc signals measures, within
    4 bootstrap standard errors; the no-information control (0.5) stays at 0.5 at every k and for both targets."""
    path = side_pools[auc]
    pool = load_pool(path)
    df = measure(pool, [s for s in pool_signals(path, pool) if s.name.startswith("score_side")], [1, 2, 4],
                 range(10), bootstrap=100)
    row = df.filter((pl.col("target") == "solvable") & (pl.col("signal") == "score_side mean") & (pl.col("k") == 1))
    got, se = row["auc"][0], row["se"][0]
    assert 0 < se < 0.05
    assert abs(got - auc) <= 4 * se, (got, se)
    if auc == 0.5:
        for r in df.iter_rows(named=True):
            assert abs(r["auc"] - 0.5) <= 4 * r["se"], r
    else:  # more failed draws of an informative signal separate better
        mean = df.filter((pl.col("target") == "solvable") & (pl.col("signal") == "score_side mean")).sort("k")
        assert mean["auc"][2] > mean["auc"][0]


def test_cli_table_parquet_plot(tmp_path):
    out, png = tmp_path / "s.parquet", tmp_path / "s.png"
    r = runner.invoke(app, ["signals", MATH, "--ks", "1,4", "--seeds", "3", "--bootstrap", "20", "--out", str(out),
                            "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "score_conf mean" in r.output and "level (query)" in r.output and "k=4" in r.output
    df = pl.read_parquet(out)
    assert df.height == 2 * 3 * 2 and set(df["target"]) == {"solvable", "next"}
    assert {"auc", "se", "queries", "positives", "seeds", "pool", "bootstrap"} <= set(df.columns)
    assert written_by(out) == "signals" and written_by(png) == "signals"
    again = runner.invoke(app, ["signals", MATH, "--ks", "1,4", "--seeds", "3", "--bootstrap", "20", "--out",
                                str(out)])
    assert again.exit_code == 0 and pl.read_parquet(out).equals(df)  # deterministic, and its own output replaced


@pytest.mark.parametrize("args, message", [
    (["--ks", "0"], "--ks must be draws >= 1"),
    (["--ks", "48"], "below the largest pool size"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--bootstrap", "1"], "--bootstrap must be >= 2"),
    (["--out", "data/math500-llama3.1-8b-48/x.parquet"], "which this command reads"),
])
def test_cli_errors_are_one_line(args, message):
    r = runner.invoke(app, ["signals", MATH, *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert r.output.count("error:") == 1


def test_pool_without_ground_truth_is_refused(tmp_path):
    from ttc.replay.pool import samples_frame, write_pool

    write_pool(tmp_path / "p", samples_frame({"query_id": ["a", "a", "b"], "sample_idx": [0, 1, 0],
                                              "score_x": [0.1, 0.2, 0.3]}), meta={})
    r = runner.invoke(app, ["signals", str(tmp_path / "p")])
    assert r.exit_code == 2 and "needs ground truth" in r.output


def test_token_truncation_and_text_signals_are_read_in_the_pools_order(tmp_path):
    """Columns load_pool does not keep (finish_reason, text) are read and lined up with the pool's sorted order,
    whatever the row order of the file."""
    from ttc.replay.pool import samples_frame, write_pool

    rows = []
    for q in ("b", "a"):  # written out of order, and responses reversed: the loader sorts both
        for j in (2, 1, 0):
            rows.append({"query_id": q, "sample_idx": j, "correct": q == "a" and j == 2, "answer": None,
                         "n_tokens": 10 * j + (q == "a"), "finish_reason": "length" if j == 1 else "stop",
                         "text": "x" * (j + 1), "score_r": j / 4})
    write_pool(tmp_path / "p", samples_frame(rows), meta={})
    pool = load_pool(tmp_path / "p")
    sig = {s.name: s for s in pool_signals(tmp_path / "p", pool)}
    assert list(sig) == ["score_r mean", "score_r max", "n_tokens mean", "truncated share", "text chars mean",
                         "invalid share", "answer agreement"]
    assert sig["n_tokens mean"].values.tolist() == [1, 11, 21, 0, 10, 20]  # a's 0, 1, 2 then b's
    assert sig["truncated share"].values.tolist() == [0, 1, 0, 0, 1, 0]
    assert sig["text chars mean"].values.tolist() == [1, 2, 3, 1, 2, 3]
    assert sig["invalid share"].values.tolist() == [1.0] * 6


def test_no_auc_is_printed_beside_no_positives():
    """Issue 28: a cell printed an AUC where the positives column read 0 (a mean over seeds below one): n/a."""
    import polars as pl
    from rich.console import Console

    from ttc.replay.signals import render_table

    df = pl.DataFrame({"target": ["solvable"] * 3, "signal": ["x"] * 3, "per": ["response"] * 3, "k": [1, 2, 4],
                       "auc": [0.61, 0.70, float("nan")], "se": [0.02, 0.3, float("nan")],
                       "queries": [40.0, 12.0, 3.0], "positives": [20.0, 0.3, 0.0], "seeds": [20, 6, 0]})
    c = Console(width=120, record=True)
    c.print(render_table(df, "solvable"))
    text = c.export_text()
    assert "0.610±0.020" in text and "0.700" not in text and text.count("n/a") == 2
    assert "(0.3)" in text
