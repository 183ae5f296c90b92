"""Depth (issue 30): the engine's depth view (a trace stopped by a depth rule or a trace cap) and Parallel-Probe
equal their plain-Python twins (replay/reference_depth.py) on random probed pools, in both budget units; a token
budget is never exceeded; the probes load from a pool and a pool without them refuses a depth policy."""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from ttc.replay import reference_depth as ref  # noqa: E402
from ttc.replay.engine import replay  # noqa: E402
from ttc.replay.kernel import (  # noqa: E402
    DEPTH_STABILITY,
    DEPTH_WHOLE,
    PROBE_COST_AUTOTTS,
    PROBE_COST_TOKENS,
    UNIT_SAMPLES,
    UNIT_TOKENS,
    answer_offsets,
    depth_view,
    fill_permutation,
    fill_query_order,
    parallel_probe_once,
)
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.pool import PoolError  # noqa: E402

from support.depth_pools import probed_arrays, probed_pool, traces_of  # noqa: E402

COSTS = {"tokens": PROBE_COST_TOKENS, "autotts": PROBE_COST_AUTOTTS}


def _view(arrays, rule, m, cap, cost):
    off, tok, ans, correct, poff, ptok, pans, pok = arrays
    n = len(tok)
    out = [np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int8), np.empty(n, np.int64)]
    depth_view(poff, ptok, pans, pok, tok, ans, correct, DEPTH_STABILITY if rule == "stability" else DEPTH_WHOLE, m,
               cap, COSTS[cost], *out)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), rule=st.sampled_from(["whole", "stability"]), m=st.integers(1, 4),
       cap=st.sampled_from([0, 300, 500, 1000, 1700, 2500]), cost=st.sampled_from(["tokens", "autotts"]))
def test_depth_view_equals_reference(seed, rule, m, cap, cost):
    arrays = probed_arrays(np.random.default_rng(seed))
    tok, ans, ok, reach = _view(arrays, rule, m, cap, cost)
    j = 0
    for q in traces_of(*arrays):
        for t in q:
            assert (tok[j], ans[j], ok[j]) == ref.stopped_trace(*t, rule=rule, m=m, cap=cap, cost=cost), (j, t)
            assert reach[j] == sum(1 for e in ref.trace_events(*t, cap=cap, cost=cost) if not e[3])
            j += 1


def test_depth_view_by_hand():
    # one trace: probes at 500 (a), 1000 (b), 1500 (b), 2000 (b), total 2200, final b
    arrays = (np.array([0, 1]), np.array([2200]), np.array([1]), np.array([1], np.int8), np.array([0, 4]),
              np.array([500, 1000, 1500, 2000]), np.array([0, 1, 1, 1]), np.array([0, 1, 1, 1], np.int8))
    assert [x[0] for x in _view(arrays, "whole", 3, 0, "tokens")] == [2200, 1, 1, 4]
    assert [x[0] for x in _view(arrays, "stability", 2, 0, "tokens")] == [1500, 1, 1, 4]  # b, b at 1500
    assert [x[0] for x in _view(arrays, "stability", 4, 0, "tokens")] == [2200, 1, 1, 4]  # never 4 in a row
    assert [x[0] for x in _view(arrays, "whole", 3, 1200, "tokens")] == [1200, 1, 1, 2]  # capped: probe at 1000
    assert [x[0] for x in _view(arrays, "whole", 3, 400, "tokens")] == [400, -1, 0, 0]  # below the first probe
    # a probe past the end (AutoTTS's files have them): never reached under tokens, paid under autotts
    late = (np.array([0, 1]), np.array([1800]), np.array([1]), np.array([1], np.int8), np.array([0, 4]),
            np.array([500, 1000, 1500, 2000]), np.array([0, 0, 0, 0]), np.array([1, 1, 1, 1], np.int8))
    assert [x[0] for x in _view(late, "whole", 3, 0, "tokens")] == [1800, 1, 1, 3]
    assert [x[0] for x in _view(late, "whole", 3, 0, "autotts")] == [2000, 1, 1, 4]


def _pp_engine(arrays, perm, order, chains, T, patience, warm, unit, budget, tight=False):
    """tight: each query's answer slots just cover the answers its traces hold (as the engine sizes them), so a
    query with more traces than slots takes the majority from its slots; else ten or more slots each."""
    off, tok, ans, correct, poff, ptok, pans, pok = arrays
    n = len(tok)
    end_tok, end_ans, end_ok, reach = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int8), \
        np.empty(n, np.int64)
    depth_view(poff, ptok, pans, pok, tok, ans, correct, DEPTH_WHOLE, 1, 0, PROBE_COST_TOKENS, end_tok, end_ans,
               end_ok, reach)
    top = np.array([max([ans[j], *pans[poff[j]:poff[j + 1]]]) for j in range(n)], np.int64)
    aoff = answer_offsets(off, top if tight else np.maximum(ans, 10))
    return parallel_probe_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, perm, order,
                               chains, T, patience, warm, unit, budget)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), chains=st.integers(1, 6), T=st.integers(1, 4), patience=st.integers(1, 3),
       warm=st.integers(0, 3), unit=st.sampled_from(["samples", "tokens"]), budget=st.integers(0, 40000),
       tight=st.booleans())
def test_parallel_probe_equals_reference(seed, chains, T, patience, warm, unit, budget, tight):
    # (tight: the majority from the answer slots where a query has more traces than slots, else from its traces)
    rng = np.random.default_rng(seed)
    arrays = probed_arrays(rng, n_queries=int(rng.integers(1, 5)), max_traces=12 if tight else 6)
    off = arrays[0]
    n = len(off) - 1
    perm = np.concatenate([off[i] + rng.permutation(off[i + 1] - off[i]) for i in range(n)]).astype(np.int64)
    order = rng.permutation(n).astype(np.int64)
    if unit == "samples":
        budget = budget % 25
    qi, tot, _, _ = _pp_engine(arrays, perm, order, chains * (2 if tight else 1), T, patience, warm,
                               UNIT_SAMPLES if unit == "samples" else UNIT_TOKENS, budget, tight)
    traces = traces_of(*arrays)
    permuted = [[traces[i][perm[p] - off[i]] for p in range(off[i], off[i + 1])] for i in range(n)]
    out, samples, tokens = ref.parallel_probe(permuted, list(order), budget, chains=chains * (2 if tight else 1), T=T,
                                              patience=patience, warm=warm, unit=unit)
    assert (int(tot[0]), int(tot[1])) == (samples, tokens)
    for i in range(n):
        assert (qi[i, 5], qi[i, 6], qi[i, 4] == 2, qi[i, 0]) == out[i], i
    if unit == "tokens":
        assert tokens <= budget


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), b=st.integers(1, 5000), cap=st.sampled_from([0, 1000]),
       rule=st.sampled_from(["whole", "stability"]), cost=st.sampled_from(["tokens", "autotts"]))
def test_token_budget_never_exceeded(seed, b, cap, rule, cost):
    # (both probe-cost conventions: AutoTTS's pays probes past a trace's end, so a trace can cost more than its length)
    pool = probed_pool(np.random.default_rng(seed), n_queries=5)
    configs = [RunConfig("parallel-probe", unit="tokens", chains=3, stable=2, patience=2, probe_warmup=1,
                         trace_cap=cap, probe_cost=cost),
               RunConfig("elimination", unit="tokens", eliminate="sc-share", depth_rule=rule, trace_cap=cap,
                         probe_cost=cost),
               RunConfig("ucb", unit="tokens", depth_rule=rule, trace_cap=cap, K=2, probe_cost=cost),
               RunConfig("entropy", unit="tokens", depth_rule=rule, trace_cap=cap, probe_cost=cost),
               RunConfig("uniform", unit="tokens", depth_rule=rule, trace_cap=cap, probe_cost=cost),
               RunConfig("cmc", unit="tokens", cmc_beta=0.5, trace_cap=cap, probe_cost=cost)]
    df, _ = replay(pool, configs, [b], range(3), select="sc")
    assert (df["tokens_used"] <= df["budget_total"]).all()
    assert df["tokens_used"].max() >= 0


def test_grid_uses_the_width_permutation():
    # _depth_grid draws chains in fill_permutation's order and ranks queries as fill_query_order does: a grid run
    # equals parallel_probe_once on those arrays
    pool = probed_pool(np.random.default_rng(3), n_queries=6)
    c = RunConfig("parallel-probe", unit="tokens", chains=3, stable=2, patience=2, probe_warmup=1)
    df, pq = replay(pool, [c], [4000], [11], select="sc", per_query=True)
    arrays = (pool.off, pool.tok, pool.ans, pool.correct, pool.probe_off, pool.probe_tok, pool.probe_ans,
              pool.probe_ok.astype(np.int8))
    perm = np.empty(int(pool.off[-1]), np.int64)
    fill_permutation(pool.off, pool.qkeys, 11, perm)
    order, rank = np.empty(pool.n_queries, np.int64), np.empty(pool.n_queries, np.int64)
    fill_query_order(pool.qkeys, 11, rank, order)
    qi, tot, _, _ = _pp_engine(arrays, perm, order, 3, 2, 2, 1, UNIT_TOKENS, 4000 * pool.n_queries)
    assert df["tokens_used"][0] == tot[1] and df["samples_used"][0] == tot[0]
    assert df["accuracy"][0] == pytest.approx(qi[:, 6].mean())
    assert pq["n_drawn"].to_list() == qi[:, 0].tolist()


def test_width_policy_under_a_depth_rule_is_the_policy_on_the_stopped_traces():
    # elimination with a stability rule draws the traces the depth view stops: the same run as on that view's pool
    import dataclasses

    from ttc.replay.engine import depth_view_arrays

    pool = probed_pool(np.random.default_rng(5), n_queries=8)
    tok, ans, ok, _ = depth_view_arrays(pool, ("stability", 2, 0, "tokens"))
    view = dataclasses.replace(pool, tok=tok, ans=ans, correct=ok, score=ok.astype(float), probe_off=None)
    a, _ = replay(pool, [RunConfig("elimination", unit="tokens", depth_rule="stability", depth_m=2,
                                   eliminate="sc-share")], [2000], range(4), select="sc")
    b, _ = replay(view, [RunConfig("elimination", unit="tokens", eliminate="sc-share")], [2000], range(4),
                  select="sc")
    assert a["accuracy"].to_list() == b["accuracy"].to_list()
    assert a["tokens_used"].to_list() == b["tokens_used"].to_list()
    whole, _ = replay(pool, [RunConfig("elimination", unit="tokens", eliminate="sc-share")], [2000], range(4),
                      select="sc")
    assert a["tokens_used"].to_list() != whole["tokens_used"].to_list()  # the rule changed the runs


def test_a_pool_without_probes_refuses_a_depth_policy():
    import dataclasses

    pool = dataclasses.replace(probed_pool(np.random.default_rng(1)), probe_off=None, has_probes=False)
    for c in (RunConfig("parallel-probe"), RunConfig("uniform", trace_cap=1000),
              RunConfig("ucb", depth_rule="stability")):
        with pytest.raises(PoolError, match="needs each trace's probes"):
            replay(pool, [c], [4], range(1), select="sc")
    with pytest.raises(PoolError, match="--select sc"):
        replay(probed_pool(np.random.default_rng(1)), [RunConfig("parallel-probe")], [4], range(1), select="bon")


def test_a_probed_pool_replays_from_disk(tmp_path):
    # the pools issue's loader (load_pool(probes=True)) feeds the depth engine: a pool written with probe columns
    import polars as pl

    from ttc.replay.pool import load_pool, samples_frame, write_pool

    df = samples_frame({"query_id": ["q", "q"], "sample_idx": [0, 1], "correct": [True, False],
                        "answer": ["7", "3"], "n_tokens": [1200, 900]}).with_columns(
        pl.Series("probe_answer", [["5", None], ["7"]], pl.List(pl.String)),
        pl.Series("probe_tokens", [[500, 1000], [500]], pl.List(pl.Int64)),
        pl.Series("probe_correct", [[False, None], [True]], pl.List(pl.Boolean)))
    out = write_pool(tmp_path / "p", df, {"name": "p"})
    p = load_pool(out, probes=True)
    # each trace capped at 600 tokens: trace 0 holds "5" (wrong) at 600, trace 1 "7" (right) at 600
    r, _ = replay(p, [RunConfig("uniform", unit="tokens", trace_cap=600)], [600], range(20), select="sc")
    assert set(r["tokens_used"].to_list()) == {600}  # one capped trace fits, the second does not
    # one trace per query's worth of budget: accuracy is the drawn trace's probe, half the seeds each way
    r1, _ = replay(p, [RunConfig("uniform", trace_cap=600)], [1], range(40), select="sc")
    assert 0 < r1["accuracy"].mean() < 1
    pp, _ = replay(p, [RunConfig("parallel-probe", unit="tokens", chains=2, stable=1, patience=1, probe_warmup=0)],
                   [10**6], range(3), select="sc")
    assert set(pp["samples_used"].to_list()) == {2}


def test_sc_at_k_is_the_enumerated_expectation():
    # every ordered draw of k from tiny queries, the engine's tie rule (the answer that reached the leading count
    # first) applied to each: the exact expectation sc_at_k computes
    import itertools
    from fractions import Fraction

    from ttc.replay.exact import sc_at_k
    from ttc.replay.pool import Pool

    rng = np.random.default_rng(7)
    for _ in range(6):
        sizes = rng.integers(1, 6, 3)
        off = np.concatenate([[0], np.cumsum(sizes)])
        ans = np.minimum(rng.integers(-1, 3, off[-1]), sizes.repeat(sizes) - 1)
        pool = Pool.from_arrays(off, correct=(ans == 1).astype(np.int8), ans=ans)
        k = int(sizes.min())
        want = Fraction(0)
        for i in range(3):
            a = pool.ans[off[i]:off[i + 1]]
            hits = total = 0
            for draw in itertools.permutations(range(len(a)), k):
                cnt, lead, lc = {}, -1, 0
                for j in draw:
                    if a[j] < 0:
                        continue
                    cnt[a[j]] = cnt.get(a[j], 0) + 1
                    if cnt[a[j]] > lc:
                        lead, lc = a[j], cnt[a[j]]
                total += 1
                hits += lead >= 0 and bool(pool.correct[off[i] + list(a).index(lead)])
            want += Fraction(hits, total)
        assert sc_at_k(pool, [k])[0] == pytest.approx(float(want / 3), abs=1e-12)


def _disk_pool(tmp_path, probes=True):
    import polars as pl

    from ttc.replay.pool import samples_frame, write_pool

    rng = np.random.default_rng(11)
    off, tok, ans, correct, poff, ptok, pans, pok = probed_arrays(rng, n_queries=6)
    q = np.repeat(np.arange(len(off) - 1), np.diff(off))
    name = lambda a: None if a < 0 else str(a)  # noqa: E731
    df = samples_frame({"query_id": [f"q{i}" for i in q], "sample_idx": [int(j - off[i]) for j, i in enumerate(q)],
                        "correct": correct.astype(bool).tolist(), "answer": [name(a) for a in ans],
                        "n_tokens": tok.tolist()})
    if probes:
        df = df.with_columns(
            pl.Series("probe_answer", [[name(pans[k]) for k in range(poff[j], poff[j + 1])] for j in range(len(tok))],
                      pl.List(pl.String)),
            pl.Series("probe_tokens", [ptok[poff[j]:poff[j + 1]].tolist() for j in range(len(tok))],
                      pl.List(pl.Int64)),
            pl.Series("probe_correct", [[None if pans[k] < 0 else bool(pok[k]) for k in range(poff[j], poff[j + 1])]
                                        for j in range(len(tok))], pl.List(pl.Boolean)))
    return write_pool(tmp_path / ("probed" if probes else "bare"), df, {"name": "probed"})


def test_cli_replays_a_depth_policy_and_a_pool_without_probes_refuses_in_one_line(tmp_path):
    import polars as pl
    from typer.testing import CliRunner

    from ttc.cli import app

    runner = CliRunner()
    pool = _disk_pool(tmp_path)
    r = runner.invoke(app, ["replay", str(pool), "--policy", "parallel-probe,uniform,cmc", "--select", "sc", "--unit",
                            "tokens", "--budgets", "3000", "--seeds", "3", "--chains", "3", "--stable", "2",
                            "--trace-cap", "2000", "--out", str(tmp_path / "o.parquet")])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(tmp_path / "o.parquet")
    assert set(df["config"]) == {"parallel-probe(chains=3, stable=2, trace_cap=2000, tokens)",
                                 "uniform(trace_cap=2000, tokens)", "cmc(trace_cap=2000, tokens)"}
    assert (df["tokens_used"] <= df["budget_total"]).all()
    r = runner.invoke(app, ["replay", str(pool), "--policy", "ucb", "--depth-rule", "stability", "--select", "sc",
                            "--seeds", "2"])
    assert r.exit_code == 0 and "ucb(depth=stability:3)" in r.output, r.output
    bare = _disk_pool(tmp_path, probes=False)
    for extra in (["--policy", "parallel-probe", "--select", "sc"], ["--policy", "cmc", "--select", "sc"],
                  ["--trace-cap", "1000"],
                  ["--depth-rule", "stability"]):
        r = runner.invoke(app, ["replay", str(bare), "--seeds", "2", *extra])
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("error:") and "probe" in r.output, \
            r.output
    r = runner.invoke(app, ["replay", str(pool), "--policy", "parallel-probe", "--seeds", "2"])
    assert r.exit_code == 2 and "--select sc" in r.output, r.output


def _cmc_engine(arrays, perm, order, beta, unit, budget):
    from ttc.replay.engine import cmc_knobs
    from ttc.replay.kernel import cmc_once

    off, tok, ans, correct, poff, ptok, pans, pok = arrays
    n = len(tok)
    end_tok, end_ans, end_ok, reach = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int8), \
        np.empty(n, np.int64)
    depth_view(poff, ptok, pans, pok, tok, ans, correct, DEPTH_WHOLE, 1, 0, PROBE_COST_TOKENS, end_tok, end_ans,
               end_ok, reach)
    aoff = answer_offsets(off, np.maximum(ans, 10))
    kn, kf = cmc_knobs(beta)
    return cmc_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, perm, order, kn, kf, unit,
                    budget)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), beta=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
       unit=st.sampled_from(["samples", "tokens"]), budget=st.integers(0, 60000), many=st.booleans())
def test_cmc_equals_reference(seed, beta, unit, budget, many):
    rng = np.random.default_rng(seed)
    arrays = probed_arrays(rng, n_queries=int(rng.integers(1, 4)), max_traces=12 if many else 6, max_probes=10)
    off = arrays[0]
    n = len(off) - 1
    perm = np.concatenate([off[i] + rng.permutation(off[i + 1] - off[i]) for i in range(n)]).astype(np.int64)
    order = rng.permutation(n).astype(np.int64)
    if unit == "samples":
        budget = budget % 30
    qi, tot, _ = _cmc_engine(arrays, perm, order, beta, UNIT_SAMPLES if unit == "samples" else UNIT_TOKENS, budget)
    traces = traces_of(*arrays)
    permuted = [[traces[i][perm[p] - off[i]] for p in range(off[i], off[i + 1])] for i in range(n)]
    out, samples, tokens = ref.cmc(permuted, list(order), budget, beta=beta, unit=unit)
    assert (int(tot[0]), int(tot[1])) == (samples, tokens)
    for i in range(n):
        assert (qi[i, 3], qi[i, 4], qi[i, 2] == 2, qi[i, 0]) == out[i], i


def test_cmc_grid_uses_the_width_permutation():
    from ttc.replay.engine import cmc_knobs

    pool = probed_pool(np.random.default_rng(4), n_queries=6, max_traces=10, max_probes=8)
    df, pq = replay(pool, [RunConfig("cmc", unit="tokens", cmc_beta=0.3)], [6000], [5], select="sc", per_query=True)
    arrays = (pool.off, pool.tok, pool.ans, pool.correct, pool.probe_off, pool.probe_tok, pool.probe_ans,
              pool.probe_ok.astype(np.int8))
    perm = np.empty(int(pool.off[-1]), np.int64)
    fill_permutation(pool.off, pool.qkeys, 5, perm)
    order, rank = np.empty(pool.n_queries, np.int64), np.empty(pool.n_queries, np.int64)
    fill_query_order(pool.qkeys, 5, rank, order)
    qi, tot, _ = _cmc_engine(arrays, perm, order, 0.3, UNIT_TOKENS, 6000 * pool.n_queries)
    assert df["tokens_used"][0] == tot[1] and df["samples_used"][0] == tot[0]
    assert df["accuracy"][0] == pytest.approx(qi[:, 4].mean())
    assert pq["n_drawn"].to_list() == qi[:, 0].tolist()
    assert cmc_knobs(0.5)[0].tolist() == [5, 34, 6, 8, 5, 2, 2, 4]  # Python's round: 7.5 -> 8, 2.5 -> 2, 3.5 -> 4


def test_depth_grids_give_the_same_runs_on_any_number_of_threads():
    # run_probe_grid splits the seeds over worker threads as run_grid does: each seed's run is the same
    from ttc.replay.engine import get_threads, set_threads

    pool = probed_pool(np.random.default_rng(9), n_queries=6, max_traces=10, max_probes=8)
    cfgs = [RunConfig("parallel-probe", unit="tokens", chains=4, stable=2, patience=2, probe_warmup=1),
            RunConfig("cmc", unit="tokens", cmc_beta=0.6)]
    before = get_threads()
    try:
        out = []
        for t in (1, 2):
            set_threads(t)
            out.append(replay(pool, cfgs, [2000, 9000], range(7), select="sc", per_query=True))
    finally:
        set_threads(before)
    assert out[0][0].equals(out[1][0]) and out[0][1].equals(out[1][1])


def _one_query_cmc(seed, top):
    """cmc on one query of 4-19 traces of up to 29 probes, 2-7 answers, under a token budget below `top`: the engine's
    run and the reference's, as (traces, tokens, (answer, correct, stopped by the gate, traces))."""
    rng = np.random.default_rng(seed)
    arrays = probed_arrays(rng, n_queries=1, max_traces=int(rng.integers(4, 20)), n_answers=int(rng.integers(2, 8)),
                           max_probes=int(rng.integers(4, 30)), extra=0.0)
    beta = float(rng.choice([0.25, 0.5, 0.75, 1.0]))
    off = arrays[0]
    perm = (off[0] + rng.permutation(off[1] - off[0])).astype(np.int64)
    budget = int(rng.integers(500, top))
    qi, tot, _ = _cmc_engine(arrays, perm, np.zeros(1, np.int64), beta, UNIT_TOKENS, budget)
    permuted = [[traces_of(*arrays)[0][p] for p in perm]]
    out, samples, tokens = ref.cmc(permuted, [0], budget, beta=beta, unit="tokens")
    return (int(tot[0]), int(tot[1]), (qi[0, 3], qi[0, 4], qi[0, 2] == 2, qi[0, 0])), (samples, tokens, out[0])


def test_cmc_rounds_near_the_budgets_end_and_their_completions_equal_the_reference():
    # A round that fits in the budget left (live traces x burst x the costliest segment) is served in trace order
    # with no budget check, its completions taken afterwards in the serving order (probes run, most first; then trace
    # order: an answer's first completion breaks ties); the others one by one in that order, each checked. Long
    # traces under burst and budgets that end mid-run: without the burst in the bound (seed 7 the first of these)
    # or with the completions in trace order (seed 5120, found by search), the runs differ.
    for seed in [*range(100), 5120]:
        engine, reference = _one_query_cmc(seed, 200000 if seed == 5120 else 60000)
        assert engine == reference, seed
