"""`ttc run` end to end on CPU with a tiny random transformers model: a run is a harvest (its responses are the ones
`ttc harvest` draws with the same model, template and seed, sample for sample), its pool reproduces its allocation
in sample order and loads in `ttc replay`; a run killed mid-way (a crash injected while a part is renamed) resumes to
the uninterrupted result; OpenAI Batch input files (messages through the chat template, custom ids, gold answers)
and their bad lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from ttc.cli import app  # noqa: E402
from ttc.harvest.run import CRASH_ENV  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MATH = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
sys.path.insert(0, str(HERE))
from support.tiny_model import make_tiny_model  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-chat", chat=True)


def ok(r):
    assert r.exit_code == 0, (r.exit_code, r.output)
    return r


def clean_error(r, pattern):
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output and pattern in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("error:")]) == 1, r.output


def run_args(model, out, *extra):
    return ["run", "--dataset", str(MATH), "--model", str(model), "--backend", "transformers", "--max-tokens", "12",
            "--seed", "3", "--max-per-query", "8", "--no-progress", "--out", str(out), *extra]


def samples(pool: Path) -> pl.DataFrame:
    return pl.read_parquet(pool / "samples").sort("query_id", "sample_idx")


def test_a_run_is_a_harvest_and_its_pool_reproduces_it(tiny, tmp_path):
    out = tmp_path / "run"
    r = ok(runner.invoke(app, run_args(tiny, out, "--policy", "ucb", "--unit", "tokens", "--budget", "30",
                                       "--lookahead", "2")))
    assert "backend calls" in r.output and "prompt tokens" in r.output
    got = samples(out / "pool")
    res = pl.read_parquet(out / "results.parquet")
    summary = json.loads((out / "run.json").read_text())
    assert summary["spent"]["tokens"] <= 30 * 4 and res["responses"].sum() == summary["spent"]["samples"]
    assert summary["cost"]["prompt_tokens"] > 0 and summary["cost"]["responses_generated"] == got.height

    # ttc harvest with the same model, template and seed draws the same responses, sample for sample
    harvest = tmp_path / "harvest"
    deepest = int(got.group_by("query_id").len()["len"].max())
    ok(runner.invoke(app, ["harvest", "--dataset", str(MATH), "--model", str(tiny), "--backend", "transformers",
                           "--responses", str(deepest), "--max-tokens", "12", "--seed", "3", "--out", str(harvest),
                           "--no-progress"]))
    h = samples(harvest).join(got.select("query_id", "sample_idx"), on=["query_id", "sample_idx"], how="semi")
    assert h.select("query_id", "sample_idx", "text", "n_tokens", "finish_reason").equals(
        got.select("query_id", "sample_idx", "text", "n_tokens", "finish_reason"))

    # the run's own pool, read in sample order with the run's query order, gives the run's allocation again
    from ttc.replay.live import PoolSource, run_live
    from ttc.replay.rng import query_keys, query_order

    ids = got["query_id"].unique(maintain_order=True).to_list()
    sizes = got.group_by("query_id", maintain_order=True).len()["len"].to_numpy()
    off = np.concatenate([[0], np.cumsum(sizes)])
    tok = got["n_tokens"].to_numpy()
    src = PoolSource(off, np.zeros(got.height, np.int8), np.zeros(got.height), np.full(got.height, -1), tok,
                     np.arange(got.height))
    again = run_live(src, [8] * len(ids), query_order(query_keys(ids), 3)[0], policy="ucb", unit="tokens",
                     budget_total=120)
    assert again["n_drawn"] == res.sort("query_id")["responses"].to_list()

    # and it is an ordinary pool: ttc info and ttc replay read it (replay draws in its own seeded order over the
    # responses the run happened to generate, so it answers another question; see docs/run.md)
    ok(runner.invoke(app, ["info", str(out / "pool")]))
    ok(runner.invoke(app, ["replay", str(out / "pool"), "--policy", "uniform", "--budgets", "2", "--seeds", "2"]))

    # rerun of a finished run: the same results, no model loaded
    before = (out / "results.jsonl").read_text()
    r = ok(runner.invoke(app, run_args(tiny, out, "--policy", "ucb", "--unit", "tokens", "--budget", "30",
                                       "--lookahead", "2")))
    assert "generated nothing" in r.output and (out / "results.jsonl").read_text() == before


def test_a_killed_run_resumes_to_the_uninterrupted_result(tiny, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = ("--policy", "elimination", "--budget", "3", "--oracle", "sc", "--eliminate", "sc-share", "--m-min", "2")
    ok(runner.invoke(app, run_args(tiny, whole, *args)))
    env = {**os.environ, CRASH_ENV: "1"}  # write the first call's part, die while renaming the second call's
    proc = subprocess.run([sys.executable, "-m", "ttc.cli", *run_args(tiny, killed, *args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 75, proc.stderr[-2000:]
    assert len(list((killed / "pool" / "samples").glob("part-*.parquet"))) == 1
    assert list((killed / "pool" / "samples").glob(".part-*.tmp-*"))  # the torn part never became a part
    assert not (killed / "results.jsonl").exists()
    r = ok(runner.invoke(app, run_args(tiny, killed, *args)))
    assert "resuming" in r.output
    a, b = pl.read_parquet(whole / "results.parquet"), pl.read_parquet(killed / "results.parquet")
    assert a.equals(b)
    assert samples(whole / "pool").equals(samples(killed / "pool"))
    wl = [json.loads(x) for x in (whole / "results.jsonl").read_text().splitlines()]
    kl = [json.loads(x) for x in (killed / "results.jsonl").read_text().splitlines()]
    for x in wl + kl:
        x["response"]["body"].pop("created")
    assert wl == kl
    # a changed configuration on resume: one line naming the difference, nothing touched
    before = sorted(p.name for p in (killed / "pool" / "samples").iterdir())
    clean_error(runner.invoke(app, run_args(tiny, killed, *args[:-1], "3")), "m_min")
    clean_error(runner.invoke(app, run_args(tiny, killed, *args, "--temperature", "0.9")), "temperature")
    assert sorted(p.name for p in (killed / "pool" / "samples").iterdir()) == before


def batch_line(cid, messages, gold=None, **body):
    row = {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
           "body": {"messages": messages, **body}}
    if gold is not None:
        row["gold"] = gold
    return json.dumps(row)


def test_an_openai_batch_file_runs_through_the_chat_template(tiny, tmp_path):
    from transformers import AutoTokenizer

    batch = tmp_path / "batch.jsonl"
    sys_msg = {"role": "system", "content": "answer in a box"}
    batch.write_text("\n".join([
        batch_line("req-b", [sys_msg, {"role": "user", "content": "what is 2 + 3 ?"}], gold="5"),
        batch_line("req-a", [{"role": "user", "content": [{"type": "text", "text": "find x"}]}], gold="4",
                   max_tokens=12, temperature=0.6),
        batch_line("req-c", [{"role": "user", "content": "sum of 1 and 1"}], gold="2", model=str(tiny)),
    ]) + "\n")
    out = tmp_path / "out"
    ok(runner.invoke(app, ["run", "--batch", str(batch), "--model", str(tiny), "--backend", "transformers",
                           "--max-tokens", "12", "--budget", "2", "--policy", "uniform", "--no-progress",
                           "--out", str(out)]))
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == ["req-b", "req-a", "req-c"]  # the input's order
    assert all(x["response"]["body"]["ttc"]["responses"] == 2 for x in lines)
    q = pl.read_parquet(out / "pool" / "queries.parquet")
    prompt = dict(zip(q["query_id"], q["prompt"]))
    tok = AutoTokenizer.from_pretrained(str(tiny))
    assert prompt["req-b"] == tok.apply_chat_template([sys_msg, {"role": "user", "content": "what is 2 + 3 ?"}],
                                                      add_generation_prompt=True, tokenize=False)
    assert "answer in a box" in prompt["req-b"] and "find x" in prompt["req-a"]
    # the same file resumes; another file is refused
    ok(runner.invoke(app, ["run", "--batch", str(batch), "--model", str(tiny), "--backend", "transformers",
                           "--max-tokens", "12", "--budget", "2", "--policy", "uniform", "--no-progress",
                           "--out", str(out)]))
    batch.write_text(batch.read_text().replace("find x", "find y"))
    clean_error(runner.invoke(app, ["run", "--batch", str(batch), "--model", str(tiny), "--backend", "transformers",
                                    "--max-tokens", "12", "--budget", "2", "--policy", "uniform", "--out", str(out)]),
                "dataset.digest")


@pytest.mark.parametrize("line, message", [
    ("{not json", "not a JSON line"),
    ('["a list"]', "JSON object"),
    (json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}), "no custom_id"),
    (batch_line("a", [{"role": "user", "content": "x"}]) + "\n" + batch_line("a", [{"role": "user", "content": "y"}]),
     "also on line 1"),
    (json.dumps({"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", "body": {}}), "POST"),
    (json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}), "url must be"),
    (batch_line("a", [{"role": "user", "content": "x"}], model="another-model"), "is not --model"),
    (batch_line("a", [{"role": "user", "content": "x"}], n=4), "n must be 1"),
    (batch_line("a", [{"role": "user", "content": "x"}], seed=1), "body.seed"),
    (batch_line("a", [{"role": "user", "content": "x"}], temperature=0.1), "--temperature"),
    (batch_line("a", [{"role": "tool", "content": "x"}]), "role"),
    (batch_line("a", [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]), "last message"),
    (batch_line("a", []), "non-empty list"),
    ("", "no requests"),
])
def test_bad_batch_lines_are_one_error_each_and_nothing_is_written(tiny, tmp_path, line, message):
    batch = tmp_path / "b.jsonl"
    batch.write_text(line + "\n")
    r = runner.invoke(app, ["run", "--batch", str(batch), "--model", "m", "--backend", "transformers",
                            "--max-tokens", "12", "--budget", "2", "--oracle", "sc", "--out", str(tmp_path / "o")])
    clean_error(r, message)
    assert not (tmp_path / "o").exists()


def test_batch_refusals_that_need_the_options(tiny, tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text(batch_line("a", [{"role": "user", "content": "x"}]) + "\n")
    base = ["run", "--batch", str(batch), "--model", str(tiny), "--backend", "transformers", "--max-tokens", "12",
            "--budget", "2", "--out", str(tmp_path / "o")]
    clean_error(runner.invoke(app, base), "needs a gold answer on every line")  # --oracle gt by default
    clean_error(runner.invoke(app, [*base, "--oracle", "sc", "--limit", "2"]), "--limit applies to --dataset")
    batch.write_text(batch_line("a", [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]) + "\n")
    clean_error(runner.invoke(app, [*base, "--oracle", "sc", "--no-chat"]), "2 messages")
    clean_error(runner.invoke(app, [*base, "--oracle", "sc", "--workers", "2"]),
                "--workers applies to ttc run --oracle exec, not sc")
    clean_error(runner.invoke(app, [*base, "--oracle", "sc", "--base-url", "http://x/v1"]), "--base-url applies to")
    clean_error(runner.invoke(app, [*base, "--oracle", "judge"]), "--oracle judge needs a gold answer")
    assert not (tmp_path / "o").exists()


def test_ttc_run_in_python_is_the_command(tiny, tmp_path, capsys):
    """ttc.run with the transformers backend takes the command line's path (harvest.run.run_command: the backend
    built from its options, the tokenizer counting prompts): the same responses, results and outcome as `ttc run`,
    and nothing printed."""
    import ttc

    ok(runner.invoke(app, run_args(tiny, tmp_path / "cli", "--policy", "entropy", "--budget", "3", "--device",
                                   "cpu")))
    capsys.readouterr()
    got = ttc.run(str(tiny), out=tmp_path / "api", dataset=str(MATH), backend="transformers", max_tokens=12, seed=3,
                  max_per_query=8, policy="entropy", budget=3, backend_options={"device": "cpu"})
    assert capsys.readouterr() == ("", "")
    cli = json.loads((tmp_path / "cli" / "run.json").read_text())
    assert got.summary["outcome"] == cli["outcome"] and got.summary["spent"] == cli["spent"]
    assert got.summary["cost"]["prompt_tokens"] == cli["cost"]["prompt_tokens"] > 0
    assert got.frame().equals(pl.read_parquet(tmp_path / "cli" / "results.parquet"))
    assert samples(tmp_path / "api" / "pool").drop("text").equals(samples(tmp_path / "cli" / "pool").drop("text"))


def test_trace_cap_stops_each_trace_there_and_probes_it(tiny, tmp_path):
    """--trace-cap with the transformers backend: a trace still running at the cap is the whole trace's first `cap`
    tokens (the same seeded draws), stops there (finish_reason cap, n_tokens the cap, what the run pays) and holds
    the greedy continuation of PROBE_PROMPT; a trace that ends before the cap is the same as without one."""
    from transformers import AutoTokenizer

    from ttc.harvest.backends import PROBE_PROMPT

    cap = 6
    ok(runner.invoke(app, run_args(tiny, tmp_path / "whole", "--policy", "uniform", "--budget", "3")))
    r = ok(runner.invoke(app, run_args(tiny, tmp_path / "capped", "--policy", "uniform", "--budget", "3",
                                       "--trace-cap", str(cap))))
    assert "trace_cap=6" in r.output
    whole, capped = samples(tmp_path / "whole" / "pool"), samples(tmp_path / "capped" / "pool")
    assert whole.select("query_id", "sample_idx").equals(capped.select("query_id", "sample_idx"))
    tok = AutoTokenizer.from_pretrained(str(tiny))
    n_capped = 0
    for w, c in zip(whole.iter_rows(named=True), capped.iter_rows(named=True)):
        if w["n_tokens"] <= cap:
            assert (c["text"], c["n_tokens"], c["finish_reason"]) == (w["text"], w["n_tokens"], w["finish_reason"])
            continue
        n_capped += 1
        assert c["finish_reason"] == "cap" and c["n_tokens"] == cap, c
        trace, probe = c["text"].split(PROBE_PROMPT)
        assert trace == tok.decode(tok.encode(w["text"], add_special_tokens=False)[:cap], skip_special_tokens=True)
        assert len(tok.encode(probe, add_special_tokens=False)) <= 24
    assert n_capped > 0
    summary = json.loads((tmp_path / "capped" / "run.json").read_text())
    assert summary["spent"]["tokens"] == int(capped["n_tokens"].sum()) < int(whole["n_tokens"].sum())
    assert json.loads((tmp_path / "capped" / "pool" / "pool.json").read_text())["allocation"]["trace_cap"][
        "tokens"] == cap


@pytest.mark.parametrize("every, m", [(3, 1), (2, 2)])
def test_stability_stops_a_trace_at_agreeing_probes_as_a_prefix_of_the_whole(tiny, tmp_path, every, m, monkeypatch):
    """--depth-rule stability with the transformers backend: a trace probed every `every` tokens that stops
    (finish_reason stable) is the whole trace's first n_tokens tokens (probing draws nothing from its generator), at
    a probe's offset, shorter than the whole trace, and holds PROBE_PROMPT and a probe with a valid answer (the last
    of m that agree); a trace that no probe stops is the same as without the rule; the run pays the tokens run.
    The tiny model's greedy probes never close their box (no answer: probe_value), so each probe's forward pass runs
    and its continuation is then replaced by a closed box holding the parity of the trace's word count (probes
    every 2 words agree, every 3 alternate)."""
    from transformers import AutoTokenizer

    from ttc.harvest.backends import PROBE_PROMPT, TransformersBackend, probe_value

    real = TransformersBackend.probe_answer

    def probe(self, ids, trace):
        real(self, ids, trace)
        return f"{len(trace.split()) % 2}}}"

    monkeypatch.setattr(TransformersBackend, "probe_answer", probe)

    ok(runner.invoke(app, run_args(tiny, tmp_path / "whole", "--policy", "uniform", "--budget", "3")))
    r = ok(runner.invoke(app, run_args(tiny, tmp_path / "stable", "--policy", "uniform", "--budget", "3",
                                       "--depth-rule", "stability", "--depth-m", str(m), "--probe-every",
                                       str(every))))
    assert f"depth=stability:{m}" in r.output
    whole, stable = samples(tmp_path / "whole" / "pool"), samples(tmp_path / "stable" / "pool")
    assert whole.select("query_id", "sample_idx").equals(stable.select("query_id", "sample_idx"))
    tok = AutoTokenizer.from_pretrained(str(tiny))
    stopped = 0
    for w, s in zip(whole.iter_rows(named=True), stable.iter_rows(named=True)):
        if s["finish_reason"] != "stable":
            assert (s["text"], s["n_tokens"], s["finish_reason"]) == (w["text"], w["n_tokens"], w["finish_reason"])
            continue
        stopped += 1
        n = s["n_tokens"]
        assert n % every == 0 and n >= every * m and n < w["n_tokens"], (s, w)
        trace, probe = s["text"].split(PROBE_PROMPT)
        assert trace == tok.decode(tok.encode(w["text"], add_special_tokens=False)[:n], skip_special_tokens=True)
        assert probe_value(probe) is not None and s["answer"] == probe_value(probe)
    assert stopped > 0
    summary = json.loads((tmp_path / "stable" / "run.json").read_text())
    assert summary["spent"]["tokens"] == int(stable["n_tokens"].sum()) < int(whole["n_tokens"].sum())
    depth = json.loads((tmp_path / "stable" / "pool" / "pool.json").read_text())["allocation"]["depth"]
    assert (depth["rule"], depth["m"], depth["probe_every"]) == ("stability", m, every)
