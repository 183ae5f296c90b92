"""Code-task conventions on top of the sandbox: LiveCodeBench code execution and HumanEval.

LiveCodeBench code execution shows a function and `assert f(input) == ??`; the model answers with the literal
between [ANSWER] and [/ANSWER]. We grade by running the function and the completed assertion in the sandbox.
The answer must be a Python literal: otherwise "f(3)" would make `assert f(3) == f(3)` pass by construction.

HumanEval programs are the prompt, the completion cut at the first top-level continuation (the stop sequences
used when the benchmark was sampled), the test code, and `check(entry_point)`. Two verdicts (VERDICTS):
"isolated" (the default, humaneval_checked) runs prompt + completion in one process and the prompt, the test and
`check(entry_point)` in another that calls the function across and compares plain values, so that neither top-level
code after the function (the stop sequences do not cut `import` or `try`) nor a returned object's own `__eq__` can
pass a test; "source" (humaneval_program) is HumanEval's own check: the whole program in one process, a pass when
it exits cleanly, the returned object's `==` (both forgeries pass there).
"""
from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence

from ttc.harvest.oracles.sandbox import Checked, run_many, timeout_warning

_ANSWER = re.compile(r"\[ANSWER\](.*?)\[/ANSWER\]", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z0-9_+-]*\s*\n?|\n?```\s*$")

# Names LeetCode-style execution code uses without importing them (List, Counter, inf, lru_cache, ...).
# `from math import *` is avoided on purpose: it would shadow the builtin three-argument pow.
LCB_PRELUDE = """\
from typing import *
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, cmp_to_key, lru_cache, reduce
from itertools import accumulate, chain, combinations, count, groupby, islice, pairwise, permutations, product
from itertools import zip_longest
from heapq import heapify, heappop, heappush, heappushpop, nlargest, nsmallest
from bisect import bisect, bisect_left, bisect_right, insort
from math import ceil, comb, floor, gcd, inf, isqrt, log2, sqrt
import bisect, collections, functools, heapq, itertools, math, operator, re, string
"""


def _strip_fence(s: str) -> str:
    return _FENCE.sub("", s.strip()).strip()


def _assert_rhs(s: str) -> str | None:
    """The right-hand side of `assert <call> == <literal>`, found with the parser so that "==" inside string
    literals does not split it; a plain text split is the fallback for snippets that do not parse."""
    try:
        tree = ast.parse(s)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None and len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert):
        test = tree.body[0].test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return ast.get_source_segment(s, test.comparators[0])
        return None
    if "==" in s:
        return s.split("==", 1)[1].strip()
    return None


def extract_lcb_answer(text: str | None) -> str | None:
    """The predicted output literal from a code-execution response, or None.

    Takes the last [ANSWER]...[/ANSWER] block (a CoT response may quote the format earlier), drops code fences,
    and from a full `assert f(x) == lit` keeps `lit`. An unterminated block counts as no answer."""
    if not text:
        return None
    blocks = _ANSWER.findall(text)
    if not blocks:
        return None
    ans = _strip_fence(blocks[-1])
    if ans.startswith("assert"):
        ans = _assert_rhs(ans) or ""
    ans = ans.strip()
    return ans or None


def is_literal(expr: str) -> bool:
    """Is expr a plain Python literal (what ast.literal_eval accepts: numbers, strings, bytes, None/True/False,
    containers of them, complex sums such as 1+2j, set())? Calls and names are not answers. Model answers are a
    few kB at most, so evaluating them here is cheap; anything that fails to evaluate is not a literal."""
    try:
        ast.literal_eval(expr.strip())
    except Exception:  # noqa: BLE001 - ValueError, SyntaxError, RecursionError, MemoryError, ...
        return False
    return True


def lcb_program(code: str, input_expr: str, predicted: str) -> str:
    """The program that checks a predicted output: prelude, the function, `assert <input_expr> == <predicted>`.

    Raises ValueError when predicted is not a literal (see is_literal)."""
    if not is_literal(predicted):
        raise ValueError(f"predicted output is not a Python literal: {predicted[:80]!r}")
    return f"{LCB_PRELUDE}\n{code.rstrip()}\n\nassert {input_expr.strip()} == {predicted.strip()}\n"


def grade_lcb(codes: Sequence[str], input_exprs: Sequence[str], preds: Sequence[str | None], **sandbox_kw
              ) -> list[bool]:
    """Correctness of each predicted output. None or non-literal predictions are False without running; identical
    programs (the same prediction sampled many times) run once. sandbox_kw goes to sandbox.run_many (workers,
    timeout_s, memory_mb, progress, sandbox: "auto", "strict" or "guard"); bad limits raise InputError (a
    ValueError) before anything runs, even when no prediction needs running."""
    if not (len(codes) == len(input_exprs) == len(preds)):
        raise ValueError(f"grade_lcb: {len(codes)} codes, {len(input_exprs)} inputs, {len(preds)} predictions")
    programs: dict[str, int] = {}
    slot: list[int | None] = []
    for code, inp, pred in zip(codes, input_exprs, preds):
        if pred is None or not is_literal(pred):
            slot.append(None)
            continue
        slot.append(programs.setdefault(lcb_program(code, inp, pred), len(programs)))
    results = run_many(list(programs), **sandbox_kw)  # validates sandbox_kw even for an empty list
    warning = timeout_warning(results, sandbox_kw.get("timeout_s", 10.0))
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    return [False if s is None else results[s].passed for s in slot]


HUMANEVAL_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")


def humaneval_truncate(completion: str) -> str:
    """The completion up to the first stop sequence: what follows is the model starting a new top-level block
    (another function, a test, a main guard), not the body it was asked for."""
    cut = len(completion)
    for stop in HUMANEVAL_STOPS:
        i = completion.find(stop)
        if i != -1:
            cut = min(cut, i)
    return completion[:cut]


VERDICTS = ("isolated", "source")


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """HumanEval's own program (verdict "source"): one process, a pass when it runs to its end."""
    return prompt + humaneval_truncate(completion) + "\n" + test + f"\ncheck({entry_point})\n"


def humaneval_checked(prompt: str, completion: str, test: str, entry_point: str) -> Checked:
    """The same task with the verdict out of the program's reach (verdict "isolated"): the program is the prompt and
    the truncated completion; the checker runs the prompt (for the helpers a test uses, such as HumanEval/32's poly),
    binds entry_point to the program's function, and runs the test and check(entry_point)."""
    return Checked(prompt + humaneval_truncate(completion), prompt, test + f"\ncheck({entry_point})\n", entry_point)


def humaneval_item(prompt: str, completion: str, test: str, entry_point: str, verdict: str = "isolated"
                   ) -> str | Checked:
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; choose from {', '.join(VERDICTS)}")
    make = humaneval_checked if verdict == "isolated" else humaneval_program
    return make(prompt, completion, test, entry_point)
