"""Importers refuse records they cannot read faithfully, in one line (issue 27, items 6 and 7): a NaN log-prob, a
correctness string with other letters than 0/1, lists of different lengths, a string where a list belongs,
overflowing numbers, deeply nested JSON, a HumanEval dump without completions; and pool.json records the file
actually read and its sha256."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.harvest.importers import import_pool
from ttc.replay.pool import PoolError, load_pool

FIX = Path(__file__).resolve().parent / "fixtures" / "import" / "humaneval"


def _write(path: Path, rows: list, raw: str | None = None) -> Path:
    path.write_text(raw if raw is not None else "\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _math(c="0110", s=(-0.1, -0.2, -0.3, -0.4), i=0):
    return {"i": i, "level": 2, "gt": "1", "c": c, "s": list(s), "n_correct": c.count("1")}


def _qwen(pred=("4", "5"), score=(True, False), rm=((1.0,), (-1.0,))):
    return {"idx": 0, "gt": "4", "level": "Level 1", "pred": list(pred), "score": list(score),
            "pred_score": [list(r) for r in rm]}


def _ll(gen=("The answer is ab.", "The answer is cd.")):
    return {"question": "Q", "answer": "ab", "generated_answer": gen if isinstance(gen, str) else list(gen)}


def _one_line(tmp_path, fmt, src, pattern, *extra):
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["import", fmt, str(src), "--out", str(out), *extra])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert pattern in lines[0], lines[0]
    assert not out.exists()


def test_valid_fixtures_import(tmp_path):
    p = load_pool(import_pool("math500-ivt", _write(tmp_path / "m.jsonl", [_math()]), tmp_path / "m"),
                  score="conf")
    assert p.correct.tolist() == [0, 1, 1, 0]
    p = load_pool(import_pool("qwen-math-rm", _write(tmp_path / "q.jsonl", [_qwen(rm=((800.0,), (-800.0,)))]),
                              tmp_path / "q"), score="rm")
    assert p.score.tolist() == [1.0, 0.0]  # a logistic that does not overflow
    p = load_pool(import_pool("lastletters-esc", _write(tmp_path / "l.jsonl", [_ll()]), tmp_path / "l"))
    assert p.correct.tolist() == [1, 0]


@pytest.mark.parametrize("fmt,rows,raw,pattern", [
    ("math500-ivt", [_math(s=(-0.1, float("nan"), -0.3, -0.4))], None, "log-prob"),
    ("math500-ivt", [_math(c="01x", s=(-0.1, -0.2, -0.3))], None, "'c'"),
    ("math500-ivt", [_math(c="0110", s=(-0.1, -0.2))], None, "lengths"),
    ("math500-ivt", None, '{"i": 0, "level": 2, "c": "01", "s": [-0.1, 1e999]}\n', "log-prob"),
    ("math500-ivt", [_math(s=(-0.1, 1000.0, -0.3, -0.4))], None, "log-prob"),
    ("math500-ivt", [_math(i=10**30)], None, "'i'"),
    ("qwen-math-rm", [_qwen(pred=("4", "5", "6"))], None, "lengths"),
    ("qwen-math-rm", [_qwen(rm=((1.0,), (float("nan"),)))], None, "pred_score"),
    ("lastletters-esc", [_ll(gen="The answer is ab.")], None, "generated_answer"),
    ("lastletters-esc", [_ll(gen=("The answer is ab.", 3))], None, "generated_answer"),
])
def test_bad_records_are_refused_in_one_line(tmp_path, fmt, rows, raw, pattern):
    src = _write(tmp_path / "src.jsonl", rows or [], raw)
    _one_line(tmp_path, fmt, src, pattern)


@pytest.mark.parametrize("fmt,row", [("math500-ivt", _math()), ("qwen-math-rm", _qwen()),
                                     ("lastletters-esc", _ll())])
def test_pool_json_records_the_file_read_and_its_sha256(tmp_path, fmt, row):
    src = _write(tmp_path / "src.jsonl", [row])
    out = import_pool(fmt, src, tmp_path / "p")
    meta = json.loads((out / "pool.json").read_text())
    assert meta["source_sha256"] == {src.name: hashlib.sha256(src.read_bytes()).hexdigest()}
    assert str(src.resolve()) in meta["source"]
    assert "upstream" in meta  # the file the importer was written for, named apart from the one read


def test_deeply_nested_json_is_one_line(tmp_path):
    src = _write(tmp_path / "m.jsonl", [], "[" * 100_000 + "]" * 100_000 + "\n")
    _one_line(tmp_path, "math500-ivt", src, "")


def _humaneval_copy(tmp_path, completions: str | None = None) -> Path:
    d = tmp_path / "he"
    shutil.copytree(FIX, d)
    if completions is not None:
        (d / "toy_completions.jsonl").write_text(completions)
    return d


def test_humaneval_refusals_before_any_program_runs(tmp_path):
    d = _humaneval_copy(tmp_path)
    _one_line(tmp_path, "humaneval", d, "--timeout", "--timeout", "1e30")
    recs = [json.loads(x) for x in (FIX / "toy_completions.jsonl").read_text().splitlines() if x.strip()]
    empty = "\n".join(json.dumps({**r, "samples": []}) for r in recs) + "\n"
    _one_line(tmp_path, "humaneval", _humaneval_copy(tmp_path / "e", empty), "no completions")
    nested = (FIX / "toy_completions.jsonl").read_text() + '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    _one_line(tmp_path, "humaneval", _humaneval_copy(tmp_path / "n", nested), "toy_completions.jsonl")


def test_import_pool_refuses_a_fifo_source(tmp_path):
    import os

    fifo = tmp_path / "src.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(PoolError, match="not a file"):
        import_pool("math500-ivt", fifo, tmp_path / "p")
