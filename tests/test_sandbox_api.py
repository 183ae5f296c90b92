"""The sandbox's API: limits that would grade everything wrong are refused (issue 13: a timeout of -1 marked every
answer wrong with exit status 0), the isolation level is decided once and reported with every result, strict refuses
without namespaces, and a runner that dies or a sandbox that cannot work is never a silent wrong verdict."""
import math

import pytest

from ttc.harvest.oracles import sandbox
from ttc.harvest.oracles.code_exec import grade_lcb
from ttc.harvest.oracles.sandbox import (
    LEVELS,
    MIN_MEMORY_MB,
    ExecResult,
    SandboxError,
    SandboxUnavailable,
    describe,
    isolation,
    run_many,
    run_program,
)
from ttc.replay.errors import InputError, UserError

NO_NAMESPACES = {"level": "guard-only", "bwrap": None, "version": None,
                 "reason": "bwrap not found (simulated by the test)"}


@pytest.fixture
def no_namespaces(monkeypatch):
    """This process believes the machine gives no namespaces (the probe's cached answer)."""
    monkeypatch.setitem(sandbox._probe_cache, "result", NO_NAMESPACES)


@pytest.mark.parametrize("kwargs, message", [
    ({"timeout_s": -1}, "timeout must be a positive, finite number"),
    ({"timeout_s": 0}, "timeout must be a positive, finite number"),
    ({"timeout_s": math.inf}, "timeout must be a positive, finite number"),
    ({"timeout_s": math.nan}, "timeout must be a positive, finite number"),
    ({"timeout_s": "10"}, "timeout must be a positive, finite number"),
    ({"memory_mb": 0}, f"at least {MIN_MEMORY_MB} MiB"),
    ({"memory_mb": 10}, f"at least {MIN_MEMORY_MB} MiB"),
    ({"memory_mb": 512.0}, "must be an integer"),
    ({"workers": 0}, "workers must be a positive integer"),
    ({"workers": -2}, "workers must be a positive integer"),
    ({"cpu_s": 0}, "cpu_s must be a positive"),
    ({"disk_mb": 0}, "disk_mb must be a positive integer"),
    ({"sandbox": "none"}, "unknown sandbox mode 'none'"),
])
def test_bad_limits_are_refused_before_anything_runs(kwargs, message):
    with pytest.raises(ValueError, match=message) as e:
        run_many(["assert True\n"], **kwargs)
    assert isinstance(e.value, InputError)  # one `error:` line and exit 2 on the command line
    with pytest.raises(ValueError, match=message):
        run_many([], **kwargs)  # even with nothing to run
    if "workers" not in kwargs:
        with pytest.raises(ValueError, match=message):
            run_program("assert True\n", **kwargs)
        with pytest.raises(ValueError, match=message):
            grade_lcb(["def f(): return 1"], ["f()"], ["1"], **kwargs)


def test_every_result_says_its_level():
    level = describe()["level"]
    assert level in LEVELS and describe()["reason"]
    mode = "auto" if level == "namespaces" else "guard"
    out = run_many(["assert True\n", "assert False\n"], workers=2, timeout_s=10, sandbox=mode)
    assert [r.level for r in out] == [level, level]
    assert [r.level for r in run_many(["x = 1\n"], sandbox="guard")] == ["guard-only"]
    # the level is not part of a result's value: results compare by verdict, status and detail
    assert out[0] == ExecResult(True, "passed", "")


@pytest.mark.parametrize("mode", ["auto", "strict"])
def test_no_isolation_is_refused_unless_named(no_namespaces, mode):
    """Issue 27: with no usable bubblewrap, auto fell back silently to the guard, which hostile code gets around.
    Now auto refuses as strict does, in one line that says how to get isolation and how to opt out knowingly."""
    assert isolation("guard") == "guard-only"
    with pytest.raises(SandboxUnavailable) as e:
        run_program("x = 1\n", sandbox=mode)
    msg = str(e.value)
    assert msg.startswith(f"--sandbox {mode}: this machine gives no OS isolation (bwrap not found")
    assert "pip install 'ttc[grade]'" in msg and "apt-get install bubblewrap" in msg and "--sandbox guard" in msg
    assert "\n" not in msg and isinstance(e.value, UserError)
    r = run_program("x = 1\n", sandbox="guard")  # named: graded, and says how
    assert r.passed and r.level == "guard-only"


def test_a_machine_without_bwrap_is_found_so(monkeypatch):
    """The probe itself (not its cached answer) finding no bwrap: level guard-only, the reason says where to get it,
    and auto refuses."""
    monkeypatch.setattr(sandbox, "_bwrap_candidates", lambda: [])
    monkeypatch.setattr(sandbox, "_probe_cache", {})
    d = describe()
    assert d["level"] == "guard-only" and "bwrap not found" in d["reason"] and "ttc[grade]" in d["reason"]
    with pytest.raises(SandboxUnavailable, match="--sandbox guard"):
        isolation("auto")


def test_the_level_is_announced(capsys):
    sandbox.announce("guard-only")
    assert capsys.readouterr().err == ("code sandbox: guard-only (--sandbox guard: no OS isolation, the in-process "
                                       "guard only; not a boundary against hostile code)\n")
    if isolation("auto") == "namespaces":
        sandbox.announce("namespaces")
        assert capsys.readouterr().err == f"code sandbox: namespaces ({describe()['reason']})\n"


def test_strict_runs_with_namespaces():
    if isolation("auto") != "namespaces":
        pytest.skip(f"this machine has no namespaces ({describe()['reason']})")
    r = run_program("x = 1\n", sandbox="strict")
    assert r.passed and r.level == "namespaces"


@pytest.mark.parametrize("mode", ["auto", "guard"])
def test_order_and_statuses_are_kept(mode):
    sources = ["assert 1 == 1\n", "assert 1 == 2\n", "while True: pass\n", "x = bytearray(2**40)\n",
               "import sys\nsys.exit(3)\n", "x = 1\n"]
    out = run_many(sources, workers=2, timeout_s=1.0, sandbox=mode)
    assert [r.status for r in out] == ["passed", "failed", "timeout", "memory", "failed", "passed"]
    assert "exited before its end" in out[4].detail


def test_a_runner_killed_by_its_program_is_an_error_and_the_rest_still_runs():
    """guard-only: the program can reach its runner (its parent) and kill it; that program is an error, never a pass,
    and the next ones get a fresh runner. (In namespaces the runner is PID 1 of its namespace: immune.)"""
    kill = "import posix\nposix.kill(posix.getppid(), 9)\nimport time\ntime.sleep(5)\n"
    out = run_many(["x = 1\n", kill, "x = 2\n", "assert False\n"], workers=1, timeout_s=10, sandbox="guard")
    assert [r.status for r in out] == ["passed", "error", "passed", "failed"]
    assert "runner died" in out[1].detail


def test_the_runner_survives_its_program_in_namespaces():
    if isolation("auto") != "namespaces":
        pytest.skip(f"this machine has no namespaces ({describe()['reason']})")
    kill = ("import posix\nfor sig in (9, 15, 2):\n    try:\n        posix.kill(posix.getppid(), sig)\n"
            "    except OSError:\n        pass\n")  # EPERM when the program runs as uid 65534 (a root caller)
    out = run_many(["x = 1\n", kill, "x = 2\n"], workers=1, timeout_s=10)
    assert [r.status for r in out] == ["passed", "passed", "passed"]  # the kills did nothing: the program ended


def test_a_sandbox_that_fails_its_self_check_grades_nothing(monkeypatch):
    """A broken sandbox (here: a self-check that cannot pass) raises instead of grading every program failed."""
    monkeypatch.setattr(sandbox, "_SELF_CHECK", "import random\nassert random.random() > 2\n")
    with pytest.raises(SandboxError, match="failed its self-check, so it would grade every program wrong"):
        run_many(["x = 1\n"], sandbox="guard")


def test_a_runner_that_cannot_start_is_an_error(monkeypatch):
    monkeypatch.setattr(sandbox, "_python_argv", lambda script: ["/nonexistent/python", script])
    with pytest.raises((SandboxError, OSError)):
        run_many(["x = 1\n"], sandbox="guard")
