"""`ttc info`: the facts it prints agree with direct computations on the pool's files."""
from pathlib import Path

import numpy as np
import polars as pl
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.exact import coverage_at_k
from ttc.replay.info import pool_info
from ttc.replay.pool import load_pool

ROOT = Path(__file__).resolve().parent.parent
MATH = ROOT / "data" / "math500-llama3.1-8b-48"


def test_info_matches_direct_computation():
    info = pool_info(MATH)
    s = pl.read_parquet(MATH / "samples.parquet")
    per_q = s.group_by("query_id").agg(pl.col("correct").sum().alias("c"), pl.len().alias("m"))
    assert info["queries"] == per_q.height and info["responses"] == s.height
    assert info["never_solved"] == (per_q["c"] == 0).mean()
    assert info["always_solved"] == (per_q["c"] == per_q["m"]).mean()
    assert np.isclose(info["pass_at_1"], s["correct"].mean())
    assert np.allclose(info["coverage_at_k"], coverage_at_k(load_pool(MATH)))
    for row in info["agreement"]["score_conf"]:
        flagged = s.filter(pl.col("score_conf") >= row["gamma"])
        assert np.isclose(row["flagged"], flagged.height / s.height)
        if flagged.height:
            assert np.isclose(row["precision"], flagged["correct"].mean())
        assert np.isclose(row["recall"], flagged["correct"].sum() / s["correct"].sum())


def test_info_command_plot_and_errors(tmp_path):
    png = tmp_path / "curves.png"
    r = CliRunner().invoke(app, ["info", str(MATH), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "never solved in the pool" in r.output and "score_conf >= gamma" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(app, ["info", str(tmp_path / "missing")])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_info_without_ground_truth(tmp_path):
    d = tmp_path / "pool"
    d.mkdir()
    pl.DataFrame({"query_id": ["a", "a", "b"], "sample_idx": [0, 1, 0], "score_rm": [0.2, 0.9, 0.5]}).write_parquet(
        d / "samples.parquet")
    r = CliRunner().invoke(app, ["info", str(d)])
    assert r.exit_code == 0, r.output
    assert "no ground truth" in r.output
