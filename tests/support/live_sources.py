"""Pool-backed sources for live runs (replay/live.py) that differ from a replay only where the driver must not
care: answers relabelled as strings, or nothing ready so the engine stops at every response; and the check that a
live run's outcome equals the engine's."""
import numpy as np

from ttc.replay.live import Observed, PoolSource

KEYS = ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc")


def _assert_same(live, got, what):
    for key in KEYS:
        assert [int(v) for v in live[key]] == list(np.asarray(got[key]).astype(int)), (key, what)
    for key in ("samples_used", "tokens_used", "exhausted"):
        assert live[key] == got[key], (key, what)


class Relabelled(PoolSource):
    """Answers as strings of another alphabet: only their equality may matter."""

    def response(self, i, k):
        r = super().response(i, k)
        return Observed(r.correct, r.score, None if r.answer is None else f"ans-{7 * r.answer + 3}", r.n_tokens,
                        lows=r.lows)


class OneAtATime(Relabelled):
    """A source with nothing ready: the engine run stops at every response it lacks and starts again."""

    ready = None
