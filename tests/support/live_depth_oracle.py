"""The depth policies live on their plain-Python twins (replay/reference_depth.py): the test oracle of
replay.live.run_live_depth, which runs the engine's kernels. A trace here produces its events (trace_events' form) only
when the twin first indexes them, each a segment asked of the source, so the oracle reads exactly the segments the
policy explores, in the order it explores them. It was replay/live.py's driver until the live run moved onto the
kernels (issue 30); it stays here as what the kernels' live run must equal: the same outcome and the same segments
asked for."""
from __future__ import annotations

from typing import Callable, Hashable

import numpy as np

from ttc.replay.reference_depth import cmc_events, parallel_probe_events

_TWIN_NAMES = {"stable": "T", "probe_warmup": "warm", "cmc_beta": "beta"}  # RunConfig's -> reference_depth's


class LazyTrace:
    """One trace's events ((cumulative cost, answer id, correct, finished)) as far as the twin has read them: indexing
    an event not produced yet asks the source for the next segment. The trace cap as replay's depth view applies it:
    a probe at the cap is an event, and a trace running past the cap ends there (cost the cap) holding its last
    probe's answer."""

    def __init__(self, source, i: int, k: int, cap: int, code: Callable[[Hashable | None], int]):
        self.source, self.i, self.k, self.cap, self.code = source, i, k, cap, code
        self.events: list[tuple[int, int, int, bool]] = []
        self.segments: list = []

    def __getitem__(self, e: int):
        while len(self.events) <= e:
            if self.events and self.events[-1][3]:
                raise IndexError(f"query {self.i} trace {self.k} has ended")
            self._more()
        return self.events[e]

    def _more(self):
        s = self.source.segment(self.i, self.k)
        self.segments.append(s)
        a = self.code(s.answer)
        ok = int(bool(s.correct)) if a >= 0 else 0
        cap = self.cap
        if cap and s.tokens > cap:
            last = self.events[-1] if self.events else (0, -1, 0, False)
            self.events.append((cap, last[1], last[2], True))
        elif s.finished:
            self.events.append((s.tokens, a, ok, True))
        else:
            self.events.append((s.tokens, a, ok, False))
            if cap and s.tokens == cap:
                self.events.append((cap, a, ok, True))


class LazyQuery:
    """A query's traces as the twins index them (traces[:chains], traces[pos], len), each made on first use."""

    def __init__(self, source, i: int, size: int, cap: int):
        self.source, self.i, self.size, self.cap = source, i, size, cap
        self.labels: dict[Hashable, int] = {}
        self.traces: list[LazyTrace] = []

    def code(self, answer: Hashable | None) -> int:
        return -1 if answer is None else self.labels.setdefault(answer, len(self.labels))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[m] for m in range(*k.indices(self.size))]
        if not 0 <= k < self.size:
            raise IndexError(k)
        while len(self.traces) <= k:
            self.traces.append(LazyTrace(self.source, self.i, len(self.traces), self.cap, self.code))
        return self.traces[k]


def reference_live_depth(source, sizes, rank, config, budget_total: int) -> dict:
    """The twin of config.policy run lazily over `source`: per query answer (label), correct, answered, started,
    samples_used / tokens_used, and traces (per query, per trace, the segments read)."""
    from ttc.replay.policies import REGISTRY

    queries = [LazyQuery(source, i, int(s), config.trace_cap) for i, s in enumerate(sizes)]
    order = [int(q) for q in np.argsort(np.asarray(rank, np.int64), kind="stable")]
    kw = {_TWIN_NAMES.get(name, name): getattr(config, name) for name in REGISTRY[config.policy].params}
    run = parallel_probe_events if config.policy == "parallel-probe" else cmc_events
    out, samples, tokens = run(queries, order, int(budget_total), unit=config.unit, **kw)
    answers = [{v: a for a, v in q.labels.items()} for q in queries]
    return {"answer": [answers[i].get(int(a)) for i, (a, _, _, _) in enumerate(out)],
            "correct": [bool(ok) for _, ok, _, _ in out], "answered": [bool(d) for _, _, d, _ in out],
            "started": [int(s) for _, _, _, s in out], "samples_used": int(samples), "tokens_used": int(tokens),
            "traces": [[list(t.segments) for t in q.traces if t.segments] for q in queries]}
