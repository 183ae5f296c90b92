"""A HumanEval completion cannot forge its verdict (issue 27 item 3). Under full isolation two forgeries used to pass:
(a) top-level code after the function (HumanEval's stop sequences do not cut `import` or `try`) copied the harness's
nonce from descriptor 3 to descriptor 4 and exited with status 0; (b) a returned object whose __eq__ always answers
True passed `assert candidate(x) == y`. Now the test runs in a checker process of its own, the program in another
that never holds the verdict pipe or the test's text, and what the program returns crosses as plain values (ints,
strings, lists, ...) rebuilt in the checker, so `==` is the expected value's own type's.

HumanEval's own convention (the whole program in one process, the returned object's own `==`) stays available as
`--verdict source`, where both forgeries still pass: the control that shows what the isolated verdict changes."""
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "pools" / "humaneval-codegen16b-100"

PROMPT = 'def add(a: int, b: int) -> int:\n    """ Return the sum of a and b.\n    >>> add(2, 3)\n    5\n    """\n'
TEST = "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\n"
NONCE = "import posix\nposix.write(4, posix.read(3, 64))\nposix._exit(0)\n"
COMPLETIONS = {
    "right": "    return a + b\n",
    "wrong": "    return 0\n",
    # (a) the nonce copied by top-level code after the function, as an import or a try block (not cut)
    "nonce-import": "    return 0\n" + NONCE,
    "nonce-try": "    return 0\ntry:\n" + "".join("    " + line + "\n" for line in NONCE.splitlines())
                 + "except OSError:\n    pass\n",
    # (b) an object equal to everything, and an int whose == always says yes
    "eq-object": "    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n",
    "eq-int": ("    class Yes(int):\n        def __eq__(self, other):\n            return True\n"
               "        __hash__ = int.__hash__\n    return Yes(0)\n"),
    # both at once, and a program that answers the checker's calls itself from its top level
    "both": "    class Yes:\n        __eq__ = lambda s, o: True\n    return Yes()\n" + NONCE,
}


def _dump(tmp_path, completions):
    src = tmp_path / "dump"
    src.mkdir()
    (src / "problems.jsonl").write_text(json.dumps({"task_id": "Toy/0", "prompt": PROMPT, "entry_point": "add",
                                                    "canonical_solution": "    return a + b\n", "test": TEST}) + "\n")
    (src / "completions.jsonl").write_text(json.dumps({"prompt": PROMPT, "samples": list(completions)}) + "\n")
    return src


def _import(src, out, *args):
    r = CliRunner().invoke(app, ["import", "humaneval", str(src), "--out", str(out), "--timeout", "5",
                                 "--workers", "2", *args])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(out / "samples.parquet").sort("sample_idx")
    return df["correct"].to_list(), json.loads((out / "pool.json").read_text())


def test_forged_passes_are_graded_wrong(tmp_path):
    names = list(COMPLETIONS)
    correct, meta = _import(_dump(tmp_path, COMPLETIONS.values()), tmp_path / "p")
    assert dict(zip(names, correct)) == {n: n == "right" for n in names}
    assert meta["execution"]["verdict"] == "isolated"


def test_the_source_convention_is_kept_as_an_option(tmp_path):
    """HumanEval's own check: the forgeries pass there (that is the convention, and why it is not the default)."""
    names = list(COMPLETIONS)
    correct, meta = _import(_dump(tmp_path, COMPLETIONS.values()), tmp_path / "p", "--verdict", "source")
    assert dict(zip(names, correct)) == {"right": True, "wrong": False, "nonce-import": True, "nonce-try": True,
                                         "eq-object": True, "eq-int": True, "both": True}
    assert meta["execution"]["verdict"] == "source"


def test_the_program_never_holds_the_test_or_the_verdict_pipe():
    """The program's process: no string of the test's (nor the expected answers) among its objects, no descriptor
    but its standard streams and the two call pipes; the checker's memory is not readable (not dumpable)."""
    from ttc.harvest.oracles.sandbox import Checked, run_many

    secret = "EXPECTED-7f3a9c"
    test = f"def check(candidate):\n    assert candidate(1) == {secret!r}\n\ncheck(f)\n"
    spy = ("import gc, os, sys\n"
           "def f(x):\n    return 'no'\n"
           f"hits = [o for o in gc.get_objects() if isinstance(o, dict) and any(isinstance(v, str) and {secret!r} in v"
           " for v in o.values())]\n"
           "fds = sorted(int(d) for d in os.listdir('/proc/self/fd'))\n"
           "peers = []\n"
           "for p in os.listdir('/proc'):\n"
           "    if p.isdigit() and int(p) != os.getpid():\n"
           "        try:\n            peers.append(len(open(f'/proc/{p}/mem', 'rb').read(1)))\n"
           "        except OSError:\n            pass\n"
           "print('SPY', len(hits), fds, peers, file=sys.stderr)\n")
    r = run_many([Checked(spy, "", test, "f")], workers=1, timeout_s=10)[0]
    assert not r.passed and r.status == "failed"
    line = next(x for x in r.detail.splitlines() if x.startswith("SPY"))
    hits, rest = line.split(" ", 2)[1:]
    assert hits == "0", line
    fds = json.loads(rest.split("]")[0] + "]")
    assert [fd for fd in fds if fd > 4] == [max(fds)] or max(fds) <= 4, line  # 0-4, and listdir's own
    assert rest.rstrip().endswith("[]"), line  # no other process's memory could be read


def test_values_cross_as_plain_data():
    """What a candidate returns is compared as the plain value it is made of: subclasses of builtins compare as their
    base (Counter == dict, a namedtuple == tuple), floats keep every bit, exceptions and unpicklable values fail."""
    from ttc.harvest.oracles.sandbox import Checked, run_many

    cases = {
        "from collections import Counter\ndef f(s):\n    return Counter(s)\n": ("{'a': 2, 'b': 1}", "'aab'", True),
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(x):\n    return P(x, 2)\n":
            ("(1, 2)", "1", True),
        "def f(x):\n    return 0.1 + 0.2\n": ("0.30000000000000004", "0", True),
        "def f(x):\n    return float('nan')\n": ("float('nan')", "0", False),
        "def f(x):\n    return [True, None, b'x', {1, 2}, frozenset(), 1 + 2j, (1,)]\n":
            ("[True, None, b'x', {1, 2}, frozenset(), 1 + 2j, (1,)]", "0", True),
        "def f(x):\n    raise ValueError('no')\n": ("1", "0", False),
        "def f(x):\n    return (i for i in range(3))\n": ("[0, 1, 2]", "0", False),
        "def f(x):\n    return map(int, '12')\n": ("[1, 2]", "0", False),
        "def f(xs):\n    xs.append(9)\n    return len(xs)\n": ("3", "[1, 2]", True),
        "def f(x):\n    return x\n": ("'ü' * 3", "'ü' * 3", True),
    }
    items = [Checked(prog, "", f"def check(c):\n    assert c({arg}) == {want}\n\ncheck(f)\n", "f")
             for prog, (want, arg, _) in cases.items()]
    out = run_many(items, workers=2, timeout_s=10)
    assert [r.passed for r in out] == [ok for _, _, ok in cases.values()], [r.detail[-300:] for r in out]


def test_real_humaneval_sample_matches_the_embedded_pool():
    """A sample of the real HumanEval pool (every 12th task, its first 8 completions) is graded as the embedded pool
    data/humaneval-codegen16b-100 records it: the isolated verdict does not move pass@1 there."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present (../shared/data is only beside the project on the team's machines)")
    from ttc.harvest.importers import _jsonl
    from ttc.harvest.oracles.code_exec import humaneval_checked

    problems = _jsonl(SHARED / "HumanEval_for_code_generation.jsonl")
    samples = {r["prompt"]: r["samples"] for r in
               _jsonl(SHARED / "HumanEval_codegen16B_temp0.8_topp0.95_num100_max300_code_solution.jsonl")}
    pool = pl.read_parquet(ROOT / "data" / "humaneval-codegen16b-100" / "samples.parquet")
    items, want = [], []
    for p in problems[::12]:
        for k, c in enumerate(samples[p["prompt"]][:8]):
            items.append(humaneval_checked(p["prompt"], c, p["test"], p["entry_point"]))
            want.append(pool.filter((pl.col("query_id") == p["task_id"]) & (pl.col("sample_idx") == k))["correct"][0])
    from ttc.harvest.oracles.sandbox import run_many

    out = run_many(items, workers=2, timeout_s=10)
    got = [r.passed for r in out]
    assert sum(want) >= 10  # the sample holds passes to keep
    assert got == want, [(i, r.status, r.detail[-200:]) for i, (r, w) in enumerate(zip(out, want)) if r.passed != w]


def test_a_program_that_kills_the_program_host_costs_no_other_program():
    """The program host (which forks the program processes) can be killed by a program of the same uid (guard-only;
    in namespaces a non-root caller's): the next item finds it gone, and is run again by a fresh runner, not graded
    an error."""
    from ttc.harvest.oracles.sandbox import Checked, run_many

    ok = Checked("def f(x):\n    return x\n", "", "assert f(3) == 3\n", "f")
    kill = Checked("import posix\nposix.kill(posix.getppid(), 9)\ndef f(x):\n    return x\n", "", "assert f(3) == 3\n",
                   "f")
    out = run_many([ok, kill, ok, ok], workers=1, timeout_s=10, sandbox="guard")
    assert [r.status for r in out] == ["passed"] * 4, out


def test_the_time_limit_bounds_both_sides():
    """A program that never answers, and a test that never ends (the checker runs in the runner, under an interval
    timer), are timeouts; neither holds the runner past the limit."""
    import time

    from ttc.harvest.oracles.sandbox import Checked, run_many

    items = [Checked("def f(x):\n    while True:\n        pass\n", "", "assert f(1) == 1\n", "f"),
             Checked("def f(x):\n    return x\n", "", "assert f(1) == 1\nwhile True:\n    pass\n", "f"),
             Checked("import time\ntime.sleep(60)\ndef f(x):\n    return x\n", "", "assert f(1) == 1\n", "f"),
             Checked("def f(x):\n    return x\n", "", "assert f(1) == 1\n", "f")]
    t0 = time.perf_counter()
    out = run_many(items, workers=1, timeout_s=1)
    assert [r.status for r in out] == ["timeout", "timeout", "timeout", "passed"], out
    assert time.perf_counter() - t0 < 15
