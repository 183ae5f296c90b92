"""`ttc harvest --engine ray` and `ttc score --engine ray`: the local pipeline as a Ray Data job, for pools that
outgrow one machine (issue 16).

The job is Ray's, the pool is the driver's. Queries become a Ray dataset (one block per part of `--shard-size`
queries, the parts a local run would write); generation is `map_batches` over the project's own Backend in an actor
pool (one model per actor, on a GPU where the backend needs one); grading and PRM / judge scoring are `map_batches`
over the same oracle sessions `ttc score` opens locally (harvest/scoring.py), in CPU or GPU actors. What comes back
is streamed to the driver, which writes the part files, queries.parquet and pool.json through the same writers as
the local engine (harvest.pipeline.HarvestWriter, harvest.scoring.score_pool's bookkeeping). So:

- a Ray harvest equals a local harvest of the same configuration, response for response: every query is sampled
  with its own seed (harvest.pipeline.query_seed), which depends on nothing a scheduler decides;
- workers need no shared filesystem: they receive rows and return rows, and only the driver touches the pool;
- a lost worker costs only its in-flight batches: actors restart (`max_restarts`) and their tasks are retried
  (`max_task_retries`), both `--ray-retries`; a part is written once, by number, whole, with an atomic rename, so a
  retried batch cannot tear or duplicate one;
- a row that still fails (the backend raising for one prompt after the retries, a batch whose worker died more
  than `--ray-retries` times) is recorded in pool.json (`failures` of a harvest, `scoring_in_progress` of a
  scoring) and left out of its part; the rest of the job goes on, and the command then exits with status 1 naming
  them: a rerun of the same command generates (or scores) only what is missing, as it does after a killed driver.

Why not ray.data.llm's vLLM processor: it returns one completion per row, without the per-query seeds, stop strings
and log-prob reductions (--confidence) the project's backends implement, so its pool would not equal a local one;
the project's VLLMBackend in GPU actors (num_gpus = --tensor-parallel-size) is the same engine with those rules. The
GPU path could not be run here (no GPU, no vLLM); the CPU path with the transformers backend is tested
(tests/test_harvest_ray.py) and measured (benchmarks/ray_overhead.py, docs/harvest.md).
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import polars as pl

from ttc.replay.extras import MissingExtra
from ttc.replay.pool import atomic_write_json, atomic_write_parquet
from ttc.replay.progress import progress as progress_display

from .backends import BackendError
from .pipeline import (
    HarvestError,
    HarvestPlan,
    HarvestResult,
    HarvestWriter,
    backend_extra,
    backend_info,
    check_confidence,
    query_seed,
)
from .types import Query, Response

EXTRA = "ray"
DEFAULT_RETRIES = 3
MISSING = f"--engine ray needs ray: pip install 'ttc[{EXTRA}]'"


def require_ray():
    """Import ray and ray.data, or raise MissingExtra (one `error:` line naming the extra)."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != "ray":
            raise
        raise MissingExtra(MISSING) from None
    return ray


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else type(e).__name__


def _job_error(e: BaseException) -> str:
    """What stopped a Ray job, in one line: Ray wraps a worker's exception (an actor that could not load its model)
    in its own, whose text ends with the worker's traceback; its last `module.Error: message` line is the cause."""
    causes = re.findall(r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception): .+)$", str(e), re.MULTILINE)
    return causes[-1].strip()[:300] if causes else _first_line(e)


@dataclass(frozen=True)
class RayOptions:
    """--address (a running cluster; None starts a local one), --ray-workers (the local cluster's CPUs, default all
    cores) and --ray-retries (actor restarts and task retries after a lost worker, and attempts of a failing row)."""

    address: str | None = None
    workers: int | None = None
    retries: int = DEFAULT_RETRIES

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise HarvestError(f"--ray-workers must be at least 1, got {self.workers}")
        if self.retries < 0:
            raise HarvestError(f"--ray-retries must be at least 0, got {self.retries}")
        if self.address is not None and self.workers is not None:
            raise HarvestError("--ray-workers sizes the local cluster that starts without --address; a running "
                               "cluster (--address) has the workers it was started with")


@dataclass(frozen=True)
class Placement:
    """Where one actor of a stage runs: its CPUs and GPUs, and how many such actors the pool holds."""

    cpus: float
    gpus: float
    actors: int

    def describe(self) -> str:
        what = f"{self.gpus:g} GPU" if self.gpus else f"{self.cpus:g} CPU"
        return f"{self.actors} actor{'s' if self.actors != 1 else ''} x {what}"


class RayEngine:
    """A Ray cluster for one command: joined (--address), started (a local one, shut down at the end), or the one
    this process already joined (tests, notebooks: left running). `harvest` and `score` run the two job kinds;
    `record()` is the engine's provenance, kept in pool.json (the run's `engine`, an oracle's runtime `engine`)."""

    def __init__(self, opts: RayOptions | None = None):
        self.opts = opts or RayOptions()
        self.ray = require_ray()
        self.started = False
        self.jobs: list[dict] = []

    # -- the cluster -------------------------------------------------------------------------------------------

    def __enter__(self) -> "RayEngine":
        ray = self.ray
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, logging_level=logging.WARNING)
            try:
                if self.opts.address is not None:
                    ray.init(address=self.opts.address, **kw)
                else:
                    ray.init(num_cpus=self.opts.workers or os.cpu_count() or 1, **kw)
            except Exception as e:
                where = f"--address {self.opts.address}: cannot connect to a Ray cluster" if self.opts.address \
                    else "cannot start a local Ray cluster"
                raise BackendError(f"{where} ({_first_line(e)}); start one with `ray start --head` and pass the "
                                   "address it prints") from None
            self.started = True
        # Ray Data's INFO lines (execution plans, progress) would bury the command's own; its errors stay
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        return self

    def __exit__(self, *exc):
        if self.started:
            self.ray.shutdown()
            self.started = False
        return False

    def resources(self) -> dict[str, float]:
        return dict(self.ray.cluster_resources())

    def record(self) -> dict:
        """What pool.json keeps about the engine and its last job (not compared on resume: an engine changes no
        sample): a harvest run's `engine`, an oracle's runtime `engine`."""
        res = self.resources()
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        rec = {"name": "ray", "ray": self.ray.__version__, "address": self.opts.address or "local",
               "nodes": len(nodes), "cpus": res.get("CPU", 0.0), "gpus": res.get("GPU", 0.0),
               "retries": self.opts.retries}
        if self.jobs:
            rec["job"] = dict(self.jobs[-1])
        return rec

    def placement(self, *, gpus: float = 0.0, cpus: float = 1.0, batches: int) -> Placement:
        """An actor pool as large as the cluster holds (one actor per `gpus` GPUs, else per `cpus` CPUs), but no
        larger than the number of batches it has to run."""
        res = self.resources()
        if gpus:
            have = res.get("GPU", 0.0)
            if have < gpus:
                raise HarvestError(f"each actor needs {gpus:g} GPU{'s' if gpus != 1 else ''} and the Ray cluster has "
                                   f"{have:g}; add GPU nodes (`ray start --address ... --num-gpus N`) or choose a "
                                   "CPU backend / device")
            fit = int(have // gpus)
        else:
            have = res.get("CPU", 0.0)
            if have < cpus:
                raise HarvestError(f"each actor needs {cpus:g} CPUs and the Ray cluster has {have:g}; lower "
                                   "--workers or add nodes")
            fit = int(have // cpus)
        return Placement(cpus=cpus if not gpus else 1.0, gpus=gpus, actors=max(1, min(fit, batches)))

    @contextmanager
    def _data_context(self):
        """The job's Ray Data settings, restored afterwards: no progress bars (the driver prints its own), and a
        batch whose retries ran out dropped instead of failing the job (its rows are recorded as failures)."""
        ctx = self.ray.data.DataContext.get_current()
        saved = {k: getattr(ctx, k) for k in ("enable_progress_bars", "max_errored_blocks")}
        ctx.enable_progress_bars = False
        ctx.max_errored_blocks = -1
        try:
            yield ctx
        finally:
            for k, v in saved.items():
                setattr(ctx, k, v)

    def _map(self, ds, udf, placement: Placement, kwargs: dict, batch_size):
        """map_batches over an actor pool of `placement`, with Ray's own fault tolerance: a dead actor is restarted
        and its in-flight tasks retried, --ray-retries times each."""
        import warnings

        r = self.opts.retries
        with warnings.catch_warnings():
            # Ray 2.60 takes the actors' max_restarts / max_task_retries only as ray_remote_args, which it announces
            # will go in 2.64 (hence pyproject's ray < 2.64); its default without them is to retry forever
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            return ds.map_batches(udf, batch_size=batch_size, batch_format="pyarrow", fn_constructor_kwargs=kwargs,
                                  compute=self.ray.data.ActorPoolStrategy(size=placement.actors),
                                  num_cpus=placement.cpus, num_gpus=placement.gpus or None,
                                  max_restarts=r, max_task_retries=r)

    # -- generation --------------------------------------------------------------------------------------------

    def harvest(self, plan: HarvestPlan, make_backend: Callable[[], Any], prompt_fn: Callable[[Query], str], *,
                shard_size: int = 32, gpus: float = 0.0, progress: bool = True, argv: Sequence[str] | None = None,
                stop: Sequence[str] = (), generate: Callable | None = None) -> HarvestResult:
        """Generate the plan's pending queries as a Ray Data job and write them as the local engine would: the same
        parts (part k holds pending queries k*shard_size .. (k+1)*shard_size - 1, numbered after the parts on
        disk), through HarvestWriter. `make_backend`: builds the Backend inside each actor (picklable: the model is
        loaded there, by name or path); `gpus`: GPUs per actor (0: one CPU each); `generate`: the backend class's
        generate, to refuse --confidence before the job when it returns no log-probs. Raises BackendError after
        writing everything else when queries failed; any other exception (Ctrl-C, a job Ray gave up on) leaves a
        directory the same command resumes."""
        import pyarrow as pa

        if shard_size < 1:
            raise HarvestError(f"--shard-size must be at least 1, got {shard_size}")
        if generate is not None:
            check_confidence(plan, generate)
        pending = plan.pending
        parts = [pending[i:i + shard_size] for i in range(0, len(pending), shard_size)]
        spec, sampling = plan.spec, plan.spec.sampling
        placement = self.placement(gpus=gpus, batches=len(parts)) if parts else Placement(1.0, 0.0, 0)
        job = {"kind": "generate", "placement": placement.describe(), "parts": len(parts)}
        self.jobs.append(job)
        writer = HarvestWriter(plan, {"engine": "ray", "note": "written when the first batch returns"},
                               shard_size=shard_size, argv=argv, engine=self.record())
        for q in pending:
            writer.prompts[q.query_id] = prompt_fn(q)
        writer.list_queries(pending)  # listed before their parts exist; a resume drops rows without samples
        conf_cols = list(spec.confidence.columns()) if spec.confidence is not None else []
        kwargs = {"make_backend": make_backend, "sampling": sampling, "extra": backend_extra(spec, stop),
                  "confidence_columns": conf_cols, "attempts": 1 + self.opts.retries}
        tables = [pa.table({"query_id": [q.query_id for q in part],
                            "prompt": [writer.prompts[q.query_id] for q in part],
                            "seed": pa.array([query_seed(sampling.seed, q.query_id) for q in part], pa.int64()),
                            "part": pa.array([k] * len(part), pa.int64())}) for k, part in enumerate(parts)]
        bar = progress_display(len(pending), f"{plan.out.name} (ray, {placement.describe()})", "queries",
                               enabled=progress, every_s=0.0, rates=("responses", "tokens")).__enter__()
        lost = (f"lost: its batch did not come back after {self.opts.retries} retries (a worker died each time; Ray's "
                "logs say why)")
        parts_in = PartCollector(parts, writer, conf_cols, lost,
                                 lambda df: bar.advance(df["query_id"].n_unique(), responses=df.height,
                                                        tokens=int(df["n_tokens"].sum())))
        t0 = time.monotonic()
        job_error: BaseException | None = None
        try:
            if parts:
                with self._data_context():
                    ds = self._map(self.ray.data.from_arrow(tables), _Generate, placement, kwargs, shard_size)
                    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                        parts_in.add(batch)
                parts_in.close()  # batches dropped after their retries: what arrived is written, the rest failed
        except HarvestError:
            raise
        except Exception as e:  # Ray gave up on the job (actors that cannot start, a lost driver connection)
            job_error = e
        finally:
            bar.__exit__(None, None, None)
            job["seconds"] = round(time.monotonic() - t0, 3)
            writer.run_record["engine"] = self.record()
            result = writer.finish()
        if job_error is not None:
            raise BackendError(f"the Ray job stopped ({_job_error(job_error)}); the {len(parts_in.written)} parts "
                               f"written are kept in {plan.out}: rerun the same command to generate the rest") from None
        if writer.failures:
            qid, f = next(iter(writer.failures.items()))
            raise BackendError(f"{len(writer.failures)} queries failed after {self.opts.retries} retries (recorded in "
                               f"{plan.out / 'pool.json'} under failures; e.g. {qid!r}: {f['error']}); the other "
                               f"{result.written_now} are written: rerun the same command to generate the failed ones")
        return result

    # -- scoring -----------------------------------------------------------------------------------------------

    def score(self, impl, sp, todo: list[Path], rec, opts) -> dict:
        """harvest.scoring.score_pool's `engine.score`: the oracle's columns for the parts in `todo`, computed by an
        actor pool opening the same OracleSession the local engine opens (one per actor: the PRM or judge loads
        once per actor; a ground-truth actor grades with --workers processes, default 1), one part per batch; the
        driver rewrites each part (temporary file, rename) as soon as all its rows are back and marks it done in
        `rec`. A part with a row that failed after the retries is not rewritten: the failure is kept in pool.json's
        scoring_in_progress and BackendError is raised after the other parts are written."""
        import dataclasses

        from .scoring import _with_columns

        frames: dict[int, pl.DataFrame] = {}
        for k, part in enumerate(todo):
            names = pl.read_parquet_schema(part).names()
            df = pl.read_parquet(part, columns=[c for c in ("query_id", "text", "finish_reason") if c in names])
            unknown = set(df["query_id"].unique().to_list()) - set(sp.queries)
            if unknown:
                raise HarvestError(f"{part} holds query {min(unknown)!r}, which queries.parquet does not list")
            if "finish_reason" not in df.columns:
                df = df.with_columns(pl.lit(None, pl.String).alias("finish_reason"))
            frames[k] = df.with_columns(pl.lit(k, pl.Int64).alias("part"), pl.int_range(pl.len(), dtype=pl.Int64)
                                        .alias("row"))
        oracle = impl.entry.name
        workers = opts.workers or 1
        gpus = _scoring_gpus(oracle, opts, self.resources())
        placement = self.placement(gpus=gpus, cpus=float(workers), batches=len(todo)) if todo else \
            Placement(1.0, 0.0, 0)
        job = {"kind": f"score {oracle}", "placement": placement.describe(), "parts": len(todo)}
        self.jobs.append(job)
        actor_opts = dataclasses.replace(opts, workers=workers, progress=False)
        qids = {q for df in frames.values() for q in df["query_id"].unique().to_list()}
        kwargs = {"oracle": oracle, "opts": actor_opts, "cfg": rec.cfg,
                  "queries": {q: sp.queries[q] for q in qids}, "attempts": 1 + self.opts.retries}
        got: dict[int, list[pl.DataFrame]] = {}
        seen: dict[int, set[int]] = {}         # part -> rows back (a retried batch's second copy counts once)
        stats: dict[str, float] = {}
        extra: dict[str, Any] = {}
        failures: dict[str, str] = {}
        done: set[int] = set()
        bar = progress_display(len(todo), f"{sp.path.name}: {oracle} (ray, {placement.describe()})", "parts",
                               enabled=opts.progress, every_s=0.0).__enter__()
        t0 = time.monotonic()

        def finish_part(k: int):
            """Part k rewritten with its columns, or, when a row failed or never came back, recorded as failed."""
            done.add(k)
            part = todo[k]
            rows = pl.concat(got.pop(k)).unique("row", keep="first").sort("row") if k in got else None
            bad = rows.filter(pl.col("error").is_not_null()) if rows is not None else None
            if rows is None or len(bad) or rows.height < frames[k].height:
                failures[sp.rel(part)] = bad["error"][0] if bad is not None and len(bad) else \
                    f"lost: its batch did not come back after {self.opts.retries} retries"
                return
            cols = {c: rows[c].to_list() for c in impl.entry.columns}
            full = pl.read_parquet(part)
            atomic_write_parquet(_with_columns(full, cols), part)
            rec.mark(part)
            bar.advance(1)

        job_error = None
        try:
            if todo:
                tables = [df.select("part", "row", "query_id", "text", "finish_reason").to_arrow()
                          for df in frames.values()]
                with self._data_context():
                    ds = self._map(self.ray.data.from_arrow(tables), _Score, placement, kwargs, None)
                    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                        df = pl.from_arrow(batch)
                        for s in df["stats"].drop_nulls().to_list():
                            s = json.loads(s)
                            for key, v in s["delta"].items():
                                stats[key] = stats.get(key, 0) + v
                            for key, v in s["extra"].items():
                                extra.setdefault(key, v)
                        for (k,), sub in df.partition_by("part", as_dict=True).items():
                            if k in done:
                                continue
                            got.setdefault(k, []).append(sub)
                            seen.setdefault(k, set()).update(sub["row"].to_list())
                            if len(seen[k]) == frames[k].height:
                                finish_part(k)
                for k in range(len(todo)):
                    if k not in done:
                        finish_part(k)
        except (KeyboardInterrupt, HarvestError):
            raise
        except Exception as e:
            job_error = e
        finally:
            bar.__exit__(None, None, None)
            job["seconds"] = round(time.monotonic() - t0, 3)
        if job_error is not None:
            raise BackendError(f"the Ray job stopped ({_job_error(job_error)}); the parts scored are recorded in "
                               f"{sp.path / 'pool.json'}: rerun the same command to score the rest") from None
        if failures:
            prog = sp.meta.setdefault("scoring_in_progress", {}).setdefault(oracle, {"config": rec.cfg, "done": []})
            prog["failures"] = failures
            atomic_write_json(sp.meta, sp.path / "pool.json")
            part, msg = next(iter(failures.items()))
            raise BackendError(f"{oracle}: {len(failures)} parts could not be scored after {self.opts.retries} "
                               f"retries (recorded in pool.json under scoring_in_progress; e.g. {part}: {msg}); the "
                               "other parts are scored: rerun the same command to score the rest")
        return {**{k: int(v) if float(v).is_integer() else v for k, v in stats.items()}, **extra}


def generation_gpus(backend: str, kw: dict, resources: dict) -> float:
    """GPUs per generation actor: a GPU backend (vLLM) one engine per actor on --tensor-parallel-size GPUs, a backend
    with a device (transformers) one GPU when asked for CUDA or when the cluster has GPUs and no device is named,
    else none (one CPU each; an openai actor is an HTTP client). vLLM's own data parallelism is refused: the actor
    pool is the data parallelism, as many engines as the cluster's GPUs hold."""
    from .registry import BACKENDS

    entry = BACKENDS[backend]
    if "gpu" in entry.needs:
        if int(kw.get("data_parallel_size") or 1) > 1:
            raise HarvestError("--data-parallel-size: with --engine ray the actor pool is the data parallelism (one "
                               "vLLM engine per actor, as many as the cluster's GPUs hold); leave it at 1")
        return float(kw.get("tensor_parallel_size") or 1)
    if "device" in entry.options:
        device = str(kw.get("device") or "")
        return 1.0 if device.startswith("cuda") or (not device and resources.get("GPU", 0.0) >= 1) else 0.0
    return 0.0


def _scoring_gpus(oracle: str, opts, resources: dict) -> float:
    """GPUs per scoring actor: the PRM on a GPU where the cluster has one (unless --prm-device cpu), a judge whose
    backend is vLLM on one; grading (gt, exec) on CPUs."""
    has_gpu = resources.get("GPU", 0.0) >= 1
    if oracle == "prm":
        return 1.0 if has_gpu and not str(opts.prm_device or "").startswith("cpu") and opts.prm_factory is None \
            else 0.0
    if oracle == "judge":
        return 1.0 if opts.judge_backend == "vllm" and opts.judge_factory is None else 0.0
    return 0.0


class PartCollector:
    """The driver's half of a generation job. Rows come back in any order and grouping (Ray bundles, splits and
    retries batches as it sees fit); a part is written through the HarvestWriter as soon as every one of its queries
    is back, its responses or its error, and only once (a retried batch's second copy is dropped). A query that came
    back with an error, or not at all by close(), is recorded as failed and left out of its part. `on_part(df)`:
    called with each part written (progress)."""

    def __init__(self, parts: Sequence[Sequence[Query]], writer: HarvestWriter, conf_cols: Sequence[str],
                 lost: str, on_part: Callable[[pl.DataFrame], None] = lambda df: None):
        self.parts, self.writer, self.conf_cols, self.lost, self.on_part = parts, writer, list(conf_cols), lost, on_part
        self.got: dict[int, dict[str, Any]] = {}     # part -> query_id -> its rows (a frame) or its error (a str)
        self.written: set[int] = set()

    def add(self, batch) -> None:
        """One batch of the job's output (a pyarrow table of _Generate's rows)."""
        df = pl.from_arrow(batch)
        info = df["info"].drop_nulls()
        if len(info) and self.writer.meta["backend"].get("engine") == "ray":  # the placeholder: the actors' info
            self.writer.meta["backend"] = json.loads(info[0])
        for (k,), sub in df.partition_by("part", as_dict=True).items():
            if k in self.written:
                continue
            slot = self.got.setdefault(k, {})
            for (qid,), rows in sub.partition_by("query_id", as_dict=True).items():
                if qid not in slot:
                    err = rows["error"].drop_nulls()
                    slot[qid] = err[0] if len(err) else rows.sort("sample_idx")
            if len(slot) == len(self.parts[k]):
                self._write(k)

    def close(self) -> None:
        for k in range(len(self.parts)):
            if k not in self.written:
                self._write(k)

    def _write(self, k: int):
        """Part k from what arrived: its queries in planned order, those that failed recorded instead."""
        rows = self.got.pop(k, {})
        ok = [q for q in self.parts[k] if isinstance(rows.get(q.query_id), pl.DataFrame)]
        for q in self.parts[k]:
            r = rows.get(q.query_id)
            if not isinstance(r, pl.DataFrame):
                self.writer.fail(q.query_id, r if isinstance(r, str) else self.lost)
        self.written.add(k)
        if ok:
            df = self.writer.write_part(ok, [_responses(rows[q.query_id], self.conf_cols) for q in ok], number=k)
            self.on_part(df)


def _responses(rows: pl.DataFrame, conf_cols: Sequence[str]) -> list[Response]:
    return [Response(text=r["text"], n_tokens=int(r["n_tokens"]), finish_reason=r["finish_reason"],
                     signals={c: r[c] for c in conf_cols} if conf_cols else None)
            for r in rows.iter_rows(named=True)]


# ---------------------------------------------------------------------------------------------------------------
# What runs in the actors


class _Generate:
    """A generation actor: the Backend built once (its model loaded here), then one `generate` per batch of queries,
    each with its own seed. A batch that raises is retried prompt by prompt, `attempts` times each; a prompt that
    still fails comes back as one row carrying the error, so one bad row does not cost its batch. A worker that
    dies is Ray's to restart and retry (RayEngine._map)."""

    def __init__(self, make_backend, sampling, extra, confidence_columns, attempts):
        self.backend = make_backend()
        self.sampling, self.extra, self.conf_cols, self.attempts = sampling, extra, list(confidence_columns), attempts
        self.info = json.dumps(backend_info(self.backend), default=str)

    def _one(self, prompt: str, seed: int):
        err = None
        for _ in range(self.attempts):
            try:
                rs = self.backend.generate([prompt], self.sampling, [seed], **self.extra)
                _check(rs, 1, self.sampling.n)
                return rs[0], None
            except Exception as e:
                err = _first_line(e)
        return None, err

    def __call__(self, batch):
        import pyarrow as pa

        qids, prompts = batch["query_id"].to_pylist(), batch["prompt"].to_pylist()
        seeds, parts = batch["seed"].to_pylist(), batch["part"].to_pylist()
        try:
            rs = self.backend.generate(prompts, self.sampling, seeds, **self.extra)
            _check(rs, len(prompts), self.sampling.n)
            results = [(r, None) for r in rs]
        except Exception:
            results = [self._one(p, s) for p, s in zip(prompts, seeds)]
        cols: dict[str, list] = {k: [] for k in ("query_id", "part", "sample_idx", "text", "n_tokens",
                                                 "finish_reason", "error", "info", *self.conf_cols)}
        for qid, part, (rs, err) in zip(qids, parts, results):
            for i, r in enumerate(rs if rs is not None else [None]):
                cols["query_id"].append(qid)
                cols["part"].append(part)
                cols["sample_idx"].append(i if r is not None else -1)
                cols["text"].append(r.text if r is not None else None)
                cols["n_tokens"].append(int(r.n_tokens) if r is not None else None)
                cols["finish_reason"].append(r.finish_reason if r is not None else None)
                cols["error"].append(err)
                for c in self.conf_cols:
                    cols[c].append((r.signals or {}).get(c) if r is not None else None)
        cols["info"] = [self.info] + [None] * (len(cols["query_id"]) - 1)
        schema = pa.schema([("query_id", pa.string()), ("part", pa.int64()), ("sample_idx", pa.int64()),
                            ("text", pa.string()), ("n_tokens", pa.int64()), ("finish_reason", pa.string()),
                            ("error", pa.string()), ("info", pa.string())]
                           + [(c, pa.float64()) for c in self.conf_cols])
        return pa.table(cols, schema=schema)


def _check(responses, prompts: int, n: int):
    if len(responses) != prompts or any(len(r) != n for r in responses):
        raise BackendError(f"the backend returned {[len(r) for r in responses]} responses for {prompts} prompts, "
                           f"expected {n} each")


class _Score:
    """A scoring actor: the oracle's session opened once (harvest/scoring.py: the PRM or judge loaded, or the
    grader's settings), then one `columns` call per batch (a part). A batch that raises is retried row by row,
    `attempts` times each; a row that still fails comes back carrying the error. Each batch also returns the
    session's counters for it (pool.json's runtime record sums them)."""

    def __init__(self, oracle, opts, cfg, queries, attempts):
        from .scoring import implementation

        self.impl = implementation(oracle)
        self.session = self.impl.open(opts, cfg)
        self.queries, self.attempts = queries, attempts
        self.sent_extra = False

    def _columns(self, qs, texts, reasons):
        err = None
        for _ in range(self.attempts):
            try:
                return self.session.columns(qs, texts, reasons, where="a Ray batch"), None
            except Exception as e:
                err = _first_line(e)
        return None, err

    def __call__(self, batch):
        from .scoring import _column_type

        qids, texts = batch["query_id"].to_pylist(), batch["text"].to_pylist()
        reasons = batch["finish_reason"].to_pylist()
        qs = [self.queries[q] for q in qids]
        before = dict(self.session.stats)
        columns = list(self.impl.entry.columns)
        try:
            cols = self.session.columns(qs, texts, reasons, where="a Ray batch")
            errors = [None] * len(qids)
        except Exception:
            cols, errors = {c: [] for c in columns}, []
            for i in range(len(qids)):
                one, err = self._columns(qs[i:i + 1], texts[i:i + 1], reasons[i:i + 1])
                errors.append(err)
                for c in columns:
                    cols[c].append(one[c][0] if one is not None else None)
        after = self.session.stats
        delta = {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, (int, float))}
        summary = self.session.summary()
        extra = {} if self.sent_extra else {k: v for k, v in summary.items() if k not in after}
        self.sent_extra = True
        stats = json.dumps({"delta": delta, "extra": extra}, default=str)
        out = pl.DataFrame({"part": batch["part"].to_pylist(), "row": batch["row"].to_pylist(), "error": errors,
                            "stats": [stats] + [None] * (len(qids) - 1),
                            **{c: pl.Series(c, cols[c], dtype=_column_type(c)) for c in columns}},
                           schema_overrides={"part": pl.Int64, "row": pl.Int64, "error": pl.String,
                                             "stats": pl.String})
        return out.to_arrow()
