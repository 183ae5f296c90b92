"""What a new user sees first (issue 28): `ttc replay`'s default screen fits a standard terminal (80 and 120
columns, and a file or pipe) with no cut cell, answers "what does adaptive allocation buy" in one row per policy,
shows standard errors to their significant digits, repeats no coverage under ground truth, keeps the full grid one
option away (--wide), and takes an embedded pool's name wherever a pool is read."""
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.data import embedded_pools
from ttc.replay.exact import efficiency_gain
from ttc.replay.summary import fmt_mean_se

POOLS = [p.name for p in embedded_pools()]


def _replay(monkeypatch, width, *args):
    monkeypatch.setenv("COLUMNS", str(width))
    r = CliRunner().invoke(app, ["replay", *args, "--seeds", "5"])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("pool", POOLS)
def test_default_screen_fits_the_width_with_no_cut_cell(monkeypatch, pool, width):
    out = _replay(monkeypatch, width, pool)
    for line in out.splitlines():
        assert len(line) <= width, (width, line)
        assert "…" not in line, line
    assert "uniform (exact)" in out and "efficiency gain" in out or "no efficiency gain" in out


def test_pools_are_all_rendered():
    assert {"lastletters-gpt35-40", "math500-llama3.1-8b-48", "humaneval-codegen16b-100"} <= set(POOLS)


def test_one_row_per_policy_and_no_accuracy_repeating_coverage(monkeypatch):
    out = _replay(monkeypatch, 120)  # the default pool, score gt, select bon: accuracy is coverage
    assert "accuracy" not in out and "coverage" in out
    rows = [ln.split()[0] for ln in out.splitlines() if ln.strip().startswith("two-stage")]
    assert rows and all(r == "two-stage" for r in rows)  # its three rho, one row at its best per budget
    sc = _replay(monkeypatch, 120, "--select", "sc")
    assert "accuracy" in sc
    wide = _replay(monkeypatch, 200, "--wide")
    assert "two-stage(rho=0.25)" in wide and "uniform acc." in wide


def test_standard_errors_show_their_significant_digits():
    assert fmt_mean_se(-0.0037, 0.0005) == "-0.0037±0.0005"
    assert fmt_mean_se(0.87112, 0.0012) == "0.8711±0.0012"
    assert fmt_mean_se(0.871, 0.023) == "0.871±0.023"
    assert fmt_mean_se(0.5, 0.31) == "0.500±0.310"
    assert fmt_mean_se(0.928, 0.0) == "0.928±0"


def test_gain_is_undefined_on_a_falling_curve(monkeypatch):
    """On math500 with --score conf best-of-k falls with k: the first uniform budget reaching a score gave uniform
    0.03x-0.37x against itself. A falling curve names no budget: NaN, and the screen says why."""
    falling = np.array([0.41, 0.40, 0.39, 0.37])
    assert math.isnan(efficiency_gain(falling, 0.37, 4.0)[0])
    assert efficiency_gain(np.array([0.5, 0.7, 0.8]), 0.8, 3.0) == (pytest.approx(1.0), False)
    out = _replay(monkeypatch, 120, "math500-llama3.1-8b-48", "--score", "conf", "--policy", "uniform")
    assert "no efficiency gain on accuracy" in out and "0.03x" not in out


def test_an_embedded_pool_is_named_from_anywhere(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["info", "math500-llama3.1-8b-48"])
    assert r.exit_code == 0, r.output
    assert "math500-llama3.1-8b-48" in r.output
    missing = CliRunner().invoke(app, ["info", "no-such-pool"])
    assert missing.exit_code == 2 and "no-such-pool" in missing.output


def test_help_shows_flags_as_flags_and_wraps_to_the_width(monkeypatch):
    """`--force <bool>` made `--force true` look right (then `true` was read as a pool); the docstrings' line breaks
    broke `ttc --help` down to single words in a terminal of another width."""
    monkeypatch.setenv("COLUMNS", "100")
    r = CliRunner().invoke(app, ["info", "--help"])
    assert r.exit_code == 0 and "--force" in r.output and "<bool>" not in r.output
    top = CliRunner().invoke(app, ["--help"]).output
    assert "<bool>" not in top
    assert "Large Language Monkeys" in top  # one phrase on one line, wrapped by rich, not at the source's breaks
    words = [ln.strip("│ ").strip() for ln in top.splitlines()]
    assert not [w for w in words if w and " " not in w and w.isalpha() and w not in ("Usage",)], words
