"""The numba engine against the plain-Python reference (replay/reference.py): identical outcomes on the same
permutations, over random ragged pools with ties, invalid answers, tiny and exhausted pools."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import run_grid, run_once
from ttc.replay.kernel import F_ANSWERED, F_COVERED, F_EXHAUSTED, F_SEL
from ttc.replay.policies import POLICIES, RunConfig
from ttc.replay.pool import Pool
from ttc.replay.reference import run_reference
from ttc.replay.rng import permutation, query_order
from ttc.replay.tables import make_tables

SCORES = [0.0, 0.25, 0.5, 0.75, 0.9, 1.0]


def gt_or_graded(draw, correct):
    """The score of pools(): the ground truth itself, or graded scores with ties."""
    if draw(st.booleans()):
        return correct.astype(float)
    return np.array(draw(st.lists(st.sampled_from(SCORES), min_size=len(correct), max_size=len(correct))))


@st.composite
def pools(draw, max_size=12, scores=gt_or_graded):
    """(off, correct, score, ans, tok, perm, rank) of a random ragged pool: up to 8 queries of 1..max_size responses,
    invalid answers, ties; scores(draw, correct) draws the score column."""
    n = draw(st.integers(1, 8))
    sizes = draw(st.lists(st.integers(1, max_size), min_size=n, max_size=n))
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    correct = np.array(draw(st.lists(st.integers(0, 1), min_size=total, max_size=total)), np.int8)
    score = scores(draw, correct)
    ans, perm = [], []
    for i, m in enumerate(sizes):
        ans += draw(st.lists(st.integers(-1, min(m - 1, 3)), min_size=m, max_size=m))
        perm += list(off[i] + np.array(draw(st.permutations(range(m)))))
    tok = np.array(draw(st.lists(st.integers(0, 6), min_size=total, max_size=total)), np.int64)
    rank = np.array(draw(st.permutations(range(n))), np.int64)
    return off, correct, score, np.array(ans, np.int64), tok, np.array(perm, np.int64), rank


LOW_VALUES = [4.0, 3.0, 2.5, 2.0, 1.5, 1.0]  # few values: thresholds land on them and between them


@st.composite
def record_lows(draw, tok):
    """deepconf-online's record lows of a pool whose responses have tok tokens: per response up to 3 increasing
    positions below its length and strictly decreasing values (none for a response without tokens), as the lists
    (the reference's form) and as (loff, lpos, lval) (the engine's)."""
    lists, loff, lpos, lval = [], [0], [], []
    for t in tok:
        k = draw(st.integers(0 if t == 0 else 1, min(3, int(t))))
        pos = sorted(draw(st.lists(st.integers(0, max(0, int(t) - 1)), min_size=k, max_size=k, unique=True)))
        val = sorted(draw(st.lists(st.sampled_from(LOW_VALUES), min_size=k, max_size=k, unique=True)), reverse=True)
        lists.append((pos, val))
        lpos += pos
        lval += val
        loff.append(len(lpos))
    return lists, (np.array(loff, np.int64), np.array(lpos, np.int64), np.array(lval, np.float64))


# the width policies (the depth ones have their twins and tests in tests/test_depth.py)
WIDTH = sorted(p for p in POLICIES if p not in ("parallel-probe", "cmc"))

@st.composite
def configs(draw, total, tokens_total, policy, unit):
    cfg = RunConfig(
        policy, unit=unit, K=draw(st.integers(1, 3)),
        eliminate=draw(st.sampled_from(["none", "threshold", "sc-share", "sc-beta", "esc", "ac-majority",
                                        "ac-entropy", "ac-dirichlet", "boinf"])),
        gamma=draw(st.sampled_from([0.5, 0.75, 1.0])), lam=draw(st.sampled_from([None, 0.5, 2.0])),
        eps=draw(st.sampled_from([0.0, 0.01, 0.3])), max_samples=draw(st.integers(0, 6)),
        rho=draw(st.sampled_from([0.25, 0.5, 0.75])), tau=draw(st.sampled_from([0.3, 0.5, 0.7])),
        m_min=draw(st.integers(1, 4)), share=draw(st.sampled_from([0.5, 0.6, 0.8, 1.0])),
        hmax=draw(st.sampled_from([0.0, 0.5, 0.75, 0.9])), warmup=draw(st.integers(1, 4)),
        percentile=draw(st.sampled_from([0.01, 0.05, 0.3, 0.7])), prior_strength=draw(st.sampled_from([0.5, 2.0, 8.0])),
        judge=draw(st.integers(2, 5)), bins=draw(st.integers(1, 5)), refresh=draw(st.integers(1, 4)),
        dirichlet_conf=draw(st.sampled_from([0.6, 0.8, 0.95])), horizon=draw(st.integers(0, 1)),
        bf=draw(st.sampled_from([2.0, 5.0, 10.0, 100.0])), bf_mc=draw(st.sampled_from([0, 50])),
        uab_tau=draw(st.sampled_from([0.2, 1.0])), pets_options=draw(st.sampled_from([2, 3, 16])))
    hi = total + 3 if unit == "samples" else tokens_total + 5
    return cfg, draw(st.integers(0, hi))


def config_kwargs(cfg):
    """A RunConfig as the keywords run_reference and run_live take (they are independent of RunConfig)."""
    return dict(policy=cfg.policy, unit=cfg.unit, K=cfg.K, elim=cfg.eliminate, gamma=cfg.gamma, lam=cfg.lam,
                eps=cfg.eps, max_samples=cfg.max_samples, rho=cfg.rho, tau=cfg.tau, m_min=cfg.m_min, share=cfg.share,
                hmax=cfg.hmax, warmup=cfg.warmup, percentile=cfg.percentile, prior_strength=cfg.prior_strength,
                judge=cfg.judge, bins=cfg.bins, refresh=cfg.refresh, dirichlet_conf=cfg.dirichlet_conf,
                horizon=cfg.horizon, bf=cfg.bf, bf_mc=cfg.bf_mc, uab_tau=cfg.uab_tau,
                pets_options=cfg.pets_options)


def _compare(data, cfg, budget, conf=0.95, prior=None, side=None, lows=None):
    off, correct, score, ans, tok, perm, rank = data
    ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=budget, conf=conf, prior=prior,
                        side=side, lows=None if lows is None else lows[0], **config_kwargs(cfg))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget, conf=conf, prior=prior, side=side,
                   lows=None if lows is None else lows[1])
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc"):
        assert list(np.asarray(got[key]).astype(int)) == [int(v) for v in ref[key]], (key, cfg, budget)
    for key in ("samples_used", "tokens_used", "exhausted"):
        assert got[key] == ref[key], (key, cfg, budget)
    # Budgets are never exceeded.
    spent = got["samples_used"] if cfg.unit == "samples" else got["tokens_used"]
    assert spent <= budget
    return got


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
    off, correct, score, ans, tok, _, _ = data.draw(pools())
    pool = Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok)
    lows, pool.lows = data.draw(record_lows(tok))
    total, tokens_total = int(off[-1]), int(tok.sum())
    picked = [data.draw(configs(total, tokens_total, data.draw(st.sampled_from(WIDTH)),
                                data.draw(st.sampled_from(["samples", "tokens"])))) for _ in range(4)]
    seeds = np.array(data.draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=4, unique=True)), np.int64)
    cfgs = [c for c, _ in picked]
    budgets = np.array([[b + data.draw(st.integers(0, 2)) for _ in seeds] for _, b in picked], np.int64)
    tables = make_tables(int(np.diff(off).max()), 0.95)
    _, out_i, pq_n, pq_flags = run_grid(pool, cfgs, budgets, seeds, tables, per_query=True)
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


def test_config_kwargs_carries_every_runconfig_field():
    """A RunConfig field config_kwargs forgot would reach the reference and run_live as its default, and the equality
    tests would compare the engine against another configuration without noticing (as share and hmax once did live)."""
    import dataclasses

    from ttc.replay.policies import DEPTH_FIELDS

    # (depth's fields are read by its own twins, replay/reference_depth.py, on the pool's depth view)
    want = {f.name for f in dataclasses.fields(RunConfig)} - set(DEPTH_FIELDS) - {"eliminate"} | {"elim"}
    assert set(config_kwargs(RunConfig("uniform"))) == want
