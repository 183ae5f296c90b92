"""Live runs (replay/live.py) against the engine: a live run over a pool-backed source equals the replay of that
pool on the same permutations, exactly; and a live run over a generating backend equals the replay of the pool
`ttc harvest` writes with the same model, template and seed."""
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.replay.engine import run_once
from ttc.replay.live import LIVE_POLICIES, Observed, PoolSource, run_live
from ttc.replay.policies import RunConfig

from support.equivalence import config_kwargs, configs, pools, record_lows
from support.live_sources import OneAtATime, Relabelled, _assert_same


def _live(source, sizes, rank, cfg, budget):
    return run_live(source, sizes, rank, budget_total=budget, **config_kwargs(cfg))


@pytest.mark.parametrize("source_kind", [Relabelled, OneAtATime])
@pytest.mark.parametrize("unit", ["samples", "tokens"])
@pytest.mark.parametrize("policy", LIVE_POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_over_a_pool_equals_replay(policy, unit, source_kind, data):
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools())
    cfg, budget = data.draw(configs(int(off[-1]), int(tok.sum()), policy, unit, live=True))
    lows = data.draw(record_lows(tok))[1] if policy == "deepconf-online" else None
    source = source_kind(off, correct, score, ans, tok, perm, lows=lows)
    live = _live(source, np.diff(off), rank, cfg, budget)
    _assert_same(live, run_once(*pool, cfg, budget, lows=lows), (cfg, budget))
    if source_kind is Relabelled:  # every response ready: one engine run, as replay
        assert live["runs"] == 1
    else:  # one run per response received, and one more that finishes
        assert live["runs"] == live["received"] + 1
        drawn = sum(live["n_drawn"])
        # only a token budget asks for responses it does not use: at most the one per query that did not fit
        assert drawn <= live["received"] <= drawn + (len(off) - 1 if unit == "tokens" else 0)
    # the responses each query received are the first n_drawn of its permutation, in order
    for i, got in enumerate(live["responses"]):
        assert [r.n_tokens for r in got] == [int(tok[perm[off[i] + k]]) for k in range(live["n_drawn"][i])]


def test_a_source_is_asked_again_only_for_what_did_not_fit():
    """Unit tokens: a response that does not fit is requested again by the next pull; the live run caches it."""
    calls = []

    class Counting(PoolSource):
        def response(self, i, k):
            calls.append((i, k))
            return super().response(i, k)

    off = np.array([0, 3, 6])
    tok = np.array([5, 5, 9, 1, 1, 1])
    perm = np.arange(6)
    src = Counting(off, np.zeros(6, np.int8), np.zeros(6), np.full(6, -1), tok, perm)
    run_live(src, [3, 3], [0, 1], policy="uniform", unit="tokens", budget_total=12)
    assert len(set(calls[:-4])) == len(calls[:-4])  # during the run each (i, k) once (the tail re-reads results)


def test_bad_requests_are_refused():
    src = PoolSource(np.array([0, 1]), np.zeros(1), np.zeros(1), np.zeros(1, int), np.zeros(1, int), np.arange(1))
    with pytest.raises(ValueError, match="cannot run live"):
        run_live(src, [1], [0], policy="oracle", budget_total=1)
    with pytest.raises(ValueError, match="permutation"):
        run_live(src, [1], [1], policy="uniform", budget_total=1)

    class Bad(PoolSource):
        def response(self, i, k):
            return Observed(False, 1.5, None, 0)

    with pytest.raises(ValueError, match="outside"):
        run_live(Bad(np.array([0, 1]), *[np.zeros(1)] * 4, np.arange(1)), [1], [0], policy="uniform", budget_total=1)


def test_live_generation_equals_replay_of_the_harvested_pool(tmp_path):
    """A tiny model: harvest a pool, then run policies live with the same model, template and seed; each live
    run must equal the replay of the harvested pool taken in sample order (token budgets make the decisions
    depend on every response's length)."""
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.datasets import load_queries
    from ttc.harvest.live import BackendSource
    from ttc.harvest.pipeline import HarvestSpec, plan_harvest, run_harvest
    from ttc.harvest.prompts import render, template_info
    from ttc.harvest.types import Sampling

    from support.tiny_model import make_tiny_model, single_thread_torch

    data = tmp_path / "q.jsonl"
    data.write_text("".join(f'{{"id": "q{i}", "problem": "problem {i}", "answer": "{i}"}}\n' for i in range(5)))
    queries = load_queries(str(data))
    model = make_tiny_model(tmp_path / "model")
    n, seed, max_tokens = 6, 7, 12
    with single_thread_torch():
        backend = TransformersBackend(str(model))
        prompt = lambda q: render("plain", q, backend.tokenizer)  # noqa: E731
        spec = HarvestSpec(model=str(model), backend="transformers", revision=None, dataset={"source": str(data)},
                           sampling=Sampling(n=n, max_tokens=max_tokens, seed=seed), template=template_info("plain"))
        run_harvest(plan_harvest(tmp_path / "pool", queries, spec), backend, prompt, progress=False)
        df = pl.read_parquet(tmp_path / "pool" / "samples").sort("query_id", "sample_idx")
        ids = sorted(q.query_id for q in queries)
        assert df["query_id"].unique().sort().to_list() == ids and df.height == n * len(ids)
        tok = df["n_tokens"].to_numpy()
        correct = np.zeros(df.height, np.int8)
        score = np.zeros(df.height)
        ans = np.full(df.height, -1)
        off = np.arange(0, df.height + 1, n)
        perm = np.arange(df.height)                 # sample order
        rank = np.array([3, 0, 4, 1, 2])
        by_id = {q.query_id: q for q in queries}
        source = BackendSource(backend, [by_id[q] for q in ids], prompt, Sampling(n=n, max_tokens=max_tokens,
                                                                                     seed=seed), lookahead=2)
        for policy in ("uniform", "elimination", "ucb", "streaming", "two-stage"):
            for unit, budget in (("tokens", int(tok.sum()) // 2), ("samples", 2 * len(ids))):
                cfg = RunConfig(policy, unit=unit)
                live = _live(source, [n] * len(ids), rank, cfg, budget)
                _assert_same(live, run_once(off, correct, score, ans, tok, perm, rank, cfg, budget), (cfg, budget))
        # the live responses are the harvested ones, text and all (asking for the rest generates them in turn)
        texts = df["text"].to_list()
        for i in range(len(ids)):
            for k in range(n):
                assert source.response(i, k).n_tokens == tok[i * n + k]
                assert source.text(i, k) == texts[i * n + k]


def test_backend_source_scores_math_answers_with_the_ground_truth_oracle():
    """A scripted backend whose k-th response of a query says \\boxed{k}: with gold answers 2 and 0, elimination
    stops each query at its first correct response; answers are normalised (\\dfrac collapses to \\frac)."""
    from ttc.harvest.live import BackendSource
    from ttc.harvest.pipeline import query_seed
    from ttc.harvest.types import Query, Response, Sampling

    class Scripted:
        tokenizer = None

        def generate(self, prompts, sampling, seeds, stop=None):
            out = []
            for p, s in zip(prompts, seeds):
                base = s - query_seed(sampling.seed, p)
                out.append([Response(f"Step 1: so \\boxed{{{base + j}}}" if base + j != 3 else "\\boxed{\\dfrac12}",
                                     5, "stop") for j in range(sampling.n)])
            return out

    qs = [Query("a", "math", "p", gold="2"), Query("b", "math", "p", gold="0")]
    src = BackendSource(Scripted(), qs, lambda q: q.query_id, Sampling(n=1, seed=3), lookahead=2, oracle="gt")
    out = run_live(src, [8, 8], [0, 1], policy="elimination", budget_total=16)
    assert list(out["n_drawn"]) == [3, 1] and out["covered"] == [True, True]
    assert [r.answer for r in out["responses"][0]] == ["0", "1", "2"]
    assert src.response(0, 3).answer == "\\frac{1}{2}" and not src.response(0, 3).correct
    with pytest.raises(ValueError, match="gold"):
        BackendSource(Scripted(), [Query("c", "math", "p")], str, Sampling(n=1), oracle="gt")


@pytest.mark.parametrize("policy", ["uniform", "elimination", "ucb", "two-stage", "streaming"])
def test_batched_generation_changes_the_calls_not_the_decisions(policy):
    """With batch=True a miss also tops up every active query whose cache is used up, in the same backend call:
    the decisions and responses equal an unbatched run; round-robin needs one call per round instead of one
    per query; and no query is generated for more than `lookahead` responses beyond what it received."""
    from ttc.harvest.live import BackendSource
    from ttc.harvest.pipeline import query_seed
    from ttc.harvest.types import Query, Response, Sampling

    class Scripted:  # response k of query q: correct when k hits the query's number, length varies with k
        tokenizer = None

        def __init__(self):
            self.prompts = 0

        def generate(self, prompts, sampling, seeds, stop=None):
            self.prompts += len(prompts)
            out = []
            for p, s in zip(prompts, seeds):
                base = s - query_seed(sampling.seed, p)
                out.append([Response(f"\\boxed{{{base + j}}}", 3 + (base + j) % 4, "stop") for j in range(sampling.n)])
            return out

    qs = [Query(f"q{i}", "math", "p", gold=str(g)) for i, g in enumerate([0, 3, 9, 1, 2, 99])]
    sizes, rank = [8] * len(qs), [2, 0, 5, 1, 4, 3]
    runs = {}
    for batch in (False, True):
        backend = Scripted()
        src = BackendSource(backend, qs, lambda q: q.query_id, Sampling(n=1, seed=5), lookahead=1, oracle="gt",
                            batch=batch)
        out = run_live(src, sizes, rank, policy=policy, budget_total=3 * len(qs))
        runs[batch] = (out, src.calls, backend.prompts, src)
    (a, calls_a, _, _), (b, calls_b, prompts_b, src_b) = runs[False], runs[True]
    for key in ("n_drawn", "answered", "covered", "sel_bon", "samples_used", "tokens_used"):
        assert a[key] == b[key], key
    assert a["responses"] == b["responses"]
    assert calls_a == sum(a["n_drawn"])  # unbatched, lookahead 1: one call per response
    assert calls_b < calls_a
    if policy == "uniform":  # three rounds over six queries: three calls of six prompts
        assert (calls_b, prompts_b) == (3, 18)
    assert all(len(src_b._cache[i]) <= b["n_drawn"][i] + 1 for i in range(len(qs)))


def test_a_batch_gives_each_query_the_seeds_of_its_own_next_samples():
    """Queries at different depths in one backend call: each continues from its own cached count."""
    from ttc.harvest.live import BackendSource
    from ttc.harvest.pipeline import query_seed
    from ttc.harvest.types import Query, Response, Sampling

    class Scripted:  # the text names the sample index the seed stands for
        tokenizer = None

        def __init__(self):
            self.calls = []

        def generate(self, prompts, sampling, seeds, stop=None):
            self.calls.append(list(prompts))
            return [[Response(f"{p}:{s - query_seed(sampling.seed, p) + j}", 1, "stop") for j in range(sampling.n)]
                    for p, s in zip(prompts, seeds)]

    backend = Scripted()
    src = BackendSource(backend, [Query(q, "math", "p") for q in "abc"], lambda q: q.query_id, Sampling(n=1, seed=9),
                        lookahead=2)
    for k in range(3):
        src.response(1, k)  # b: 4 cached (2 calls), 3 received
    depth = {0: 0, 1: 4, 2: None}  # a needs its first, b its fifth; c asks for no more
    src.watch(depth.get)
    src.response(0, 0)
    assert backend.calls[-1] == ["a", "b"]
    assert [src.text(0, k) for k in range(2)] == ["a:0", "a:1"]
    assert [src.text(1, k) for k in range(6)] == [f"b:{k}" for k in range(6)]
    assert len(src._cache[2]) == 0


def _window_pool(have0: int):
    """Two queries of 6 responses, query 0 holding have0 of them, query 1 all; elimination by windows of 4."""
    from ttc.replay.engine import pool_arrays, scratch
    from ttc.replay.tables import make_tables

    off = np.array([0, 6, 12], np.int64)
    correct = np.array([0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0], np.int8)
    score = correct.astype(float)
    ans = np.array([0, 1, 2, 2, 0, 1, 0, 1, 1, 1, 2, 0], np.int64)
    tok = np.full(12, 10, np.int64)
    have = np.array([have0, 6], np.int64)
    slots = np.diff(off) + 1
    P = pool_arrays(off, correct, score, ans, tok, make_tables(6, 0.95), have,
                    aoff=np.concatenate([[0], np.cumsum(slots)]))
    W = scratch(2, int(P.aoff[-1]), np.arange(12), np.array([0, 1]), 0, live=True)
    return off, correct, score, ans, tok, have, P, W


@pytest.mark.parametrize("budget, deferred", [(6, False), (16, True)])
def test_a_stop_inside_a_pull_leaves_the_state_as_before_it(budget, deferred):
    """The engine stops where a pull lacks a response and the next call goes on from there (kernel.run_one): a pull
    of a window of 4 that finds 2 of them leaves no trace (answer counts, scores, totals), the scheduler's state is
    kept (sch[0]["resume"]), and once the responses are there the same scratch finishes the run as one replay does.
    Budget 6 cannot pay a whole round (8 responses): the round runs in rank order and stops at query 0, first in it
    (resume 1: that pull again). Budget 16 pays two whole rounds, whose order is free (docs/semantics.md): query 0
    is deferred, query 1 makes its pulls, and the run stops after them (resume 2: the deferred queries again)."""
    from ttc.replay.engine import outcome
    from ttc.replay.kernel import CNT, NEED, SAMPLES, run_one_any

    off, correct, score, ans, tok, have, P, W = _window_pool(2)
    cfg = RunConfig("elimination", K=4, eliminate="sc-share", tau=0.5, m_min=4)
    run_one_any(P, W, cfg.record()[0], np.int64(budget), np.int64(0), True, True, None)
    assert W.tot[NEED] == 1 and W.sch[0]["resume"] == (2 if deferred else 1)  # stopped for query 0
    assert W.qs[0]["n"] == 0 and W.si[:int(P.aoff[1]), CNT].sum() == 0 and W.sf[:int(P.aoff[1])].sum() == 0
    # query 0 comes first in rank order: nothing was drawn before the stop, unless the block deferred it
    assert W.tot[SAMPLES] == W.qs[1]["n"] and (W.qs[1]["n"] > 0) == deferred
    have[0] = 6  # the responses arrive (P.have is a view of it)
    run_one_any(P, W, cfg.record()[0], np.int64(budget), np.int64(0), True, True, None)
    assert W.tot[NEED] == 0 and W.sch[0]["resume"] == 0
    whole = run_once(off, correct, score, ans, tok, np.arange(12), [0, 1], cfg, budget)
    got = outcome(P, W)
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_sc", "samples_used"):
        assert np.array_equal(np.asarray(got[key]), np.asarray(whole[key])), key


class Arriving(Relabelled):
    """A source with slots (run_live's `arrive`): each arrive() starts the wanted requests, the waiting ones first,
    up to `slots` in flight (a request: the query's next `count` responses), then finishes a random non-empty subset
    of those in flight, or those of `fast` first when any is in flight: responses come in any order across queries,
    as from a server whose requests take different times. log: (query, first index, in flight then) per request."""

    def __init__(self, *pool, slots=3, seed=0, fast=(), lows=None):
        super().__init__(*pool, lows=lows)
        self.slots, self.rng, self.fast = slots, np.random.default_rng(seed), set(fast)
        self.got = np.zeros(len(self.off) - 1, np.int64)
        self.flight: dict[int, int] = {}
        self.log: list[tuple[int, int, dict]] = []

    def ready(self, i):
        return int(self.got[i])

    def response(self, i, k):
        assert k < self.got[i], "the driver takes only responses that arrived"
        return super().response(i, k)

    def arrive(self, waiting, ahead=()):
        size = np.diff(self.off)
        for i, upto in [*waiting, *((q, 0) for q in ahead)]:
            if len(self.flight) >= self.slots:
                break
            count = min(max(1, upto - int(self.got[i])), int(size[i] - self.got[i]))
            if i in self.flight or count < 1:
                continue
            self.log.append((i, int(self.got[i]), {q: int(self.got[q]) for q in self.flight}))
            self.flight[i] = count
        assert self.flight, "the run waits and nothing is in flight"
        quick = [q for q in self.flight if q in self.fast]
        done = quick or [q for q in self.flight if self.rng.random() < 0.5] or [next(iter(self.flight))]
        for q in done:
            self.got[q] += self.flight.pop(q)
        return {}

    def close(self, keep=True):
        self.flight.clear()


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@pytest.mark.parametrize("policy", LIVE_POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), slots=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
def test_responses_arriving_in_any_order_change_nothing(policy, unit, data, slots, seed):
    """A source whose requests finish in any order across queries (arrive): the run equals the replay, exactly.
    Inside a block of round-robin rounds the budget pays in full, a query whose responses come early goes on to its
    next pulls while others wait (docs/run.md); everywhere else the run waits for the response it stopped at."""
    off, correct, score, ans, tok, perm, rank = pool = data.draw(pools())
    cfg, budget = data.draw(configs(int(off[-1]), int(tok.sum()), policy, unit, live=True))
    lows = data.draw(record_lows(tok))[1] if policy == "deepconf-online" else None
    source = Arriving(off, correct, score, ans, tok, perm, slots=slots, seed=seed, lows=lows)
    live = _live(source, np.diff(off), rank, cfg, budget)
    _assert_same(live, run_once(*pool, cfg, budget, lows=lows), (cfg, budget))
    for i, got in enumerate(live["responses"]):
        assert [r.n_tokens for r in got] == [int(tok[perm[off[i] + k]]) for k in range(live["n_drawn"][i])]


@pytest.mark.parametrize("policy", ["elimination", "uniform", "two-stage"])
def test_a_query_whose_responses_come_early_does_not_wait_for_the_round(policy):
    """Slot freeing: 4 queries x 8 responses, no query ever answered, a budget of 6 rounds paid in full. The last
    query's requests finish first whenever one is in flight: it asks for its 2nd, 3rd, ... response while the other
    queries' first are still in flight (a round-by-round run, or one that waits at the first query lacking a
    response, would wait for them), and the outcome is the replay's."""
    n, size = 4, 8
    off = np.arange(0, n * size + 1, size)
    correct, score = np.zeros(n * size, np.int8), np.zeros(n * size)
    ans, tok, perm, rank = np.arange(n * size) % 3, np.full(n * size, 5), np.arange(n * size), np.arange(n)
    cfg = RunConfig(policy, unit="samples", gamma=1.0, rho=0.99)  # (two-stage: its first stage pays 5 rounds)
    last = n - 1
    source = Arriving(off, correct, score, ans, tok, perm, slots=4, fast=[last])
    live = _live(source, np.diff(off), rank, cfg, 6 * n)
    _assert_same(live, run_once(off, correct, score, ans, tok, perm, rank, cfg, 6 * n), cfg)
    ahead = [(k, others) for i, k, others in source.log if i == last and k > 0]
    assert ahead and max(k for k, _ in ahead) >= 4  # it went through its block ahead of the others
    assert any(len(others) == n - 1 and set(others.values()) == {0} for k, others in ahead), \
        "the last query asked for a later response while only the others' first ones were in flight"
