"""Adapters from public sample dumps to the pool format (figure-only: ids, correctness, scores, hashed answers).

Each adapter reads the dump as published (see ../shared/data/README.md) and writes a pool directory. Answers are
stored as short hashes of the normalised answer: equality is all self-consistency and entropy need, and no
third-party text ends up in the pool.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import polars as pl


def answer_hash(normalised: str | None) -> str | None:
    if normalised is None:
        return None
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=6).hexdigest()


def write_pool(out: Path, samples: pl.DataFrame, meta: dict, queries: pl.DataFrame | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    samples.write_parquet(out / "samples.parquet", compression="zstd", statistics=True)
    if queries is not None:
        queries.write_parquet(out / "queries.parquet", compression="zstd")
    (out / "pool.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


_LL_ANSWER = re.compile(r"answer is\s*:?\s*(.*)", re.IGNORECASE)


def lastletters_answer(text: str) -> str | None:
    """The letters after the last 'The answer is', lower-cased; None when absent or empty."""
    m = _LL_ANSWER.findall(text)
    if not m:
        return None
    a = re.sub(r"[^a-z]", "", m[-1].split("\n")[0].lower())
    return a or None


def import_lastletters(src: Path, out: Path) -> Path:
    """ESC's GPT-3.5 last-letter dump (T0.7.jsonl): 500 questions x 40 responses, answers extracted here."""
    rows = []
    queries = []
    with open(src) as f:
        for qi, line in enumerate(f):
            r = json.loads(line)
            qid = f"ll-{qi:03d}"
            gold = re.sub(r"[^a-z]", "", r["answer"].lower())
            queries.append({"query_id": qid, "dataset": "last_letters", "gold": answer_hash(gold)})
            for k, text in enumerate(r["generated_answer"]):
                a = lastletters_answer(text)
                rows.append({"query_id": qid, "sample_idx": k, "correct": a == gold, "answer": answer_hash(a)})
    meta = {
        "name": "lastletters-gpt35-40",
        "model": "gpt-3.5-turbo (OpenAI), temperature 0.7",
        "dataset": "last-letter concatenation, 500 questions",
        "responses_per_query": 40,
        "source": "Yiwei98/ESC at commit 799157a4d21e6d97e86fcd541f5c85d8e3daae0a, GPT3.5_result/last_letters/T0.7.jsonl",
        "derivation": "answer = letters after the last 'The answer is', lower-cased, non-letters dropped "
                      "(null when absent); correct = answer == gold normalised the same way; answers and gold "
                      "stored as 12-hex blake2b hashes; no text, no token counts",
        "oracles": {"correct": "exact match with the gold answer"},
    }
    return write_pool(out, pl.DataFrame(rows), meta, pl.DataFrame(queries))


def import_math500_llama(src: Path, out: Path) -> Path:
    """MATH-500 x 48 responses of Llama-3.1-8B-Instruct with correctness and mean token log-probability."""
    rows = []
    queries = []
    with open(src) as f:
        for line in f:
            r = json.loads(line)
            if r.get("missing"):
                continue
            qid = f"math500-{r['i']:03d}"
            queries.append({"query_id": qid, "dataset": "MATH-500", "level": r["level"]})
            for k, (c, s) in enumerate(zip(r["c"], r["s"])):
                rows.append({"query_id": qid, "sample_idx": k, "correct": c == "1",
                             "score_conf": math.exp(s)})
    meta = {
        "name": "math500-llama3.1-8b-48",
        "model": "meta/llama-3.1-8b-instruct",
        "dataset": "MATH-500 (499 of 500 problems; one had no upstream file)",
        "responses_per_query": 48,
        "source": "Jason-Wang313/inference-value-theorem at commit 7e434d08858fd74a59e897bdcfbf9a93662851f4, "
                  "results/measurements/8B/problem_<i>.json",
        "derivation": "correct as published; score_conf = exp(mean token log-probability), the geometric-mean "
                      "token probability of the response (a confidence signal, not a reward model)",
        "oracles": {"correct": "upstream grading", "score_conf": "exp(mean token logprob)"},
    }
    return write_pool(out, pl.DataFrame(rows), meta, pl.DataFrame(queries))


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
    with open(src) as f:
        for line in f:
            r = json.loads(line)
            qid = f"math-{int(r['idx']):03d}"
            queries.append({"query_id": qid, "dataset": "MATH (100-problem subset)", "level": str(r.get("level"))})
            for k, (pred, ok, rm) in enumerate(zip(r["pred"], r["score"], r["pred_score"])):
                raw = float(rm[0] if isinstance(rm, list) else rm)
                rows.append({"query_id": qid, "sample_idx": k, "correct": bool(ok),
                             "answer": answer_hash(qwen_answer(pred)), "score_rm": 1.0 / (1.0 + math.exp(-raw))})
    meta = {
        "name": "qwen-math-rm-100x8",
        "model": "not named upstream (Qwen2.5-Math evaluation example)",
        "dataset": "MATH, 100 test problems",
        "responses_per_query": 8,
        "source": "QwenLM/Qwen2.5-Math at commit a45202bd16f1ec06f433442dc1152d0074773465, "
                  "evaluation/data/eval_rm_maj_example/math_cot_100.jsonl",
        "derivation": "correct = upstream 'score'; answer = upstream 'pred' without whitespace or surrounding $, "
                      "hashed; score_rm = logistic(pred_score), a monotone map of the unbounded reward to [0, 1]",
        "oracles": {"correct": "upstream grading", "score_rm": "logistic(upstream reward-model score)"},
    }
    return write_pool(out, pl.DataFrame(rows), meta, pl.DataFrame(queries))


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


def import_generic(src: Path, out: Path, query_id: str, correct: str | None = None, answer: str | None = None,
                   scores: dict | None = None, n_tokens: str | None = None, sample_idx: str | None = None,
                   hash_answers: bool = False) -> Path:
    """Any table with one row per response, or one row per query whose mapped columns hold lists (exploded, and
    numbered in list order). Columns are renamed to the pool format; sample_idx defaults to row order per query."""
    df = read_table(src)
    scores = scores or {}
    mapping = {query_id: "query_id"}
    for col, new in ((correct, "correct"), (answer, "answer"), (n_tokens, "n_tokens"), (sample_idx, "sample_idx")):
        if col:
            mapping[col] = new
    for name, col in scores.items():
        mapping[col] = f"score_{name}"
    missing = [c for c in mapping if c not in df.columns]
    if missing:
        raise ValueError(f"column {missing[0]!r} not in {src.name} (columns: {', '.join(df.columns)})")
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
        if hash_answers:
            df = df.with_columns(pl.col("answer").map_elements(answer_hash, return_dtype=pl.String))
    meta = {"name": out.name, "source": str(src), "derivation": f"generic import, columns {mapping}"
            + ("; answers hashed" if hash_answers else "")}
    return write_pool(out, df, meta)


IMPORTERS = {
    "lastletters-esc": (import_lastletters, "ESC's GPT-3.5 last-letter dump (T0.7.jsonl)"),
    "math500-ivt": (import_math500_llama, "MATH-500 x 48 Llama-3.1-8B correctness + logprob (pool.jsonl)"),
    "qwen-math-rm": (import_qwen_math_rm, "Qwen2.5-Math reward-model example (math_cot_100.jsonl)"),
    "generic": (import_generic, "a CSV / JSONL / Parquet table mapped with the column flags"),
}


def _has_gt(out: Path) -> bool:
    return "correct" in pl.read_parquet_schema(out / "samples.parquet")


def _first_score(out: Path) -> str:
    cols = [c for c in pl.read_parquet_schema(out / "samples.parquet") if c.startswith("score_")]
    return cols[0] if cols else "gt"


def import_pool(fmt: str, src, out, options: dict | None = None) -> Path:
    """Run one adapter and validate what it wrote (a pool that does not load is an adapter bug)."""
    from .pool import PoolError, load_pool

    if fmt not in IMPORTERS:
        raise PoolError(f"unknown import format {fmt!r}; choose from {', '.join(IMPORTERS)}")
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise PoolError(f"{src} is not a file")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PoolError(f"{out} exists and is not an empty directory; choose a new --out")
    try:
        IMPORTERS[fmt][0](src, out, **(options or {}))
        for col in load_pool(out, score="gt" if _has_gt(out) else _first_score(out)).score_columns:
            load_pool(out, score=col)  # every score column must be valid, not just the default one
    except PoolError as e:  # what was written is not a valid pool: say why and leave nothing behind
        shutil.rmtree(out, ignore_errors=True)
        raise PoolError(f"the imported pool is not valid: {e}") from None
    except (KeyError, TypeError, ValueError, json.JSONDecodeError, pl.exceptions.PolarsError) as e:
        shutil.rmtree(out, ignore_errors=True)
        raise PoolError(f"{src} does not look like {fmt} ({IMPORTERS[fmt][1]}): {type(e).__name__}: {e}") from None
    return out


def main():  # pragma: no cover - rebuilds data/ from ../shared/data
    root = Path(__file__).resolve().parent.parent
    shared = root.parent / "shared" / "data" / "pools"
    import_lastletters(shared / "lastletters-gpt35-40" / "T0.7.jsonl", root / "data" / "lastletters-gpt35-40")
    import_math500_llama(shared / "math500-llama3.1-8b-48" / "pool.jsonl", root / "data" / "math500-llama3.1-8b-48")


if __name__ == "__main__":  # pragma: no cover
    main()
