"""Code oracles: the sandbox contains what generated programs do wrong, and the LiveCodeBench-execution and HumanEval
conventions grade like the benchmarks do."""
import json
import time
from pathlib import Path

import pytest

from ttc.harvest.oracles.code_exec import (
    extract_lcb_answer,
    grade_lcb,
    humaneval_program,
    humaneval_truncate,
    is_literal,
    lcb_program,
)
from ttc.harvest.oracles.sandbox import STATUSES, ExecResult, run_many, run_program

HUMANEVAL = (Path(__file__).resolve().parents[2] / "shared" / "data" / "pools" / "humaneval-codegen16b-100"
             / "HumanEval_for_code_generation.jsonl")


# --- sandbox: normal outcomes ------------------------------------------------------------------------------------

def test_correct_program_passes():
    r = run_program("def f(x):\n    return x + 1\n\nassert f(1) == 2\nprint('done')\n", timeout_s=5)
    assert r == ExecResult(True, "passed", "")


def test_wrong_assertion_fails_with_its_traceback():
    r = run_program("def f(x):\n    return x + 1\n\nassert f(1) == 3\n", timeout_s=5)
    assert (r.passed, r.status) == (False, "failed")
    assert "AssertionError" in r.detail


def test_syntax_error_fails():
    r = run_program("def f(:\n    pass\n", timeout_s=5)
    assert (r.passed, r.status) == (False, "failed") and "SyntaxError" in r.detail


@pytest.mark.parametrize("sandbox", ["auto", "guard"])
def test_early_exit_does_not_pass(sandbox):
    # exit(0) before the failing assert must not look like success
    r = run_program("import sys\nsys.exit(0)\nassert False\n", timeout_s=5, sandbox=sandbox)
    assert (r.passed, r.status) == (False, "failed")


def test_program_may_use_its_own_directory_and_environment():
    src = ("open('scratch.txt', 'w').write('hi')\nassert open('scratch.txt').read() == 'hi'\n"
           "import os, tempfile\nos.environ['X'] = '1'\nwith tempfile.NamedTemporaryFile() as f: pass\n")
    assert run_program(src, timeout_s=5).passed


# --- sandbox: containment ----------------------------------------------------------------------------------------

def test_infinite_loop_times_out_within_bound():
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", timeout_s=1.0)
    assert (r.passed, r.status) == (False, "timeout")
    assert time.monotonic() - t0 < 5


def test_sleeping_program_is_killed_at_the_wall_clock():
    # no CPU use, so only the wall-clock limit can stop it
    t0 = time.monotonic()
    r = run_program("import time\ntime.sleep(60)\n", timeout_s=1.0)
    assert (r.passed, r.status) == (False, "timeout")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("bomb", [
    "x = bytearray(64 * 2**30)\n",                                   # one huge allocation
    "chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n",  # growth until the limit
])
def test_memory_bomb_hits_the_memory_limit(bomb):
    t0 = time.monotonic()
    r = run_program(bomb, timeout_s=10, memory_mb=256)
    assert (r.passed, r.status) == (False, "memory"), r
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("attack", [
    "import os\nos.remove({p!r})\n",
    "import os\nos.unlink({p!r})\n",
    "import pathlib\npathlib.Path({p!r}).unlink()\n",
    "import shutil\nshutil.rmtree({d!r})\n",
    "open({p!r}, 'w').write('')\n",
    "import os\nos.rename({p!r}, {p!r} + '.moved')\n",
    "import io\nio.FileIO({p!r}, 'w')\n",
    "import os\nos.symlink({p!r}, 'link')\nopen('link', 'w').write('')\n",  # through a link made inside
    "import os\nos.symlink({p!r}, 'link')\nos.chmod('link', 0)\n",
    "import os\nos.symlink({p!r}, 'link')\nos.truncate('link', 0)\n",
    "import os\nos.link({p!r}, 'hard')\nopen('hard', 'w').write('')\n",
])
@pytest.mark.parametrize("sandbox", ["auto", "guard"])
def test_deleting_or_clobbering_a_file_outside_is_blocked(tmp_path, attack, sandbox):
    """The guard refuses these (both levels; under namespaces the file is not even there to reach)."""
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    r = run_program(attack.format(p=str(canary), d=str(tmp_path)), timeout_s=5, sandbox=sandbox)
    assert not r.passed and r.status == "failed"
    assert "sandbox:" in r.detail
    assert canary.read_text() == "alive"


@pytest.mark.parametrize("spawn", [
    "import os\nwhile True:\n    os.fork()\n",
    "import subprocess\nsubprocess.run(['touch', {m!r}])\n",
    "import subprocess\nsubprocess.Popen(['touch', {m!r}]).wait()\n",
    "import os\nos.system('touch ' + {m!r})\n",
    "import os\nos.execv('/usr/bin/touch', ['touch', {m!r}])\n",
    "import multiprocessing\n",
    "import ctypes\nctypes.CDLL(None).fork()\n",
])
@pytest.mark.parametrize("sandbox", ["auto", "guard"])
def test_spawning_processes_is_blocked(tmp_path, spawn, sandbox):
    marker = tmp_path / "spawned"
    r = run_program(spawn.format(m=str(marker)), timeout_s=5, sandbox=sandbox)
    assert not r.passed and r.status == "failed", r
    assert not marker.exists()


def test_scratch_files_inside_may_be_removed():
    src = ("import os, shutil\nos.makedirs('d/e')\nopen('d/e/f', 'w').write('x')\nos.symlink('/etc/hostname', 'l')\n"
           "os.remove('l')\nos.rename('d/e/f', 'g')\nos.unlink('g')\nshutil.rmtree('d')\n"
           "assert os.listdir('.') == ['program.py']\n")
    r = run_program(src, timeout_s=5)
    assert r.passed, r


def test_signalling_other_processes_is_blocked():
    r = run_program("import os\nos.kill(os.getppid(), 0)\n", timeout_s=5)  # signal 0: a harmless probe
    assert r.status == "failed" and "os.kill is disabled" in r.detail


def test_parent_secrets_are_not_inherited(monkeypatch):
    monkeypatch.setenv("FAKE_SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    src = ("import os\n"
           "assert 'FAKE_SECRET_TOKEN' not in os.environ and 'OPENAI_API_KEY' not in os.environ\n"
           "assert not [k for k in os.environ if 'TOKEN' in k or 'KEY' in k or 'SECRET' in k], dict(os.environ)\n"
           "assert 'hunter2' not in repr(dict(os.environ))\n")
    assert run_program(src, timeout_s=5).passed
    # and the guard refuses to read the parent's environment block through /proc
    r = run_program("import os\nopen(f'/proc/{os.getppid()}/environ', 'rb').read()\n", timeout_s=5)
    assert r.status == "failed" and "environment" in r.detail


def test_oversized_output_file_is_cut_off():
    r = run_program("with open('big', 'w') as f:\n    while True:\n        f.write('x' * 2**20)\n", timeout_s=10)
    assert not r.passed and r.status in ("failed", "error") and "too large" in r.detail.lower()


def test_run_many_keeps_order_and_statuses():
    sources = ["assert 1 == 1\n", "assert 1 == 2\n", "while True: pass\n", "x = 1\n"]
    t0 = time.monotonic()
    out = run_many(sources, workers=2, timeout_s=1.0)
    assert [r.status for r in out] == ["passed", "failed", "timeout", "passed"]
    assert all(r.status in STATUSES for r in out)
    assert time.monotonic() - t0 < 8


# --- LiveCodeBench code execution --------------------------------------------------------------------------------

# Fixtures in the livecodebench/execution-v2 schema (question_id, function_name, code, input, output), written here.
LCB = [
    {"question_id": "fx-1", "function_name": "countEven",
     "code": "def countEven(nums: List[int]) -> int:\n    return sum(1 for x in nums if x % 2 == 0)",
     "input": "countEven(nums = [1, 2, 4, 7])", "output": "2"},
    {"question_id": "fx-2", "function_name": "joinWords",
     "code": "def joinWords(words: List[str]) -> str:\n    c = Counter(words)\n    return '=='.join(sorted(c))",
     "input": "joinWords(words = ['b', 'a', 'b'])", "output": "'a==b'"},
    {"question_id": "fx-3", "function_name": "pairs",
     "code": "def pairs(n: int) -> List[Tuple[int, int]]:\n    return [(i, n - i) for i in range(n + 1) if i <= n - i]",
     "input": "pairs(n = 3)", "output": "[(0, 3), (1, 2)]"},
]


@pytest.mark.parametrize("text, expected", [
    ("Let me think... [ANSWER]assert countEven(nums = [1, 2, 4, 7]) == 2[/ANSWER]", "2"),
    ("[ANSWER]\nassert joinWords(words = ['=']) == '=='\n[/ANSWER]", "'=='"),
    ("[ANSWER]\n```python\nassert f(1) == [1, 2]\n```\n[/ANSWER]", "[1, 2]"),
    ("Example: [ANSWER]assert f(0) == 9[/ANSWER]\nNow: [ANSWER]assert f(1) == 'x'[/ANSWER]", "'x'"),
    ("[ANSWER] 'ab' [/ANSWER]", "'ab'"),
])
def test_extract_lcb_answer(text, expected):
    assert extract_lcb_answer(text) == expected


@pytest.mark.parametrize("text", ["no tags at all", "[ANSWER] 7 (cut off", "[ANSWER][/ANSWER]", None])
def test_extract_lcb_answer_absent(text):
    assert extract_lcb_answer(text) is None


def test_only_literals_count_as_answers():
    assert all(is_literal(s) for s in ["2", "-3.5", "'a'", "[(0, 3)]", "{1: 'x'}", "set()", "1+2j", "None"])
    assert not any(is_literal(s) for s in ["countEven([2])", "x", "[1] * 3", "float('inf')", "1 if 1 else 2"])
    with pytest.raises(ValueError, match="not a Python literal"):
        lcb_program(LCB[0]["code"], LCB[0]["input"], LCB[0]["input"])


def test_grade_lcb_on_fixtures():
    codes, inputs, preds, expected = [], [], [], []
    for row in LCB:
        for pred, ok in [(row["output"], True), ("'definitely wrong'", False), (None, False),
                         (row["input"], False)]:  # the call itself is not an answer
            codes.append(row["code"])
            inputs.append(row["input"])
            preds.append(pred)
            expected.append(ok)
    # an equal literal written differently still passes: the assertion compares values
    codes.append(LCB[2]["code"])
    inputs.append(LCB[2]["input"])
    preds.append("[(0,3),(1,2)]")
    expected.append(True)
    assert grade_lcb(codes, inputs, preds, workers=2, timeout_s=5) == expected


def test_grade_lcb_loop_in_code_is_incorrect():
    code = "def f(n):\n    while n > 0:\n        n += 1\n    return n"
    assert grade_lcb([code], ["f(n = 1)"], ["0"], timeout_s=1.0) == [False]


# --- HumanEval ---------------------------------------------------------------------------------------------------

def test_humaneval_truncate_at_first_stop():
    body = "    return x + 1\n"
    assert humaneval_truncate(body + "\n\ndef other():\n    pass\n") == body + "\n"
    assert humaneval_truncate(body + "\nif __name__ == '__main__':\n    print(f(1))") == body
    assert humaneval_truncate(body + "\nprint(f(2))\n#comment") == body
    assert humaneval_truncate(body + "    # an indented comment stays\n") == body + "    # an indented comment stays\n"
    assert humaneval_truncate(body) == body


def test_humaneval_program_layout():
    prog = humaneval_program("def inc(x):\n", "    return x + 1\nprint('junk')",
                             "def check(c):\n    assert c(1) == 2\n", "inc")
    assert prog == "def inc(x):\n    return x + 1\ndef check(c):\n    assert c(1) == 2\n\ncheck(inc)\n"
    assert run_program(prog, timeout_s=5).passed


@pytest.fixture(scope="module")
def humaneval_tasks():
    if not HUMANEVAL.exists():
        pytest.skip(f"HumanEval data not present at {HUMANEVAL}")
    with HUMANEVAL.open() as f:
        return [json.loads(line) for line in f][:10]


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail(humaneval_tasks):
    good = [humaneval_program(t["prompt"], t["canonical_solution"], t["test"], t["entry_point"])
            for t in humaneval_tasks]
    bad = [humaneval_program(t["prompt"], "    return None\n", t["test"], t["entry_point"]) for t in humaneval_tasks]
    out = run_many(good + bad, workers=2, timeout_s=10)
    n = len(humaneval_tasks)
    assert [r.status for r in out[:n]] == ["passed"] * n, [(t["task_id"], r) for t, r in zip(humaneval_tasks, out)]
    assert not any(r.passed for r in out[n:])


def test_run_many_with_progress_bar():
    out = run_many(["assert True\n", "assert False\n"], workers=2, timeout_s=5, progress=True)
    assert [r.passed for r in out] == [True, False]
