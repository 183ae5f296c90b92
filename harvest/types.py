"""The few types every harvest stage agrees on: what a query is, how to sample, what comes back.

Backends, prompt templates, oracles and the shard writer only meet through these, so a new backend or oracle is a
local change and a live allocation driver can call a backend round by round with the same objects.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from ttc.replay.errors import InputError


@dataclass(frozen=True)
class Query:
    """One benchmark item. `task` picks the prompt family and the ground-truth oracle:
    "math" (gold = final answer in LaTeX), "lcb-exec" (LiveCodeBench code execution: fields carry `code`,
    `input` such as "f(3)" and `function_name`; gold = the output literal), or "custom" (user prompts)."""

    query_id: str
    task: str
    problem: str
    gold: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters, recorded verbatim in pool.json. `seed` is the run's base seed; the pipeline derives
    one seed per query from it (so a query's responses do not depend on batching, sharding or resumption)."""

    n: int
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 2048
    seed: int = 0

    def __post_init__(self):
        # Checked when the run is described, before any model loads or file is written: a refusal from the
        # engine after the weights loaded would leave a directory that blocks the corrected run. NaN fails every
        # comparison, hence `not lo <= x <= hi` rather than `x < lo`.
        if self.n < 1:
            raise InputError(f"--responses must be at least 1, got {self.n}")
        if self.max_tokens < 1:
            raise InputError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if not 0.0 <= self.temperature < math.inf:
            raise InputError(f"--temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"--top-p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class Response:
    text: str
    n_tokens: int          # generated token ids, as the backend counted them
    finish_reason: str     # "stop" | "length" | backend-specific string
    # confidence columns (harvest/confidence.py), only when generate() was asked for them: reduced from the token
    # log-probs as the backend decodes, so no per-token table outlives its response
    signals: dict[str, float | None] | None = None


class Backend(Protocol):
    """A generator: for each prompt, `sampling.n` responses, drawn with that prompt's own seed."""

    def generate(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[list[Response]]: ...

    def info(self) -> dict[str, Any]:
        """Provenance for pool.json: backend name, model, revision, library versions, engine options."""
        ...
