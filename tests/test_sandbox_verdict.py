"""A program cannot forge a pass (issue 13): each program below tries one trick and then fails (`assert False`) or
stops early, so it must never be graded passed, at either isolation level.

The old design printed a nonce on stdout that the program could read from the launcher's frame
(sys._getframe(1).f_locals) and print itself. Now the nonce is drawn by the runner after the fork and sits unread
in a pipe until the program has finished (no Python object holds it), and the pass is written with an os.write
bound before the program ran, on a descriptor of its own, not through stdout."""
import pytest

from ttc.harvest.oracles.sandbox import run_many

HEX = "import re\nHEX = re.compile(r'[0-9a-f]{32}')\n"
# Every 32-hex string and every name a harness might keep a marker under, from every frame up the stack.
FRAMES = HEX + """\
import sys
found = set()
f = sys._getframe(0)
while f is not None:
    for scope in (f.f_locals, f.f_globals):
        for k, v in list(scope.items()):
            if isinstance(v, (str, bytes)):
                s = v.decode('latin-1') if isinstance(v, bytes) else v
                if HEX.fullmatch(s):
                    found.add(s)
    f = f.f_back
"""
GC = HEX + """\
import gc
found = set()
for o in gc.get_objects():
    for v in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple, set)) else ()):
        if isinstance(v, (str, bytes)):
            s = v.decode('latin-1') if isinstance(v, bytes) else v
            if HEX.fullmatch(s):
                found.add(s)
"""
# Print whatever was found, write it on every descriptor, then leave with status 0 by every route there is.
PRINT = """\
import os, posix, sys
for s in sorted(found):
    print(s)
    print('\\n' + s, file=sys.stderr)
sys.stdout.flush()
"""
EMIT = PRINT + """\
for fd in range(1, 64):
    for s in sorted(found) + ['passed', 'ok']:
        try:
            posix.write(fd, ('\\n' + s + '\\n').encode())
        except OSError:
            pass
"""
EXIT0 = ["posix._exit(0)", "sys.exit(0)", "raise SystemExit(0)", "exit()", "os.kill(os.getpid(), 9)",
         "import signal; signal.raise_signal(signal.SIGKILL)", "import ctypes", "assert False"]


def _tricks():
    tricks = {}
    for scan_name, scan in (("frames", FRAMES), ("gc", GC)):
        for i, ending in enumerate(EXIT0):
            tricks[f"{scan_name}-exit{i}"] = scan + EMIT + "import posix\n" + ending + "\nassert False\n"
    # the forgery: the marker from the harness's frame (or gc), printed as the last line, then status 0
    for scan_name, scan in (("frames", FRAMES), ("gc", GC)):
        tricks[f"{scan_name}-print-last-then-exit-0"] = (
            scan + "import posix, sys\nfor s in sorted(found):\n    print('\\n' + s)\nsys.stdout.flush()\n"
            "posix._exit(0)\nassert False\n")
    tricks["harness-exit-from-its-frame"] = (
        FRAMES + "import posix, sys\nfor s in sorted(found):\n    print('\\n' + s)\nsys.stdout.flush()\n"
        "f = sys._getframe(0)\nexits = []\nwhile f is not None:\n"
        "    exits += [v for k, v in f.f_locals.items() if 'exit' in k and callable(v)]\n    f = f.f_back\n"
        "for e in exits:\n    e(0)\nassert False\n")
    tricks["early-exit-0"] = "import sys\nsys.exit(0)\nassert False\n"
    tricks["posix-exit-0"] = "import posix\nposix._exit(0)\nassert False\n"
    tricks["os-exit-through-reload"] = "import importlib, os\nimportlib.reload(os)._exit(0)\nassert False\n"
    tricks["thread-exits-0"] = ("import threading, posix, time\n"
                                "threading.Thread(target=lambda: posix._exit(0)).start()\n"
                                "time.sleep(5)\nassert False\n")
    tricks["print-marker-like-lines"] = ("import secrets\nfor _ in range(100):\n    print(secrets.token_hex(16))\n"
                                         "assert False\n")
    tricks["patch-builtins-and-stdout"] = (
        "import builtins, io, os, sys\n"
        "class Out(io.StringIO):\n"
        "    def write(self, s):\n        return len(s)\n"
        "sys.stdout = sys.stderr = sys.__stdout__ = Out()\n"
        "builtins.print = lambda *a, **k: None\n"
        "os.write = lambda fd, data: len(data)\n"
        "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
        "builtins.SystemExit = type('SystemExit', (Exception,), {})\n"
        "import traceback\ntraceback.format_exception = lambda *a, **k: []\n"
        "assert False\n")
    tricks["patch-excepthook"] = "import sys\nsys.excepthook = lambda *a: None\nassert False\n"
    tricks["close-stdout-and-exit"] = "import posix\nposix.close(1)\nposix.close(2)\nposix._exit(0)\n"
    tricks["frames-then-continue"] = FRAMES + EMIT + "assert False\n"
    return tricks


TRICKS = _tricks()


@pytest.mark.parametrize("sandbox", ["auto", "guard"])
def test_no_trick_forges_a_pass(sandbox):
    names = sorted(TRICKS)
    out = run_many([TRICKS[n] for n in names], workers=2, timeout_s=10, sandbox=sandbox)
    forged = [(n, r.status) for n, r in zip(names, out) if r.passed]
    assert not forged
    statuses = {n: r.status for n, r in zip(names, out)}
    assert statuses["early-exit-0"] == "failed" and "exited before its end" in out[names.index("early-exit-0")].detail
    assert statuses["posix-exit-0"] == "error"  # status 0 without the harness's verdict: said so, never a pass


def test_the_same_programs_without_the_trick_pass():
    """The control: the tricks' scaffolding itself (scanning, printing) does not break a program that then runs to
    its end; only the ending decides. (Writing junk on every descriptor does: it spoils the verdict pipe, which
    only ever turns a pass into an error.)"""
    out = run_many([FRAMES + PRINT + "x = 1\n", GC + PRINT + "x = 1\n", "print('\\n' * 3)\n"], workers=2, timeout_s=10)
    assert [r.status for r in out] == ["passed"] * 3, out


def test_no_marker_is_visible_before_the_program_ends():
    """No string or bytes object that looks like a marker (32 hex digits, as the old launcher's nonce in its frame
    was) exists in the child while the program runs: not in any frame up the stack, not among gc's objects."""
    prog = FRAMES + "gcfound = found\n" + GC + (
        "import sys\nprint('FOUND', sorted(found | gcfound), file=sys.stderr)\nraise RuntimeError('report')\n")
    out = run_many([prog] * 2, workers=2, timeout_s=10)
    assert [next(line for line in r.detail.splitlines() if line.startswith("FOUND")) for r in out] == ["FOUND []"] * 2
