"""A small tmpfs in a private mount namespace (unshare -rm) as a full or read-only disk, to run a command on it and
see what it left there: the fault tests of tests/test_outputs.py and tests/test_output_safety.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TTC = shutil.which("ttc")


def _namespaces() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && true"],
                       capture_output=True)
    return r.returncode == 0


needs_ns = pytest.mark.skipif(not _namespaces(), reason="needs unprivileged user and mount namespaces (unshare -rm) "
                              "to mount a small tmpfs as a full or read-only disk")


def _in_tmpfs(mount: Path, size: str, cmd: list, ro: bool = False, prepare: str = "",
              after: str = "") -> subprocess.CompletedProcess:
    """Run `cmd` with a fresh tmpfs of `size` at `mount` (read-only with ro), in its own mount namespace; the
    shell prints the tmpfs's listing after the command, so the test sees what was left there."""
    mount.mkdir(parents=True, exist_ok=True)
    script = (f"mount -t tmpfs -o size={size} tmpfs {mount} && {prepare} "
              + (f"mount -o remount,ro {mount} && " if ro else "")
              + '"$@"; rc=$?; ' + after + ' echo "LEFT:$(ls -A ' + str(mount) + ' | tr "\\n" " ")"; exit $rc')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *map(str, cmd)], capture_output=True,
                          text=True, timeout=600)


def _left(r) -> list[str]:
    return [line for line in r.stdout.splitlines() if line.startswith("LEFT:")][-1][5:].split()


def _error_line(r) -> str:
    # (progress lines, which a slow machine prints every 10 s, are not the error)
    lines = [line for line in r.stderr.splitlines()
             if line.strip() and not re.match(r"[a-z][\w ()-]*: ([\d,]+/|compiling)", line)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    return lines[0]
