"""Math oracle: answer extraction, the normalised `answer` column, and math-verify grading in killable workers."""
import json
import os
import threading
import time
from pathlib import Path

import pytest

from ttc.harvest.oracles.math_answer import (
    MATH_VERIFY_VERSION,
    extract_answer,
    grade,
    grade_many,
    normalize_answer,
)

MATH500 = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks" / "math500.jsonl"


# --- extraction --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    (r"So the probability is $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"First \boxed{3}, but wait, that is wrong: \boxed{4}", "4"),
    (r"\fbox{7} is it", "7"),
    (r"the set is \boxed{\{1,2\}}", r"\{1,2\}"),
    (r"nested \boxed{\sqrt{\frac{a}{b^{2}}}} end", r"\sqrt{\frac{a}{b^{2}}}"),
    (r"old style \boxed 5$", "5"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is 5.5. I hope it is correct.", "5.5"),
    ("The final answer is $\\frac{3}{4}$", r"\frac{3}{4}"),
    # a box wins over the Minerva sentence, whichever comes last
    (r"\boxed{2}. The final answer is 3", "2"),
    # an unterminated last box (truncated generation) falls back to the last complete one
    (r"we get \boxed{3}, and then \boxed{\frac{1}{", "3"),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", ["I could not solve it.", "", None, r"\boxed{}", r"\boxed{\frac{1}{2}", "\\boxedx"])
def test_extract_answer_absent(text):
    assert extract_answer(text) is None


# --- normalisation -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spellings, canonical", [
    ([r"\dfrac12", r"\frac{1}{2}", r"\tfrac1{2}", r"\frac{1}2", "1/2", r"$\frac{1}{2}$"], r"\frac{1}{2}"),
    (["x = 5", "x=5", "$5$", "5.", " 5 ", r"\boxed{5}", "5.0", r"\(5\)"], "5"),
    (["10\\%", "10%", "10^\\circ", "10^{\\circ}", r"10\text{ cm}", r"10\mbox{ cm}^2"], "10"),
    ([r"\text{(A)}", "(A)", r"\textbf{(A)}"], "A"),
    ([r"\text{Evelyn}", r"\mathrm{Evelyn}", "Evelyn"], "Evelyn"),
    ([r"x \in [-2,7]", "[-2, 7]"], "[-2,7]"),
    ([r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"], r"(3,\frac{\pi}{2})"),
    (["1,000", "1{,}000", r"1,\!000", "1000"], "1000"),
    (["0.50", ".5"], "0.5"),
    ([r"2\sqrt5", r"2\sqrt{5}", r"2 \sqrt 5"], r"2\sqrt{5}"),
])
def test_normalize_collapses_spellings(spellings, canonical):
    assert [normalize_answer(s) for s in spellings] == [canonical] * len(spellings)


def test_normalize_keeps_values_apart():
    # values are not evaluated: equivalent numbers in different forms stay distinct votes (grading merges them)
    assert normalize_answer("0.5") != normalize_answer(r"\frac{1}{2}")
    assert normalize_answer("3") != normalize_answer("4")
    assert normalize_answer(r"\pi r^2") == r"\pi r^2"  # the space after a command is kept: "\pir" is not LaTeX
    assert normalize_answer("x=1, y=2") == "x=1,y=2"  # only a single leading assignment is stripped


@pytest.mark.parametrize("empty", [None, "", "   ", "$$"])
def test_normalize_nothing_is_none(empty):
    assert normalize_answer(empty) is None


# --- grading -----------------------------------------------------------------------------------------------------

def test_math_verify_version_recorded():
    assert MATH_VERIFY_VERSION[0].isdigit() and MATH_VERIFY_VERSION.count(".") >= 1


def test_grade_fixed_pairs():
    assert grade("0.5", r"\frac{1}{2}") is True
    assert grade("[-2,7]", r"x \in [-2,7]") is True
    assert grade(r"x \in [-2,7]", "[-2,7]") is True
    assert grade("3", "4") is False
    assert grade(None, "4") is False
    assert grade("4", None) is False
    assert grade("", "4") is False


def test_grade_passes_gold_first():
    # math-verify compares a relation to a set only when the *prediction* is the set, so the direction shows
    assert grade("[-2,7]", r"-2 \le x \le 7") is True
    assert grade(r"-2 \le x \le 7", "[-2,7]") is False


def test_grade_accepts_a_whole_boxed_response():
    assert grade(r"Adding up, the answer is $\boxed{\dfrac{6}{4}}$.", r"\frac{3}{2}") is True


def test_grade_works_off_the_main_thread():
    # math-verify's signal-based timeout raises in threads; our grade runs in a worker process
    out = []
    t = threading.Thread(target=lambda: out.append(grade("2", "2")))
    t.start()
    t.join(60)
    assert out == [True]


PAIRS = [
    ("0.5", r"\frac{1}{2}"), ("3", "4"), (r"\frac{3}{2}", "1.5"), ("6+9i", "9i+6"), (r"\sqrt{20}", r"2\sqrt{5}"),
    ("x=5", "5"), ("10", r"10\%"), ("1,2", "2,1"), (r"(-\infty,-2)\cup(2,\infty)", r"(-\infty,-2)\cup(2,\infty)"),
    ("y=2x+3", "y = 2x+3"), ("2x+4", "2x+3"), (r"\text{Evelyn}", r"\text{Evelyn}"), (r"\text{Navin}", r"\text{Evelyn}"),
    ("(A)", r"\text{(A)}"), ("B", r"\text{(A)}"), (None, "1"), ("", "1"), ("1000", "1,000"), (r"\pi", "3.14"),
    ("0.5", r"\frac{1}{2}"), ("7", "7"),
]


def test_grade_many_equals_one_by_one():
    batch = grade_many([p for p, _ in PAIRS], [g for _, g in PAIRS], workers=2)
    single = [grade(p, g) for p, g in PAIRS]
    assert batch == single
    assert any(batch) and not all(batch)
    assert batch[0] and not batch[1] and batch[-1]


def test_grade_many_rejects_ragged_input():
    with pytest.raises(ValueError, match="2 preds but 1 golds"):
        grade_many(["1", "2"], ["1"])


def test_grade_many_empty():
    assert grade_many([], [], workers=2) == []


def scripted_grade(pred, gold, timeout):
    """Stands in for math-verify in the workers: hangs, dies or raises on request (must be importable)."""
    if pred == "hang":
        time.sleep(120)
    if pred == "die":
        os._exit(3)
    if pred == "raise":
        raise RuntimeError("boom")
    return pred == gold


def test_hung_and_crashing_grades_count_false_and_never_stall():
    preds = ["1", "hang", "2", "die", "raise", "1", "hang", "3", "2"]
    golds = ["1", "1", "2", "2", "2", "9", "3", "3", "2"]
    t0 = time.monotonic()
    out = grade_many(preds, golds, workers=2, timeout_s=1.0, grade_fn=scripted_grade)
    elapsed = time.monotonic() - t0
    assert out == [True, False, True, False, False, False, False, True, True]
    # two hangs of 120 s each were cut at ~2 s; the rest of the batch was not held up
    assert elapsed < 15, elapsed


# --- real gold answers -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def math500_golds():
    if not MATH500.exists():
        pytest.skip(f"MATH-500 benchmark file not present at {MATH500}")
    return [json.loads(line)["answer"] for line in MATH500.read_text().splitlines() if line.strip()]


def test_real_golds_survive_box_extraction(math500_golds):
    assert len(math500_golds) == 500
    assert [extract_answer(f"Hence $\\boxed{{{g}}}$.") for g in math500_golds] == [g.strip() for g in math500_golds]


def test_real_golds_grade_against_themselves_and_their_normal_form(math500_golds):
    golds = math500_golds[::12]  # 42 answers spread over all subjects (intervals, units, text, tuples, ...)
    normal = [normalize_answer(g) for g in golds]
    assert all(n is not None for n in normal)
    wrong = ["1" + g if g[0].isdigit() else "12345" for g in golds]
    out = grade_many(golds + normal + wrong, golds * 3, workers=2)
    n = len(golds)
    assert out[:n] == [True] * n
    assert out[n:2 * n] == [True] * n, [g for g, ok in zip(golds, out[n:2 * n]) if not ok]
    assert not any(out[2 * n:])


def test_grade_many_with_progress_bar_gives_the_same_answers():
    preds, golds = ["1", "2", "2"], ["1", "1", "2"]
    assert grade_many(preds, golds, workers=2, progress=True) == [True, False, True]
