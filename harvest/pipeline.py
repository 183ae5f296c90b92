"""Generation runs that survive crashes and split across machines.

A harvest writes a pool directory one part file at a time (POOL/samples/part-XXXXX.parquet, `shard_size` queries
each, written to a temporary name and renamed), so a crash or Ctrl-C loses at most the part in flight and a rerun
of the same command generates only the queries no part holds yet. Every query's responses are drawn with a seed
derived from (run seed, query_id) alone, so batching, sharding and resumption never change what a query gets:
an interrupted-and-resumed run and an uninterrupted one hold the same samples. `--shard I/N` keeps the queries
whose query_id hashes to I (independent of dataset order and of --limit), and `merge_pools` joins the shard
directories after checking that they come from one configuration and cover the data set.

pool.json holds everything needed to regenerate the pool: a `generation` block (model, backend, sampling,
seed rule, template, data set digest) that must match for a resume or a merge, the shard's expected query ids,
backend provenance, library versions and the history of runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import polars as pl

from ttc.replay.errors import InputError
from ttc.replay.outputs import write_errors
from ttc.replay.pool import (
    PoolError,
    atomic_write_json,
    atomic_write_parquet,
    column,
    load_pool,
    new_pool_dir,
    regular_file,
    remove_stale_temps,
    verify_file,
)
from ttc.replay.progress import progress as progress_display

from .confidence import ConfidenceSpec
from .types import Backend, Query, Response, Sampling

FORMAT = "ttc-harvest/1"
SEED_SPACING = 1 << 20          # per-query seeds are multiples of this: vLLM gives child i the seed + i
SEED_SLOTS = 1 << 42            # seeds < 2**62 (int64 for HTTP APIs); among 100k queries two share one with p ~ 1e-3
PART_PREFIX = "part-"
# the columns a harvest writes, typed by the pool format (replay/pool.py); oracles add theirs (scoring.py)
SAMPLE_SCHEMA = {c: column(c).dtype for c in ("query_id", "sample_idx", "text", "n_tokens", "finish_reason")}
CRASH_ENV = "TTC_HARVEST_CRASH_AT_PART"  # fault injection for the resume tests: die while writing part K


class HarvestError(InputError):
    """A run that cannot go on as asked; the message says why and what to do (printed without a traceback)."""


# ---------------------------------------------------------------------------------------------------------------
# Shards and seeds


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` of `count` (0-based, e.g. a Slurm array's task id): the queries whose blake2b(query_id)
    mod count equals index. Hashing ids, not positions, keeps a query in its shard when the data set is
    reordered or cut with --limit."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "ShardSpec":
        parts = str(text).strip().split("/")
        try:
            index, count = (int(p) for p in parts)
        except ValueError:
            raise HarvestError(f"--shard takes I/N with integers 0 <= I < N (e.g. 0/4), got {text!r}") from None
        if count < 1 or not 0 <= index < count:
            raise HarvestError(f"--shard {text}: need 0 <= I < N (shards are numbered from 0), got I={index}, "
                               f"N={count}")
        return cls(index, count)

    def holds(self, query_id: str) -> bool:
        return shard_of(query_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(query_id: str, count: int) -> int:
    return _hash64("shard:" + query_id) % count


def split_shard(queries: Sequence[Query], shard: ShardSpec | None) -> list[Query]:
    return list(queries) if shard is None else [q for q in queries if shard.holds(q.query_id)]


def query_seed(seed: int, query_id: str) -> int:
    """The seed of one query's responses: a multiple of SEED_SPACING picked by hashing (seed, query_id), so the
    child seeds seed..seed+n-1 a vLLM request derives never overlap another query's (n < SEED_SPACING)."""
    return (_hash64(f"{int(seed)}:{query_id}") % SEED_SLOTS) * SEED_SPACING


SEED_RULE = ("query seed = (blake2b-64('<seed>:<query_id>') mod 2**42) * 2**20; a backend draws response i of "
             "a query from that seed (vLLM: seed + i)")
SHARD_RULE = "query in shard I of N when blake2b-64('shard:<query_id>') mod N == I"


# ---------------------------------------------------------------------------------------------------------------
# Provenance


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def library_versions() -> dict[str, str]:
    """Versions that decide what a pool holds; read from package metadata so nothing heavy is imported."""
    from .backends import package_version

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("ttc", "torch", "transformers", "vllm", "math-verify", "datasets", "openai", "polars", "numpy",
                 "accelerate"):
        v = package_version(dist)
        if v is not None:
            out[dist] = v
    return out


def read_meta(pool: Path) -> dict:
    f = Path(pool) / "pool.json"
    if not f.exists():
        return {}
    try:
        meta = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise HarvestError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise HarvestError(f"{f}: must hold a JSON object")
    return meta


def dataset_digest(queries: Sequence[Query]) -> str:
    """Identifies the query set a run was asked for (ids and problem texts), so a resume or a merge with a
    changed data file is refused instead of mixing two data sets."""
    h = hashlib.blake2b(digest_size=16)
    for q in sorted(queries, key=lambda q: q.query_id):
        h.update(q.query_id.encode("utf-8") + b"\0" + q.problem.encode("utf-8") + b"\0")
    return h.hexdigest()


@dataclass
class HarvestSpec:
    """What decides the samples of a run; recorded as pool.json's `generation` block and compared on resume and
    merge. Engine options (GPU memory share, parallelism, batch size) are not part of it: they change speed,
    not the distribution sampled."""

    model: str
    backend: str
    sampling: Sampling
    template: dict
    dataset: dict           # source, task, limit (n_queries and digest are filled in by plan_harvest)
    revision: str | None = None
    weights: dict | None = None  # harvest/fingerprint.py: weights, tokenizer, config digests and the dtype
    # the confidence signals recorded (harvest/confidence.py): they do not change what is sampled, but they are
    # columns of every part, so a resume or a merge with other signals must be refused like any other difference
    confidence: ConfidenceSpec | None = None

    def generation(self) -> dict:
        gen = {"model": self.model, "revision": self.revision, "backend": self.backend,
               "sampling": asdict(self.sampling), "seed_rule": SEED_RULE, "template": self.template,
               "dataset": self.dataset}
        if self.weights is not None:
            gen["weights"] = self.weights
        if self.confidence is not None:
            gen["confidence"] = self.confidence.record()
        return gen


def comparable_generation(gen: dict, other: dict | None = None) -> dict:
    """The generation block without where the data set was read from: the same data read from another path
    (another node's copy, a hub download) is the same data, and the digest says whether it is.

    With `other` (the block it is compared with), the weights fingerprint is compared only as far as both sides
    know it: a pool written before fingerprints has none, and a hub model that was not in the local cache when a
    run started is known by name and revision only (its dtype still counts)."""
    ds = {k: v for k, v in (gen.get("dataset") or {}).items() if k not in ("source", "path")}
    out = {**gen, "dataset": ds}
    if other is not None:
        mine, theirs = gen.get("weights"), other.get("weights")
        if mine is None or theirs is None:
            out.pop("weights", None)
        elif any(w.get("source") == "hub" and w.get("commit") is None for w in (mine, theirs)):
            out["weights"] = {"dtype": mine.get("dtype")}
    return out


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ, as 'path: a != b' lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    if a != b:
        sa, sb = json.dumps(a, default=str), json.dumps(b, default=str)

        def cut(s: str) -> str:
            return s if len(s) <= 60 else s[:57] + "..."

        return [f"{path or 'value'}: {cut(sa)} vs {cut(sb)}"]
    return []


# ---------------------------------------------------------------------------------------------------------------
# Queries table


# queries.parquet's own columns; a query field of the same name stays in `fields` only (promoted_fields)
QUERY_COLUMNS = ("query_id", "task", "problem", "gold", "dataset", "prompt", "fields")


def queries_frame(queries: Sequence[Query], prompts: dict[str, str], promoted: dict[str, pl.DataType],
                  dataset: str) -> pl.DataFrame:
    """queries.parquet: the fixed columns, the rendered prompt, every field as JSON (lossless; the scorers read
    it back) and the scalar fields as columns of their own (dtypes fixed over the whole data set so that shards
    agree)."""
    data: dict[str, list] = {"query_id": [], "task": [], "problem": [], "gold": [], "dataset": [], "prompt": [],
                             "fields": []}
    for name in promoted:
        data[name] = []
    for q in queries:
        data["query_id"].append(q.query_id)
        data["task"].append(q.task)
        data["problem"].append(q.problem)
        data["gold"].append(None if q.gold is None else str(q.gold))
        data["dataset"].append(dataset)
        data["prompt"].append(prompts.get(q.query_id))
        data["fields"].append(json.dumps(q.fields, sort_keys=True, default=str))
        for name in promoted:
            data[name].append(q.fields.get(name))
    schema = {"query_id": pl.String, "task": pl.String, "problem": pl.String, "gold": pl.String,
              "dataset": pl.String, "prompt": pl.String, "fields": pl.String, **promoted}
    return pl.DataFrame(data, schema=schema)


def promoted_fields(queries: Sequence[Query]) -> dict[str, pl.DataType]:
    """Scalar fields with one type over the whole data set (level, subject, ...): worth a column of their own."""
    kinds: dict[str, set] = {}
    for q in queries:
        for k, v in q.fields.items():
            kinds.setdefault(k, set()).add(type(v))
    out = {}
    for k, ts in kinds.items():
        ts = ts - {type(None)}
        if k in QUERY_COLUMNS or len(ts) != 1:
            continue
        t = ts.pop()
        dtype = {bool: pl.Boolean, int: pl.Int64, float: pl.Float64, str: pl.String}.get(t)
        if dtype is not None:
            out[k] = dtype
    return out


def query_from_row(row: dict) -> Query:
    fields = json.loads(row["fields"]) if row.get("fields") else {}
    return Query(query_id=row["query_id"], task=row.get("task") or "custom", problem=row.get("problem") or "",
                 gold=row.get("gold"), fields=fields)


# ---------------------------------------------------------------------------------------------------------------
# Planning and running a harvest


def part_files(pool: Path) -> list[Path]:
    d = Path(pool) / "samples"
    parts = sorted(d.glob(f"{PART_PREFIX}*.parquet")) if d.is_dir() else []
    for p in parts:  # a FIFO in a part's place would block every reader: refused in one line instead
        regular_file(p)
    return parts


def _part_number(p: Path) -> int:
    try:
        return int(p.stem[len(PART_PREFIX):])
    except ValueError:
        return -1


@dataclass
class HarvestPlan:
    out: Path
    spec: HarvestSpec
    shard: ShardSpec | None
    queries: list[Query]              # this shard's queries, in data set order
    done: set[str]                    # query ids some part file already holds
    prompts: dict[str, str]           # rendered prompts already recorded in queries.parquet
    meta: dict                        # existing pool.json ({} for a new pool)
    promoted: dict[str, pl.DataType] = field(default_factory=dict)

    @property
    def pending(self) -> list[Query]:
        return [q for q in self.queries if q.query_id not in self.done]


def plan_harvest(out: Path, queries: Sequence[Query], spec: HarvestSpec, shard: ShardSpec | None = None) -> HarvestPlan:
    """Check the output directory against the request and find what is left to generate, before any model is
    loaded: a directory holding another configuration (or another shard) is refused, listing the differences."""
    out = Path(out)
    ids = [q.query_id for q in queries]
    if not queries:
        raise HarvestError("the data set holds no queries")
    if len(set(ids)) != len(ids):
        dup = next(i for k, i in enumerate(ids) if i in ids[:k])
        raise HarvestError(f"the data set lists query_id {dup!r} more than once; query ids must be unique")
    if spec.sampling.n < 1 or spec.sampling.n >= SEED_SPACING:
        raise HarvestError(f"--responses must be between 1 and {SEED_SPACING - 1}, got {spec.sampling.n}")
    spec.dataset = {**spec.dataset, "n_queries": len(queries), "digest": dataset_digest(queries)}
    mine = split_shard(queries, shard)
    if out.exists() and not out.is_dir():
        raise HarvestError(f"--out {out} exists and is not a directory")
    meta = read_meta(out) if out.is_dir() else {}
    done: set[str] = set()
    prompts: dict[str, str] = {}
    if out.is_dir() and any(out.iterdir()):
        if not meta:
            raise HarvestError(f"--out {out} is not empty and holds no harvest pool.json; choose a new directory")
        if meta.get("format") != FORMAT or "generation" not in meta:
            raise HarvestError(f"--out {out} holds a pool this harvest did not write (merged, imported or older "
                               "format); choose a new directory")
        old_gen, new_gen = meta["generation"], spec.generation()
        diffs = _diff(comparable_generation(old_gen, new_gen), comparable_generation(new_gen, old_gen))
        old_shard = meta.get("shard")
        new_shard = None if shard is None else {"index": shard.index, "count": shard.count}
        old_shard = None if old_shard is None else {"index": old_shard.get("index"), "count": old_shard.get("count")}
        if old_shard != new_shard:
            diffs.append(f"shard: {old_shard and str(ShardSpec(**old_shard)) or 'none'} vs "
                         f"{shard or 'none'} (give each shard its own --out)")
        if diffs:
            raise HarvestError(f"--out {out} holds a run with another configuration; resume only with the same "
                               f"options, or choose a new directory. Differences (existing vs now): "
                               + "; ".join(diffs[:6]) + (f"; ... {len(diffs) - 6} more" if len(diffs) > 6 else ""))
        remove_stale_temps(out / "samples")
        remove_stale_temps(out)
        done = _written_queries(out, {q.query_id for q in mine}, spec.sampling.n)
        qf = out / "queries.parquet"
        if qf.exists():
            try:
                prev = pl.read_parquet(qf, columns=["query_id", "prompt"])
            except Exception as e:
                raise HarvestError(f"{qf}: cannot read ({str(e).splitlines()[0]}); delete it and rerun") from None
            prompts = {k: v for k, v in zip(prev["query_id"], prev["prompt"]) if v is not None}
    return HarvestPlan(out=out, spec=spec, shard=shard, queries=mine, done=done, prompts=prompts, meta=meta,
                       promoted=promoted_fields(queries))


def _written_queries(out: Path, expected: set[str], n: int) -> set[str]:
    """Query ids held by the part files, checking that each holds whole queries of this run exactly once."""
    done: dict[str, str] = {}
    for p in part_files(out):
        try:
            df = pl.read_parquet(p, columns=["query_id"])
        except Exception as e:
            raise HarvestError(f"{p}: cannot read ({str(e).splitlines()[0]}); delete this part and rerun to "
                               "generate its queries again") from None
        counts = df.group_by("query_id").len()
        for qid, k in zip(counts["query_id"], counts["len"]):
            if qid in done:
                raise HarvestError(f"query {qid!r} is in both {done[qid]} and {p.name}; delete one of them")
            if qid not in expected:
                raise HarvestError(f"{p} holds query {qid!r}, which this run (data set, --limit, --shard) does "
                                   "not include")
            if k != n:
                raise HarvestError(f"{p} holds {k} responses for query {qid!r}, expected {n}; delete this part "
                                   "and rerun")
            done[qid] = p.name
    return set(done)


def _responses_frame(batch: Sequence[Query], responses: list[list[Response]], n: int,
                     confidence: ConfidenceSpec | None = None) -> pl.DataFrame:
    if len(responses) != len(batch):
        raise HarvestError(f"the backend returned {len(responses)} response lists for {len(batch)} prompts")
    extra = confidence.schema() if confidence is not None else {}  # (after the fixed columns)
    schema = {**SAMPLE_SCHEMA, **extra}
    cols: dict[str, list] = {k: [] for k in schema}
    for q, rs in zip(batch, responses):
        if len(rs) != n:
            raise HarvestError(f"the backend returned {len(rs)} responses for query {q.query_id!r}, expected {n}")
        for i, r in enumerate(rs):
            cols["query_id"].append(q.query_id)
            cols["sample_idx"].append(i)
            cols["text"].append(r.text)
            cols["n_tokens"].append(int(r.n_tokens))
            cols["finish_reason"].append(r.finish_reason)
            if extra and (r.signals is None or any(c not in r.signals for c in extra)):
                raise HarvestError(f"the backend returned no confidence signals for query {q.query_id!r}")
            for c in extra:
                cols[c].append(r.signals[c])
    return pl.DataFrame(cols, schema=schema)


@dataclass
class HarvestResult:
    out: Path
    queries: int            # this shard's queries
    written_before: int     # already on disk when the run started
    written_now: int
    responses: int
    tokens: int
    seconds: float

    @property
    def complete(self) -> bool:
        return self.written_before + self.written_now == self.queries


def _takes(fn: Callable, keyword: str) -> bool:
    import inspect

    params = inspect.signature(fn).parameters.values()
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


def _base_meta(plan: HarvestPlan, shard_size: int) -> dict:
    meta = dict(plan.meta) if plan.meta else {"format": FORMAT, "created": now()}
    spec = plan.spec
    meta.update({
        "format": FORMAT,
        "name": plan.out.name,
        "model": spec.model,
        "dataset": spec.dataset.get("source"),
        "generation": spec.generation(),
        "shard": None if plan.shard is None else {
            "index": plan.shard.index, "count": plan.shard.count, "rule": SHARD_RULE},
        "expected_query_ids": [q.query_id for q in plan.queries],
        "queries_expected": len(plan.queries),
        "shard_size": shard_size,
        "layout": "samples/part-XXXXX.parquet (query_id, sample_idx, text, n_tokens, finish_reason, confidence "
                  "and oracle columns); queries.parquet (query_id, task, problem, gold, dataset, prompt, "
                  "fields JSON, ...)",
    })
    meta.setdefault("oracles", {})
    meta.setdefault("runs", [])
    return meta


class HarvestWriter:
    """The files of one harvest run, whichever engine generates: pool.json first (so an interrupted directory is
    recognised on resume), queries.parquet listing the written queries plus those in flight, each part renamed into
    place only once complete, pool.json updated after every part, and at the end (whatever happened) queries.parquet
    listing exactly the written queries. The local loop (run_harvest) and the Ray driver (harvest/ray_engine.py) both
    write through it, so a pool does not depend on the engine that wrote it.

    `engine`: how this run generated ({"name": "local"} or Ray's record), kept in its `runs` entry. Part numbers
    continue after the highest on disk; write_part(number=k) writes part next_part + k (the Ray driver numbers its
    parts at planning, and they arrive in any order). fail(): a query that could not be generated, recorded in
    pool.json's `failures` (cleared at the next run's start, which generates it again)."""

    def __init__(self, plan: HarvestPlan, backend_info: dict, *, shard_size: int, argv: Sequence[str] | None = None,
                 engine: dict | None = None):
        self.plan, self.out = plan, plan.out
        (self.out / "samples").mkdir(parents=True, exist_ok=True)
        meta = _base_meta(plan, shard_size)
        meta["backend"] = backend_info
        meta["versions"] = library_versions()
        meta["complete"] = False
        meta.pop("failures", None)  # the last run's: this run generates those queries again
        self.failures: dict[str, dict] = {}
        self.run_record = {"started": now(), "argv": list(argv if argv is not None else sys.argv),
                           "engine": dict(engine or {"name": "local"}), "queries_before": len(plan.done),
                           "queries_written": 0}
        meta["runs"] = list(meta.get("runs", [])) + [self.run_record]
        self.meta = meta
        atomic_write_json(meta, self.out / "pool.json")
        self.written = [q for q in plan.queries if q.query_id in plan.done]
        self.prompts = {q.query_id: plan.prompts.get(q.query_id) for q in self.written}
        self.next_part = max((_part_number(p) for p in part_files(self.out)), default=-1) + 1
        self.crash_at = os.environ.get(CRASH_ENV)
        self.parts_this_run = 0
        self.n_resp = self.n_tok = 0
        self.t0 = time.monotonic()

    def list_queries(self, extra: Sequence[Query] = ()):
        """queries.parquet: the written queries and `extra` (in flight: listed before their part exists; a resume
        drops rows without samples), in the data set's order."""
        have = {q.query_id for q in self.written} | {q.query_id for q in extra}
        rows = [q for q in self.plan.queries if q.query_id in have]
        dataset = str(self.plan.spec.dataset.get("source"))
        atomic_write_parquet(queries_frame(rows, self.prompts, self.plan.promoted, dataset),
                             self.out / "queries.parquet")

    def write_part(self, batch: Sequence[Query], responses: list[list[Response]], number: int | None = None
                   ) -> pl.DataFrame:
        """Write `batch`'s responses as one part (temporary file, then rename; rewriting a part with the same
        number writes the same file) and record the progress in pool.json."""
        spec = self.plan.spec
        df = _responses_frame(batch, responses, spec.sampling.n, spec.confidence)
        k = self.next_part + (self.parts_this_run if number is None else number)
        part = self.out / "samples" / f"{PART_PREFIX}{k:05d}.parquet"
        hook = None
        if self.crash_at is not None and int(self.crash_at) == self.parts_this_run:
            def hook():  # simulate a kill with the part written but not yet renamed
                os._exit(75)
        atomic_write_parquet(df, part, before_rename=hook)
        self.written.extend(batch)
        self.parts_this_run += 1
        tok = int(df["n_tokens"].sum())
        self.n_resp += df.height
        self.n_tok += tok
        self.run_record.update(queries_written=len(self.written) - len(self.plan.done), responses=self.n_resp,
                               tokens=self.n_tok)
        self.meta["queries_written"] = len(self.written)
        atomic_write_json(self.meta, self.out / "pool.json")  # progress survives even a hard kill
        return df

    def fail(self, query_id: str, error: str):
        """Record a query that could not be generated (kept out of every part, so a rerun generates it)."""
        self.failures[query_id] = {"error": error, "at": now()}
        self.meta["failures"] = self.failures

    def finish(self) -> HarvestResult:
        self.list_queries()
        meta, rec = self.meta, self.run_record
        meta["complete"] = len(self.written) == len(self.plan.queries)
        meta["queries_written"] = len(self.written)
        rec["finished"] = now()
        rec["seconds"] = round(time.monotonic() - self.t0, 3)
        rec["responses"] = self.n_resp
        rec["tokens"] = self.n_tok
        if self.failures:
            rec["failed"] = len(self.failures)
        if meta["complete"]:
            meta["finished"] = rec["finished"]
        atomic_write_json(meta, self.out / "pool.json")
        return HarvestResult(out=self.out, queries=len(self.plan.queries), written_before=len(self.plan.done),
                             written_now=len(self.written) - len(self.plan.done), responses=self.n_resp,
                             tokens=self.n_tok, seconds=time.monotonic() - self.t0)


def backend_info(backend: Any) -> dict:
    try:
        return dict(backend.info())
    except Exception as e:  # provenance must not kill a run, but say it is missing
        return {"error": f"backend.info() failed: {type(e).__name__}: {e}"}


def backend_extra(spec: HarvestSpec, stop: Sequence[str]) -> dict[str, Any]:
    """generate()'s keywords beyond the sampling: only those used, so a backend without stop strings or log-probs
    still works."""
    extra: dict[str, Any] = {}
    if stop:
        extra["stop"] = list(stop)
    if spec.confidence is not None:
        extra["confidence"] = spec.confidence
    return extra


def check_confidence(plan: HarvestPlan, generate: Callable) -> None:
    if plan.spec.confidence is not None and not _takes(generate, "confidence"):
        raise HarvestError(f"the {type(getattr(generate, '__self__', generate)).__name__} backend returns no token "
                           "log-probs; run without --confidence")


def run_harvest(plan: HarvestPlan, backend: Backend, prompt_fn: Callable[[Query], str], *, shard_size: int = 32,
                progress: bool = True, argv: Sequence[str] | None = None, stop: Sequence[str] = ()) -> HarvestResult:
    """Generate the plan's pending queries in parts of `shard_size` queries, in this process (`--engine local`),
    writing through HarvestWriter. Any exception (including Ctrl-C) leaves a directory that the same command
    resumes. `stop`: the template's stop strings, passed to backends that take them."""
    if shard_size < 1:
        raise HarvestError(f"--shard-size must be at least 1, got {shard_size}")
    check_confidence(plan, backend.generate)
    writer = HarvestWriter(plan, backend_info(backend), shard_size=shard_size, argv=argv)
    sampling = plan.spec.sampling
    extra = backend_extra(plan.spec, stop)
    pending = plan.pending
    out = plan.out
    # a line per part when the output is a log (every_s=0): Slurm-style logs then show steady progress
    bar = progress_display(len(pending), f"{out.name}" + (f" shard {plan.shard}" if plan.shard else ""), "queries",
                           enabled=progress, every_s=0.0, rates=("responses", "tokens")).__enter__()
    try:
        for start in range(0, len(pending), shard_size):
            batch = pending[start:start + shard_size]
            for q in batch:
                writer.prompts[q.query_id] = prompt_fn(q)
            writer.list_queries(batch)  # listed before its part exists; a resume drops rows without samples
            seeds = [query_seed(sampling.seed, q.query_id) for q in batch]
            responses = backend.generate([writer.prompts[q.query_id] for q in batch], sampling, seeds, **extra)
            df = writer.write_part(batch, responses)
            bar.advance(len(batch), responses=df.height, tokens=int(df["n_tokens"].sum()))
    finally:
        bar.__exit__(None, None, None)
        # whatever happened, queries.parquet lists exactly the written queries and pool.json says how far it got
        result = writer.finish()
    return result


# ---------------------------------------------------------------------------------------------------------------
# Merging shards


@dataclass
class MergeReport:
    out: Path | None
    queries: int
    responses: int
    missing: list[str]
    missing_shards: list[int]


def merge_pools(inputs: Sequence[Path], out: Path, *, allow_missing: bool = False) -> MergeReport:
    """Join shard directories into one pool. Refused: inputs from different configurations (generation block,
    shard count, oracle configurations, sample columns), a query in two inputs, and, unless allow_missing,
    any query of the data set that no input holds (the report names them and the absent shards). The pool is
    built in a temporary directory, checked with replay's loader, then renamed into place (the pool format's
    writer, replay.pool.new_pool_dir). Every check runs before anything is written."""
    inputs = [Path(p) for p in inputs]
    out = Path(out)
    metas = _shard_metas(inputs, out)
    count, indexes = _check_one_configuration(inputs, metas)
    schema = _check_parts(inputs)
    owner, expected = _query_owners(inputs, metas)
    missing = [q for q in expected if q not in owner]
    missing_shards = sorted(set(range(count)) - set(indexes)) if count is not None else []
    if (missing or missing_shards) and not allow_missing:
        _refuse_incomplete(metas[0], owner, count, missing, missing_shards)
    try:
        _write_merged(out, inputs, metas, owner, schema, missing, missing_shards)
    except PoolError as e:
        raise HarvestError(f"the merged pool does not load: {e}") from None
    responses = pl.scan_parquet(part_files(out)).select(pl.len()).collect().item()
    return MergeReport(out=out, queries=len(owner), responses=responses, missing=missing,
                       missing_shards=missing_shards)


def _shard_metas(inputs: list[Path], out: Path) -> list[dict]:
    """Each input's pool.json, once the arguments make sense and every input is a harvest directory with parts."""
    if not inputs:
        raise HarvestError("give at least one shard directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarvestError(f"--out {out} exists and is not an empty directory; choose a new one")
    if len({p.resolve() for p in inputs}) != len(inputs):
        raise HarvestError("the same shard directory is given twice")
    metas = []
    for p in inputs:
        if not p.is_dir():
            raise HarvestError(f"{p} is not a directory")
        m = read_meta(p)
        if m.get("format") != FORMAT or "generation" not in m:
            raise HarvestError(f"{p} has no harvest pool.json; ttc merge joins directories written by ttc harvest")
        if not part_files(p):
            raise HarvestError(f"{p} holds no samples/part-*.parquet")
        metas.append(m)
    return metas


def _check_one_configuration(inputs: list[Path], metas: list[dict]) -> tuple[int | None, list[int | None]]:
    """(shard count, each input's shard index) once the inputs are shards of one run: the same generation, shard
    count and oracle configurations as the first, and no shard given twice."""
    ref, ref_path = metas[0], inputs[0]
    for p, m in zip(inputs[1:], metas[1:]):
        diffs = _diff(comparable_generation(ref["generation"], m["generation"]),
                      comparable_generation(m["generation"], ref["generation"]))
        if diffs:
            raise HarvestError(f"{p} was generated with another configuration than {ref_path}: " + "; ".join(diffs[:6]))
        rc, mc = (ref.get("shard") or {}).get("count"), (m.get("shard") or {}).get("count")
        if rc != mc:
            raise HarvestError(f"{p} is shard of {mc} but {ref_path} is a shard of {rc}")
        od = _diff(_oracle_configs(ref), _oracle_configs(m))
        if od:
            raise HarvestError(f"{p} was scored differently from {ref_path} (rescore both with the same ttc score "
                               f"options): " + "; ".join(od[:6]))
    indexes = [(m.get("shard") or {}).get("index") for m in metas]
    count = (ref.get("shard") or {}).get("count")
    if count is None and len(inputs) > 1:
        raise HarvestError(f"{ref_path} was not harvested with --shard (it is a whole run); merge joins shards")
    if count is not None:
        seen = {}
        for p, i in zip(inputs, indexes):
            if i in seen:
                raise HarvestError(f"{p} and {seen[i]} are both shard {i}/{count}")
            seen[i] = p
    return count, indexes


def _check_parts(inputs: list[Path]) -> dict:
    """The one sample schema of every part, once each part is whole."""
    # a damaged part (a flipped bit, a truncated copy, a FIFO in its place) is refused first, in one line naming it,
    # before its schema or ids are read and before anything is copied (score would trip on it later)
    for p in inputs:
        for f in part_files(p):
            verify_file(f)
    # sample schemas must agree (the same oracle columns everywhere)
    schema = None
    for p in inputs:
        for f in part_files(p):
            s = dict(pl.read_parquet_schema(f))
            if schema is None:
                schema, first = s, f
            elif s != schema:
                d = sorted(set(s) ^ set(schema)) or [c for c in s if s[c] != schema.get(c)]
                raise HarvestError(f"{f} and {first} have different columns ({', '.join(map(str, d))}); score "
                                   "every shard with the same oracles before merging")
    return schema


def _query_owners(inputs: list[Path], metas: list[dict]) -> tuple[dict[str, Path], list[str]]:
    """(the input holding each query, the queries the inputs were to generate); a query in two inputs is refused."""
    owner: dict[str, Path] = {}
    expected: list[str] = []
    for p, m in zip(inputs, metas):
        expected += m.get("expected_query_ids") or []
        for f in part_files(p):
            for qid in pl.read_parquet(f, columns=["query_id"])["query_id"].unique().to_list():
                if qid in owner:
                    raise HarvestError(f"query {qid!r} is in both {owner[qid]} and {p}: duplicate queries")
                owner[qid] = p
    return owner, expected


def _refuse_incomplete(ref: dict, owner: dict, count: int | None, missing: list[str], missing_shards: list[int]):
    """The error naming the absent shards and the queries not generated yet."""
    n_data = ref["generation"]["dataset"].get("n_queries")
    parts = []
    if missing_shards:
        parts.append(f"shard{'s' if len(missing_shards) > 1 else ''} "
                     f"{', '.join(f'{i}/{count}' for i in missing_shards)} not given")
    if missing:
        shown = ", ".join(repr(q) for q in missing[:8])
        parts.append(f"{len(missing)} queries of the given shards not generated yet ({shown}"
                     + (", ..." if len(missing) > 8 else "") + ")"
                     + "; rerun those shards' ttc harvest to finish them")
    total = f" (data set: {n_data} queries, merged: {len(owner)})" if n_data is not None else ""
    raise HarvestError("incomplete: " + "; ".join(parts) + total + "; --allow-missing merges anyway")


def _write_merged(out: Path, inputs: list[Path], metas: list[dict], owner: dict[str, Path], schema: dict,
                  missing: list[str], missing_shards: list[int]) -> None:
    """The merged pool at out: every part copied under a new number, the queries each input owns, and the first
    input's pool.json less what belongs to one shard, plus where each input came from; checked with replay's loader
    before it is renamed into place."""
    ref = metas[0]
    with new_pool_dir(out) as tmp, write_errors(out):  # a full disk while copying: one error line
        (tmp / "samples").mkdir()
        k = 0
        queries = []
        for p in inputs:
            for f in part_files(p):
                shutil.copyfile(f, tmp / "samples" / f"{PART_PREFIX}{k:05d}.parquet")
                k += 1
            qf = p / "queries.parquet"
            if qf.exists():
                ids = list({q for q, o in owner.items() if o == p})
                queries.append(pl.read_parquet(qf).filter(pl.col("query_id").is_in(ids)))
        if queries:
            pl.concat(queries, how="diagonal_relaxed").sort("query_id").write_parquet(
                tmp / "queries.parquet", compression="zstd")
        per_shard = ("shard", "runs", "queries_expected", "queries_written", "expected_query_ids",
                     "scoring_in_progress", "created", "finished", "failures")
        meta = {k2: v for k2, v in ref.items() if k2 not in per_shard}
        meta.update({
            "name": out.name, "created": now(), "complete": not (missing or missing_shards),
            "queries_written": len(owner),
            "merged_from": [{"path": str(p), "shard": m.get("shard") and str(ShardSpec(m["shard"]["index"],
                                                                                         m["shard"]["count"])),
                             "created": m.get("created"), "finished": m.get("finished"),
                             "backend": m.get("backend"), "versions": m.get("versions"), "runs": m.get("runs")}
                            for p, m in zip(inputs, metas)],
        })
        if missing or missing_shards:
            meta["missing"] = {"shards": missing_shards, "queries": missing}
        (tmp / "pool.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
        _check_loads(tmp, schema)


RUNTIME_KEYS = ("runtime", "scored", "seconds", "versions")  # how an oracle run went, not what its scores mean


def _oracle_configs(meta: dict) -> dict:
    return {k: {kk: vv for kk, vv in v.items() if kk not in RUNTIME_KEYS}
            for k, v in (meta.get("oracles") or {}).items()}


def _check_loads(pool: Path, schema: dict):
    """replay's loader accepts the pool (one load validates every oracle column). It needs ground truth or a score
    column to load at all, so an unscored pool gets the same structural checks (unique (query_id, sample_idx),
    queries.parquet agreeing)."""
    scores = [c for c in schema if c.startswith("score_")]
    if "correct" in schema or scores:
        load_pool(pool, score="gt" if "correct" in schema else scores[0])
        return

    files = part_files(pool)
    df = pl.scan_parquet(files).select("query_id", "sample_idx").collect()
    dup = df.select(pl.struct("query_id", "sample_idx").is_duplicated().sum()).item()
    if dup:
        raise PoolError(f"samples/*.parquet: {dup} rows share a (query_id, sample_idx)")
    qf = pool / "queries.parquet"
    if qf.exists():
        listed = set(pl.read_parquet(qf, columns=["query_id"])["query_id"].to_list())
        have = set(df["query_id"].unique().to_list())
        if listed != have:
            raise PoolError(f"queries.parquet: lists {len(listed - have)} queries without samples and misses "
                            f"{len(have - listed)} that have samples")
