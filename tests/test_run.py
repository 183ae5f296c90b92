"""`ttc run`'s own path (harvest/run.py: plan_run, execute) against a backend that answers from a pool: for every live
policy, unit and oracle, the run equals `ttc replay`'s engine (replay.engine.replay, the grid every `ttc replay` runs)
on the same pool and seed, query by query (responses, answered, capped, exhausted, covered, the selection's
correctness) and in total; one backend call per allocation round; faults retried or isolated; bad input refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.pipeline import query_seed  # noqa: E402
from ttc.harvest.run import RunError, execute, plan_run  # noqa: E402
from ttc.harvest.types import Sampling  # noqa: E402
from ttc.replay.errors import InputError  # noqa: E402
from ttc.replay.live import LIVE_POLICIES  # noqa: E402
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.rng import permutation  # noqa: E402

from support.synth_run import SEED, PoolBackend, SynthPool, _dense, assert_equal, request, run  # noqa: E402


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return SynthPool(tmp_path_factory.mktemp("synth"))


@pytest.mark.parametrize("unit", ["samples", "tokens"])
# (deepconf-online reads record lows, which this pool lacks: test_run_deepconf.py; uab a side signal it does not
# record: tests/test_uab.py runs it live)
@pytest.mark.parametrize("policy", [p for p in LIVE_POLICIES if p not in ("deepconf-online", "uab")])
def test_every_live_policy_equals_replay(sp, tmp_path, policy, unit):
    budget = 3.0 if unit == "samples" else 45.0
    o = run(sp, tmp_path / "out", policy=policy, unit=unit, budget=budget)
    assert_equal(o, sp, RunConfig(policy, unit=unit), budget)
    # the selected response is the pool's: its answer is graded as the result says
    for r in o.results:
        if r["selected"] >= 0:
            gold = sp.gold[sp.ids.index(r["query_id"])]
            assert (r["answer"] == gold) == r["correct"]


@pytest.mark.parametrize("policy, kw", [
    ("ucb", dict(K=2, lam=0.5, max_samples=6)),
    ("entropy", dict(K=2)),
    ("gap", dict(gamma=0.5, eps=0.1)),
    ("two-stage", dict(rho=0.25)),
    ("elimination", dict(eliminate="sc-share", tau=0.5, m_min=2)),
    ("streaming", dict(eliminate="sc-beta", max_samples=5)),
    ("elimination", dict(K=2, eliminate="esc", max_samples=6)),
    ("ucb", dict(eliminate="ac-majority", share=0.6)),
    ("elimination", dict(eliminate="ac-entropy", hmax=0.5)),
])
@pytest.mark.parametrize("select", ["bon", "sc", "weighted"])
def test_parameters_and_selections_equal_replay(sp, tmp_path, policy, kw, select):
    o = run(sp, tmp_path / "out", policy=policy, select=select, budget=4.0, **kw)
    cfg = RunConfig(policy, **{k: v for k, v in kw.items()})
    assert_equal(o, sp, cfg, 4.0, select)


@pytest.mark.parametrize("policy, eliminate", [("uniform", None), ("elimination", "sc-share"),
                                               ("elimination", "sc-beta"), ("entropy", "sc-beta"),
                                               ("streaming", "sc-share")])
def test_answer_agreement_equals_replay_without_ground_truth(sp, tmp_path, policy, eliminate):
    """--oracle sc: no gold needed, answers alone decide; equal to replay of the pool without its correct
    column; the selection is the majority answer (checked against the responses drawn)."""
    o = run(sp, tmp_path / "out", policy=policy, oracle="sc", eliminate=eliminate, budget=4.0)
    cfg = RunConfig(policy, eliminate=eliminate or "sc-share")
    assert_equal(o, sp, cfg, 4.0, "sc", gt=False)
    assert all(r["correct"] is None and r["covered"] is None for r in o.results)
    samples = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    assert "correct" not in samples.columns and "answer" in samples.columns
    for r in o.results:
        drawn = samples.filter((pl.col("query_id") == r["query_id"]) & (pl.col("sample_idx") < r["responses"]))
        counts = drawn.drop_nulls("answer").group_by("answer").len()
        if counts.height:
            assert r["answer"] in counts.filter(pl.col("len") == counts["len"].max())["answer"].to_list()


def test_one_backend_call_per_round(sp, tmp_path):
    """Round-robin: each round's requests go to the backend in one call (not one per response), and a round holds
    every query still active."""
    backend = PoolBackend(sp)
    o = run(sp, tmp_path / "u", backend, policy="uniform", budget=4.0, plan_ahead=False)
    assert backend.calls == 4 and backend.prompts_per_call == [sp.n] * 4
    assert o.summary["cost"]["backend_calls"] == 4
    backend = PoolBackend(sp)
    o = run(sp, tmp_path / "e", backend, policy="elimination", budget=4.0)
    rounds = max(r["responses"] for r in o.results)
    assert backend.calls == rounds
    assert backend.prompts_per_call == sorted(backend.prompts_per_call, reverse=True)  # answered queries leave
    assert backend.prompts_per_call[0] == sp.n and backend.prompts_per_call[-1] < sp.n


def _same_outputs(a: Path, b: Path):
    """Two runs' results (JSONL less its creation time, Parquet), pools' samples and responses per query agree."""
    la = [json.loads(x) for x in (a / "results.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (b / "results.jsonl").read_text().splitlines()]
    for x in la + lb:
        if x["response"] is not None:
            x["response"]["body"].pop("created")
    assert la == lb
    assert pl.read_parquet(a / "results.parquet").equals(pl.read_parquet(b / "results.parquet"))
    sa = pl.read_parquet(a / "pool" / "samples").sort("query_id", "sample_idx")
    sb = pl.read_parquet(b / "pool" / "samples").sort("query_id", "sample_idx")
    assert sa.equals(sb)


@pytest.mark.parametrize("budget, lookahead", [(4.0, 1), (4.5, 1), (4.0, 3), (7.5, 2)])
def test_uniform_generates_its_whole_allocation_up_front(sp, tmp_path, budget, lookahead):
    """uniform with a sample budget reads no response: its allocation is known before the first one, and every
    query's responses go to the backend at once, one call per distinct count (here one: every query gets the same,
    the last partial round's requests included as round by round). Results, pool and accounting are those of the
    run made round by round."""
    rounds = PoolBackend(sp)
    a = run(sp, tmp_path / "rounds", rounds, policy="uniform", budget=budget, lookahead=lookahead, plan_ahead=False)
    ahead = PoolBackend(sp)
    b = run(sp, tmp_path / "ahead", ahead, policy="uniform", budget=budget, lookahead=lookahead)
    _same_outputs(tmp_path / "rounds", tmp_path / "ahead")
    assert rounds.calls == -(-int(np.ceil(budget)) // lookahead) and ahead.calls == 1
    assert ahead.prompts_per_call == [sp.n]
    for key in ("responses_generated", "responses_used", "completion_tokens_generated", "completion_tokens_used"):
        assert a.summary["cost"][key] == b.summary["cost"][key], key
    assert b.summary["cost"]["backend_calls"] == 1
    assert_equal(b, sp, RunConfig("uniform"), budget)


@pytest.mark.parametrize("kw", [dict(policy="uniform", unit="tokens", budget=40.0),
                                dict(policy="elimination", budget=4.0)])
def test_an_allocation_that_reads_responses_is_not_planned(sp, tmp_path, kw):
    """A token budget (a response's length decides whether the next fits) or a policy that reads scores: round by
    round, as without the plan."""
    a, b = PoolBackend(sp), PoolBackend(sp)
    run(sp, tmp_path / "a", a, **kw)
    run(sp, tmp_path / "b", b, plan_ahead=False, **kw)
    assert a.calls == b.calls > 1 and a.prompts_per_call == b.prompts_per_call
    _same_outputs(tmp_path / "a", tmp_path / "b")


def test_a_plan_makes_one_call_per_distinct_count(sp):
    """BackendSource.plan: queries needing the same number of responses more go together, largest first, each drawn
    with the seeds it has on demand (the same responses as one call per response); whatever is asked beyond the
    plan is generated on demand."""
    from ttc.harvest.live import BackendSource
    from ttc.harvest.types import Query

    queries = [Query(q, "math", f"problem {q}", g) for q, g in zip(sp.ids, sp.gold)]

    def source(backend):
        return BackendSource(backend, queries, lambda q: q.problem, Sampling(n=1, max_tokens=64, seed=SEED),
                             lookahead=1, oracle="gt", retry_delay_s=0.0)

    planned = PoolBackend(sp)
    src = source(planned)
    targets = [3, 5, 0, 5, 3, 1] + [5] * (sp.n - 6)
    src.plan(targets)
    assert src.response(1, 0) is not None
    assert [len(src._cache[i]) for i in range(sp.n)] == targets
    assert planned.calls == 3 and planned.prompts_per_call == [sp.n - 4, 2, 1]  # counts 5, 3, 1
    one = source(PoolBackend(sp))  # one response per call
    for i, t in enumerate(targets):
        for k in range(t):
            assert one.response(i, k) == src.response(i, k) and one.text(i, k) == src.text(i, k)
    src.response(2, 0)  # beyond the plan: on demand
    assert planned.calls == 4 and planned.prompts_per_call[-1] == 1
    with pytest.raises(ValueError, match="one count"):
        src.plan([1, 2])


def test_a_planned_query_that_keeps_failing_is_isolated_and_the_others_go_on(sp, tmp_path):
    """A query whose every request fails: with the plan its call is split until it is found, it keeps nothing, and the
    others get its share, exactly as round by round."""
    bad = "q05"
    runs = {}
    for name, ahead in (("rounds", False), ("ahead", True)):
        backend = PoolBackend(sp, fail={bad: None})
        runs[name] = run(sp, tmp_path / name, backend, policy="uniform", budget=5.0, plan_ahead=ahead)
    _same_outputs(tmp_path / "rounds", tmp_path / "ahead")
    by_id = {r["query_id"]: r for r in runs["ahead"].results}
    assert by_id[bad]["status"] == "failed" and by_id[bad]["responses"] == 0
    assert sum(r["responses"] for r in runs["ahead"].results) == 5 * sp.n


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from support.synth_run import PoolBackend, SynthPool, request
from ttc.harvest.run import execute, plan_run
sp = SynthPool(Path({data!r}))
execute(plan_run(request(sp, Path({out!r}), policy="uniform", budget={budget!r}, plan_ahead={ahead!r})),
        PoolBackend(sp), None, echo=lambda s: None)
"""


@pytest.mark.parametrize("ahead_first, crash_at", [(True, 0), (False, 2)])
def test_a_killed_planned_run_resumes_to_the_same_results(sp, tmp_path, ahead_first, crash_at):
    """Killed hard (harvest.run.CRASH_ENV: the part holding call K torn) while generating the plan, or round by round
    after two rounds: the rerun plans what is left (one call) and ends exactly as an uninterrupted run."""
    import os
    import subprocess

    from ttc.harvest.run import CRASH_ENV

    whole = run(sp, tmp_path / "whole", policy="uniform", budget=4.5)
    code = CHILD.format(tests=str(HERE), data=str(sp.path.parent), out=str(tmp_path / "cut"), budget=4.5,
                        ahead=ahead_first)
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, CRASH_ENV: str(crash_at)},
                          capture_output=True, text=True, timeout=300, cwd=HERE.parent)
    assert proc.returncode == 75, proc.stderr[-2000:]
    parts = sorted((tmp_path / "cut" / "pool" / "samples").glob("part-*.parquet"))
    assert list((tmp_path / "cut" / "pool" / "samples").glob(".part-*.tmp-*"))  # the torn part never became one
    assert sum(pl.read_parquet(f).height for f in parts) == crash_at * sp.n
    assert not (tmp_path / "cut" / "results.jsonl").exists()
    rest = PoolBackend(sp)
    resumed = run(sp, tmp_path / "cut", rest, policy="uniform", budget=4.5)
    assert resumed.resumed == bool(crash_at) and rest.calls == 1 and rest.prompts_per_call == [sp.n]
    _same_outputs(tmp_path / "whole", tmp_path / "cut")
    assert resumed.summary["cost"]["responses_generated"] == whole.summary["cost"]["responses_generated"]


def test_lookahead_changes_the_calls_not_the_results(sp, tmp_path):
    a = run(sp, tmp_path / "a", policy="ucb", budget=4.0, lookahead=1)
    b = run(sp, tmp_path / "b", policy="ucb", budget=4.0, lookahead=3)
    assert [(r["responses"], r["selected"], r["answer"]) for r in a.results] == \
        [(r["responses"], r["selected"], r["answer"]) for r in b.results]
    assert b.summary["cost"]["backend_calls"] < a.summary["cost"]["backend_calls"]
    assert b.summary["cost"]["responses_generated"] > b.summary["cost"]["responses_used"]
    assert all(r["generated"] - r["responses"] <= 3 for r in b.results)


def test_outputs_are_the_batch_output_shape_and_the_pool_replays(sp, tmp_path):
    from ttc.replay.pool import load_pool

    o = run(sp, tmp_path / "out", policy="elimination", budget=3.0)
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == sp.ids
    for x, r in zip(lines, o.results):
        assert set(x) == {"id", "custom_id", "response", "error"}
        if r["selected"] >= 0:
            body = x["response"]["body"]
            assert x["response"]["status_code"] == 200 and x["error"] is None
            assert body["object"] == "chat.completion" and body["model"] == "pool-model"
            assert body["choices"][0]["message"] == {"role": "assistant", "content": r["text"]}
            assert body["usage"]["completion_tokens"] == r["completion_tokens"]
            assert body["ttc"]["responses"] == r["responses"] and body["ttc"]["status"] == r["status"]
    df = pl.read_parquet(tmp_path / "out" / "results.parquet")
    assert df["query_id"].to_list() == sp.ids and df["responses"].to_list() == [r["responses"] for r in o.results]
    pool = load_pool(tmp_path / "out" / "pool")
    assert pool.off[-1] == o.summary["cost"]["responses_generated"] == sum(r["generated"] for r in o.results)
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["generation"]["sampling"]["seed"] == SEED and meta["generation"]["template"]["name"] == "plain"
    assert meta["allocation"]["policy"] == "elimination" and meta["complete"] is True
    summary = json.loads((tmp_path / "out" / "run.json").read_text())
    assert summary["spent"]["samples"] <= summary["budget_total"] == 3 * sp.n
    # the run's pool, read back through the live driver in sample order, gives the run's allocation again
    from ttc.replay.live import PoolSource, run_live
    from ttc.replay.rng import query_keys, query_order

    samples = pl.read_parquet(tmp_path / "out" / "pool" / "samples").sort("query_id", "sample_idx")
    sizes = samples.group_by("query_id", maintain_order=True).len()["len"].to_list()
    off = np.concatenate([[0], np.cumsum(sizes)])
    ids = samples["query_id"].unique(maintain_order=True).to_list()
    assert ids == sp.ids
    ans = samples["answer"].to_list()
    labels = {a: k for k, a in enumerate(sorted({a for a in ans if a is not None}))}
    src = PoolSource(off, samples["correct"].cast(pl.Int8).to_numpy(), samples["correct"].cast(pl.Float64).to_numpy(),
                     np.array([-1 if a is None else labels[a] for a in ans]), samples["n_tokens"].to_numpy(),
                     np.arange(len(ans)))
    src.ready = lambda i: int(off[i + 1] - off[i])
    again = run_live(src, [sp.size] * sp.n, query_order(query_keys(ids), SEED)[0], policy="elimination",
                     budget_total=3 * sp.n)
    assert again["n_drawn"] == [r["responses"] for r in o.results]


def test_a_finished_run_rerun_rewrites_the_same_results_without_the_backend(sp, tmp_path):
    a = run(sp, tmp_path / "out", policy="ucb", budget=4.0)
    first = (tmp_path / "out" / "results.jsonl").read_text()

    class Dead:
        def generate(self, *a, **k):
            raise AssertionError("a finished run must not generate")

    b = run(sp, tmp_path / "out", Dead(), policy="ucb", budget=4.0)
    assert b.resumed and b.generated_now == 0
    assert (tmp_path / "out" / "results.jsonl").read_text() == first
    assert b.summary["cost"]["processes"] == 2 and b.summary["this_process"]["backend_calls"] == 0
    assert [r["responses"] for r in a.results] == [r["responses"] for r in b.results]


def test_a_killed_run_resumes_to_the_same_results(sp, tmp_path):
    """Killed after its third backend call (an exception out of the backend, as Ctrl-C would be): the rerun reads
    the parts, generates only the rest, and ends exactly as an uninterrupted run."""
    whole = run(sp, tmp_path / "whole", policy="entropy", budget=4.0)

    class Killed(PoolBackend):
        def generate(self, *a, **k):
            if self.calls == 3:
                raise KeyboardInterrupt
            return super().generate(*a, **k)

    killed = Killed(sp)
    with pytest.raises(KeyboardInterrupt):
        run(sp, tmp_path / "cut", killed, policy="entropy", budget=4.0)
    # the responses of the three calls made are kept (buffered, written on the way out)
    assert pl.read_parquet(tmp_path / "cut" / "pool" / "samples").height == sum(killed.prompts_per_call)
    assert not (tmp_path / "cut" / "results.jsonl").exists()
    rest = PoolBackend(sp)
    resumed = run(sp, tmp_path / "cut", rest, policy="entropy", budget=4.0)
    assert resumed.resumed and rest.calls == whole.summary["cost"]["backend_calls"] - 3
    keep = ("query_id", "status", "responses", "generated", "selected", "answer", "text", "correct", "covered")
    assert [{k: r[k] for k in keep} for r in resumed.results] == [{k: r[k] for k in keep} for r in whole.results]
    a = pl.read_parquet(tmp_path / "whole" / "pool" / "samples").sort("query_id", "sample_idx")
    b = pl.read_parquet(tmp_path / "cut" / "pool" / "samples").sort("query_id", "sample_idx")
    assert a.equals(b)


def test_a_changed_configuration_on_resume_is_refused(sp, tmp_path):
    run(sp, tmp_path / "out", policy="ucb", budget=4.0)
    for kw, what in ((dict(policy="elimination"), "allocation.policy"), (dict(budget=5.0), "budget"),
                     (dict(sampling=Sampling(n=1, max_tokens=64, seed=SEED + 1)), "sampling.seed"),
                     (dict(oracle="sc", policy="entropy", eliminate="sc-share", select="sc"), "allocation.oracle")):
        with pytest.raises(RunError, match=f"another configuration.*{what}"):
            plan_run(request(sp, tmp_path / "out", **{"policy": "ucb", "budget": 4.0, **kw}))
    plan_run(request(sp, tmp_path / "out", policy="ucb", budget=4.0, lookahead=4, retries=5))  # cost options may


def test_transient_backend_failures_are_retried_and_change_nothing(sp, tmp_path):
    clean = run(sp, tmp_path / "clean", policy="elimination", budget=4.0)
    flaky = PoolBackend(sp, fail_calls=2)
    o = run(sp, tmp_path / "flaky", flaky, policy="elimination", budget=4.0, retries=2)
    assert flaky.attempts == flaky.calls + 2 and o.summary["this_process"]["failed_calls"] == 2
    assert [r["responses"] for r in o.results] == [r["responses"] for r in clean.results]
    assert [r["text"] for r in o.results] == [r["text"] for r in clean.results]


def test_a_query_that_keeps_failing_keeps_what_it_has_and_the_others_go_on(sp, tmp_path):
    """q03 fails from its third call on (after two responses): its result carries the error, it is exhausted at
    two responses, and the run equals the engine on the pool where q03 holds only those two."""
    from ttc.replay.engine import run_once
    from ttc.replay.rng import query_keys, query_order

    bad = "q03"

    class Flaky(PoolBackend):
        def generate(self, prompts, sampling, seeds, stop=None):
            for p, s in zip(prompts, seeds):
                if p == f"problem {bad}" and s - query_seed(self.seed, bad) >= 2:
                    raise RuntimeError(f"injected: {bad} fails for good")
            return super().generate(prompts, sampling, seeds, stop)

    backend = Flaky(sp)  # (round by round: with the plan, q03's five responses are one request that works)
    o = run(sp, tmp_path / "out", backend, policy="uniform", budget=5.0, plan_ahead=False)
    by_id = {r["query_id"]: r for r in o.results}
    assert by_id[bad]["status"] == "failed" and "fails for good" in by_id[bad]["error"]
    assert by_id[bad]["responses"] == 2 and by_id[bad]["exhausted"]
    line = next(json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()
                if json.loads(x)["custom_id"] == bad)
    assert line["error"]["code"] == "backend_error" and line["response"]["body"]["ttc"]["responses"] == 2
    assert o.summary["failures"] == {bad: by_id[bad]["error"]}
    # the engine on the pool in the run's order, q03 cut to its two responses
    pool = sp.pool()
    perm = permutation(pool.off, pool.qkeys, SEED)
    keep = [perm[pool.off[i]:pool.off[i + 1]][:2 if sp.ids[i] == bad else None] for i in range(sp.n)]
    idx = np.concatenate(keep)
    off = np.concatenate([[0], np.cumsum([len(k) for k in keep])])
    want = run_once(off, pool.correct[idx], pool.score[idx], _dense(pool.ans[idx], off), pool.tok[idx],
                    np.arange(len(idx)), query_order(query_keys(sp.ids), SEED)[0], RunConfig("uniform"), 5 * sp.n)
    assert [r["responses"] for r in o.results] == list(want["n_drawn"])
    assert [r["exhausted"] for r in o.results] == list(want["exhausted_q"])
    # the others got the budget q03 could not use
    assert sum(r["responses"] for r in o.results) == 5 * sp.n
    # a rerun resumes with the failure recorded: nothing is retried, the result is the same
    again = run(sp, tmp_path / "out", PoolBackend(sp), policy="uniform", budget=5.0)  # (planned: nothing to do)
    assert [r["responses"] for r in again.results] == [r["responses"] for r in o.results]
    assert again.generated_now == 0


def test_a_backend_that_is_down_stops_the_run_resumably(sp, tmp_path):
    from ttc.harvest.backends import BackendError

    class Down(PoolBackend):
        def generate(self, *a, **k):
            if self.calls >= 2:
                self.attempts += 1
                raise ConnectionError("injected: the server is gone")
            return super().generate(*a, **k)

    with pytest.raises(BackendError, match="worked before fails too"):
        run(sp, tmp_path / "out", Down(sp), policy="uniform", budget=4.0, plan_ahead=False)
    with pytest.raises(BackendError, match="first call"):
        run(sp, tmp_path / "new", PoolBackend(sp, fail_calls=99), policy="uniform", budget=4.0)
    rest = PoolBackend(sp)
    o = run(sp, tmp_path / "out", rest, policy="uniform", budget=4.0)
    assert o.resumed and all(r["responses"] == 4 for r in o.results)
    assert rest.calls == 1 and rest.prompts_per_call == [sp.n]  # the plan: the two responses each left, one call


@pytest.mark.parametrize("kw, message", [
    (dict(budget=0.5), "at least 1"),
    (dict(budget=float("nan")), "at least 1"),
    (dict(budget=20.0), "more than --max-per-query"),
    (dict(policy="oracle"), "hindsight"),
    (dict(policy="elimination", eliminate="mmc", mmc_labels="pool"), "--mmc-labels pool needs hindsight"),
    (dict(oracle="exec"), "lcb-exec"),
    (dict(oracle="judge"), "--judge-model"),
    (dict(oracle="prm", score="prm_max"), "prm_min, prm_last, prm_prod"),
    (dict(oracle="judge", score="prm_min"), "nothing to choose"),
    (dict(oracle="sc", policy="ucb"), "ranks queries by their scores"),
    (dict(oracle="sc", eliminate="threshold"), "compares scores"),
    (dict(oracle="sc", select="bon"), "--select sc"),
    (dict(dataset=None), "--dataset"),
    (dict(batch=Path("x.jsonl")), "one of the two"),
    (dict(max_per_query=0), "--max-per-query"),
    (dict(lookahead=0), "--lookahead"),
    (dict(K=0), "K must be"),
    (dict(gamma=1.5), "gamma"),
    (dict(template="aime-zeroshot", dataset="lcb"), None),
])
def test_bad_requests_are_refused_before_anything_is_written(sp, tmp_path, kw, message):
    if kw.get("dataset") == "lcb":
        kw = dict(dataset=str(HERE / "fixtures" / "harvest_pipeline" / "lcb_exec.jsonl"))
        message = "math"
    with pytest.raises(InputError, match=message):
        plan_run(request(sp, tmp_path / "out", **kw))
    assert not (tmp_path / "out").exists()


def test_a_missing_gold_answer_is_refused_for_ground_truth(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"id": "a", "problem": "p"}\n{"id": "b", "problem": "r"}\n')
    sp = SynthPool(tmp_path)
    with pytest.raises(InputError, match="gold answers"):
        plan_run(request(sp, tmp_path / "out", dataset=str(data), template="plain"))
    plan_run(request(sp, tmp_path / "out", dataset=str(data), oracle="sc"))  # answer agreement needs none
    assert not (tmp_path / "out").exists()


def test_an_output_directory_another_command_wrote_is_refused(sp, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="was not written by `ttc run`"):
        plan_run(request(sp, tmp_path / "out"))
    with pytest.raises(InputError, match="inside"):
        plan_run(request(sp, sp.path / "out"))


@pytest.mark.parametrize("select", ["cisc", "deepconf"])
def test_replay_only_selections_are_refused_live(sp, tmp_path, select):
    """cisc and deepconf are computed after a replay's run; a RunRequest built in Python that asks for one is
    refused before anything is written (the command line offers only the live ones)."""
    with pytest.raises(RunError, match=f"--select {select} is computed by replay only"):
        plan_run(request(sp, tmp_path / "out", select=select))
    assert not (tmp_path / "out").exists()


class Concurrent(PoolBackend):
    """PoolBackend whose generate may be called from several threads at once (a backend the registry marks
    `concurrent`, as the openai one): each call answers after a random pause of up to 10 ms, so requests finish in
    any order; kill_after: the calls after that many raise KeyboardInterrupt (Ctrl-C)."""

    def __init__(self, sp, kill_after: int | None = None, seed: int = 0, **kw):
        import threading

        super().__init__(sp, **kw)
        self.lock, self.rng, self.kill_after = threading.Lock(), np.random.default_rng(seed), kill_after

    def generate(self, *a, **k):
        import time

        with self.lock:
            if self.kill_after is not None and self.calls >= self.kill_after:
                raise KeyboardInterrupt
            pause = float(self.rng.random()) * 0.01
        time.sleep(pause)
        with self.lock:
            return super().generate(*a, **k)


def run_free(sp, out, backend, **kw):
    """run() under the openai backend's name with --concurrency 3 (free slots), generating with `backend`."""
    plan = plan_run(request(sp, out, backend="openai", **kw,
                            backend_options={"base_url": "http://127.0.0.1:9/v1", "concurrency": 3}))
    return execute(plan, backend, None, echo=lambda s: None)


@pytest.mark.parametrize("policy, unit", [("elimination", "samples"), ("two-stage", "samples"), ("ucb", "tokens"),
                                          ("uniform", "samples"), ("entropy", "samples")])
def test_free_slots_equal_replay_and_a_killed_run_resumes_to_them(sp, tmp_path, policy, unit):
    """A backend that takes concurrent calls (free slots: each query's next response asked for as soon as the run
    wants it, 3 in flight, finishing in any order): the run equals the replay; killed after 5 requests (Ctrl-C in
    the middle of requests in flight), the rerun resumes from what was written and ends at the same results. Which
    responses are generated ahead depends on timing: at most --lookahead per query beyond those used."""
    cfg, budget = RunConfig(policy, unit=unit), 4.0 if unit == "samples" else 45.0
    whole = run_free(sp, tmp_path / "whole", Concurrent(sp), policy=policy, unit=unit, budget=budget)
    assert whole.summary["this_process"]["slots"] == 3
    assert_equal(whole, sp, cfg, budget)
    assert all(r["generated"] - r["responses"] <= 1 for r in whole.results)
    with pytest.raises(KeyboardInterrupt):
        run_free(sp, tmp_path / "cut", Concurrent(sp, kill_after=5, seed=1), policy=policy, unit=unit, budget=budget)
    # the requests that had finished are kept (a fifth may finish just after the others were collected)
    assert pl.read_parquet(tmp_path / "cut" / "pool" / "samples").height >= 4
    resumed = run_free(sp, tmp_path / "cut", Concurrent(sp, seed=2), policy=policy, unit=unit, budget=budget)
    assert resumed.resumed
    assert_equal(resumed, sp, cfg, budget)
    keys = ("query_id", "responses", "answered", "exhausted", "selected", "answer", "correct")
    assert [{k: r[k] for k in keys} for r in resumed.results] == [{k: r[k] for k in keys} for r in whole.results]

