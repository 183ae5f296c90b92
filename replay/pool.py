"""The pool format: the one contract between the phase that produces pools (harvest/: generation, scoring,
imports) and the phase that consumes them (replay/).

A pool is a directory with samples.parquet (or samples/*.parquet), optional queries.parquet and pool.json. This
module holds the whole contract: the columns of the sample files (SAMPLE_COLUMNS and SCORE, which the loader's
validation reads and README.md "Pool format" describes), the loader and validator (load_pool), and the one writer
(write_pool for a whole pool, atomic_write_parquet / atomic_write_json for files of a pool that grows in place):
every file is written under a temporary name in its destination directory, flushed to disk and renamed, so no
reader ever sees a torn pool. Every problem is reported as a PoolError naming the file, the column and what is
wrong, so the command line can print it without a traceback. It never imports harvest/.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import polars as pl

# re-exported (`from ttc.replay.pool import DEFAULT_POOL`): the embedded default pool, wherever ttc is installed
from .data import DEFAULT_POOL as DEFAULT_POOL  # noqa: E402
from .errors import InputError, note
from .outputs import atomic_dir, atomic_file, tmp_name, write_errors  # noqa: F401


class PoolError(InputError):
    """A pool that cannot be replayed faithfully, or an option that cannot apply to it; the message says exactly why.
    A UserError (replay/errors.py), and a ValueError for callers that catch that."""


# ---------------------------------------------------------------------------------------------------------------
# The columns of samples.parquet


@dataclass(frozen=True)
class Column:
    """One column of the sample files. `dtype` is the type writers give it; `accepts` is what the loader takes
    (wider: any integer width, 0/1 integers for a boolean, any numeric type for a score); `expect` names it in
    errors; `nulls`: "never", "all or none" (ground truth is complete or absent) or "allowed"; `lo` / `hi`: the
    range of its values; `read`: False for columns replay ignores (documented so that writers agree on them)."""

    name: str
    dtype: pl.DataType
    accepts: str
    expect: str
    meaning: str
    required: bool = False
    nulls: str = "allowed"
    lo: float | None = None
    hi: float | None = None
    read: bool = True


SAMPLE_COLUMNS: dict[str, Column] = {c.name: c for c in (
    Column("query_id", pl.String, "string", "a string", "the query a response answers", required=True,
           nulls="never"),
    Column("sample_idx", pl.Int64, "integer", "an integer", "order of generation; unique within a query",
           required=True, nulls="never"),
    Column("correct", pl.Boolean, "boolean", "boolean (or 0/1)", "ground truth; all present or all null",
           nulls="all or none"),
    Column("answer", pl.String, "string", "a string (null = invalid)",
           "normalised final answer (null = invalid / no answer); used by self-consistency and entropy"),
    Column("n_tokens", pl.Int64, "integer", "an integer", "response length in tokens; needed for token budgets",
           lo=0),
    Column("text", pl.String, "string", "a string", "the response text (oracles score it); ignored by replay",
           read=False),
    Column("finish_reason", pl.String, "string", "a string",
           "why generation stopped ('stop', 'length': cut at max_tokens); ignored by replay", read=False),
    Column("conf_lows_pos", pl.List(pl.Int64), "list of integers", "a list of integers",
           "the record lows of the response's group confidence (`ttc harvest --confidence group-lows`): the token "
           "positions where it falls below every earlier value, increasing, each < n_tokens; read only by "
           "deepconf-online", lo=0),
    Column("conf_lows", pl.List(pl.Float64), "list of numbers", "a list of floats",
           "the group confidences at those positions (strictly decreasing, as many as positions); read only by "
           "deepconf-online"),
    Column("probe_answer", pl.List(pl.String), "list of strings", "a list of strings",
           "the answer the response gave when probed part-way (`ttc import autotts`: asked for its answer every "
           "probe_freq tokens), in order; a null item = no answer extracted; read only by depth policies"),
    Column("probe_tokens", pl.List(pl.Int64), "list of integers", "a list of integers",
           "the token offset of each probe (500, 1000, ...), strictly increasing, as many as probe_answer; the last "
           "may pass n_tokens by less than one spacing (the source probes on its own count); read only by depth "
           "policies", lo=1),
    Column("probe_correct", pl.List(pl.Boolean), "list of booleans", "a list of booleans",
           "each probe answer graded against the gold answer as `correct` grades the final one (null where "
           "probe_answer is null); read only by depth policies"),
)}
LOWS = ("conf_lows_pos", "conf_lows")  # deepconf-online's columns: both or neither, loaded only when asked for
PROBES = ("probe_answer", "probe_tokens", "probe_correct")  # depth's columns: all or none, loaded only when asked for
SCORE_PREFIX = "score_"
SCORE = Column("score_<oracle>", pl.Float64, "number", "a float",
               "a reward oracle's score (score_prm_min, score_judge, ...); any number of them, each validated on "
               "load", nulls="never", lo=0.0, hi=1.0)
REQUIRED = tuple(name for name, c in SAMPLE_COLUMNS.items() if c.required)


def is_score(name: str) -> bool:
    return name.startswith(SCORE_PREFIX) and len(name) > len(SCORE_PREFIX)


def column(name: str) -> Column:
    """The contract of one column (SCORE for any score_<oracle>); a PoolError for a name the format does not
    define (writers may add such columns, but then they say their type themselves)."""
    if name in SAMPLE_COLUMNS:
        return SAMPLE_COLUMNS[name]
    if is_score(name):
        return SCORE
    raise PoolError(f"column '{name}' is not part of the pool format (columns: {', '.join(SAMPLE_COLUMNS)}, "
                    f"{SCORE.name})")


def samples_frame(data: dict | list) -> pl.DataFrame:
    """A sample table typed as the contract says, from columns (a dict of lists, arrays or Series) or rows (a list
    of dicts); a column that happens to be all null (no answer parsed anywhere) keeps its type."""
    names = list(data) if isinstance(data, dict) else (list(data[0]) if data else [])
    return pl.DataFrame(data, schema={c: column(c).dtype for c in names})


def _accepts(c: Column, dtype: pl.DataType) -> bool:
    if c.accepts == "string":
        return dtype == pl.String
    if c.accepts == "integer":
        return dtype.is_integer()
    if c.accepts == "boolean":  # integers are checked for 0/1 once read
        return dtype == pl.Boolean or dtype.is_integer()
    if c.accepts.startswith("list of "):
        inner = getattr(dtype, "inner", None)
        if not isinstance(dtype, pl.List) or inner is None:
            return False
        return {"list of integers": inner.is_integer(), "list of strings": inner == pl.String,
                "list of booleans": inner == pl.Boolean}.get(c.accepts, inner.is_numeric())
    return dtype.is_numeric()


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
    prior: np.ndarray | None = None  # per-query predicted success probability (load_pool's prior=), None: none
    side: np.ndarray | None = None  # per-response side signal in [0, 1] (side-eb; load_pool's side=), None: none
    # deepconf-online's record lows (load_pool's lows=): (loff, lpos, lval), response j's lows being lpos / lval
    # [loff[j] .. loff[j + 1]); None: not loaded. has_lows: the sample files hold the columns (loaded or not)
    lows: tuple | None = None
    has_lows: bool = False
    # a convention of some sources (with_invalid_votes): each query's invalid answers form one more answer category
    invalid_votes: bool = False
    # the probes of each response (load_pool's probes=True; None: not loaded): response j's probes are
    # probe_tok / probe_ans / probe_ok[probe_off[j] .. probe_off[j + 1]]; probe_ans in the coding of `ans`, a probe
    # answer that no final answer of its query has coded after them (so it may reach k or more: check_probes)
    probe_off: np.ndarray | None = None
    probe_tok: np.ndarray | None = None
    probe_ans: np.ndarray | None = None
    probe_ok: np.ndarray | None = None
    has_probes: bool = False

    def with_invalid_votes(self) -> "Pool":
        """This pool with each query's invalid answers (-1) as one answer category of their own, after its valid
        ones: the convention of sources that vote whatever the extractor returned, a failed extraction included
        (Adaptive-Consistency's stopping criteria count `Counter(answers)`), where the engine's own lets an invalid
        answer agree with nothing (docs/semantics.md, "Invalid answers"). Every rule, policy and selection then
        counts them as an answer: they can lead, stop a query and be selected (a selected invalid answer is as
        correct as its response). A pool without answers is returned as it is."""
        if not self.has_answers or self.invalid_votes:
            return self
        sizes = self.sizes
        q = np.repeat(np.arange(len(sizes)), sizes)
        top = np.full(len(sizes), -1, np.int64)  # each query's largest valid id: ids are dense from 0
        np.maximum.at(top, q, self.ans)
        # (a loaded pool's ids are dense ranks, so a query of k responses with an invalid one gets id <= k - 1)
        ans = np.where(self.ans < 0, (top + 1)[q], self.ans)
        extra = {}
        if self.probe_ans is not None:  # the invalid category takes id top + 1: probe-only answers move up by one
            pq = np.repeat(q, np.diff(self.probe_off))
            pa = self.probe_ans
            extra["probe_ans"] = np.ascontiguousarray(
                np.where(pa < 0, (top + 1)[pq], np.where(pa > top[pq], pa + 1, pa)), np.int64)
        return replace(self, ans=np.ascontiguousarray(ans, np.int64), invalid_votes=True, **extra)

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
            from .rng import query_keys  # numba: only replay needs it, not every writer of pools

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
    files = [single] if single.exists() else many
    for f in files:  # a FIFO would block the reader forever: refused here, before anything reads it
        regular_file(f)
    if files:
        return files
    raise PoolError(f"{path} holds no samples.parquet and no samples/*.parquet")


def sample_columns(path: Path) -> list[str]:
    """The column names of a pool's (first) sample file, for a command that chooses what to load from them; a file
    that is not Parquet (truncated, damaged, a FIFO) is a PoolError naming it, as in load_pool."""
    f = sample_files(Path(path))[0]
    regular_file(f)
    with _decoding(f):
        return pl.read_parquet_schema(f).names()


def resolve_score(schema_names, score: str) -> str:
    """'gt' or a score column, named in full (score_prm) or without the prefix (prm)."""
    cols = [c for c in schema_names if is_score(c)]
    if score == "gt":
        if "correct" not in schema_names:
            raise PoolError("--score gt needs a 'correct' column (ground truth), and this pool has none; "
                            f"score columns here: {', '.join(cols) or 'none'}")
        return "gt"
    name = score if score.startswith(SCORE_PREFIX) else f"{SCORE_PREFIX}{score}"
    if name not in cols:
        raise PoolError(f"score column '{score}' does not exist; available: {', '.join(cols) or 'none'}"
                        + (" and gt" if "correct" in schema_names else ""))
    return name


# ---------------------------------------------------------------------------------------------------------------
# Writing: the one writer of pool files


DIGEST_KEY = "ttc.digest"  # parquet key-value metadata: frame_digest of the file's content, set by the writers
# and the digest of each column on its own (JSON {column: digest}), so that a load checks only the columns it reads
COLUMNS_KEY = "ttc.digest.columns"


def _column_parts(col: pl.Series) -> Iterator[bytes]:
    """The bytes a column enters the digests with: its name, its nulls, its values (module docs of frame_digest)."""
    yield b"\0col\0" + col.name.encode("utf-8") + b"\0"
    yield np.packbits(col.is_null().to_numpy()).tobytes()
    # (a hash of pieces is the hash of their concatenation: buffers are fed as they are, without copies)
    if col.dtype == pl.String:
        filled = col.fill_null("")
        yield b"s"
        yield memoryview(np.ascontiguousarray(filled.str.len_bytes().to_numpy(), "<u4")).cast("B")
        # the concatenation in Rust: the same bytes as "".join(values), without a Python string per value
        yield (filled.str.join("").item() if len(filled) else "").encode("utf-8")
    elif col.dtype.is_numeric() or col.dtype == pl.Boolean:
        arr = col.fill_null(0).to_numpy()
        yield b"n"
        yield memoryview(np.ascontiguousarray(arr, arr.dtype.newbyteorder("<"))).cast("B")
    else:
        yield b"o" + repr(col.to_list()).encode("utf-8")


def _digests(df: pl.DataFrame, names=None) -> tuple[str, dict[str, str]]:
    """frame_digest of the whole frame and the digest of each column in `names` (all: None), in one pass."""
    whole = hashlib.blake2b(digest_size=16) if names is None else None
    height = str(df.height).encode()
    if whole is not None:
        whole.update(height)
    per = {}
    for name in df.columns if names is None else names:
        h = hashlib.blake2b(digest_size=16)
        h.update(height)
        for part in _column_parts(df[name]):
            h.update(part)
            if whole is not None:
                whole.update(part)
        per[name] = h.hexdigest()
    return (whole.hexdigest() if whole is not None else ""), per


def frame_digest(df: pl.DataFrame) -> str:
    """A digest of a frame's values (column names, nulls, values in row order), written into every pool file's
    metadata and checked by verify_file: 129 of 203 single-bit flips tried in a part file decoded silently to
    different values, so a checksum is the only way to notice them. Defined on decoded values, not on bytes, so it
    does not depend on the writer's compression or on the library version; the type enters only as one of
    string / number / other, so a renamed dtype does not change it."""
    return _digests(df)[0]


def column_digests(df: pl.DataFrame, names=None) -> dict[str, str]:
    """Each column's own digest (the row count, then what frame_digest hashes of that column): written beside
    frame_digest (COLUMNS_KEY) so that load_pool checks the columns it reads without reading the others (a
    pool's text column is most of its bytes)."""
    return _digests(df, list(df.columns if names is None else names))[1]


def write_parquet_file(df: pl.DataFrame, path: Path):
    """The one way a pool file's bytes are written: zstd, statistics, and the digests of its content (the whole
    file's and each column's)."""
    whole, per = _digests(df)
    df.write_parquet(path, compression="zstd", statistics=True,
                     metadata={DIGEST_KEY: whole, COLUMNS_KEY: json.dumps(per, separators=(",", ":"))})


def _damaged(path: Path, e: BaseException | None = None) -> PoolError:
    if e is None:
        return PoolError(f"{path} is damaged: its content does not match the checksum written with it (a flipped "
                         "bit or a bad copy); restore it or regenerate it")
    first = (str(e).splitlines() or [type(e).__name__])[0][:200]
    return PoolError(f"{path} is damaged: it does not decode as parquet ({first})")


@contextmanager
def _rust_panics_quiet() -> Iterator[None]:
    """Rust's panic hook writes its message (and, with RUST_BACKTRACE, a backtrace) straight to descriptor 2 before
    the panic reaches Python as an exception: while a file is decoded, descriptor 2 points at /dev/null, so a damaged
    file ends in the one error line _decoding makes (the panic's first line is in it)."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def _decoding(path: Path) -> Iterator[None]:
    """Any failure to decode `path` as a PoolError naming it: a damaged file can make polars panic, and pyo3's
    PanicException is a BaseException, which no `except Exception` sees."""
    try:
        with _rust_panics_quiet():
            yield
    except (KeyboardInterrupt, SystemExit, MemoryError, PoolError):
        raise
    except BaseException as e:  # noqa: B036
        raise _damaged(path, e) from None


def regular_file(path: Path):
    """A sample file must be a regular file: a FIFO or a device would block the reader forever or feed it
    anything (issue 27)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise PoolError(f"cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise PoolError(f"{path} is not a regular file (a FIFO, a device or a socket); a pool's files are plain "
                        "Parquet files")


def verify_file(path: Path) -> pl.DataFrame:
    """Read a pool file whole and check it against the digest written with it: a file that does not decode, or
    decodes to other values than were written (a flipped bit, a truncated copy), is a PoolError naming it. Files
    written before digests existed are read unchecked. Returns the frame, so a caller that reads anyway pays once."""
    path = Path(path)
    regular_file(path)
    with _decoding(path):
        want = pl.read_parquet_metadata(path).get(DIGEST_KEY)
        df = pl.read_parquet(path)
    if want is not None and frame_digest(df) != want:
        raise _damaged(path)
    return df


_NOTED: set = set()  # pools already noted as carrying no checksum in this process


def read_checked(files: list[Path], columns: list[str], pool: Path | None = None,
                 note: list | None = None) -> pl.DataFrame:
    """`columns` of the sample files, concatenated in file order, each file checked against the checksums its
    writer embedded: the per-column digests of the columns read (COLUMNS_KEY), or, for a file written before those
    existed, the whole file's (DIGEST_KEY, which means reading every column). A mismatch or any decode failure is
    a PoolError naming the file. Files with no checksum at all (written outside ttc) are read unchecked, with one
    note on stderr per pool and process (note_unchecked; given a list `note`, they are added to it instead, for a
    caller that notes them only once the pool is found valid)."""
    frames, unchecked = [], []
    for f in files:
        regular_file(f)
        with _decoding(f):
            meta = pl.read_parquet_metadata(f)
            per, whole = meta.get(COLUMNS_KEY), meta.get(DIGEST_KEY)
            if per is not None:
                names = pl.read_parquet_schema(f).names()
                df = pl.read_parquet(f, columns=columns)
            elif whole is not None:
                full = pl.read_parquet(f)
                df = full.select(columns)
            else:
                df = pl.read_parquet(f, columns=columns)
        if per is not None:
            try:
                want = json.loads(per)
            except ValueError:
                raise _damaged(f) from None
            # the names too: a flipped bit in the schema renamed 'answer' once, and the pool loaded without answers
            if (not isinstance(want, dict) or sorted(want) != sorted(names)
                    or column_digests(df) != {c: want.get(c) for c in columns}):
                raise _damaged(f)
        elif whole is not None:
            if frame_digest(full) != whole:
                raise _damaged(f)
            del full
        else:
            unchecked.append(f)
        frames.append(df)
    if note is None:
        note_unchecked(unchecked, pool)
    else:
        note += unchecked
    return frames[0] if len(frames) == 1 else pl.concat(frames)


def note_unchecked(files: list[Path], pool: Path | None = None):
    """One line on stderr, once per pool and process, for files read without a checksum to check."""
    if not files:
        return
    key = str(pool if pool is not None else files[0])
    if key in _NOTED:
        return
    _NOTED.add(key)
    where = files[0] if len(files) == 1 else f"{len(files)} files of {key}"
    note(f"note: {where} carries no ttc checksum (written outside ttc); its content is read unchecked")


def atomic_write_parquet(df: pl.DataFrame, path: Path, before_rename: Callable[[], None] | None = None):
    """Write to a hidden temporary file in the same directory, flush it to disk, then rename over `path`:
    readers (and a resumed run) see the old file or the whole new one, never a torn one (outputs.atomic_file)."""
    with atomic_file(path) as tmp:
        write_parquet_file(df, tmp)
        if before_rename is not None:
            before_rename()


def atomic_write_json(obj: Any, path: Path):
    """pool.json (or any JSON file of a pool) the same way: the old content or the whole new one."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def remove_stale_temps(directory: Path) -> int:
    """Temporary files (and pool directories) a killed writer left behind: never renamed, so never part of a
    pool."""
    n = 0
    directory = Path(directory)
    if directory.is_dir():
        for p in directory.glob(".*.tmp-*"):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            n += 1
    return n


@contextmanager
def new_pool_dir(out: Path) -> Iterator[Path]:
    """Build a new pool in a hidden temporary directory beside `out` (the block writes into the directory it is
    given); when the block ends without an error, every file in it is flushed to disk and the directory renamed to
    `out` in one step, so `out` never holds part of a pool. Any error, Ctrl-C included, removes the temporary
    directory and leaves `out` as it was. `out` must not exist, or be an empty directory."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PoolError(f"{out} exists and is not an empty directory; a pool is written only to a new one")
    with atomic_dir(out, None) as tmp:
        yield tmp


def write_pool(out: Path, samples: pl.DataFrame, meta: dict, queries: pl.DataFrame | None = None,
               check: Callable[[Path], Any] | None = None) -> Path:
    """Write a whole pool (samples.parquet, queries.parquet when given, pool.json) to the new directory `out`,
    atomically (new_pool_dir). `check` (e.g. load_pool) runs on the finished pool before the rename: if it
    raises, nothing is left behind."""
    with new_pool_dir(out) as tmp:
        with write_errors(out):
            write_parquet_file(samples, tmp / "samples.parquet")
            if queries is not None:
                write_parquet_file(queries, tmp / "queries.parquet")
            (tmp / "pool.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
        if check is not None:
            check(tmp)
    return Path(out)


# ---------------------------------------------------------------------------------------------------------------
# Loading


def _fail(where: str, msg: str):
    raise PoolError(f"{where}: {msg}")


def _check_scores(files: list[Path], scores: list[str], where: str):
    """Every score column, selected or not, holds numbers in [SCORE.lo, SCORE.hi] with no null or NaN: one pass
    over the files computing four numbers per column, so the columns a run does not use are never held in memory."""
    if not scores:
        return
    exprs = []
    for c in scores:
        x = pl.col(c).cast(pl.Float64)
        exprs += [x.null_count().alias(f"{c}/null"), x.is_nan().sum().alias(f"{c}/nan"), x.min().alias(f"{c}/min"),
                  x.max().alias(f"{c}/max")]
    try:
        with _rust_panics_quiet():
            stats = pl.scan_parquet(files).select(exprs).collect().row(0, named=True)
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException as e:  # noqa: B036  (a damaged file can make polars panic)
        _fail(where, f"cannot read the score columns {', '.join(scores)} ({(str(e).splitlines() or [''])[0][:200]})")
    span = f"[{SCORE.lo:g}, {SCORE.hi:g}]"
    for c in scores:
        nulls, nans = int(stats[f"{c}/null"] or 0), int(stats[f"{c}/nan"] or 0)
        if nulls or nans:
            _fail(where, f"column '{c}' has {nulls} null and {nans} NaN values; scores must be numbers in {span}")
        lo, hi = stats[f"{c}/min"], stats[f"{c}/max"]
        if lo is not None and (lo < SCORE.lo or hi > SCORE.hi):
            _fail(where, f"column '{c}' has values outside {span} (min {lo}, max {hi})")


def load_prior(queries_file: Path, column: str, qids: list) -> np.ndarray:
    """marginal-gain's per-query predictions: `column` of queries.parquet, a number in [0, 1] for every query (no
    null, no NaN), in the order of qids (the pool's queries). Anything else is one PoolError naming the problem."""
    where = "queries.parquet"
    if not queries_file.exists():
        _fail(where, f"--prior {column} reads a column of queries.parquet, and this pool has no queries.parquet")
    names = pl.read_parquet_schema(queries_file)
    if column not in names:
        _fail(where, f"--prior: no column '{column}' (columns: {', '.join(names)})")
    if column == "query_id" or not names[column].is_numeric():
        _fail(where, f"--prior: column '{column}' must hold numbers (predicted success probabilities in [0, 1]), "
                     f"found {names[column]}")
    q = read_checked([queries_file], ["query_id", column], queries_file.parent).with_columns(
        pl.col(column).cast(pl.Float64))
    bad = q.filter(pl.col(column).is_null() | pl.col(column).is_nan())
    if bad.height:
        _fail(where, f"--prior: column '{column}' has {bad.height} null or NaN values (e.g. query "
                     f"{bad['query_id'][0]!r}); every query needs a prediction")
    out = q.filter((pl.col(column) < 0.0) | (pl.col(column) > 1.0))
    if out.height:
        _fail(where, f"--prior: column '{column}' has {out.height} values outside [0, 1] (e.g. {out[column][0]} for "
                     f"query {out['query_id'][0]!r}); it is a probability")
    by_id = dict(zip(q["query_id"].to_list(), q[column].to_list()))
    return np.array([by_id[i] for i in qids], np.float64)  # (load_pool checked it lists exactly the pool's queries)


def check_lows(df: pl.DataFrame, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """deepconf-online's record lows of every row of df (columns LOWS and n_tokens, rows in pool order), checked
    against the contract: no null, as many values as positions, positions increasing from >= 0 and each < the
    response's n_tokens, values strictly decreasing and not NaN. Returns (loff, lpos, lval): row j's lows are
    lpos / lval[loff[j] .. loff[j + 1])."""
    pos_c, val_c = LOWS
    for c in LOWS:
        if df[c].null_count():
            _fail(where, f"column '{c}' has {df[c].null_count()} null values (an empty list is a response without "
                         "tokens)")
    if df["n_tokens"].null_count():
        _fail(where, f"column 'n_tokens' has {df['n_tokens'].null_count()} null values; deepconf-online reads the "
                     "record lows against each response's length")
    npos = df[pos_c].list.len().to_numpy()
    nval = df[val_c].list.len().to_numpy()
    bad = np.flatnonzero(npos != nval)
    if bad.size:
        _fail(where, f"row {int(bad[0])}: '{pos_c}' has {int(npos[bad[0]])} entries and '{val_c}' {int(nval[bad[0]])}"
                     "; a record low is a position and its value")
    loff = np.zeros(df.height + 1, np.int64)
    np.cumsum(npos, out=loff[1:])
    lpos = df[pos_c].explode().drop_nulls().cast(pl.Int64).to_numpy() if loff[-1] else np.zeros(0, np.int64)
    lval = df[val_c].explode().drop_nulls().cast(pl.Float64).to_numpy() if loff[-1] else np.zeros(0)
    lpos, lval = np.ascontiguousarray(lpos, np.int64), np.ascontiguousarray(lval, np.float64)
    row = np.repeat(np.arange(df.height), npos)
    first = np.zeros(len(lpos), bool)
    first[loff[:-1][npos > 0]] = True
    tok = df["n_tokens"].cast(pl.Int64).to_numpy()
    checks = (
        (np.isnan(lval), f"'{val_c}' holds NaN"),
        (lpos < 0, f"'{pos_c}' holds a negative position"),
        (lpos >= tok[row], f"'{pos_c}' holds a position >= the response's n_tokens"),
        (~first & (np.diff(lpos, prepend=0) <= 0), f"'{pos_c}' is not increasing"),
        (~first & ~(np.diff(lval, prepend=0.0) < 0), f"'{val_c}' is not strictly decreasing (record lows are)"),
    )
    for mask, what in checks:
        hit = np.flatnonzero(mask)
        if hit.size:
            _fail(where, f"row {int(row[hit[0]])}: {what}")
    return loff, lpos, lval


def check_probes(df: pl.DataFrame, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The probes of every row of df (columns PROBES, query_id and answer, rows in pool order: sorted by query and
    sample_idx), checked against the contract: no null list, as many answers, offsets and grades per response, offsets
    strictly increasing from >= 1, a grade null exactly where the answer is. Returns (probe_off, probe_tok,
    probe_ans, probe_ok): row j's probes are [probe_off[j] .. probe_off[j + 1]). probe_ans codes each probe answer
    as load_pool codes `answer` (its dense rank among the query's distinct final answers), so that a probe agreeing
    with a final answer has its id; an answer no final response of the query gave gets an id after those (dense
    rank among the query's other probe answers), -1 = none."""
    ans_c, tok_c, ok_c = PROBES
    for c in PROBES:
        if df[c].null_count():
            _fail(where, f"column '{c}' has {df[c].null_count()} null values (an empty list is a response that was "
                         "never probed)")
    n = df[ans_c].list.len().to_numpy()
    for c in (tok_c, ok_c):
        other = df[c].list.len().to_numpy()
        bad = np.flatnonzero(other != n)
        if bad.size:
            _fail(where, f"row {int(bad[0])}: '{ans_c}' has {int(n[bad[0]])} entries and '{c}' {int(other[bad[0]])}; "
                         "each probe is an answer, its token offset and its grade")
    off = np.zeros(df.height + 1, np.int64)
    np.cumsum(n, out=off[1:])
    row = np.repeat(np.arange(df.height), n)
    # one row per probe; explode turns an empty list into one null row, so the unprobed responses are left out first
    flat = (df.select(pl.col("query_id"), pl.col(ans_c).alias("a"), pl.col(tok_c).alias("t"), pl.col(ok_c).alias("ok"))
            .filter(pl.Series(n > 0)).explode("a", "t", "ok"))
    if flat["t"].null_count():
        _fail(where, f"row {int(row[flat['t'].is_null().arg_max()])}: '{tok_c}' holds a null offset")
    tok = flat["t"].cast(pl.Int64).to_numpy()
    first = np.zeros(len(tok), bool)
    first[off[:-1][n > 0]] = True
    checks = ((tok < SAMPLE_COLUMNS[tok_c].lo, f"'{tok_c}' holds an offset below {SAMPLE_COLUMNS[tok_c].lo}"),
              (~first & (np.diff(tok, prepend=0) <= 0), f"'{tok_c}' is not strictly increasing"),
              ((flat["a"].is_null() != flat["ok"].is_null()).to_numpy(),
               f"'{ok_c}' is null where '{ans_c}' is not, or the other way round (a probe without an answer has no "
               "grade, and one with an answer has one)"))
    for mask, what in checks:
        hit = np.flatnonzero(mask)
        if hit.size:
            _fail(where, f"row {int(row[hit[0]])}: {what}")
    finals = (df.select("query_id", pl.col("answer").alias("a")).drop_nulls().unique()
              .with_columns((pl.col("a").rank("dense").over("query_id") - 1).cast(pl.Int64).alias("code")))
    coded = flat.with_row_index("i").join(finals, on=["query_id", "a"], how="left")
    top = finals.group_by("query_id").agg(pl.len().alias("m"))
    extra = (coded.filter(pl.col("code").is_null() & pl.col("a").is_not_null()).select("query_id", "a").unique()
             .join(top, on="query_id", how="left")
             .with_columns((pl.col("a").rank("dense").over("query_id") - 1 + pl.col("m").fill_null(0))
                           .cast(pl.Int64).alias("extra")).drop("m"))
    coded = (coded.join(extra, on=["query_id", "a"], how="left").sort("i")
             .select(pl.coalesce("code", "extra").fill_null(-1).cast(pl.Int64)))
    ans = coded.to_series().to_numpy() if coded.height else np.zeros(0, np.int64)
    ok = flat["ok"].fill_null(False).to_numpy().astype(bool) if flat.height else np.zeros(0, bool)
    return off, np.ascontiguousarray(tok, np.int64), np.ascontiguousarray(ans, np.int64), np.ascontiguousarray(ok)


def load_pool(path, score: str = "gt", need_tokens: bool = False, prior: str | None = None,
              side: str | None = None, lows: bool | None = False, invalid_votes: bool = False,
              probes: bool = False, quiet: bool = False) -> Pool:
    """Read and validate a pool against the contract (SAMPLE_COLUMNS, SCORE). Every score column is validated;
    only the columns a replay needs are read into memory. prior: a column of queries.parquet read as each query's
    predicted success probability (marginal-gain, load_prior); side: a column of the responses read as each
    response's side signal (side-eb: numbers in [0, 1], no null or NaN); lows: deepconf-online's record lows (LOWS,
    check_lows), True: read them (a pool without them is refused), None: read them when the pool has them, False:
    not read; invalid_votes: each query's invalid answers as one answer category (Pool.with_invalid_votes); probes:
    read and check the probe columns (PROBES, check_probes: a pool without them is refused), False: not read; quiet:
    no notes (a command checking the pool it has just written reads it as replay will, not as the user's input).

    Three steps: read (the part files' one schema, then the columns asked for), validate (the schema against what
    was asked, then the rows, queries.parquet and pool.json), derive (the engine's flat arrays)."""
    path = Path(path)
    files = sample_files(path)
    where = "samples.parquet" if files[0].name == "samples.parquet" else "samples/*.parquet"
    schema = read_schema(path, files, where)
    layout = check_schema(schema, where, score=score, need_tokens=need_tokens, side=side, lows=lows, probes=probes)
    unchecked: list = []
    df = read_checked(files, layout.cols, path, note=unchecked)
    has_gt = check_rows(df, layout, files, where)
    df = df.sort("query_id", "sample_idx")
    qids = df["query_id"].unique(maintain_order=True)
    queries_file = path / "queries.parquet"
    if queries_file.exists():
        check_queries_file(queries_file, set(qids.to_list()), path, unchecked)
    pool = derive_pool(df, layout, path, qids.to_list(), where, has_gt=has_gt, meta=read_pool_json(path), side=side,
                       prior=prior)
    if not quiet:  # only for a pool that loads: a refusal stays one line
        note_unchecked(unchecked, path)
        note_open(path, files, schema)
    return pool.with_invalid_votes() if invalid_votes else pool


def note_open(path: Path, files: list[Path], schema: pl.Schema):
    """One line on stderr, once per pool and process, for a pool holding traces a live depth run left running
    (finish_reason "open", docs/run.md): replay reads each as a trace that ended at its last probe, without an
    answer, which is not the running trace the run saw; said so that a number read from it is not taken as the run's."""
    if schema.get("finish_reason") != pl.String or ("open", str(path)) in _NOTED:
        return
    n = pl.scan_parquet(files).filter(pl.col("finish_reason") == "open").select(pl.len()).collect().item()
    if n:
        _NOTED.add(("open", str(path)))
        note(f"note: {path} holds {n:,} trace{'s' if n != 1 else ''} a live depth run left running (finish_reason "
             "'open'); replay reads each as ended at its last probe, without an answer (docs/run.md)")


def read_schema(path: Path, files: list[Path], where: str) -> pl.Schema:
    """The one schema every part file shares (read from their footers alone); a file that is not Parquet, or whose
    columns or types differ from the first's, is refused."""
    schema = None
    for f in files:
        regular_file(f)
        try:
            with _rust_panics_quiet():
                this = pl.read_parquet_schema(f)
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except BaseException as e:  # noqa: B036  not Parquet, truncated, unreadable (or a panic of the reader)
            which = "" if len(files) == 1 and where == "samples.parquet" else f" {f.relative_to(path)}"
            _fail(where, f"cannot read{which} as Parquet ({(str(e).splitlines() or [type(e).__name__])[0][:200]})")
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
    return pl.Schema(schema)


@dataclass(frozen=True)
class Layout:
    """What a pool's schema holds and what a load reads from it (check_schema)."""

    names: list
    cols: list              # the columns read into memory
    score_col: str          # "gt" or a score column
    scores: list            # every score column (each validated)
    has_answers: bool
    has_tokens: bool
    need_tokens: bool
    has_lows: bool
    read_lows: bool
    has_probes: bool
    read_probes: bool


def check_schema(schema: pl.Schema, where: str, *, score: str, need_tokens: bool, side: str | None,
                 lows: bool | None, probes: bool) -> Layout:
    """The schema against the format and against what the load asks for: the required columns, every read
    column's type, the columns that come in sets (record lows, probes), and the columns to read."""
    names = schema.names()
    for col in REQUIRED:
        if col not in names:
            _fail(where, f"missing required column '{col}' (columns: {', '.join(names)})")
    score_col = resolve_score(names, score)
    has_answers, has_tokens = "answer" in names, "n_tokens" in names
    if need_tokens and not has_tokens:
        _fail(where, "a token budget needs an 'n_tokens' column, and this pool has none")
    # types, from the schema alone: every column of the format replay reads, and every score column
    scores = [c for c in names if is_score(c)]
    for name in [c for c, spec in SAMPLE_COLUMNS.items() if spec.read and c in names] + scores:
        spec = column(name)
        if not _accepts(spec, schema[name]):
            _fail(where, f"column '{name}' must be {spec.expect}, found {schema[name]}")
    cols = list(REQUIRED) + [c for c in ("correct", "answer", "n_tokens") if c in names]
    if score_col != "gt":
        cols.append(score_col)
    if side is not None:
        if side not in names:
            _fail(where, f"--side: no column '{side}' (columns: {', '.join(names)})")
        if side not in cols:
            cols.append(side)
    has_lows = all(c in names for c in LOWS)
    if any(c in names for c in LOWS) and not has_lows:
        _fail(where, f"column '{[c for c in LOWS if c in names][0]}' without "
                     f"'{[c for c in LOWS if c not in names][0]}': the record lows are two columns, both or neither")
    if lows and not has_lows:
        _fail(where, "deepconf-online needs each response's record lows of its group confidence (columns "
                     f"{' and '.join(repr(c) for c in LOWS)}: ttc harvest --confidence group-lows), and this pool has "
                     "none")
    read_lows = has_lows and lows is not False
    has_probes = all(c in names for c in PROBES)
    if any(c in names for c in PROBES) and not has_probes:
        _fail(where, f"the probe columns are {', '.join(PROBES)}, all or none; this pool has only "
                     f"{', '.join(c for c in PROBES if c in names)}")
    if probes:
        if not has_probes:
            _fail(where, f"no probes here (columns {', '.join(PROBES)}: ttc import autotts writes them)")
        if not has_answers:
            _fail(where, "the probe answers are coded as the final answers are, and this pool has no 'answer' column")
        cols += [c for c in PROBES if c not in cols]
    if read_lows:
        if not has_tokens:
            _fail(where, "the record lows need an 'n_tokens' column (a stopped trace pays its tokens so far), and "
                         "this pool has none")
        cols += [c for c in LOWS if c not in cols]
    return Layout(names=names, cols=cols, score_col=score_col, scores=scores, has_answers=has_answers,
                  has_tokens=has_tokens, need_tokens=need_tokens, has_lows=has_lows, read_lows=read_lows,
                  has_probes=has_probes, read_probes=probes)


def check_rows(df: pl.DataFrame, layout: Layout, files: list[Path], where: str) -> bool:
    """The rows read: no nulls where the format has none, one row per (query_id, sample_idx), ground truth whole or
    absent, every score column in range (_check_scores reads them from `files`), token counts. Returns has_gt."""
    if df.height == 0:
        _fail(where, "no rows")
    for col in [c for c in layout.cols if c in SAMPLE_COLUMNS and SAMPLE_COLUMNS[c].nulls == "never"]:
        nulls = df[col].null_count()
        if nulls:
            _fail(where, f"column '{col}' has {nulls} null values")
    dup = df.select(pl.struct("query_id", "sample_idx").is_duplicated().sum()).item()
    if dup:
        ex = df.filter(pl.struct("query_id", "sample_idx").is_duplicated()).row(0, named=True)
        _fail(where, f"{dup} rows share a (query_id, sample_idx), e.g. ({ex['query_id']!r}, {ex['sample_idx']})")
    has_gt = False
    if "correct" in layout.names:
        c = df["correct"]
        if c.dtype != pl.Boolean and not c.drop_nulls().is_in([0, 1]).all():
            _fail(where, f"column 'correct' must be {SAMPLE_COLUMNS['correct'].expect}, found {c.dtype}")
        nulls = c.null_count()
        if 0 < nulls < df.height:
            _fail(where, f"column 'correct' has {nulls} null values out of {df.height}: ground truth must be "
                         "complete (or entirely null for a pool without it)")
        has_gt = nulls == 0
    if layout.score_col == "gt" and not has_gt:
        _fail(where, "--score gt needs ground truth, but column 'correct' is entirely null")
    _check_scores(files, layout.scores, where)
    if layout.has_tokens:
        t = df["n_tokens"]
        if layout.need_tokens and t.null_count():
            _fail(where, f"column 'n_tokens' has {t.null_count()} null values; a token budget needs them all")
        if (t.min() or 0) < SAMPLE_COLUMNS["n_tokens"].lo:
            _fail(where, "column 'n_tokens' has negative values")
    return has_gt


def check_queries_file(queries_file: Path, have: set, path: Path, unchecked: list) -> None:
    """queries.parquet lists every query with samples, once, and no other."""
    try:
        q = read_checked([queries_file], ["query_id"], path, note=unchecked)["query_id"]
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except BaseException as e:  # noqa: B036
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        _fail("queries.parquet", f"cannot read a 'query_id' column ({first})")
    if q.null_count():
        _fail("queries.parquet", f"column 'query_id' has {q.null_count()} null values")
    if q.is_duplicated().any():
        _fail("queries.parquet", f"query_id {q.filter(q.is_duplicated())[0]!r} is listed more than once")
    listed = set(q.to_list())
    empty = sorted(listed - have)
    if empty:
        _fail("queries.parquet", f"{len(empty)} queries have no samples, e.g. {empty[0]!r}")
    extra = sorted(have - listed)
    if extra:
        _fail("queries.parquet", f"{len(extra)} query_ids in the samples are not listed, e.g. {extra[0]!r}")


def read_pool_json(path: Path) -> dict:
    """pool.json's provenance ({} when there is none); a file that is not a JSON object is refused."""
    meta = {}
    if (path / "pool.json").exists():
        regular_file(path / "pool.json")
        try:
            meta = json.loads((path / "pool.json").read_text())
        except json.JSONDecodeError as e:
            _fail("pool.json", f"not valid JSON ({e})")
        if not isinstance(meta, dict):
            _fail("pool.json", f"must hold a JSON object (provenance fields), found {type(meta).__name__}")
    return meta


def derive_pool(df: pl.DataFrame, layout: Layout, path: Path, query_ids: list, where: str, *, has_gt: bool,
                meta: dict, side: str | None, prior: str | None) -> Pool:
    """The engine's flat arrays from the checked rows (sorted by query, then sample): offsets per query, correctness,
    the score read, answers coded per query (dense ranks, -1 for none), tokens, the side signal (checked in [0, 1]),
    record lows, probes, and the --prior column of queries.parquet."""
    sizes = df.group_by("query_id", maintain_order=True).len()["len"].to_numpy()
    off = np.zeros(len(query_ids) + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    correct = (df["correct"].cast(pl.Int8).to_numpy() if has_gt else np.zeros(df.height, np.int8))
    if layout.score_col == "gt":
        score = correct.astype(np.float64)
    else:
        score = df[layout.score_col].cast(pl.Float64).to_numpy().copy()
    if layout.has_answers:
        ans = (df.select((pl.col("answer").rank("dense").over("query_id") - 1).fill_null(-1).cast(pl.Int64))
               .to_series().to_numpy())
    else:
        ans = np.full(df.height, -1, np.int64)
    tok = (df["n_tokens"].fill_null(0).cast(pl.Int64).to_numpy() if layout.has_tokens
           else np.zeros(df.height, np.int64))
    side_v = None
    if side is not None:
        try:
            side_v = df[side].cast(pl.Float64).to_numpy().copy()
        except Exception:
            _fail(where, f"--side: column '{side}' must hold numbers (a side signal in [0, 1]), found {df[side].dtype}")
        bad = ~((side_v >= 0.0) & (side_v <= 1.0))  # NaN and nulls (NaN here) fail too
        if bad.any():
            _fail(where, f"--side: column '{side}' has {int(bad.sum())} null, NaN or out-of-[0, 1] values (e.g. "
                  f"{side_v[bad][0]}); a side signal is a number in [0, 1]")
    lows_v = check_lows(df, where) if layout.read_lows else None
    probes_v = check_probes(df, where) if layout.read_probes else (None,) * 4
    return Pool(path=path, query_ids=query_ids, off=off, correct=np.ascontiguousarray(correct, np.int8),
                score=np.ascontiguousarray(score, np.float64), ans=np.ascontiguousarray(ans, np.int64),
                tok=np.ascontiguousarray(tok, np.int64), score_name=layout.score_col, has_gt=has_gt,
                has_answers=layout.has_answers, has_tokens=layout.has_tokens, meta=meta, side=side_v,
                score_columns=layout.scores, lows=lows_v, has_lows=layout.has_lows,
                prior=None if prior is None else load_prior(path / "queries.parquet", prior, query_ids),
                probe_off=probes_v[0], probe_tok=probes_v[1], probe_ans=probes_v[2], probe_ok=probes_v[3],
                has_probes=layout.has_probes)

