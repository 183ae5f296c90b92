"""`ttc harvest --engine ray` and `ttc score --engine ray` on a local Ray cluster (issue 16): the pool equals the local
engine's for the same configuration, response for response (generation with the tiny transformers model in Ray
actors; scoring with the math and code oracles); a worker killed mid-job changes nothing; a row that keeps failing is
recorded, not fatal, and a rerun completes it; a driver killed mid-job resumes to the same pool; without ray,
--engine ray is one error line.

One Ray cluster (2 CPUs) serves the whole module; the CLI and RayEngine find it already joined and leave it running.
The backends with injected faults are classes of this module, shipped to the workers by value (the workers do not
have tests/ on their path)."""
from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from ttc.cli import app  # noqa: E402
from ttc.harvest.backends import BackendError, TransformersBackend  # noqa: E402
from ttc.harvest.datasets import load_queries  # noqa: E402
from ttc.harvest.pipeline import CRASH_ENV, HarvestSpec, part_files, plan_harvest, read_meta, run_harvest  # noqa: E402
from ttc.harvest.ray_engine import EXTRA, RayEngine, RayOptions  # noqa: E402
from ttc.harvest.scoring import ScoreOptions, score_pool  # noqa: E402
from ttc.harvest.types import Response, Sampling  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIX = HERE / "fixtures" / "harvest_pipeline"
sys.path.insert(0, str(HERE))
from support.tiny_model import make_tiny_model, single_thread_torch  # noqa: E402

runner = CliRunner()
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    """The module's Ray cluster; its address lets a subprocess driver join it (--address). Its workers' output is
    not forwarded to this process: Ray prints it from a thread whenever it arrives, and a killed worker's lines
    arriving late landed inside a later test's captured command output (a CI run, tests on two workers)."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", chat=True)


def ok(result):
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def samples(pool):
    return pl.read_parquet(part_files(pool)).sort("query_id", "sample_idx")


def assert_same_pool(a, b):
    """The samples, sorted, the queries and pool.json's generation and oracle configurations."""
    assert samples(a).equals(samples(b))
    assert pl.read_parquet(a / "queries.parquet").equals(pl.read_parquet(b / "queries.parquet"))
    ma, mb = read_meta(a), read_meta(b)
    assert ma["generation"] == mb["generation"] and ma["complete"] and mb["complete"]

    def strip(m):
        return {o: {k: v for k, v in r.items() if k not in ("scored", "seconds", "runtime", "versions")}
                for o, r in m["oracles"].items()}

    assert strip(ma) == strip(mb)


def harvest_args(model, out, *extra, dataset=FIX / "math_small.jsonl"):
    return ["harvest", "--dataset", str(dataset), "--model", str(model), "--backend", "transformers", "--device",
            "cpu", "--responses", "4", "--max-tokens", "16", "--seed", "3", "--out", str(out), "--shard-size", "1",
            "--no-progress", *extra]


@pytest.fixture(scope="module")
def local_pool(tiny, tmp_path_factory):
    """The local engine's pool (one torch thread, as in each one-CPU actor), scored with gt."""
    out = tmp_path_factory.mktemp("local") / "pool"
    with single_thread_torch():
        ok(runner.invoke(app, harvest_args(tiny, out, "--oracle", "gt", "--workers", "1")))
    return out


# ------------------------------------------------------------------------------------- faults, Python API

class Faulty:
    """A TransformersBackend built inside the actor, with injected faults: the worker process is killed the first time
    a prompt holds `kill` (a marker file says it happened), and generate raises whenever a prompt holds `fail`."""

    def __init__(self, model, kill=None, fail=None, marker=None):
        self.inner = TransformersBackend(model, device="cpu")
        self.tokenizer = self.inner.tokenizer
        self.kill, self.fail, self.marker = kill, fail, marker

    def generate(self, prompts, sampling, seeds, **kw):
        if self.kill is not None and any(self.kill in p for p in prompts):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os._exit(1)
        if self.fail is not None and any(self.fail in p for p in prompts):
            raise RuntimeError(f"injected failure on {self.fail!r}")
        return self.inner.generate(prompts, sampling, seeds, **kw)

    def info(self):
        return self.inner.info()


QUERIES = load_queries(str(FIX / "math_small.jsonl"))


def spec(model):
    return HarvestSpec(model=str(model), backend="transformers", sampling=Sampling(n=4, max_tokens=16, seed=3),
                       template={"name": "plain"}, dataset={"source": "math_small"})


def prompt(q):
    return f"problem: {q.problem} solution:"


@pytest.fixture(scope="module")
def local_api_pool(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("local-api") / "pool"
    with single_thread_torch():
        run_harvest(plan_harvest(out, QUERIES, spec(tiny)), TransformersBackend(str(tiny), device="cpu"), prompt,
                    shard_size=1, progress=False, argv=["test"])
    return out


def ray_harvest(model, out, make, retries=1):
    with RayEngine(RayOptions(retries=retries)) as eng:
        return eng.harvest(plan_harvest(out, QUERIES, spec(model)), make, prompt, shard_size=1, progress=False,
                           argv=["test"])


def test_a_killed_worker_changes_nothing_and_a_failing_row_is_recorded(cluster, tiny, local_api_pool, tmp_path):
    """One job, two faults: the worker generating m4 dies once (Ray restarts it and retries the batch: m4 comes out
    as the local engine drew it); m2's prompt makes the backend raise every time (recorded after its attempts, the
    other queries written). A rerun generates m2 only, and the pool equals the local one."""
    out, marker = tmp_path / "ray", tmp_path / "killed-once"
    faulty = functools.partial(Faulty, str(tiny), kill="root of 49", fail="6/4", marker=str(marker))
    with pytest.raises(BackendError, match=r"1 queries failed after 1 retries .*'m2': RuntimeError: injected"):
        ray_harvest(tiny, out, faulty)
    assert marker.exists()                                   # the kill happened
    meta = read_meta(out)
    assert list(meta["failures"]) == ["m2"] and not meta["complete"] and meta["queries_written"] == 3
    assert meta["runs"][-1]["failed"] == 1
    assert samples(out).equals(samples(local_api_pool).filter(pl.col("query_id") != "m2"))
    assert not list((out / "samples").glob(".*"))

    res = ray_harvest(tiny, out, functools.partial(TransformersBackend, str(tiny), device="cpu"))
    assert res.written_before == 3 and res.written_now == 1 and res.complete
    assert samples(out).equals(samples(local_api_pool))
    assert "failures" not in read_meta(out)


# ------------------------------------------------------------------------------------ a killed driver, the CLI


def test_a_killed_driver_resumes_to_the_local_pool(cluster, tiny, local_pool, tmp_path):
    """A driver joined to the cluster with --address dies while renaming its second part; the same command (here
    joining the cluster this process holds) generates the rest and scores it: the pool equals the local engine's,
    generation, samples, queries and oracle record."""
    out = tmp_path / "ray"
    env = {**os.environ, CRASH_ENV: "1"}
    proc = subprocess.run([sys.executable, "-m", "ttc.cli", *harvest_args(tiny, out, "--engine", "ray", "--address",
                                                                      cluster)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 75, proc.stderr[-3000:]
    assert len(part_files(out)) == 1 and read_meta(out)["complete"] is False
    assert list((out / "samples").glob(".part-*.tmp-*"))    # the torn part never became a part

    r = ok(runner.invoke(app, harvest_args(tiny, out, "--engine", "ray", "--oracle", "gt")))
    assert "1 already written, 3 to generate" in r.output and "ray: 2 actors x 1 CPU" in r.output
    assert "gt: scored 16 responses" in r.output
    assert_same_pool(local_pool, out)
    meta = read_meta(out)
    assert [run["queries_written"] for run in meta["runs"]] == [1, 3]
    assert [run["engine"]["name"] for run in meta["runs"]] == ["ray", "ray"]
    assert meta["runs"][0]["engine"]["address"] == cluster and meta["runs"][1]["engine"]["job"]["parts"] == 3
    assert read_meta(local_pool)["runs"][-1]["engine"] == {"name": "local"}
    assert meta["backend"]["backend"] == "transformers"          # the actors' backend info, not a placeholder
    assert meta["oracles"]["gt"]["runtime"]["engine"]["job"]["kind"] == "score gt"
    assert not list((out / "samples").glob(".*"))
    r = ok(runner.invoke(app, harvest_args(tiny, out, "--oracle", "gt", "--engine", "ray")))
    assert "0 to generate" in r.output and "gt: already scored" in r.output


# -------------------------------------------------------------------------------------- scoring: gt and exec


class Canned:
    """Responses that depend only on (seed, i): answers right, wrong, equivalent in another form, truncated or
    absent, so the graders have real work (the tiny model's text holds no answers)."""

    MATH = ["Step 1: so \\boxed{5}", "\\boxed{\\frac{3}{2}}", "so \\boxed{1.5}", "\\boxed{4}", "\\boxed{7}",
            "\\boxed{8}", "no answer here", "The final answer is 5"]
    CODE = ["[ANSWER]12[/ANSWER]", "[ANSWER]-1[/ANSWER]", "[ANSWER][(0, 3), (1, 2)][/ANSWER]", "[ANSWER]13[/ANSWER]",
            "[ANSWER]assert double_sum([1, 2, 3]) == 12[/ANSWER]", "[ANSWER]f(x)[/ANSWER]", "nothing"]

    tokenizer = None

    def generate(self, prompts, sampling, seeds, **kw):
        texts = self.CODE if "[ANSWER]" in prompts[0] else self.MATH
        return [[Response(text=texts[(s // 2**20 + i) % len(texts)], n_tokens=5,
                          finish_reason="length" if (s + i) % 5 == 0 else "stop") for i in range(sampling.n)]
                for s in seeds]

    def info(self):
        return {"backend": "canned"}


def canned_pool(out, dataset, n=8):
    from ttc.harvest.prompts import default_template, render

    queries = load_queries(str(dataset))
    name = default_template(queries[0].task, str(dataset))
    sp = HarvestSpec(model="canned", backend="canned", sampling=Sampling(n=n, max_tokens=16), template={"name": name},
                     dataset={"source": str(dataset)})
    run_harvest(plan_harvest(out, queries, sp), Canned(), lambda q: render(name, q, None), shard_size=1,
                progress=False, argv=["test"])
    return out


@pytest.mark.parametrize("dataset,oracle", [("math_small.jsonl", "gt"), ("lcb_exec.jsonl", "exec")])
def test_ray_scoring_equals_local(cluster, tmp_path, dataset, oracle):
    local = canned_pool(tmp_path / "local", FIX / dataset)
    shutil.copytree(local, tmp_path / "ray")
    ok(runner.invoke(app, ["score", str(local), "--oracle", oracle, "--workers", "1", "--no-progress"]))
    r = ok(runner.invoke(app, ["score", str(tmp_path / "ray"), "--oracle", oracle, "--engine", "ray",
                               "--no-progress"]))
    assert f"{oracle}: scored" in r.output
    df = samples(tmp_path / "ray")
    assert 0 < df["correct"].sum() < df.height and df["answer"].null_count() > 0  # graded, not all one verdict
    assert_same_pool(local, tmp_path / "ray")
    assert read_meta(tmp_path / "ray")["oracles"][oracle]["runtime"]["responses"] == df.height


class StubPRM:
    """A PRM stand-in: one step score per response from its length; raises on the responses to problems holding
    `bad`."""

    def __init__(self, bad=None):
        self.bad = bad

    def score(self, problems, texts):
        if self.bad is not None and any(self.bad in p for p in problems):
            raise RuntimeError("injected PRM failure")
        return [[min(1.0, len(t) / 40)] for t in texts]

    def info(self):
        return {"scorer": "stub"}


def test_a_scoring_row_failing_is_recorded_not_fatal(cluster, tmp_path):
    """The PRM raises for m2's responses (every attempt): m2's part keeps its old columns and is recorded as failed in
    scoring_in_progress, the other parts are scored as the local engine scores them, and the error names the rerun
    (which resumes from the recorded parts, as any interrupted scoring does)."""
    local = canned_pool(tmp_path / "local", FIX / "math_small.jsonl")
    shutil.copytree(local, tmp_path / "ray")
    score_pool(local, ["prm"], ScoreOptions(prm_factory=lambda o: StubPRM(), progress=False))
    bad = ScoreOptions(prm_factory=lambda o: StubPRM(bad="6/4"), progress=False)
    with RayEngine(RayOptions(retries=0)) as eng, pytest.raises(BackendError, match="1 parts could not be scored"):
        score_pool(tmp_path / "ray", ["prm"], bad, engine=eng)
    prog = read_meta(tmp_path / "ray")["scoring_in_progress"]["prm"]
    assert len(prog["failures"]) == 1 and len(prog["done"]) == 3 and set(prog["failures"]).isdisjoint(prog["done"])
    assert "injected PRM failure" in next(iter(prog["failures"].values()))
    parts = pl.concat([pl.read_parquet(p) for p in part_files(tmp_path / "ray")], how="diagonal")
    scored = parts.filter(pl.col("query_id") != "m2").sort("query_id", "sample_idx")
    assert scored.equals(samples(local).filter(pl.col("query_id") != "m2"))
    assert "score_prm_min" not in pl.read_parquet(tmp_path / "ray" / prog["failures"].popitem()[0]).columns


# ----------------------------------------------------------------------------------------- refusals (no cluster)


def test_without_ray_engine_ray_is_one_error_line(monkeypatch, tiny, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)       # what the import system reports when it is not installed
    for args in (harvest_args(tiny, tmp_path / "p", "--engine", "ray"),
                 ["score", str(tmp_path), "--oracle", "gt", "--engine", "ray"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and r.output.strip() == "error: --engine ray needs ray: pip install 'ttc[ray]'", \
            r.output
    assert not (tmp_path / "p").exists()
    extras = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    assert f"\n{EXTRA} = [" in extras                  # the extra the line names exists


def test_ray_options_are_refused_with_the_local_engine(tiny, tmp_path):
    for extra, flag in ((["--address", "auto"], "--address"), (["--ray-workers", "2"], "--ray-workers"),
                        (["--ray-retries", "1"], "--ray-retries")):
        r = runner.invoke(app, harvest_args(tiny, tmp_path / "p", *extra))
        assert r.exit_code == 2 and f"error: {flag} applies to --engine ray" in r.output, r.output
    r = runner.invoke(app, harvest_args(tiny, tmp_path / "p", "--engine", "ray", "--address", "auto",
                                        "--ray-workers", "2"))
    assert r.exit_code == 2 and "--ray-workers sizes the local cluster" in r.output, r.output
    assert not (tmp_path / "p").exists()
