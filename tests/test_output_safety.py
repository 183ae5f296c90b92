"""What a command may replace, and how it replaces several outputs (issue 27, items 4 and 9): never a device, FIFO,
socket or a link to one, even with --force; a command's outputs as one set, all new or all old."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import polars as pl
import pytest

from ttc.replay.outputs import OutputError, check_output, write_parquet


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("force", [False, True])
def test_a_fifo_or_a_link_to_a_device_is_never_replaced(tmp_path, force):
    fifo = _fifo(tmp_path / "pipe.parquet")
    link = tmp_path / "null.parquet"
    link.symlink_to("/dev/null")  # only its type is read, never written
    for target in (fifo, link):
        with pytest.raises(OutputError, match="not a regular file or directory"):
            check_output(target, flag="--out", command="replay", force=force)
        assert target.is_symlink() or stat.S_ISFIFO(target.lstat().st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    d = tmp_path / "dirlink"
    d.symlink_to("/dev/null")
    with pytest.raises(OutputError, match="not a regular file or directory"):
        check_output(d, flag="--out", command="report", force=force, kind="dir")


def test_replay_force_onto_a_fifo_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from ttc import cli

    fifo = _fifo(tmp_path / "r.parquet")
    link = tmp_path / "n.parquet"
    link.symlink_to("/dev/null")
    for target in (fifo, link):
        r = CliRunner().invoke(cli.app, ["replay", "--seeds", "2", "--budgets", "4", "--out", str(target), "--force"])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and "not a regular file" in lines[0], r.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and os.readlink(link) == "/dev/null"


def test_a_regular_file_and_a_link_to_one_are_still_replaced_with_force(tmp_path):
    f = tmp_path / "mine.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(f)
    check_output(f, flag="--out", command="replay", force=True)
    write_parquet(pl.DataFrame({"a": [2]}), f, "replay")
    assert pl.read_parquet(f)["a"].to_list() == [2]


# ---------------------------------------------------------------------------------------------------------------
# Full disks (a small tmpfs in a mount namespace: tests/test_outputs.py's helpers)

def _tmpfs_helpers():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_outputs

    if not test_outputs._namespaces():
        pytest.skip("needs unprivileged user and mount namespaces (unshare -rm) to mount a small tmpfs")
    return test_outputs


def test_full_disk_compare_out_is_one_line(tmp_path):
    t = _tmpfs_helpers()
    from ttc.replay.pool import DEFAULT_POOL

    mnt = tmp_path / "disk"
    r = t._in_tmpfs(mnt, "12k", [t.TTC, "compare", DEFAULT_POOL, "--policy", "uniform", "--seeds", 2, "--budgets", 4,
                                 "--out", mnt / "compare"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in t._error_line(r)
    assert t._left(r) == []
