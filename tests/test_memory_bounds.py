"""Size options are bounded by the machine's memory, estimated before anything is allocated (issue 27, item 5):
`ttc synth --wrong-answers 1000000000` once set off the kernel's out-of-memory killer; `bench --queries`, `theory --m`
/ `--sizes` ended in tracebacks. Values here need hundreds of terabytes, beyond any machine the tests run on."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ttc.cli import app

BIG = str(10**12)


@pytest.mark.parametrize("args", [
    ["synth", "--out", "{tmp}/s", "--queries", "10", "--responses", "4", "--wrong-answers", BIG],
    ["bench", "--queries", BIG],
    ["bench", "--responses", BIG],
    ["bench", "--growth", BIG],
    ["bench", "--seeds", BIG],
    ["theory", "--m", BIG],
    ["theory", "--sizes", BIG],
    ["theory", "--depth", BIG],
    ["theory", "--seeds", BIG],
    ["replay", "--seeds", BIG],
    ["signals", "--seeds", BIG],
    ["compare", "--seeds", BIG],
    ["tune", "--policy", "ucb", "--lambda", "1,2", "--seeds", BIG],
    ["report", "{pool}", "--seeds", BIG, "--out", "{tmp}/r"],
])
def test_sizes_beyond_the_memory_are_one_line_with_the_estimate(tmp_path, args):
    from ttc.replay.pool import DEFAULT_POOL

    r = CliRunner().invoke(app, [a.format(tmp=tmp_path, pool=DEFAULT_POOL) for a in args])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.output[-2000:]
    assert "GiB of memory" in lines[0] and "available" in lines[0], lines[0]
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()


def test_check_memory_compares_with_what_is_available(monkeypatch):
    from ttc.replay import errors

    monkeypatch.setattr(errors, "available_memory", lambda: 10 * 2**30)
    errors.check_memory(7 * 2**30, "x", "less")  # within 80%
    with pytest.raises(errors.InputError, match=r"x would need about 9.0 GiB of memory and this machine has 10.0 GiB"):
        errors.check_memory(9 * 2**30, "x", "less")
    monkeypatch.setattr(errors, "available_memory", lambda: None)  # unknown: not refused
    errors.check_memory(10**15, "x", "less")
