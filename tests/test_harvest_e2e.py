"""`ttc harvest` -> `ttc score` -> `ttc info` / `ttc replay` on CPU with a tiny random model and a tiny stand-in PRM;
a harvest killed midway and resumed equals an uninterrupted one; shards merged through the CLI equal a whole run;
bad input is an `error: ...` line with exit code 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from typer.testing import CliRunner  # noqa: E402

from ttc.cli import app  # noqa: E402
from ttc.harvest.pipeline import CRASH_ENV, part_files, read_meta  # noqa: E402
from ttc.replay.pool import load_pool  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIX = HERE / "fixtures" / "harvest_pipeline"
MATH500 = REPO.parent / "shared" / "data" / "benchmarks" / "math500.jsonl"
sys.path.insert(0, str(HERE))
from support.tiny_model import make_tiny_model  # noqa: E402

runner = CliRunner()


def ok(result):
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def clean_error(result, pattern):
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert pattern in result.output, result.output


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", chat=True)


@pytest.fixture(scope="module")
def tiny_prm_dir(tmp_path_factory):
    from support.tiny_prm import tiny_prm

    return tiny_prm(tmp_path_factory.mktemp("prm"))


def math_source() -> Path:
    """MATH-500 from the shared data when present (first 4 problems), else a MATH-style fixture."""
    return MATH500 if MATH500.exists() else FIX / "math_small.jsonl"


def harvest_args(model, out, dataset=None, *extra):
    return ["harvest", "--dataset", str(dataset or math_source()), "--limit", "4", "--model", str(model),
            "--backend", "transformers", "--responses", "4", "--max-tokens", "16", "--seed", "3", "--out", str(out),
            "--shard-size", "1", "--no-progress", *extra]


def samples(pool):
    return pl.read_parquet(part_files(pool)).sort("query_id", "sample_idx")


def test_harvest_score_info_replay_math(tiny, tiny_prm_dir, tmp_path):
    pool = tmp_path / "math"
    r = ok(runner.invoke(app, harvest_args(tiny, pool, None, "--oracle", "gt", "--workers", "1")))
    assert "4 to generate (16 responses)" in r.output and "gt: scored 16 responses" in r.output
    df = samples(pool)
    assert df.height == 16 and df["n_tokens"].min() >= 1 and df["n_tokens"].max() <= 16
    assert set(df["finish_reason"]) <= {"stop", "length"}
    assert df.filter(pl.col("finish_reason") == "length")["answer"].null_count() == \
        df.filter(pl.col("finish_reason") == "length").height          # truncated: no answer
    meta = read_meta(pool)
    assert meta["generation"]["template"]["name"] == "math-fewshot"
    assert meta["backend"]["backend"] == "transformers" and meta["oracles"]["gt"]["math_verify"]
    q = pl.read_parquet(pool / "queries.parquet")
    assert q["prompt"].str.contains("Step 1:").all() and q["gold"].null_count() == 0

    r = ok(runner.invoke(app, ["score", str(pool), "--oracle", "prm", "--prm-model", str(tiny_prm_dir),
                               "--prm-batch-size", "4", "--prm-device", "cpu", "--no-progress"]))
    assert "prm: scored 16 responses" in r.output
    df = samples(pool)
    for col in ("score_prm_min", "score_prm_last", "score_prm_prod"):
        assert df[col].is_between(0, 1).all()
    assert (df["score_prm_min"] <= df["score_prm_last"]).all()
    steps = df["prm_steps"].to_list()
    assert all(m == (min(s) if s else 0.0) for m, s in zip(df["score_prm_min"], steps))
    assert read_meta(pool)["oracles"]["prm"]["model"] == str(tiny_prm_dir)

    # an LLM judge (the tiny model through the transformers backend; random weights give no verdict: score 0)
    r = ok(runner.invoke(app, ["score", str(pool), "--oracle", "judge", "--judge-model", str(tiny),
                               "--judge-backend", "transformers", "--judge-max-tokens", "4", "--no-progress"]))
    assert "judge: scored 16 responses" in r.output and "-> score_judge" in r.output
    assert samples(pool)["score_judge"].is_between(0, 1).all()
    judge = read_meta(pool)["oracles"]["judge"]
    assert judge["model"] == str(tiny) and judge["backend"] == "transformers"

    ok(runner.invoke(app, ["info", str(pool)]))
    ok(runner.invoke(app, ["replay", str(pool), "--seeds", "5", "--budgets", "1,2"]))
    for score in ("prm_min", "judge"):
        ok(runner.invoke(app, ["replay", str(pool), "--seeds", "5", "--budgets", "1,2", "--score", score,
                               "--policy", "uniform,ucb"]))

    # scoring gt again replaces its columns and says so
    r = ok(runner.invoke(app, ["score", str(pool), "--oracle", "gt", "--workers", "1", "--no-progress"]))
    assert "replaced the existing columns" in r.output
    assert samples(pool).columns.count("correct") == 1
    # and the wrong oracle for the task is refused
    clean_error(runner.invoke(app, ["score", str(pool), "--oracle", "exec"]), "--oracle gt")


def test_harvest_and_score_lcb_exec(tiny, tmp_path):
    pool = tmp_path / "lcb"
    r = ok(runner.invoke(app, harvest_args(tiny, pool, FIX / "lcb_exec.jsonl", "--oracle", "exec", "--workers", "1")))
    assert "lcb-exec-cot prompts" in r.output and "exec: scored 12 responses" in r.output
    q = pl.read_parquet(pool / "queries.parquet").sort("query_id")
    assert q["task"].to_list() == ["lcb-exec"] * 3 and q["gold"][0] == "12"
    assert q["prompt"].str.contains("[ANSWER]", literal=True).all()
    df = samples(pool)
    assert df["correct"].dtype == pl.Boolean and df.height == 12
    assert read_meta(pool)["oracles"]["exec"]["task"] == "lcb-exec"
    assert load_pool(pool).n_queries == 3
    ok(runner.invoke(app, ["replay", str(pool), "--seeds", "5", "--budgets", "1,2"]))


def test_killed_harvest_resumes_to_the_uninterrupted_result(tiny, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    ok(runner.invoke(app, harvest_args(tiny, whole)))
    env = {**os.environ, CRASH_ENV: "2"}  # die while renaming the third part into place
    proc = subprocess.run([sys.executable, "-m", "ttc.cli", *harvest_args(tiny, killed)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 75, proc.stderr[-2000:]
    assert len(part_files(killed)) == 2
    assert list((killed / "samples").glob(".part-*.tmp-*"))          # the torn part never became a part
    assert read_meta(killed)["complete"] is False

    r = ok(runner.invoke(app, harvest_args(tiny, killed)))
    assert "2 already written, 2 to generate" in r.output
    assert samples(killed).equals(samples(whole))
    assert not list((killed / "samples").glob(".*"))
    meta = read_meta(killed)
    assert meta["complete"] and [run["queries_written"] for run in meta["runs"]] == [2, 2]
    r = ok(runner.invoke(app, harvest_args(tiny, killed)))
    assert "0 to generate" in r.output

    # shards through the CLI: two halves merged equal the whole run
    shard_dirs = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, d in enumerate(shard_dirs):
        r = ok(runner.invoke(app, harvest_args(tiny, d, None, "--shard", f"{i}/2")))
        assert f"shard {i}/2 holds" in r.output
    clean_error(runner.invoke(app, ["merge", str(shard_dirs[0]), "--out", str(tmp_path / "half")]),
                "shard 1/2 not given")
    r = ok(runner.invoke(app, ["merge", *map(str, shard_dirs), "--out", str(tmp_path / "merged")]))
    assert "4 queries, 16 responses" in r.output
    assert samples(tmp_path / "merged").equals(samples(whole))
    # resuming with other sampling options is refused, naming the difference
    clean_error(runner.invoke(app, harvest_args(tiny, killed, None, "--temperature", "0.9")),
                "sampling.temperature: 0.6 vs 0.9")


def test_bad_input_is_a_clean_error(tiny, tmp_path):
    out = str(tmp_path / "p")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--shard", "2/2")), "--shard")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--shard", "one/two")), "--shard takes I/N")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--oracle", "bleu")), "unknown oracle 'bleu'")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--oracle", "exec")), "oracle 'exec' grades task")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--base-url", "http://x/v1")),
                "--base-url applies to --backend openai")
    clean_error(runner.invoke(app, harvest_args(tiny, out, tmp_path / "nope.jsonl")), "no such file")
    clean_error(runner.invoke(app, harvest_args(tiny, out, None, "--template", "lcb-exec-cot")),
                "template 'lcb-exec-cot' is for lcb-exec queries")
    assert not (tmp_path / "p").exists()          # nothing was written by refused runs
    clean_error(runner.invoke(app, ["score", str(REPO / "data" / "math500-llama3.1-8b-48"), "--oracle", "gt"]),
                "no 'text' column")
    (tmp_path / "notapool").mkdir()
    clean_error(runner.invoke(app, ["merge", str(tmp_path / "notapool"), "--out", str(tmp_path / "m")]),
                "no harvest pool.json")
    clean_error(runner.invoke(app, ["merge", str(tmp_path), "--out", str(tmp_path / "m")]),  # would write inside it
                "which this command reads")


def test_ctrl_c_keeps_finished_parts_and_says_how_to_resume(tmp_path, monkeypatch):
    import ttc.harvest.backends
    from ttc.harvest.types import Response

    class Interrupted:
        """Stands in for a model: Ctrl-C arrives during the second batch."""
        tokenizer = None
        calls = 0

        def generate(self, prompts, sampling, seeds, stop=None):
            Interrupted.calls += 1
            if Interrupted.calls == 2:
                raise KeyboardInterrupt
            return [[Response(f"\\boxed{{{i}}}", 3, "stop") for i in range(sampling.n)] for _ in prompts]

        def info(self):
            return {"backend": "stand-in"}

    monkeypatch.setattr(ttc.harvest.backends, "make_backend", lambda name, **kw: Interrupted())
    pool = tmp_path / "p"
    r = runner.invoke(app, harvest_args("stand-in", pool))
    assert r.exit_code == 130 and "rerun the same command to resume" in r.output
    assert len(part_files(pool)) == 1 and not list((pool / "samples").glob(".*"))
    assert pl.read_parquet(pool / "queries.parquet").height == 1   # only the written query is listed
    assert read_meta(pool)["complete"] is False
    r = ok(runner.invoke(app, harvest_args("stand-in", pool, None, "--oracle", "gt", "--workers", "1")))
    assert "1 already written, 3 to generate" in r.output
    assert samples(pool).height == 16 and load_pool(pool).n_queries == 4


def test_vllm_options_reach_the_engine(tiny, tmp_path, monkeypatch):
    """The vLLM path through the CLI, against the generation tests' stand-in `vllm` module (plumbing only)."""
    import json

    fake = HERE / "fixtures" / "harvest" / "fake_vllm"
    if not fake.is_dir():
        pytest.skip("the stand-in vllm module (tests/fixtures/harvest/fake_vllm) is absent")
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    log = tmp_path / "engines.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    pool = tmp_path / "v"
    args = harvest_args(tiny, pool)
    args[args.index("transformers")] = "vllm"
    ok(runner.invoke(app, args + ["--gpu-memory-utilization", "0.5", "--no-prefix-caching", "--max-model-len", "512",
                                  "--dtype", "bfloat16", "--revision", "abc123"]))
    (engine,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert engine["gpu_memory_utilization"] == 0.5 and engine["enable_prefix_caching"] is False
    assert engine["max_model_len"] == 512 and engine["dtype"] == "bfloat16" and engine["revision"] == "abc123"
    meta = read_meta(pool)
    assert meta["backend"]["backend"] == "vllm" and meta["generation"]["revision"] == "abc123"
    assert samples(pool).height == 16
    clean_error(runner.invoke(app, args + ["--batch-size", "4"]), "--batch-size applies to --backend transformers")


def test_openai_backend_through_the_cli(tmp_path, monkeypatch):
    """`--backend openai` against the backend tests' loopback HTTP server; the API key never reaches the pool."""
    import json
    import urllib.request

    pytest.importorskip("openai")

    server = HERE / "fixtures" / "harvest" / "fake_openai_server.py"
    if not server.exists():
        pytest.skip("the loopback OpenAI-compatible test server (tests/fixtures/harvest) is absent")
    key = "sk-e2e-secret-key"
    proc = subprocess.Popen([sys.executable, str(server), "--key", key], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        monkeypatch.setenv("TTC_E2E_KEY", key)
        pool = tmp_path / "o"
        args = harvest_args("served-model", pool)
        args[args.index("transformers")] = "openai"
        ok(runner.invoke(app, args + ["--base-url", url + "/v1", "--api-key-env", "TTC_E2E_KEY", "--concurrency", "4",
                                      "--chat"]))
        with urllib.request.urlopen(url + "/stats", timeout=10) as resp:
            stats = json.load(resp)
        assert stats["served"] == 16 and stats["unauthorized"] == 0
        assert samples(pool).height == 16
        meta_text = (pool / "pool.json").read_text()
        assert key not in meta_text and '"backend": "openai"' in meta_text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_unreachable_server_is_a_one_line_error(tmp_path, monkeypatch):
    """A backend that keeps failing ends the command with `error: BackendError: ...` (exit 1), no traceback."""
    import socket

    import ttc.harvest.backends as hb

    make = hb.make_backend
    pytest.importorskip("openai")
    monkeypatch.setattr(hb, "make_backend", lambda name, **kw: make(name, **{**kw, "max_retries": 1}))

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "q.jsonl"
    data.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n')
    r = runner.invoke(app, ["harvest", "--dataset", str(data), "--model", "m", "--backend", "openai",
                            "--base-url", f"http://127.0.0.1:{port}/v1", "--responses", "1", "--max-tokens", "4",
                            "--out", str(tmp_path / "pool")])
    assert r.exit_code == 1, r.output
    assert "error: BackendError:" in r.output and "Traceback" not in r.output


def test_resume_refuses_another_dtype_or_other_weights_and_checks_before_loading(tmp_path):
    """Issue 13: a resume with another --dtype, or with other weights at the same path, mixed two distributions
    in one pool; --device cuda without CUDA and a missing PRM were found only after loading or generating."""
    import torch

    model = make_tiny_model(tmp_path / "model", chat=True, seed=1)
    out = tmp_path / "pool"
    ok(runner.invoke(app, harvest_args(model, out, None, "--limit", "2", "--dtype", "float32")))
    gen = read_meta(out)["generation"]["weights"]
    assert gen["dtype"] == "float32" and gen["source"] == "directory" and gen["weights"] and gen["tokenizer"]
    clean_error(runner.invoke(app, harvest_args(model, out, None, "--dtype", "bfloat16")),
                'weights.dtype: "float32" vs "bfloat16"')
    make_tiny_model(model, chat=True, seed=2)  # a new checkpoint written over the old one
    clean_error(runner.invoke(app, harvest_args(model, out, None, "--dtype", "float32")), "weights.weights: ")
    if not torch.cuda.is_available():
        clean_error(runner.invoke(app, harvest_args(model, tmp_path / "cuda", None, "--device", "cuda")),
                    "sees no CUDA device")
        assert not (tmp_path / "cuda").exists()
    clean_error(runner.invoke(app, harvest_args(model, tmp_path / "prm", None, "--oracle", "prm", "--prm-model",
                                                str(tmp_path / "no-such-prm"))), "--prm-model")
    assert not (tmp_path / "prm").exists()  # refused before generating


def test_score_refuses_a_damaged_part(tiny, tmp_path):
    from support.fake_harvest import _flip_until_silent

    out = tmp_path / "pool"
    ok(runner.invoke(app, harvest_args(tiny, out)))
    _flip_until_silent(part_files(out)[1], tmp_path)
    r = runner.invoke(app, ["score", str(out), "--oracle", "gt", "--no-progress"])
    clean_error(r, "is damaged: its content does not match the checksum")
