"""The kernel's small helpers against plain-Python definitions (exact equality): the bucket-sorted query
order, the quickselect behind two-stage's largest remainder, and the answer-slot layout."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ttc.replay.kernel import _RANK_SALT, answer_offsets, fill_query_order, kth_smallest, mix64, seed_stream


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**40), dup=st.integers(0, 3))
def test_query_order_is_the_stable_sort_of_the_hashes(n, seed, dup):
    """Any n (bucket counts a power of two or not) and repeated query keys (equal hashes: ties by index)."""
    rng = np.random.default_rng(seed)
    qkeys = rng.integers(0, 2**63, n).astype(np.uint64)
    if dup:
        qkeys = qkeys[rng.integers(0, max(1, n // (dup + 1)), n)]
    keys = [int(mix64(seed_stream(np.int64(seed), q) ^ _RANK_SALT)) for q in qkeys]
    expect = sorted(range(n), key=lambda i: (keys[i], i))
    rank, order = np.empty(n, np.int64), np.empty(n, np.int64)
    fill_query_order(qkeys, np.int64(seed), rank, order)
    assert order.tolist() == expect
    assert [int(rank[i]) for i in expect] == list(range(n))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_kth_smallest_equals_sorting(data):
    vals = data.draw(st.lists(st.sampled_from([-1.0, -0.5, -0.25, -1e-12, 0.0, 0.3]) | st.floats(-1, 0),
                              min_size=1, max_size=80))
    k = data.draw(st.integers(0, len(vals) - 1))
    a = np.array(vals)
    assert kth_smallest(a, k) == sorted(vals)[k]
    assert a.tolist() == vals  # the input is left alone


def test_answer_offsets_give_each_query_one_slot_per_answer_id_plus_invalid():
    off = np.array([0, 3, 3, 5, 9], np.int64)
    ans = np.array([0, 2, -1, 0, 1, -1, -1, -1, -1], np.int64)
    # query 0: ids 0..2 -> 1 + 3 slots; query 1: empty -> 1; query 2: ids 0..1 -> 3; query 3: invalid only -> 1
    assert answer_offsets(off, ans).tolist() == [0, 4, 5, 8, 9]


def test_stable_argsort_equals_numpys_stable_sort():
    """Both of its paths (counting sort for a narrow key range, merge sort for a wide one), ties in index order."""
    from ttc.replay.kernel import stable_argsort

    rng = np.random.default_rng(3)
    for m in (0, 1, 2, 15, 16, 17, 33, 100, 1000):
        for hi in (1, 5, 10**6, 10**12):
            keys = rng.integers(0, hi, m + 3).astype(np.int64)
            got = stable_argsort(keys, m)
            assert got.tolist() == np.argsort(keys[:m], kind="stable").tolist(), (m, hi)


def test_a_grid_hands_its_permutations_back_as_the_identity():
    """run_grid keeps each thread's permutation from call to call (engine.take_identities) on the promise that every
    seed undoes its lazy Fisher-Yates steps (restore_identity): every policy, both units, a deepconf-online run, and
    two threads; a permutation left otherwise would silently change the next call's draws."""
    from ttc.replay import engine
    from ttc.replay.policies import POLICIES, RunConfig
    from ttc.replay.pool import Pool
    from ttc.replay.synth import make_pool
    from ttc.replay.tables import make_tables

    pool = make_pool(n=40, size=16, seed=3)
    tables = make_tables(16, 0.95, sc_beta=False)
    configs = [RunConfig(p, unit=u) for p in POLICIES if p not in ("deepconf-online", "parallel-probe", "cmc")
               for u in ("samples", "tokens")]
    assert len(configs) >= 24
    budgets = np.array([[b] * 6 for b in (40, 200, 640) for _ in configs], np.int64).reshape(3, len(configs), 6)
    for threads in (1, 2):
        engine.set_threads(threads)
        try:
            for bt in budgets:
                engine._free_perms.clear()
                first = engine.run_grid(pool, configs, bt, np.arange(6), tables)
                assert engine._free_perms and all((p == np.arange(len(pool.score))).all() for p in engine._free_perms)
                again = engine.run_grid(pool, configs, bt, np.arange(6), tables)  # with the permutations kept
                assert all((a == b).all() for a, b in zip(first, again, strict=True))
        finally:
            engine.set_threads(None)
    off = np.array([0, 3, 5])
    lows = Pool.from_arrays(off, correct=np.array([1, 0, 0, 1, 1], np.int8), score=np.linspace(0, 1, 5),
                            ans=np.array([0, 1, 0, -1, 0]), tok=np.arange(1, 6))
    lows.lows = (np.array([0, 1, 2, 2, 3, 4]), np.array([0, 1, 2, 3]), np.array([2.0, 1.0, 3.0, 1.5]))
    engine._free_perms.clear()
    engine.run_grid(lows, [RunConfig("deepconf-online", warmup=1)], np.full((1, 3), 4, np.int64), np.arange(3),
                    make_tables(3, 0.95, sc_beta=False))
    assert all((p == np.arange(5)).all() for p in engine._free_perms)


def test_pool_modes_equals_its_numpy_definition():
    """The consistency column's reference (engine.pool_modes, one jitted pass) against the numpy it replaced: per
    slot, a valid answer as frequent as the query's most frequent one; queries without responses or valid answers."""
    from ttc.replay.engine import pool_modes

    rng = np.random.default_rng(7)
    for _ in range(300):
        sizes = rng.integers(0, 7, int(rng.integers(1, 7)))
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        ans = rng.integers(-1, 4, int(off[-1]))
        aoff = answer_offsets(off, ans)
        n = len(off) - 1
        q = np.repeat(np.arange(n), np.diff(off))
        valid = ans >= 0
        slot = aoff[:-1][q[valid]] + 1 + ans[valid]
        cnt = np.bincount(slot, minlength=int(aoff[-1]))
        top = np.zeros(n, np.int64)
        np.maximum.at(top, q[valid], cnt[slot])
        expect = ((cnt > 0) & (cnt == top[np.repeat(np.arange(n), np.diff(aoff))])).astype(np.int8)
        assert pool_modes(off, aoff, ans).tolist() == expect.tolist()


def test_pack_responses_holds_each_response_or_refuses_the_pool():
    """The draws read kernel.RESP records (engine.pack_responses) in place of the four arrays: every field holds its
    value exactly, and a value outside a record's range leaves the records empty (the draws then read the arrays)
    rather than wrapped."""
    from ttc.replay.engine import pack_responses

    rng = np.random.default_rng(0)
    m = 500
    correct = (rng.random(m) < 0.4).astype(np.int8)
    score = rng.random(m)
    ans = rng.integers(-1, 1 << 20, m)
    tok = rng.integers(0, (1 << 30) - 1, m, endpoint=True)
    r = pack_responses(correct, score, ans, tok)
    assert len(r) == m
    assert (r["score"] == score).all() and (r["ans"] == ans).all()
    assert ((r["tc"] >> 1) == tok).all() and ((r["tc"] & 1) == correct).all()
    for bad in ({"tok": np.where(np.arange(m) == 7, 1 << 30, tok)}, {"tok": np.where(np.arange(m) == 7, -1, tok)},
                {"ans": np.where(np.arange(m) == 7, 1 << 31, ans)}, {"ans": np.where(np.arange(m) == 7, -2, ans)},
                {"correct": np.where(np.arange(m) == 7, 2, correct).astype(np.int8)}):
        args = {"correct": correct, "score": score, "ans": ans, "tok": tok, **bad}
        assert len(pack_responses(**args)) == 0, list(bad)
    assert len(pack_responses(correct[:0], score[:0], ans[:0], tok[:0])) == 0


def test_packed_records_and_the_arrays_give_the_same_runs(monkeypatch):
    """A grid's draws on a pool of at least PREFETCH_FROM responses read the packed records (pool_arrays' resp), a
    live run's and a smaller pool's the four arrays (no records): every policy, both units, per query too, a pool
    past PREFETCH_FROM (the records' prefetches) and a small one (records forced), the same outputs either way. The
    records are made once per pool (grid_arrays keeps them on it)."""
    from ttc.replay import engine
    from ttc.replay.kernel import PREFETCH_FROM, RESP
    from ttc.replay.policies import POLICIES, RunConfig
    from ttc.replay.synth import make_pool
    from ttc.replay.tables import make_tables

    configs = [RunConfig(p, unit=u) for p in POLICIES if p not in ("deepconf-online", "parallel-probe", "cmc")
               for u in ("samples", "tokens")]
    for n, size in ((40, 16), (1100, 64)):
        pool = make_pool(n=n, size=size, seed=4)
        tables = make_tables(size, 0.95, sc_beta=False)
        first = engine.grid_arrays(pool, tables).resp
        big = pool.off[-1] >= PREFETCH_FROM
        assert len(first) == (pool.off[-1] if big else 0)
        assert engine.grid_arrays(pool, tables).resp is first
        bt = np.array([[b * n] * 3 for b in (2, 6) for _ in configs], np.int64).reshape(2, len(configs), 3)
        bt[:, 1::2] *= 200  # the token units' budgets

        def grid(records, budgets, pool=pool, tables=tables):
            pool.__dict__.pop("_grid_arrays", None)  # (built anew under the patch)
            with monkeypatch.context() as mp:
                if records:
                    mp.setattr(engine, "PREFETCH_FROM", 0)
                else:
                    mp.setattr(engine, "pack_responses", lambda *a: np.zeros(0, RESP))
                assert (len(engine.grid_arrays(pool, tables).resp) > 0) == records
                return engine.run_grid(pool, configs, budgets, np.arange(3), tables, per_query=True)

        for budgets in bt:
            packed, arrays = grid(True, budgets), grid(False, budgets)
            assert all((a == b).all() for a, b in zip(packed, arrays, strict=True)), (n, budgets[0, 0])
    assert pool.off[-1] >= PREFETCH_FROM
