"""Oracle columns for an existing pool: which oracle applies to which task, what it needs, and rewriting the sample
files without ever leaving a torn one.

What each oracle is (the columns it owns, the tasks it grades, what it needs, the options it reads) is declared once in
harvest/registry.py's ORACLES; what it does is its implementation class below (an `OracleImpl`), which the entry
names. Scoring dispatches through the entry: nothing here switches on an oracle's name.

Scoring replaces an oracle's columns in every part file (temporary file, then rename) and records the oracle's
configuration in pool.json under `oracles`. Progress is recorded too (`scoring_in_progress`: the configuration and
the parts already rewritten), so an interrupted `ttc score` rerun with the same options skips the finished parts; with
other options it starts over.

Answers follow one rule for both ground-truth oracles: the extracted final answer, normalised, or null when
there is none or the response was cut off (finish_reason "length"): a truncated response has not answered.
Grading is done once per distinct (query, answer), so equal answers of one query always get the same verdict.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import polars as pl

from ttc.replay.pool import (
    SCORE,
    PoolError,
    atomic_write_json,
    atomic_write_parquet,
    column,
    remove_stale_temps,
    sample_files,
    verify_file,
)

from .pipeline import RUNTIME_KEYS, SAMPLE_SCHEMA, HarvestError, library_versions, now, query_from_row, read_meta
from .registry import ORACLES
from .types import Query

# the oracle columns' types: the pool format's (replay/pool.py), plus prm_steps, a harvest-only column replay ignores
EXTRA_TYPES = {"prm_steps": pl.List(pl.Float64)}
COLUMN_TYPES = {name: EXTRA_TYPES[name] if name in EXTRA_TYPES else column(name).dtype
                for o in ORACLES.values() for name in o.columns}  # a PoolError here: give the new column its type
COLUMN_ORDER = list(SAMPLE_SCHEMA) + list(COLUMN_TYPES)
ANSWER_RULE = "null when no final answer is found or finish_reason == 'length' (truncated)"


@dataclass
class ScoreOptions:
    workers: int | None = None          # processes for math-verify / the code sandbox (None: all cores)
    timeout_s: float | None = None      # per grade: gt 5 s, exec 10 s when None
    memory_mb: int = 512                # exec: address-space limit of each program
    sandbox: str = "auto"               # exec: "auto", "strict" or "guard" (harvest/oracles/sandbox.py)
    prm_model: str | None = None        # None: harvest.prm.PRM_DEFAULT
    prm_batch_size: int = 8
    prm_step_mode: str = "step"
    prm_dtype: str | None = None
    prm_device: str | None = None
    prm_revision: str | None = None
    prm_max_length: int | None = None
    prm_engine: str = "auto"            # harvest.prm.ENGINES: transformers (CPU, tests) or vllm (pooling, GPU)
    judge_model: str | None = None
    judge_backend: str = "vllm"
    judge_backend_options: dict = field(default_factory=dict)
    judge_samples: int = 1
    judge_options: dict = field(default_factory=dict)   # extra keyword arguments for judge_scores
    progress: bool = True
    # test seams: build the scorer / judge backend from the options instead of loading a model by name
    prm_factory: Callable[["ScoreOptions"], Any] | None = None
    judge_factory: Callable[["ScoreOptions"], Any] | None = None

    def __post_init__(self):
        """Refuse out-of-range options before any model loads or grader starts (the command line's --workers,
        --timeout, ... land here)."""
        from .oracles.sandbox import MIN_MEMORY_MB, MODES

        for flag, value in (("--workers", self.workers), ("--memory-mb", self.memory_mb),
                            ("--prm-batch-size", self.prm_batch_size), ("--prm-max-length", self.prm_max_length),
                            ("--judge-samples", self.judge_samples)):
            if value is not None and value < 1:
                raise HarvestError(f"{flag} must be at least 1, got {value}")
        if self.memory_mb < MIN_MEMORY_MB:  # below what the interpreter itself needs: every program would fail
            raise HarvestError(f"--memory-mb must be at least {MIN_MEMORY_MB}, got {self.memory_mb}")
        if self.timeout_s is not None and not 0 < self.timeout_s < float("inf"):
            raise HarvestError(f"--timeout must be a positive, finite number of seconds, got {self.timeout_s}")
        if self.sandbox not in MODES:
            raise HarvestError(f"--sandbox must be one of {', '.join(MODES)}, got {self.sandbox!r}")


def parse_oracles(items: Sequence[str] | None) -> list[str]:
    names = []
    for item in items or []:
        for name in str(item).split(","):
            name = name.strip()
            if not name:
                continue
            if name not in ORACLES:
                raise HarvestError(f"unknown oracle {name!r}; choose from {', '.join(ORACLES)}")
            if name not in names:
                names.append(name)
    for i, a in enumerate(names):  # two oracles that write one column cannot both score a pool
        for b in names[i + 1:]:
            shared = [c for c in ORACLES[a].columns if c in ORACLES[b].columns]
            if shared:
                raise HarvestError(f"--oracle {a} and {b} both write {' and '.join(repr(c) for c in shared)}; a pool "
                                   "takes one of them")
    return names


# ---------------------------------------------------------------------------------------------------------------
# Reading a pool for scoring


@dataclass
class ScoringPool:
    path: Path
    parts: list[Path]
    queries: dict[str, Query]
    meta: dict

    def rel(self, part: Path) -> str:
        return str(part.relative_to(self.path))


def open_pool(pool: Path) -> ScoringPool:
    pool = Path(pool)
    try:
        parts = sample_files(pool)
    except PoolError as e:
        raise HarvestError(str(e)) from None
    remove_stale_temps(pool / "samples")
    for p in parts:
        try:
            names = pl.read_parquet_schema(p).names()
        except Exception as e:
            raise HarvestError(f"{p}: cannot read as Parquet ({str(e).splitlines()[0]})") from None
        for col in ("query_id", "sample_idx", "text"):
            if col not in names:
                raise HarvestError(f"{p} has no '{col}' column; oracles score response text, so this pool "
                                   "(imported, or written without text) cannot be scored")
    qf = pool / "queries.parquet"
    if not qf.exists():
        raise HarvestError(f"{pool} has no queries.parquet; scoring needs each query's task, problem and gold "
                           "answer (ttc harvest writes it)")
    qdf = pl.read_parquet(qf)
    for col in ("query_id", "task", "problem"):
        if col not in qdf.columns:
            raise HarvestError(f"{qf} has no '{col}' column")
    queries = {}
    for row in qdf.iter_rows(named=True):
        queries[row["query_id"]] = query_from_row(row)
    return ScoringPool(path=pool, parts=parts, queries=queries, meta=read_meta(pool))


def check_applicable(queries: Sequence[Query], oracle: str, opts: ScoreOptions):
    """Refuse an oracle that cannot score these queries, before any model is loaded (ttc harvest --oracle checks
    this before generating): the tasks and needs its registry entry declares, then its own checks."""
    entry = ORACLES[oracle]
    tasks = sorted({q.task for q in queries})
    if entry.tasks is not None:
        wrong = [t for t in tasks if t not in entry.tasks]
        if wrong:
            graders: dict[str, str] = {}  # task -> the first oracle that gives ground truth for it
            for name, o in ORACLES.items():
                for t in (o.tasks or ()) if "gt" in o.gives else ():
                    graders.setdefault(t, name)
            alt = [f"{t}: --oracle {graders[t]}" for t in wrong if t in graders]
            raise HarvestError(f"oracle {oracle!r} grades task {' / '.join(entry.tasks)}, but this pool holds "
                               f"{', '.join(repr(t) for t in wrong)} queries"
                               + (f" (use {'; '.join(alt)})" if alt else
                                  f"; ground truth exists for {' and '.join(graders)}"))
    if "gold" in entry.needs:
        nogold = [q.query_id for q in queries if q.gold is None or not str(q.gold).strip()]
        if nogold:
            raise HarvestError(f"oracle {oracle!r} needs gold answers, and {len(nogold)} queries have none "
                               f"(e.g. {nogold[0]!r})")
    implementation(oracle).check(queries, opts)


# ---------------------------------------------------------------------------------------------------------------
# Oracle configurations (what pool.json records and what resume compares)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def oracle_config(oracle: str, opts: ScoreOptions) -> dict:
    """The settings that decide an oracle's columns (model, rules, limits), without runtime details."""
    cfg: dict[str, Any] = {"columns": list(ORACLES[oracle].columns)}
    cfg.update(implementation(oracle).config(opts))
    return cfg


def _comparable(rec: dict | None) -> dict | None:
    return None if rec is None else {k: v for k, v in rec.items() if k not in RUNTIME_KEYS}


# ---------------------------------------------------------------------------------------------------------------
# Writing columns


def canonical(df: pl.DataFrame) -> pl.DataFrame:
    """One column order for every part file, whatever order the oracles ran in, so the parts of a pool always
    share a schema."""
    known = [c for c in COLUMN_ORDER if c in df.columns]
    rest = sorted(c for c in df.columns if c not in COLUMN_ORDER)
    return df.select(known + rest)


def _column_type(name: str) -> pl.DataType:
    """An oracle column's type: the pool format's, or EXTRA_TYPES' for a harvest-only column."""
    return EXTRA_TYPES[name] if name in EXTRA_TYPES else column(name).dtype


def _with_columns(df: pl.DataFrame, cols: dict[str, list]) -> pl.DataFrame:
    df = df.drop([c for c in cols if c in df.columns])
    return canonical(df.with_columns([pl.Series(name, values, dtype=_column_type(name))
                                      for name, values in cols.items()]))


def _check_scores(name: str, values: Sequence[float], where: str):
    """Refuse before writing what the pool format (SCORE) would refuse on load; `where` names the part (or
    "this round" live)."""
    bad = [v for v in values if not (isinstance(v, (int, float)) and SCORE.lo <= float(v) <= SCORE.hi)]  # NaN too
    if bad:
        raise HarvestError(f"oracle produced {len(bad)} values of {name} outside [{SCORE.lo:g}, {SCORE.hi:g}] or "
                           f"NaN in {where} (e.g. {bad[0]!r})")


# ---------------------------------------------------------------------------------------------------------------
# The oracles: one implementation class each, named by its registry entry


class _Recorder:
    """pool.json's record of a scoring in progress: the configuration and the parts already rewritten."""

    def __init__(self, sp: ScoringPool, oracle: str, cfg: dict):
        self.sp, self.oracle, self.cfg = sp, oracle, cfg
        prog = (sp.meta.get("scoring_in_progress") or {}).get(oracle)
        self.done = set(prog["done"]) if prog and _comparable(prog.get("config")) == _comparable(cfg) else set()
        self.resumed = len(self.done)
        self._save()

    def _save(self):
        self.sp.meta.setdefault("scoring_in_progress", {})[self.oracle] = {"config": self.cfg,
                                                                           "done": sorted(self.done)}
        atomic_write_json(self.sp.meta, self.sp.path / "pool.json")

    def mark(self, part: Path):
        self.done.add(self.sp.rel(part))
        self._save()

    def finish(self, record: dict):
        prog = self.sp.meta.get("scoring_in_progress") or {}
        prog.pop(self.oracle, None)
        if not prog:
            self.sp.meta.pop("scoring_in_progress", None)
        self.sp.meta.setdefault("oracles", {})[self.oracle] = record
        atomic_write_json(self.sp.meta, self.sp.path / "pool.json")


class OracleSession:
    """An oracle ready to score responses held in memory, its model (PRM, judge backend) loaded once when the
    session opens. Both `ttc score` (a pool's parts) and `ttc run` (each backend call's new responses, harvest/run/)
    score through a session, so a live run's columns are the ones `ttc score` writes, computed by the same code.
    columns(queries, texts, finish_reasons): the oracle's columns for these responses, in one batched call; stats:
    counts for pool.json's runtime record; info(): the scorer's provenance."""

    def __init__(self, impl: "OracleImpl", opts: "ScoreOptions", cfg: dict):
        self.impl, self.opts, self.cfg = impl, opts, cfg
        self.stats: dict[str, int] = {"responses": 0}

    def columns(self, queries: Sequence[Query], texts: Sequence[str | None], finish_reasons: Sequence[str | None],
                where: str = "this batch") -> dict[str, list]:
        raise NotImplementedError

    def info(self) -> dict:
        return {}

    def summary(self) -> dict:
        return dict(self.stats)


class OracleImpl:
    """What an oracle does; its registry entry (`self.entry`, harvest/registry.py) says what it is. config: the settings
    that decide its columns (recorded in pool.json, compared on resume); check: refusals beyond the entry's tasks and
    needs, before any model loads; open: an OracleSession that scores responses in memory; score: rewrite the parts in
    `todo` (marking each done in `rec`) and return a summary; runtime: fields added to pool.json's runtime record."""

    def __init__(self, entry):
        self.entry = entry

    def open(self, opts: ScoreOptions, cfg: dict | None = None) -> OracleSession:
        raise NotImplementedError

    def config(self, opts: ScoreOptions) -> dict:
        return {}

    def check(self, queries: Sequence[Query], opts: ScoreOptions) -> None:
        return None

    def score(self, sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
        raise NotImplementedError

    def runtime(self, summary: dict, opts: ScoreOptions) -> dict:
        return {}


def implementation(oracle: str) -> OracleImpl:
    """The implementation of a registered oracle."""
    entry = ORACLES[oracle]
    return entry.load()(entry)


def response_answer(oracle: str, text: str | None, finish_reason: str | None) -> str | None:
    """The `answer` a ground-truth oracle reads from one response ("gt": the normalised boxed / final answer;
    "exec": the [ANSWER] literal); None when there is none or the response was cut at max_tokens (ANSWER_RULE)."""
    if finish_reason == "length":
        return None
    return implementation(oracle).answer(text or "")


class TruthSession(OracleSession):
    """Ground truth in memory: answers extracted, each distinct (query, answer) graded once per session (a verdict
    is kept for the session's life, so a live run grades an answer once however many rounds repeat it)."""

    def __init__(self, impl, opts, cfg):
        super().__init__(impl, opts, cfg)
        self.verdicts: dict[tuple[str, str], bool] = {}
        self.stats = {"responses": 0, "answered": 0, "correct": 0, "distinct_answers_graded": 0}

    def columns(self, queries, texts, finish_reasons, where="this batch"):
        answers = [None if f == "length" else self.impl.answer(t or "") for t, f in zip(texts, finish_reasons)]
        todo: dict[tuple[str, str], Query] = {}
        for q, a in zip(queries, answers):
            if a is not None and (q.query_id, a) not in self.verdicts:
                todo[(q.query_id, a)] = q
        pairs = list(todo)
        verdicts = self.impl.grade([(todo[p], p[1]) for p in pairs], self.cfg, self.opts) if pairs else []
        if len(verdicts) != len(pairs):
            raise HarvestError(f"the {self.impl.entry.name} grader returned {len(verdicts)} verdicts for {len(pairs)} "
                               "answers")
        self.verdicts.update((p, bool(v)) for p, v in zip(pairs, verdicts))
        correct = [a is not None and self.verdicts[(q.query_id, a)] for q, a in zip(queries, answers)]
        self.stats["responses"] += len(answers)
        self.stats["answered"] += sum(a is not None for a in answers)
        self.stats["correct"] += sum(correct)
        self.stats["distinct_answers_graded"] += len(pairs)
        return {"answer": answers, "correct": correct}


class TruthOracle(OracleImpl):
    """Ground truth: an answer extracted from each response (`answer`), graded once per distinct (query, answer)
    (`grade`), written as `answer` and `correct`."""

    def answer(self, text: str) -> str | None:
        raise NotImplementedError

    def grade(self, items: list[tuple[Query, str]], cfg: dict, opts: ScoreOptions) -> list:
        """Verdicts for (query, answer) pairs, in one batched call."""
        raise NotImplementedError

    def open(self, opts: ScoreOptions, cfg: dict | None = None) -> TruthSession:
        return TruthSession(self, opts, cfg if cfg is not None else oracle_config(self.entry.name, opts))

    def score(self, sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
        """Every part's answers graded in one call (the grader's workers stay busy), then each part rewritten."""
        frames: dict[Path, pl.DataFrame] = {}
        for part in todo:
            df = pl.read_parquet(part, columns=[c for c in ("query_id", "text", "finish_reason")
                                                if c in pl.read_parquet_schema(part)])
            unknown = set(df["query_id"].unique().to_list()) - set(sp.queries)
            if unknown:
                raise HarvestError(f"{part} holds query {min(unknown)!r}, which queries.parquet does not list")
            frames[part] = df
        session = self.open(opts, rec.cfg)
        qs = [sp.queries[q] for df in frames.values() for q in df["query_id"].to_list()]
        texts = [t for df in frames.values() for t in df["text"].to_list()]
        fr = [f for df in frames.values() for f in (df["finish_reason"].to_list() if "finish_reason" in df.columns
                                                    else [None] * df.height)]
        cols = session.columns(qs, texts, fr) if qs else {"answer": [], "correct": []}
        start = 0
        for part, df in frames.items():
            end = start + df.height
            full = pl.read_parquet(part)
            atomic_write_parquet(_with_columns(full, {k: v[start:end] for k, v in cols.items()}), part)
            rec.mark(part)
            start = end
        return session.summary()


class MathAnswerOracle(TruthOracle):
    """gt: the boxed / final answer, normalised, graded with math-verify against the gold answer."""

    def answer(self, text: str) -> str | None:
        from .oracles.math_answer import extract_answer, normalize_answer

        raw = extract_answer(text)
        return None if raw is None else normalize_answer(raw)

    def config(self, opts: ScoreOptions) -> dict:
        from .oracles import math_answer

        return {"task": "math", "answer": "normalize_answer(extract_answer(text)); " + ANSWER_RULE,
                "grader": "harvest.oracles.math_answer.grade_many: math-verify verify(parse(gold), "
                          "parse(answer)), gold first, in worker processes; a timeout counts incorrect",
                "timeout_s": opts.timeout_s if opts.timeout_s is not None else 5.0,
                "math_verify": getattr(math_answer, "MATH_VERIFY_VERSION", None)}

    def grade(self, items, cfg, opts):
        from .oracles.math_answer import grade_many

        return grade_many([a for _, a in items], [q.gold for q, _ in items], workers=opts.workers,
                          timeout_s=cfg["timeout_s"], progress=opts.progress)


class CodeExecOracle(TruthOracle):
    """exec: the [ANSWER] literal, run as the completed assertion of the query's function in the sandbox."""

    def answer(self, text: str) -> str | None:
        from .oracles.code_exec import extract_lcb_answer

        a = extract_lcb_answer(text)
        return None if a is None or not a.strip() else a.strip()

    def check(self, queries, opts):
        bad = [q.query_id for q in queries if not q.fields.get("code") or not q.fields.get("input")]
        if bad:
            raise HarvestError(f"oracle {self.entry.name!r} needs each query's code and input, missing for {len(bad)} "
                               f"queries (e.g. {bad[0]!r})")

    def config(self, opts: ScoreOptions) -> dict:
        from .oracles.sandbox import announce, isolation

        level = isolation(opts.sandbox)  # no OS isolation is refused here (unless --sandbox guard), before any work
        announce(level)
        return {"task": "lcb-exec", "answer": "extract_lcb_answer(text) ([ANSWER] ... [/ANSWER] literal); "
                + ANSWER_RULE,
                "grader": "harvest.oracles.code_exec.grade_lcb: the function and the completed assertion in a "
                          "sandboxed process; timeout, memory limit or error counts incorrect",
                "timeout_s": opts.timeout_s if opts.timeout_s is not None else 10.0,
                "memory_mb": opts.memory_mb,
                # the isolation the programs get here ("namespaces", or "guard-only" when asked for by name)
                "sandbox": level}

    def grade(self, items, cfg, opts):
        from .oracles.code_exec import grade_lcb

        qs = [q for q, _ in items]
        return grade_lcb([q.fields["code"] for q in qs], [q.fields["input"] for q in qs], [a for _, a in items],
                         workers=opts.workers, timeout_s=cfg["timeout_s"], memory_mb=cfg["memory_mb"],
                         sandbox="strict" if cfg["sandbox"] == "namespaces" else "guard",  # the level recorded
                         progress=opts.progress)


class PRMOracle(OracleImpl):
    """prm: per-step process rewards of each response given its query's problem; min, last and product."""

    AGGREGATES = {"score_prm_min": "min", "score_prm_last": "last", "score_prm_prod": "prod"}

    def check(self, queries, opts):
        """The PRM must be loadable before any generation starts (it used to be found missing after hours of
        generating): a local directory, or a hub name whose config this machine has or can download."""
        if opts.prm_factory is not None:
            return
        from . import prm

        name = opts.prm_model or prm.PRM_DEFAULT
        if Path(name).expanduser().is_dir():
            return
        if Path(name).expanduser().exists() or name.startswith((".", "/", "~")):
            raise HarvestError(f"--prm-model {name}: not a model directory")
        try:
            from transformers import AutoConfig

            AutoConfig.from_pretrained(name, revision=opts.prm_revision)
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise HarvestError(f"--prm-model {name}: cannot be found or downloaded here ({first}); give a local "
                               "directory or a hub name this machine can reach") from None

    def config(self, opts: ScoreOptions) -> dict:
        from . import prm

        cfg = {"model": opts.prm_model or prm.PRM_DEFAULT, "revision": opts.prm_revision,
               "step_mode": opts.prm_step_mode, "dtype": opts.prm_dtype or "auto (bf16 on CUDA, fp32 on CPU)",
               "max_length": opts.prm_max_length, "aggregates": {"score_prm_min": "min", "score_prm_last":
               "last", "score_prm_prod": "product"}, "empty": "a response with no steps scores 0.0",
               "input": "the query's problem (not the rendered prompt) and the response text"}
        if opts.prm_factory is None and prm.resolve_engine(opts.prm_engine, opts.prm_device) == "vllm":
            cfg["engine"] = "vllm pooling (STEP)"  # absent: transformers, as every pool scored before recorded
        return cfg

    @staticmethod
    def make_scorer(opts: ScoreOptions):
        if opts.prm_factory is not None:
            return opts.prm_factory(opts)
        from .prm import PRM_DEFAULT, PRMScorer, VLLMPRMScorer, resolve_engine

        if resolve_engine(opts.prm_engine, opts.prm_device) == "vllm":
            return VLLMPRMScorer(opts.prm_model or PRM_DEFAULT, dtype=opts.prm_dtype, step_mode=opts.prm_step_mode,
                                 max_length=opts.prm_max_length, revision=opts.prm_revision, progress=opts.progress)
        return PRMScorer(opts.prm_model or PRM_DEFAULT, device=opts.prm_device, dtype=opts.prm_dtype,
                         batch_size=opts.prm_batch_size, step_mode=opts.prm_step_mode, max_length=opts.prm_max_length,
                         revision=opts.prm_revision, progress=opts.progress)

    def open(self, opts: ScoreOptions, cfg: dict | None = None) -> "PRMSession":
        return PRMSession(self, opts, cfg if cfg is not None else oracle_config(self.entry.name, opts))

    def score(self, sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
        session = self.open(opts, rec.cfg)
        for part in todo:
            df = pl.read_parquet(part)
            qs = [sp.queries[q] for q in df["query_id"].to_list()]
            cols = session.columns(qs, df["text"].to_list(), [None] * df.height, where=part.name)
            atomic_write_parquet(_with_columns(df, cols), part)
            rec.mark(part)
        return session.summary()

    def runtime(self, summary: dict, opts: ScoreOptions) -> dict:
        return {"device": (summary.get("scorer") or {}).get("device"), "batch_size": opts.prm_batch_size}


class PRMSession(OracleSession):
    """The PRM loaded once (PRMOracle.make_scorer); each call scores its responses given their queries' problems."""

    def __init__(self, impl, opts, cfg):
        super().__init__(impl, opts, cfg)
        self.scorer = impl.make_scorer(opts)
        self.stats = {"responses": 0, "no_steps": 0, "truncated": 0}

    def columns(self, queries, texts, finish_reasons, where="this batch"):
        from .prm import aggregate

        steps = self.scorer.score([q.problem for q in queries], [t or "" for t in texts])
        if len(steps) != len(texts):
            raise HarvestError(f"the PRM returned {len(steps)} score lists for {len(texts)} responses")
        agg = [aggregate(s) for s in steps]
        cols = {name: [a[key] for a in agg] for name, key in PRMOracle.AGGREGATES.items()}
        for name in PRMOracle.AGGREGATES:
            _check_scores(name, cols[name], where)
        cols["prm_steps"] = [[float(x) for x in s] for s in steps]
        stats = getattr(self.scorer, "stats", {}) or {}
        self.stats["responses"] += len(texts)
        self.stats["truncated"] += int(stats.get("truncated", 0))
        self.stats["no_steps"] += int(stats.get("no_steps", sum(1 for s in steps if not s)))
        return cols

    def info(self) -> dict:
        return self.scorer.info() if hasattr(self.scorer, "info") else {}

    def summary(self) -> dict:
        return {**self.stats, "scorer": self.info()}


class JudgeSession(OracleSession):
    """The judge backend built once (JudgeOracle.make_backend); each call judges its responses against their
    queries' gold answers (a verdict's seed comes from its prompt, so batching does not change it)."""

    def __init__(self, impl, opts, cfg):
        super().__init__(impl, opts, cfg)
        self.backend = impl.make_backend(opts)
        self.stats = {"responses": 0, "verdicts": 0, "unparseable_verdicts": 0}

    def columns(self, queries, texts, finish_reasons, where="this batch"):
        from .judge import judge_details

        res = judge_details(self.backend, [q.problem for q in queries], [q.gold for q in queries],
                            [t or "" for t in texts], samples=self.opts.judge_samples, **self.opts.judge_options)
        if len(res.scores) != len(texts):
            raise HarvestError(f"the judge returned {len(res.scores)} scores for {len(texts)} responses")
        scores = [float(x) for x in res.scores]
        _check_scores("score_judge", scores, where)
        self.stats["responses"] += len(texts)
        self.stats["verdicts"] += len(texts) * self.opts.judge_samples
        self.stats["unparseable_verdicts"] += res.n_unparseable
        return {"score_judge": scores}

    def info(self) -> dict:
        return self.backend.info() if hasattr(self.backend, "info") else {}

    def summary(self) -> dict:
        return {**self.stats, "backend": self.info()}


class JudgeOracle(OracleImpl):
    """judge: the share of a judge model's verdicts saying the response's final answer matches the gold one."""

    def check(self, queries, opts):
        if not opts.judge_model and opts.judge_factory is None:
            raise HarvestError(f"oracle {self.entry.name!r} needs --judge-model (and --judge-backend)")

    def config(self, opts: ScoreOptions) -> dict:
        from . import judge

        template = getattr(judge, "JUDGE_TEMPLATE", "")
        return {"model": opts.judge_model, "backend": opts.judge_backend, "samples": opts.judge_samples,
                "options": dict(sorted(opts.judge_options.items())), "template_digest": _digest(str(template)),
                "score": "share of the judge's verdicts saying the final answer matches the gold one"}

    @staticmethod
    def make_backend(opts: ScoreOptions):
        if opts.judge_factory is not None:
            return opts.judge_factory(opts)
        from .backends import make_backend

        return make_backend(opts.judge_backend, model=opts.judge_model, **opts.judge_backend_options)

    def open(self, opts: ScoreOptions, cfg: dict | None = None) -> JudgeSession:
        return JudgeSession(self, opts, cfg if cfg is not None else oracle_config(self.entry.name, opts))

    def score(self, sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
        session = self.open(opts, rec.cfg)
        for part in todo:
            df = pl.read_parquet(part)
            qs = [sp.queries[q] for q in df["query_id"].to_list()]
            cols = session.columns(qs, df["text"].to_list(), [None] * df.height, where=part.name)
            atomic_write_parquet(_with_columns(df, cols), part)
            rec.mark(part)
        return session.summary()


@dataclass
class ScoreResult:
    oracle: str
    status: str             # "scored", "resumed", "skipped" (already scored with this configuration)
    replaced: bool          # the columns existed before and were replaced
    summary: dict


def score_pool(pool: Path, oracles: Sequence[str], opts: ScoreOptions | None = None, *,
               skip_scored: bool = False, engine: Any = None) -> list[ScoreResult]:
    """Add (or replace) oracle columns in every sample file of `pool`. Every oracle is checked against the pool
    before any work starts. `skip_scored` keeps an oracle whose recorded configuration matches and whose columns
    every part has (ttc harvest --oracle on a resumed run). `engine`: None scores in this process (the oracle's own
    `score`); an engine object (harvest/ray_engine.py's RayEngine) scores the parts elsewhere with the same
    sessions, through `engine.score(impl, sp, todo, rec, opts)`, and names itself in the runtime record
    (`engine.record()`); the bookkeeping here (what is done, what is recorded) is the same for both."""
    opts = opts or ScoreOptions()
    oracles = parse_oracles(oracles)
    if not oracles:
        raise HarvestError("no oracle given; choose from " + ", ".join(ORACLES))
    sp = open_pool(pool)
    for o in oracles:
        check_applicable(list(sp.queries.values()), o, opts)
    configs = {o: oracle_config(o, opts) for o in oracles}
    results = []
    for o in oracles:
        cfg = configs[o]
        have = [set(pl.read_parquet_schema(p).names()) >= set(ORACLES[o].columns) for p in sp.parts]
        recorded = (sp.meta.get("oracles") or {}).get(o)
        if skip_scored and all(have) and _comparable(recorded) == _comparable(cfg):
            results.append(ScoreResult(o, "skipped", False, {}))
            continue
        replaced = any(have) and not (sp.meta.get("scoring_in_progress") or {}).get(o)
        t0 = time.monotonic()
        rec = _Recorder(sp, o, cfg)
        todo = [p for p in sp.parts if sp.rel(p) not in rec.done]
        for p in todo:  # a damaged part is one error line here, not a traceback (or wrong scores) later
            verify_file(p)
        impl = implementation(o)
        summary = impl.score(sp, todo, rec, opts) if engine is None else engine.score(impl, sp, todo, rec, opts)
        record = {**cfg, "scored": now(), "seconds": round(time.monotonic() - t0, 3),
                  "versions": library_versions(), "runtime": {**summary, "workers": opts.workers,
                                                              "parts_resumed": rec.resumed,
                                                              **impl.runtime(summary, opts),
                                                              "engine": {"name": "local"} if engine is None
                                                              else engine.record()}}
        rec.finish(record)
        results.append(ScoreResult(o, "resumed" if rec.resumed else "scored", replaced, summary))
    return results


# ---------------------------------------------------------------------------------------------------------------
# Live scoring (`ttc run`): a session per run, one batched call per backend call

# the answer extractor of each task for a score oracle (prm, judge), which extracts none itself: the rule ground truth
# would use for the task (harvest.live.ANSWER_RULES reads answers for gt / sc the same way)
LIVE_ANSWER_RULES = {"math": "gt", "custom": "gt", "lcb-exec": "exec"}


class LiveScorer:
    """`ttc run`'s oracle beyond gt and sc (harvest/run/, harvest.live.BackendSource): an OracleSession opened once
    (the PRM or judge loads here, so a model that cannot load fails before any generation), plus what the policy
    reads from the session's columns. score(queries, responses) -> (Observed per response, {column: values}), one
    oracle call for all of them.

    A ground-truth oracle (exec) gives correctness: the policy sees score 1 / 0 and the graded answers, as replay
    reads `correct` and `answer` from the pool (`--score gt`). A score oracle (prm, judge) gives scores: the policy sees
    `score_column` (score_prm_min, ...) and the final answers extracted as --oracle sc extracts them, written to the
    pool's `answer` column too, so answer-based rules (weighted selection, sc-share) see in replay what they saw
    live."""

    def __init__(self, oracle: str, opts: ScoreOptions, score_column: str, cfg: dict | None = None):
        self.name, self.opts = oracle, opts
        self.impl = implementation(oracle)
        self.cfg = cfg if cfg is not None else oracle_config(oracle, opts)
        self.truth = "gt" in self.impl.entry.gives
        self.score_column = "gt" if self.truth else score_column
        self.extract = {} if self.truth else {rule: implementation(rule) for rule in set(LIVE_ANSWER_RULES.values())}
        self.session = self.impl.open(opts, self.cfg)
        self.calls = 0

    def answer(self, q: Query, text: str | None, finish_reason: str | None) -> str | None:
        if finish_reason == "length":  # ANSWER_RULE: a truncated response has not answered
            return None
        return self.extract[LIVE_ANSWER_RULES.get(q.task, "gt")].answer(text or "")

    def score(self, queries: Sequence[Query], responses: Sequence[Any]) -> tuple[list, dict[str, list]]:
        from ttc.replay.live import Observed

        texts = [r.text for r in responses]
        reasons = [r.finish_reason for r in responses]
        cols = self.session.columns(queries, texts, reasons, where="this round's responses") if responses else \
            {c: [] for c in self.impl.entry.columns}
        self.calls += 1
        if self.truth:
            return [Observed(bool(c), 1.0 if c else 0.0, a, int(r.n_tokens))
                    for c, a, r in zip(cols["correct"], cols["answer"], responses)], cols
        answers = [self.answer(q, t, f) for q, t, f in zip(queries, texts, reasons)]
        scores = cols[self.score_column]
        return ([Observed(False, float(x), a, int(r.n_tokens)) for x, a, r in zip(scores, answers, responses)],
                {"answer": answers, **cols})

    def record(self, seconds: float) -> dict:
        """pool.json's `oracles` entry, as score_pool records one (the configuration, then the runtime keys)."""
        summary = self.session.summary()
        return {**self.cfg, "scored": now(), "seconds": round(seconds, 3), "versions": library_versions(),
                "runtime": {**summary, "workers": self.opts.workers, "parts_resumed": 0,
                            **self.impl.runtime(summary, self.opts),
                            "live": "ttc run: the new responses of each backend call scored in one batched call "
                                    f"({self.calls} calls; counts are this process's)"}}
