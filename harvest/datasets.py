"""Benchmark loading: every source becomes a list of `Query` with stable, unique ids.

Query ids are what a pool is keyed on (resumption, merging shards, joining scores), so they come from the data,
never from row positions when the data has ids: MATH-500 `unique_id`, AIME `id` as a string, LiveCodeBench
`question_id`. A duplicate id is an error, because two queries sharing one id would silently merge their samples.

Sources:
- a known name ("math500", "aime24", "aime25", "lcb-exec") is read from the HuggingFace hub with `datasets`,
  imported only here so that nothing else needs it;
- "hf:OWNER/NAME" reads any hub data set (with `split=`, `config=` and the column arguments);
- a path to a JSONL / JSON / Parquet file (the copies in ../shared/data/benchmarks, or your own prompts).

Columns of a file are found by name unless given: id from unique_id / id / question_id / problem_id / idx,
problem from problem / question / prompt, gold from answer / gold / final_answer. A file with question_id, code,
input and output columns is LiveCodeBench code execution. Every other scalar column is kept in `Query.fields`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttc.harvest.types import Query
from ttc.replay.errors import InputError

ID_COLUMNS = ("unique_id", "id", "question_id", "problem_id", "idx")
PROBLEM_COLUMNS = ("problem", "question", "prompt")
ANSWER_COLUMNS = ("answer", "gold", "final_answer")
LCB_COLUMNS = ("question_id", "code", "input", "output")
TASKS = ("math", "lcb-exec", "custom")


@dataclass(frozen=True)
class HubSource:
    repo: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    kind: str = "math"             # "math" or "lcb-exec"
    id_column: str | None = None
    problem_column: str = "problem"
    answer_column: str = "answer"


HUB_SOURCES: dict[str, HubSource] = {
    "math500": HubSource("HuggingFaceH4/MATH-500", "test", id_column="unique_id"),
    "aime24": HubSource("HuggingFaceH4/aime_2024", "train", id_column="id"),
    "aime25": HubSource("math-ai/aime25", "test", id_column="id"),
    "lcb-exec": HubSource("livecodebench/execution-v2", "test", kind="lcb-exec"),
}

_LOCAL_HINT = {
    "math500": "../shared/data/benchmarks/math500.jsonl",
    "aime24": "../shared/data/benchmarks/aime24.jsonl",
    "aime25": "../shared/data/benchmarks/aime25.jsonl",
    "lcb-exec": "a JSONL file with question_id, function_name, code, input, output",
}


def load_queries(source: str | Path, *, task: str | None = None, limit: int | None = None,
                 id_column: str | None = None, problem_column: str | None = None,
                 answer_column: str | None = None, split: str | None = None,
                 config: str | None = None) -> list[Query]:
    """Queries of a named benchmark, a hub data set or a local file, in source order (first `limit` only).

    Raises InputError (a UserError and a ValueError) with a one-line message for a missing file, an unknown name, a
    missing column, an unreadable row or duplicate ids."""
    if limit is not None and limit < 1:
        raise InputError(f"limit must be a positive number of queries, got {limit}")
    if task is not None and task not in TASKS:
        raise InputError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    src = str(source)
    if src in HUB_SOURCES:
        spec = HUB_SOURCES[src]
        rows = _hub_rows(spec.repo, split or spec.split, (config,) if config else spec.configs, hint=_LOCAL_HINT[src])
        if spec.kind == "lcb-exec":
            queries = _lcb_queries(rows, src, task)
        else:
            queries = _table_queries(rows, src, task or "math", id_column or spec.id_column,
                                     problem_column or spec.problem_column, answer_column or spec.answer_column)
    elif src.startswith("hf:"):
        if not split:
            raise InputError(f"{src}: a hub data set needs split=")
        rows = _hub_rows(src[3:], split, (config,), hint="a local JSONL/Parquet copy")
        queries = _from_rows(rows, src, task, id_column, problem_column, answer_column)
    else:
        path = Path(src).expanduser()
        if not path.exists():
            if path.suffix or "/" in src or "\\" in src:
                raise InputError(f"no such file: {path}")
            raise InputError(f"unknown dataset {src!r}: known names are {', '.join(HUB_SOURCES)}, "
                             "hf:OWNER/NAME, or a path to a JSONL/Parquet file")
        if path.is_dir():
            raise InputError(f"{path} is a directory; pass a JSONL, JSON or Parquet file")
        rows = _file_rows(path)
        queries = _from_rows(rows, str(path), task, id_column, problem_column, answer_column)
    if limit is not None:
        queries = queries[:limit]
    return queries


def _from_rows(rows: list[dict], where: str, task: str | None, id_column: str | None,
               problem_column: str | None, answer_column: str | None) -> list[Query]:
    if not rows:
        raise InputError(f"{where}: no rows")
    columns = _columns(rows)
    is_lcb = task == "lcb-exec" or (task is None and all(c in columns for c in LCB_COLUMNS))
    if is_lcb:
        return _lcb_queries(rows, where, task)
    return _table_queries(rows, where, task, id_column, problem_column, answer_column)


def _table_queries(rows: list[dict], where: str, task: str | None, id_column: str | None,
                   problem_column: str | None, answer_column: str | None) -> list[Query]:
    if not rows:
        raise InputError(f"{where}: no rows")
    columns = _columns(rows)
    idc = _pick(columns, id_column, ID_COLUMNS, where, "id", "id_column")
    pc = _pick(columns, problem_column, PROBLEM_COLUMNS, where, "problem", "problem_column")
    if answer_column is not None or task == "math":
        ac = _pick(columns, answer_column, ANSWER_COLUMNS, where, "answer", "answer_column")
    else:
        ac = next((c for c in ANSWER_COLUMNS if c in columns), None)
    task = task or ("math" if ac else "custom")
    queries = []
    for i, row in enumerate(rows):
        qid, problem = row.get(idc), row.get(pc)
        if qid is None or (isinstance(qid, str) and not qid.strip()):
            raise InputError(f"{where}: row {i} has no {idc!r}")
        if not isinstance(problem, str) or not problem.strip():
            raise InputError(f"{where}: row {i} ({idc}={qid}) has no {pc!r} text")
        gold = _gold(row.get(ac)) if ac else None
        if task == "math" and gold is None:
            raise InputError(f"{where}: row {i} ({idc}={qid}) has no {ac!r}; math queries need a gold answer")
        fields = {k: v for k, v in row.items() if k not in (idc, pc, ac) and _scalar(v)}
        queries.append(Query(query_id=_id(qid), task=task, problem=problem, gold=gold, fields=fields))
    _check_unique(queries, where)
    return queries


def _lcb_queries(rows: list[dict], where: str, task: str | None) -> list[Query]:
    """LiveCodeBench code execution: the model predicts `code`'s return value on `input` (a call such as
    "f(x = 3)"); gold is the `output` literal. `question_id` is the id; if a file repeats one, every item of that
    question gets "#k", k its 0-based occurrence in file order."""
    if task not in (None, "lcb-exec"):
        raise InputError(f"{where}: LiveCodeBench code-execution rows cannot be task {task!r}")
    if not rows:
        raise InputError(f"{where}: no rows")
    columns = _columns(rows)
    for c in LCB_COLUMNS:
        if c not in columns:
            raise InputError(f"{where}: missing column {c!r} for lcb-exec (has: {', '.join(sorted(columns))})")
    counts: dict[str, int] = {}
    for row in rows:
        counts[_id(row["question_id"])] = counts.get(_id(row["question_id"]), 0) + 1
    seen: dict[str, int] = {}
    queries = []
    for i, row in enumerate(rows):
        code, inp, out = row.get("code"), row.get("input"), row.get("output")
        if not all(isinstance(v, str) and v.strip() for v in (code, inp, out)):
            raise InputError(f"{where}: row {i} needs non-empty code, input and output strings")
        base = _id(row["question_id"])
        k = seen.get(base, 0)
        seen[base] = k + 1
        qid = f"{base}#{k}" if counts[base] > 1 else base
        fields = {k2: v for k2, v in row.items() if k2 not in ("question_id", "output") and _scalar(v)}
        fields.setdefault("function_name", _function_name(inp))
        problem = f"{code.rstrip()}\nassert {inp.strip()} == ??"
        queries.append(Query(query_id=qid, task="lcb-exec", problem=problem, gold=out.strip(), fields=fields))
    _check_unique(queries, where)
    return queries


def _function_name(call: str) -> str:
    return call.split("(", 1)[0].strip()


def _hub_rows(repo: str, split: str, configs: Iterable[str | None], *, hint: str) -> list[dict]:
    try:
        import datasets  # lazy: only hub sources need it
    except ImportError:
        raise InputError(f"loading {repo} from the HuggingFace hub needs the `datasets` package, which is not "
                         f"installed; pass a local file instead ({hint})") from None
    rows: list[dict] = []
    for cfg in configs:
        try:
            ds = datasets.load_dataset(repo, cfg, split=split) if cfg else datasets.load_dataset(repo, split=split)
        except Exception as e:  # network, auth, unknown split: all mean "use a local file"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(f"could not load {repo} (split {split!r}) from the HuggingFace hub: {first}; "
                             f"pass a local file instead ({hint})") from None
        rows.extend(dict(r) for r in ds)
    return rows


def _file_rows(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq
        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:
            raise InputError(f"{path}: not a readable Parquet file ({e})") from None
    if suffix in (".jsonl", ".json", ".ndjson"):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: invalid JSON ({e})") from None
        else:
            rows = []
            for n, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{n}: invalid JSON line ({e.msg})") from None
        if not all(isinstance(r, dict) for r in rows):
            raise InputError(f"{path}: every record must be a JSON object")
        return rows
    raise InputError(f"{path}: unsupported file type {suffix or '(none)'}; use .jsonl, .json or .parquet")


def _columns(rows: list[dict]) -> set[str]:
    cols: set[str] = set()
    for r in rows:
        cols.update(r)
    return cols


def _pick(columns: set[str], given: str | None, candidates: tuple[str, ...], where: str, what: str,
          arg: str) -> str:
    if given is not None:
        if given not in columns:
            raise InputError(f"{where}: no column {given!r} (has: {', '.join(sorted(columns))})")
        return given
    for c in candidates:
        if c in columns:
            return c
    raise InputError(f"{where}: no {what} column (looked for {', '.join(candidates)}; has: "
                     f"{', '.join(sorted(columns))}); name it with {arg}=")


def _id(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip()


def _gold(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    s = str(v).strip()
    return s or None


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _check_unique(queries: list[Query], where: str) -> None:
    seen: set[str] = set()
    dups: list[str] = []
    for q in queries:
        if q.query_id in seen and q.query_id not in dups:
            dups.append(q.query_id)
        seen.add(q.query_id)
    if dups:
        shown = ", ".join(repr(d) for d in dups[:5]) + (" ..." if len(dups) > 5 else "")
        raise InputError(f"{where}: duplicate query ids {shown} ({len(dups)} in all); ids must be unique")
