"""Oracle columns for an existing pool: which oracle applies to which task, what it needs, and rewriting the sample
files without ever leaving a torn one.

Each oracle owns a fixed set of columns (ORACLE_COLUMNS). Scoring replaces those columns in every part file
(temporary file, then rename) and records the oracle's configuration in pool.json under `oracles`. Progress is
recorded too (`scoring_in_progress`: the configuration and the parts already rewritten), so an interrupted
`ttc score` rerun with the same options skips the finished parts; with other options it starts over.

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

from replay.pool import (SCORE, PoolError, atomic_write_json, atomic_write_parquet, column, remove_stale_temps,
                         sample_files)

from .pipeline import RUNTIME_KEYS, SAMPLE_SCHEMA, HarvestError, library_versions, now, query_from_row, read_meta
from .types import Query

ORACLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gt": ("answer", "correct"),
    "exec": ("answer", "correct"),
    "prm": ("score_prm_min", "score_prm_last", "score_prm_prod", "prm_steps"),
    "judge": ("score_judge",),
}
ORACLE_TASKS: dict[str, tuple[str, ...] | None] = {"gt": ("math",), "exec": ("lcb-exec",), "prm": None,
                                                   "judge": None}
# the oracle columns' types: the pool format's (replay/pool.py), plus prm_steps, a harvest-only column replay ignores
EXTRA_TYPES = {"prm_steps": pl.List(pl.Float64)}
COLUMN_TYPES = {name: EXTRA_TYPES[name] if name in EXTRA_TYPES else column(name).dtype
                for cols in ORACLE_COLUMNS.values() for name in cols}
COLUMN_ORDER = list(SAMPLE_SCHEMA) + list(COLUMN_TYPES)
ANSWER_RULE = "null when no final answer is found or finish_reason == 'length' (truncated)"


@dataclass
class ScoreOptions:
    workers: int | None = None          # processes for math-verify / the code sandbox (None: all cores)
    timeout_s: float | None = None      # per grade: gt 5 s, exec 10 s when None
    memory_mb: int = 512                # exec: address-space limit of each program
    prm_model: str | None = None        # None: harvest.prm.PRM_DEFAULT
    prm_batch_size: int = 8
    prm_step_mode: str = "step"
    prm_dtype: str | None = None
    prm_device: str | None = None
    prm_revision: str | None = None
    prm_max_length: int | None = None
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
        for flag, value in (("--workers", self.workers), ("--memory-mb", self.memory_mb),
                            ("--prm-batch-size", self.prm_batch_size), ("--prm-max-length", self.prm_max_length),
                            ("--judge-samples", self.judge_samples)):
            if value is not None and value < 1:
                raise HarvestError(f"{flag} must be at least 1, got {value}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise HarvestError(f"--timeout must be a positive number of seconds, got {self.timeout_s}")


def parse_oracles(items: Sequence[str] | None) -> list[str]:
    names = []
    for item in items or []:
        for name in str(item).split(","):
            name = name.strip()
            if not name:
                continue
            if name not in ORACLE_COLUMNS:
                raise HarvestError(f"unknown oracle {name!r}; choose from {', '.join(ORACLE_COLUMNS)}")
            if name not in names:
                names.append(name)
    if {"gt", "exec"} <= set(names):
        raise HarvestError("--oracle gt and exec both write 'answer' and 'correct'; a pool takes one of them")
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
    this before generating)."""
    tasks = sorted({q.task for q in queries})
    allowed = ORACLE_TASKS[oracle]
    if allowed is not None:
        wrong = [t for t in tasks if t not in allowed]
        if wrong:
            hint = {"math": "gt", "lcb-exec": "exec"}
            alt = [f"{t}: --oracle {hint[t]}" for t in wrong if t in hint]
            raise HarvestError(f"oracle {oracle!r} grades task {' / '.join(allowed)}, but this pool holds "
                               f"{', '.join(repr(t) for t in wrong)} queries"
                               + (f" (use {'; '.join(alt)})" if alt else "; ground truth exists for math and lcb-exec"))
    if oracle in ("gt", "exec", "judge"):
        nogold = [q.query_id for q in queries if q.gold is None or not str(q.gold).strip()]
        if nogold:
            raise HarvestError(f"oracle {oracle!r} needs gold answers, and {len(nogold)} queries have none "
                               f"(e.g. {nogold[0]!r})")
    if oracle == "exec":
        bad = [q.query_id for q in queries if not q.fields.get("code") or not q.fields.get("input")]
        if bad:
            raise HarvestError(f"oracle 'exec' needs each query's code and input, missing for {len(bad)} queries "
                               f"(e.g. {bad[0]!r})")
    if oracle == "judge" and not opts.judge_model and opts.judge_factory is None:
        raise HarvestError("oracle 'judge' needs --judge-model (and --judge-backend)")


# ---------------------------------------------------------------------------------------------------------------
# Oracle configurations (what pool.json records and what resume compares)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def oracle_config(oracle: str, opts: ScoreOptions) -> dict:
    """The settings that decide an oracle's columns (model, rules, limits), without runtime details."""
    cfg: dict[str, Any] = {"columns": list(ORACLE_COLUMNS[oracle])}
    if oracle == "gt":
        from .oracles import math_answer

        cfg.update({"task": "math", "answer": "normalize_answer(extract_answer(text)); " + ANSWER_RULE,
                    "grader": "harvest.oracles.math_answer.grade_many: math-verify verify(parse(gold), "
                              "parse(answer)), gold first, in worker processes; a timeout counts incorrect",
                    "timeout_s": opts.timeout_s if opts.timeout_s is not None else 5.0,
                    "math_verify": getattr(math_answer, "MATH_VERIFY_VERSION", None)})
    elif oracle == "exec":
        cfg.update({"task": "lcb-exec", "answer": "extract_lcb_answer(text) ([ANSWER] ... [/ANSWER] literal); "
                    + ANSWER_RULE,
                    "grader": "harvest.oracles.code_exec.grade_lcb: the function and the completed assertion in a "
                              "sandboxed process; timeout, memory limit or error counts incorrect",
                    "timeout_s": opts.timeout_s if opts.timeout_s is not None else 10.0,
                    "memory_mb": opts.memory_mb})
    elif oracle == "prm":
        from . import prm

        cfg.update({"model": opts.prm_model or prm.PRM_DEFAULT, "revision": opts.prm_revision,
                    "step_mode": opts.prm_step_mode, "dtype": opts.prm_dtype or "auto (bf16 on CUDA, fp32 on CPU)",
                    "max_length": opts.prm_max_length, "aggregates": {"score_prm_min": "min", "score_prm_last":
                    "last", "score_prm_prod": "product"}, "empty": "a response with no steps scores 0.0",
                    "input": "the query's problem (not the rendered prompt) and the response text"})
    elif oracle == "judge":
        from . import judge

        template = getattr(judge, "JUDGE_TEMPLATE", "")
        cfg.update({"model": opts.judge_model, "backend": opts.judge_backend, "samples": opts.judge_samples,
                    "options": dict(sorted(opts.judge_options.items())),
                    "template_digest": _digest(str(template)),
                    "score": "share of the judge's verdicts saying the final answer matches the gold one"})
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


def _with_columns(df: pl.DataFrame, cols: dict[str, list]) -> pl.DataFrame:
    df = df.drop([c for c in cols if c in df.columns])
    return canonical(df.with_columns([pl.Series(name, values, dtype=COLUMN_TYPES[name])
                                      for name, values in cols.items()]))


def _check_scores(name: str, values: Sequence[float], part: Path):
    """Refuse before writing what the pool format (SCORE) would refuse on load."""
    bad = [v for v in values if not (isinstance(v, (int, float)) and SCORE.lo <= float(v) <= SCORE.hi)]  # NaN too
    if bad:
        raise HarvestError(f"oracle produced {len(bad)} values of {name} outside [{SCORE.lo:g}, {SCORE.hi:g}] or "
                           f"NaN in {part.name} (e.g. {bad[0]!r})")


# ---------------------------------------------------------------------------------------------------------------
# The oracles


def response_answer(oracle: str, text: str | None, finish_reason: str | None) -> str | None:
    """The `answer` an oracle reads from one response ("gt": the normalised boxed / final answer; "exec": the
    [ANSWER] literal); None when there is none or the response was cut at max_tokens (ANSWER_RULE)."""
    if finish_reason == "length":
        return None
    if oracle == "gt":
        from .oracles.math_answer import extract_answer, normalize_answer

        raw = extract_answer(text or "")
        return None if raw is None else normalize_answer(raw)
    from .oracles.code_exec import extract_lcb_answer

    a = extract_lcb_answer(text or "")
    return None if a is None or not a.strip() else a.strip()


def _answers(oracle: str, df: pl.DataFrame) -> list[str | None]:
    fr = df["finish_reason"].to_list() if "finish_reason" in df.columns else [None] * df.height
    return [response_answer(oracle, t, f) for t, f in zip(df["text"].to_list(), fr)]


def _grade_unique(oracle: str, pairs: list[tuple[str, str]], sp: ScoringPool, cfg: dict,
                  opts: ScoreOptions) -> dict[tuple[str, str], bool]:
    if not pairs:
        return {}
    if oracle == "gt":
        from .oracles.math_answer import grade_many

        verdicts = grade_many([a for _, a in pairs], [sp.queries[q].gold for q, _ in pairs], workers=opts.workers,
                              timeout_s=cfg["timeout_s"], progress=opts.progress)
    else:
        from .oracles.code_exec import grade_lcb

        qs = [sp.queries[q] for q, _ in pairs]
        verdicts = grade_lcb([q.fields["code"] for q in qs], [q.fields["input"] for q in qs], [a for _, a in pairs],
                             workers=opts.workers, timeout_s=cfg["timeout_s"], memory_mb=cfg["memory_mb"],
                             progress=opts.progress)
    if len(verdicts) != len(pairs):
        raise HarvestError(f"the {oracle} grader returned {len(verdicts)} verdicts for {len(pairs)} answers")
    return {p: bool(v) for p, v in zip(pairs, verdicts)}


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


def _score_truth(oracle: str, sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
    answers: dict[Path, list] = {}
    qids: dict[Path, list] = {}
    unique: dict[tuple[str, str], None] = {}
    for part in todo:
        df = pl.read_parquet(part, columns=[c for c in ("query_id", "text", "finish_reason")
                                            if c in pl.read_parquet_schema(part)])
        unknown = set(df["query_id"].unique().to_list()) - set(sp.queries)
        if unknown:
            raise HarvestError(f"{part} holds query {min(unknown)!r}, which queries.parquet does not list")
        answers[part] = _answers(oracle, df)
        qids[part] = df["query_id"].to_list()
        for q, a in zip(qids[part], answers[part]):
            if a is not None:
                unique[(q, a)] = None
    verdict = _grade_unique(oracle, list(unique), sp, rec.cfg, opts)
    n = n_valid = n_correct = 0
    for part in todo:
        correct = [a is not None and verdict[(q, a)] for q, a in zip(qids[part], answers[part])]
        df = pl.read_parquet(part)
        atomic_write_parquet(_with_columns(df, {"answer": answers[part], "correct": correct}), part)
        rec.mark(part)
        n += len(correct)
        n_valid += sum(a is not None for a in answers[part])
        n_correct += sum(correct)
    return {"responses": n, "answered": n_valid, "correct": n_correct, "distinct_answers_graded": len(unique)}


def _make_prm(opts: ScoreOptions):
    if opts.prm_factory is not None:
        return opts.prm_factory(opts)
    from .prm import PRM_DEFAULT, PRMScorer

    return PRMScorer(opts.prm_model or PRM_DEFAULT, device=opts.prm_device, dtype=opts.prm_dtype,
                     batch_size=opts.prm_batch_size, step_mode=opts.prm_step_mode, max_length=opts.prm_max_length,
                     revision=opts.prm_revision, progress=opts.progress)


def _score_prm(sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
    from .prm import aggregate

    scorer = _make_prm(opts)
    n = truncated = no_steps = 0
    for part in todo:
        df = pl.read_parquet(part)
        problems = [sp.queries[q].problem for q in df["query_id"].to_list()]
        steps = scorer.score(problems, [t or "" for t in df["text"].to_list()])
        if len(steps) != df.height:
            raise HarvestError(f"the PRM returned {len(steps)} score lists for {df.height} responses")
        agg = [aggregate(s) for s in steps]
        cols = {"score_prm_min": [a["min"] for a in agg], "score_prm_last": [a["last"] for a in agg],
                "score_prm_prod": [a["prod"] for a in agg], "prm_steps": [[float(x) for x in s] for s in steps]}
        for name in ("score_prm_min", "score_prm_last", "score_prm_prod"):
            _check_scores(name, cols[name], part)
        atomic_write_parquet(_with_columns(df, cols), part)
        rec.mark(part)
        stats = getattr(scorer, "stats", {}) or {}
        n += df.height
        truncated += int(stats.get("truncated", 0))
        no_steps += int(stats.get("no_steps", sum(1 for s in steps if not s)))
    info = scorer.info() if hasattr(scorer, "info") else {}
    return {"responses": n, "no_steps": no_steps, "truncated": truncated, "scorer": info}


def _make_judge_backend(opts: ScoreOptions):
    if opts.judge_factory is not None:
        return opts.judge_factory(opts)
    from .backends import make_backend

    return make_backend(opts.judge_backend, model=opts.judge_model, **opts.judge_backend_options)


def _score_judge(sp: ScoringPool, todo: list[Path], rec: _Recorder, opts: ScoreOptions) -> dict:
    from .judge import judge_details

    backend = _make_judge_backend(opts)
    n = unparseable = 0
    for part in todo:
        df = pl.read_parquet(part)
        qs = [sp.queries[q] for q in df["query_id"].to_list()]
        res = judge_details(backend, [q.problem for q in qs], [q.gold for q in qs],
                            [t or "" for t in df["text"].to_list()], samples=opts.judge_samples, **opts.judge_options)
        if len(res.scores) != df.height:
            raise HarvestError(f"the judge returned {len(res.scores)} scores for {df.height} responses")
        scores = [float(s) for s in res.scores]
        _check_scores("score_judge", scores, part)
        atomic_write_parquet(_with_columns(df, {"score_judge": scores}), part)
        rec.mark(part)
        n += df.height
        unparseable += res.n_unparseable
    info = backend.info() if hasattr(backend, "info") else {}
    return {"responses": n, "verdicts": n * opts.judge_samples, "unparseable_verdicts": unparseable,
            "backend": info}


@dataclass
class ScoreResult:
    oracle: str
    status: str             # "scored", "resumed", "skipped" (already scored with this configuration)
    replaced: bool          # the columns existed before and were replaced
    summary: dict


def score_pool(pool: Path, oracles: Sequence[str], opts: ScoreOptions | None = None, *,
               skip_scored: bool = False) -> list[ScoreResult]:
    """Add (or replace) oracle columns in every sample file of `pool`. Every oracle is checked against the pool
    before any work starts. `skip_scored` keeps an oracle whose recorded configuration matches and whose columns
    every part has (ttc harvest --oracle on a resumed run)."""
    opts = opts or ScoreOptions()
    oracles = parse_oracles(oracles)
    if not oracles:
        raise HarvestError("no oracle given; choose from " + ", ".join(ORACLE_COLUMNS))
    sp = open_pool(pool)
    for o in oracles:
        check_applicable(list(sp.queries.values()), o, opts)
    configs = {o: oracle_config(o, opts) for o in oracles}
    results = []
    for o in oracles:
        cfg = configs[o]
        have = [set(pl.read_parquet_schema(p).names()) >= set(ORACLE_COLUMNS[o]) for p in sp.parts]
        recorded = (sp.meta.get("oracles") or {}).get(o)
        if skip_scored and all(have) and _comparable(recorded) == _comparable(cfg):
            results.append(ScoreResult(o, "skipped", False, {}))
            continue
        replaced = any(have) and not (sp.meta.get("scoring_in_progress") or {}).get(o)
        t0 = time.monotonic()
        rec = _Recorder(sp, o, cfg)
        todo = [p for p in sp.parts if sp.rel(p) not in rec.done]
        if o in ("gt", "exec"):
            summary = _score_truth(o, sp, todo, rec, opts)
        elif o == "prm":
            summary = _score_prm(sp, todo, rec, opts)
        else:
            summary = _score_judge(sp, todo, rec, opts)
        record = {**cfg, "scored": now(), "seconds": round(time.monotonic() - t0, 3),
                  "versions": library_versions(), "runtime": {**summary, "workers": opts.workers,
                                                              "parts_resumed": rec.resumed}}
        if o == "prm":
            record["runtime"]["device"] = (summary.get("scorer") or {}).get("device")
            record["runtime"]["batch_size"] = opts.prm_batch_size
        rec.finish(record)
        results.append(ScoreResult(o, "resumed" if rec.resumed else "scored", replaced, summary))
    return results
