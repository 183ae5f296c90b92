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
