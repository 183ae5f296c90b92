"""`ttc run --trace-cap` (issue 30, live depth): every trace stops at the cap and answers its probe there, the
depth view replay gives a probed pool (kernel.depth_view). Against a backend that answers from a probed pool (each
trace cut at the cap answers its probe at that offset, as the transformers backend answers its probe prompt there),
the run equals `ttc replay POOL --trace-cap C` on the same seed, query by query and in what it pays; a backend that
cannot stop and probe a trace is refused in one line. Likewise `ttc run --depth-rule stability`: each trace probed
every --probe-every tokens stops at the first probe that makes its last M valid answers agree, and the run equals
`ttc replay POOL --depth-rule stability --depth-m M` (the double feeds the pool's probes to the backend's own
StabilityRule, which is checked against replay/reference_depth.py). The transformers backend's own cap, probes and
rule are exercised on a tiny model in tests/test_run_e2e.py."""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.backends import PROBE_PROMPT, StabilityRule  # noqa: E402
from ttc.harvest.pipeline import query_seed  # noqa: E402
from ttc.harvest.run import RunError, RunRequest, execute, plan_run  # noqa: E402
from ttc.harvest.types import Response, Sampling  # noqa: E402
from ttc.replay.engine import replay  # noqa: E402
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.pool import Pool  # noqa: E402
from ttc.replay.rng import permutation  # noqa: E402

SEED, STEP, CAP = 5, 500, 1000


class ProbedPool:
    """n queries x size traces with a probe every STEP tokens (answer ids 0..2, -1 none; 0 is the gold answer), as
    AutoTTS's files hold them; `path` a JSONL data set naming the queries."""

    def __init__(self, tmp: Path, n: int = 10, size: int = 8, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n, self.size = n, size
        self.ids = [f"q{i:02d}" for i in range(n)]
        self.tok, self.ans, self.probes = [], [], []  # per trace: tokens, final answer, [(offset, answer)]
        for _ in range(n * size):
            k = int(rng.integers(0, 6))
            t = int(STEP * k + rng.integers(1, STEP)) if rng.random() > 0.1 else STEP * max(k, 1)
            a = int(rng.integers(-1, 3))
            self.tok.append(t)
            self.ans.append(a)
            self.probes.append([(STEP * (m + 1), a if rng.random() < 0.5 else int(rng.integers(-1, 3)))
                                for m in range(k + (rng.random() < 0.3))])
        self.path = tmp / "queries.jsonl"
        self.path.write_text("".join(json.dumps({"id": q, "problem": f"problem {q}", "answer": "0"}) + "\n"
                                     for q in self.ids))

    def pool(self) -> Pool:
        off = np.arange(0, self.n * self.size + 1, self.size)
        ans = np.array(self.ans, np.int64)
        p = Pool.from_arrays(off, correct=(ans == 0), tok=self.tok, query_ids=self.ids)
        poff = np.concatenate([[0], np.cumsum([len(p_) for p_ in self.probes])]).astype(np.int64)
        ptok = np.array([o for p_ in self.probes for o, _ in p_], np.int64)
        pans = np.array([a for p_ in self.probes for _, a in p_], np.int64)
        return dataclasses.replace(p, ans=ans, has_answers=True, probe_off=poff, probe_tok=ptok, probe_ans=pans,
                                   probe_ok=pans == 0, has_probes=True)


def _text(a: int, lead: str = "so the final answer is") -> str:
    return "no answer here" if a < 0 else f"{lead} \\boxed{{{a}}}"


def _probed(a: int) -> str:
    """A trace stopped part-way, as TransformersBackend writes it: the trace, the probe prompt and the probe's
    continuation (its box closed on the answer, or never closed: no answer)."""
    return "thinking ... " + PROBE_PROMPT + ("no idea" if a < 0 else f"{a}}}")


class ProbedBackend:
    """Answers sample k of a query (seed = query_seed + k) with the trace at position k of replay's permutation for
    SEED; with trace_cap, a trace longer than the cap stops there (finish_reason "cap", the cap's tokens) and answers
    its probe at that offset, as TransformersBackend does with its probe prompt."""

    def __init__(self, pp: ProbedPool):
        pool = pp.pool()
        self.pp, self.perm = pp, permutation(pool.off, pool.qkeys, SEED)
        self.by_prompt = {f"problem {q}": i for i, q in enumerate(pp.ids)}
        self.caps: list[int] = []
        self.depths: list[tuple[int, int]] = []

    def info(self):
        return {"backend": "probed-pool"}

    def generate(self, prompts, sampling, seeds, stop=None, trace_cap=0, probe_every=0, depth_m=0):
        self.caps.append(trace_cap)
        self.depths.append((probe_every, depth_m))
        out = []
        for p, s in zip(prompts, seeds):
            i = self.by_prompt[p]
            rows = []
            for k in range(s - query_seed(SEED, self.pp.ids[i]), s - query_seed(SEED, self.pp.ids[i]) + sampling.n):
                j = int(self.perm[i * self.pp.size + k]) if k < self.pp.size else None
                if j is None:  # beyond the pool: never used (--max-per-query is the pool size)
                    rows.append(Response("beyond the pool", 1, "stop"))
                elif probe_every and (hit := self._stable(j, probe_every, depth_m, trace_cap, sampling)):
                    rows.append(Response(_probed(hit[1]), hit[0], "stable"))
                elif trace_cap and self.pp.tok[j] > trace_cap:
                    probe = dict(self.pp.probes[j])[trace_cap]  # (the pool holds a probe at every STEP before its end)
                    rows.append(Response(_probed(probe), trace_cap, "cap"))
                else:
                    rows.append(Response(_text(self.pp.ans[j]), self.pp.tok[j], "stop"))
            out.append(rows)
        return out


    def trace(self, prompt, seed, sampling, stop=None):
        """Sample k's trace (as generate serves it) a segment of STEP tokens at a time: its probes before its end,
        then its end (TransformersBackend.trace's form). `fail_after`: the segment (counted over the backend's
        streams) that raises instead, as a backend that goes down mid-run."""
        i = self.by_prompt[prompt]
        k = seed - query_seed(SEED, self.pp.ids[i])
        return _ProbedStream(self, int(self.perm[i * self.pp.size + k]))

    def _stable(self, j, every, m, cap, sampling):
        """(offset, answer) of the probe that stops trace j under the stability rule, as TransformersBackend probes a
        running trace (every `every` tokens below its end, the cap and max_tokens; the pool holds a probe at every
        STEP before its end), fed to the backend's own rule; None: no probe stops it."""
        rule, probes = StabilityRule(m), dict(self.pp.probes[j])
        for off in range(every, self.pp.tok[j], every):
            if (cap and off > cap) or off >= sampling.max_tokens:
                break
            if rule.feed(None if probes[off] < 0 else str(probes[off])):
                return off, probes[off]
        return None


class _ProbedStream:
    def __init__(self, backend, j):
        self.b, self.j, self.at, self.tokens = backend, j, 0, 0
        self.probes = [(o, a) for o, a in backend.pp.probes[j] if o < backend.pp.tok[j]]

    def advance_to(self, n):
        self.at = next(m + 1 for m, (o, _) in enumerate(self.probes) if o == n)
        self.tokens = n

    def segment(self, every):
        assert every == STEP
        b = self.b
        b.segments = getattr(b, "segments", 0) + 1
        if getattr(b, "fail_after", None) is not None and b.segments > b.fail_after:
            raise RuntimeError("the backend went down")
        if self.at < len(self.probes):
            o, a = self.probes[self.at]
            self.at += 1
            self.tokens = o
            return Response(_probed(a), o, "probe"), _probed(a).split(PROBE_PROMPT)[1]
        self.tokens = b.pp.tok[self.j]
        return Response(_text(b.pp.ans[self.j]), b.pp.tok[self.j], "stop"), None


@pytest.fixture(scope="module")
def pp(tmp_path_factory):
    return ProbedPool(tmp_path_factory.mktemp("probed"))


def request(pp: ProbedPool, out: Path, **kw) -> RunRequest:
    base = dict(out=out, model="pool-model", backend="transformers", dataset=str(pp.path), template="plain",
                sampling=Sampling(n=1, max_tokens=4 * STEP * 4, seed=SEED), budget=3.0, max_per_query=pp.size,
                retry_delay_s=0.0, progress=False, trace_cap=CAP)
    base.update(kw)
    return RunRequest(**base)

def _assert_equals_replay(o, pp, cfg, budget):
    """The live run o against `ttc replay` of cfg on the pool its backend served, same seed: per query and in total."""
    from ttc.replay.policies import DEPTH_POLICIES

    df, pq = replay(pp.pool(), [cfg], [budget], [SEED], per_query=True,
                    select="sc" if cfg.policy in DEPTH_POLICIES else "bon")
    tot, per_query = df.row(0, named=True), {r["query_id"]: r for r in pq.iter_rows(named=True)}
    for r in o.results:
        e = per_query[r["query_id"]]
        assert (r["responses"], r["answered"], r["exhausted"]) == (e["n_drawn"], e["answered"], e["exhausted"])
        assert (r["covered"], r["correct"]) == (e["covered"], e["selected_correct"]), r["query_id"]
    s = o.summary
    assert s["spent"] == {"samples": tot["samples_used"], "tokens": tot["tokens_used"]}
    assert s["outcome"]["accuracy"] == pytest.approx(tot["accuracy"])



@pytest.mark.parametrize("unit, budget", [("samples", 3.0), ("tokens", 2500.0)])
@pytest.mark.parametrize("policy", ["uniform", "elimination", "entropy"])
def test_a_capped_run_equals_the_replay_with_the_cap(pp, tmp_path, policy, unit, budget):
    backend = ProbedBackend(pp)
    o = execute(plan_run(request(pp, tmp_path / "out", policy=policy, unit=unit, budget=budget)), backend, None,
                echo=lambda s: None)
    assert set(backend.caps) == {CAP}
    cfg = RunConfig(policy, unit=unit, trace_cap=CAP)
    _assert_equals_replay(o, pp, cfg, budget)
    s = o.summary
    assert s["config"] == cfg.label() and "trace_cap=1000" in s["config"]
    # what it paid: every capped trace the cap, the others their whole length
    import polars as pl

    parts = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    capped = parts.filter(pl.col("finish_reason") == "cap")
    assert capped.height > 0 and (capped["n_tokens"] == CAP).all()
    assert (parts.filter(pl.col("finish_reason") != "cap")["n_tokens"] <= CAP).all()
    # the run's pool is its memory: a rerun reads it back and pays nothing more
    again = execute(plan_run(request(pp, tmp_path / "out", policy=policy, unit=unit, budget=budget)), backend, None,
                    echo=lambda s: None)
    assert again.generated_now == 0 and again.results == o.results


def test_the_cap_is_part_of_the_configuration(pp, tmp_path):
    """A run resumed with another cap (or none) is refused, listing it; its allocation records the probe."""
    o = execute(plan_run(request(pp, tmp_path / "out", budget=2.0)), ProbedBackend(pp), None, echo=lambda s: None)
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["trace_cap"]["tokens"] == CAP and "boxed" in meta["allocation"]["trace_cap"]["probe"]
    for cap in (0, 1500):
        with pytest.raises(RunError, match="another configuration"):
            plan_run(request(pp, tmp_path / "out", budget=2.0, trace_cap=cap))
    assert o.summary["spent"]["samples"] == 20


@pytest.mark.parametrize("kw, msg", [
    (dict(backend="openai", backend_options={"base_url": "http://localhost:9/v1"}),
     "--backend openai cannot"),
    (dict(trace_cap=4 * STEP * 4), "not below --max-tokens"),
    (dict(oracle="judge"), "replay only for now"),
    (dict(policy="deepconf-online"), "replay only for now"),
    (dict(trace_cap=-1), "--trace-cap must be an integer in 0\\.\\."),
])
def test_a_cap_the_run_cannot_honour_is_refused(pp, tmp_path, kw, msg):
    with pytest.raises(RunError if "--trace-cap must" not in msg else Exception, match=msg):
        plan_run(request(pp, tmp_path / "out", **kw))
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_a_cap_for_a_backend_that_cannot_probe(pp, tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app

    r = CliRunner().invoke(app, ["run", "--dataset", str(pp.path), "--model", "m", "--backend", "openai",
                                 "--base-url", "http://localhost:9/v1", "--max-tokens", "4000", "--budget", "2",
                                 "--trace-cap", "1000", "--out", str(tmp_path / "out"), "--no-progress"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --trace-cap needs a backend") and "openai" in lines[0]


# --depth-rule stability live (issue 30): each trace probed every --probe-every tokens stops at the first probe that
# makes its last M valid answers agree, and pays the tokens it ran


@pytest.mark.parametrize("m, cap", [(2, 0), (3, 0), (2, CAP)])
@pytest.mark.parametrize("unit, budget", [("samples", 3.0), ("tokens", 2500.0)])
@pytest.mark.parametrize("policy", ["uniform", "elimination", "entropy"])
def test_a_stability_run_equals_the_replay_with_the_rule(pp, tmp_path, policy, unit, budget, m, cap):
    import polars as pl

    backend = ProbedBackend(pp)
    kw = dict(policy=policy, unit=unit, budget=budget, trace_cap=cap, depth_rule="stability", depth_m=m)
    o = execute(plan_run(request(pp, tmp_path / "out", probe_every=STEP, **kw)), backend, None, echo=lambda s: None)
    assert set(backend.depths) == {(STEP, m)} and set(backend.caps) == {cap}
    cfg = RunConfig(policy, unit=unit, trace_cap=cap, depth_rule="stability", depth_m=m)
    _assert_equals_replay(o, pp, cfg, budget)
    s = o.summary
    assert s["config"] == cfg.label() and f"depth=stability:{m}" in s["config"]
    parts = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    stable = parts.filter(pl.col("finish_reason") == "stable")
    assert stable.height > 0 and (stable["n_tokens"] % STEP == 0).all()  # each paid up to the probe that stopped it
    if cap:
        assert (parts["n_tokens"] <= cap).all()
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["depth"]["m"] == m and meta["allocation"]["depth"]["probe_every"] == STEP
    with pytest.raises(RunError, match="another configuration"):  # another rule or spacing is another run
        plan_run(request(pp, tmp_path / "out", probe_every=2 * STEP, **kw))
    again = execute(plan_run(request(pp, tmp_path / "out", probe_every=STEP, **kw)), backend, None,
                    echo=lambda s: None)
    assert again.generated_now == 0 and again.results == o.results


@pytest.mark.parametrize("kw, msg", [
    (dict(backend="openai", backend_options={"base_url": "http://localhost:9/v1"}),
     "--depth-rule stability needs a backend"),
    (dict(backend="vllm"), "--backend vllm cannot"),
    (dict(trace_cap=750), "not a multiple of --probe-every"),
    (dict(probe_every=4 * STEP * 4), "--probe-every 8000 is not below --max-tokens"),
    (dict(probe_every=0), "--probe-every must be a whole number"),
    (dict(oracle="judge"), "replay only for now"),
    (dict(policy="deepconf-online"), "replay only for now"),
    (dict(probe_cost="autotts"), "--probe-cost is replay only"),
    (dict(depth_rule="whole", probe_every=250), "--probe-every spaces the probes"),
])
def test_a_stability_rule_the_run_cannot_honour_is_refused(pp, tmp_path, kw, msg):
    base = dict(trace_cap=0, depth_rule="stability", depth_m=2)
    with pytest.raises(RunError, match=msg):
        plan_run(request(pp, tmp_path / "out", **{**base, **kw}))
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_stability_for_a_backend_that_cannot_probe(pp, tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app

    r = CliRunner().invoke(app, ["run", "--dataset", str(pp.path), "--model", "m", "--backend", "openai",
                                 "--base-url", "http://localhost:9/v1", "--max-tokens", "4000", "--budget", "2",
                                 "--depth-rule", "stability", "--depth-m", "2", "--out", str(tmp_path / "out"),
                                 "--no-progress"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --depth-rule stability needs a backend"), r.output
    assert "openai" in lines[0] and not (tmp_path / "out").exists()


def test_the_live_stability_rule_stops_where_the_reference_does():
    """StabilityRule (the live rule, fed one probe answer at a time) stops at the probe replay/reference_depth.py's
    stopped_trace stops at, on random answer sequences with invalid answers, every m from 1 to 4."""
    from ttc.replay.reference_depth import stopped_trace

    rng = np.random.default_rng(7)
    stops = 0
    for _ in range(2000):
        m, n = int(rng.integers(1, 5)), int(rng.integers(0, 12))
        answers = [int(a) for a in rng.integers(-1, 3, n)]
        probes = [(STEP * (k + 1), a, int(a == 0)) for k, a in enumerate(answers)]
        want, _, _ = stopped_trace(probes, STEP * (n + 1), 9, 0, rule="stability", m=m)
        rule, got = StabilityRule(m), STEP * (n + 1)
        for off, a, _ok in probes:
            if rule.feed(None if a < 0 else str(a)):
                got = off
                break
        assert got == want, (m, answers)
        stops += got < STEP * (n + 1)
    assert 200 < stops < 1800  # both outcomes exercised


# parallel-probe and cmc live (replay/live.py run_live_depth): traces advanced a segment at a time, each segment
# generated only when the policy reads it; live == the engine's replay on the same seed, per query and in total


class StringTraces:
    """PoolTraces with answers relabelled as strings of another alphabet (only their equality may matter), recording
    the order of the segments asked for; bounded: it passes on PoolTraces' segment_tokens (the driver may then ask
    for several segments at once under a token budget too), else it promises nothing."""

    def __init__(self, pool, perm, bounded=False):
        from ttc.replay.live import PoolTraces

        self.inner, self.calls = PoolTraces(pool, perm), []
        if bounded:
            self.segment_tokens = self.inner.segment_tokens

    def segment(self, i, k):
        from ttc.replay.live import Segment

        s = self.inner.segment(i, k)
        self.calls.append((i, k))
        return Segment(s.tokens, None if s.answer is None else f"ans-{7 * s.answer + 3}", s.correct, s.finished)


def _depth_live(pool, cfg, budget, bounded=False, oracle=False):
    """The live run of cfg over the pool's traces on SEED's permutation and query order, and its source; oracle: the
    reference twin's lazy run instead (tests/support/live_depth_oracle.py)."""
    from ttc.replay.live import run_live_depth
    from ttc.replay.rng import query_order

    from support.live_depth_oracle import reference_live_depth

    src = StringTraces(pool, permutation(pool.off, pool.qkeys, SEED), bounded)
    rank, _ = query_order(pool.qkeys, SEED)
    total = int(round(budget * pool.n_queries))
    if oracle:
        return reference_live_depth(src, np.diff(pool.off), rank, cfg, total), src
    o = run_live_depth(src, np.diff(pool.off), rank, config=cfg, budget_total=total)
    return o, src


DEPTH_CONFIGS = [("parallel-probe", dict(chains=3, stable=2, patience=2, probe_warmup=1)),
                 ("parallel-probe", dict(chains=6, stable=3, patience=1, probe_warmup=0)),
                 ("cmc", dict(cmc_beta=0.0)), ("cmc", dict(cmc_beta=0.5))]


@pytest.mark.parametrize("cap", [0, 1000, 1250])
@pytest.mark.parametrize("unit, budgets", [("samples", (0.3, 1.0, 2.0, 4.0)),
                                           ("tokens", (100.0, 700.0, 2500.0, 6000.0, 40000.0))])
@pytest.mark.parametrize("policy, kw", DEPTH_CONFIGS)
def test_a_depth_policy_live_equals_its_replay(policy, kw, unit, budgets, cap):
    """On random probed pools, every budget from none to more than the pool: the same traces started, stops,
    correctness and spend per query as `ttc replay` (the engine) on the same seed; and the run generated nothing
    beyond what it explored, but for the one segment (or start) that did not fit and ended it. Twice: a source that
    promises no bound on a segment's tokens, and one that does (bounded: the driver asks for the segments it surely
    needs together); both ask for exactly the segments the reference twin's lazy run reads, and hold its outcome."""
    from support.depth_pools import probed_pool

    cfg = RunConfig(policy, unit=unit, trace_cap=cap, **kw)
    asks = {False: [0, 0], True: [0, 0]}
    for seed, budget, bounded in itertools.product(range(3), budgets, (False, True)):
        pool = dataclasses.replace(probed_pool(np.random.default_rng(seed), n_queries=7, max_traces=8, max_probes=8),
                                   query_ids=[f"q{i}" for i in range(7)])
        if True:
            o, src = _depth_live(pool, cfg, budget, bounded)
            ref, ref_src = _depth_live(pool, cfg, budget, oracle=True)
            extra = Counter(ref_src.calls) - Counter(src.calls)
            assert not Counter(src.calls) - Counter(ref_src.calls), (seed, budget, bounded)
            if extra:  # the twin reads a start's first segment before it checks the sample budget; the engine after
                i, k = ref_src.calls[-1]
                assert unit == "samples" and extra == Counter([(i, k)]) and ref_src.calls.count((i, k)) == 1
                ref["traces"][i].pop()
            for key in ("answer", "correct", "answered", "started", "samples_used", "tokens_used", "traces"):
                assert o[key] == ref[key], (key, seed, budget, bounded)
            asks[bounded][0] += o["asks"]
            asks[bounded][1] += o["segments"]
            df, pq = replay(pool, [cfg], [budget], [SEED], per_query=True, select="sc")
            tot = df.row(0, named=True)
            assert (o["samples_used"], o["tokens_used"]) == (tot["samples_used"], tot["tokens_used"]), (seed, budget)
            assert o["started"] == pq["n_drawn"].to_list(), (seed, budget)
            assert o["answered"] == pq["answered"].to_list(), (seed, budget)
            assert o["correct"] == pq["selected_correct"].to_list(), (seed, budget)
            if unit == "tokens":
                assert o["tokens_used"] <= int(round(budget * pool.n_queries))
            # what was generated: every trace up to its last segment (the cap's cost where it passed it), all paid
            # but the last segment asked for when it was the one that did not fit
            ran = lambda segs: min(segs[-1].tokens, cap) if cap else segs[-1].tokens  # noqa: E731
            generated = sum(ran(t) for q in o["traces"] for t in q if t)
            assert o["segments"] == len(src.calls) == sum(len(t) for q in o["traces"] for t in q)
            if cap % 500 == 0:  # a cap at a probe's offset: a trace there ends at its probe, nothing past it is asked
                assert all(s.tokens <= cap for q in o["traces"] for t in q for s in t) or not cap
            # (the one that did not fit is the last the twin read: asked for together with others, it may not be the
            # last asked for)
            unpaid = [(i, k) for i, q in enumerate(o["traces"]) for k, t in enumerate(q) if o["paid"][i][k] < len(t)]
            assert unpaid in ([], [ref_src.calls[-1]]), (seed, budget)
            if generated != o["tokens_used"]:
                i, k = ref_src.calls[-1]
                t = o["traces"][i][k]
                assert generated - ran(t) + (ran(t[:-1]) if len(t) > 1 else 0) == o["tokens_used"], (seed, budget)
                assert unpaid == [(i, k)]
            assert [sum(p > 0 for p in q) for q in o["paid"]] == o["started"]
    # one ask per segment where the source promises nothing under a token budget; fewer asks than segments else
    assert asks[False][0] == asks[False][1] if unit == "tokens" else asks[False][0] < asks[False][1]
    assert asks[True][0] < asks[True][1], asks


def test_a_depth_policy_live_reads_its_traces_lazily():
    """parallel-probe with one chain and nothing to prune asks for one segment at a time, in the order the policy
    explores them (round 0 starts every query's trace in rank order, then one segment per query per round), and a
    query it stops asks for nothing more."""
    from ttc.replay.rng import query_order

    from support.depth_pools import probed_pool

    pool = dataclasses.replace(probed_pool(np.random.default_rng(4), n_queries=5, max_traces=4, max_probes=8),
                               query_ids=[f"q{i}" for i in range(5)])
    o, src = _depth_live(pool, RunConfig("parallel-probe", unit="tokens", chains=1, stable=2), 1e6)
    _, order = query_order(pool.qkeys, SEED)
    order = [int(i) for i in order]
    assert [i for i, _ in src.calls[:5]] == order and {k for _, k in src.calls} == {0}
    rest = [i for i, _ in src.calls[5:]]
    rounds = []  # each round: the queries still running, in rank order
    while rest:
        live = [i for i in order if i in rest]
        rounds.append(rest[:len(live)])
        assert rounds[-1] == live, rounds
        rest = rest[len(live):]
    assert all(len(q) == 1 for q in o["traces"])  # (one chain: one trace per query)


class BatchTraces(StringTraces):
    """A source that serves several segments per call (TraceSource.segments), recording each call's list."""

    def __init__(self, pool, perm, bounded=True):
        super().__init__(pool, perm, bounded)
        self.batches = []

    def segments(self, wants):
        self.batches.append(list(wants))
        return [self.segment(i, k) for i, k in wants]


@pytest.mark.parametrize("policy, kw, unit, bounded", [
    ("parallel-probe", dict(chains=3), "tokens", True), ("parallel-probe", dict(chains=3), "samples", False),
    ("cmc", dict(cmc_beta=0.5), "tokens", True), ("cmc", dict(cmc_beta=0.5), "samples", False)])
def test_a_depth_run_asks_for_what_it_surely_reaches_together(policy, kw, unit, bounded):
    """Round 0 is one request: every query's first traces (chains; cmc's n_init) in rank order, under a token budget
    when the source bounds a segment's tokens, under a sample budget always. Parallel-Probe's next request is the
    first step of every query: each trace that round 0 left running. The run is the one asked one segment at a
    time, as the source is called one segment at a time without segments()."""
    from ttc.replay.engine import cmc_knobs
    from ttc.replay.live import run_live_depth
    from ttc.replay.rng import query_order

    from support.depth_pools import probed_pool

    pool = dataclasses.replace(probed_pool(np.random.default_rng(3), n_queries=6, max_traces=8, max_probes=8),
                               query_ids=[f"q{i}" for i in range(6)])
    cfg = RunConfig(policy, unit=unit, **kw)
    rank, order = query_order(pool.qkeys, SEED)
    perm = permutation(pool.off, pool.qkeys, SEED)
    src = BatchTraces(pool, perm, bounded)
    budget = 10 ** 6 if unit == "tokens" else 30
    o = run_live_depth(src, np.diff(pool.off), rank, config=cfg, budget_total=budget)
    first = kw.get("chains") or int(cmc_knobs(0.5)[0][0])
    sizes = np.diff(pool.off)
    assert src.batches[0] == [(int(i), k) for i in order for k in range(min(first, int(sizes[i])))]
    if policy == "parallel-probe":  # (a trace started is running unless its first segment was its end)
        step = [(i, k) for i, k in src.batches[0] if not _ended(pool, perm, i, k)]
        assert src.batches[1] == step and len(step) > len(order)
    assert o["asks"] == len(src.batches) < o["segments"] == sum(map(len, src.batches))
    one, _ = _depth_live(pool, cfg, budget / pool.n_queries, bounded=False)
    for key in ("answer", "correct", "answered", "started", "samples_used", "tokens_used", "traces", "paid"):
        assert o[key] == one[key], key


def _ended(pool, perm, i, k) -> bool:
    """Whether trace k of query i (perm's) ends at its first segment: no probe before its end."""
    j = int(perm[int(pool.off[i]) + k])
    return not any(int(t) < int(pool.tok[j]) for t in pool.probe_tok[pool.probe_off[j]:pool.probe_off[j + 1]])


def test_a_source_that_breaks_its_segment_bound_is_an_error():
    """A source whose segment runs more tokens than its segment_tokens promised: the run may have asked for segments
    it would not reach, so it stops with the error rather than go on."""
    from ttc.replay.live import run_live_depth
    from ttc.replay.rng import query_order

    from support.depth_pools import probed_pool

    pool = probed_pool(np.random.default_rng(0), n_queries=3, max_probes=4)
    src = StringTraces(pool, np.arange(int(pool.off[-1])), bounded=True)
    src.segment_tokens = 100  # (the pool's probes are 500 tokens apart)
    with pytest.raises(ValueError, match="more than the 100 its source promised"):
        run_live_depth(src, np.diff(pool.off), query_order(pool.qkeys, SEED)[0], config=RunConfig("cmc"),
                       budget_total=10 ** 6)


def test_run_live_depth_refuses_what_it_cannot_run_live():
    from ttc.replay.live import PoolTraces, run_live_depth

    from support.depth_pools import probed_pool

    pool = probed_pool(np.random.default_rng(0), n_queries=2)
    src = PoolTraces(pool, np.arange(int(pool.off[-1])))
    for cfg, msg in [(RunConfig("uniform"), "runs parallel-probe, cmc"),
                     (RunConfig("cmc", unit="token-matched"), "replay only"),
                     (RunConfig("cmc", probe_cost="autotts"), "replay only")]:
        with pytest.raises(ValueError, match=msg):
            run_live_depth(src, np.diff(pool.off), [0, 1], config=cfg, budget_total=10)


# the transformers backend's traces advanced a segment at a time (TransformersBackend.trace): the same tokens as
# one generation of the sample, probed where --depth-rule stability probes it


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from support.tiny_model import make_tiny_model

    # EOS no likelier than any other token: traces of tens of tokens, several probes each
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny", eos_logit=0.0)


@pytest.fixture(scope="module")
def tiny_tf(tiny_dir):
    from ttc.harvest.backends import TransformersBackend

    return TransformersBackend(str(tiny_dir), device="cpu")


@pytest.mark.parametrize("every", [2, 5])
@pytest.mark.parametrize("temperature, top_p, stop", [(1.0, 1.0, ()), (0.7, 0.9, ()), (1.0, 1.0, ("step",)),
                                                      (0.0, 1.0, ())])
def test_a_trace_advanced_in_segments_is_the_one_generation(tiny_tf, every, temperature, top_p, stop):
    from ttc.harvest.backends import PROBE_PROMPT

    from support.tiny_model import single_thread_torch

    s = Sampling(n=1, temperature=temperature, top_p=top_p, max_tokens=30)
    prompt = "what is the sum of 2 and 3 ?"
    seen = 0
    with single_thread_torch():
        for seed in range(4):
            whole = tiny_tf.generate([prompt], s, [seed], stop=list(stop))[0][0]
            stream, probes = tiny_tf.trace(prompt, seed, s, stop=stop), []
            while True:
                r, probe = stream.segment(every)
                if probe is None:
                    break
                assert r.finish_reason == "probe" and r.n_tokens == every * (len(probes) + 1) < s.max_tokens
                trace, got = r.text.split(PROBE_PROMPT)
                assert got == probe and whole.text.startswith(trace)
                probes.append((r.n_tokens, trace, probe))
            assert r == whole, (seed, every)
            with pytest.raises(ValueError, match="ended"):
                stream.segment(every)
            if probes:  # a trace taken up again where an earlier process left it (a resume) goes on the same way
                again = tiny_tf.trace(prompt, seed, s, stop=stop)
                again.advance_to(probes[0][0])
                rest = [again.segment(every) for _ in range(len(probes))]
                assert [p for _, p in rest[:-1]] == [p for _, _, p in probes[1:]] and rest[-1][0] == whole
                wrong = tiny_tf.trace(prompt, seed, s, stop=stop)
                with pytest.raises(ValueError, match="ended at"):
                    wrong.advance_to(whole.n_tokens + 1)
            # each probe's trace is the whole sample's first n tokens (what --depth-rule stability probes there)
            tok = tiny_tf.tokenizer
            ids = tok.encode(whole.text, add_special_tokens=False)
            for n, trace, _ in probes:
                assert trace == tok.decode(ids[:n], skip_special_tokens=True)
            seen += len(probes)
    assert seen > 0


# ttc run --policy parallel-probe | cmc (harvest/run/depth.py): the backend's traces a segment at a time; the run
# equals the replay of the pool the backend served, writes each trace's probes, and resumes where it stopped

LIVE_DEPTH = [("parallel-probe", dict(chains=3, stable=2, patience=2, probe_warmup=1)), ("cmc", dict(cmc_beta=0.25))]


@pytest.mark.parametrize("cap", [0, CAP])
@pytest.mark.parametrize("unit, budget", [("samples", 2.0), ("tokens", 1500.0), ("tokens", 6000.0)])
@pytest.mark.parametrize("policy, kw", LIVE_DEPTH)
def test_a_depth_policy_run_equals_the_replay(pp, tmp_path, policy, kw, unit, budget, cap):
    import polars as pl

    backend = ProbedBackend(pp)
    req = request(pp, tmp_path / "out", policy=policy, unit=unit, budget=budget, trace_cap=cap, probe_every=STEP,
                  **kw)
    o = execute(plan_run(req), backend, None, echo=lambda s: None)
    cfg = RunConfig(policy, unit=unit, trace_cap=cap, **kw)
    _assert_equals_replay(o, pp, cfg, budget)
    assert o.summary["config"] == cfg.label() and o.summary["select"] == "sc"
    # the pool: one row per trace started, its probes as the backend gave them (a prefix of the served trace's)
    parts = pl.read_parquet(tmp_path / "out" / "pool" / "samples").sort("query_id", "sample_idx")
    perm = backend.perm
    for r in parts.iter_rows(named=True):
        i, k = pp.ids.index(r["query_id"]), r["sample_idx"]
        j = int(perm[i * pp.size + k])
        served = [(off, None if a < 0 else str(a)) for off, a in pp.probes[j] if off < pp.tok[j]]
        got = list(zip(r["probe_tokens"], r["probe_answer"], strict=True))
        assert got == served[:len(got)], r
        if r["finish_reason"] == "stop":
            assert got == served and r["n_tokens"] == pp.tok[j]
        else:
            assert r["finish_reason"] in ("open", "cap") and r["n_tokens"] == got[-1][0]
        if cap:
            assert r["n_tokens"] <= cap
    started = {r["query_id"]: r["responses"] for r in o.results}
    assert all(parts.filter(pl.col("query_id") == q).height >= n for q, n in started.items())
    meta = json.loads((tmp_path / "out" / "pool" / "pool.json").read_text())
    assert meta["allocation"]["depth"]["policy"] == policy and meta["allocation"]["depth"]["probe_every"] == STEP
    # the pool is the run's memory: a rerun makes the same decisions and generates nothing
    again = execute(plan_run(req), backend, None, echo=lambda s: None)
    assert again.generated_now == 0 and again.results == o.results and again.summary["spent"] == o.summary["spent"]


@pytest.mark.parametrize("cap", [0, CAP])
@pytest.mark.parametrize("policy, kw", LIVE_DEPTH)
def test_an_interrupted_depth_run_resumes_where_it_stopped(pp, tmp_path, policy, kw, cap):
    """A backend that goes down after some segments: the run stops with the error, having written its traces (some
    left open); the rerun serves those segments from the pool, takes each open trace up where it stopped, and ends
    as the run that was never interrupted, generating only what that run generated beyond them."""
    whole_backend = ProbedBackend(pp)
    req = lambda out: request(pp, out, policy=policy, unit="tokens", budget=6000.0, probe_every=STEP,  # noqa: E731
                              trace_cap=cap, **kw)
    whole = execute(plan_run(req(tmp_path / "whole")), whole_backend, None, echo=lambda s: None)
    for stop_at in (5, whole_backend.segments // 2, whole_backend.segments - 1):
        down = ProbedBackend(pp)
        down.fail_after = stop_at
        out = tmp_path / f"cut{stop_at}"
        with pytest.raises(Exception, match="went down"):
            execute(plan_run(req(out)), down, None, echo=lambda s: None)
        import polars as pl

        assert pl.read_parquet(out / "pool" / "samples")["finish_reason"].to_list().count("open") > 0
        up = ProbedBackend(pp)
        lines = []
        o = execute(plan_run(req(out)), up, None, echo=lines.append)
        assert o.resumed and "resuming" in lines[0]
        assert o.results == whole.results and o.summary["spent"] == whole.summary["spent"]
        assert up.segments == whole_backend.segments - stop_at  # (each segment generated once, over both)
        assert pl.read_parquet(out / "pool" / "samples").sort("query_id", "sample_idx").equals(
            pl.read_parquet(tmp_path / "whole" / "pool" / "samples").sort("query_id", "sample_idx"))


def test_replay_reads_a_run_s_open_trace_as_ended_without_its_last_probe(pp, tmp_path, capsys):
    """What docs/run.md says `ttc replay` makes of a depth run's pool today: a trace the run left running is marked
    (finish_reason "open"), the trace reads as ended at its last probe's offset with no answer, and that probe (at its
    end) is never reached; the load says so in one note, once per pool."""
    import polars as pl

    from ttc.replay.engine import depth_view_arrays
    from ttc.replay.pool import load_pool

    req = request(pp, tmp_path / "out", policy="parallel-probe", unit="tokens", budget=6000.0, probe_every=STEP,
                  trace_cap=0, chains=3, stable=2, patience=2, probe_warmup=1)
    execute(plan_run(req), ProbedBackend(pp), None, echo=lambda s: None)
    assert "left running" not in capsys.readouterr().err  # the run itself does not read its pool as replay does
    rows = pl.read_parquet(tmp_path / "out" / "pool" / "samples").sort("query_id", "sample_idx")
    pool = load_pool(tmp_path / "out" / "pool", probes=True)
    tok, ans, _, reach = depth_view_arrays(pool, ("whole", 0, 0, "tokens"))
    opened = np.flatnonzero((rows["finish_reason"] == "open").to_numpy())
    assert len(opened) == 4 and rows.height == 30
    err = capsys.readouterr().err
    assert err.count("holds 4 traces a live depth run left running") == 1, err
    load_pool(tmp_path / "out" / "pool")
    assert "left running" not in capsys.readouterr().err
    for j in opened:
        probes = pool.probe_tok[pool.probe_off[j]:pool.probe_off[j + 1]]
        assert probes[-1] == pool.tok[j] == tok[j] and ans[j] == -1 and reach[j] == len(probes) - 1


@pytest.mark.parametrize("kw, msg", [
    (dict(depth_rule="stability"), "--depth-rule does not apply to --policy parallel-probe"),
    (dict(select="bon"), "answers with its own vote"),
    (dict(backend="openai", backend_options={"base_url": "http://localhost:9/v1"}),
     "--policy parallel-probe needs a backend that can stop a trace"),
    (dict(trace_cap=750), "not a multiple of --probe-every"),
    (dict(oracle="judge"), "replay only for now"),
    (dict(probe_cost="autotts"), "--probe-cost is replay only"),
    (dict(unit="token-matched"), "token-matched"),
])
def test_a_depth_policy_run_it_cannot_honour_is_refused(pp, tmp_path, kw, msg):
    base = dict(policy="parallel-probe", probe_every=STEP, trace_cap=0)
    with pytest.raises(Exception, match=msg):
        plan_run(request(pp, tmp_path / "out", **{**base, **kw}))
    assert not (tmp_path / "out").exists()


def test_a_probe_whose_box_never_closes_has_no_answer():
    """A probe's continuation that runs out (PROBE_TOKENS) or ends before closing the \\boxed{ the probe prompt opened
    gave no answer; it used to read as the answer '\\boxed{...' (the text after the open brace), a label that two
    such probes could agree on."""
    from ttc.harvest.backends import probe_value

    for unclosed in ("no idea", "", "x", "{1}", "1 + {2"):
        assert probe_value(unclosed) is None, unclosed
    for closed, want in (("1}", "1"), ("\\frac{1}{2}}", "\\frac{1}{2}"), ("7} and more", "7")):
        assert probe_value(closed) == want, closed
    assert probe_value("}") is None  # (an empty box)


@pytest.mark.parametrize("policy, extra", [("parallel-probe", ["--chains", "3", "--stable", "2", "--patience", "1",
                                                               "--probe-warmup", "0"]),
                                           ("cmc", ["--cmc-beta", "0"])])
def test_a_depth_policy_runs_on_the_transformers_backend(tiny_dir, tmp_path, policy, extra, monkeypatch):
    """`ttc run --policy parallel-probe | cmc` with the transformers backend on the tiny model: every trace it
    started is the sample of that index (the whole run's, same seed) as far as it ran: whole where it ended, its
    first n tokens where it was left open, probed every --probe-every tokens; the run paid what its traces ran (all
    but at most the one segment that did not fit); a rerun generates nothing; and the run's own pool (its traces in
    sample order, an open one running past its last probe) driven again gives the same run. The tiny model's greedy
    probes never close their box, so each probe's pass runs and its continuation is then replaced by a closed box
    holding the trace's length in characters mod 3 (answers that agree and differ)."""
    import polars as pl
    from typer.testing import CliRunner

    from ttc.cli import app
    from ttc.harvest.backends import TransformersBackend

    from support.tiny_model import single_thread_torch

    real = TransformersBackend.probe_answer

    def probe(self, ids, trace):
        real(self, ids, trace)
        return f"{len(trace) % 3}}}"

    monkeypatch.setattr(TransformersBackend, "probe_answer", probe)

    math = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    base = ["run", "--dataset", str(math), "--model", str(tiny_dir), "--backend", "transformers", "--max-tokens", "30",
            "--seed", "3", "--max-per-query", "8", "--no-progress", "--device", "cpu"]
    runner = CliRunner()
    with single_thread_torch():
        r = runner.invoke(app, [*base, "--out", str(tmp_path / "whole"), "--policy", "uniform", "--budget", "8"])
        assert r.exit_code == 0, r.output
        args = [*base, "--out", str(tmp_path / "depth"), "--policy", policy, "--unit", "tokens", "--budget", "40",
                "--probe-every", "3", *extra]
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        again = runner.invoke(app, args)
        assert again.exit_code == 0, again.output
    whole = pl.read_parquet(tmp_path / "whole" / "pool" / "samples").sort("query_id", "sample_idx")
    depth = pl.read_parquet(tmp_path / "depth" / "pool" / "samples").sort("query_id", "sample_idx")
    tok = __import__("transformers").AutoTokenizer.from_pretrained(str(tiny_dir))
    by = {(w["query_id"], w["sample_idx"]): w for w in whole.iter_rows(named=True)}
    reasons = set()
    for d in depth.iter_rows(named=True):
        w = by[(d["query_id"], d["sample_idx"])]
        reasons.add(d["finish_reason"])
        offsets = d["probe_tokens"]
        assert offsets == list(range(3, 3 * len(offsets) + 1, 3)), d
        if d["finish_reason"] in ("stop", "length"):
            assert (d["text"], d["n_tokens"], d["finish_reason"]) == (w["text"], w["n_tokens"], w["finish_reason"])
            assert len(offsets) == (w["n_tokens"] - 1) // 3  # (every multiple of 3 below its end)
        else:
            assert d["finish_reason"] == "open" and d["n_tokens"] == offsets[-1] < w["n_tokens"], d
            trace = d["text"].split(PROBE_PROMPT)[0]
            assert trace == tok.decode(tok.encode(w["text"], add_special_tokens=False)[:d["n_tokens"]],
                                       skip_special_tokens=True)
    assert "open" in reasons, reasons
    summary = json.loads((tmp_path / "depth" / "run.json").read_text())
    ran = int(depth["n_tokens"].sum())
    assert ran - 3 <= summary["spent"]["tokens"] <= ran
    assert summary["spent"]["tokens"] <= summary["budget_total"]
    assert json.loads((tmp_path / "depth" / "run.json").read_text())["this_process"]["responses_generated"] == 0
    assert depth["probe_answer"].explode().drop_nulls().n_unique() > 1

    # the run's pool driven again (replay.live.PoolTraces in sample order, the run's query order and budget)
    from ttc.replay.live import PoolTraces, run_live_depth
    from ttc.replay.pool import Pool
    from ttc.replay.rng import query_keys, query_order

    res = {r["query_id"]: r for r in pl.read_parquet(tmp_path / "depth" / "results.parquet").iter_rows(named=True)}
    ids = sorted(res)
    rows = {q: [r for r in depth.iter_rows(named=True) if r["query_id"] == q] for q in ids}
    off = np.concatenate([[0], np.cumsum([len(rows[q]) for q in ids])]).astype(np.int64)
    tok, ans, ok, poff, ptok, pans, pok = [], [], [], [0], [], [], []
    for q in ids:
        code: dict = {}
        for r in rows[q]:
            opened = r["finish_reason"] not in ("stop", "length")
            tok.append(r["n_tokens"] + 1 if opened else r["n_tokens"])  # (an open trace was still running)
            ans.append(-1 if opened or r["answer"] is None else code.setdefault(r["answer"], len(code)))
            ok.append(bool(r["correct"]) and not opened)
            for o, a, c in zip(r["probe_tokens"], r["probe_answer"], r["probe_correct"], strict=True):
                ptok.append(o)
                pans.append(-1 if a is None else code.setdefault(a, len(code)))
                pok.append(bool(c))
            poff.append(len(ptok))
    pool = dataclasses.replace(Pool.from_arrays(off, correct=ok, tok=tok, query_ids=ids), ans=np.array(ans),
                               has_answers=True, probe_off=np.array(poff), probe_tok=np.array(ptok, np.int64),
                               probe_ans=np.array(pans, np.int64), probe_ok=np.array(pok), has_probes=True)
    cfg = RunConfig(policy, unit="tokens", **{a[2:].replace("-", "_"): (float if a == "--cmc-beta" else int)(v)
                                              for a, v in zip(extra[::2], extra[1::2], strict=True)})
    again = run_live_depth(PoolTraces(pool, np.arange(len(tok))), [8] * len(ids),
                           query_order(query_keys(ids), 3)[0], config=cfg, budget_total=summary["budget_total"])
    assert (again["samples_used"], again["tokens_used"]) == (summary["spent"]["samples"], summary["spent"]["tokens"])
    assert again["started"] == [res[q]["responses"] for q in ids]
    assert again["answered"] == [res[q]["answered"] for q in ids]


def test_a_capped_trace_whose_probe_never_closes_holds_no_answer():
    """A trace stopped at --trace-cap answers its probe's box (probe_value), not whatever the math extractor reads
    in the probe prompt's "The final answer is \\boxed{..." when the box never closes (it read '\\boxed{noidea')."""
    from ttc.harvest.live import BackendSource
    from ttc.harvest.types import Query

    q = Query("q", "math", "p", gold="3")
    src = BackendSource(None, [q], lambda q: q.problem, Sampling(n=1, max_tokens=10), oracle="gt")
    got = src._score(0, [Response("a trace" + PROBE_PROMPT + "no idea", 6, "cap"),
                         Response("a trace" + PROBE_PROMPT + "3}", 6, "cap"),
                         Response("a trace, so \\boxed{4}" + PROBE_PROMPT + "", 6, "cap"),
                         Response("so the final answer is \\boxed{3}", 5, "stop")])
    assert [(o.answer, o.correct) for o in got] == [(None, False), ("3", True), (None, False), ("3", True)]


def test_a_depth_run_resumed_with_other_terms_is_refused(pp, tmp_path):
    """The policy's parameters and the probe spacing are the run's: a rerun with others is refused, listing them."""
    kw = dict(policy="parallel-probe", unit="tokens", budget=1500.0, probe_every=STEP, chains=3)
    execute(plan_run(request(pp, tmp_path / "out", **kw)), ProbedBackend(pp), None, echo=lambda s: None)
    for other in (dict(chains=4), dict(probe_every=2 * STEP), dict(policy="cmc", chains=64)):
        with pytest.raises(RunError, match="another configuration"):
            plan_run(request(pp, tmp_path / "out", **{**kw, **other}))
