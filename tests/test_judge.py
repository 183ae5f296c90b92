"""The LLM judge against a fake Backend that answers from canned texts (a test double for the protocol)."""
from __future__ import annotations

import re

import pytest

from ttc.harvest.judge import JUDGE_TEMPLATE, judge_details, judge_scores, parse_verdict, render_judge_prompt
from ttc.harvest.types import Response, Sampling


class FakeJudge:
    """Answers each prompt with `script(prompt, sample_index)` and records every call."""

    def __init__(self, script, tokenizer=None, drop=0):
        self.script, self.tokenizer, self.drop = script, tokenizer, drop
        self.calls: list[tuple[list[str], Sampling, list[int]]] = []

    def generate(self, prompts, sampling, seeds):
        self.calls.append((list(prompts), sampling, list(seeds)))
        return [[Response(self.script(p, j), 5, "stop") for j in range(sampling.n - self.drop)] for p in prompts]

    def info(self):
        return {"backend": "fake"}


def _solution_of(prompt: str) -> str:
    return prompt.split("Solution to check:\n", 1)[1].split("\n\n", 1)[0]


def _gold_of(prompt: str) -> str:
    return prompt.split("Reference answer:\n", 1)[1].split("\n\n", 1)[0]


def matching_judge(prompt: str, j: int) -> str:
    """A judge that compares the last boxed value with the reference answer."""
    boxed = re.findall(r"\\boxed\{([^}]*)\}", _solution_of(prompt))
    ok = bool(boxed) and boxed[-1].strip() == _gold_of(prompt).strip()
    return f"The final answer is {boxed[-1] if boxed else 'missing'}.\nVerdict: {'yes' if ok else 'no'}"


def test_prompt_carries_problem_gold_and_response():
    prompt = render_judge_prompt("What is \\frac{1}{2} + 1?", "\\frac{3}{2}", "So \\boxed{1.5}")
    assert "What is \\frac{1}{2} + 1?" in prompt and "\\frac{3}{2}" in prompt and "So \\boxed{1.5}" in prompt
    assert prompt.index("What is") < prompt.index("\\frac{3}{2}") < prompt.index("So \\boxed")
    assert '"Verdict: yes"' in prompt and '"Verdict: no"' in prompt
    assert set(re.findall(r"\{(\w+)\}", JUDGE_TEMPLATE)) == {"problem", "gold", "response"}


def test_long_responses_keep_their_end():
    prompt = render_judge_prompt("p", "4", "x" * 500 + " so \\boxed{4}", max_response_chars=20)
    assert "\\boxed{4}" in prompt and "x" * 30 not in prompt and "[...]" in prompt


@pytest.mark.parametrize("text,verdict", [
    ("Reasoning...\nVerdict: yes", True),
    ("verdict: NO", False),
    ("**Verdict:** Yes.", True),
    ("Verdict - no", False),
    ("Verdict: [yes]", True),
    ("At first I thought Verdict: yes, but the sign is wrong.\nVerdict: no", False),
    ("Verdict: no... wait, it simplifies.\nVerdict: Yes", True),
    ("I think the answer matches, yes.", None),
    ("Verdict: yesterday's answer", None),
    ("Verdict: not equivalent", None),
    ("", None),
])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


def test_scores_from_a_matching_judge_and_its_default_sampling():
    judge = FakeJudge(matching_judge)
    scores = judge_scores(judge, ["p1", "p2", "p3"], ["4", "7", "x+1"],
                          ["so \\boxed{4}", "so \\boxed{8}", "no answer here"])
    assert scores == [1.0, 0.0, 0.0]
    (prompts, sampling, seeds), = judge.calls
    assert sampling.n == 1 and sampling.temperature == 0.0
    assert "p2" in prompts[1] and "\\boxed{8}" in prompts[1] and "7" in _gold_of(prompts[1])


def test_share_of_yes_and_unparseable_count():
    canned = ["Verdict: yes", "Verdict: no", "VERDICT: Yes", "I cannot tell."]
    judge = FakeJudge(lambda p, j: canned[j] if "first" in p else "Verdict: no")
    result = judge_details(judge, ["first", "second"], ["1", "2"], ["a", "b"], samples=4)
    assert result.scores == [0.5, 0.0]
    assert result.verdicts[0] == [True, False, True, None]
    assert result.n_unparseable == 1
    assert result.texts[0] == canned
    assert judge.calls[0][1].n == 4 and judge.calls[0][1].temperature > 0
    with pytest.warns(UserWarning, match="1 of 8 judge outputs"):
        assert judge_scores(judge, ["first", "second"], ["1", "2"], ["a", "b"], samples=4) == [0.5, 0.0]


def test_seeds_follow_the_prompt_not_its_position():
    a = FakeJudge(matching_judge)
    b = FakeJudge(matching_judge)
    judge_scores(a, ["p1", "p2"], ["1", "2"], ["r1", "r2"], seed=7)
    judge_scores(b, ["p2", "p1"], ["2", "1"], ["r2", "r1"], seed=7, chunk_size=1)
    seeds_a = dict(zip(a.calls[0][0], a.calls[0][2]))
    seeds_b = {p: s for prompts, _, seeds in b.calls for p, s in zip(prompts, seeds)}
    assert seeds_a == seeds_b and len(set(seeds_a.values())) == 2
    c = FakeJudge(matching_judge)
    judge_scores(c, ["p1"], ["1"], ["r1"], seed=8)
    assert c.calls[0][2][0] != seeds_a[c.calls[0][0][0]]


def test_chat_template_is_applied_when_the_backend_has_one():
    class Tok:
        chat_template = "chatml"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "<user>" + messages[0]["content"] + "</user><assistant>"

    judge = FakeJudge(lambda p, j: "Verdict: yes", tokenizer=Tok())
    assert judge_scores(judge, ["p"], ["1"], ["r"]) == [1.0]
    assert judge.calls[0][0][0].startswith("<user>") and judge.calls[0][0][0].endswith("<assistant>")
    raw = FakeJudge(lambda p, j: "Verdict: yes", tokenizer=Tok())
    judge_scores(raw, ["p"], ["1"], ["r"], chat=False)
    assert not raw.calls[0][0][0].startswith("<user>")
    with pytest.raises(ValueError, match="chat template"):
        judge_scores(FakeJudge(lambda p, j: "Verdict: yes"), ["p"], ["1"], ["r"], chat=True)


def test_bad_inputs_and_short_backends_raise():
    judge = FakeJudge(lambda p, j: "Verdict: yes")
    with pytest.raises(ValueError, match="differ in length"):
        judge_scores(judge, ["p"], ["1", "2"], ["r"])
    with pytest.raises(ValueError, match="gold answer"):
        judge_scores(judge, ["p", "q"], ["1", None], ["r", "s"])
    with pytest.raises(ValueError, match="samples"):
        judge_scores(judge, ["p"], ["1"], ["r"], samples=0)
    with pytest.raises(ValueError, match="returned 1 samples"):
        judge_scores(FakeJudge(lambda p, j: "Verdict: yes", drop=1), ["p"], ["1"], ["r"], samples=2)
    assert judge_scores(judge, [], [], []) == []
