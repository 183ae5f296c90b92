"""Properties of the replay engine the spec promises, checked on synthetic and real pools."""
import numba
import numpy as np
import polars as pl
import pytest

from ttc.replay.engine import get_threads, replay, run_once, set_threads
from ttc.replay.exact import best_of_k, coverage_at_k
from ttc.replay.policies import REGISTRY, RunConfig

# every policy these pools can run (deepconf-online needs record lows: tests/test_equivalence.py,
# test_deepconf_online.py)
POLICIES = [p for p, e in REGISTRY.items() if not {"lows", "probes", "side"} & e.needs]  # (uab: tests/test_uab.py)
from ttc.replay.rng import permutation, query_order
from ttc.replay.summary import uniform_exact
from ttc.replay.synth import make_pool

ALL = [RunConfig(p) for p in POLICIES]


def test_grid_equals_single_runs_on_the_same_permutations():
    """The parallel grid regenerates each seed's permutation itself; it must match an explicit run."""
    pool = make_pool(n=30, size=12, ragged=True, seed=3)
    configs = ALL + [RunConfig("ucb", K=2, max_samples=5, gamma=0.8), RunConfig("entropy", eliminate="sc-beta"),
                     RunConfig("elimination", unit="tokens"), RunConfig("two-stage", unit="tokens", rho=0.25),
                     RunConfig("streaming", unit="tokens", eliminate="sc-share")]
    budgets = {"samples": [3, 7.5], "tokens": [600, 2000]}
    for unit in ("samples", "tokens"):
        cfgs = [c for c in configs if c.kernel_unit == (unit == "tokens")]
        df, pq = replay(pool, cfgs, budgets[unit], range(4), per_query=True)
        for c in cfgs:
            for b in budgets[unit]:
                for seed in range(4):
                    perm = permutation(pool.off, pool.qkeys, seed)
                    rank, _ = query_order(pool.qkeys, seed)
                    got = run_once(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, c,
                                   int(round(b * pool.n_queries)))
                    sel = pq.filter((pl.col("config") == c.label()) & (pl.col("budget") == b)
                                    & (pl.col("seed") == seed))
                    assert sel["n_drawn"].to_list() == got["n_drawn"].tolist()
                    assert sel["exhausted"].to_list() == got["exhausted_q"].tolist()
                    row = df.filter((pl.col("config") == c.label()) & (pl.col("budget") == b)
                                    & (pl.col("seed") == seed)).row(0, named=True)
                    assert row["samples_used"] == got["samples_used"]
                    assert row["coverage"] == got["covered"].mean()
                    assert row["accuracy_sc"] == got["sel_sc"].mean()


def test_uniform_replay_matches_exact_curves():
    """Mean over seeds of uniform's replayed coverage and best-of-k accuracy agree with the exact
    estimators within 4 standard errors, at integer and fractional budgets."""
    pool = make_pool(n=80, size=32, seed=1)
    cov, bon = coverage_at_k(pool), best_of_k(pool)
    budgets = [1, 2, 3.5, 8, 16]
    df, _ = replay(pool, [RunConfig("uniform")], budgets, range(400))
    for b in budgets:
        d = df.filter(pl.col("budget") == b)
        for col, curve in (("coverage", cov), ("accuracy_bon", bon)):
            x = d[col].to_numpy()
            se = x.std(ddof=1) / np.sqrt(len(x))
            assert abs(x.mean() - uniform_exact(curve, b)) < 4 * se + 1e-12, (col, b)


@pytest.mark.parametrize("K,max_samples", [(1, 0), (3, 0), (1, 5), (2, 7)])
def test_ucb_and_gap_reduce_to_round_robin_under_ground_truth(K, max_samples):
    pool = make_pool(n=50, size=16, ragged=True, scores="gt", seed=2)
    cfgs = [RunConfig(p, K=K, max_samples=max_samples) for p in ("elimination", "ucb", "gap")]
    _, pq = replay(pool, cfgs, [2, 5, 11], range(10), per_query=True)
    base = pq.filter(pl.col("config") == cfgs[0].label())["n_drawn"].to_list()
    assert sum(base) > 0
    for c in cfgs[1:]:
        assert pq.filter(pl.col("config") == c.label())["n_drawn"].to_list() == base, c.label()


@pytest.mark.parametrize("unit,budgets", [("samples", [1, 2, 4, 9]), ("tokens", [200, 700, 2500])])
def test_oracle_is_never_beaten_on_the_same_permutations(unit, budgets):
    pool = make_pool(n=60, size=20, ragged=True, seed=4)
    cfgs = [RunConfig(p, unit=unit) for p in POLICIES] + [
        RunConfig("ucb", unit=unit, gamma=0.7, K=2), RunConfig("entropy", unit=unit, eliminate="sc-share"),
        RunConfig("two-stage", unit=unit, rho=0.25)]
    df, _ = replay(pool, cfgs, budgets, range(20))
    oracle = df.filter(pl.col("policy") == "oracle").select("budget", "seed", oracle="coverage")
    joined = df.join(oracle, on=["budget", "seed"])
    assert (joined["coverage"] <= joined["oracle"]).all()
    # and it is strictly better than uniform somewhere (the comparison is not vacuous)
    assert (joined.filter(pl.col("policy") == "uniform")["coverage"] < joined.filter(
        pl.col("policy") == "uniform")["oracle"]).any()


def test_budgets_are_never_exceeded_and_exhaustion_is_counted():
    pool = make_pool(n=40, size=10, ragged=True, seed=5)
    cfgs = ([RunConfig(p) for p in POLICIES] + [RunConfig(p, unit="tokens") for p in POLICIES]
            + [RunConfig(p, unit="token-matched") for p in POLICIES])
    df, _ = replay(pool, cfgs, [1, 4, 30], range(8))
    samples = df.filter(pl.col("unit") == "samples")
    assert (samples["samples_used"] <= samples["budget_total"]).all()
    tokens = df.filter(pl.col("unit") != "samples")
    assert (tokens["tokens_used"] <= tokens["budget_total"]).all()
    # budget 30 per query exceeds every pool (<= 10): uniform exhausts every query and spends the whole pool
    u = df.filter((pl.col("policy") == "uniform") & (pl.col("budget") == 30) & (pl.col("unit") == "samples"))
    assert (u["exhausted"] == pool.n_queries).all()
    assert (u["samples_used"] == pool.off[-1]).all()
    # token-matched runs spend no more tokens than uniform at the same sample budget and seed
    uni = df.filter((pl.col("policy") == "uniform") & (pl.col("unit") == "samples")).select(
        "budget", "seed", uni_tokens="tokens_used")
    tm = df.filter(pl.col("unit") == "token-matched").join(uni, on=["budget", "seed"])
    assert (tm["budget_total"] == tm["uni_tokens"]).all()
    assert (tm["tokens_used"] <= tm["uni_tokens"]).all()


def test_results_do_not_depend_on_thread_count():
    pool = make_pool(n=70, size=24, ragged=True, seed=6)
    cfgs = ALL + [RunConfig("entropy", eliminate="sc-beta", K=2), RunConfig("streaming", unit="tokens")]
    try:
        set_threads(1)
        one, pq1 = replay(pool, cfgs, [2, 6], range(12), per_query=True)
        set_threads(None)
        assert get_threads() > 1 or numba.config.NUMBA_NUM_THREADS == 1
        many, pqm = replay(pool, cfgs, [2, 6], range(12), per_query=True)
    finally:
        set_threads(None)
    assert one.equals(many)
    assert pq1.equals(pqm)


def test_common_random_numbers_and_seed_effects():
    """Same seed: same permutation for every policy and budget (uniform at budget 1 draws exactly the first
    element of each permutation); different seeds differ."""
    pool = make_pool(n=40, size=12, seed=7)
    df, pq = replay(pool, [RunConfig("uniform"), RunConfig("elimination")], [1], range(3), per_query=True)
    for seed in range(3):
        perm = permutation(pool.off, pool.qkeys, seed)
        first_correct = pool.correct[perm[pool.off[:-1]]]
        for cfg in ("uniform", "elimination"):
            row = df.filter((pl.col("config") == cfg) & (pl.col("seed") == seed))
            assert row["coverage"].item() == first_correct.mean()
    covs = df.filter(pl.col("config") == "uniform")["coverage"].to_list()
    assert len(set(covs)) > 1


def test_adaptive_beats_uniform_on_a_pool_with_easy_and_hard_queries():
    """The method's central claim, as a statistical test: elimination's mean coverage exceeds uniform's by
    more than 4 standard errors of the paired difference at a small budget."""
    pool = make_pool(n=200, size=32, scores="gt", seed=8)
    df, _ = replay(pool, [RunConfig("uniform"), RunConfig("elimination")], [4], range(50))
    u = df.filter(pl.col("policy") == "uniform").sort("seed")["coverage"].to_numpy()
    e = df.filter(pl.col("policy") == "elimination").sort("seed")["coverage"].to_numpy()
    d = e - u
    assert d.mean() > 4 * d.std(ddof=1) / np.sqrt(len(d))
