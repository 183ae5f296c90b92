"""Outputs are checked before the work, written atomically, and never replace what the user did not ask to replace
(issue 13; replay/outputs.py). The fault-injection tests run the real command line in a user and mount namespace
(`unshare -rm`) where a tiny or read-only tmpfs stands in for a full or unwritable disk: on this machine the tests
run as root, and root ignores permission bits, so only a file system that refuses the write tests the path."""
from __future__ import annotations

import hashlib
import math
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from ttc.replay.outputs import (
    DIR_MARK,
    OutputError,
    atomic_dir,
    atomic_file,
    check_new_pool,
    check_output,
    write_parquet,
    written_by,
)
from ttc.replay.policies import RunConfig
from ttc.replay.pool import DEFAULT_POOL

from support.tmpfs import _error_line, _in_tmpfs, _left, needs_ns

TTC = shutil.which("ttc")


def _tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(Path(path).rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(path)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _ttc(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([TTC, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _one_error_line(r: subprocess.CompletedProcess, pattern: str):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    import re
    assert re.search(pattern, lines[0]), lines[0]


# ---------------------------------------------------------------------------------------------------------------
# check_output and the writers, in-process


def test_nan_and_infinite_parameters_are_refused_by_runconfig():
    for kw in ({"lam": math.nan}, {"lam": math.inf}, {"eps": math.nan}, {"eps": math.inf}, {"gamma": math.nan}):
        with pytest.raises(ValueError):
            RunConfig("ucb", **kw)


def test_own_output_is_replaced_other_files_need_force(tmp_path):
    out = tmp_path / "runs.parquet"
    check_output(out, flag="--out", command="replay")  # new: fine
    write_parquet(pl.DataFrame({"a": [1]}), out, "replay")
    assert written_by(out) == "replay"
    check_output(out, flag="--out", command="replay")  # its own earlier output: fine
    with pytest.raises(OutputError, match=r"written by `ttc replay`, not `ttc report`"):
        check_output(out, flag="--out", command="report")
    alien = tmp_path / "mine.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(alien)  # a user's file, no mark
    with pytest.raises(OutputError, match=r"exists and was not written by `ttc replay`; pass --force"):
        check_output(alien, flag="--out", command="replay")
    check_output(alien, flag="--out", command="replay", force=True)
    text = tmp_path / "notes.txt"
    text.write_text("precious")
    with pytest.raises(OutputError, match="pass --force"):
        check_output(text, flag="--out", command="replay")


def test_destination_inside_or_holding_what_is_read_is_refused(tmp_path):
    pool = tmp_path / "pool"
    pool.mkdir()
    with pytest.raises(OutputError, match="which this command reads"):
        check_output(pool / "samples.parquet", flag="--out", command="replay", reads=[pool], force=True)
    with pytest.raises(OutputError, match="holds"):  # replacing tmp_path would remove the pool
        check_output(tmp_path, flag="--out", command="report", reads=[pool], force=True, kind="dir")
    with pytest.raises(OutputError, match="which this command reads"):
        check_new_pool(pool / "merged", reads=[pool])
    with pytest.raises(OutputError, match="is a directory"):
        check_output(pool, flag="--out", command="replay")


def test_atomic_file_keeps_the_old_content_when_the_write_fails(tmp_path):
    out = tmp_path / "x.parquet"
    write_parquet(pl.DataFrame({"v": [1, 2]}), out, "replay")
    before = out.read_bytes()
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with atomic_file(out) as tmp:
                tmp.write_bytes(b"half a fi")
                raise exc
        assert out.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet"]  # no temporary left


def test_atomic_dir_replaces_a_directory_whole_and_marks_it(tmp_path):
    out = tmp_path / "report"
    with atomic_dir(out, "report") as d:
        (d / "a.txt").write_text("1")
    assert (out / "a.txt").read_text() == "1" and written_by(out) == "report"
    with pytest.raises(RuntimeError):
        with atomic_dir(out, "report") as d:
            (d / "b.txt").write_text("2")
            raise RuntimeError("halfway")
    assert sorted(p.name for p in out.iterdir()) == [DIR_MARK, "a.txt"]
    with atomic_dir(out, "report") as d:
        (d / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [DIR_MARK, "b.txt"]  # replaced, not merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


# ---------------------------------------------------------------------------------------------------------------
# The command line


def test_replay_out_into_the_pool_it_reads_is_refused_and_the_pool_is_intact(tmp_path):
    pool = tmp_path / "pool"
    shutil.copytree(DEFAULT_POOL, pool)
    digest = _tree_digest(pool)
    r = _ttc("replay", pool, "--seeds", 2, "--out", pool / "samples.parquet", "--force")
    _one_error_line(r, r"is inside .*pool, which this command reads")
    assert _tree_digest(pool) == digest


def test_replay_refuses_to_overwrite_a_foreign_file_before_running(tmp_path):
    precious = tmp_path / "precious.parquet"
    pl.DataFrame({"x": [1, 2, 3]}).write_parquet(precious)
    before = precious.read_bytes()
    r = _ttc("replay", "--seeds", 2, "--out", precious)
    _one_error_line(r, r"exists and was not written by `ttc replay`; pass --force")
    assert precious.read_bytes() == before
    assert "queries" not in r.stdout  # refused before the run started
    r = _ttc("replay", "--seeds", 2, "--budgets", 4, "--out", precious, "--force")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(precious)["seed"].n_unique() == 2
    r = _ttc("replay", "--seeds", 3, "--budgets", 4, "--out", precious)  # now ttc replay's own: replaced
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(precious)["seed"].n_unique() == 3


def test_report_refuses_a_directory_it_did_not_write(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    r = _ttc("report", DEFAULT_POOL, "--out", d, "--seeds", 2, "--budgets", 4)
    _one_error_line(r, r"exists and was not written by `ttc report`; pass --force")
    assert (d / "thesis.tex").read_text() == "precious"


def test_per_query_past_the_memory_is_refused_before_the_run(tmp_path):
    r = _ttc("replay", "--seeds", 10_000_000, "--per-query", tmp_path / "pq.parquet", timeout=120)
    _one_error_line(r, r"--per-query would hold [\d,]+ rows .* GiB\) and this machine has .* GiB available")
    import re  # the rows are the default grid's configurations x seeds x queries, whatever the registry holds
    rows, configs = re.search(r"hold ([\d,]+) rows \((\d+) configurations x budgets, 10,000,000 seeds, 500 queries",
                              r.stderr).groups()
    assert int(rows.replace(",", "")) == int(configs) * 10_000_000 * 500
    assert not (tmp_path / "pq.parquet").exists()


def test_progress_lines_when_not_a_terminal():
    import io

    from ttc.replay.progress import progress

    out = io.StringIO()
    with progress(10, "replaying", "seeds", every_s=0.0, stream=out) as p:
        for _ in range(10):
            p.advance(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("replaying: 1/10 seeds (10%)")
    assert lines[-1].startswith("replaying: 10/10 seeds (100%)")
    assert not any("left" in ln for ln in lines)  # a fraction of a second of work: too little to estimate from
    out = io.StringIO()
    with progress(4, "generating", "queries", every_s=0.0, stream=out, rates=("responses", "tokens")) as p:
        for _ in range(4):
            p.advance(1, responses=8, tokens=100)
    assert p.amounts == {"responses": 32, "tokens": 400}
    assert "responses/s" in out.getvalue() and "tokens/s" in out.getvalue()
    out = io.StringIO()
    with progress(10, "replaying", every_s=3600.0, stream=out) as p:  # short work: nothing printed
        p.advance(10)
    assert out.getvalue() == ""


# ---------------------------------------------------------------------------------------------------------------
# Faults: a full disk, a read-only file system, a kill in the middle of a write


@needs_ns
def test_full_disk_replay_out(tmp_path):
    mnt = tmp_path / "disk"
    r = _in_tmpfs(mnt, "8k", [TTC, "replay", "--seeds", 200, "--out", mnt / "runs.parquet"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in _error_line(r)
    assert _left(r) == []  # nothing half-written, no temporary


@needs_ns
def test_full_disk_keeps_the_earlier_output(tmp_path):
    """The earlier output of the same command survives a failed replacement, byte for byte."""
    mnt = tmp_path / "disk"
    first = (f"{TTC} replay --seeds 2 --budgets 4 --out {mnt}/runs.parquet >/dev/null && "
             f"sha256sum {mnt}/runs.parquet && ")
    r = _in_tmpfs(mnt, "24k", [TTC, "replay", "--seeds", 400, "--out", mnt / "runs.parquet"], prepare=first,
                  after=f"sha256sum {mnt}/runs.parquet;")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in _error_line(r)
    digests = [line.split()[0] for line in r.stdout.splitlines() if line.endswith("runs.parquet")]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert _left(r) == ["runs.parquet"]


@needs_ns
@pytest.mark.parametrize("cmd", [
    ["replay", "--seeds", 2, "--out", "{mnt}/runs.parquet"],
    ["replay", "--seeds", 2, "--curve", "{mnt}/curve.parquet"],
    ["info", "--plot", "{mnt}/curves.png"],
    ["report", "{pool}", "--out", "{mnt}/report", "--seeds", 2, "--budgets", 4],
    ["synth", "--out", "{mnt}/synth", "--queries", 5, "--responses", 4],
    ["theory", "--sizes", 4, "--seeds", 2, "--out", "{mnt}/theory"],
    ["import", "generic", "{src}", "--out", "{mnt}/imported", "--correct", "correct"],
    ["signals", "--seeds", 2, "--out", "{mnt}/signals.parquet"],
    ["tune", "--policy", "elimination", "--max-samples", "0,4", "--seeds", 2, "--budgets", 4, "--out",
     "{mnt}/tune.parquet"],
    ["compare", "{pool}", "--policy", "uniform", "--seeds", 2, "--budgets", 4, "--out", "{mnt}/compare"],
])
def test_read_only_destination_is_refused_before_the_work(tmp_path, cmd):
    mnt = tmp_path / "ro"
    src = tmp_path / "dump.parquet"
    pl.DataFrame({"query_id": ["a", "a", "b"], "correct": [True, False, True]}).write_parquet(src)
    args = [str(a).format(mnt=mnt, pool=DEFAULT_POOL, src=src) for a in cmd]
    t0 = time.perf_counter()
    r = _in_tmpfs(mnt, "1m", [TTC, *args], ro=True)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Read-only file system" in _error_line(r)
    assert _left(r) == []
    assert "wrote" not in r.stdout
    if cmd[0] in ("replay", "report", "signals", "tune", "compare"):
        assert "seeds" not in r.stdout  # refused before any replay started
    assert time.perf_counter() - t0 < 120


@needs_ns
@pytest.mark.parametrize("cmd", [
    ["report", "{pool}", "--out", "{mnt}/report", "--seeds", 2, "--budgets", 4],
    ["synth", "--out", "{mnt}/synth", "--queries", 400, "--responses", 64],
    ["info", "--plot", "{mnt}/curves.png"],
])
def test_full_disk_other_commands(tmp_path, cmd):
    mnt = tmp_path / "disk"
    args = [str(a).format(mnt=mnt, pool=DEFAULT_POOL) for a in cmd]
    r = _in_tmpfs(mnt, "16k", [TTC, *args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in _error_line(r)
    assert _left(r) == []


_WRITER = textwrap.dedent("""
    import sys, numpy as np, polars as pl
    from ttc.replay.outputs import write_parquet
    out, k = sys.argv[1], 0
    rng = np.random.default_rng(0)
    while True:  # rewrite a large file forever, each version with its number in every row
        k += 1
        write_parquet(pl.DataFrame({"version": np.full(2_000_000, k), "x": rng.random(2_000_000)}), out, "replay")
        print(k, flush=True)
""")


def test_sigkill_in_the_middle_of_writes_leaves_a_whole_file(tmp_path):
    """Killed at arbitrary moments while rewriting a 30 MB file: what is there is always one whole version."""
    out = tmp_path / "big.parquet"
    for delay in (0.9, 1.7, 2.6):
        p = subprocess.Popen([sys.executable, "-c", _WRITER, str(out)], stdout=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if out.exists():
            v = pl.read_parquet(out)["version"]
            assert v.n_unique() == 1 and len(v) == 2_000_000
    assert out.exists(), "the writer never finished a version; raise the delays"
    # the next write clears what killed writers left (their temporaries) beside the file
    write_parquet(pl.DataFrame({"a": [1]}), out, "replay")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.parquet"]


# ---------------------------------------------------------------------------------------------------------------
# Every numeric option: a non-finite value is one error line, before the work


@pytest.mark.parametrize("args", [
    ["synth", "--out", "{tmp}/s", "--tokens", "inf"],  # a traceback-free but wrong refusal before ("negative values")
    ["synth", "--out", "{tmp}/s", "--answer-skew", "inf"],
    ["synth", "--out", "{tmp}/s", "--tokens-sigma", "nan"],
    ["bench", "--budgets", "nan", "--queries", "5", "--responses", "4", "--seeds", "1", "--repeats", "1",
     "--reference-seeds", "0", "--growth", ""],  # a traceback before
    ["theory", "--sizes", "4", "--seeds", "2", "--delta", "nan"],
    ["report", str(DEFAULT_POOL), "--out", "{tmp}/r", "--gamma", "nan"],
    ["report", str(DEFAULT_POOL), "--out", "{tmp}/r", "--budgets", "inf"],
    ["replay", "--budgets", "nan"],
    ["replay", "--conf", "nan", "--eliminate", "sc-beta"],
    ["replay", "--gamma", "nan"],
])
def test_non_finite_options_are_refused(tmp_path, args):
    from typer.testing import CliRunner

    from ttc import cli

    r = CliRunner().invoke(cli.app, [a.format(tmp=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.strip().startswith("error: "), r.output
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------------------------
# Harvest: every sampling parameter is refused before a model loads or a file is written


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1"], r"--temperature must be a finite number >= 0"),
    (["--temperature", "nan"], r"--temperature must be a finite number >= 0 \(0 = greedy\), got nan"),  # traceback
    (["--temperature", "inf"], r"--temperature must be a finite number >= 0"),
    (["--top-p", "0"], r"--top-p must be in \(0, 1\], got 0"),
    (["--top-p", "nan"], r"--top-p must be in \(0, 1\]"),
    (["--top-p", "1.5"], r"--top-p must be in \(0, 1\]"),
])
def test_harvest_sampling_refused_before_the_model_loads(tmp_path, args, message):
    from typer.testing import CliRunner

    from ttc import cli

    data = Path(__file__).parent / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    out = tmp_path / "pool"
    # the model does not exist: a refusal that came after loading it would be a different error
    r = CliRunner().invoke(cli.app, ["harvest", "--dataset", str(data), "--model", str(tmp_path / "no-such-model"),
                                     "--backend", "transformers", "--out", str(out), "-n", "2", "--max-tokens", "4",
                                     *args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.strip().startswith("error: "), r.output
    import re
    assert re.search(message, r.output), r.output
    assert not out.exists()  # nothing left to block the corrected run


@needs_ns
def test_full_disk_merge(tmp_path):
    from support.fake_harvest import shards

    dirs = shards(tmp_path / "shards", count=2)
    mnt = tmp_path / "disk"
    r = _in_tmpfs(mnt, "12k", [TTC, "merge", *dirs, "--out", mnt / "merged"])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in _error_line(r)  # a traceback from the copy before
    assert _left(r) == []


@needs_ns
def test_full_disk_while_scoring_leaves_every_part_whole(tmp_path):
    """ttc score rewrites the pool's parts in place (its job): on a full disk, one error line, every part whole
    (each is replaced only by a rename of a complete file), no temporary left, so a rerun resumes."""
    from support.fake_harvest import harvest

    pool = tmp_path / "src"
    harvest(pool, shard_size=2)
    used = sum(-(-f.stat().st_size // 4096) * 4096 for f in pool.rglob("*") if f.is_file())
    mnt = tmp_path / "disk"
    check = (f"{sys.executable} -c \"import sys; from pathlib import Path; from ttc.replay.pool import verify_file; "
             f"[verify_file(p) for p in sorted(Path('{mnt}/pool/samples').glob('part-*.parquet'))]; "
             f"tmps = list(Path('{mnt}/pool').rglob('.*tmp-*')); print('PARTS OK' if not tmps else tmps)\";")
    r = _in_tmpfs(mnt, f"{used // 1024}k", [TTC, "score", mnt / "pool", "--oracle", "gt", "--no-progress"],
                  prepare=f"cp -r {pool} {mnt}/pool && ", after=check)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "No space left on device" in _error_line(r)
    assert "PARTS OK" in r.stdout
    assert not [n for n in _left(r) if n != "pool"]


def test_report_past_the_memory_is_refused_before_replaying(tmp_path):
    r = _ttc("report", DEFAULT_POOL, "--out", tmp_path / "rep", "--seeds", 1_000_000, "--budgets", 4, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: ttc report (its allocation table) would hold" in r.stderr and "GiB available" in r.stderr
    assert not (tmp_path / "rep").exists() and list(tmp_path.iterdir()) == []
