"""Bad input that ended in a traceback (exit 1) or a hang now ends in one `error:` line and exit 2 (issue 27, items 7
and the FIFO of item 8)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.pool import DEFAULT_POOL

sys.path.insert(0, str(Path(__file__).resolve().parent))


def one_line(args, pattern: str = ""):
    r = CliRunner().invoke(app, [str(a) for a in args])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2, (args, r.exit_code, r.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error:"), (args, r.output[-2000:])
    assert pattern in lines[0], (pattern, lines[0])
    return lines[0]


@pytest.mark.parametrize("args", [
    ["replay", "--K", "nan", "--seeds", "1"],
    ["replay", "--K", "inf", "--seeds", "1"],
    ["replay", "--max-samples", "inf", "--seeds", "1"],
    ["replay", "--max-samples", "-inf", "--seeds", "1"],
    ["tune", "--policy", "ucb", "--K", "nan"],
    ["tune", "--policy", "sc-share", "--m-min", "nan"],
    ["tune", "--policy", "streaming", "--max-samples", "inf"],
    ["signals", "--ks", "nan"],
    ["theory", "--sizes", "inf"],
    ["bench", "--growth", "nan"],
])
def test_non_finite_integer_lists(args):
    one_line(args, "integers")


@pytest.mark.parametrize("args", [
    ["replay", "--seed-start", "-5", "--seeds", "2"],
    ["signals", "--seed-start", "-3", "--seeds", "2"],
    ["tune", "--policy", "ucb", "--split-seed", "-1"],
    ["compare", "--split-seed", "-1"],
    ["report", "--seed-start", "-1", "--out", "x"],
    ["theory", "--seed-start", "-1"],
    ["synth", "--seed", "-1", "--out", "x"],
    ["replay", "--seed-start", str(2**63), "--seeds", "2"],
])
def test_negative_or_too_large_seeds_are_refused(args):
    one_line(args, "seed")


def test_run_base_url_not_a_url(tmp_path):
    pytest.importorskip("openai")
    from support.synth_run import SynthPool, run_args

    sp = SynthPool(tmp_path, n=4, size=4, seed=3)
    for url in ("notaurl", "http://host:port/v1", "ftp://host/v1"):
        one_line(run_args(sp, url, tmp_path / "o", "--budget", "2"), "is not a server URL")
        assert not (tmp_path / "o").exists()


def test_merge_with_a_truncated_part(tmp_path):
    from support.fake_harvest import shards

    dirs = shards(tmp_path / "shards", count=2)
    part = sorted((dirs[1] / "samples").glob("*.parquet"))[0]
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    one_line(["merge", *dirs, "--out", tmp_path / "merged"], part.name)
    assert not (tmp_path / "merged").exists()


def test_a_fifo_as_samples_parquet_is_refused_not_waited_on(tmp_path):
    pool = tmp_path / "p"
    shutil.copytree(DEFAULT_POOL, pool)
    (pool / "samples.parquet").unlink()
    os.mkfifo(pool / "samples.parquet")
    for cmd in (["replay", pool, "--seeds", "1"], ["info", pool], ["signals", pool], ["compare", pool]):
        one_line(cmd, "not a regular file")


def test_a_fifo_as_a_part_file_is_refused(tmp_path):
    from support.fake_harvest import shards

    dirs = shards(tmp_path / "shards", count=2)
    part = sorted((dirs[1] / "samples").glob("*.parquet"))[0]
    part.unlink()
    os.mkfifo(part)
    one_line(["merge", *dirs, "--out", tmp_path / "merged"], "not a regular file")
    one_line(["replay", dirs[1], "--seeds", "1"], "not a regular file")


def test_a_fifo_part_is_refused_by_score(tmp_path):
    from support.fake_harvest import shards

    d = shards(tmp_path / "shards", count=1)[0]
    part = sorted((d / "samples").glob("*.parquet"))[0]
    part.unlink()
    os.mkfifo(part)
    one_line(["score", d, "--oracle", "gt"], "not a regular file")
