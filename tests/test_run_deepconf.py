"""deepconf-online under `ttc run` (harvest/run.py, replay/live.py): a backend that records each trace's record lows
of its group confidence, with and without stopping traces mid-way at their query's threshold, against the replay of
the same pool (whole traces, the engine cutting each where DeepConf's filter would); a killed run resumes to the same
results; a run without the record lows is refused."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.confidence import ConfidenceSpec  # noqa: E402
from ttc.harvest.pipeline import query_seed  # noqa: E402
from ttc.harvest.run import RunError, execute, plan_run  # noqa: E402
from ttc.harvest.types import Response  # noqa: E402
from ttc.replay.engine import replay  # noqa: E402
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.pool import load_pool  # noqa: E402

from support.synth_run import SEED, PoolBackend, SynthPool, request  # noqa: E402

WINDOW = 4
SPEC = ConfidenceSpec(("group-lows",), window=WINDOW)


class LowsPool(SynthPool):
    """A SynthPool whose responses have record lows: up to 4 strictly decreasing values at increasing positions from
    WINDOW - 1 on (one at the last token for a response shorter than the window), as group_lows records them, values
    in [0.5, 4]."""

    def __init__(self, tmp: Path, seed: int = 3):
        super().__init__(tmp, n=10, size=12, seed=seed)
        rng = np.random.default_rng(seed + 100)
        self.lows = []
        for i in range(self.n):
            row = []
            for t in self.tokens[i]:
                if t < WINDOW:
                    pos = [t - 1]
                else:
                    pos = sorted(rng.choice(np.arange(WINDOW - 1, t), size=min(int(rng.integers(1, 5)), t - WINDOW + 1),
                                        replace=False).tolist())
                val = sorted(set(np.round(rng.uniform(0.5, 4.0, len(pos)), 2).tolist()), reverse=True)
                pos = pos[:len(val)]
                row.append(([int(p) for p in pos], [float(v) for v in val]))
            self.lows.append(row)

    def pool(self, gt: bool = True):
        p = super().pool(gt)
        flat = [lw for row in self.lows for lw in row]
        p.lows = (np.concatenate([[0], np.cumsum([len(a) for a, _ in flat])]).astype(np.int64),
                  np.array([x for a, _ in flat for x in a], np.int64), np.array([x for _, b in flat for x in b]))
        return p


class LowsBackend(PoolBackend):
    """PoolBackend whose responses carry their record lows (the group-lows signal); given conf_stop, a trace whose
    record lows fall below its prompt's threshold stops at the first such low, as a backend that `stops` does: n_tokens
    = that position + 1, its lows cut there, no answer."""

    def __init__(self, sp: LowsPool, **kw):
        super().__init__(sp, **kw)
        self.stopped = 0

    def generate(self, prompts, sampling, seeds, stop=None, confidence=None, conf_stop=None):
        assert confidence is not None and "group-lows" in confidence.signals
        out = super().generate(prompts, sampling, seeds, stop)
        for p, s, rows, floor in zip(prompts, seeds, out, conf_stop or [None] * len(prompts)):
            i = self.by_prompt[p]
            k0 = s - query_seed(self.seed, self.sp.ids[i])
            for m, k in enumerate(range(k0, k0 + sampling.n)):
                if k >= self.sp.size:
                    rows[m] = Response("beyond the pool", 1, "stop", signals={"conf_lows_pos": [0], "conf_lows": [1.0]})
                    continue
                j = int(self.perm[i * self.sp.size + k]) - i * self.sp.size
                pos, val = self.sp.lows[i][j]
                r = rows[m]
                cut = next((c for c, v in enumerate(val) if v < floor), None) if floor is not None else None
                if cut is not None and pos[cut] >= WINDOW - 1:  # (the filter stops only full windows)
                    self.stopped += 1
                    rows[m] = Response("stopped", pos[cut] + 1, "confidence",
                                       signals={"conf_lows_pos": pos[:cut + 1], "conf_lows": val[:cut + 1]})
                else:
                    rows[m] = Response(r.text, r.n_tokens, r.finish_reason,
                                       signals={"conf_lows_pos": list(pos), "conf_lows": list(val)})
        return out


def _run(sp, out, backend=None, **kw):
    kw.setdefault("confidence", SPEC)
    plan = plan_run(request(sp, out, policy="deepconf-online", warmup=2, percentile=0.1, tau=0.95, **kw))
    return execute(plan, backend or LowsBackend(sp), None, echo=lambda s: None)


def _same_as_replay(o, pool, cfg, budget):
    df, pq = replay(pool, [cfg], [budget], [SEED], select="weighted", per_query=True)
    tot, per = df.row(0, named=True), {r["query_id"]: r for r in pq.iter_rows(named=True)}
    for r in o.results:
        e = per[r["query_id"]]
        assert (r["responses"], r["answered"], r["capped"], r["covered"], r["correct"]) == \
            (e["n_drawn"], e["answered"], e["capped"], e["covered"], e["selected_correct"]), r["query_id"]
    s = o.summary
    assert (s["spent"]["samples"], s["spent"]["tokens"]) == (tot["samples_used"], tot["tokens_used"])
    return tot


@pytest.fixture(scope="module")
def lp(tmp_path_factory):
    return LowsPool(tmp_path_factory.mktemp("lows"))


@pytest.mark.parametrize("unit, budget", [("samples", 6.0), ("tokens", 90.0)])
@pytest.mark.parametrize("stops", [True, False])
def test_deepconf_online_runs_live_as_it_replays(lp, tmp_path, monkeypatch, unit, budget, stops):
    """The run equals the replay of the whole-trace pool, query by query and in what it pays, whether the backend
    stops traces mid-way (then it generates fewer tokens) or generates them whole; the run's own pool, stopped traces
    and all, replays to the same run."""
    import ttc.harvest.run

    monkeypatch.setattr(ttc.harvest.run, "backend_stops", lambda req: stops)
    backend = LowsBackend(lp)
    o = _run(lp, tmp_path / "out", backend, unit=unit, budget=budget, select="weighted")
    cfg = RunConfig("deepconf-online", unit=unit, warmup=2, percentile=0.1, tau=0.95)
    _same_as_replay(o, lp.pool(), cfg, budget)
    samples = pl.read_parquet(tmp_path / "out" / "pool" / "samples")
    cut = samples.filter(pl.col("finish_reason") == "confidence")
    if stops:
        assert backend.stopped > 0 and cut.height == backend.stopped
        # a stopped trace holds its tokens up to its first record low below the threshold, and that low is its last
        assert (cut["n_tokens"] == cut["conf_lows_pos"].list.last() + 1).all()
    else:
        assert backend.stopped == 0 and cut.height == 0
    own = load_pool(tmp_path / "out" / "pool", lows=True)
    assert own.lows is not None


def test_stopping_mid_way_generates_fewer_tokens_for_the_same_run(lp, tmp_path, monkeypatch):
    import ttc.harvest.run

    got = {}
    for stops in (True, False):
        monkeypatch.setattr(ttc.harvest.run, "backend_stops", lambda req, s=stops: s)
        o = _run(lp, tmp_path / f"out{stops}", unit="samples", budget=8.0, select="weighted")
        got[stops] = o
    a, b = got[True].summary, got[False].summary
    assert a["spent"] == b["spent"] and [r["responses"] for r in got[True].results] == \
        [r["responses"] for r in got[False].results]
    assert a["cost"]["completion_tokens_generated"] < b["cost"]["completion_tokens_generated"]


def test_a_killed_run_resumes_to_the_same_results(lp, tmp_path):
    whole = _run(lp, tmp_path / "whole", budget=6.0, select="weighted")

    class Killed(LowsBackend):
        def generate(self, *a, **k):
            if self.calls == 3:
                raise KeyboardInterrupt
            return super().generate(*a, **k)

    with pytest.raises(KeyboardInterrupt):
        _run(lp, tmp_path / "cut", Killed(lp), budget=6.0, select="weighted")
    resumed = _run(lp, tmp_path / "cut", budget=6.0, select="weighted")
    assert resumed.resumed
    keep = ("query_id", "responses", "selected", "correct", "covered", "answered")
    assert [{k: r[k] for k in keep} for r in resumed.results] == [{k: r[k] for k in keep} for r in whole.results]
    assert resumed.summary["spent"] == whole.summary["spent"]


def test_without_record_lows_it_is_refused(lp, tmp_path):
    with pytest.raises(RunError, match="--confidence group-lows"):
        plan_run(request(lp, tmp_path / "o", policy="deepconf-online"))
    with pytest.raises(RunError, match="--confidence group-lows"):
        plan_run(request(lp, tmp_path / "o", policy="deepconf-online", confidence=ConfidenceSpec(("tail",))))


# ------------------------------------------------------------------- end to end: a tiny transformers model, the CLI

def test_the_command_line_stops_traces_with_a_tiny_model_and_its_pool_replays_the_run(tmp_path):
    """`ttc run --policy deepconf-online --confidence group-lows` with the transformers backend, which stops traces
    mid-way: some traces end with finish_reason "confidence", each at its first record low below its query's
    threshold (the last low it holds, at its last token), and the run's own pool, read in sample order with the run's
    query order, gives the run's allocation and spend again."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from ttc.cli import app

    from support.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny", chat=True, eos_logit=0.0)
    out = tmp_path / "run"
    math = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    args = ["run", "--dataset", str(math), "--model", str(model), "--backend", "transformers", "--max-tokens", "24",
            "--seed", "3", "--max-per-query", "8", "--no-progress", "--out", str(out), "--policy", "deepconf-online",
            "--warmup", "2", "--percentile", "0.1", "--tau", "0.95", "--budget", "5", "--confidence", "group-lows",
            "--confidence-window", "4", "--lookahead", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    got = pl.read_parquet(out / "pool" / "samples").sort("query_id", "sample_idx")
    cut = got.filter(pl.col("finish_reason") == "confidence")
    assert cut.height > 0 and (cut["n_tokens"] == cut["conf_lows_pos"].list.last() + 1).all()
    _replays_the_run(out, got, seed=3, budget=5, max_per_query=8)


def test_an_openai_compatible_server_with_free_slots_generates_whole_traces_and_pays_the_same(tmp_path, monkeypatch):
    """`--backend openai` against a server that returns log-probs: requests go out one query at a time as the run
    wants them (free slots), the record lows come from the log-probs, no trace is cut (the server cannot stop one),
    and the run's pool replays the run; it generated more completion tokens than it paid for."""
    pytest.importorskip("openai")
    import subprocess

    from typer.testing import CliRunner

    from ttc.cli import app

    server = HERE / "fixtures" / "harvest" / "fake_openai_server.py"
    proc = subprocess.Popen([sys.executable, str(server), "--key", "k"], stdout=subprocess.PIPE, text=True)
    monkeypatch.setenv("TTC_DC_KEY", "k")
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}/v1"
        out = tmp_path / "run"
        math = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
        r = CliRunner().invoke(app, [
            "run", "--dataset", str(math), "--model", "tiny", "--backend", "openai", "--base-url", url, "--api-key-env",
            "TTC_DC_KEY", "--template", "plain", "--max-tokens", "16", "--seed", "3", "--max-per-query", "8",
            "--no-progress", "--out", str(out), "--policy", "deepconf-online", "--warmup", "2", "--percentile", "0.1",
            "--tau", "0.95", "--budget", "5", "--confidence", "group-lows", "--confidence-window", "3",
            "--confidence-top-k", "4", "--unit", "samples"])
        assert r.exit_code == 0, r.output
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    got = pl.read_parquet(out / "pool" / "samples").sort("query_id", "sample_idx")
    assert got.height > 0 and (got["finish_reason"] != "confidence").all()
    summary = _replays_the_run(out, got, seed=3, budget=5, max_per_query=8)
    assert summary["this_process"].get("slots", 0) > 0
    assert summary["cost"]["completion_tokens_generated"] >= summary["spent"]["tokens"]


def _replays_the_run(out: Path, got: pl.DataFrame, *, seed: int, budget: float, max_per_query: int):
    """The run's own pool (got: its samples sorted by query and sample), read in sample order with the run's query
    order, gives the run's allocation and spend again."""
    import json

    from ttc.replay.live import PoolSource, run_live
    from ttc.replay.rng import query_keys, query_order

    res = pl.read_parquet(out / "results.parquet").sort("query_id")
    summary = json.loads((out / "run.json").read_text())
    ids = got["query_id"].unique(maintain_order=True).to_list()
    sizes = got.group_by("query_id", maintain_order=True).len()["len"].to_numpy()
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    lens = got["conf_lows_pos"].list.len().to_numpy()
    lows = (np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
            np.concatenate(got["conf_lows_pos"].to_list()).astype(np.int64),
            np.concatenate(got["conf_lows"].to_list()).astype(float))
    answers = got["answer"].to_list()
    ans = []
    for q0, q1 in zip(off[:-1], off[1:]):  # per-query answer ids, invalid -1
        labels: dict = {}
        ans += [-1 if a is None else labels.setdefault(a, len(labels)) for a in answers[q0:q1]]
    correct = got["correct"].fill_null(False).cast(pl.Int8).to_numpy()
    src = PoolSource(off, correct, correct.astype(float), np.array(ans, np.int64), got["n_tokens"].to_numpy(),
                     np.arange(got.height), lows=lows)
    again = run_live(src, [max_per_query] * len(ids), query_order(query_keys(ids), seed)[0], policy="deepconf-online",
                     warmup=2, percentile=0.1, tau=0.95, budget_total=int(round(budget * len(ids))))
    assert again["n_drawn"] == res["responses"].to_list()
    assert (again["samples_used"], again["tokens_used"]) == (summary["spent"]["samples"], summary["spent"]["tokens"])
    return summary
