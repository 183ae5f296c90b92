"""UAB (arXiv 2605.26849, github.com/manhitv/UAB): one draw per query, its confidence exp(-ANLL) giving
p = exp(-ANLL / tau), the draws left greedily to the largest p (1 - p)^c. Hand-computed allocations, engine ==
reference on random pools in both units, live == replay, and the refusal without a side signal.
benchmarks/uab_source.py runs the source's own allocation code on the embedded MATH-500 pool beside the engine."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import run_once
from ttc.replay.live import PoolSource, run_live
from ttc.replay.policies import RunConfig
from ttc.replay.pool import Pool, PoolError

from support.equivalence import _compare, pools
from support.live_sources import _assert_same

SIDES = [0.0, 0.3, 0.5, 0.5, 0.8, 0.9, 1.0]  # ties, p = 0 and p = 1 included


def _drawn(sizes, first_conf, budget, tau=1.0, max_samples=0, unit="samples", tok=None):
    """Draws per query of a UAB run on a pool whose query i holds sizes[i] responses, its first one (identity
    permutation) with side signal first_conf[i], the rest 0.5."""
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    side = np.full(total, 0.5)
    side[off[:-1]] = first_conf
    tok = np.ones(total, np.int64) if tok is None else np.asarray(tok, np.int64)
    got = run_once(off, np.zeros(total, np.int8), np.zeros(total), np.full(total, -1, np.int64), tok,
                   np.arange(total), np.arange(len(sizes)),
                   RunConfig("uab", unit=unit, uab_tau=tau, max_samples=max_samples), budget, side=side)
    return [int(v) for v in got["n_drawn"]]


def test_the_greedy_split_by_hand():
    # tau 1: p = conf. Marginals p (1 - p)^c: 0.9, 0.8, 0.5 -> q0; then 0.09, 0.8, 0.5 -> q1; 0.09, 0.16, 0.5 -> q2;
    # 0.09, 0.16, 0.25 -> q2 again: extra (1, 1, 2) on top of phase 1's one each
    assert _drawn([10, 10, 10], [0.9, 0.8, 0.5], 7) == [2, 2, 3]
    # one more: 0.09, 0.16, 0.125 -> q1
    assert _drawn([10, 10, 10], [0.9, 0.8, 0.5], 8) == [2, 3, 3]
    # tau 0.2 (the source's): p = conf^5 = 0.59049, 0.32768, 0.03125; marginals after c draws
    # q0 0.59049 0.24181 0.09902 0.04055 ..., q1 0.32768 0.22031 0.14812 0.09958 0.06695 ..., q2 0.03125 0.03027 ...
    # 6 extra draws: q0, q1, q0, q1, q1 and then q1's 0.09958 over q0's 0.09902 -> (2, 4, 0)
    assert _drawn([10, 10, 10], [0.9, 0.8, 0.5], 9, tau=0.2) == [3, 5, 1]
    p = [0.9 ** 5, 0.8 ** 5]
    assert p[1] * (1 - p[1]) ** 3 > p[0] * (1 - p[0]) ** 2  # (the last step above, checked)


def test_ties_go_to_the_lowest_index_and_pools_and_caps_bound_it():
    # equal confidences: one draw each in index order, as the source's np.argmax
    assert _drawn([5, 5, 5], [0.5, 0.5, 0.5], 5) == [2, 2, 1]
    # p = 1: marginal 1, then 0, a tie with p = 0's 0 that the lower index wins; p = 0 draws once q0's pool is used
    assert _drawn([4, 4], [1.0, 0.0], 4) == [3, 1]
    assert _drawn([4, 4], [1.0, 0.0], 7) == [4, 3]
    # a query's pool or cap bounds its share; the rest goes on to the others
    assert _drawn([2, 10], [0.9, 0.1], 8) == [2, 6]
    assert _drawn([10, 10], [0.9, 0.1], 9, max_samples=3) == [3, 3]
    # a budget below one draw each: phase 1 in rank order, nothing more
    assert _drawn([3, 3, 3], [0.9, 0.9, 0.9], 2) == [1, 1, 0]


def test_tokens_split_the_tokens_left_in_proportion():
    # phase 1 spends 2 + 2 tokens (mean 2 per draw); 12 left = 6 draws: tau 1, p = 0.5 and 0.5 -> 3 each, allowances
    # of 6 tokens = 3 more draws of 2 tokens each
    assert _drawn([8, 8], [0.5, 0.5], 16, unit="tokens", tok=[2] * 16) == [4, 4]
    # a p = 1 query gets one draw: allowance 12 * 1 / 6 = 2 tokens; the other 12 * 5 / 6 = 10
    assert _drawn([8, 8], [1.0, 0.5], 16, unit="tokens", tok=[2] * 16) == [2, 6]


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_uab_equals_the_reference(unit, data):
    """Engine (a heap) and reference (a plain scan) on the same permutations: side signals with ties, 0 and 1."""
    pool = data.draw(pools(max_size=14))
    total = int(pool[0][-1])
    side = np.array(data.draw(st.lists(st.sampled_from(SIDES), min_size=total, max_size=total)))
    cfg = RunConfig("uab", unit=unit, max_samples=data.draw(st.integers(0, 12)),
                    uab_tau=data.draw(st.sampled_from([0.2, 0.5, 1.0, 3.0])))
    hi = total + 3 if unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)), side=side)


class _SideSource(PoolSource):
    """Answers relabelled (only their equality may matter); the side signal kept."""

    def response(self, i, k):
        r = super().response(i, k)
        return type(r)(r.correct, r.score, None if r.answer is None else f"a{3 * r.answer + 1}", r.n_tokens,
                       side=r.side)


class _OneAtATime(_SideSource):
    ready = None


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_equals_replay(unit, data):
    """A live run decides as the replay of the same pool on the same permutation (phase 2 waits for phase 1's
    draws, then draws its allocations as they come)."""
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools(max_size=14))
    side = np.array(data.draw(st.lists(st.sampled_from(SIDES), min_size=int(off[-1]), max_size=int(off[-1]))))
    cfg = RunConfig("uab", unit=unit, max_samples=data.draw(st.integers(0, 10)),
                    uab_tau=data.draw(st.sampled_from([0.2, 1.0])))
    budget = data.draw(st.integers(0, (int(off[-1]) if unit == "samples" else int(tok.sum())) + 3))
    source = data.draw(st.sampled_from([_SideSource, _OneAtATime]))(off, correct, score, ans, tok, perm, side=side)
    live = run_live(source, np.diff(off), rank, budget_total=budget, config=cfg)
    _assert_same(live, run_once(*pool, cfg, budget, side=side), (cfg, budget))


def test_uab_needs_a_side_signal():
    from ttc.replay.engine import replay

    off = np.array([0, 2, 4])
    pool = Pool.from_arrays(off, correct=np.array([1, 0, 0, 1], np.int8), score=np.linspace(0, 1, 4))
    with pytest.raises(PoolError, match="--side"):
        replay(pool, [RunConfig("uab")], [3], range(1))
    pool.side = np.array([0.9, 0.1, 0.2, 0.3])
    replay(pool, [RunConfig("uab")], [3], range(1))


def test_uab_tau_is_checked():
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="--uab-tau"):
            RunConfig("uab", uab_tau=bad)


def test_ttc_run_needs_a_side_column_for_uab():
    """Live, a uab run without --side would read 0.5 for every response (no signal) without a word: refused."""
    from types import SimpleNamespace

    from ttc.harvest.run.request import RunError, check_inputs

    with pytest.raises(RunError, match="--side"):
        check_inputs(SimpleNamespace(prior=None, side=None), RunConfig("uab"))
    check_inputs(SimpleNamespace(prior=None, side="score_mean_logprob"), RunConfig("uab"))
