"""The confidence-weighted selections cisc and deepconf (docs/semantics.md): the engine (replay/kernel.py
confidence_votes, after each run) against their plain-Python twins (replay/reference.py select_cisc /
select_deepconf) on the same permutations, on random, synthetic and real pools; their limits (T -> inf is majority
vote, eta 100 with equal confidences is majority vote, a tiny eta is best-of-N); the sources' own filtering
(np.percentile) and softmax; and the command line's refusals."""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.engine import replay, run_grid, run_once
from ttc.replay.kernel import F_SEL
from ttc.replay.policies import POLICIES, RunConfig

# the policies whose draws cisc and deepconf vote over (deepconf-online's stopped traces have no answer: refused there)
VOTED = sorted(p for p in POLICIES if p not in ("deepconf-online", "parallel-probe", "cmc"))
from ttc.replay.pool import DEFAULT_POOL, Pool, load_pool
from ttc.replay.reference import run_reference, select_cisc, select_deepconf
from ttc.replay.rng import permutation, query_order
from ttc.replay.synth import make_pool
from ttc.replay.tables import make_tables

from support.equivalence import config_kwargs
from support.equivalence import pools as equivalence_pools

SCORES = [0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]  # ties on purpose
TEMPS = [1 / 700, 0.05, 0.2, 1.0, 10.0, math.inf]
ETAS = [0.5, 10.0, 33.3, 50.0, 90.0, 100.0]
MATH = DEFAULT_POOL.parent / "math500-llama3.1-8b-48"


def graded(draw, correct):
    """Scores for the votes: ties on a grid, or any float in [0, 1]."""
    if draw(st.booleans()):
        return np.array(draw(st.lists(st.sampled_from(SCORES), min_size=len(correct), max_size=len(correct))))
    return np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=len(correct), max_size=len(correct))))


def pools():
    return equivalence_pools(max_size=14, scores=graded)


def _reference(data, cfg, budget, temp, eta):
    off, correct, score, ans, tok, perm, rank = data
    ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=budget, **config_kwargs(cfg))
    return (ref["n_drawn"], select_cisc(off, correct, score, ans, perm, ref["n_drawn"], temp),
            select_deepconf(off, correct, score, ans, perm, ref["n_drawn"], eta))


@pytest.mark.parametrize("policy", VOTED)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_engine_votes_equal_reference(policy, data):
    pool = data.draw(pools())
    off, correct, score, ans, tok, perm, rank = pool
    unit = data.draw(st.sampled_from(["samples", "tokens"]))
    cfg = RunConfig(policy, unit=unit, K=data.draw(st.integers(1, 3)),
                    eliminate=data.draw(st.sampled_from(["none", "threshold", "sc-share"])),
                    gamma=data.draw(st.sampled_from([0.5, 1.0])), max_samples=data.draw(st.integers(0, 6)),
                    # pets-online's plan from the exact curve: its default 20,000-draw estimate took the reference
                    # ~1 s a run (146 s of the suite) for nothing this test reads (tests/test_pets_online.py has it)
                    **({"pets_curve_mc": 0} if policy == "pets-online" else {}))
    budget = data.draw(st.integers(0, int(off[-1]) + 3 if unit == "samples" else int(tok.sum()) + 5))
    temp, eta = data.draw(st.sampled_from(TEMPS)), data.draw(st.sampled_from(ETAS))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget, votes=(temp, eta))
    n_drawn, cisc, deepconf = _reference(pool, cfg, budget, temp, eta)
    assert got["n_drawn"].tolist() == list(n_drawn)
    assert got["sel_cisc"].astype(int).tolist() == cisc, (cfg, budget, temp)
    assert got["sel_deepconf"].astype(int).tolist() == deepconf, (cfg, budget, eta)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_grid_votes_equal_reference_over_configs_and_seeds(data):
    """The grid's lazily generated permutations and shared scratch: every (configuration, seed) of a grid equals
    the twins on that seed's explicit permutation, in the per-query flags and the accuracy columns."""
    off, correct, score, ans, tok, _, _ = data.draw(pools())
    pool = Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok)
    cfgs = [RunConfig(data.draw(st.sampled_from(VOTED)),
                      eliminate=data.draw(st.sampled_from(["none", "threshold", "sc-share"])),
                      K=data.draw(st.integers(1, 2))) for _ in range(3)]
    seeds = np.array(data.draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=3, unique=True)), np.int64)
    budgets = np.array([[data.draw(st.integers(1, int(off[-1]) + 2)) for _ in seeds] for _ in cfgs], np.int64)
    temp, eta = data.draw(st.sampled_from(TEMPS)), data.draw(st.sampled_from(ETAS))
    out_f, _, pq_n, pq_flags = run_grid(pool, cfgs, budgets, seeds, make_tables(int(np.diff(off).max()), 0.95),
                                        per_query=True, votes=(temp, eta))
    n = len(off) - 1
    for s, seed in enumerate(seeds):
        perm = permutation(pool.off, pool.qkeys, int(seed))
        rank, _ = query_order(pool.qkeys, int(seed))
        for c, cfg in enumerate(cfgs):
            n_drawn, cisc, deepconf = _reference((off, correct, score, ans, tok, perm, rank), cfg,
                                                 int(budgets[c, s]), temp, eta)
            assert pq_n[c, s].tolist() == list(n_drawn)
            assert ((pq_flags[c, s] & F_SEL[3]) > 0).astype(int).tolist() == cisc, (cfg, seed)
            assert ((pq_flags[c, s] & F_SEL[4]) > 0).astype(int).tolist() == deepconf, (cfg, seed)
            assert out_f[c, s, 4] == sum(cisc) / n and out_f[c, s, 5] == sum(deepconf) / n


def _replay_equals_twins(pool, policies, budgets, seeds, temp, eta):
    """replay()'s per-query cisc and deepconf flags equal the twins on every run."""
    cfgs = [RunConfig(p) for p in policies]
    df, pq = replay(pool, cfgs, budgets, seeds, select="cisc", per_query=True, cisc_temp=temp, deepconf_eta=eta)
    _, pq2 = replay(pool, cfgs, budgets, seeds, select="deepconf", per_query=True, cisc_temp=temp,
                    deepconf_eta=eta)
    off, correct, score, ans = pool.off, pool.correct, pool.score, pool.ans
    n = pool.n_queries
    row = 0
    for c in cfgs:
        for _ in budgets:
            for seed in seeds:
                perm = permutation(pool.off, pool.qkeys, int(seed))
                drawn = pq["n_drawn"][row * n:(row + 1) * n].to_list()
                cisc = pq["selected_correct"][row * n:(row + 1) * n].cast(int).to_list()
                deepconf = pq2["selected_correct"][row * n:(row + 1) * n].cast(int).to_list()
                assert cisc == select_cisc(off, correct, score, ans, perm, drawn, temp), (c, seed)
                assert deepconf == select_deepconf(off, correct, score, ans, perm, drawn, eta), (c, seed)
                assert df["accuracy_cisc"][row] == sum(cisc) / n == df["accuracy"][row]
                assert df["accuracy_deepconf"][row] == sum(deepconf) / n
                row += 1


@pytest.mark.parametrize("temp,eta", [(0.2, 10.0), (1.0, 90.0), (0.01, 50.0)])
def test_replay_on_a_synthetic_pool_with_answers_and_a_score(temp, eta):
    """make_pool: answers with repeated wrong ones and invalid outputs, and a noisy score with ties."""
    pool = make_pool(n=40, size=24, seed=3, ragged=True)
    assert pool.has_answers and pool.has_gt and len(np.unique(pool.score)) > 2
    _replay_equals_twins(pool, ["uniform", "elimination", "ucb", "entropy", "streaming", "oracle"], [3, 9],
                         range(3), temp, eta)


def test_replay_on_the_real_answer_pool():
    """data/lastletters-gpt35-40 (answers and ground truth; no score column, so the confidence is gt itself)."""
    pool = load_pool(DEFAULT_POOL)
    assert pool.has_answers
    _replay_equals_twins(pool, ["uniform", "elimination", "two-stage"], [2, 6], range(3), 0.2, 10.0)


def test_replay_on_a_real_pool_given_a_confidence_and_answers():
    """The embedded pools have either answers or a confidence, not both: lastletters' real answers with the math500
    pool's real confidences laid over them, so both rules see a non-trivial score on real data."""
    ll, mp = load_pool(DEFAULT_POOL), load_pool(MATH, score="conf")
    m = min(ll.sizes.min(), mp.sizes.min())
    n = min(ll.n_queries, mp.n_queries)
    pick = np.concatenate([np.arange(ll.off[i], ll.off[i] + m) for i in range(n)])
    conf = np.concatenate([mp.score[mp.off[i]:mp.off[i] + m] for i in range(n)])
    off = np.arange(n + 1, dtype=np.int64) * m
    pool = Pool.from_arrays(off, correct=ll.correct[pick], score=conf, ans=ll.ans[pick])
    _replay_equals_twins(pool, ["uniform", "ucb", "entropy"], [4, 16], range(2), 0.2, 10.0)
    _replay_equals_twins(pool, ["elimination"], [8], range(2), 0.05, 90.0)


# --- limits ---------------------------------------------------------------------------------------------------------

def _drawn(data, n_drawn):
    off, correct, score, ans, tok, perm, rank = data
    return [[int(perm[off[i] + k]) for k in range(n_drawn[i])] for i in range(len(off) - 1)]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_limits(data):
    pool = data.draw(pools())
    off, correct, score, ans, tok, perm, rank = pool
    cfg = RunConfig(data.draw(st.sampled_from(["uniform", "elimination", "ucb", "streaming"])), eliminate="none")
    budget = data.draw(st.integers(1, int(off[-1])))
    got = {v: run_once(off, correct, score, ans, tok, perm, rank, cfg, budget, votes=v)
           for v in ((math.inf, 100.0), (1e12, 1e-9), (1 / 700, 10.0))}
    base = got[(math.inf, 100.0)]
    for i, drawn in enumerate(_drawn(pool, base["n_drawn"])):
        valid = [j for j in drawn if ans[j] >= 0]
        counts = Counter(int(ans[j]) for j in valid)
        # T = inf: every weight is exactly 1, plain majority vote, ties to the answer drawn first
        first = {}
        for j in valid:
            first.setdefault(int(ans[j]), j)
        if counts:
            top = max(counts.values())
            winner = next(a for a in first if counts[a] == top)
            assert base["sel_cisc"][i] == bool(correct[first[winner]])
            if list(counts.values()).count(top) == 1:  # T -> inf: the majority, whatever the scores
                assert got[(1e12, 1e-9)]["sel_cisc"][i] == base["sel_sc"][i]
        else:
            assert not base["sel_cisc"][i] and not base["sel_deepconf"][i]
        # eta = 100 keeps every valid draw: deepconf is the summed-score vote (weighted) where its winner is unique
        sums = {}
        for j in valid:
            sums[int(ans[j])] = sums.get(int(ans[j]), 0.0) + float(score[j])
        if sums and max(sums.values()) > 0 and list(sums.values()).count(max(sums.values())) == 1:
            assert base["sel_deepconf"][i] == base["sel_weighted"][i]
        # a tiny eta keeps only the highest-scoring valid draws: with one of them, it is best-of-N's response
        if valid:
            best = max(float(score[j]) for j in valid)
            tops = [j for j in valid if float(score[j]) == best]
            if len(tops) == 1 and best > 0 and all(float(score[j]) < best for j in drawn if j not in tops):
                assert got[(1e12, 1e-9)]["sel_deepconf"][i] == base["sel_bon"][i]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_equal_confidences_make_both_rules_majority_votes(data):
    """All confidences equal (and positive): cisc at any T and deepconf at eta 100 are the same majority vote (ties to
    the answer drawn first), which is sc wherever the majority is unique."""
    off, correct, _, ans, tok, perm, rank = data.draw(pools())
    score = np.full(len(correct), data.draw(st.sampled_from([0.3, 1.0])))
    cfg = RunConfig("elimination", eliminate="none")
    budget = data.draw(st.integers(1, int(off[-1])))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget,
                   votes=(data.draw(st.sampled_from(TEMPS)), 100.0))
    assert got["sel_cisc"].tolist() == got["sel_deepconf"].tolist()
    for i, drawn in enumerate(_drawn((off, correct, score, ans, tok, perm, rank), got["n_drawn"])):
        counts = Counter(int(ans[j]) for j in drawn if ans[j] >= 0)
        if counts and list(counts.values()).count(max(counts.values())) == 1:
            assert got["sel_cisc"][i] == got["sel_sc"][i]


# --- the sources' own computations ------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(SCORES) | st.integers(0, 1000).map(lambda k: k / 1000), min_size=1, max_size=300),
       st.sampled_from([10, 90]))
def test_deepconf_keeps_what_its_percentile_filter_keeps(conf, eta):
    """DeepConf's offline filter (deepconf/utils.py filter_top_confidence): threshold = np.percentile(confidences,
    (1 - top_percent) * 100), keep conf >= threshold. For the paper's eta (10, 90) the ceil rule keeps the same
    (confidences 1e-3 apart or equal: two within a few ulps can make the interpolated threshold round onto the lower
    one, which the source then keeps too; docs/semantics.md)."""
    c = np.array(conf)
    threshold = np.percentile(c, (1 - eta / 100) * 100)
    k = math.ceil((len(c) - 1) * (100.0 - eta) / 100.0)
    assert ((c >= threshold) == (c >= np.sort(c)[k])).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0.0, 1.0)), min_size=1, max_size=40),
       st.sampled_from([0.05, 0.2, 1.0, 5.0]))
def test_cisc_picks_what_the_source_softmax_vote_picks(votes, temp):
    """CISC's aggregator (google-research cisc/src/post_processing/aggregators.py majority_with_conf, SOFTMAX): the
    answer with the largest sum of softmax(conf / T); ties to the first answer. The twin's exp((c - 1) / T) differs
    only by a shared factor, so both pick the same answer unless two sums are within rounding of each other."""
    answers = [a for a, _ in votes]
    c = np.array([x for _, x in votes])
    x = c / temp
    w = np.exp(x - x.max())
    w = w / w.sum()
    total = Counter()
    for a, wi in zip(answers, w):
        total[a] += wi
    ranked = total.most_common()
    if len(ranked) > 1 and ranked[0][1] - ranked[1][1] <= 1e-9 * ranked[0][1]:
        return  # a near tie: rounding decides, in either implementation
    off = np.array([0, len(votes)])
    got = select_cisc(off, [1 if a == ranked[0][0] else 0 for a in answers], c, answers, range(len(votes)),
                      [len(votes)], temp)
    assert got == [1]


# --- the command line ------------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.mark.parametrize("rule", ["cisc", "deepconf"])
def test_a_pool_without_answers_is_refused_with_the_reason(rule):
    r = runner.invoke(app, ["replay", str(MATH), "--score", "conf", "--select", rule, "--seeds", "1", "--budgets",
                            "2"])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert f"--select {rule}" in r.output and "needs an 'answer' column, and this pool has none" in r.output
    assert "votes over the responses' answers" in r.output


@pytest.mark.parametrize("args,pattern", [(["--cisc-temp", "0"], "--cisc-temp must be >= 1/700"),
                                          (["--cisc-temp", "nan"], "--cisc-temp must be"),
                                          (["--deepconf-eta", "0"], "--deepconf-eta must be a percentage"),
                                          (["--deepconf-eta", "101"], "--deepconf-eta must be a percentage")])
def test_out_of_range_parameters_are_one_error_line(args, pattern):
    r = runner.invoke(app, ["replay", "--select", "cisc", "--seeds", "1", "--budgets", "2", *args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and pattern in r.output and len(r.output.strip().splitlines()) == 1


def test_replay_writes_the_columns(tmp_path):
    out = tmp_path / "r.parquet"
    r = runner.invoke(app, ["replay", "--select", "deepconf", "--deepconf-eta", "90", "--cisc-temp", "0.5",
                            "--policy", "uniform", "--seeds", "2", "--budgets", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import polars as pl
    df = pl.read_parquet(out)
    assert {"accuracy_cisc", "accuracy_deepconf", "cisc_temp", "deepconf_eta"} <= set(df.columns)
    assert df["accuracy"].to_list() == df["accuracy_deepconf"].to_list()
    assert set(df["deepconf_eta"]) == {90.0} and set(df["cisc_temp"]) == {0.5}
    # a pool without answers: the columns are there and NaN (the selection of accuracy is another one)
    out2 = tmp_path / "m.parquet"
    r = runner.invoke(app, ["replay", str(MATH), "--score", "conf", "--policy", "uniform", "--seeds", "1",
                            "--budgets", "2", "--out", str(out2)])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(out2)
    assert df["accuracy_cisc"].is_nan().all() and df["accuracy_deepconf"].is_nan().all()


def test_the_votes_run_under_score_gt_only_when_selected():
    """Under --score gt a confidence vote weighs responses by their correctness (an oracle): its columns are NaN
    unless --select asks for it, which spares the default replay the votes' pass."""
    pool = load_pool(DEFAULT_POOL)
    plain, _ = replay(pool, [RunConfig("uniform")], [4.0], [0, 1], select="bon")
    assert plain["accuracy_cisc"].is_nan().all() and plain["accuracy_deepconf"].is_nan().all()
    voted, _ = replay(pool, [RunConfig("uniform")], [4.0], [0, 1], select="cisc")
    assert not voted["accuracy_cisc"].is_nan().any() and not voted["accuracy_deepconf"].is_nan().any()
    assert voted["accuracy"].to_list() == voted["accuracy_cisc"].to_list()
