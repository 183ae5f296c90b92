"""Pools on disk: loading, validation and the flat arrays the kernels read.

A pool is a directory with samples.parquet (or samples/*.parquet), optional queries.parquet and pool.json;
README.md ("Pool format") is the contract. Every problem is reported as a PoolError naming the file, the
column and what is wrong, so the command line can print it without a traceback.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from .rng import query_keys

REQUIRED = ("query_id", "sample_idx")
from .data import DEFAULT_POOL  # noqa: E402  (the embedded default pool, wherever ttc is installed)


class PoolError(ValueError):
    """A pool that cannot be replayed faithfully; the message says exactly why."""


@dataclass
class Pool:
    path: Path
    query_ids: list
    off: np.ndarray
    correct: np.ndarray  # int8 0/1 (zeros when the pool has no ground truth)
    score: np.ndarray
    ans: np.ndarray  # per-query answer id, -1 = invalid / no answer
    tok: np.ndarray
    score_name: str
    has_gt: bool
    has_answers: bool
    has_tokens: bool
    meta: dict = field(default_factory=dict)
    score_columns: list = field(default_factory=list)

    @classmethod
    def from_arrays(cls, off, correct=None, score=None, ans=None, tok=None, query_ids=None, name="in-memory"):
        """A pool built in memory (tests, synthetic pools); arrays are per response, grouped by query."""
        off = np.ascontiguousarray(off, np.int64)
        total = int(off[-1])
        n = len(off) - 1
        has_gt = correct is not None
        correct = np.zeros(total, np.int8) if correct is None else np.ascontiguousarray(correct, np.int8)
        score_name = "gt" if score is None else "score"
        score = correct.astype(np.float64) if score is None else np.ascontiguousarray(score, np.float64)
        if ans is not None:  # the engine gives each query one answer slot per id: ids are small per query
            ans = np.ascontiguousarray(ans, np.int64)
            if len(ans) and ((ans < -1).any() or (ans >= np.repeat(np.diff(off), np.diff(off))).any()):
                raise PoolError("answer ids must be -1 (no answer) or 0 .. k-1 within a query of k responses")
        return cls(path=Path(name), query_ids=list(query_ids) if query_ids is not None else
                   [f"q{i:06d}" for i in range(n)], off=off, correct=correct, score=score,
                   ans=np.full(total, -1, np.int64) if ans is None else ans,
                   tok=np.zeros(total, np.int64) if tok is None else np.ascontiguousarray(tok, np.int64),
                   score_name=score_name, has_gt=has_gt, has_answers=ans is not None, has_tokens=tok is not None,
                   meta={"name": name})

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.off)

    @property
    def qkeys(self) -> np.ndarray:
        if "_qkeys" not in self.__dict__:
            self.__dict__["_qkeys"] = query_keys(self.query_ids)
        return self.__dict__["_qkeys"]

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.path.name


def sample_files(path: Path) -> list[Path]:
    if not path.exists():
        raise PoolError(f"pool directory {path} does not exist")
    if not path.is_dir():
        raise PoolError(f"{path} is not a directory (a pool is a directory holding samples.parquet)")
    single = path / "samples.parquet"
    many = sorted((path / "samples").glob("*.parquet")) if (path / "samples").is_dir() else []
    if single.exists() and many:
        raise PoolError(f"{path} has both samples.parquet and samples/*.parquet; keep one")
    if single.exists():
        return [single]
    if many:
        return many
    raise PoolError(f"{path} holds no samples.parquet and no samples/*.parquet")


def resolve_score(schema_names, score: str) -> str:
    """'gt' or a score column, named in full (score_prm) or without the prefix (prm)."""
    cols = [c for c in schema_names if c.startswith("score_")]
    if score == "gt":
        if "correct" not in schema_names:
            raise PoolError("--score gt needs a 'correct' column (ground truth), and this pool has none; "
                            f"score columns here: {', '.join(cols) or 'none'}")
        return "gt"
    name = score if score.startswith("score_") else f"score_{score}"
    if name not in cols:
        raise PoolError(f"score column '{score}' does not exist; available: {', '.join(cols) or 'none'}"
                        + (" and gt" if "correct" in schema_names else ""))
    return name


def write_pool(out: Path, samples: pl.DataFrame, meta: dict, queries: pl.DataFrame | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    samples.write_parquet(out / "samples.parquet", compression="zstd", statistics=True)
    if queries is not None:
        queries.write_parquet(out / "queries.parquet", compression="zstd")
    (out / "pool.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _fail(where: str, msg: str):
    raise PoolError(f"{where}: {msg}")


def load_pool(path, score: str = "gt", need_tokens: bool = False) -> Pool:
    """Read and validate a pool; only the columns a replay needs are read."""
    path = Path(path)
    files = sample_files(path)
    where = "samples.parquet" if files[0].name == "samples.parquet" else "samples/*.parquet"
    schema = None
    for f in files:
        try:
            this = pl.read_parquet_schema(f)
        except Exception as e:  # not Parquet, truncated, unreadable
            which = "" if len(files) == 1 and where == "samples.parquet" else f" {f.relative_to(path)}"
            _fail(where, f"cannot read{which} as Parquet ({str(e).splitlines()[0]})")
        if schema is None:
            schema, first = this, f
            continue
        for col, dtype in schema.items():
            if col not in this:
                _fail(where, f"{f.relative_to(path)} lacks column '{col}' that {first.relative_to(path)} has")
            if this[col] != dtype:
                _fail(where, f"column '{col}' is {this[col]} in {f.relative_to(path)} but {dtype} in "
                             f"{first.relative_to(path)}")
        extra = [c for c in this if c not in schema]
        if extra:
            _fail(where, f"{f.relative_to(path)} has column '{extra[0]}' that {first.relative_to(path)} lacks")
    schema = pl.Schema(schema)
    names = schema.names()
    for col in REQUIRED:
        if col not in names:
            _fail(where, f"missing required column '{col}' (columns: {', '.join(names)})")
    score_col = resolve_score(names, score)
    has_answers = "answer" in names
    has_tokens = "n_tokens" in names
    if need_tokens and not has_tokens:
        _fail(where, "a token budget needs an 'n_tokens' column, and this pool has none")
    cols = list(REQUIRED) + [c for c in ("correct", "answer", "n_tokens") if c in names]
    if score_col != "gt":
        cols.append(score_col)
    try:
        df = pl.scan_parquet(files).select(cols).collect()
    except Exception as e:
        _fail(where, f"cannot read the columns {', '.join(cols)} ({str(e).splitlines()[0]})")
    if df.height == 0:
        _fail(where, "no rows")

    if df["query_id"].dtype != pl.String:
        _fail(where, f"column 'query_id' must be a string, found {df['query_id'].dtype}")
    if not df["sample_idx"].dtype.is_integer():
        _fail(where, f"column 'sample_idx' must be an integer, found {df['sample_idx'].dtype}")
    for col in REQUIRED:
        nulls = df[col].null_count()
        if nulls:
            _fail(where, f"column '{col}' has {nulls} null values")
    dup = df.select(pl.struct("query_id", "sample_idx").is_duplicated().sum()).item()
    if dup:
        ex = df.filter(pl.struct("query_id", "sample_idx").is_duplicated()).row(0, named=True)
        _fail(where, f"{dup} rows share a (query_id, sample_idx), e.g. ({ex['query_id']!r}, {ex['sample_idx']})")

    has_gt = False
    if "correct" in names:
        c = df["correct"]
        if c.dtype != pl.Boolean:
            if not c.dtype.is_integer() or not c.drop_nulls().is_in([0, 1]).all():
                _fail(where, f"column 'correct' must be boolean (or 0/1), found {c.dtype}")
        nulls = c.null_count()
        if 0 < nulls < df.height:
            _fail(where, f"column 'correct' has {nulls} null values out of {df.height}: ground truth must be "
                         "complete (or entirely null for a pool without it)")
        has_gt = nulls == 0
    if score_col == "gt" and not has_gt:
        _fail(where, "--score gt needs ground truth, but column 'correct' is entirely null")
    if score_col != "gt":
        s = df[score_col]
        if not s.dtype.is_numeric():
            _fail(where, f"column '{score_col}' must be a float, found {s.dtype}")
        s = s.cast(pl.Float64)
        bad_null = s.null_count()
        bad_nan = int(s.is_nan().sum() or 0)
        if bad_null or bad_nan:
            _fail(where, f"column '{score_col}' has {bad_null} null and {bad_nan} NaN values; scores must be "
                         "numbers in [0, 1]")
        lo, hi = s.min(), s.max()
        if lo < 0 or hi > 1:
            _fail(where, f"column '{score_col}' has values outside [0, 1] (min {lo}, max {hi})")
    if has_answers and df["answer"].dtype != pl.String:
        _fail(where, f"column 'answer' must be a string (null = invalid), found {df['answer'].dtype}")
    if has_tokens:
        t = df["n_tokens"]
        if not t.dtype.is_integer():
            _fail(where, f"column 'n_tokens' must be an integer, found {t.dtype}")
        if need_tokens and t.null_count():
            _fail(where, f"column 'n_tokens' has {t.null_count()} null values; a token budget needs them all")
        if (t.min() or 0) < 0:
            _fail(where, "column 'n_tokens' has negative values")

    df = df.sort("query_id", "sample_idx")
    qids = df["query_id"].unique(maintain_order=True)
    sizes = df.group_by("query_id", maintain_order=True).len()["len"].to_numpy()
    off = np.zeros(len(qids) + 1, np.int64)
    np.cumsum(sizes, out=off[1:])

    queries_file = path / "queries.parquet"
    if queries_file.exists():
        try:
            q = pl.read_parquet(queries_file, columns=["query_id"])["query_id"]
        except Exception as e:
            _fail("queries.parquet", f"cannot read a 'query_id' column ({str(e).splitlines()[0]})")
        if q.null_count():
            _fail("queries.parquet", f"column 'query_id' has {q.null_count()} null values")
        if q.is_duplicated().any():
            _fail("queries.parquet", f"query_id {q.filter(q.is_duplicated())[0]!r} is listed more than once")
        listed = set(q.to_list())
        have = set(qids.to_list())
        empty = sorted(listed - have)
        if empty:
            _fail("queries.parquet", f"{len(empty)} queries have no samples, e.g. {empty[0]!r}")
        extra = sorted(have - listed)
        if extra:
            _fail("queries.parquet", f"{len(extra)} query_ids in the samples are not listed, e.g. {extra[0]!r}")

    meta = {}
    if (path / "pool.json").exists():
        try:
            meta = json.loads((path / "pool.json").read_text())
        except json.JSONDecodeError as e:
            _fail("pool.json", f"not valid JSON ({e})")
        if not isinstance(meta, dict):
            _fail("pool.json", f"must hold a JSON object (provenance fields), found {type(meta).__name__}")

    correct = (df["correct"].cast(pl.Int8).to_numpy() if has_gt else np.zeros(df.height, np.int8))
    if score_col == "gt":
        score = correct.astype(np.float64)
    else:
        score = df[score_col].cast(pl.Float64).to_numpy().copy()
    if has_answers:
        ans = (df.select((pl.col("answer").rank("dense").over("query_id") - 1).fill_null(-1).cast(pl.Int64))
               .to_series().to_numpy())
    else:
        ans = np.full(df.height, -1, np.int64)
    tok = (df["n_tokens"].fill_null(0).cast(pl.Int64).to_numpy() if has_tokens else np.zeros(df.height, np.int64))
    return Pool(path=path, query_ids=qids.to_list(), off=off, correct=np.ascontiguousarray(correct, np.int8),
                score=np.ascontiguousarray(score, np.float64), ans=np.ascontiguousarray(ans, np.int64),
                tok=np.ascontiguousarray(tok, np.int64), score_name=score_col, has_gt=has_gt,
                has_answers=has_answers, has_tokens=has_tokens, meta=meta,
                score_columns=[c for c in names if c.startswith("score_")])
