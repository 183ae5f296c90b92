"""A live response source: generate (and score) the k-th response of a query when a policy asks for it.

`replay.live.run_live` runs any replayable policy against it. The k-th response of a query is drawn with the
seed its sample k gets in `ttc harvest` (harvest.pipeline.query_seed(seed, query_id) + k; vLLM's rule for the
n children of one request), so a live run equals the replay of the harvested pool taken in sample order, and
generation can run ahead in batches without changing a decision: `lookahead` responses of a query per call, and
(batch=True) one call for every active query whose cached responses are used up, so a round-robin round is one
backend call, not one per query.
"""
from __future__ import annotations

from typing import Callable, Sequence

from replay.live import Observed

from .pipeline import query_seed
from .types import Backend, Query, Response, Sampling


class BackendSource:
    """Responses generated on demand by a backend, cached per query.

    oracle None: every response counts as wrong, score 0, no answer (the policy sees only lengths: enough for
    token budgets and for tests); "gt": math answers extracted, normalised and graded with math-verify against
    the query's gold answer (score = correctness), as `ttc score --oracle gt` does (no answer when the response
    was cut at max_tokens).

    batch: when a query needs a response that is not cached, also generate `lookahead` responses for every other
    query the driver reports active whose cache is used up (replay.live.run_live reports them through `watch`).
    Each query is then topped up only after it consumed what it had, so at most `lookahead` responses per query
    go unused, as without batching."""

    def __init__(self, backend: Backend, queries: Sequence[Query], prompt: Callable[[Query], str], sampling: Sampling,
                 *, lookahead: int = 4, oracle: str | None = None, stop: Sequence[str] = (), batch: bool = True):
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        if oracle not in (None, "gt"):
            raise ValueError(f"unknown oracle {oracle!r} for a live source (None or 'gt')")
        if oracle == "gt" and any(q.gold is None for q in queries):
            raise ValueError("oracle 'gt' needs a gold answer for every query")
        self.backend, self.queries, self.prompt, self.sampling = backend, list(queries), prompt, sampling
        self.lookahead, self.oracle, self.stop, self.batch = lookahead, oracle, tuple(stop), batch
        self._prompts: dict[int, str] = {}
        self._cache: list[list[tuple[Response, Observed]]] = [[] for _ in self.queries]
        self._next_k: Callable[[int], int | None] | None = None
        self.calls = 0  # backend calls made (for cost accounting and tests)

    def watch(self, next_k: Callable[[int], int | None] | None):
        """The driver's view of the run: next_k(i) = the index of the next response query i would ask for, or
        None when it will ask for no more (answered, capped, or its pool size reached); None after the run."""
        self._next_k = next_k

    def _generate(self, i: int, upto: int):
        todo = [i]
        if self.batch and self._next_k is not None:
            for q in range(len(self.queries)):
                k = self._next_k(q) if q != i else None
                if k is not None and k >= len(self._cache[q]):
                    todo.append(q)
        # One call: query q's responses start at its cached count, with the seeds its pool samples have there.
        count = max(self.lookahead, upto + 1 - len(self._cache[i]))
        s = Sampling(n=count, temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                     max_tokens=self.sampling.max_tokens, seed=self.sampling.seed)
        for q in todo:
            if q not in self._prompts:
                self._prompts[q] = self.prompt(self.queries[q])
        seeds = [query_seed(self.sampling.seed, self.queries[q].query_id) + len(self._cache[q]) for q in todo]
        out = self.backend.generate([self._prompts[q] for q in todo], s, seeds, stop=self.stop)
        self.calls += 1
        for q, responses in zip(todo, out):
            for r in responses:
                self._cache[q].append((r, self._score(self.queries[q], r)))

    def _score(self, q: Query, r: Response) -> Observed:
        if self.oracle is None:
            return Observed(False, 0.0, None, r.n_tokens)
        from .oracles.math_answer import grade
        from .scoring import response_answer

        answer = response_answer("gt", r.text, r.finish_reason)
        ok = answer is not None and grade(answer, q.gold)
        return Observed(ok, 1.0 if ok else 0.0, answer, r.n_tokens)

    def response(self, i: int, k: int) -> Observed:
        if k >= len(self._cache[i]):
            self._generate(i, k)
        return self._cache[i][k][1]

    def ready(self, i: int) -> int:
        """Responses of query i generated already (the driver takes them without asking one at a time)."""
        return len(self._cache[i])

    def text(self, i: int, k: int) -> str:
        """The text of a response already generated."""
        return self._cache[i][k][0].text
