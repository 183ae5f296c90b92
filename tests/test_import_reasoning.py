"""`ttc import autotts` / `boinf` / `generic --gold`: today's reasoning-model dumps graded against the gold answer.

The real files (../shared/data/pools) are checked against counts computed here from their raw JSON, independently of
the importer's grading code; small files written in the tests cover the layouts and the refusals."""
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from ttc.cli import app
from ttc.replay.pool import PoolError, load_pool, samples_frame, write_pool
from typer.testing import CliRunner

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pools"
AUTOTTS = SHARED / "autotts-128"
BOINF = SHARED / "boinf-80"


def _run(*args):
    return CliRunner().invoke(app, ["import", *map(str, args)])


def _need(path: Path):
    if not path.exists():
        pytest.skip(f"{path} (the shared data) is not here")


def _as_int(a):
    """An independent reading of an AIME answer: digits only, with an optional sign."""
    s = str(a).strip()
    return int(s) if s.lstrip("-").isdigit() and s not in ("", "-") else None


# --- autotts ----------------------------------------------------------------------------------------------------------

def test_autotts_real_file_pass1_and_probes_match_the_source(tmp_path):
    src = AUTOTTS / "Qwen3-1.7B-aime25.json"
    _need(src)
    r = _run("autotts", src, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    raw = json.loads(src.read_text())
    finals = [[_as_int(b[2]) == int(p["gold_answer"]) for b in p["each_branch"]] for p in raw]
    want = sum(map(sum, finals)) / sum(map(len, finals))
    p = load_pool(tmp_path / "p", probes=True)
    assert abs(float(p.correct.mean()) - want) < 1e-12
    assert f"pass@1 {want:.4f}" in r.output
    # rows in pool order: queries sorted by id (zero-padded problem index), traces by sample_idx = each_branch order
    n_probes = [len(b[0]) for q in raw for b in q["each_branch"]]
    assert np.diff(p.probe_off).tolist() == n_probes
    starts = p.probe_off[:-1]
    for j, k in enumerate(n_probes):
        assert p.probe_tok[starts[j]:starts[j] + k].tolist() == [500 * (i + 1) for i in range(k)]
    probes_ok = [_as_int(a) == int(q["gold_answer"]) if a != "ERR" else False
                 for q in raw for b in q["each_branch"] for a in b[0]]
    assert p.probe_ok.tolist() == probes_ok
    errs = np.array([a == "ERR" or not str(a).strip(" .$") for q in raw for b in q["each_branch"] for a in b[0]])
    assert ((p.probe_ans == -1) == errs).all()
    # a probe that says what the trace finally says has the final answer's code
    same = [(j, starts[j] + i) for j, (q, b) in enumerate((q, b) for q in raw for b in q["each_branch"])
            for i, a in enumerate(b[0]) if a == b[2] and a != "ERR"][:500]
    assert same and all(p.probe_ans[i] == p.ans[j] for j, i in same)
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert meta["model"] == "Qwen3-1.7B" and meta["dataset"] == "AIME 2025" and len(meta["source_sha256"]) == 64
    n_err = sum(a == "ERR" for q in raw for b in q["each_branch"] for a in b[0])
    assert meta["grading"]["compare"] == "integer" and meta["grading"]["probe_err"] == n_err


def _autotts_problem(gold="12", branches=None):
    return {"question": "q", "gold_answer": gold, "probe_freq": 500, "final_answers_trace": [],
            "each_branch": branches or [[["3", "ERR", "12"], 1400, "12"], [["12", "5"], 900, "5"], [[], 10, "ERR"]]}


def test_autotts_small_file_codes_grades_and_loads_probes_only_when_asked(tmp_path):
    src = tmp_path / "Tiny-1B-aime24.json"
    src.write_text(json.dumps([_autotts_problem(), _autotts_problem("7", [[["7"], 600, "007"]])]))
    r = _run("autotts", src, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    plain = load_pool(tmp_path / "p")
    assert plain.has_probes and plain.probe_off is None  # declared, not read
    p = load_pool(tmp_path / "p", probes=True)
    assert p.query_ids == ["aime2024-0", "aime2024-1"]
    assert p.correct.tolist() == [1, 0, 0, 1]  # '007' is 7 as an integer; 'ERR' final = no answer
    assert p.ans[2] == -1
    assert p.probe_off.tolist() == [0, 3, 5, 5, 6]
    assert p.probe_tok.tolist() == [500, 1000, 1500, 500, 1000, 500]
    assert p.probe_ok.tolist() == [False, False, True, True, False, True]
    # query 0's final answers: '12', '5' -> dense codes of their hashes; probe '3' is no final answer: coded after them
    a12, a5 = p.ans[0], p.ans[1]
    assert sorted([a12, a5]) == [0, 1]
    assert p.probe_ans.tolist() == [2, -1, a12, a12, a5, 0]
    iv = p.with_invalid_votes()  # the invalid category takes id 2: the probe-only answer moves to 3, ERR joins it
    assert iv.ans.tolist()[:3] == [a12, a5, 2] and iv.probe_ans.tolist() == [3, 2, a12, a12, a5, 0]


def test_autotts_directory_one_pool_per_file(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "A-1B-aime24.json").write_text(json.dumps([_autotts_problem()]))
    (d / "A-1B-aime25.json").write_text(json.dumps([_autotts_problem("5")]))
    r = _run("autotts", d, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == ["A-1B-aime2024", "A-1B-aime2025"]
    assert load_pool(tmp_path / "out" / "A-1B-aime2025").correct.tolist() == [0, 1, 0]


@pytest.mark.parametrize("content, says", [
    ('{"problem_num": 0, "all_answers": [["1", 5]]}\n{"problem_num": 1}\n', "expected AutoTTS's layout"),
    ("[]", "expected AutoTTS's layout"),
    (json.dumps([{"question": "q", "gold_answer": "1", "probe_freq": 500, "each_branch": [[["1"], "x", "1"]]}]),
     "expected [[probe answers], total tokens, final answer]"),
    (json.dumps([_autotts_problem(gold="\\frac{1}{2}")]), "is not an integer"),
])
def test_autotts_refuses_other_layouts_and_writes_nothing(tmp_path, content, says):
    src = tmp_path / "M-aime24.json"
    src.write_text(content)
    r = _run("autotts", src, "--out", tmp_path / "p")
    assert r.exit_code == 2 and r.output.startswith("error: ") and says in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "p").exists()


def test_autotts_directory_with_a_bad_file_writes_nothing(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "A-aime24.json").write_text(json.dumps([_autotts_problem()]))
    (d / "B-aime24.json").write_text("not json")
    r = _run("autotts", d, "--out", tmp_path / "out")
    assert r.exit_code == 2 and "B-aime24.json" in r.output, r.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run("autotts", empty, "--out", tmp_path / "out2")
    assert r.exit_code == 2 and "holds no AutoTTS" in r.output, r.output


# --- the probe columns' contract ----------------------------------------------------------------------------------

def _probe_pool(tmp_path, **over):
    cols = {"query_id": ["a", "a"], "sample_idx": [0, 1], "correct": [True, False], "answer": ["x", "y"],
            "n_tokens": [900, 1200], "probe_answer": [["x", None], ["y"]], "probe_tokens": [[500, 1000], [500]],
            "probe_correct": [[True, None], [False]]}
    cols.update(over)
    return write_pool(tmp_path / "p", samples_frame(cols), {"name": "t"})


@pytest.mark.parametrize("over, says", [
    ({"probe_tokens": [[500], [500]]}, "'probe_answer' has 2 entries and 'probe_tokens' 1"),
    ({"probe_tokens": [[500, 500], [500]]}, "not strictly increasing"),
    ({"probe_tokens": [[0, 500], [500]]}, "offset below 1"),
    ({"probe_correct": [[True, False], [False]]}, "is null where"),
    ({"probe_answer": [["x", None], None]}, "null values"),
])
def test_probe_columns_are_validated_when_loaded(tmp_path, over, says):
    _probe_pool(tmp_path, **over)
    load_pool(tmp_path / "p")  # not read, so not checked
    with pytest.raises(PoolError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_pool(tmp_path / "p", probes=True)


def test_probe_columns_all_or_none(tmp_path):
    cols = {"query_id": ["a"], "sample_idx": [0], "correct": [True], "answer": ["x"], "probe_answer": [["x"]]}
    write_pool(tmp_path / "p", pl.DataFrame(cols), {"name": "t"})
    with pytest.raises(PoolError, match="all or none"):
        load_pool(tmp_path / "p")
    write_pool(tmp_path / "q", samples_frame({"query_id": ["a"], "sample_idx": [0], "correct": [True]}), {})
    with pytest.raises(PoolError, match="no probes here"):
        load_pool(tmp_path / "q", probes=True)
