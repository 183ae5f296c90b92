"""Adapters from public sample dumps to the pool format (figure-only: ids, correctness, scores, hashed answers).

Each adapter reads the dump as published (see ../shared/data/README.md) and writes a pool directory. Answers are
stored as short hashes of the normalised answer: equality is all self-consistency and entropy need, and no
third-party text ends up in the pool.

Each format is declared once in harvest/registry.py's IMPORTERS (name, adapter function, SOURCE, what it derives,
the `ttc import` options it takes, whether SOURCE is a directory, its extra); import_pool runs an adapter through
its entry.

Importing is producing pools, so this lives in harvest/ (it needs harvest's oracles: math grading, the code sandbox);
replay/ never imports it. The format itself is replay/pool.py's: samples_frame types the columns as the contract
says, write_pool writes the pool atomically, and import_pool refuses what load_pool would refuse.
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ttc.replay.errors import InputError, UserError
from ttc.replay.pool import PoolError, atomic_write_json, load_pool, samples_frame, write_pool

from .confidence import exp_map
from .registry import IMPORTERS
from .registry import flag as option_flag


def answer_hash(normalised: str | None) -> str | None:
    if normalised is None:
        return None
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=6).hexdigest()


_LL_ANSWER = re.compile(r"answer is\s*:?\s*(.*)", re.IGNORECASE)


def lastletters_answer(text: str) -> str | None:
    """The letters after the last 'The answer is', lower-cased; None when absent or empty."""
    m = _LL_ANSWER.findall(text)
    if not m:
        return None
    a = re.sub(r"[^a-z]", "", m[-1].split("\n")[0].lower())
    return a or None


def _json_line(line: str, where: str):
    """One JSON value; what json cannot read (a syntax error, nesting deeper than Python's recursion limit) is a
    SourceError naming where it is."""
    try:
        return json.loads(line)
    except RecursionError:
        raise SourceError(f"{where}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as e:
        raise SourceError(f"{where}: not valid JSON ({e})") from None


def _records(src: Path) -> Iterator[tuple[str, dict]]:
    """The JSON objects of a JSONL file, one per non-blank line, each with where it is ("line N") for messages."""
    with open(src) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = _json_line(line, f"line {n}")
            if not isinstance(r, dict):
                raise SourceError(f"line {n}: a record must be a JSON object, found {type(r).__name__}")
            yield f"line {n}", r


def _number(v, where: str, what: str) -> float:
    """A finite JSON number (not a boolean): NaN and infinities (json reads 1e999 as inf) are refused."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SourceError(f"{where}: {what} must be a finite number, found {v!r}")
    return float(v)


def _index(v, where: str, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 10**9:
        raise SourceError(f"{where}: {key!r} must be an integer in 0 .. 10**9 - 1, found {v!r}")
    return v


def _same_lengths(where: str, **lists) -> int:
    for k, v in lists.items():
        if not isinstance(v, (list, str)):
            raise SourceError(f"{where}: {k!r} must be a list, found {type(v).__name__}")
    n = {k: len(v) for k, v in lists.items()}
    if len(set(n.values())) > 1:
        raise SourceError(f"{where}: the lengths of {', '.join(repr(k) for k in n)} differ "
                          f"({', '.join(str(x) for x in n.values())}); one entry per response in each")
    return next(iter(n.values()))


def _provenance(src: Path, upstream: str) -> dict:
    """What pool.json says about where the pool came from: the file actually read and its digest, and, apart, the
    upstream file the format was written for (the two are the same exactly when the digests match)."""
    return {"source": f"{src.resolve()} (the file read; its sha256 in source_sha256)",
            "source_sha256": {src.name: _sha256(src)},
            "upstream": upstream}


def import_lastletters(src: Path, out: Path) -> Path:
    """ESC's GPT-3.5 last-letter dump (T0.7.jsonl): 500 questions x 40 responses, answers extracted here."""
    rows = []
    queries = []
    for qi, (where, r) in enumerate(_records(src)):
        qid = f"ll-{qi:03d}"
        gen = r["generated_answer"]
        if not isinstance(r["answer"], str):
            raise SourceError(f"{where}: 'answer' must be a string, found {type(r['answer']).__name__}")
        if not isinstance(gen, list) or not all(isinstance(t, str) for t in gen):
            raise SourceError(f"{where}: 'generated_answer' must be a list of strings (one per response), found "
                              f"{type(gen).__name__ if not isinstance(gen, list) else 'a list with other values'}")
        gold = re.sub(r"[^a-z]", "", r["answer"].lower())
        queries.append({"query_id": qid, "dataset": "last_letters", "gold": answer_hash(gold)})
        for k, text in enumerate(gen):
            a = lastletters_answer(text)
            rows.append({"query_id": qid, "sample_idx": k, "correct": a == gold, "answer": answer_hash(a)})
    meta = {
        "name": "lastletters-gpt35-40",
        "model": "gpt-3.5-turbo (OpenAI), temperature 0.7",
        "dataset": "last-letter concatenation, 500 questions",
        "responses_per_query": 40,
        **_provenance(src, "Yiwei98/ESC at commit 799157a4d21e6d97e86fcd541f5c85d8e3daae0a, "
                           "GPT3.5_result/last_letters/T0.7.jsonl"),
        "derivation": "answer = letters after the last 'The answer is', lower-cased, non-letters dropped "
                      "(null when absent); correct = answer == gold normalised the same way; answers and gold "
                      "stored as 12-hex blake2b hashes; no text, no token counts",
        "oracles": {"correct": "exact match with the gold answer"},
    }
    return write_pool(out, samples_frame(rows), meta, pl.DataFrame(queries))


def import_math500_llama(src: Path, out: Path) -> Path:
    """MATH-500 x 48 responses of Llama-3.1-8B-Instruct with correctness and mean token log-probability."""
    rows = []
    queries = []
    for where, r in _records(src):
        if r.get("missing"):
            continue
        qid = f"math500-{_index(r['i'], where, 'i'):03d}"
        c, logps = r["c"], r["s"]
        if not isinstance(c, str) or set(c) - {"0", "1"}:
            raise SourceError(f"{where}: 'c' must be a string of 0s and 1s (one per response), found {c!r:.60}")
        _same_lengths(where, c=c, s=logps)
        for k, lp in enumerate(logps):
            # a mean token log-probability is a finite number <= 0: NaN became score 1.0 through min(1, exp(nan))
            if _number(lp, where, f"'s'[{k}] (a mean token log-prob)") > 0:
                raise SourceError(f"{where}: 's'[{k}] is {lp!r}, not a mean token log-prob (which is <= 0)")
        queries.append({"query_id": qid, "dataset": "MATH-500", "level": r["level"]})
        for k, (ok, lp) in enumerate(zip(c, logps)):
            rows.append({"query_id": qid, "sample_idx": k, "correct": ok == "1",
                         "score_conf": exp_map(lp)})   # harvest's map of a mean log-prob (--confidence)
    meta = {
        "name": "math500-llama3.1-8b-48",
        "model": "meta/llama-3.1-8b-instruct",
        "dataset": "MATH-500 (499 of 500 problems; one had no upstream file)",
        "responses_per_query": 48,
        **_provenance(src, "Jason-Wang313/inference-value-theorem at commit 7e434d08858fd74a59e897bdcfbf9a93662851f4, "
                           "results/measurements/8B/problem_<i>.json"),
        "derivation": "correct as published; score_conf = exp(mean token log-probability), the geometric-mean "
                      "token probability of the response (a confidence signal, not a reward model)",
        "oracles": {"correct": "upstream grading", "score_conf": "exp(mean token logprob)"},
    }
    return write_pool(out, samples_frame(rows), meta, pl.DataFrame(queries))


def qwen_answer(pred: str | None) -> str | None:
    """Qwen2.5-Math's extracted answer, whitespace and surrounding $ removed; None when empty."""
    if pred is None:
        return None
    a = "".join(str(pred).split()).strip("$")
    return a or None


def import_qwen_math_rm(src: Path, out: Path) -> Path:
    """Qwen2.5-Math's reward-model example: 100 MATH problems x 8 responses with extracted answers, correctness
    and an unbounded reward-model score, mapped to [0, 1] by the logistic function."""
    rows, queries = [], []
    for where, r in _records(src):
        idx = r["idx"]
        qid = f"math-{_index(int(idx) if isinstance(idx, str) and idx.isdigit() else idx, where, 'idx'):03d}"
        _same_lengths(where, pred=r["pred"], score=r["score"], pred_score=r["pred_score"])
        queries.append({"query_id": qid, "dataset": "MATH (100-problem subset)", "level": str(r.get("level"))})
        for k, (pred, ok, rm) in enumerate(zip(r["pred"], r["score"], r["pred_score"])):
            if isinstance(rm, list) and len(rm) == 1:
                rm = rm[0]
            raw = _number(rm, where, f"'pred_score'[{k}]")
            if ok not in (True, False, 0, 1):
                raise SourceError(f"{where}: 'score'[{k}] must be true/false (or 0/1), found {ok!r}")
            if pred is not None and not isinstance(pred, (str, int, float)):
                raise SourceError(f"{where}: 'pred'[{k}] must be a string, found {type(pred).__name__}")
            # the logistic, with exp never overflowing (below -709 it is 0.0 to double precision anyway)
            score = 1.0 / (1.0 + math.exp(-raw)) if raw > -709 else 0.0
            rows.append({"query_id": qid, "sample_idx": k, "correct": bool(ok),
                         "answer": answer_hash(qwen_answer(pred)), "score_rm": score})
    meta = {
        "name": "qwen-math-rm-100x8",
        "model": "not named upstream (Qwen2.5-Math evaluation example)",
        "dataset": "MATH, 100 test problems",
        "responses_per_query": 8,
        **_provenance(src, "QwenLM/Qwen2.5-Math at commit a45202bd16f1ec06f433442dc1152d0074773465, "
                           "evaluation/data/eval_rm_maj_example/math_cot_100.jsonl"),
        "derivation": "correct = upstream 'score'; answer = upstream 'pred' without whitespace or surrounding $, "
                      "hashed; score_rm = logistic(pred_score), a monotone map of the unbounded reward to [0, 1]",
        "oracles": {"correct": "upstream grading", "score_rm": "logistic(upstream reward-model score)"},
    }
    return write_pool(out, samples_frame(rows), meta, pl.DataFrame(queries))


def read_table(src: Path) -> pl.DataFrame:
    suffix = "".join(src.suffixes[-1:]).lower()
    if suffix == ".parquet":
        return pl.read_parquet(src)
    if suffix == ".csv":
        return pl.read_csv(src)
    if suffix in (".jsonl", ".ndjson"):
        return pl.read_ndjson(src)
    if suffix == ".json":
        return pl.read_json(src)
    raise ValueError(f"unknown file type {suffix!r} (use .parquet, .csv, .jsonl or .json)")


class QueryError(InputError):
    """A `--sql` query that polars cannot run on the source (a syntax error, an unknown function or column): the
    project's own refusal, printed as it is (`error: --sql: ...`)."""


SQL_TABLE = "source"


def run_sql(df: pl.DataFrame, query: str) -> pl.DataFrame:
    """`query` run by polars' SQL engine with the table `source` (and nothing else) registered. SQL rather than
    polars expressions typed as Python text: users already know it, and it is evaluated by polars' own parser, so no
    Python is ever run from the command line. One query derives columns, drops duplicates (DISTINCT), fills nulls
    (COALESCE), filters (WHERE) and renames (AS)."""
    if not query.strip():
        raise QueryError("--sql is empty; give a query such as \"SELECT DISTINCT * FROM source\"")
    try:
        with pl.SQLContext({SQL_TABLE: df}) as ctx:
            out = ctx.execute(query, eager=True)
    except pl.exceptions.PolarsError as e:
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise QueryError(f"--sql: {first} (polars {pl.__version__} SQL; the table is '{SQL_TABLE}', with columns "
                         f"{', '.join(df.columns)})") from None
    if not isinstance(out, pl.DataFrame) or not out.columns:
        raise QueryError("--sql must be a query returning rows (SELECT ... FROM source)")
    return out


def _generic_hints(df: pl.DataFrame, mapping: dict, sql: str | None):
    """The refusals load_pool would make, said in the terms of the source and with the --sql that mends them: these
    are the usual states of a raw dump (duplicated rows, nulls for truncated responses, log-probs not in [0, 1])."""
    source = {new: col for col, new in mapping.items()}
    where = "the --sql result" if sql else "the source"
    dup = df.height - df.select(pl.struct("query_id", "sample_idx").n_unique()).item()   # copies beyond the first
    if dup:
        raise SourceError(f"{dup} rows of {where} repeat a (query_id, sample_idx); drop repeated rows with "
                          f"--sql \"SELECT DISTINCT * FROM {SQL_TABLE}\" (or number them: --sample-idx)")
    if "correct" in df.columns:
        nulls = df["correct"].null_count()
        if 0 < nulls < df.height:
            col = source["correct"]
            raise SourceError(f"'{col}' is null in {nulls} of {df.height} rows; ground truth is all present or all "
                              f"null: fill it in --sql, e.g. \"SELECT * REPLACE (COALESCE({col}, false) AS {col}) "
                              f"FROM {SQL_TABLE}\" (a truncated response is not correct)")
    for name in [c for c in df.columns if c.startswith("score_")]:
        x = df[name].cast(pl.Float64, strict=False)
        lo, hi = x.min(), x.max()
        if lo is not None and (lo < 0 or hi > 1):
            col = source[name]
            short = name[len("score_"):]
            raise SourceError(f"'{col}' (--score {short}) has values outside [0, 1] (min {lo:g}, max {hi:g}); map it "
                              f"in --sql, e.g. \"SELECT *, EXP({col}) AS {short} FROM {SQL_TABLE}\" with --score "
                              f"{short}={short} for a mean log-prob (1 / (1 + EXP(-x)) for a logit, 1 - LN(k) / x for "
                              "a DeepConf confidence: docs/harvest.md)")


def import_generic(src: Path, out: Path, query_id: str, correct: str | None = None, answer: str | None = None,
                   scores: dict | None = None, n_tokens: str | None = None, sample_idx: str | None = None,
                   hash_answers: bool = False, sql: str | None = None, gold: str | None = None,
                   compare: str | None = None) -> Path:
    """Any table with one row per response, or one row per query whose mapped columns hold lists (exploded, and
    numbered in list order). `sql` runs first (run_sql), and the column flags map its result; columns are renamed to
    the pool format; sample_idx defaults to row order per query. `gold`: a column of gold answers; correct = the
    answer compared with it (`compare`: exact, integer or math; COMPARES), for a dump without correctness."""
    df = read_table(src)
    rows_read = df.height
    if sql is not None:
        df = run_sql(df, sql)
    scores = scores or {}
    mapping = {query_id: "query_id"}
    for col, new in ((correct, "correct"), (answer, "answer"), (n_tokens, "n_tokens"), (sample_idx, "sample_idx")):
        if col:
            mapping[col] = new
    for name, col in scores.items():
        mapping[col] = f"score_{name}"
    if gold is not None:
        if correct is not None:
            raise InputError("give --correct or --gold, not both (--gold grades the answers into the correct column)")
        if answer is None:
            raise InputError("--gold grades the --answer column against it: give --answer too")
        mapping[gold] = "gold"
    if compare is not None and gold is None:
        raise InputError("--compare says how --gold is compared with the answers: give --gold too")
    compare = compare or "exact"
    _check_compare(compare, ("exact", "integer", "math"))
    missing = [c for c in mapping if c not in df.columns]
    if missing:
        where = "the --sql result" if sql is not None else src.name
        raise SourceError(f"column {missing[0]!r} not in {where} (columns: {', '.join(df.columns)})")
    df = df.select([pl.col(c).alias(n) for c, n in mapping.items()])
    lists = [c for c in df.columns if c != "query_id" and isinstance(df.schema[c], pl.List)]
    if lists:
        df = df.explode(lists)
    df = df.with_columns(pl.col("query_id").cast(pl.String))
    if "sample_idx" not in df.columns:
        df = df.with_columns(pl.int_range(pl.len()).over("query_id").alias("sample_idx"))
    if "answer" in df.columns:
        df = df.with_columns(pl.col("answer").cast(pl.String).str.strip_chars())
        df = df.with_columns(pl.when(pl.col("answer") == "").then(None).otherwise(pl.col("answer")).alias("answer"))
    grading = None
    if gold is not None:
        g = Grader(compare)
        golds = df["gold"].cast(pl.String).to_list()
        canon = []
        for i, (a, gd) in enumerate(zip(df["answer"].to_list(), golds)):
            gc = canonical_gold(gd, compare, f"row {i}")
            c = g.add(a, gd.strip(), gc)
            canon.append(c if compare != "exact" else a)
        df = df.drop("gold").with_columns(pl.Series("correct", g.grade(), pl.Boolean),
                                          pl.Series("answer", canon, pl.String))
        grading = g.record()
    if "answer" in df.columns and hash_answers:
        df = df.with_columns(pl.col("answer").map_elements(answer_hash, return_dtype=pl.String))
    _generic_hints(df, mapping, sql)
    meta = {"name": out.name, "source": str(src), "derivation": f"generic import, columns {mapping}"
            + (f"; correct = the answer against '{gold}' ({compare}: {COMPARES[compare]}); answers stored in "
               "canonical form" if gold is not None else "") + ("; answers hashed" if hash_answers else "")}
    if grading is not None:
        meta["grading"] = grading
    if sql is not None:
        meta["sql"] = {"query": sql, "table": SQL_TABLE, "engine": f"polars {pl.__version__} SQLContext",
                       "rows_read": rows_read, "rows_after": df.height,
                       "note": "the query ran on the source as read; the column flags mapped its result"}
    return write_pool(out, df, meta)


# --- ecosystem formats (search-and-learn, Large Language Monkeys, LiveCodeBench) and the HumanEval dump -------------


class SourceError(InputError):
    """The source reads but is not in the promised shape (a missing key, lists of different lengths, no records). The
    message names the record and the key, so the user can mend the file instead of reading a traceback."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _math_oracle():
    try:
        from .oracles import math_answer
    except ImportError as e:
        raise SourceError(f"answer extraction and grading need harvest/oracles/math_answer.py ({e})") from None
    return math_answer


def _math_answer(ma, text) -> tuple[str | None, str | None]:
    """(extracted, normalised) final answer of a response text; both None when it states none."""
    if not isinstance(text, str):
        return None, None
    raw = ma.extract_answer(text)
    return raw, (ma.normalize_answer(raw) if raw is not None else None)


def _query_ids(values: list, fallback_width: int, key: str) -> tuple[list[str], str]:
    """The dataset's own ids when every record has one and they are unique; row numbers otherwise (said in
    pool.json)."""
    ids = [None if v is None else str(v) for v in values]
    if ids and all(v not in (None, "") for v in ids) and len(set(ids)) == len(ids):
        return ids, f"query_id = upstream '{key}'"
    return [f"{i:0{fallback_width}d}" for i in range(len(values))], "query_id = row number (zero-padded)"


def _prm_aggregates(steps, where: str) -> tuple[float, float, float, int]:
    """min / last / product of one completion's per-step PRM scores, each step clipped to [0, 1] first (PRMs emit
    probabilities; anything outside is float noise or a logit, so the clipped ones are counted and reported). A single
    number (an outcome reward model) is one step. No steps gives 0.0 for all three: no evidence of correctness, and a
    0 never triggers a stop-when-good rule."""
    if isinstance(steps, (int, float)) and not isinstance(steps, bool):
        steps = [steps]
    if not isinstance(steps, list):
        raise SourceError(f"{where}: per-step scores must be a list of numbers, found {type(steps).__name__}")
    vals, clipped = [], 0
    for v in steps:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise SourceError(f"{where}: a step score is {v!r}; scores must be numbers (no null or NaN)")
        c = min(1.0, max(0.0, float(v)))
        clipped += c != v
        vals.append(c)
    if not vals:
        return 0.0, 0.0, 0.0, 0
    return min(vals), vals[-1], math.prod(vals), clipped


def _token_counts(raw, texts: list, where: str) -> list[int] | None:
    """search-and-learn's completion_tokens when it is one usable count per completion. Beam search writes a single
    int or placeholders (-1, or 0 for a non-empty text) instead: those are not token counts, so None."""
    if not isinstance(raw, list) or len(raw) != len(texts):
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in raw):
        return None
    if any(t == 0 and s for t, s in zip(raw, texts)):
        return None
    return list(raw)


def import_search_and_learn(src: Path, out: Path, limit: int | None = None, per_query: int | None = None,
                            workers: int | None = None, timeout: float = 5.0) -> Path:
    """HuggingFace search-and-learn result tables (best-of-N, beam search, DVTS): one row per problem with the gold
    `answer`, `completions` (texts) and `scores` (per completion, the PRM's per-step scores). Correctness is graded here
    with math-verify against the gold answer; the answers are extracted and normalised here too, since the table's
    `pred*` columns hold one aggregated prediction per problem, not one per completion."""
    ma = _math_oracle()
    df = read_table(src)
    for col in ("answer", "completions", "scores"):
        if col not in df.columns:
            raise SourceError(f"{src.name} has no column {col!r}; a search-and-learn table has problem, answer (gold), "
                              f"completions, scores, completion_tokens (found: {', '.join(df.columns) or 'none'})")
    if df.height == 0:
        raise SourceError(f"{src.name} has no rows")
    if limit:
        df = df.head(limit)
    records = df.to_dicts()
    qids, id_rule = _query_ids([r.get("unique_id") for r in records], len(str(len(records) - 1)), "unique_id")
    cols = {k: [] for k in ("query_id", "sample_idx", "correct", "answer", "n_tokens",
                            "score_prm_min", "score_prm_last", "score_prm_prod")}
    queries = {"query_id": [], "gold": [], "level": [], "subject": []}
    preds, golds, parsed = [], [], []
    n_steps = n_clipped = 0
    raw_lo, raw_hi = math.inf, -math.inf
    token_rows = 0
    for i, (r, qid) in enumerate(zip(records, qids)):
        where = f"row {i} ({qid})"
        texts, scores, gold = r["completions"], r["scores"], r["answer"]
        if not isinstance(texts, list) or not texts:
            raise SourceError(f"{where}: 'completions' must be a non-empty list of texts")
        if not isinstance(scores, list) or len(scores) != len(texts):
            raise SourceError(f"{where}: 'scores' must hold one list of step scores per completion "
                              f"({len(texts)} completions, "
                              f"{len(scores) if isinstance(scores, list) else 'no'} score lists)")
        if gold is None or not str(gold).strip():
            raise SourceError(f"{where}: the gold 'answer' is empty")
        toks = _token_counts(r.get("completion_tokens"), texts, where)
        token_rows += toks is not None
        texts, scores = texts[:per_query], scores[:per_query]
        queries["query_id"].append(qid)
        queries["gold"].append(answer_hash(ma.normalize_answer(str(gold))))
        queries["level"].append(None if r.get("level") is None else str(r["level"]))
        queries["subject"].append(None if r.get("subject") is None else str(r["subject"]))
        for k, (text, steps) in enumerate(zip(texts, scores)):
            raw, norm = _math_answer(ma, text)
            lo, last, prod, clipped = _prm_aggregates(steps, f"{where}, completion {k}")
            flat = [steps] if isinstance(steps, (int, float)) else steps
            if flat:
                raw_lo, raw_hi = min(raw_lo, min(flat)), max(raw_hi, max(flat))
            n_steps += len(flat)
            n_clipped += clipped
            cols["query_id"].append(qid)
            cols["sample_idx"].append(k)
            cols["answer"].append(answer_hash(norm))
            cols["n_tokens"].append(toks[k] if toks is not None else None)
            cols["score_prm_min"].append(lo)
            cols["score_prm_last"].append(last)
            cols["score_prm_prod"].append(prod)
            parsed.append(raw is not None)
            if raw is not None:
                preds.append(raw)
                golds.append(str(gold))
    grades = iter(ma.grade_many(preds, golds, workers=workers, timeout_s=timeout))
    cols["correct"] = [next(grades) if ok else False for ok in parsed]
    warnings = []
    if "completion_tokens" not in df.columns:
        del cols["n_tokens"]
        warnings.append("no completion_tokens column: the pool has no n_tokens (token budgets need them)")
    elif token_rows < len(records):
        del cols["n_tokens"]
        warnings.append(f"completion_tokens is not one count per completion in {len(records) - token_rows} of "
                        f"{len(records)} rows (beam search writes a total or placeholders): the pool has no n_tokens")
    if n_clipped:
        warnings.append(f"{n_clipped} of {n_steps} step scores were outside [0, 1] (raw range {raw_lo:.4g} to "
                        f"{raw_hi:.4g}) and were clipped; if the scores are logits, map them yourself and use "
                        "`generic`")
    meta = {
        "name": out.name,
        "format": "search-and-learn",
        "source": str(src), "source_sha256": _sha256(src),
        "limit": limit, "per_query": per_query,
        "math_verify_version": ma.MATH_VERIFY_VERSION,
        "derivation": f"{id_rule}; answer = normalize_answer(extract_answer(completion)) from "
                      "harvest/oracles/math_answer.py, hashed (null when no final answer is stated); correct = "
                      f"math-verify {ma.MATH_VERIFY_VERSION} (gold first) of the extracted answer against the gold "
                      f"'answer', per-grade timeout {timeout} s (a completion without an answer or a timed-out "
                      "grade is "
                      "incorrect); score_prm_min / _last / _prod = min, last and product of the completion's per-step "
                      "PRM scores, each step clipped to [0, 1] first (one number per completion counts as one step; no "
                      "steps gives 0); n_tokens = completion_tokens when it is one count per completion",
        "oracles": {"correct": f"math-verify {ma.MATH_VERIFY_VERSION} against the gold answer",
                    "score_prm_min": "min of the per-step PRM scores", "score_prm_last": "last step's PRM score",
                    "score_prm_prod": "product of the per-step PRM scores"},
        "step_scores": n_steps, "step_scores_clipped": n_clipped,
        "warnings": warnings,
    }
    return write_pool(out, samples_frame(cols), meta, pl.DataFrame(queries, schema={c: pl.String for c in queries}))


_GSM8K_ANSWER = re.compile(r"####\s*(-?[$0-9.,]+)")


def _gsm8k_answer(text: str) -> str | None:
    """GSM8K's '#### 72' convention (the one Large Language Monkeys' GSM8K grader reads): digits, sign and point only,
    thousands separators, $ and a trailing period dropped."""
    m = _GSM8K_ANSWER.search(text or "")
    if not m:
        return None
    a = m.group(1).replace(",", "").replace("$", "").rstrip(".")
    return a or None


def _yaml_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    files = [f for f in src.iterdir() if f.suffix.lower() in (".yaml", ".yml") and f.is_file()]
    if not files:
        raise SourceError(f"{src} holds no .yaml files (Large Language Monkeys writes one per problem)")
    numeric = all(f.stem.isdigit() for f in files)
    return sorted(files, key=(lambda f: (int(f.stem), f.name)) if numeric else (lambda f: f.name))


def import_llmonkeys(src: Path, out: Path, limit: int | None = None, per_query: int | None = None) -> Path:
    """Large Language Monkeys: a directory of per-problem YAML files (samples, gt_answer, is_corrects after its
    evaluate scripts). Correctness is upstream's; final answers are extracted here for self-consistency: GSM8K samples
    by '#### N', MATH samples (Minerva format, 'The final answer is X') by the math extractor. Code and Lean tasks
    have no comparable final answer, so their pools have no answer column."""
    from ttc.replay.extras import require

    yaml = require("yaml", "ttc import llmonkeys")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    files = _yaml_files(src)[:limit]
    ma = None
    cols = {k: [] for k in ("query_id", "sample_idx", "correct", "answer")}
    queries = {"query_id": [], "dataset": []}
    kinds = set()
    seen = {}
    for f in files:
        with open(f) as fh:
            d = yaml.load(fh, Loader=loader)
        if not isinstance(d, dict):
            raise SourceError(f"{f.name}: expected a mapping with samples and is_corrects, found {type(d).__name__}")
        qid = str(d["id"]) if d.get("id") not in (None, "") else f.stem
        if qid in seen:
            raise SourceError(f"{f.name}: query id {qid!r} also comes from {seen[qid]}")
        seen[qid] = f.name
        samples = d.get("samples")
        ok = d.get("is_corrects", d.get("is_correct"))
        if not isinstance(samples, list) or not samples:
            raise SourceError(f"{f.name}: no 'samples' list")
        if ok is None:
            raise SourceError(f"{f.name}: no 'is_corrects'; run Large Language Monkeys' evaluate script on the "
                              "samples first (it adds the per-sample correctness)")
        if not isinstance(ok, list) or len(ok) != len(samples):
            raise SourceError(f"{f.name}: 'is_corrects' must hold one bool per sample ({len(samples)} samples)")
        if not all(isinstance(c, bool) or c in (0, 1) for c in ok):
            raise SourceError(f"{f.name}: 'is_corrects' must hold booleans")
        gt = d.get("gt_answer")
        if isinstance(gt, str) and "####" in gt:
            kind = "gsm8k"
        elif isinstance(gt, str):
            kind = "math"
        else:
            kind = "code-contests" if "test_cases" in d else ("minif2f" if "theorem_name" in d else "other")
        kinds.add(kind)
        if kind == "math" and ma is None:
            ma = _math_oracle()
        queries["query_id"].append(qid)
        queries["dataset"].append(kind)
        for k, (text, c) in enumerate(zip(samples[:per_query], ok[:per_query])):
            if kind == "gsm8k":
                a = _gsm8k_answer(text)
            elif kind == "math":
                a = _math_answer(ma, text)[1]
            else:
                a = None
            cols["query_id"].append(qid)
            cols["sample_idx"].append(k)
            cols["correct"].append(bool(c))
            cols["answer"].append(answer_hash(a))
    if not files:
        raise SourceError(f"{src}: --limit left no files")
    if kinds <= {"code-contests", "minif2f", "other"}:
        del cols["answer"]
    meta = {
        "name": out.name,
        "format": "llmonkeys",
        "source": str(src), "limit": limit, "per_query": per_query,
        "datasets": sorted(kinds),
        "derivation": "query_id = the YAML's 'id' or its file stem; correct = upstream 'is_corrects'; answer: GSM8K "
                      "(gold has '####') = the number after '####' without commas, $ or trailing period; MATH = "
                      "normalize_answer(extract_answer(sample)) from harvest/oracles/math_answer.py; hashed, null when "
                      "absent; code and Lean problems have no answer; no token counts or scores",
        "oracles": {"correct": "upstream is_corrects (Large Language Monkeys' evaluate scripts)"},
    }
    if ma is not None:
        meta["math_verify_version"] = ma.MATH_VERIFY_VERSION
    return write_pool(out, samples_frame(cols), meta, pl.DataFrame(queries, schema={c: pl.String for c in queries}))


def _canonical_literal(v) -> str:
    if isinstance(v, dict):
        return "{" + ",".join(sorted(f"{_canonical_literal(k)}:{_canonical_literal(x)}" for k, x in v.items())) + "}"
    if isinstance(v, (set, frozenset)):
        return "set(" + ",".join(sorted(_canonical_literal(x) for x in v)) + ")"
    if isinstance(v, list):
        return "[" + ",".join(_canonical_literal(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ",".join(_canonical_literal(x) for x in v) + ",)"
    return repr(v)


def lcb_output_answer(pred) -> str | None:
    """A predicted output literal in canonical form, so that '[1, 2]' and '[1,2]', or "'a'" and '"a"', are one answer
    (the predicted value is what self-consistency votes on in code execution). Unparseable text keeps its
    whitespace-collapsed form; empty is no answer."""
    if pred is None:
        return None
    s = str(pred).strip()
    if not s:
        return None
    try:
        return _canonical_literal(ast.literal_eval(s))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return " ".join(s.split())


def _read_records(src: Path) -> list:
    text = src.read_text()
    if not text.strip():
        raise SourceError(f"{src.name} is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]  # JSON Lines
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise SourceError(f"{src.name} must hold a JSON list of records (objects)")
    if not data:
        raise SourceError(f"{src.name} holds no records")
    return data


def import_livecodebench(src: Path, out: Path, limit: int | None = None, per_query: int | None = None) -> Path:
    """LiveCodeBench's evaluated output (`..._eval_all.json`): one record per problem with `graded_list` and either
    `code_list` (code generation) or `pred_list` (code execution: the extracted predicted outputs). Correctness is
    upstream's graded_list. Code execution answers are the predicted output literals; code generation gets no answer
    column, because two independently written programs almost never match as text, so voting on code text would
    treat every sample as its own answer."""
    records = _read_records(src)[:limit]
    exec_mode = all("pred_list" in r for r in records)
    id_key = "id" if exec_mode and all(r.get("id") not in (None, "") for r in records) else "question_id"
    cols = {k: [] for k in ("query_id", "sample_idx", "correct", "answer")}
    queries = {"query_id": [], "difficulty": [], "platform": []}
    seen = set()
    for i, r in enumerate(records):
        if r.get(id_key) in (None, ""):
            raise SourceError(f"record {i}: no {id_key!r}")
        qid = str(r[id_key])
        if qid in seen:
            raise SourceError(f"record {i}: {id_key} {qid!r} appears twice")
        seen.add(qid)
        graded = r.get("graded_list")
        if not isinstance(graded, list) or not graded:
            raise SourceError(f"record {i} ({qid}): no 'graded_list'; pass the evaluated output (..._eval_all.json, "
                              "written by `lcb_runner.runner.main --evaluate`)")
        if not all(isinstance(g, bool) or g in (0, 1) for g in graded):
            raise SourceError(f"record {i} ({qid}): 'graded_list' must hold booleans")
        listed = r.get("pred_list") if exec_mode else r.get("code_list")
        if not isinstance(listed, list) or len(listed) != len(graded):
            raise SourceError(f"record {i} ({qid}): '{'pred_list' if exec_mode else 'code_list'}' must have one entry "
                              f"per graded sample ({len(graded)})")
        queries["query_id"].append(qid)
        queries["difficulty"].append(None if r.get("difficulty") is None else str(r["difficulty"]))
        queries["platform"].append(None if r.get("platform") is None else str(r["platform"]))
        for k, (g, item) in enumerate(zip(graded[:per_query], listed[:per_query])):
            cols["query_id"].append(qid)
            cols["sample_idx"].append(k)
            cols["correct"].append(bool(g))
            cols["answer"].append(answer_hash(lcb_output_answer(item)) if exec_mode else None)
    if not exec_mode:
        del cols["answer"]
    meta = {
        "name": out.name,
        "format": "livecodebench",
        "scenario": "code execution" if exec_mode else "code generation",
        "source": str(src), "source_sha256": _sha256(src), "limit": limit, "per_query": per_query,
        "derivation": f"query_id = upstream '{id_key}'; correct = upstream graded_list; "
                      + ("answer = the predicted output (pred_list) as a canonical Python literal (whitespace and "
                         "quote style do not matter; unparseable text whitespace-collapsed), hashed; "
                         if exec_mode else "no answer column (code text is no answer to vote on); ")
                      + "no token counts (the output has none) and no scores",
        "oracles": {"correct": "upstream graded_list (LiveCodeBench's own tests)"},
    }
    return write_pool(out, samples_frame(cols), meta, pl.DataFrame(queries, schema={c: pl.String for c in queries}))


def _jsonl(path: Path) -> list[dict]:
    try:
        return [r for _, r in _records(path)]
    except SourceError as e:
        raise SourceError(f"{path.name}: {e}") from None


def _humaneval_files(src: Path) -> tuple[Path, Path]:
    """(problems, completions): the HumanEval problem file (task_id, prompt, entry_point, test) and one completions
    file (prompt, samples), recognised by their first record. SOURCE is their directory or the completions file."""
    folder = src if src.is_dir() else src.parent
    problems, completions = [], []
    for f in sorted(folder.glob("*.jsonl")):
        with open(f) as fh:
            line = fh.readline()
        try:
            first = _json_line(line, f.name) if line.strip() else {}
        except SourceError:
            continue
        if isinstance(first, dict) and {"task_id", "prompt", "entry_point", "test"} <= first.keys():
            problems.append(f)
        elif isinstance(first, dict) and {"prompt", "samples"} <= first.keys():
            completions.append(f)
    if src.is_file():
        completions = [src]
    if len(problems) != 1:
        raise SourceError(f"{folder} needs exactly one HumanEval problem file (JSONL with task_id, prompt, "
                          "entry_point, "
                          f"test); found {len(problems)}")
    if len(completions) != 1:
        names = ", ".join(f.name for f in completions) or "none"
        raise SourceError(f"{folder} needs exactly one completions file (JSONL with prompt, samples); found {names}"
                          + ("; pass the one to import as SOURCE" if completions else ""))
    return problems[0], completions[0]


def humaneval_answer(completion_body: str) -> str | None:
    """The truncated completion with all whitespace runs collapsed: identical programs (up to layout) hash alike. A
    weak proxy for 'same answer': programs that differ in text but behave alike are different answers."""
    norm = " ".join(completion_body.split())
    return norm or None


def import_humaneval(src: Path, out: Path, limit: int | None = None, per_query: int | None = None,
                     workers: int | None = None, timeout: float = 10.0, memory_mb: int = 512,
                     progress: bool = True, sandbox: str = "auto", verdict: str = "isolated") -> Path:
    """HumanEval completions without correctness (CodeT's CodeGen-16B dump): every completion is truncated at the
    HumanEval stop sequences and run against the task's test in the sandbox with a timeout; correct = the test runs to
    its end. verdict "isolated" (default): the test in a process of its own, calling the program's function across
    (code_exec.humaneval_checked); "source": HumanEval's own single program. Answers are hashes of the
    whitespace-normalised completion."""
    try:
        from .oracles.code_exec import VERDICTS, humaneval_item, humaneval_truncate
        from .oracles.sandbox import announce, isolation, run_many, timeout_warning
    except ImportError as e:
        raise SourceError(f"running HumanEval needs harvest/oracles/code_exec.py and sandbox.py ({e})") from None
    if verdict not in VERDICTS:
        raise PoolError(f"--verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    problems_file, completions_file = _humaneval_files(src)
    problems = _jsonl(problems_file)
    if not problems:
        raise SourceError(f"{problems_file.name} holds no problems")
    by_prompt = {}
    for i, r in enumerate(_jsonl(completions_file)):
        if not isinstance(r.get("samples"), list) or "prompt" not in r:
            raise SourceError(f"{completions_file.name} record {i}: needs 'prompt' and a 'samples' list")
        by_prompt[r["prompt"]] = r["samples"]
    problems = problems[:limit]
    if not any(by_prompt.get(p.get("prompt")) for p in problems):
        raise SourceError(f"{completions_file.name} holds no completions for the problems to import (every "
                          "'samples' list is empty or belongs to another prompt); there is nothing to grade")
    cols = {k: [] for k in ("query_id", "sample_idx", "correct", "answer")}
    sources = []
    for p in problems:
        for key in ("task_id", "prompt", "entry_point", "test"):
            if not isinstance(p.get(key), str):
                raise SourceError(f"{problems_file.name}: a problem has no {key!r}")
        samples = by_prompt.get(p["prompt"])
        if samples is None:
            raise SourceError(f"{p['task_id']}: no completions for its prompt in {completions_file.name}")
        for k, completion in enumerate(samples[:per_query]):
            body = humaneval_truncate(completion)
            sources.append(humaneval_item(p["prompt"], completion, p["test"], p["entry_point"], verdict))  # truncates
            cols["query_id"].append(p["task_id"])
            cols["sample_idx"].append(k)
            cols["answer"].append(answer_hash(humaneval_answer(body)))
    t0 = time.perf_counter()
    level = isolation(sandbox)  # no OS isolation is refused here (unless --sandbox guard), before any program runs
    announce(level)
    results = run_many(sources, workers=workers, timeout_s=timeout, memory_mb=memory_mb, progress=progress,
                       sandbox="strict" if level == "namespaces" else "guard")
    wall = time.perf_counter() - t0
    warnings = [w for w in [timeout_warning(results, timeout)] if w]
    cols["correct"] = [bool(r.passed) for r in results]
    statuses = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    pass1 = sum(cols["correct"]) / len(results)
    meta = {
        "name": out.name,
        "format": "humaneval",
        "model": "CodeGen-16B as run by CodeT (temperature 0.8, top-p 0.95, max 300 tokens)",
        "dataset": f"HumanEval, {len(problems)} tasks",
        "responses_per_query": max((len(by_prompt[p['prompt']][:per_query]) for p in problems), default=0),
        "source": f"{completions_file.name} and {problems_file.name} in {src if src.is_dir() else src.parent}",
        "source_sha256": {completions_file.name: _sha256(completions_file), problems_file.name: _sha256(problems_file)},
        "limit": limit, "per_query": per_query,
        "derivation": "completion truncated at the first '\\nclass', '\\ndef', '\\n#', '\\nif' or '\\nprint' "
                      "(humaneval_truncate); correct = "
                      + ("the test + check(entry_point) runs to its end in a checker process, calling prompt + "
                         "truncated completion in a process of its own and comparing plain values "
                         "(code_exec.humaneval_checked)" if verdict == "isolated" else
                         "prompt + truncated completion + test + check(entry_point) exits cleanly in one process "
                         "(HumanEval's own check)")
                      + f" in the sandbox (harvest/oracles/sandbox.py: wall-clock limit {timeout} s, "
                      f"{memory_mb} MiB memory, clean environment, temporary directory); answer = 12-hex blake2b of "
                      "the truncated completion with whitespace runs collapsed (a weak proxy: only textually identical "
                      "programs share an answer), null when empty; no token counts, no scores, no code text",
        "oracles": {"correct": "HumanEval unit tests, executed here"},
        "execution": {"programs": len(results), "statuses": statuses, "wall_s": round(wall, 1),
                      "workers": workers, "timeout_s": timeout, "memory_mb": memory_mb, "sandbox": level,
                      "verdict": verdict},
        "pass@1": round(pass1, 4),
    }
    if warnings:
        meta["warnings"] = warnings
    queries = pl.DataFrame({"query_id": [p["task_id"] for p in problems], "dataset": ["HumanEval"] * len(problems)})
    return write_pool(out, samples_frame(cols), meta, queries)


# --- today's reasoning models: BoInf's and AutoTTS's dumps (answers graded here against the gold answer) ------------

# How an answer is compared with the gold one (`--compare`): the pool.json of every graded import names it.
COMPARES = {
    "integer": "both read as integers (after normalize_answer: $, \\boxed{}, '1,000', '70.' removed; an equation "
               "'p+q=23' read as what follows its last '=') and compared as integers; an answer that is not an "
               "integer is unparsable and incorrect",
    "choice": "a multiple-choice letter (A-J, after normalize_answer: '(A)', '\\text{A}' -> 'A'), compared with the "
              "gold letter; anything else is unparsable and incorrect",
    "math": "math-verify (gold first) of the answer against the gold LaTeX, in worker processes with a timeout per "
            "grade (harvest/oracles/math_answer.py); a timed-out grade is incorrect",
    "exact": "the answer and the gold one, surrounding whitespace stripped, equal as strings",
}
_INT = re.compile(r"-?\d+")
_LETTER = re.compile(r"[A-J]")
DATASETS = {"aime2024": "AIME 2024", "aime2025": "AIME 2025", "math500": "MATH-500", "gpqa": "GPQA-Diamond",
            "gpqa_diamond": "GPQA-Diamond", "gpqa-diamond": "GPQA-Diamond"}


def dataset_slug(name: str) -> str:
    """One spelling of a data set's name across dumps: aime24 / aime2024 -> aime2024 (AutoTTS writes the short
    form, BoInf the long one), anything else lower-cased."""
    s = name.lower()
    m = re.fullmatch(r"aime(\d{2})", s)
    return f"aime20{m.group(1)}" if m else s


def infer_compare(dataset: str, golds: list) -> str:
    """The comparison a data set's answers need: AIME's are integers, GPQA's letters, MATH's LaTeX; a data set not
    named here is judged by its gold answers (all integers -> integer, all single letters -> choice, else math)."""
    s = dataset_slug(dataset)
    if s.startswith("aime"):
        return "integer"
    if s.startswith("gpqa"):
        return "choice"
    if s.startswith("math"):
        return "math"
    golds = [str(g).strip() for g in golds]
    if golds and all(_INT.fullmatch(g) for g in golds):
        return "integer"
    if golds and all(_LETTER.fullmatch(g.upper()) for g in golds):
        return "choice"
    return "math"


def _ma():
    return _math_oracle()


def canonical_answer(raw, compare: str) -> tuple[str | None, str]:
    """(the answer as the pool stores it, before hashing; its status: 'ok', 'empty' or 'unparsable'). The stored
    form is what self-consistency votes on, so spellings of one answer agree: an integer in decimal ('070' -> '70'),
    a letter upper-case, else normalize_answer's form (exact: the stripped text). An unparsable answer still votes
    (it is what the model said) but is never correct."""
    if raw is None or not str(raw).strip():
        return None, "empty"
    s = str(raw).strip()
    if compare == "exact":
        return s, "ok"
    n = _ma().normalize_answer(s)
    if n is None:
        return None, "empty"
    if compare == "integer":
        rhs = n.rsplit("=", 1)[-1]  # 'p+q=23', 'm+n=121+256=377': the value after the last '=' is the answer stated
        return (str(int(n)), "ok") if _INT.fullmatch(n) else (str(int(rhs)), "ok") if _INT.fullmatch(rhs) else \
            (n, "unparsable")
    if compare == "choice":
        return (n.upper(), "ok") if _LETTER.fullmatch(n.upper()) else (n, "unparsable")
    return n, "ok"


def canonical_gold(gold, compare: str, where: str) -> str:
    """The gold answer in the form canonical_answer gives a correct answer; a gold answer the comparison cannot read
    is refused (an AIME gold that is no integer means the wrong --compare or a broken file)."""
    if gold is None or not str(gold).strip():
        raise SourceError(f"{where}: the gold answer is empty")
    g, status = canonical_answer(gold, compare)
    if status != "ok":
        kind = "an integer" if compare == "integer" else "a letter A-J"
        raise SourceError(f"{where}: the gold answer {str(gold)[:40]!r} is not {kind} (--compare {compare}); use "
                          "--compare math or exact")
    return g


class Grader:
    """Grades a whole import at once: answers are added with their gold, and grade() returns the correctness of each,
    with math-verify run once over the distinct (answer, gold) pairs. Counts the empty and unparsable answers for
    pool.json."""

    def __init__(self, compare: str, workers: int | None = None, timeout: float = 5.0):
        self.compare, self.workers, self.timeout = compare, workers, timeout
        self.raw, self.golds, self.canon, self.gold_canon = [], [], [], []
        self.counts = {}  # group ("answers", "probes") -> {"n", "empty", "unparsable"}

    def add(self, raw, gold: str, gold_canon: str, group: str = "answers") -> str | None:
        """Record one answer; returns its canonical (unhashed) form, None when empty."""
        c, status = canonical_answer(raw, self.compare)
        counts = self.counts.setdefault(group, {"n": 0, "empty": 0, "unparsable": 0})
        counts["n"] += 1
        if status != "ok":
            counts[status] += 1
        self.raw.append(None if c is None else str(raw).strip())
        self.golds.append(gold)
        self.canon.append(c if status == "ok" else None)
        self.gold_canon.append(gold_canon)
        return c

    def grade(self) -> list[bool]:
        if self.compare != "math":
            return [c is not None and c == g for c, g in zip(self.canon, self.gold_canon)]
        ma = _ma()
        return ma.grade_many(self.raw, [str(g) for g in self.golds], workers=self.workers, timeout_s=self.timeout)

    def record(self) -> dict:
        out = {"compare": self.compare, "how": COMPARES[self.compare], **self.counts}
        if self.compare == "math":
            for c in self.counts.values():
                c["unparsable"] = None
        if self.compare == "math":
            out["math_verify_version"] = _ma().MATH_VERIFY_VERSION
            out["timeout_s"] = self.timeout
            out["unparsable_note"] = ("math-verify reads any text: an answer it cannot parse is graded incorrect, not "
                                      "counted here")
        return out


def _check_compare(compare: str, allowed=("auto", *COMPARES)) -> str:
    if compare not in allowed:
        raise InputError(f"--compare must be one of {', '.join(allowed)}, got {compare!r}")
    return compare


def _per_file(src: Path, out: Path, pattern: str, name_of, one, what: str, progress_label: str) -> Path:
    """SOURCE a file: one pool at `out`. SOURCE a directory: one pool per file matching `pattern`, each at
    out/<model>-<dataset> (name_of(file) -> (model, dataset slug)), all built in one hidden directory renamed to
    `out` at the end, so a file that fails leaves nothing behind. Every file's name and layout is checked before any
    is converted."""
    from ttc.replay.pool import new_pool_dir
    from ttc.replay.progress import progress

    if src.is_file():
        name_of(src)
        one(src, out, *name_of(src))
        return out
    files = sorted(f for f in src.glob(pattern) if f.is_file())
    if not files:
        raise SourceError(f"{src} holds no {what} files ({pattern})")
    names = {}
    for f in files:
        model, ds = name_of(f)
        key = f"{model}-{ds}"
        if key in names:
            raise SourceError(f"{f.name} and {names[key].name} are both {model} on {ds}")
        names[key] = f
    with new_pool_dir(out) as tmp, progress(len(files), progress_label, "files") as bar:
        for key, f in names.items():
            try:
                one(f, tmp / key, *name_of(f))
            except SourceError as e:
                raise SourceError(f"{f.name}: {e}") from None
            bar.advance(1)
    return out


_AUTOTTS_NAME = re.compile(r"(?P<model>.+)-(?P<dataset>[A-Za-z0-9_]+)\.json")


def autotts_name(f: Path) -> tuple[str, str]:
    m = _AUTOTTS_NAME.fullmatch(f.name)
    if not m:
        raise SourceError(f"{f.name}: an AutoTTS file is named <model>-<dataset>.json (e.g. Qwen3-4B-aime25.json)")
    return m.group("model"), dataset_slug(m.group("dataset"))


AUTOTTS_KEYS = ("question", "gold_answer", "probe_freq", "each_branch")


def _autotts_problems(f: Path) -> list:
    text = f.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, list) or not data or not all(isinstance(p, dict) for p in data) \
            or not set(AUTOTTS_KEYS) <= data[0].keys():
        found = (f"a list whose first item has {', '.join(sorted(data[0])) if isinstance(data[0], dict) else 'no keys'}"
                 if isinstance(data, list) and data else type(data).__name__ if data is not None else
                 "not one JSON document (JSON Lines?)")
        raise SourceError(f"expected AutoTTS's layout: a JSON list of problems with {', '.join(AUTOTTS_KEYS)} "
                          f"(each_branch: [[probe answers], total tokens, final answer] per trace); found {found}")
    return data


def import_autotts(src: Path, out: Path, compare: str = "auto", workers: int | None = None,
                   timeout: float = 5.0) -> Path:
    """AutoTTS's offline replay environment: per problem, traces with their probe answers (one per probe_freq tokens,
    "ERR" = none), total tokens and final answer. Each trace is a response (sample_idx = its place in each_branch);
    its probes become the list columns probe_answer / probe_tokens / probe_correct (replay/pool.py PROBES), graded
    like the final answer, so a depth policy can stop a trace at any probe."""
    _check_compare(compare)
    return _per_file(src, out, "*.json", autotts_name,
                     lambda f, o, model, ds: _autotts_one(f, o, model, ds, compare, workers, timeout),
                     "AutoTTS (<model>-<dataset>.json)", "importing autotts")


def _autotts_one(f: Path, out: Path, model: str, ds: str, compare: str, workers, timeout) -> Path:
    problems = _autotts_problems(f)
    how = infer_compare(ds, [p.get("gold_answer") for p in problems]) if compare == "auto" else compare
    g = Grader(how, workers, timeout)
    cols = {k: [] for k in ("query_id", "sample_idx", "answer", "n_tokens", "probe_answer", "probe_tokens")}
    queries = {"query_id": [], "dataset": [], "gold": []}
    probe_rows = []  # (row, number of probes): where each trace's probe grades go once graded
    freqs, n_err, n_probes, past_end = set(), 0, 0, 0
    width = len(str(len(problems) - 1))
    for qi, p in enumerate(problems):
        where = f"problem {qi}"
        for key in AUTOTTS_KEYS:
            if key not in p:
                raise SourceError(f"{where}: no {key!r}")
        freq = p["probe_freq"]
        if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
            raise SourceError(f"{where}: probe_freq must be a positive integer, found {freq!r}")
        freqs.add(freq)
        gold = str(p["gold_answer"])
        gc = canonical_gold(gold, how, where)
        qid = f"{ds}-{qi:0{width}d}"
        queries["query_id"].append(qid)
        queries["dataset"].append(DATASETS.get(ds, ds))
        queries["gold"].append(answer_hash(gc))
        branches = p["each_branch"]
        if not isinstance(branches, list) or not branches:
            raise SourceError(f"{where}: each_branch must be a non-empty list of traces")
        for k, br in enumerate(branches):
            if not (isinstance(br, list) and len(br) == 3 and isinstance(br[0], list)
                    and isinstance(br[1], int) and not isinstance(br[1], bool) and br[1] >= 0):
                raise SourceError(f"{where}, trace {k}: expected [[probe answers], total tokens, final answer], "
                                  f"found {str(br)[:80]}")
            probes, n_tok, final = br
            c = g.add(None if final == "ERR" else final, gold, gc)
            pa, graded = [], []  # graded: the probe went to the grader (None: 'ERR'), and whether it has an answer
            for a in probes:
                n_probes += 1
                if a is None or a == "ERR":
                    n_err += 1
                    pa.append(None)
                    graded.append(None)
                    continue
                pa.append(answer_hash(g.add(a, gold, gc, "probes")))
                graded.append(pa[-1] is not None)
            probe_rows.append(graded)
            offs = [freq * (i + 1) for i in range(len(probes))]
            past_end += bool(offs) and offs[-1] > n_tok
            cols["query_id"].append(qid)
            cols["sample_idx"].append(k)
            cols["answer"].append(answer_hash(c))
            cols["n_tokens"].append(n_tok)
            cols["probe_answer"].append(pa)
            cols["probe_tokens"].append(offs)
    grades = iter(g.grade())
    correct, probe_correct = [], []
    # the Grader saw, per trace, the final answer then each non-ERR probe answer, in that order
    for graded in probe_rows:
        correct.append(next(grades))
        row = []
        for x in graded:
            ok = None if x is None else next(grades)  # an empty probe answer was graded (False) but has no grade
            row.append(ok if x else None)
        probe_correct.append(row)
    cols["correct"] = correct
    cols["probe_correct"] = probe_correct
    meta = {
        "name": f"autotts-{model}-{ds}", "format": "autotts", "model": model, "dataset": DATASETS.get(ds, ds),
        "source": str(f), "source_sha256": _sha256(f),
        "responses_per_query": max(len(p["each_branch"]) for p in problems),
        "grading": {**g.record(), "probe_err": n_err, "probe_total": n_probes},
        "probe_freq": sorted(freqs),
        "probes_past_n_tokens": past_end,
        "derivation": "query_id = <dataset>-<problem index>; sample_idx = the trace's place in each_branch; answer = "
                      "the final answer in canonical form (--compare), hashed, null when empty or 'ERR'; correct = "
                      f"graded against gold_answer ({how}: {COMPARES[how]}); n_tokens = the trace's total tokens; "
                      "probe_answer = each probe's answer the same way ('ERR' -> null), probe_tokens = probe_freq x "
                      "(1, 2, ...), probe_correct = each probe answer graded as the final one (null where no answer); "
                      f"{past_end} traces have a last probe offset past their n_tokens (the source probed on its own "
                      "token count)",
        "oracles": {"correct": f"{how} comparison with gold_answer", "probe_correct": "the same, per probe"},
    }
    return write_pool(out, samples_frame(cols), meta,
                      pl.DataFrame(queries, schema={c: pl.String for c in queries}))


_BOINF_NAME = re.compile(r"analysis_(?P<dataset>[A-Za-z0-9-]+)_(?P<model>.+)\.jsonl")
BOINF_KEYS = ("problem_num", "gold_answer", "all_answers")


def boinf_name(f: Path) -> tuple[str, str]:
    m = _BOINF_NAME.fullmatch(f.name)
    if not m:
        raise SourceError(f"{f.name}: a BoInf file is named analysis_<dataset>_<model>.jsonl "
                          "(e.g. analysis_aime2025_Qwen3-4B.jsonl)")
    return m.group("model"), dataset_slug(m.group("dataset"))


def _boinf_records(f: Path) -> list:
    records = []
    with open(f) as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                r = None
            if not isinstance(r, dict) or not set(BOINF_KEYS) <= r.keys():
                found = (f"keys {', '.join(sorted(r)[:8])}" if isinstance(r, dict) else
                         "not one JSON object per line (a JSON list? AutoTTS's layout?)" if r is None
                         else type(r).__name__)
                raise SourceError(f"line {i + 1}: expected BoInf's layout, one JSON object per line with "
                                  f"{', '.join(BOINF_KEYS)} (all_answers: [[answer, completion tokens], ...]); "
                                  f"found {found}")
            records.append(r)
    if not records:
        raise SourceError("no records")
    return records


def import_boinf(src: Path, out: Path, compare: str = "auto", workers: int | None = None,
                 timeout: float = 5.0) -> Path:
    """BoInf's per-problem answer dumps (analysis_<dataset>_<model>.jsonl): every sampled answer with its completion
    tokens, in generation order, and the gold answer; graded here (the dump has no correctness)."""
    _check_compare(compare)
    return _per_file(src, out, "analysis_*.jsonl", boinf_name,
                     lambda f, o, model, ds: _boinf_one(f, o, model, ds, compare, workers, timeout),
                     "BoInf (analysis_<dataset>_<model>.jsonl)", "importing boinf")


def _boinf_one(f: Path, out: Path, model: str, ds: str, compare: str, workers, timeout) -> Path:
    records = _boinf_records(f)
    how = infer_compare(ds, [r.get("gold_answer") for r in records]) if compare == "auto" else compare
    g = Grader(how, workers, timeout)
    cols = {k: [] for k in ("query_id", "sample_idx", "answer", "n_tokens")}
    queries = {"query_id": [], "dataset": [], "gold": []}
    width = len(str(max(int(r["problem_num"]) if str(r["problem_num"]).isdigit() else 0 for r in records)))
    seen = set()
    for i, r in enumerate(records):
        where = f"line {i + 1}"
        num = r["problem_num"]
        if isinstance(num, bool) or not isinstance(num, int) or num < 0:
            raise SourceError(f"{where}: problem_num must be a non-negative integer, found {num!r}")
        if num in seen:
            raise SourceError(f"{where}: problem_num {num} appears twice")
        seen.add(num)
        gold = str(r["gold_answer"])
        gc = canonical_gold(gold, how, where)
        qid = f"{ds}-{num:0{width}d}"
        queries["query_id"].append(qid)
        queries["dataset"].append(DATASETS.get(ds, ds))
        queries["gold"].append(answer_hash(gc))
        answers = r["all_answers"]
        if not isinstance(answers, list) or not answers:
            raise SourceError(f"{where}: all_answers must be a non-empty list of [answer, completion tokens]")
        for k, pair in enumerate(answers):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int)
                    and not isinstance(pair[1], bool) and pair[1] >= 0):
                raise SourceError(f"{where}, answer {k}: expected [answer, completion tokens], found {str(pair)[:60]}")
            cols["query_id"].append(qid)
            cols["sample_idx"].append(k)
            cols["answer"].append(answer_hash(g.add(pair[0], gold, gc)))
            cols["n_tokens"].append(pair[1])
    cols["correct"] = g.grade()
    meta = {
        "name": f"boinf-{model}-{ds}", "format": "boinf", "model": model, "dataset": DATASETS.get(ds, ds),
        "source": str(f), "source_sha256": _sha256(f),
        "responses_per_query": max(len(r["all_answers"]) for r in records),
        "grading": g.record(),
        "derivation": "query_id = <dataset>-<problem_num>; sample_idx = the answer's place in all_answers (generation "
                      "order); answer = the extracted answer in canonical form (--compare), hashed, null when empty; "
                      f"correct = graded against gold_answer ({how}: {COMPARES[how]}); n_tokens = its completion "
                      "tokens; answer_counts and majority_answer are not read (they follow from all_answers)",
        "oracles": {"correct": f"{how} comparison with gold_answer"},
    }
    return write_pool(out, samples_frame(cols), meta, pl.DataFrame(queries, schema={c: pl.String for c in queries}))


def _has_gt(out: Path) -> bool:
    return "correct" in pl.read_parquet_schema(out / "samples.parquet")


def written_pools(out: Path) -> list[Path]:
    """The pools an import wrote: `out` itself, or (a directory SOURCE of a per-file format) its subdirectories."""
    out = Path(out)
    if (out / "pool.json").exists() or (out / "samples.parquet").exists():
        return [out]
    return sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith("."))


def _validate(out: Path):
    from ttc.replay.pool import PROBES

    for pool in written_pools(out):
        probes = all(c in pl.read_parquet_schema(pool / "samples.parquet") for c in PROBES)
        load_pool(pool, score="gt" if _has_gt(pool) else _first_score(pool), probes=probes)


def _first_score(out: Path) -> str:
    cols = [c for c in pl.read_parquet_schema(out / "samples.parquet") if c.startswith("score_")]
    return cols[0] if cols else "gt"


MAX_TIMEOUT_S = 3600.0  # a program's wall-clock limit: beyond it the sandbox's timers overflow (1e30 did)


def import_pool(fmt: str, src, out, options: dict | None = None) -> Path:
    """Run one adapter, as harvest/registry.py's IMPORTERS declares it, and validate what it wrote (a pool that does
    not load is an adapter bug). `options` are the adapter's keywords, refused unless its entry takes them."""
    from ttc.replay.extras import MissingExtra

    if fmt not in IMPORTERS:
        raise PoolError(f"unknown import format {fmt!r}; choose from {', '.join(IMPORTERS)}")
    entry = IMPORTERS[fmt]
    src, out = Path(src), Path(out)
    if entry.directory:
        if not src.exists():
            raise PoolError(f"{src} does not exist")
    elif not src.is_file():
        raise PoolError(f"{src} is not a file")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PoolError(f"{out} exists and is not an empty directory; choose a new --out")
    options = dict(options or {})
    for name, value in options.items():
        flag = option_flag(name)
        if name not in entry.options:
            raise PoolError(f"{fmt} does not take {flag}")
        if name in ("limit", "per_query", "workers") and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise PoolError(f"{flag} must be a positive integer, got {value!r}")
        if name == "timeout" and not (isinstance(value, (int, float)) and 0 < value <= MAX_TIMEOUT_S):
            raise PoolError(f"--timeout must be a positive, finite number of seconds (at most {MAX_TIMEOUT_S:g}, an "
                            f"hour per program), got {value!r}")
    try:
        entry.load()(src, out, **options)
        _validate(out)  # every score column, and the probes, too
    except MissingExtra:  # an optional dependency (pyyaml, math-verify) is missing: its one-line message as it is
        shutil.rmtree(out, ignore_errors=True)
        raise
    except SourceError as e:  # readable, but not the promised shape: the message names record and key
        shutil.rmtree(out, ignore_errors=True)
        raise PoolError(f"{src} is not a valid {fmt} source: {e}") from None
    except PoolError as e:  # what was written is not a valid pool: say why and leave nothing behind
        shutil.rmtree(out, ignore_errors=True)
        raise PoolError(f"the imported pool is not valid: {e}") from None
    except UserError:  # the project's own refusals (a full disk, --sandbox strict here, ...): their message as it is
        shutil.rmtree(out, ignore_errors=True)
        raise
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError, json.JSONDecodeError,
            pl.exceptions.PolarsError, OverflowError, RecursionError) as e:
        shutil.rmtree(out, ignore_errors=True)
        raise PoolError(f"{src} does not look like {fmt} ({entry.doc}): {type(e).__name__}: {e}") from None
    except Exception as e:
        if type(e).__module__.startswith("yaml"):  # a YAML syntax error: PyYAML's exceptions are not ValueErrors
            shutil.rmtree(out, ignore_errors=True)
            raise PoolError(f"{src} does not look like {fmt} ({entry.doc}): "
                            f"{str(e).splitlines()[0]}") from None
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


CODET_UPSTREAM = ("microsoft/CodeT at commit 35f54d60b152cc31d134b788e702878ad613d9f7, CodeT/data/generated_data/"
                  "HumanEval_codegen16B_temp0.8_topp0.95_num100_max300_code_solution.jsonl and "
                  "CodeT/data/dataset/HumanEval_for_code_generation.jsonl")


def build_humaneval_data(shared: Path, out: Path) -> Path:  # pragma: no cover - minutes of sandboxed execution
    """data/humaneval-codegen16b-100: the CodeT dump run here, with the upstream source named in pool.json."""
    import_pool("humaneval", shared / "humaneval-codegen16b-100", out)
    meta = json.loads((out / "pool.json").read_text())
    meta.update({"name": "humaneval-codegen16b-100", "source": CODET_UPSTREAM,
                 "dataset": "HumanEval, 164 tasks (OpenAI), 100 completions each"})
    atomic_write_json(meta, out / "pool.json")
    return out


def main():  # pragma: no cover - rebuilds data/ from ../shared/data
    """`python -m harvest.importers` rebuilds the quick pools; add `humaneval` to rerun the HumanEval tests too."""
    import sys

    root = Path(__file__).resolve().parent.parent
    shared = root.parent / "shared" / "data" / "pools"
    for name in ("lastletters-gpt35-40", "math500-llama3.1-8b-48"):  # write_pool writes only new directories
        shutil.rmtree(root / "data" / name, ignore_errors=True)
    import_lastletters(shared / "lastletters-gpt35-40" / "T0.7.jsonl", root / "data" / "lastletters-gpt35-40")
    import_math500_llama(shared / "math500-llama3.1-8b-48" / "pool.jsonl", root / "data" / "math500-llama3.1-8b-48")
    if "humaneval" in sys.argv[1:]:
        shutil.rmtree(root / "data" / "humaneval-codegen16b-100", ignore_errors=True)
        build_humaneval_data(shared, root / "data" / "humaneval-codegen16b-100")


if __name__ == "__main__":  # pragma: no cover
    main()
