"""The stopping rules of Early-Stopping Self-Consistency (ESC) and Adaptive-Consistency (AC) in the engine: against the
sources' definitions written out here by hand, against the reference on random pools, and ESC against its source's
protocol on the real last-letters pool the source released, on the same permutations."""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import replay, run_once
from ttc.replay.policies import RunConfig
from ttc.replay.pool import Pool, load_pool
from ttc.replay.rng import permutation, query_order

from support.equivalence import _compare, pools

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


def test_ac_entropy_an_exact_tie_stops():
    """Counts 8, 3 and 1 have h = 3/4 exactly (H = 3/4 ln 3), which floating point puts an ulp above 0.75 in the
    engine's sum order: h <= hmax holds, so the query stops there."""
    seq = [1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0]
    assert all(_ac_entropy_source(seq[:k]) > 0.75 for k in range(2, 12))
    assert _drawn(seq, RunConfig("elimination", eliminate="ac-entropy", hmax=0.75)) == (12, True)


@pytest.mark.parametrize("share", [0.5, 0.6, 0.8, 1.0])
@pytest.mark.parametrize("seq", [[0, 0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 1, 1, 1, 1], [0, 1, 2, 3, 0, 0, 0, 0, 0]])
def test_ac_majority_follows_the_source(seq, share):
    """AC's MajorityStoppingCriteria: stop when len(answers) != 1 and the most common count / len >= threshold."""
    cfg = RunConfig("elimination", eliminate="ac-majority", share=share)
    expect = next((k for k in range(2, len(seq) + 1)
                   if Counter(seq[:k]).most_common(1)[0][1] / k >= share), None)
    assert _drawn(seq, cfg) == ((expect, True) if expect else (len(seq), False))


@pytest.mark.parametrize("rule", ["esc", "ac-majority", "ac-entropy", "ac-dirichlet"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rules_equal_the_reference(rule, data):
    pool = data.draw(pools())
    total = int(pool[0][-1])
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "entropy", "two-stage", "streaming"])),
                    unit=data.draw(st.sampled_from(["samples", "tokens"])), K=data.draw(st.integers(1, 4)),
                    eliminate=rule, max_samples=data.draw(st.integers(0, 8)),
                    share=data.draw(st.sampled_from([0.5, 0.67, 0.8, 1.0])),
                    hmax=data.draw(st.sampled_from([0.0, 0.3, 0.75, 1.0])),
                    dirichlet_conf=data.draw(st.sampled_from([0.6, 0.8, 0.95])))
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


# ---------------------------------------------------------------------------------- ac-dirichlet (Adaptive-Consistency)

def _dirichlet_prob(lead_cnt, others, conf=0.0, invalid=0):
    """The engine's ac_dirichlet on one query's answer slots: invalid answers in slot 0, the leading answer (id 0) in
    slot 1, the others after it. conf 0: always the probability itself, never the bound."""
    from ttc.replay.kernel import ac_dirichlet

    si = np.zeros((2 + len(others), 2), np.int64)
    si[0, 0], si[1, 0] = invalid, lead_cnt
    si[2:, 0] = others
    return ac_dirichlet(si, np.int64(0), np.int64(len(si)), np.int64(0), np.int64(lead_cnt), conf)


def _count_tuples(n_max):
    """(leading count, the other counts in decreasing order, at most 4 of them) with n_max draws at most."""
    def parts(rem, top, k):
        yield ()
        for v in range(min(top, rem), 0, -1) if k else ():
            for rest in parts(rem - v, v, k - 1):
                yield (v,) + rest
    return [(lc, o) for lc in range(1, n_max + 1) for o in parts(n_max - lc, lc, 4)]


def test_ac_dirichlet_probability_against_exact_rationals_and_mpmath():
    """The engine's quadrature against the exact value (the reference's Fraction, by another route: the integral
    expanded and integrated term by term) on 250 count tuples up to 60 draws, and against mpmath's adaptive
    quadrature at 20 digits for counts up to 1,000 (Stirling's branch): within 1e-14 everywhere."""
    from ttc.replay.reference import dirichlet_lead_prob

    rng = np.random.default_rng(5)
    tuples = _count_tuples(12) + [(int(lc), tuple(sorted(map(int, rng.integers(1, lc + 1, rng.integers(1, 5))),
                                                         reverse=True))) for lc in rng.integers(1, 60, 250)]
    tuples = [tuples[i] for i in rng.choice(len(tuples), 250, replace=False)] + [(40, (40, 40, 40, 40)), (39, (39,))]
    for lc, o in tuples:
        exact = float(dirichlet_lead_prob(lc + 1, tuple(c + 1 for c in o) or (1,)))
        assert abs(_dirichlet_prob(lc, o) - exact) < 1e-14, (lc, o)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 20

    def integral(a, alphas):
        def f(x):
            return mp.exp((a - 1) * mp.log(x) - x - mp.loggamma(a)) * mp.fprod(
                [mp.gammainc(b, 0, x, regularized=True) for b in alphas])

        return mp.quad(f, [0] + [a + k * mp.sqrt(a) for k in range(-12, 13) if a + k * mp.sqrt(a) > 0] + [mp.inf])

    for lc, o in [(64, (63, 63, 63, 63)), (99, (60, 50)), (999, (990, 500))]:
        assert abs(_dirichlet_prob(lc, o) - float(integral(lc + 1, [c + 1 for c in o]))) < 1e-14, (lc, o)


def test_ac_dirichlet_top_five_lone_answer_and_invalid_answers():
    """Only the four most frequent other answers enter (the source's top_k_elements = 5, the leader included); a lone
    answer is the source's Beta rule with no runner-up, 1 - 2^-(a+1); invalid answers (slot 0) do not vote; the
    bounds 1 - 2^-(a+1) and the runner-up's alone are returned, without integrating, when below conf."""
    assert _dirichlet_prob(9, (5, 4, 3, 2)) == _dirichlet_prob(9, (2, 5, 1, 4, 1, 3, 2))
    assert _dirichlet_prob(9, (5, 4, 3, 2)) != _dirichlet_prob(9, (5, 4, 3))
    for lc in range(1, 60):
        assert _dirichlet_prob(lc, ()) == 1.0 - 0.5 ** (lc + 1)
    assert _dirichlet_prob(6, (2, 1), invalid=30) == _dirichlet_prob(6, (2, 1))
    assert _dirichlet_prob(3, (1,), conf=0.95) == 1.0 - 0.5**4  # below 0.95: the bound
    assert _dirichlet_prob(3, (1,)) < 1.0 - 0.5**4
    assert _dirichlet_prob(5, (2, 1), conf=0.95) == 219 / 256  # P(Binomial(8, 1/2) <= 5): the runner-up's bound
    assert _dirichlet_prob(5, (2, 1)) < 219 / 256 and abs(_dirichlet_prob(5, (2,)) - 219 / 256) < 1e-14


def test_ac_dirichlet_decisions_are_exact_up_to_40_draws():
    """Every count tuple of up to 40 valid draws (17,337): no probability lies within 1e-6 of the confidences
    tested, far beyond the quadrature's 1e-14, so the engine decides as the exact value does (the reference's);
    and its decision, bounds included, is P >= conf. (The closest to 0.95 is 1.2e-5 away; the source's Monte Carlo
    has standard errors of 0.01 to 0.2 there.)"""
    tuples = _count_tuples(40)
    assert len(tuples) == 17337
    probs = np.array([_dirichlet_prob(lc, o) for lc, o in tuples])
    for conf in (0.6, 0.8, 0.9, 0.95, 0.99):
        assert np.abs(probs - conf).min() > 1e-6, conf
        stops = np.array([_dirichlet_prob(lc, o, conf=conf) >= conf for lc, o in tuples])
        assert (stops == (probs >= conf)).all(), conf


def test_ac_dirichlet_with_two_answers_is_sc_beta():
    """With two valid answers or one the source hands over to its Beta rule ("if len(counts) < 3: return
    BetaStoppingCriteria(conf_thresh).should_stop(...)"), which is sc-beta: at 0.95 the engine's decision equals
    sc-beta's exact table (replay/tables.py, rational where close) for every a, b up to 80 draws."""
    from ttc.replay.tables import sc_beta_table

    min_a = sc_beta_table(80, 0.95)
    for b in range(0, 40):
        for a in range(max(b, 1), 80 - b + 1):
            stops = _dirichlet_prob(a, (b,) if b else (), conf=0.95) >= 0.95
            assert stops == (a >= min_a[b]), (a, b)


def _source_dirichlet_mc(counts, rng, N=50_000):
    """DirichletStoppingCriteria.should_stop (use_markov=True) of Pranjal2041/AdaptiveConsistency
    adaptive_consistency/stopping_criterias.py, for 3 or more answers, written out with a seeded generator: the 5
    largest counts in increasing order (`sorted(counts.items(), key=..., reverse=False)[-5:]`), one variable per
    count but the largest (whose share is 1 - their sum), integrand prod x_i^c_i (1 - sum x)^c_last. integrate_mcs
    draws the outermost variable uniform on [0, 0.5] and each next one uniform on [0, max(0, min(0.5, 1 - S - M,
    (1 - S) / 2))] (S, M: the sum and the largest of those drawn), weighting by the product of the widths: the
    region where the last share is the largest; the denominator draws each on [0, 1 - S] (the simplex). N = 50,000
    for up to 4 variables. Returns (the ratio, its delta-method standard error)."""
    c = sorted(counts)[-5:]
    k = len(c)

    def estimate(numerator):
        xs, width = [], np.ones(N)
        for i in range(k - 1):
            if i == 0:
                hi = np.full(N, 0.5 if numerator else 1.0)
            else:
                s, m = np.sum(xs, axis=0), np.max(xs, axis=0)
                hi = np.maximum(0.0, np.minimum(np.minimum(0.5, 1 - s - m), (1 - s) / 2)) if numerator else 1 - s
            xs.append(rng.uniform(0.0, hi))
            width = width * hi
        y = np.prod([x ** ci for x, ci in zip(xs, c)], axis=0) * (1 - np.sum(xs, axis=0)) ** c[-1] * width
        return y.mean(), y.var() / N

    (a, va), (b, vb) = estimate(True), estimate(False)
    return a / b, a / b * math.sqrt(va / a**2 + vb / b**2)


def test_ac_dirichlet_agrees_with_the_sources_monte_carlo():
    """The source's own Monte Carlo estimate (seeded) on 150 count tuples of 3 to 6 answers, half of them with an
    exact probability in [0.85, 0.99] around the threshold: it estimates the engine's probability (within 5 of its
    standard errors), and where its decision at 0.95 differs from the engine's it is within that of 0.95. Its
    standard errors are large (0.01 to 0.2 at these counts: uniform draws over boxes for an integrand as peaked as
    x^30), so near the threshold the source's decision is a coin flip that the exact probability removes: 16 of the
    75 tuples near it decide differently, and 12 of the 75 others."""
    from ttc.replay.reference import dirichlet_lead_prob

    rng = np.random.default_rng(2023)
    pool = [(lc, o) for lc, o in _count_tuples(40) if len(o) >= 2] + [(12, (4, 3, 2, 2, 1)), (8, (3, 2, 2, 1, 1))]
    probs = {t: _dirichlet_prob(t[0], t[1][:4]) for t in pool}
    near = [t for t in pool if 0.85 <= probs[t] <= 0.99]
    picks = [near[i] for i in rng.choice(len(near), 75, replace=False)] + \
        [pool[i] for i in rng.choice(len(pool), 75, replace=False)]
    differ = 0
    for lc, o in picks:
        mc, se = _source_dirichlet_mc([lc, *o], rng)
        p = probs[(lc, o)]
        assert abs(mc - p) < 5 * se, (lc, o, mc, se, p)
        if (mc >= 0.95) != (p >= 0.95):
            differ += 1
            assert abs(mc - 0.95) < 5 * se, (lc, o, mc, se, p)
        assert abs(p - float(dirichlet_lead_prob(lc + 1, tuple(c + 1 for c in o[:4])))) < 1e-14


def _wide_pools():
    """test_equivalence's random pools with answers drawn from up to 8 ids (-1 invalid), so that the top-5 cut and
    ties at it occur."""
    @st.composite
    def draw_pool(draw):
        off, correct, score, _, tok, perm, rank = draw(pools(max_size=16))
        ans = [a for i in range(len(off) - 1) for a in draw(st.lists(
            st.integers(-1, min(int(off[i + 1] - off[i]) - 1, 7)), min_size=int(off[i + 1] - off[i]),
            max_size=int(off[i + 1] - off[i])))]
        return off, correct, score, np.array(ans, np.int64), tok, perm, rank
    return draw_pool()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_ac_dirichlet_equals_the_reference(data):
    """Engine and reference (exact rationals) on the same permutations: every policy that takes a rule, both units,
    pulls of 1 to 4, caps, the confidences 0.6 to 0.99."""
    pool = data.draw(_wide_pools())
    total = int(pool[0][-1])
    cfg = RunConfig(data.draw(st.sampled_from(["elimination", "ucb", "entropy", "two-stage", "streaming", "dsc"])),
                    unit=data.draw(st.sampled_from(["samples", "tokens"])), K=data.draw(st.integers(1, 4)),
                    eliminate="ac-dirichlet", max_samples=data.draw(st.integers(0, 12)),
                    dirichlet_conf=data.draw(st.sampled_from([0.6, 0.8, 0.9, 0.95, 0.99])))
    hi = total + 3 if cfg.unit == "samples" else int(pool[4].sum()) + 5
    _compare(pool, cfg, data.draw(st.integers(0, hi)))


# ------------------------------------------------------------------ protocol conventions: invalid answers vote, ties

def _voting(answers):
    """The answers of one query (-1 invalid) with invalid answers as one category (Pool.with_invalid_votes)."""
    m = len(answers)
    dense = {a: r for r, a in enumerate(sorted({a for a in answers if a >= 0}))}  # a pool's ids are dense ranks
    return Pool.from_arrays([0, m], correct=[0] * m, ans=[dense.get(a, -1) for a in answers]).with_invalid_votes().ans


def test_with_invalid_votes_gives_each_query_one_more_category():
    pool = Pool.from_arrays([0, 4, 6, 8, 9], correct=[0] * 9, ans=[-1, 0, 1, -1, 0, 0, -1, -1, 0])
    got = pool.with_invalid_votes()
    assert got.ans.tolist() == [2, 0, 1, 2, 0, 0, 0, 0, 0]
    assert got.invalid_votes and not pool.invalid_votes
    assert (pool.ans < 0).sum() == 4  # the pool it came from is left as it was
    assert got.with_invalid_votes() is got
    bare = Pool.from_arrays([0, 2], correct=[0, 1])  # no answers: nothing to vote
    assert bare.with_invalid_votes() is bare


@settings(max_examples=300, deadline=None)
@given(seq=st.lists(st.sampled_from([-1, -1, 0, 1, 2]), min_size=2, max_size=12),
       share=st.sampled_from([0.5, 0.6, 0.8, 1.0]), hmax=st.sampled_from([0.3, 0.5, 0.75, 0.9]))
def test_with_invalid_votes_ac_rules_are_the_source_criteria(seq, share, hmax):
    """With invalid answers voting, ac-majority and ac-entropy are AC's criteria over Counter(answers) with a failed
    extraction (here -1, the source's None) counted like any answer."""
    voting = _voting(seq)
    maj = next((k for k in range(2, len(seq) + 1) if Counter(seq[:k]).most_common(1)[0][1] / k >= share), None)
    ent = next((k for k in range(2, len(seq) + 1) if _ac_entropy_source(seq[:k]) <= hmax), None)
    for cfg, expect in ((RunConfig("elimination", eliminate="ac-majority", share=share), maj),
                        (RunConfig("elimination", eliminate="ac-entropy", hmax=hmax), ent)):
        got = run_once(*_one_query(voting.tolist()), cfg, len(seq))
        assert (int(got["n_drawn"][0]), bool(got["answered"][0])) == ((expect, True) if expect else (len(seq), False))


def test_invalid_answers_stop_a_query_only_when_they_vote():
    seq = [-1, -1, -1, 0, 0, 0]
    cfg = RunConfig("elimination", eliminate="ac-majority")
    assert _drawn(seq, cfg) == (6, False)  # the default: an invalid lead never stops; 0 ends at 3 of 6 < 0.8
    got = run_once(*_one_query(_voting(seq).tolist()), cfg, 6)
    assert int(got["n_drawn"][0]) == 2  # voting: 2 of 2 invalid


def _source_protocol(pool, perm, rule, cap):
    """Adaptive-Consistency's criterion run on each question's answers in the engine's permuted order, the failed
    extraction (None) an answer like any other, at most cap draws; the answer Counter.most_common(1) gives (ties: the
    answer drawn first) and whether its first response is correct."""
    out = []
    for i in range(len(pool.off) - 1):
        js = perm[pool.off[i]:pool.off[i + 1]][:cap]
        seq = [None if pool.ans[j] < 0 else int(pool.ans[j]) for j in js]
        k = next((k for k in range(2, len(seq) + 1) if rule(seq[:k])), len(seq))
        top = Counter(seq[:k]).most_common(1)[0][0]
        first = next(j for j, a in zip(js, seq) if a == top)
        out.append((k, bool(pool.correct[first])))
    return out


@pytest.mark.parametrize("name", ["ac-majority", "ac-entropy"])
def test_invalid_votes_and_first_drawn_ties_equal_the_source_protocol_on_the_real_pool(name):
    """On the last-letters pool (73 invalid answers), --invalid-votes with --select cisc --cisc-temp inf gives, draw
    for draw and query for query, AC's criterion over Counter(answers) and Counter.most_common(1)'s answer, on the
    engine's own permutations."""
    pool = load_pool(ROOT / "data" / "lastletters-gpt35-40", invalid_votes=True)
    base = load_pool(ROOT / "data" / "lastletters-gpt35-40")
    cfg = RunConfig("elimination", eliminate=name, max_samples=40)
    rule = ((lambda s: Counter(s).most_common(1)[0][1] / len(s) >= 0.8) if name == "ac-majority"
            else (lambda s: _ac_entropy_source(s) <= 0.75))
    n = len(pool.qkeys)
    differs = 0
    for seed in (0, 3):
        perm = permutation(pool.off, pool.qkeys, seed)
        rank, _ = query_order(pool.qkeys, seed)
        got = run_once(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank, cfg, 40 * n,
                       votes=(math.inf, 10.0))
        plain = run_once(base.off, base.correct, base.score, base.ans, base.tok, perm, rank, cfg, 40 * n)
        want = _source_protocol(base, perm, rule, 40)
        assert [int(x) for x in got["n_drawn"]] == [k for k, _ in want], seed
        assert [bool(x) for x in got["sel_cisc"]] == [c for _, c in want], seed
        differs += int((got["n_drawn"] != plain["n_drawn"]).sum())
    assert differs > 0  # the convention changes some questions' stops on this pool


def test_replay_records_the_convention(tmp_path):
    pool = load_pool(ROOT / "data" / "lastletters-gpt35-40", invalid_votes=True)
    df, _ = replay(pool, [RunConfig("elimination", eliminate="ac-majority", max_samples=40)], [8], np.arange(2),
                   select="sc")
    assert df["invalid_votes"].to_list() == [True, True]
    df, _ = replay(load_pool(ROOT / "data" / "lastletters-gpt35-40"), [RunConfig("uniform")], [8], np.arange(2))
    assert df["invalid_votes"].to_list() == [False, False]
