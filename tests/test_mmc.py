"""The martingale majority certificate (mmc, arXiv 2510.17472) as an elimination rule: its two e-processes against
the reference vote by vote, hand-computed stops, and the engine against the reference on random pools under every
policy that takes a rule (both units), and live against replay. benchmarks/mmc_source.py runs the source's own
decider beside the engine."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import pool_arrays, reading_flag, run_once, scratch
from ttc.replay.kernel import LOG2, MM_ORDER, MMC_LOG_SLACK, mmc_log_e, run_one_any
from ttc.replay.live import run_live
from ttc.replay.policies import RunConfig
from ttc.replay.reference import mmc_state as ref_state
from ttc.replay.reference import run_reference
from ttc.replay.tables import make_tables

from support.equivalence import config_kwargs, pools
from support.live_sources import OneAtATime, Relabelled, _assert_same


def _state(votes, m_top=3, labels="drawn"):
    """The engine's two e-processes after these votes, as run_one's mmc check leaves them (pair log e, its updates,
    other log e, its updates, leader unchanged by the last vote): one query drawn in this order, checked after every
    draw, at a delta no run of 40 votes can reach. With labels drawn the check is skipped while one answer has been
    drawn, so the state is read only with two answers or more (None otherwise); with labels pool (the votes are the
    query's pool) it is read after any vote."""
    m = len(votes)
    ans = np.array(votes, np.int64)
    off = np.array([0, m], np.int64)
    zeros = np.zeros(m, np.int8)
    cfg = RunConfig("elimination", eliminate="mmc", mmc_delta=1e-300, mmc_m=m_top, mmc_labels=labels)
    P = pool_arrays(off, zeros, zeros.astype(float), ans, np.ones(m, np.int64), make_tables(max(m, 1), 0.95))
    W = scratch(1, int(P.aoff[-1]), np.arange(m), np.zeros(1, np.int64), 0)
    record = cfg.record()
    run_one_any(P, W, record[0], np.int64(m), np.int64(0), reading_flag(record), None, None)
    r = W.qs[0]
    assert not r["elim"]
    if labels == "drawn" and len({a for a in votes if a >= 0}) < 2 or m == 0:
        assert r["mm_p"] == 0  # never checked
        return None
    assert r["mm_p"] == m
    u1, u2 = int(r["mm_s1"] + r["mm_f1"]), int(r["mm_s2"] + r["mm_f2"])
    l1 = mmc_log_e(r["mm_s1"], r["mm_f1"], r["mm_q1"]) if u1 > 0 else 0.0
    l2 = mmc_log_e(r["mm_s2"], r["mm_f2"], r["mm_q2"]) if u2 > 0 else 0.0
    return l1, u1, l2, u2, bool(r["mm_last"] >= 0 and W.mm[1, MM_ORDER] == r["mm_last"])


def _drawn(answers, delta=0.05, m_top=3, cap=0, **options):
    m = len(answers)
    correct = np.zeros(m, np.int8)
    got = run_once(np.array([0, m]), correct, correct.astype(float), np.array(answers, np.int64),
                   np.ones(m, np.int64), np.arange(m), np.zeros(1, np.int64),
                   RunConfig("elimination", eliminate="mmc", mmc_delta=delta, mmc_m=m_top, max_samples=cap,
                             **options), m)
    return int(got["n_drawn"][0]), bool(got["answered"][0])


# A, then B, then A nine times: the pair e-process (A vs B) bets q = (s + 1/2) / (s + 1) from its third vote on,
# the other one (A vs answers outside the top 3) saw B as a failure at the second vote
SEQ = [0, 1] + [0] * 9


def test_e_processes_by_hand():
    """After A B A A A A A A (8 votes) the pair process has 6 successes at q = 5.5 / 6: log(2^6 (11 / 12)^6) =
    3.637; the other has 6 successes and 1 failure at q = 5.5 / 7. After ten votes the other is log(2^9 (5 / 6)^8
    (1 / 6)) = 2.98797, just under log 20 = 2.99573; after eleven log(2^10 0.85^9 0.15) = 3.5717."""
    l1, u1, l2, u2, same = _state(SEQ[:8])
    assert u1 == 6 and u2 == 7 and same
    assert abs(l1 - 6 * math.log(2 * 11 / 12)) < 1e-12
    q = 5.5 / 7
    assert abs(l2 - (7 * math.log(2) + 6 * math.log(q) + math.log(1 - q))) < 1e-12
    l1, u1, l2, u2, _ = _state(SEQ[:10])
    assert abs(l2 - math.log(2 ** 9 * (5 / 6) ** 8 / 6)) < 1e-12 and l2 < math.log(20)
    l1, u1, l2, u2, _ = _state(SEQ[:11])
    assert abs(l2 - math.log(2 ** 10 * 0.85 ** 9 * 0.15)) < 1e-12 and l2 > math.log(20)


def test_stops_by_hand():
    """delta 0.05 stops that sequence at its eleventh draw (log 20 = 2.9957); delta 0.0505 (log 19.8 = 2.9857) at
    its tenth; a query whose draws all agree never has a runner-up, so its pair process never moves and it runs to
    its cap (as the source's decider, which knows no labels in advance, does); invalid answers cost a draw and do
    not vote."""
    assert _drawn(SEQ) == (11, True)
    assert _drawn(SEQ, delta=0.0505) == (10, True)
    assert _drawn([0] * 20) == (20, False)
    assert _drawn([0] * 20, cap=7) == (7, False)
    assert _drawn([-1, 0, -1, 1] + [0] * 9) == (13, True)
    assert _drawn([-1, 0, -1, 1] + [0] * 8) == (12, False)


def test_the_contender_set():
    """With C the top 2 (mmc_m = 2), a vote for a third answer counts against the leader in the other process; with
    the top 3 it does not. A B C: C is outside the top 2 before its vote either way (unseen); C again: in the top 3
    (third), not in the top 2."""
    l1, u1, l2, u2, _ = _state([0, 1, 2, 0, 2], m_top=3)
    l1b, u1b, l2b, u2b, _ = _state([0, 1, 2, 0, 2], m_top=2)
    assert (u1, u2) == (1, 3) and (u1b, u2b) == (1, 4)


def test_leader_must_survive_the_last_vote():
    """A B B: before the third vote A leads (first drawn among the tied), after it B does: not certified."""
    assert _state([0, 1, 1])[4] is False
    assert _state([0, 1, 0])[4] is True
    assert _state([]) is None and ref_state([], 3)[4] is False


@settings(max_examples=400, deadline=None)
@given(votes=st.lists(st.integers(-1, 4), max_size=40), m_top=st.integers(1, 4))
def test_state_equals_the_reference(votes, m_top):
    """The engine's e-processes equal the reference's on the same votes, exactly (invalid answers left out there).
    Before a second answer the engine does not check, and the reference's pair process has not moved (no runner-up):
    its guard refuses the certificate either way."""
    got = _state(votes, m_top)
    want = ref_state([a for a in votes if a >= 0], m_top)
    if got is None:
        assert want[1] == 0
    else:
        assert tuple(got[:4]) == tuple(want[:4]) and bool(got[4]) == want[4]


@settings(max_examples=400, deadline=None)
@given(votes=st.lists(st.integers(-1, 4), max_size=40), m_top=st.integers(1, 4))
def test_state_with_known_labels_equals_the_reference(votes, m_top):
    """Labels known in advance (the query's pool: here its votes), the engine's e-processes equal the reference's,
    which ranks every label from the start at count 0, ties by answer id."""
    valid = [a for a in votes if a >= 0]
    got = _state(votes, m_top, labels="pool")
    want = ref_state(valid, m_top, sorted(set(valid)))
    if got is None:
        assert not votes
    else:
        assert tuple(got[:4]) == tuple(want[:4]) and bool(got[4]) == want[4]


# The source's training code's call (metric_utils.py at 2c41622): labels known in advance, both guards 1, no leader
# check, M 2, delta 0.1 or 0.4
SOURCE_CALL = {"mmc_labels": "pool", "mmc_min_updates": 1, "mmc_leader_check": "off", "m_top": 2}


def test_a_unanimous_query_stops_with_known_labels():
    """The pool holds A and B; the draws are A, A, ...: the runner-up B (count 0) exists from the first vote, so
    both e-processes count every A as a success. After n of them each has s = n, f = 0 at the bet (n - 1/2) / n
    (0.50001 at n = 1): log e = n log((2n - 1) / n): 0.811 at 2, 1.532 at 3, 2.238 at 4, 2.939 at 5. delta 0.1 (log 10
    = 2.303) stops at the fifth draw, delta 0.4 (log 2.5 = 0.916) at the third; the class's guards and leader check
    change nothing here. With the labels drawn so far it never stops (no runner-up)."""
    pool = [0] * 9 + [1]
    assert _drawn(pool, delta=0.1, **SOURCE_CALL) == (5, True)
    assert _drawn(pool, delta=0.4, **SOURCE_CALL) == (3, True)
    assert _drawn(pool, delta=0.1, mmc_labels="pool") == (5, True)
    assert _drawn(pool, delta=0.1) == (10, False)
    l1, u1, l2, u2, _ = ref_state(pool[:5], 2, [0, 1])
    assert (u1, u2) == (5, 5) and abs(l1 - 5 * math.log(9 / 5)) < 1e-12 and abs(l2 - l1) < 1e-15
    # ties to the smaller answer id (the source's alphabetical ties on the answer text, whose order a loaded pool's
    # ids keep): the same draws in a pool whose other answer sorts first make the first vote a failure of the pair
    # process (i is the unseen answer 0, j the drawn one); then 4 successes and 1 failure at the bet 3.5 / 5 give
    # log(2^5 0.7^4 0.3) = 0.835 < log 2.5 at the fifth draw, 5 and 1 at 0.75 log(2^6 0.75^5 0.25) = 1.334 at the sixth
    assert _drawn([1] * 9 + [0], delta=0.4, **SOURCE_CALL) == (6, True)
    assert abs(ref_state([1] * 6, 2, [0, 1])[0] - math.log(2 ** 6 * 0.75 ** 5 * 0.25)) < 1e-12
    # one label in the pool: no runner-up ever, the pair e-process never moves, no certificate
    assert _drawn([0] * 10, delta=0.4, **SOURCE_CALL) == (10, False)


def test_the_update_guard_at_one():
    """At delta 0.99999 (log 1 / delta = 1.00001e-5) one success at the first bet, log(2 x 0.50001) = 2.0e-5, crosses
    the bar: with labels known the first vote updates both e-processes once, so the guard at 1 stops the query at its
    first draw, the class's guard (2) at its second."""
    pool = [0, 0, 0, 1]
    assert _drawn(pool, delta=0.99999, mmc_labels="pool", mmc_min_updates=1) == (1, True)
    assert _drawn(pool, delta=0.99999, mmc_labels="pool") == (2, True)
    assert _drawn(pool, delta=0.99999, mmc_labels="pool", mmc_min_updates=3) == (3, True)


@settings(max_examples=300, deadline=None)
@given(votes=st.lists(st.integers(-1, 3), min_size=1, max_size=30), m_top=st.integers(1, 3),
       labels=st.sampled_from(["drawn", "pool"]), guard=st.integers(1, 2),
       delta=st.sampled_from([0.05, 0.2, 0.4, 0.7, 0.99999]))
def test_the_leader_check_never_refuses_the_first_crossing(votes, m_top, labels, guard, delta):
    """With ties to the answer drawn first (the engine's, for i, j, C and the leader after the vote alike), the
    vote at which both e-processes first pass the bar never moves the lead: a vote for i keeps it, and a vote for
    another answer is a failure of the process it updates (or updates none), which has not brought one across in
    any case seen (none of 536,074 random prefixes either, in development). So on and off stop every query alike;
    the source's check differs only where its own tie-breaking does (the first character of the label)."""
    on = _drawn(votes, delta=delta, m_top=m_top, mmc_labels=labels, mmc_min_updates=guard)
    off = _drawn(votes, delta=delta, m_top=m_top, mmc_labels=labels, mmc_min_updates=guard, mmc_leader_check="off")
    assert on == off


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mmc_equals_the_reference(unit, data):
    """Engine and reference on the same permutations: every policy that takes a rule, pulls of 1 to 4, caps."""
    pool = data.draw(pools(max_size=14))
    off, correct, score, ans, tok, perm, rank = pool
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "gap", "entropy", "two-stage", "streaming", "dsc",
                                               "marginal-gain", "side-eb"])),
                    unit=unit, K=data.draw(st.integers(1, 4)), eliminate="mmc",
                    max_samples=data.draw(st.integers(0, 12)),
                    mmc_delta=data.draw(st.sampled_from([0.05, 0.2, 0.5, 0.9, 0.99999])),
                    mmc_m=data.draw(st.integers(1, 3)), mmc_labels=data.draw(st.sampled_from(["drawn", "pool"])),
                    mmc_min_updates=data.draw(st.integers(1, 3)),
                    mmc_leader_check=data.draw(st.sampled_from(["on", "off"])))
    budget = data.draw(st.integers(0, int(off[-1]) + 3 if unit == "samples" else int(tok.sum()) + 5))
    ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=budget,
                        **config_kwargs(cfg))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget)
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc"):
        assert list(np.asarray(got[key]).astype(int)) == [int(v) for v in ref[key]], (key, cfg, budget)
    for key in ("samples_used", "tokens_used", "exhausted"):
        assert got[key] == ref[key], (key, cfg, budget)


@pytest.mark.parametrize("k", [1, 3])
def test_incremental_checks_on_long_queries(k):
    """A check reads only the votes since the last one (the e-processes and the ranking kept per query between
    checks): on queries of 48 draws with up to 6 answers and invalid ones, where the ranking moves across many
    checks and checks are skipped while one answer has been drawn, the engine decides as the reference, which
    replays every query's votes from the first at each check."""
    rng = np.random.default_rng(k)
    for _ in range(6):
        n, size = 8, 48
        off = np.arange(0, (n + 1) * size, size)
        probs = rng.dirichlet(np.full(7, 0.6), n)
        ans = np.concatenate([rng.choice(7, size, p=p) - 1 for p in probs]).astype(np.int64)
        correct = (ans == 0).astype(np.int8)
        score = rng.random(n * size)
        tok = rng.integers(1, 9, n * size)
        perm = np.concatenate([o + rng.permutation(size) for o in off[:-1]])
        rank = rng.permutation(n)
        for m_top, delta in ((1, 0.3), (2, 0.05), (3, 0.05)):
            cfg = RunConfig("elimination", K=k, eliminate="mmc", mmc_delta=delta, mmc_m=m_top)
            ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=n * size,
                                **config_kwargs(cfg))
            got = run_once(off, correct, score, ans, tok, perm, rank, cfg, n * size)
            assert list(got["n_drawn"]) == list(ref["n_drawn"]), (k, m_top, delta)
            assert [bool(v) for v in got["answered"]] == [bool(v) for v in ref["answered"]]


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_equals_replay(unit, data):
    """A live run over a pool-backed source (answers relabelled, so only their equality can matter; responses
    arriving one at a time) decides as the replay of that pool on the same permutation: the certificate's ties go
    to the answer drawn first, which both see alike."""
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools(max_size=14))
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "streaming", "two-stage"])), unit=unit,
                    K=data.draw(st.integers(1, 3)), eliminate="mmc", max_samples=data.draw(st.integers(0, 10)),
                    mmc_delta=data.draw(st.sampled_from([0.05, 0.3, 0.8])), mmc_m=data.draw(st.integers(1, 3)))
    budget = data.draw(st.integers(0, (int(off[-1]) if unit == "samples" else int(tok.sum())) + 3))
    source = data.draw(st.sampled_from([Relabelled, OneAtATime]))(off, correct, score, ans, tok, perm)
    live = run_live(source, np.diff(off), rank, budget_total=budget, config=cfg)
    _assert_same(live, run_once(*pool, cfg, budget), (cfg, budget))


@pytest.mark.parametrize("bad", [{"mmc_delta": 0.0}, {"mmc_delta": 1.0}, {"mmc_m": 0}, {"mmc_min_updates": 0},
                                 {"mmc_labels": "all"}, {"mmc_leader_check": "yes"}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError, match="--mmc-"):
        RunConfig("elimination", eliminate="mmc", **bad)


@settings(max_examples=500, deadline=None)
@given(s=st.integers(0, 10**5), f=st.integers(0, 10**5), q=st.floats(0.50001, 0.99999))
def test_log_e_is_below_its_successes_times_log_2(s, f, q):
    """The check skips the logs while min(successes) log 2 + MMC_LOG_SLACK is below the bar: a bet in [1/2, 1) makes
    every success add at most log 2 and every failure less than 0, so no log e it skips could have reached it."""
    assert mmc_log_e(s, f, q) < s * LOG2 + MMC_LOG_SLACK


def test_known_labels_do_not_run_live():
    """Labels known in advance are the query's whole pool, which a live run does not have yet: run_live and ttc run
    refuse `--mmc-labels pool` in one line, and take the source's other options."""
    from types import SimpleNamespace

    from ttc.harvest.run.request import RunError, check_oracle

    off = np.array([0, 3])
    source = Relabelled(off, np.zeros(3, np.int8), np.zeros(3), np.array([0, 0, 1]), np.ones(3, np.int64),
                        np.arange(3))
    cfg = RunConfig("elimination", eliminate="mmc", mmc_labels="pool")
    with pytest.raises(ValueError, match="--mmc-labels pool reads the query's whole pool"):
        run_live(source, [3], [0], budget_total=3, config=cfg)
    req = SimpleNamespace(oracle="sc", confidence=None, out="out")
    with pytest.raises(RunError, match="--mmc-labels pool needs hindsight"):
        check_oracle(req, cfg, "sc")
    check_oracle(req, RunConfig("elimination", eliminate="mmc", mmc_min_updates=1, mmc_leader_check="off"), "sc")
    # (a rule that does not read it: no refusal)
    check_oracle(req, RunConfig("elimination", eliminate="sc-share", mmc_labels="pool"), "sc")
