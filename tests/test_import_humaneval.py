"""`ttc import humaneval`: completions truncated the HumanEval way and run against the tests in a sandbox. The toy
fixture (tests/fixtures/import/humaneval/) has HumanEval's shape and cases whose outcome hinges on each rule: a stray
top-level print or def after the function (passes only when truncated), an infinite loop (timeout), an empty
completion (no answer), and two layouts of one program (one answer)."""
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.harvest.importers import humaneval_answer
from ttc.replay.pool import load_pool

FIX = Path(__file__).resolve().parent / "fixtures" / "import" / "humaneval"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pools" / "humaneval-codegen16b-100"


@pytest.fixture(autouse=True)
def _needs_sandbox():
    try:
        from ttc.harvest.oracles import code_exec, sandbox  # noqa: F401
    except ImportError:
        pytest.skip("harvest/oracles/sandbox.py and code_exec.py (the sandboxed runner) are not there yet")


def _run(*args):
    return CliRunner().invoke(app, ["import", "humaneval", *map(str, args)])


def test_toy_humaneval_truncates_runs_and_hashes(tmp_path):
    r = _run(FIX, "--out", tmp_path / "p", "--timeout", "2", "--workers", "2")
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(tmp_path / "p" / "samples.parquet").sort("query_id", "sample_idx")
    ok = {q[0]: g["correct"].to_list() for q, g in df.group_by("query_id", maintain_order=True)}
    assert ok == {"ToyEval/0": [True, True, False, True],     # the stray print is cut off
                  "ToyEval/1": [False, True, False, False],   # infinite loop, cut def, wrong, raises
                  "ToyEval/2": [True, False, False, True]}    # the trailing '#' block is cut off
    ans = {q[0]: g["answer"].to_list() for q, g in df.group_by("query_id", maintain_order=True)}
    a = ans["ToyEval/0"]
    assert a[0] == a[1] == a[3] != a[2]  # same program after truncation and whitespace collapsing
    assert ans["ToyEval/2"][2] is None    # empty completion: no answer
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert meta["execution"]["statuses"].get("timeout") == 1 and meta["execution"]["programs"] == 12
    assert meta["pass@1"] == 0.5  # 3 + 1 + 2 of 12
    from ttc.harvest.oracles.sandbox import isolation

    assert meta["execution"]["sandbox"] == isolation("auto")  # the isolation the programs had, recorded
    assert "pass@1 0.5000" in r.output
    text = (tmp_path / "p" / "samples.parquet").read_bytes() + (tmp_path / "p" / "queries.parquet").read_bytes()
    assert b"split()" not in text and b"return a" not in text  # figure-only: no code text in the pool
    p = load_pool(tmp_path / "p")
    assert p.query_ids == ["ToyEval/0", "ToyEval/1", "ToyEval/2"] and p.has_answers and not p.has_tokens
    rr = CliRunner().invoke(app, ["replay", str(tmp_path / "p"), "--seeds", "3", "--budgets", "2",
                                  "--select", "sc"])
    assert rr.exit_code == 0, rr.output
    assert humaneval_answer("  return  a\n") == "return a" and humaneval_answer(" \n ") is None


def test_humaneval_source_errors(tmp_path):
    src = tmp_path / "dump"
    src.mkdir()
    shutil.copy(FIX / "toy_problems.jsonl", src / "problems.jsonl")
    r = _run(src, "--out", tmp_path / "a")
    assert r.exit_code == 2 and "exactly one completions file" in r.output and "Traceback" not in r.output
    shutil.copy(FIX / "toy_completions.jsonl", src / "c1.jsonl")
    shutil.copy(FIX / "toy_completions.jsonl", src / "c2.jsonl")
    r = _run(src, "--out", tmp_path / "b")
    assert r.exit_code == 2 and "c1.jsonl, c2.jsonl" in r.output and "pass the one to import" in r.output
    lines = (FIX / "toy_completions.jsonl").read_text().splitlines()
    (src / "c1.jsonl").write_text("\n".join(lines[:2]) + "\n")  # ToyEval/1's completions are missing
    r = _run(src / "c1.jsonl", "--out", tmp_path / "c", "--limit", "1")
    assert r.exit_code == 0, r.output  # only ToyEval/0 asked for
    r = _run(src / "c1.jsonl", "--out", tmp_path / "d")
    assert r.exit_code == 2 and "ToyEval/1: no completions for its prompt" in r.output
    assert not (tmp_path / "d").exists()


def test_shared_codegen_dump_first_tasks(tmp_path):
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present (../shared/data is only beside the project on the team's machines)")
    r = _run(SHARED, "--out", tmp_path / "p", "--limit", "2", "--responses", "10")
    assert r.exit_code == 0, r.output
    p = load_pool(tmp_path / "p")
    assert p.query_ids == ["HumanEval/0", "HumanEval/1"] and p.sizes.tolist() == [10, 10]
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert meta["execution"]["programs"] == 20 and sum(meta["execution"]["statuses"].values()) == 20
    # HumanEval/0 is among the easiest tasks: CodeGen-16B solves it in most samples; a harness that fails
    # everything (no truncation, a broken test call) would show 0 here
    assert p.correct[:10].sum() >= 3


def test_humaneval_sandbox_and_timeout_options(tmp_path, monkeypatch):
    """--timeout inf was refused with a misleading 'does not look like humaneval'; --sandbox strict where the
    machine gives no OS isolation is its own one line, before any program runs."""
    r = _run(FIX, "--out", tmp_path / "a", "--timeout", "inf")
    assert r.exit_code == 2 and "--timeout must be a positive, finite number of seconds" in r.output, r.output
    assert "does not look like" not in r.output
    from ttc.harvest.oracles import sandbox

    def unavailable(mode="auto"):
        raise sandbox.SandboxUnavailable("--sandbox strict: this machine gives no OS isolation (test)")

    monkeypatch.setattr(sandbox, "isolation", unavailable)
    r = _run(FIX, "--out", tmp_path / "b", "--sandbox", "strict")
    assert r.exit_code == 2 and r.output.startswith("error: --sandbox strict: this machine gives no OS isolation")
    assert "does not look like" not in r.output and not (tmp_path / "b").exists()


def _loop_dump(tmp_path):
    """One task, four completions: three that never end, one right."""
    src = tmp_path / "loops"
    src.mkdir()
    prompt = 'def add(a, b):\n    """a + b"""\n'
    (src / "problems.jsonl").write_text(json.dumps({"task_id": "Loop/0", "prompt": prompt, "entry_point": "add",
                                                    "test": "def check(c):\n    assert c(1, 2) == 3\n"}) + "\n")
    samples = ["    while True:\n        pass\n"] * 3 + ["    return a + b\n"]
    (src / "completions.jsonl").write_text(json.dumps({"prompt": prompt, "samples": samples}) + "\n")
    return src


def test_a_time_limit_that_cannot_work_is_refused(tmp_path):
    """Issue 27: --timeout 1e-9 graded every program "timeout" and wrote pass@1 0.0000 with exit 0. The runner's
    self-check, timed, shows such a limit cannot work: one line, exit 2, nothing written."""
    r = _run(FIX, "--out", tmp_path / "p", "--timeout", "1e-9", "--workers", "1")
    assert r.exit_code == 2, r.output
    line = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert line and line[0].startswith("error: a time limit of 1e-09 s cannot work: the sandbox's self-check "
                                       "programs took")
    assert "raise --timeout" in line[0] and "Traceback" not in r.output
    assert not (tmp_path / "p").exists()


def test_a_run_where_most_programs_time_out_says_so(tmp_path):
    src = _loop_dump(tmp_path)
    r = _run(src, "--out", tmp_path / "p", "--timeout", "1", "--workers", "2")
    assert r.exit_code == 0, r.output
    warning = ("warning: 3 of 4 programs (75%) ran out of time (limit 1 s): their verdicts measure the limit, not "
               "the programs; raise --timeout or check the machine's load")
    assert warning in r.output.splitlines()
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert meta["warnings"] == [warning.removeprefix("warning: ")] and meta["pass@1"] == 0.25
    r = _run(src, "--out", tmp_path / "q", "--timeout", "1", "--responses", "1")
    assert r.exit_code == 0 and "warning: 1 of 1 programs (100%) ran out of time" in r.output
    r = _run(FIX, "--out", tmp_path / "r", "--timeout", "2", "--workers", "2")
    assert r.exit_code == 0 and "ran out of time" not in r.output  # 1 of 12: at most half, no warning


def test_every_grading_run_says_its_isolation(tmp_path):
    from ttc.harvest.oracles.sandbox import describe

    r = _run(FIX, "--out", tmp_path / "p", "--timeout", "2", "--workers", "2", "--sandbox", "guard")
    assert r.exit_code == 0 and "code sandbox: guard-only (--sandbox guard: no OS isolation" in r.output
    if describe()["level"] == "namespaces":
        r = _run(FIX, "--out", tmp_path / "q", "--timeout", "2", "--workers", "2")
        assert r.exit_code == 0 and f"code sandbox: namespaces ({describe()['reason']})" in r.output
