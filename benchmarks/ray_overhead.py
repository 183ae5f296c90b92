"""What `ttc harvest --engine ray` costs over the local engine at the same worker count, and the per-part costs a
scaling plan rests on (docs/harvest.md, "Many nodes: --engine ray").

End to end (each the command a user runs, in a fresh process, median of --repeats):
  local, W workers   W `ttc harvest --shard i/W` processes side by side (one torch thread each), then `ttc merge`:
                     how the local engine uses W cores today
  ray, W workers     `ttc harvest --engine ray --ray-workers W`: a local cluster of W CPUs started by the command,
                     W generation actors (one CPU, one torch thread each); the job alone is pool.json's job seconds
Both write the same pool (checked). The workload is the tiny random model of tests/support/tiny_model.py, so generation
is cheap and the numbers are the engines' overheads.

Components (in this process, on one local cluster of max(W) CPUs):
  cluster start      ray.init of a local cluster
  job, instant       a generation job whose backend answers instantly (no torch), at P and 4P parts: the job's
                     fixed cost (actor pool start, Ray Data's planning) and its cost per part (scheduling a batch,
                     moving its rows, the driver writing the part)
  model actor start  the same job with the tiny transformers model: what importing torch and loading a model in
                     each actor adds
  driver per part    RayEngine's driver side for one part of the size of a real harvest part (--part-queries x
                     --part-responses responses of --part-chars characters): rows in, grouped, written as a
                     Parquet part, pool.json updated. The driver is the only serial step of a job.

Usage: python benchmarks/ray_overhead.py [--workers 1,2] [--repeats 3] [--queries 32] [--responses 16]
       [--max-tokens 48] [--shard-size 4]
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from ttc.harvest.pipeline import HarvestSpec, HarvestWriter, part_files, plan_harvest  # noqa: E402
from ttc.harvest.types import Query, Response, Sampling  # noqa: E402


def cli(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ttc.cli", *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait(procs):
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"{p.args} failed ({p.returncode}):\n{err[-3000:]}")


def harvest_args(model, data, out, a):
    return ["harvest", "--dataset", data, "--model", model, "--backend", "transformers", "--device", "cpu",
            "--responses", a.responses, "--max-tokens", a.max_tokens, "--seed", 1, "--shard-size", a.shard_size,
            "--out", out, "--no-progress"]


def local_run(model, data, tmp: Path, w: int, a) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    if w == 1:
        wait([cli(*harvest_args(model, data, tmp / "pool", a), env=env)])
    else:
        wait([cli(*harvest_args(model, data, tmp / f"shard-{i}", a), "--shard", f"{i}/{w}", env=env)
              for i in range(w)])
        wait([cli("merge", *[tmp / f"shard-{i}" for i in range(w)], "--out", tmp / "pool")])
    return time.perf_counter() - t0


def ray_run(model, data, tmp: Path, w: int, a) -> tuple[float, float]:
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    wait([cli(*harvest_args(model, data, tmp / "pool", a), "--engine", "ray", "--ray-workers", w)])
    total = time.perf_counter() - t0
    job = json.loads((tmp / "pool" / "pool.json").read_text())["runs"][-1]["engine"]["job"]["seconds"]
    return total, job


def samples(pool: Path) -> pl.DataFrame:
    return pl.read_parquet(part_files(pool)).sort("query_id", "sample_idx")


class Instant:
    """A backend that answers at once (no model): what is left of a job's time is the engine's."""

    tokenizer = None

    def generate(self, prompts, sampling, seeds, **kw):
        return [[Response(text=f"response {s + i}", n_tokens=3, finish_reason="stop") for i in range(sampling.n)]
                for s in seeds]

    def info(self):
        return {"backend": "instant"}


def queries(n: int, prefix="q") -> list[Query]:
    return [Query(query_id=f"{prefix}{i:05d}", task="math", problem=f"What is {i} + {i}?", gold=str(2 * i))
            for i in range(n)]


def engine_job(eng, make, tmp: Path, n_parts: int, a) -> float:
    shutil.rmtree(tmp, ignore_errors=True)
    qs = queries(n_parts * a.shard_size)
    spec = HarvestSpec(model="m", backend="b", sampling=Sampling(n=a.responses, max_tokens=a.max_tokens, seed=1),
                       template={"name": "plain"}, dataset={"source": "synthetic"})
    t0 = time.perf_counter()
    eng.harvest(plan_harvest(tmp, qs, spec), make, lambda q: q.problem, shard_size=a.shard_size, progress=False,
                argv=["bench"])
    return time.perf_counter() - t0


def driver_part(tmp: Path, a) -> float:
    """Seconds the driver spends on one realistic part: PartCollector.add of the part's rows (as an actor returns
    them), which groups them and writes the part through HarvestWriter."""
    import pyarrow as pa

    from ttc.harvest.ray_engine import PartCollector

    times = []
    for rep in range(a.repeats):
        d = tmp / f"driver-{rep}"
        shutil.rmtree(d, ignore_errors=True)
        qs = queries(a.part_queries)
        spec = HarvestSpec(model="m", backend="b", sampling=Sampling(n=a.part_responses, max_tokens=4096, seed=1),
                           template={"name": "plain"}, dataset={"source": "synthetic"})
        writer = HarvestWriter(plan_harvest(d, qs, spec), {"backend": "synthetic"}, shard_size=a.part_queries,
                               argv=["bench"])
        rows = len(qs) * a.part_responses
        rng = random.Random(rep)  # words drawn at random: text that compresses like model output, not like a repeat
        vocab = [f"w{i}" for i in range(2000)] + ["Step", "so", "the", "=", "+", "\\frac{1}{2}", "x", "\n"]
        texts = [" ".join(rng.choices(vocab, k=a.part_chars // 5))[:a.part_chars] + f" \\boxed{{{i}}}"
                 for i in range(rows)]
        table = pa.table({"query_id": [q.query_id for q in qs for _ in range(a.part_responses)],
                          "part": pa.array([0] * rows, pa.int64()),
                          "sample_idx": pa.array([i for _ in qs for i in range(a.part_responses)], pa.int64()),
                          "text": texts,
                          "n_tokens": pa.array([a.part_chars // 4] * rows, pa.int64()),
                          "finish_reason": ["stop"] * rows, "error": pa.array([None] * rows, pa.string()),
                          "info": pa.array([None] * rows, pa.string())})
        t0 = time.perf_counter()
        PartCollector([qs], writer, [], "lost").add(table)
        times.append(time.perf_counter() - t0)
    size = part_files(tmp / f"driver-{a.repeats - 1}")[0].stat().st_size
    print(f"driver per part ({a.part_queries} queries x {a.part_responses} responses x {a.part_chars} chars, "
          f"{rows * a.part_chars / 1e6:.0f} MB of text, {size / 1e6:.1f} MB on disk): "
          f"{statistics.median(times):.3f} s median of {a.repeats} ({', '.join(f'{t:.3f}' for t in times)})")
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--responses", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--shard-size", type=int, default=4)
    ap.add_argument("--parts", type=int, default=8, help="P: the instant job runs P and 4P parts")
    ap.add_argument("--part-queries", type=int, default=32)
    ap.add_argument("--part-responses", type=int, default=64)
    ap.add_argument("--part-chars", type=int, default=4000)
    ap.add_argument("--skip-end-to-end", action="store_true")
    a = ap.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    from support.tiny_model import make_tiny_model

    tmp = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    try:
        model = str(make_tiny_model(tmp / "tiny"))
        data = tmp / "queries.jsonl"
        data.write_text("".join(json.dumps({"id": f"q{i:03d}", "problem": f"what is {i} + {i} ?",
                                            "answer": str(2 * i)}) + "\n" for i in range(a.queries)))
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; workload: {a.queries} "
              f"queries x {a.responses} responses, --max-tokens {a.max_tokens}, --shard-size {a.shard_size} "
              f"({-(-a.queries // a.shard_size)} parts), the tiny model")
        if not a.skip_end_to_end:
            for w in workers:
                loc = [local_run(model, data, tmp / f"local-{w}", w, a) for _ in range(a.repeats)]
                rays = [ray_run(model, data, tmp / f"ray-{w}", w, a) for _ in range(a.repeats)]
                assert samples(tmp / f"local-{w}" / "pool").equals(samples(tmp / f"ray-{w}" / "pool")), \
                    "the ray pool differs from the local one"
                lm, rm = statistics.median(loc), statistics.median(t for t, _ in rays)
                jm = statistics.median(j for _, j in rays)
                print(f"W={w}: local {lm:6.1f} s ({', '.join(f'{t:.1f}' for t in loc)}); ray {rm:6.1f} s "
                      f"({', '.join(f'{t:.1f}' for t, _ in rays)}), of which the job {jm:.1f} s; overhead "
                      f"{rm - lm:+.1f} s end to end, {rm / lm:.2f}x")
        import ray

        from ttc.harvest.backends import TransformersBackend
        from ttc.harvest.ray_engine import RayEngine, RayOptions

        t0 = time.perf_counter()
        ray.init(num_cpus=max(workers), include_dashboard=False, logging_level=logging.WARNING)
        print(f"cluster start ({max(workers)} CPUs): {time.perf_counter() - t0:.1f} s")
        with RayEngine(RayOptions()) as eng:
            engine_job(eng, Instant, tmp / "warm", 1, a)  # the first job also starts Ray Data's own actors
            small = [engine_job(eng, Instant, tmp / "small", a.parts, a) for _ in range(a.repeats)]
            big = [engine_job(eng, Instant, tmp / "big", 4 * a.parts, a) for _ in range(a.repeats)]
            s, b = statistics.median(small), statistics.median(big)
            per_part = (b - s) / (3 * a.parts)
            print(f"job, instant backend, {max(workers)} actors: {a.parts} parts {s:.2f} s, {4 * a.parts} parts "
                  f"{b:.2f} s -> fixed {s - a.parts * per_part:.2f} s + {per_part * 1000:.0f} ms per part "
                  f"({a.shard_size} queries x {a.responses} responses)")
            make = functools.partial(TransformersBackend, model, device="cpu")
            tiny = [engine_job(eng, make, tmp / "tiny-job", a.parts, a) for _ in range(a.repeats)]
            print(f"job, tiny model, {a.parts} parts: {statistics.median(tiny):.2f} s "
                  f"({', '.join(f'{t:.1f}' for t in tiny)}): actors importing torch and loading the model add "
                  f"{statistics.median(tiny) - s:.2f} s")
        ray.shutdown()
        driver_part(tmp, a)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
