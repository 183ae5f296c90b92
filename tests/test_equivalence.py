"""The numba engine against the plain-Python reference (replay/reference.py): identical outcomes on the same
permutations, over random ragged pools with ties, invalid answers, tiny and exhausted pools."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import only_arg, run_grid
from ttc.replay.kernel import F_ANSWERED, F_COVERED, F_EXHAUSTED, F_SEL, PREFETCH_FROM
from ttc.replay.policies import DEPTH_POLICIES, POLICIES, RunConfig
from ttc.replay.pool import Pool
from ttc.replay.reference import run_reference
from ttc.replay.rng import permutation, query_order
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

from support.equivalence import _compare, config_kwargs, configs, pools, record_lows

# the width policies (the depth ones have their twins and tests in tests/test_depth.py)
WIDTH = sorted(p for p in POLICIES if p not in DEPTH_POLICIES)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@pytest.mark.parametrize("policy", WIDTH)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_engine_equals_reference(policy, unit, data):
    pool = data.draw(pools())
    total, tokens_total = int(pool[0][-1]), int(pool[4].sum())
    cfg, budget = data.draw(configs(total, tokens_total, policy, unit))
    _compare(pool, cfg, budget, lows=data.draw(record_lows(pool[4])) if policy == "deepconf-online" else None)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sc_beta_other_confidence(data):
    pool = data.draw(pools())
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "entropy", "streaming"])), eliminate="sc-beta")
    _compare(pool, cfg, int(pool[0][-1]), conf=data.draw(st.sampled_from([0.6, 0.8, 0.99])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_grid_equals_reference_over_configs_and_seeds(data):
    """The parallel grid generates each seed's permutations lazily, shares the steps among the seed's
    configurations (in grid order) and undoes them before the next seed; whatever mix of policies, units and
    budgets runs, each (configuration, seed) must equal the reference on that seed's explicit permutation."""
    _grid_equals_reference(data, lambda: data.draw(st.sampled_from(WIDTH)), 4, only=False)


@pytest.mark.parametrize("policy", WIDTH)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_one_policy_grid_equals_reference(policy, data):
    """A grid of one policy runs a kernel compiled for that policy alone (engine.only_arg: numba prunes the other
    policies' branches before typing); each (configuration, seed) must still equal the reference."""
    _grid_equals_reference(data, lambda: policy, 3, only=True)


def _grid_equals_reference(data, policy, k, only):
    """k configurations (policy(): each one's policy) on up to 4 seeds through run_grid, with only: the kernel
    of their one policy (only_arg), else the kernel every policy runs in; each against the reference."""
    off, correct, score, ans, tok, _, _ = data.draw(pools())
    pool = Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok)
    lows, pool.lows = data.draw(record_lows(tok))
    total, tokens_total = int(off[-1]), int(tok.sum())
    # (reading=True: every rule, deepconf-online's included: a grid with one that reads the drawn responses runs
    # its own kernel, `ttc replay --policy deepconf-online --eliminate esc`'s)
    picked = [data.draw(configs(total, tokens_total, policy(), data.draw(st.sampled_from(["samples", "tokens"])),
                                reading=True)) for _ in range(k)]
    seeds = np.array(data.draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=4, unique=True)), np.int64)
    cfgs = [c for c, _ in picked]
    budgets = np.array([[b + data.draw(st.integers(0, 2)) for _ in seeds] for _, b in picked], np.int64)
    tables = make_tables(int(np.diff(off).max()), 0.95)
    one = only_arg(cfgs) if only else ()
    assert bool(one) == (only and len({c.policy for c in cfgs}) == 1)  # (the test is vacuous otherwise)
    _, out_i, pq_n, pq_flags = run_grid(pool, cfgs, budgets, seeds, tables, per_query=True, only=one)
    for s, seed in enumerate(seeds):
        perm = permutation(pool.off, pool.qkeys, int(seed))
        rank, _ = query_order(pool.qkeys, int(seed))
        for c, cfg in enumerate(cfgs):
            ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=int(budgets[c, s]), lows=lows,
                                **config_kwargs(cfg))
            where = (cfg, int(budgets[c, s]), int(seed))
            assert pq_n[c, s].tolist() == [int(v) for v in ref["n_drawn"]], where
            flags = pq_flags[c, s]
            for bit, key in ((F_ANSWERED, "answered"), (F_COVERED, "covered"), (F_EXHAUSTED, "exhausted_q"),
                             (F_SEL[0], "sel_bon"), (F_SEL[1], "sel_weighted"), (F_SEL[2], "sel_sc")):
                assert ((flags & bit) > 0).tolist() == [bool(v) for v in ref[key]], (key, where)
            assert out_i[c, s, :3].tolist() == [ref["samples_used"], ref["tokens_used"], ref["exhausted"]], where


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_marginal_gain_with_a_prior_equals_reference(unit, data):
    """marginal-gain with per-query predictions (--prior): ties between predictions, 0 and 1 included."""
    pool = data.draw(pools())
    n, total, tokens_total = len(pool[0]) - 1, int(pool[0][-1]), int(pool[4].sum())
    prior = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.5, 0.9, 1.0]), min_size=n, max_size=n)))
    cfg, budget = data.draw(configs(total, tokens_total, "marginal-gain", unit))
    _compare(pool, cfg, budget, prior=prior)


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_side_eb_with_a_side_signal_equals_reference(unit, data):
    """side-eb with a per-response side signal (--side): bins at their edges (0, 1, 0.5) and ties included."""
    pool = data.draw(pools())
    total, tokens_total = int(pool[0][-1]), int(pool[4].sum())
    side = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]), min_size=total,
                                       max_size=total)))
    cfg, budget = data.draw(configs(total, tokens_total, "side-eb", unit))
    _compare(pool, cfg, budget, side=side)


def test_the_reference_takes_every_runconfig_field_with_its_default():
    """config_kwargs hands run_reference every RunConfig field but the depth ones (read by their own twins,
    replay/reference_depth.py, on the pool's depth view): the reference must take each under that name, with the
    field's default, or the equality tests would compare the engine against another configuration unnoticed (as
    share and hmax once did live)."""
    import inspect

    from ttc.replay.policies import DEPTH_FIELDS, VIEW_FIELDS

    want = {f.name for f in dataclasses.fields(RunConfig)} - set(DEPTH_FIELDS + VIEW_FIELDS) - {"eliminate"} | {"elim"}
    kw = config_kwargs(RunConfig("uniform"))
    assert set(kw) == want
    takes = inspect.signature(run_reference).parameters
    assert {k: takes[k].default for k in kw if k != "policy"} == {k: v for k, v in kw.items() if k != "policy"}


@pytest.mark.parametrize("policy", ["ucb", "gap", "entropy", "marginal-gain", "side-eb", "uab", "streaming", "oracle",
                                    "optscale", "dsc", "elimination", "two-stage"])
def test_policies_past_the_prefetch_size_equal_reference(policy):
    """A pool of more than PREFETCH_FROM responses, where run_one prefetches the next decision's state, and for the
    index policies a heap of 1,030 queries (six levels of the 4-ary heap, families cut by its end): the small random
    pools above reach neither. Both units, two seeds of the lazy grid against the reference on each seed's
    permutation."""
    pool = make_pool(n=1030, size=64, seed=3)
    assert pool.off[-1] >= PREFETCH_FROM
    tables = make_tables(64, 0.95)
    cfgs = [RunConfig(policy, unit="samples"), RunConfig(policy, unit="tokens", eliminate="none")]
    seeds = np.array([5, 11], np.int64)
    budgets = np.array([[3 * 1030, 2 * 1030], [3 * 1030 * 200, 2 * 1030 * 200]], np.int64)
    _, out_i, pq_n, _ = run_grid(pool, cfgs, budgets, seeds, tables, per_query=True)
    for s, seed in enumerate(seeds):
        perm = permutation(pool.off, pool.qkeys, int(seed))
        rank, _ = query_order(pool.qkeys, int(seed))
        for c, cfg in enumerate(cfgs):
            ref = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank,
                                budget_total=int(budgets[c, s]), **config_kwargs(cfg))
            assert pq_n[c, s].tolist() == [int(v) for v in ref["n_drawn"]], (cfg, int(seed))
            assert out_i[c, s, :3].tolist() == [ref["samples_used"], ref["tokens_used"], ref["exhausted"]]
