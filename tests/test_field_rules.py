"""The stopping rules of Early-Stopping Self-Consistency (ESC) and Adaptive-Consistency (AC) in the engine: against the
sources' definitions written out here by hand, against the reference on random pools, and ESC against its source's
protocol on the real last-letters pool the source released, on the same permutations."""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.engine import replay, run_once
from replay.policies import RunConfig
from replay.pool import load_pool
from replay.rng import permutation, query_order

from test_equivalence import _compare, pools

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _one_query(answers, correct=None):
    """One query whose responses come in the given order (perm = identity)."""
    m = len(answers)
    off = np.array([0, m], np.int64)
    correct = np.array(correct if correct is not None else [0] * m, np.int8)
    return off, correct, correct.astype(float), np.array(answers, np.int64), np.ones(m, np.int64), \
        np.arange(m, dtype=np.int64), np.zeros(1, np.int64)


def _drawn(answers, cfg, budget=None):
    got = run_once(*_one_query(answers), cfg, budget if budget is not None else len(answers))
    return int(got["n_drawn"][0]), bool(got["answered"][0])


def test_esc_stops_at_the_first_unanimous_window_and_pays_whole_windows():
    cfg = RunConfig("elimination", K=3, eliminate="esc")
    assert _drawn([0, 1, 0, 2, 2, 2, 0, 0, 0], cfg) == (6, True)  # window 2 (draws 3-5) is unanimous
    assert _drawn([0, 0, 1, 1, 1, 0, 0, 0, 0], cfg) == (9, True)  # 0 0 | 1 1 1 straddles windows: no stop at 5
    assert _drawn([0, 1, 0, 2, 1, 2, 0, 1, 2], cfg) == (9, False)  # never unanimous: the whole pool, answered no
    assert _drawn([-1, -1, -1, 0, 0, 0], cfg) == (6, True)  # a window of invalid answers does not stop


def _ac_entropy_source(answers):
    """AC's EntropyStoppingCriteria.should_stop's quantity, from its source: base-2 entropy of the counts (one
    count of 1 appended when there is one category), normalised by log2 of the number of counts."""
    counts = list(Counter(answers).values())
    if len(counts) < 2:
        counts.append(1)
    total = sum(counts)
    h = -sum(c / total * math.log2(c / total) for c in counts)
    return h / math.log2(len(counts))


@pytest.mark.parametrize("hmax", [0.3, 0.5, 0.75, 0.9])
@pytest.mark.parametrize("seq", [[0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0], [0, 1, 2, 0, 0, 0, 0, 0, 0, 0],
                                 [0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0], [2, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]])
def test_ac_entropy_follows_the_source(seq, hmax):
    cfg = RunConfig("elimination", eliminate="ac-entropy", hmax=hmax)
    expect = next((k for k in range(2, len(seq) + 1) if _ac_entropy_source(seq[:k]) <= hmax), None)
    n, answered = _drawn(seq, cfg)
    assert (n, answered) == ((expect, True) if expect else (len(seq), False))


@pytest.mark.parametrize("share", [0.5, 0.6, 0.8, 1.0])
@pytest.mark.parametrize("seq", [[0, 0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 1, 1, 1, 1], [0, 1, 2, 3, 0, 0, 0, 0, 0]])
def test_ac_majority_follows_the_source(seq, share):
    """AC's MajorityStoppingCriteria: stop when len(answers) != 1 and the most common count / len >= threshold."""
    cfg = RunConfig("elimination", eliminate="ac-majority", share=share)
    expect = next((k for k in range(2, len(seq) + 1)
                   if Counter(seq[:k]).most_common(1)[0][1] / k >= share), None)
    assert _drawn(seq, cfg) == ((expect, True) if expect else (len(seq), False))


@pytest.mark.parametrize("rule", ["esc", "ac-majority", "ac-entropy"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rules_equal_the_reference(rule, data):
    pool = data.draw(pools())
    total = int(pool[0][-1])
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "entropy", "two-stage", "streaming"])),
                    unit=data.draw(st.sampled_from(["samples", "tokens"])), K=data.draw(st.integers(1, 4)),
                    eliminate=rule, max_samples=data.draw(st.integers(0, 8)),
                    share=data.draw(st.sampled_from([0.5, 0.67, 0.8, 1.0])),
                    hmax=data.draw(st.sampled_from([0.0, 0.3, 0.75, 1.0])))
    hi = total + 3 if cfg.unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


def test_esc_equals_the_source_protocol_on_the_same_permutations():
    """ESC's script (Yiwei98/ESC early_stop_last.py): per question, windows of 5 of the shuffled answers, stop at
    the first unanimous one, else majority over all 40; the cost is whole windows. Written here on the engine's
    permutations, with the engine's two conventions (an invalid answer agrees with nothing; vote ties to the
    answer that reached the count first), it must give the engine's allocation and selections exactly."""
    pool = load_pool(ROOT / "data" / "lastletters-gpt35-40")
    cfg = RunConfig("elimination", K=5, eliminate="esc", max_samples=40)
    n = len(pool.qkeys)
    for seed in (0, 7):
        perm = permutation(pool.off, pool.qkeys, seed)
        rank, _ = query_order(pool.qkeys, seed)
        got = run_once(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, cfg, 40 * n)
        for i in range(n):
            a0 = pool.off[i]
            js = perm[a0:pool.off[i + 1]]
            drawn = 40
            for w in range(8):
                win = [int(pool.ans[j]) for j in js[w * 5:(w + 1) * 5]]
                if win[0] >= 0 and all(a == win[0] for a in win):
                    drawn = 5 * (w + 1)
                    break
            counts, lead, lead_cnt, first = {}, -1, 0, {}
            for j in js[:drawn]:
                a = int(pool.ans[j])
                if a < 0:
                    continue
                counts[a] = counts.get(a, 0) + 1
                first.setdefault(a, j)
                if counts[a] > lead_cnt:
                    lead, lead_cnt = a, counts[a]
            assert got["n_drawn"][i] == drawn, (seed, i)
            assert bool(got["sel_sc"][i]) == (lead >= 0 and pool.correct[first[lead]] == 1), (seed, i)


def test_esc_in_a_replay_costs_what_the_source_reports():
    """The grid's ESC on the real pool, budget never binding: cost per question and accuracy near the source's
    protocol run on the pool's answers (benchmarks/source_protocols.py: 8.885 ± 0.004 samples, 83.15% over 3,000
    shuffles); 200 seeds, 4 standard errors."""
    pool = load_pool(ROOT / "data" / "lastletters-gpt35-40")
    df, _ = replay(pool, [RunConfig("elimination", K=5, eliminate="esc", max_samples=40)], [40], np.arange(200),
                   select="sc")
    samples = df["samples_used"].to_numpy() / len(pool.qkeys)
    se = samples.std(ddof=1) / math.sqrt(len(samples))
    assert abs(samples.mean() - 8.885) < 4 * math.hypot(se, 0.004)
    assert df["answered"].mean() / len(pool.qkeys) > 0.9
