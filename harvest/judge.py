"""LLM-as-judge scores: a judge model says whether a response's final answer matches the gold one.

The judge is any `Backend` (harvest/types.py). It must end with "Verdict: yes" or "Verdict: no"; the LAST such verdict
in its output counts (reasoning judges often try both before deciding), case and markdown decoration ignored. An
output without a verdict counts as "no" (a missing vote must not raise a score) and is counted, so a judge that
ignores the format shows up as a large `n_unparseable` instead of as silently low scores.

A response's score is the share of `samples` judge verdicts that say yes: with the default single greedy sample it is
0.0 or 1.0; more samples at a positive temperature give a graded score. Each judge prompt gets a seed derived from the
run seed and the prompt's text, so verdicts do not depend on batching, order or sharding.
"""
from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from ttc.harvest.types import Backend, Sampling
from ttc.replay.errors import InputError

JUDGE_TEMPLATE = """You are checking the final answer of a solution to a math problem against the reference answer.

Problem:
{problem}

Reference answer:
{gold}

Solution to check:
{response}

Find the solution's final answer (usually the last boxed expression or the answer stated at the end). Decide whether \
it is mathematically equivalent to the reference answer: differences in notation, formatting, simplification or \
the order of listed values do not matter; a different value, a missing final answer, several conflicting final \
answers or an unfinished solution mean it does not match. Judge only the final answer, not the reasoning.

Reply briefly, then end with one final line that is exactly "Verdict: yes" if the final answer matches the \
reference answer, or "Verdict: no" otherwise."""

# "Verdict: yes", "**Verdict:** No.", "verdict - YES", "Verdict: [no]"; "yes" must be a whole word.
_VERDICT = re.compile(r"verdict[\s*_:=\-\u2013\u2014\"'`\[\(]*(yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class JudgeResult:
    scores: list[float]                  # per response: share of verdicts saying yes
    verdicts: list[list[bool | None]]    # per response, per judge sample; None = unparseable (counted as no)
    texts: list[list[str]]               # the judge's raw outputs
    n_unparseable: int


def parse_verdict(text: str) -> bool | None:
    """True / False for the last "Verdict: yes/no" in the judge's output; None when there is none."""
    matches = _VERDICT.findall(text or "")
    return matches[-1].lower() == "yes" if matches else None


def render_judge_prompt(problem: str, gold: str, response: str, *, template: str = JUDGE_TEMPLATE,
                        max_response_chars: int | None = None) -> str:
    """Fill the template. `max_response_chars` keeps the END of long responses, where the final answer is."""
    if max_response_chars is not None and len(response) > max_response_chars:
        response = "[...]\n" + response[len(response) - max_response_chars:]
    return template.format(problem=problem, gold=gold, response=response)


def _seed_for(base_seed: int, prompt: str) -> int:
    digest = hashlib.sha256(f"{base_seed}\x00{prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _as_chat(backend: Any, prompts: list[str], chat: bool | None) -> list[str]:
    tokenizer = getattr(backend, "tokenizer", None)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is None:
        chat = has_template
    if not chat:
        return prompts
    if not has_template:
        raise InputError("chat=True but the judge backend's tokenizer has no chat template")
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts]


def judge_details(backend: Backend, problems: Sequence[str], golds: Sequence[str | None], responses: Sequence[str], *,
                  samples: int = 1, temperature: float | None = None, max_tokens: int = 1024, seed: int = 0,
                  template: str = JUDGE_TEMPLATE, max_response_chars: int | None = None, chat: bool | None = None,
                  chunk_size: int = 512) -> JudgeResult:
    """Judge every response; see the module docstring. `temperature` defaults to 0 for one sample and to 0.6 (the
    harvest default) for several, since several greedy samples would just repeat one verdict. `chat` None applies
    the backend tokenizer's chat template when it has one."""
    n = len(responses)
    if not (len(problems) == len(golds) == n):
        raise ValueError(f"judge inputs differ in length: {len(problems)} problems, {len(golds)} golds, {n} responses")
    missing = [i for i, g in enumerate(golds) if g is None or not str(g).strip()]
    if missing:
        raise InputError(f"the judge needs a gold answer; response {missing[0]} has none ({len(missing)} in all)")
    if samples < 1:
        raise InputError(f"samples must be >= 1, got {samples}")
    if temperature is None:
        temperature = 0.0 if samples == 1 else 0.6
    sampling = Sampling(n=samples, temperature=temperature, top_p=1.0, max_tokens=max_tokens, seed=seed)

    raw = [render_judge_prompt(p, str(g), r, template=template, max_response_chars=max_response_chars)
           for p, g, r in zip(problems, golds, responses)]
    prompts = _as_chat(backend, raw, chat)
    texts: list[list[str]] = []
    for start in range(0, n, chunk_size):
        chunk = prompts[start:start + chunk_size]
        outs = backend.generate(chunk, sampling, [_seed_for(seed, p) for p in chunk])
        if len(outs) != len(chunk):
            raise ValueError(f"the judge backend returned {len(outs)} results for {len(chunk)} prompts")
        for k, group in enumerate(outs):
            if len(group) != samples:
                raise ValueError(f"the judge backend returned {len(group)} samples for prompt {start + k}, "
                                 f"expected {samples}")
            texts.append([r.text for r in group])

    verdicts = [[parse_verdict(t) for t in group] for group in texts]
    scores = [sum(v is True for v in vs) / samples for vs in verdicts]
    n_bad = sum(v is None for vs in verdicts for v in vs)
    return JudgeResult(scores=scores, verdicts=verdicts, texts=texts, n_unparseable=n_bad)


def judge_scores(backend: Backend, problems: Sequence[str], golds: Sequence[str | None], responses: Sequence[str], *,
                 samples: int = 1, **kwargs: Any) -> list[float]:
    """Per-response judge scores in [0, 1]. Warns with the count of unparseable verdicts (use `judge_details` to
    record it)."""
    result = judge_details(backend, problems, golds, responses, samples=samples, **kwargs)
    if result.n_unparseable:
        total = len(result.texts) * samples
        warnings.warn(f"{result.n_unparseable} of {total} judge outputs had no 'Verdict: yes/no' line; "
                      "counted as no", stacklevel=2)
    return result.scores
