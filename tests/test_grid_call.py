"""The grid call's machinery (engine.run_grid's fixed cost, docs/performance.md, "The grid call's fixed cost"): the pool
arrays kept on a pool from call to call, the configurations' records kept on them, and the worker threads kept from
call to call. Each keeps the outcomes of a grid built from scratch: a changed pool or configuration is never served
from what was kept for another, a chunk's error reaches the caller after every chunk has stopped, and a forked child
gets workers of its own."""
import dataclasses
import os
import select
import threading

import numpy as np
import pytest

from ttc.replay import engine
from ttc.replay.policies import RunConfig
from ttc.replay.pool import Pool
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

CONFIGS = [RunConfig("elimination", eliminate="sc-beta"), RunConfig("ucb", lam=2.0), RunConfig("uniform"),
           RunConfig("elimination", eliminate="mmc")]


def _grid(pool, configs=CONFIGS, seeds=6, budget=5, tables=None, threads=None):
    """run_grid's outputs for configs at budget per query on seeds 0.. (threads: the grid's, then back to all)."""
    tables = tables if tables is not None else make_tables(int(pool.sizes.max()), 0.95, sc_beta=True)
    bt = np.full((len(configs), seeds), budget * pool.n_queries, np.int64)
    engine.set_threads(threads)
    try:
        return engine.run_grid(pool, configs, bt, np.arange(seeds), tables)
    finally:
        engine.set_threads(None)


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _fresh(pool):
    """The same pool as a new object with new arrays: nothing kept from an earlier call."""
    return dataclasses.replace(pool, off=pool.off.copy(), correct=pool.correct.copy(), score=pool.score.copy(),
                               ans=pool.ans.copy(), tok=pool.tok.copy())


def test_the_pool_arrays_are_kept_while_the_pool_and_tables_are_the_same():
    pool = make_pool(n=30, size=12, seed=1)
    tables = make_tables(12, 0.95, sc_beta=True)
    first = engine.grid_arrays(pool, tables)
    assert engine.grid_arrays(pool, tables) is first
    assert engine.grid_arrays(pool, tuple(t.copy() for t in tables)) is first  # equal tables, new objects
    other = make_tables(12, 0.8, sc_beta=True)  # another confidence: another sc-beta table
    assert not np.array_equal(other[2], tables[2])
    assert engine.grid_arrays(pool, other) is not first
    assert engine.grid_arrays(pool, other).min_a.tolist() == other[2].tolist()


@pytest.mark.parametrize("field", ["off", "correct", "score", "ans", "tok", "prior", "side"])
def test_a_pool_given_a_new_array_is_replayed_as_a_new_pool(field):
    """Each array the pool arrays are built from, replaced after a grid call on the pool (the cached arrays in
    place): the next call's outcomes are those of a pool built with it, and differ from the first call's (so the
    check can fail)."""
    rng = np.random.default_rng(5)
    pool = make_pool(n=40, size=10, seed=2, tokens=True)
    pool.prior = rng.random(pool.n_queries)
    pool.side = rng.random(len(pool.score))
    configs = {"prior": [RunConfig("marginal-gain")], "side": [RunConfig("side-eb")]}.get(field, CONFIGS)
    unit = field == "tok"
    if unit:
        configs = [RunConfig("elimination", eliminate="sc-beta", unit="tokens")]
    budget = 50 if unit else 4
    tables = make_tables(20, 0.95, sc_beta=True)  # (the same whatever the pool's sizes: only the field differs)
    before = _grid(pool, configs, budget=budget, tables=tables)
    if field == "off":  # the same responses in other queries: 40 of 10 -> 20 of 20
        new = np.arange(0, len(pool.score) + 1, 20, dtype=np.int64)
        pool.query_ids = pool.query_ids[:20]
        pool.__dict__.pop("_qkeys")
        pool.prior = pool.prior[:20]
    elif field == "correct":
        new = (1 - pool.correct).astype(np.int8)
    elif field == "ans":
        new = np.where(pool.ans >= 0, (pool.ans + 1) % 3, -1).astype(np.int64)
    elif field == "tok":
        new = pool.tok[::-1].copy()
    else:
        new = rng.random(len(getattr(pool, field)))
    setattr(pool, field, new)
    after = _grid(pool, configs, budget=budget, tables=tables)
    assert _same(after, _grid(_fresh(pool), configs, budget=budget, tables=tables))
    assert not _same(after, before)


def test_a_replaced_pool_keeps_nothing_of_its_original():
    """dataclasses.replace (with_invalid_votes, a depth view) makes a new pool: its own arrays, its own outcomes."""
    pool = make_pool(n=40, size=10, seed=3)
    pool.ans[::3] = -1  # (before any call: an invalid answer every third response)
    _grid(pool)
    votes = pool.with_invalid_votes()
    assert "_grid_arrays" not in votes.__dict__
    assert _same(_grid(votes), _grid(_fresh(votes)))
    assert not _same(_grid(votes), _grid(pool))


def test_the_records_are_the_configurations_own():
    """config_records: byte for byte record()'s, as a new writable array of CONFIG each call (the kernel's one
    signature), kept per configuration (equal configurations give equal records)."""
    configs = CONFIGS + [RunConfig("elimination", eliminate="mmc", mmc_delta=0.01), RunConfig("gap", gamma=0.3)]
    expect = np.concatenate([c.record() for c in configs])
    for _ in range(2):
        got = engine.config_records(configs)
        assert got.dtype == expect.dtype and got.tobytes() == expect.tobytes()
        assert got.flags.writeable and got.flags.c_contiguous and got.flags.aligned
        got["K"] = 99  # a new array each call: the next one is unchanged
    assert engine.config_records([RunConfig("gap", gamma=0.3)]).tobytes() == configs[-1].record().tobytes()
    assert len(engine.config_records([])) == 0


def test_two_threads_and_one_give_the_same_outcomes_call_after_call():
    pool = make_pool(n=50, size=16, seed=4)
    one = _grid(pool, seeds=9, threads=1)
    for _ in range(3):
        assert _same(_grid(pool, seeds=9, threads=2), one)
    assert _same(_grid(_fresh(pool), seeds=9, threads=2), one)


def test_grid_calls_from_several_threads_at_once_share_the_workers():
    pool = make_pool(n=50, size=16, seed=6)
    expect = [_grid(pool, budget=b, threads=2) for b in (2, 5, 9)]
    engine.set_threads(2)
    got, errors = {}, []

    def call(b, k):
        try:
            tables = make_tables(16, 0.95, sc_beta=True)
            bt = np.full((len(CONFIGS), 6), b * pool.n_queries, np.int64)
            got[k] = engine.run_grid(pool, CONFIGS, bt, np.arange(6), tables)
        except Exception as e:  # reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=call, args=(b, k)) for k, b in enumerate((2, 5, 9) * 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        engine.set_threads(None)
    assert not errors
    assert all(_same(got[k], expect[k % 3]) for k in range(9))


def test_run_chunks_returns_after_every_chunk_and_raises_the_error():
    """A chunk that fails (here the calling thread's) does not return control while another still runs."""
    finished = []
    gate = threading.Event()

    def run(t):
        if t == 0:
            raise RuntimeError("chunk 0")
        gate.wait(0.3)
        finished.append(t)

    with pytest.raises(RuntimeError, match="chunk 0"):
        engine.run_chunks(run, 3)
    assert sorted(finished) == [1, 2]
    ticks = []
    done = np.zeros(2, np.int64)

    def count(t):
        done[t] += 5

    engine.run_chunks(count, 2, tick=ticks.append, done=done)
    assert sum(ticks) == 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_runs_grids_on_workers_of_its_own():
    """The parent's workers do not exist in a forked child: a grid there on two threads would wait for them forever
    if the child used the parent's executor."""
    pool = make_pool(n=30, size=12, seed=7)
    expect = _grid(pool, threads=2)  # the parent's workers exist
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its grid's sums, or nothing
        try:
            out = _grid(pool, threads=2)
            os.write(w, b"%d %d" % (int(out[1].sum()), int(out[0].sum() * 1e6)))
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60)
        got = os.read(r, 100) if ready else b""
    finally:
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
    assert got == b"%d %d" % (int(expect[1].sum()), int(expect[0].sum() * 1e6))


def test_pool_from_arrays_keeps_its_arrays_apart():
    """Two pools of equal arrays are two pools: the arrays kept for one are not served to the other."""
    off = np.array([0, 3, 5])
    a = Pool.from_arrays(off, correct=np.array([1, 0, 0, 1, 1]), ans=np.array([0, 1, 0, -1, 0]))
    b = Pool.from_arrays(off, correct=np.array([0, 1, 1, 0, 0]), ans=np.array([0, 1, 0, -1, 0]))
    tables = make_tables(3, 0.95, sc_beta=False)
    assert engine.grid_arrays(a, tables).correct.tolist() == [1, 0, 0, 1, 1]
    assert engine.grid_arrays(b, tables).correct.tolist() == [0, 1, 1, 0, 0]


@pytest.mark.parametrize("policy", ["uniform", "elimination", "two-stage", "optscale", "dsc"])
def test_round_robin_in_tokens_runs_paid_blocks_with_the_same_outcomes(policy):
    """The grid knows the pool's longest response (engine.grid_maxtok) and runs round-robin's rounds in tokens that
    the budget pays for even at that length as one block per query, as in samples: each (budget, seed) equals the
    reference's run, at budgets from one paid round to many (here a round costs at most 60 x 900 tokens) and below
    one, and a pool whose longest response is far longer than the others (few paid rounds)."""
    from ttc.replay.reference import run_reference
    from ttc.replay.rng import permutation, query_order

    from support.equivalence import config_kwargs

    for seed, spike in ((8, False), (9, True)):
        pool = make_pool(n=60, size=16, seed=seed, ragged=True)
        if spike:
            pool.tok = pool.tok.copy()
            pool.tok[7] = 50 * int(pool.tok.max())
        maxtok = engine.grid_maxtok(pool)
        assert maxtok == int(pool.tok.max()) > 0
        kw = {"eliminate": "sc-beta"} if policy in ("elimination", "two-stage", "dsc") else {}
        configs = [RunConfig(policy, unit="tokens", **kw)]
        tables = make_tables(int(pool.sizes.max()), 0.95, sc_beta=True)
        per_round = pool.n_queries * maxtok
        for total in (per_round // 2, per_round, 3 * per_round + 17, int(pool.tok.sum()) + 1):
            bt = np.full((1, 4), total, np.int64)
            _, out_i, pq_n, _ = engine.run_grid(pool, configs, bt, np.arange(4), tables, per_query=True)
            for s in range(4):
                perm = permutation(pool.off, pool.qkeys, s)
                rank, _ = query_order(pool.qkeys, s)
                ref = run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank,
                                    budget_total=total, **config_kwargs(configs[0]))
                assert pq_n[0, s].tolist() == [int(v) for v in ref["n_drawn"]], (policy, total, s)
                assert out_i[0, s, :3].tolist() == [ref["samples_used"], ref["tokens_used"], ref["exhausted"]]
