"""`ttc run --stream`: requests one at a time as they come, the streaming policy under a budget rate. Each query
equals the engine run alone on its responses with the bank the rule gives it; each result is written before the
next query is generated for; bad lines become error lines and the stream goes on; a killed stream resumes to the
uninterrupted result; a growing file is followed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ttc.harvest.run import RunError, RunRequest, execute_stream, plan_run, stream_lines  # noqa: E402
from ttc.harvest.types import Sampling  # noqa: E402
from ttc.replay.engine import run_once  # noqa: E402
from ttc.replay.policies import RunConfig  # noqa: E402
from ttc.replay.rng import permutation  # noqa: E402

from support.synth_run import SEED, PoolBackend, SynthPool, _dense  # noqa: E402


def line(q: str, gold: str | None = None, **body) -> str:
    row = {"custom_id": q, "method": "POST", "url": "/v1/chat/completions",
           "body": {"messages": [{"role": "user", "content": f"problem {q}"}], **body}}
    if gold is not None:
        row["gold"] = gold
    return json.dumps(row)


def requests(sp: SynthPool, order=None) -> list[str]:
    return [line(sp.ids[i], sp.gold[i]) for i in (order if order is not None else range(sp.n))]


def stream(sp, out, lines, backend=None, **kw):
    base = dict(out=out, model="pool-model", backend="transformers", batch=Path("requests.jsonl"), stream=True,
                policy="streaming", sampling=Sampling(n=1, max_tokens=64, seed=SEED), budget=3.0,
                max_per_query=sp.size, retry_delay_s=0.0, progress=False)
    base.update(kw)
    plan = plan_run(RunRequest(**base))
    return execute_stream(plan, backend or PoolBackend(sp), None, lines=list(enumerate(lines, 1)),
                          echo=lambda s: None)


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    return SynthPool(tmp_path_factory.mktemp("synth"), n=10, size=10, seed=7)


def expected(sp, order, budget, cfg, unit="samples"):
    """Each query alone on the engine, with the bank round(budget (t + 1)) - spent so far."""
    pool = sp.pool()
    perm = permutation(pool.off, pool.qkeys, SEED)
    spent, out = 0, []
    for t, i in enumerate(order):
        idx = perm[pool.off[i]:pool.off[i + 1]]
        off = np.array([0, len(idx)])
        bank = int(round(budget * (t + 1))) - spent
        r = run_once(off, pool.correct[idx], pool.score[idx], _dense(pool.ans[idx], off), pool.tok[idx],
                     np.arange(len(idx)), [0], cfg, bank)
        spent += int(r["samples_used"] if unit == "samples" else r["tokens_used"])
        out.append(r)
    return out


@pytest.mark.parametrize("kw", [dict(), dict(max_samples=4), dict(K=2, budget=4.0), dict(unit="tokens", budget=40.0),
                                dict(oracle="sc", eliminate="sc-share", select="sc", m_min=2)])
def test_each_query_runs_alone_under_the_budget_rate(sp, tmp_path, kw):
    order = [3, 0, 7, 1, 9, 2, 8, 4, 6, 5]
    o = stream(sp, tmp_path / "out", requests(sp, order), **kw)
    cfg = RunConfig("streaming", unit=kw.get("unit", "samples"), K=kw.get("K", 1),
                    eliminate=kw.get("eliminate", "threshold"), max_samples=kw.get("max_samples", 0),
                    m_min=kw.get("m_min", 3))
    want = expected(sp, order, kw.get("budget", 3.0), cfg, kw.get("unit", "samples"))
    assert [r["query_id"] for r in o.results] == [sp.ids[i] for i in order]  # the order they came in
    for r, w in zip(o.results, want):
        assert r["responses"] == int(w["n_drawn"][0]) and r["answered"] == bool(w["answered"][0])
        assert r["capped"] == bool(w["capped"][0]) and r["exhausted"] == bool(w["exhausted_q"][0])
        if kw.get("oracle") != "sc":
            assert r["correct"] == bool(w["sel_bon"][0]) and r["covered"] == bool(w["covered"][0])
    s = o.summary
    unit = kw.get("unit", "samples")
    assert s["spent"][unit] <= round(kw.get("budget", 3.0) * sp.n)  # the rate holds over the stream
    assert s["queries"] == sp.n and json.loads((tmp_path / "out" / "run.json").read_text())["stream"] is True
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == [sp.ids[i] for i in order]


def test_each_result_is_written_before_the_next_query_is_generated_for(sp, tmp_path):
    out = tmp_path / "out"
    seen = []

    class Watching(PoolBackend):
        def generate(self, prompts, sampling, seeds, stop=None):
            done = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").exists() else []
            seen.append((prompts[0], [json.loads(x)["custom_id"] for x in done]))
            return super().generate(prompts, sampling, seeds, stop)

    stream(sp, out, requests(sp), Watching(sp))
    for prompt, done in seen:
        q = prompt.split()[-1]
        assert done == sp.ids[:sp.ids.index(q)]  # every query before it, finished and written


def test_bad_lines_become_error_lines_and_the_stream_goes_on(sp, tmp_path):
    lines = requests(sp)[:3] + ["{broken", line(sp.ids[1], sp.gold[1]), line("no-gold"),
                                line(sp.ids[5], sp.gold[5], n=3)] + requests(sp)[3:5]
    o = stream(sp, tmp_path / "out", lines)
    out = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(out) == len(lines)
    bad = [x for x in out if x["error"] and x["error"]["code"] == "invalid_request"]
    assert len(bad) == 4 and all(x["response"] is None for x in bad)
    assert "not a JSON line" in bad[0]["error"]["message"] and "came before" in bad[1]["error"]["message"]
    assert "gold" in bad[2]["error"]["message"] and "n must be 1" in bad[3]["error"]["message"]
    assert o.summary["queries"] == 5 and o.summary["invalid_lines"] == 4
    # the valid queries ran as if the bad lines were not there
    want = expected(sp, [0, 1, 2, 3, 4], 3.0, RunConfig("streaming"))
    valid = [r for r in o.results if r["status"] != "invalid"]
    assert [r["responses"] for r in valid] == [int(w["n_drawn"][0]) for w in want]


def test_a_killed_stream_resumes_to_the_uninterrupted_result(sp, tmp_path):
    whole = stream(sp, tmp_path / "whole", requests(sp))

    class Killed(PoolBackend):
        def generate(self, *a, **k):
            if self.calls == 9:
                raise KeyboardInterrupt
            return super().generate(*a, **k)

    with pytest.raises(KeyboardInterrupt):
        stream(sp, tmp_path / "cut", requests(sp), Killed(sp))
    done = (tmp_path / "cut" / "results.jsonl").read_text().splitlines()
    assert 0 < len(done) < sp.n
    again = stream(sp, tmp_path / "cut", requests(sp))
    assert again.resumed
    keep = ("query_id", "status", "responses", "generated", "selected", "text", "correct")
    assert [{k: r[k] for k in keep} for r in again.results] == [{k: r[k] for k in keep} for r in whole.results]
    a = [json.loads(x) for x in (tmp_path / "whole" / "results.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "cut" / "results.jsonl").read_text().splitlines()]
    for x in a + b:
        if x["response"]:
            x["response"]["body"].pop("created")
    assert a == b


def test_a_growing_file_is_followed_until_it_goes_quiet(tmp_path):
    f = tmp_path / "grow.jsonl"
    f.write_text("one\n")
    it = stream_lines(f, idle_s=0.3, poll_s=0.01)
    assert next(it) == (1, "one")
    with open(f, "a") as w:  # appended while the first line is being worked on
        w.write("two\nthr")
    assert next(it) == (2, "two")
    with open(f, "a") as w:  # a line is yielded only once whole
        w.write("ee\n")
    assert next(it) == (3, "three")
    with pytest.raises(StopIteration):  # then nothing for 0.3 s: the stream ends
        next(it)
    assert list(stream_lines(f)) == [(1, "one"), (2, "two"), (3, "three")]  # idle 0: to the end of the file


@pytest.mark.parametrize("kw, message", [
    (dict(policy="elimination"), "--policy streaming"),
    (dict(batch=None, dataset="math500"), "--stream reads requests"),
    (dict(stream_idle_s=float("nan")), "--stream-idle"),
    (dict(stream=False, batch=Path("-")), "only --stream"),
])
def test_stream_refusals(sp, tmp_path, kw, message):
    base = dict(out=tmp_path / "out", model="m", backend="transformers", batch=Path("-"), stream=True,
                policy="streaming", sampling=Sampling(n=1, max_tokens=8), budget=2.0)
    base.update(kw)
    with pytest.raises(RunError, match=message):
        plan_run(RunRequest(**base))
    assert not (tmp_path / "out").exists()


def test_stream_from_stdin_through_the_command_line(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from ttc.cli import app

    from support.tiny_model import make_tiny_model

    tiny = make_tiny_model(tmp_path / "tiny", chat=True)
    text = "\n".join([line("a"), line("b"), "not json", line("c")]) + "\n"
    r = CliRunner().invoke(app, ["run", "--stream", "--batch", "-", "--policy", "streaming", "--oracle", "sc",
                                 "--eliminate", "sc-share", "--model", str(tiny), "--backend", "transformers",
                                 "--max-tokens", "8", "--budget", "2", "--max-samples", "3", "--no-progress",
                                 "--out", str(tmp_path / "out")], input=text)
    assert r.exit_code == 0, r.output
    out = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in out] == ["a", "b", None, "c"]
    assert out[2]["error"]["code"] == "invalid_request"
    summary = json.loads((tmp_path / "out" / "run.json").read_text())
    assert summary["queries"] == 3 and summary["spent"]["samples"] <= 6 and "as they came" in r.output
