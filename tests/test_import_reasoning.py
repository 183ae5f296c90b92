"""`ttc import autotts` / `boinf` / `generic --gold`: today's reasoning-model dumps graded against the gold answer.

The real files (../shared/data/pools) are checked against counts computed here from their raw JSON, independently of
the importer's grading code; small files written in the tests cover the layouts and the refusals."""
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.pool import PoolError, load_pool, samples_frame, write_pool

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pools"
AUTOTTS = SHARED / "autotts-128"
BOINF = SHARED / "boinf-80"


def _run(*args):
    return CliRunner().invoke(app, ["import", *map(str, args)])


def _need(path: Path):
    if not path.exists():
        pytest.skip(f"{path} (the shared data) is not here")


def _as_int(a):
    """An independent reading of an AIME answer: digits with an optional sign, after LaTeX spacing ('79\\,193'),
    \\displaystyle and a leading 'name =' are dropped."""
    s = re.sub(r"\\[,!;: ]|\\displaystyle|\s", "", str(a)).split("=")[-1]
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


# --- boinf ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["analysis_aime2025_Qwen3-4B.jsonl", "analysis_aime2024_gpt-oss-20b.jsonl",
                                  "analysis_aime2025_Phi-4-reasoning.jsonl"])
def test_boinf_aime_pass1_equals_boinfs_own_answer_counts(tmp_path, name):
    src = BOINF / name
    _need(src)
    r = _run("boinf", src, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    right = sum(c for r_ in recs for a, c in r_["answer_counts"].items() if _as_int(a) == int(r_["gold_answer"]))
    total = sum(r_["total_answers"] for r_ in recs)  # (answer_counts leaves null answers out; total_answers not)
    p = load_pool(tmp_path / "p")
    assert p.off[-1] == total and abs(float(p.correct.mean()) - right / total) < 1e-12
    # per query, and tokens and order as in all_answers
    per_q = [sum(c for a, c in r_["answer_counts"].items() if _as_int(a) == int(r_["gold_answer"])) for r_ in recs]
    assert np.add.reduceat(p.correct, p.off[:-1]).tolist() == per_q
    assert p.tok.tolist() == [t for r_ in recs for _, t in r_["all_answers"]]
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    model = name[len("analysis_aime2025_"):-len(".jsonl")]
    assert meta["model"] == model and meta["dataset"].startswith("AIME 202") and meta["format"] == "boinf"
    # empty: null (BoInf's answer_counts leave those out), blank, or only dots ('...', no answer stated)
    empty = sum(a is None or not str(a).strip(" .") for r_ in recs for a, _ in r_["all_answers"])
    assert meta["grading"]["answers"]["empty"] == empty and meta["grading"]["answers"]["n"] == total


def test_boinf_math500_graded_by_math_verify_beats_string_equality(tmp_path):
    src = BOINF / "analysis_math500_Phi-4-reasoning.jsonl"
    _need(src)
    pytest.importorskip("math_verify")
    from math_verify import parse, verify

    lines = src.read_text().splitlines()[:40]
    part = tmp_path / "analysis_math500_Phi-4-reasoning.jsonl"
    part.write_text("\n".join(lines) + "\n")
    r = _run("boinf", part, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in lines]
    want = []
    for r_ in recs:  # math-verify called directly, gold first, on each distinct answer
        gold = parse(f"${r_['gold_answer']}$")
        ok = {a: bool(a.strip()) and bool(verify(gold, parse(f"${a}$"))) for a in r_["answer_counts"]}
        want += [ok[a] for a, _ in r_["all_answers"]]
    p = load_pool(tmp_path / "p")
    assert p.correct.astype(bool).tolist() == want
    exact = sum(c for r_ in recs for a, c in r_["answer_counts"].items() if a == r_["gold_answer"])
    assert sum(want) > exact  # string equality undercounts (the README's warning)
    assert json.loads((tmp_path / "p" / "pool.json").read_text())["grading"]["compare"] == "math"


def _boinf_line(num, gold, answers):
    counts = {}
    for a, _ in answers:
        counts[a] = counts.get(a, 0) + 1
    return json.dumps({"problem_num": num, "total_answers": len(answers), "answer_counts": counts,
                       "gold_answer": gold, "majority_answer": max(counts, key=counts.get), "all_answers": answers})


def test_boinf_multiple_choice_letters(tmp_path):
    src = tmp_path / "analysis_gpqa_diamond_M-1B.jsonl"
    src.write_text(_boinf_line(0, "C", [["C", 10], ["(C)", 12], ["\\text{C}", 9], ["B", 11], ["", 3], ["42", 5]])
                   + "\n" + _boinf_line(1, "A", [["a", 4]]) + "\n")
    r = _run("boinf", src, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    p = load_pool(tmp_path / "p")
    assert p.correct.tolist() == [1, 1, 1, 0, 0, 0, 1]
    assert p.ans[0] == p.ans[1] == p.ans[2] != p.ans[3] and p.ans[4] == -1  # '(C)', '\\text{C}' vote as 'C'
    g = json.loads((tmp_path / "p" / "pool.json").read_text())["grading"]
    assert g["compare"] == "choice" and g["answers"] == {"n": 7, "empty": 1, "unparsable": 1}
    assert json.loads((tmp_path / "p" / "pool.json").read_text())["dataset"] == "GPQA-Diamond"


def test_boinf_directory_and_names(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "analysis_aime2024_M-1B.jsonl").write_text(_boinf_line(0, "70", [["070", 5], ["7", 6]]) + "\n")
    (d / "analysis_aime25_M-1B.jsonl").write_text(_boinf_line(3, "5", [["5", 5]]) + "\n")
    (d / "notes.txt").write_text("ignored")
    r = _run("boinf", d, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == ["M-1B-aime2024", "M-1B-aime2025"]
    p = load_pool(tmp_path / "out" / "M-1B-aime2024")
    assert p.correct.tolist() == [1, 0] and p.query_ids == ["aime2024-0"]
    assert load_pool(tmp_path / "out" / "M-1B-aime2025").query_ids == ["aime2025-3"]


@pytest.mark.parametrize("fname, content, says", [
    ("analysis_aime2024_M.jsonl", json.dumps([_autotts_problem()]), "expected BoInf's layout"),
    ("analysis_aime2024_M.jsonl", '{"problem_num": 0}\n', "expected BoInf's layout"),
    ("M-aime24.jsonl", _boinf_line(0, "1", [["1", 2]]), "is named analysis_<dataset>_<model>.jsonl"),
    ("analysis_aime2024_M.jsonl", _boinf_line(0, "1", [["1", "many"]]), "expected [answer, completion tokens]"),
    ("analysis_aime2024_M.jsonl", _boinf_line(0, "x", [["1", 2]]), "is not an integer"),
    ("analysis_aime2024_M.jsonl", _boinf_line(0, "1", [["1", 2]]) + "\n" + _boinf_line(0, "1", [["1", 2]]),
     "appears twice"),
])
def test_boinf_refuses_other_layouts_and_writes_nothing(tmp_path, fname, content, says):
    src = tmp_path / fname
    src.write_text(content)
    r = _run("boinf", src, "--out", tmp_path / "p")
    assert r.exit_code == 2 and r.output.startswith("error: ") and says in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "p").exists()


def test_an_autotts_file_given_to_boinf_and_back(tmp_path):
    _need(AUTOTTS)
    r = _run("boinf", AUTOTTS, "--out", tmp_path / "p")
    assert r.exit_code == 2 and "holds no BoInf" in r.output and not (tmp_path / "p").exists()
    r = _run("autotts", BOINF / "analysis_aime2025_Qwen3-4B.jsonl", "--out", tmp_path / "p")
    assert r.exit_code == 2 and "AutoTTS" in r.output and not (tmp_path / "p").exists()


# --- generic --gold ---------------------------------------------------------------------------------------------------

def test_generic_gold_column_graded_three_ways(tmp_path):
    src = tmp_path / "dump.jsonl"
    rows = [{"q": "a", "ans": "070", "g": "70"}, {"q": "a", "ans": "70", "g": "70"}, {"q": "a", "ans": "", "g": "70"},
            {"q": "b", "ans": "\\frac{1}{2}", "g": "0.5"}, {"q": "b", "ans": "1/3", "g": "0.5"}]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    want = {"exact": [0, 1, 0, 0, 0], "integer": [1, 1, 0, 0, 0]}
    for how, ok in want.items():
        r = _run("generic", src, "--out", tmp_path / how, "--query-id", "q", "--answer", "ans", "--gold", "g",
                 "--compare", how)
        if how == "integer":  # 0.5 is no integer gold: refused, nothing written
            assert r.exit_code == 2 and "is not an integer" in r.output and not (tmp_path / how).exists()
            continue
        assert r.exit_code == 0, r.output
        assert load_pool(tmp_path / how).correct.tolist() == ok
    pytest.importorskip("math_verify")
    r = _run("generic", src, "--out", tmp_path / "m", "--query-id", "q", "--answer", "ans", "--gold", "g",
             "--compare", "math")
    assert r.exit_code == 0, r.output
    p = load_pool(tmp_path / "m")
    assert p.correct.tolist() == [1, 1, 0, 1, 0]
    assert json.loads((tmp_path / "m" / "pool.json").read_text())["grading"]["compare"] == "math"
    ints = tmp_path / "ints.jsonl"
    ints.write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    r = _run("generic", ints, "--out", tmp_path / "i", "--query-id", "q", "--answer", "ans", "--gold", "g",
             "--compare", "integer")
    assert r.exit_code == 0, r.output and load_pool(tmp_path / "i").correct.tolist() == [1, 1, 0]


@pytest.mark.parametrize("args, says", [
    (["--gold", "g"], "give --answer too"),
    (["--answer", "ans", "--gold", "g", "--correct", "ans"], "not both"),
    (["--answer", "ans", "--compare", "math"], "give --gold too"),
    (["--answer", "ans", "--gold", "g", "--compare", "choice"], "--compare must be one of exact, integer, math"),
    (["--answer", "ans", "--gold", "nope"], "column 'nope' not in"),
])
def test_generic_gold_refusals(tmp_path, args, says):
    src = tmp_path / "dump.jsonl"
    src.write_text(json.dumps({"q": "a", "ans": "1", "g": "1"}) + "\n")
    r = _run("generic", src, "--out", tmp_path / "p", "--query-id", "q", *args)
    assert r.exit_code == 2 and says in r.output, r.output
    assert not (tmp_path / "p").exists()
