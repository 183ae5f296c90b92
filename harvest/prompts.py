"""Prompt templates: how a `Query` becomes the text a backend completes.

The template is part of what a pool measures (a few-shot prompt and a zero-shot one give different accuracy from
the same model), so every template has a name and a version, and `template_info` hands the pipeline the exact text
to record in pool.json. Bump `version` whenever a template's text or its stop strings change.

Templates are written for base and chat models alike: the rendered text ends with the cue the answer follows
("Solution:" or "[THOUGHT]"), which a base model continues; for a chat model (its tokenizer carries a chat
template) the same text becomes the single user message and the tokenizer's own chat template wraps it, with the
generation prompt appended. `stop` holds the strings after which a base model would start inventing the next
few-shot item; backends accept them as `stop=` so that a sample does not run on into a made-up problem whose
\\boxed{} answer would be graded instead of its own.

Placeholders are substituted in one pass over the template only, so braces inside problems (LaTeX) or code are
never interpreted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ttc.harvest.types import Query
from ttc.replay.errors import InputError


@dataclass(frozen=True)
class Template:
    name: str
    version: int
    text: str                      # with {problem} or {code} / {input} / {function_name} placeholders
    task: str                      # the Query.task it is written for ("any" = every task)
    chat: bool = True              # wrap in the tokenizer's chat template when there is one
    stop: tuple[str, ...] = ()     # stop strings for backends (cut before a made-up next item)
    description: str = ""


# Long first lines are split into adjacent literals in the source only: the text, which pools record, is unchanged.
_MATH_FEWSHOT = (r'Solve the math problem. Work in numbered steps, one per line, written as "Step 1: ...", '
                 r'"Step 2: ...", and so on. End with the final answer in \boxed{}.'
                 r"""

Problem:
What is the sum of the first five positive odd integers?
Solution:
Step 1: The first five positive odd integers are 1, 3, 5, 7 and 9.
Step 2: Adding them gives 1 + 3 + 5 + 7 + 9 = 25.
Final answer: \boxed{25}

Problem:
Solve for $x$: $3x - 7 = 11$.
Solution:
Step 1: Add 7 to both sides, which gives $3x = 18$.
Step 2: Divide both sides by 3, which gives $x = 6$.
Final answer: \boxed{6}

Problem:
Write $\frac{12}{18}$ in lowest terms.
Solution:
Step 1: The greatest common divisor of 12 and 18 is 6.
Step 2: Dividing the numerator and the denominator by 6 gives $\frac{2}{3}$.
Final answer: \boxed{\frac{2}{3}}

Problem:
{problem}
Solution:
""")

_AIME_ZEROSHOT = (r"Solve the competition problem below. Reason step by step, and give the final answer, an integer "
                  r"from 0 to 999, in \boxed{}."
                  r"""

Problem:
{problem}
Solution:
""")

_LCB_EXEC_COT = ("You are given a Python function and an assertion that calls it on an input. Replace ?? with the "
                 "literal value the call returns (a literal only: no expressions, no function calls), even if the "
                 "function looks wrong or unfinished. First trace the execution step by step between [THOUGHT] and "
                 "[/THOUGHT], then write the completed assertion between [ANSWER] and [/ANSWER]."
                 """

[PYTHON]
def count_vowels(word):
    total = 0
    for ch in word:
        if ch in "aeiou":
            total += 1
    return total * 2
assert count_vowels(word = "banana") == ??
[/PYTHON]
[THOUGHT]
count_vowels is called with word = "banana", and total starts at 0.
The letters are b, a, n, a, n, a. The vowels among them are the three a's, so the loop ends with total = 3.
The function returns 3 * 2 = 6.
[/THOUGHT]
[ANSWER]
assert count_vowels(word = "banana") == 6
[/ANSWER]

[PYTHON]
{code}
assert {input} == ??
[/PYTHON]
[THOUGHT]
""")

TEMPLATES: dict[str, Template] = {
    t.name: t for t in (
        Template("math-fewshot", 1, _MATH_FEWSHOT, task="math", stop=("\nProblem:",),
                 description="3-shot Problem/Solution prompt, numbered 'Step k:' lines, answer in \\boxed{}"),
        Template("aime-zeroshot", 1, _AIME_ZEROSHOT, task="math", stop=("\nProblem:",),
                 description="zero-shot Problem/Solution prompt, integer answer in \\boxed{}"),
        Template("lcb-exec-cot", 1, _LCB_EXEC_COT, task="lcb-exec", stop=("\n[PYTHON]",),
                 description="1-shot chain-of-thought code execution, completed assertion in [ANSWER] tags"),
        Template("plain", 1, "{problem}", task="any",
                 description="the problem text as is"),
    )
}

_PLACEHOLDER = re.compile(r"\{(problem|code|input|function_name)\}")


def _template(name: str) -> Template:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise InputError(f"unknown prompt template {name!r}; known: {', '.join(TEMPLATES)}") from None


def default_template(task: str, dataset: str | None = None) -> str:
    """The template a dataset is usually evaluated with: AIME zero-shot, other math few-shot, lcb-exec CoT."""
    if task == "lcb-exec":
        return "lcb-exec-cot"
    if task == "math":
        return "aime-zeroshot" if dataset and "aime" in dataset.lower() else "math-fewshot"
    return "plain"


def fill(template_name: str, query: Query) -> str:
    """The template's text for this query, before any chat wrapping."""
    t = _template(template_name)
    if t.task not in ("any", query.task):
        raise InputError(f"template {t.name!r} is for {t.task!r} queries, query {query.query_id!r} is {query.task!r}")
    values: dict[str, Any] = {k: query.fields.get(k) for k in ("code", "input", "function_name")}
    values["problem"] = query.problem

    def sub(m: re.Match) -> str:
        v = values.get(m.group(1))
        if v is None:
            raise InputError(f"template {t.name!r} needs field {m.group(1)!r}, missing in query {query.query_id!r}")
        return str(v)

    return _PLACEHOLDER.sub(sub, t.text)


def has_chat_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render(template_name: str, query: Query, tokenizer: Any = None, *, chat: bool | None = None) -> str:
    """The prompt for `query`. The chat template is applied when the template allows it, the tokenizer has one
    and `chat` is not False; `chat=True` with a tokenizer that has none is an error rather than a silent plain
    prompt."""
    t = _template(template_name)
    text = fill(template_name, query)
    if chat is False or not t.chat:
        return text
    if not has_chat_template(tokenizer):
        if chat:
            raise InputError("chat=True but the tokenizer has no chat template")
        return text
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)


def template_info(name: str) -> dict[str, Any]:
    """What pool.json records about the prompt: enough to rebuild every prompt exactly."""
    t = _template(name)
    return {"name": t.name, "version": t.version, "text": t.text, "task": t.task, "chat": t.chat,
            "stop": list(t.stop), "description": t.description}
