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
# Full disks (a small tmpfs in a mount namespace: tests/support/tmpfs.py)

def _tmpfs_helpers():
    from support import tmpfs

    if not tmpfs._namespaces():
        pytest.skip("needs unprivileged user and mount namespaces (unshare -rm) to mount a small tmpfs")
    return tmpfs


def test_full_disk_compare_out_is_one_line(tmp_path):
    t = _tmpfs_helpers()
    from ttc.replay.pool import DEFAULT_POOL

    mnt = tmp_path / "disk"
    r = t._in_tmpfs(mnt, "12k", [t.TTC, "compare", DEFAULT_POOL, "--policy", "uniform", "--seeds", 2, "--budgets", 4,
                                 "--out", mnt / "compare"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in t._error_line(r)
    assert t._left(r) == []


# ---------------------------------------------------------------------------------------------------------------
# Sets of outputs (item 9)

def _df(v):
    return pl.DataFrame({"v": [v]})


def _v(p):
    return pl.read_parquet(p)["v"].to_list()


def test_a_failure_on_the_second_file_leaves_the_whole_set_old(tmp_path):
    import errno

    from ttc.replay.outputs import parquet_writer, write_set

    a, b = tmp_path / "r.parquet", tmp_path / "pq.parquet"
    write_set([(a, parquet_writer(_df(1), "replay")), (b, parquet_writer(_df(1), "replay"))])

    def full(tmp):
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match=r"No space left on device; none of this command's outputs .* was changed"):
        write_set([(a, parquet_writer(_df(2), "replay")), (b, full)])
    assert _v(a) == [1] and _v(b) == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.parquet", "r.parquet"]


_KILLER = """
import os, signal, sys
from pathlib import Path
import polars as pl
from ttc.replay import outputs
a, b, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
real = outputs._swap_in
calls = []
def swap(tmp, path, old):
    calls.append(path)
    if where == "between-renames" and len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(tmp, path, old)
outputs._swap_in = swap
def second(tmp):
    if where == "while-writing":
        tmp.write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
    pl.DataFrame({"v": [2]}).write_parquet(tmp)
outputs.write_set([(a, outputs.parquet_writer(pl.DataFrame({"v": [2]}), "replay")), (b, second)])
"""


@pytest.mark.parametrize("where,after_kill,after_next", [
    ("while-writing", [1, 1], None),       # killed before any rename: the old set, temporaries cleaned next run
    ("between-renames", None, [2, 2]),     # killed inside the rename loop: the next run finishes the set first
])
def test_a_killed_set_is_all_old_or_finished_by_the_next_run(tmp_path, where, after_kill, after_next):
    import subprocess
    import sys

    from ttc.replay.outputs import parquet_writer, roll_forward, write_set

    a, b = tmp_path / "r.parquet", tmp_path / "pq.parquet"
    write_set([(a, parquet_writer(_df(1), "replay")), (b, parquet_writer(_df(1), "replay"))])
    r = subprocess.run([sys.executable, "-c", _KILLER, str(a), str(b), where], capture_output=True, text=True)
    assert r.returncode == -9, r.stderr
    if after_kill is not None:
        assert [_v(a)[0], _v(b)[0]] == after_kill
    assert any(p.name.startswith(".") for p in tmp_path.iterdir())  # the killed run's leftovers
    roll_forward(tmp_path)  # what the next run's write_set does first
    if after_next is not None:
        assert [_v(a)[0], _v(b)[0]] == after_next
    write_set([(a, parquet_writer(_df(3), "replay")), (b, parquet_writer(_df(3), "replay"))])
    assert [_v(a)[0], _v(b)[0]] == [3, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.parquet", "r.parquet"]  # no stale temporaries


def test_stale_directory_temporaries_are_cleaned_and_a_missing_destination_restored(tmp_path):
    import subprocess

    from ttc.replay.outputs import atomic_dir

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "report"
    with atomic_dir(out, "report") as d:
        (d / "a.txt").write_text("old")
    # a killed run: its temporary directory, and (a kill between two renames) the old output set aside, the
    # destination missing
    (tmp_path / f".report.tmp-{dead.pid}").mkdir()
    (tmp_path / f".report.tmp-{dead.pid}" / "half.txt").write_text("x")
    os.replace(out, tmp_path / f".report.old-{dead.pid}")
    from ttc.replay.outputs import clear_stale

    clear_stale(out)
    assert (out / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    with atomic_dir(out, "report") as d:
        (d / "b.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [".ttc-output.json", "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_replay_writes_out_per_query_and_curve_as_one_set(tmp_path):
    from typer.testing import CliRunner

    from ttc import cli

    a, b, c = tmp_path / "r.parquet", tmp_path / "pq.parquet", tmp_path / "c.parquet"
    r = CliRunner().invoke(cli.app, ["replay", "--seeds", "2", "--budgets", "4", "--policy", "uniform", "--out", str(a),
                                     "--per-query", str(b), "--curve", str(c)])
    assert r.exit_code == 0, r.output
    assert pl.read_parquet(a)["seed"].n_unique() == 2 and pl.read_parquet(b)["seed"].n_unique() == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet", "pq.parquet", "r.parquet"]
