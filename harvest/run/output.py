"""What a `ttc run` leaves: one result per query (results.jsonl in the OpenAI Batch output shape, results.parquet),
run.json (its outcome and cost over every process that worked on it), the pool's last files (queries.parquet, the
final pool.json with the backend's and the oracle's records), and the lines the command prints."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..types import Query
from .batch import batch_line, shown_prompt
from .request import FORMAT, SCORER_ORACLES, STREAM_RULE, TRUTH_ORACLES

if TYPE_CHECKING:
    from .plan import RunPlan


@dataclass
class RunOutcome:
    out: Path
    results: list[dict]          # one per query, the results.parquet row
    summary: dict                # run.json
    live: dict                   # replay.live.run_live's output
    resumed: bool
    generated_now: int

    def frame(self):
        """The results as a polars DataFrame: results.parquet's rows (a stream's invalid request lines included)."""
        import polars as pl

        return pl.DataFrame([{k: v for k, v in r.items() if k != "line"} for r in self.results], schema=_schema())


STATUS = ("answered", "capped", "exhausted", "failed", "budget")


def _schema():
    import polars as pl

    return {"query_id": pl.String, "status": pl.String, "answered": pl.Boolean, "capped": pl.Boolean,
            "exhausted": pl.Boolean, "error": pl.String, "responses": pl.Int64, "generated": pl.Int64,
            "completion_tokens": pl.Int64, "prompt_tokens": pl.Int64, "selected": pl.Int64, "returned": pl.Int64,
            "answer": pl.String, "text": pl.String, "finish_reason": pl.String, "correct": pl.Boolean,
            "covered": pl.Boolean}



def _result_row(q: Query, i: int, source, live: dict, rule: str, gt: bool) -> dict:
    """Query i's result (a results.parquet row; results.jsonl is built from it)."""
    n = int(live["n_drawn"][i])
    items = [source.item(i, k) for k in range(n)]
    k = int(live["selected"][rule][i])
    failed = live["failed"].get(i)
    status = ("answered" if live["answered"][i] else "capped" if live["capped"][i] else
              "failed" if failed else "exhausted" if live["exhausted_q"][i] else "budget")
    plen = source.prompt_tokens_of(i) if n else None  # None: not counted (no tokenizer, no server count)
    back = k if k >= 0 else (0 if n else -1)  # no valid answer to select (sc, weighted): the first response
    r, o = items[back] if back >= 0 else (None, None)
    return {
        "query_id": q.query_id, "status": status, "answered": bool(live["answered"][i]),
        "capped": bool(live["capped"][i]), "exhausted": bool(live["exhausted_q"][i]), "error": failed,
        "responses": n, "generated": source.ready(i),
        "completion_tokens": sum(int(it[0].n_tokens) for it in items),
        "prompt_tokens": None if source.prompt_len is None or (n and plen is None) else (plen or 0) * n,
        "selected": k, "returned": back, "answer": None if o is None or o.answer is None else str(o.answer),
        "text": None if r is None else r.text, "finish_reason": None if r is None else r.finish_reason,
        "correct": (bool(live[f"sel_{rule}"][i]) if k >= 0 else False) if gt else None,
        "covered": bool(live["covered"][i]) if gt else None,
    }


def _results(plan: RunPlan, source, live: dict) -> list[dict]:
    """One row per query, in input order."""
    truth = plan.req.oracle in TRUTH_ORACLES
    return [_result_row(q, i, source, live, plan.select, truth) for i, q in enumerate(plan.queries)]


def _summary(plan: RunPlan, source, live: dict, results: list[dict], meta: dict, record: dict,
             seconds: float) -> dict:
    req = plan.req
    n = len(plan.queries)
    counts = {s: sum(r["status"] == s for r in results) for s in STATUS}
    runs = meta.get("runs", [])
    total = lambda key: _total(runs, key)  # noqa: E731

    gt = req.oracle in TRUTH_ORACLES
    return {
        "format": FORMAT, "out": str(req.out), "model": req.model, "backend": req.backend,
        "queries": n, "policy": plan.config.policy, "config": plan.config.label(), "prior": req.prior,
        "side": plan.side_column, "oracle": req.oracle,
        "select": plan.select, "unit": req.unit, "budget_per_query": req.budget, "budget_total": plan.budget_total,
        "max_per_query": req.max_per_query, "seed": req.sampling.seed,
        "spent": {"samples": int(live["samples_used"]), "tokens": int(live["tokens_used"])},
        "outcome": {**counts, "coverage": sum(r["covered"] for r in results) / n if gt else None,
                    "accuracy": sum(bool(r["correct"]) for r in results) / n if gt else None},
        "cost": {  # the whole run, over every process that worked on it
            "responses_generated": sum(source.ready(i) for i in range(n)),
            "responses_used": int(sum(live["n_drawn"])),
            "completion_tokens_generated": sum(int(source.item(i, k)[0].n_tokens) for i in range(n)
                                               for k in range(source.ready(i))),
            "completion_tokens_used": sum(r["completion_tokens"] for r in results),
            "prompt_tokens": total("prompt_tokens"),
            "backend_calls": total("backend_calls"), "backend_s": total("backend_s"), "score_s": total("score_s"),
            "load_s": total("load_s"), "processes": len(runs)},
        "this_process": {
            "responses_generated": source.generated, "completion_tokens": source.completion_tokens,
            "prompt_tokens": source.prompt_tokens if source.prompt_len is not None else None,
            "backend_calls": source.calls, "failed_calls": source.failed_calls,
            "backend_s": round(source.backend_s, 3), "score_s": round(source.score_s, 3),
            "load_s": round(float(getattr(source.backend, "load_s", 0.0)), 3),
            "engine_s": round(live["driver_s"], 3), "engine_runs": live["runs"], "wall_s": round(seconds, 3)},
        "failures": {plan.queries[i].query_id: msg for i, msg in live["failed"].items()},
        "started": (runs[0] if runs else record).get("started"), "finished": _now(),
    }


def _record_backend(meta: dict, backend) -> None:
    """The backend's provenance in pool.json (not before it loaded); provenance must not kill a run, but a failure
    to get it is recorded."""
    info = getattr(backend, "info", None)
    if callable(info):
        try:
            b = dict(info())
            if b.get("loaded") is not False:
                meta["backend"] = b
        except Exception as e:
            meta["backend"] = {"error": f"backend.info() failed: {type(e).__name__}: {e}"}


def _write_pool_end(plan: RunPlan, source, live: dict, meta: dict, backend, prompt_fn, tokenizer, scorer=None):
    """queries.parquet (the queries with a response), the final pool.json (provenance, oracle record), and a
    check that replay loads the pool."""
    from ttc.replay.pool import atomic_write_json, atomic_write_parquet, load_pool

    from ..pipeline import promoted_fields, queries_frame

    have = [q for i, q in enumerate(plan.queries) if source.ready(i) > 0]
    prompts = {}
    for i, q in enumerate(plan.queries):
        if source.ready(i) > 0:
            try:
                prompts[q.query_id] = shown_prompt(source.prompt_of(i))
            except Exception:  # rendering needs the tokenizer; a prompt that cannot be rendered is left out
                prompts[q.query_id] = None
    if have:
        atomic_write_parquet(queries_frame(have, prompts, promoted_fields(plan.queries),
                                           str(plan.generation["dataset"].get("source"))),
                             plan.pool / "queries.parquet")
    _record_backend(meta, backend)
    _record_oracle(plan, meta, scorer, source.score_s)
    if source.prompt_len is not None:  # each query's prompt length, for the results of a rerun that sends nothing
        meta["prompt_tokens"] = {q.query_id: source.prompt_tokens_of(i) for i, q in enumerate(plan.queries)
                                 if source.ready(i) > 0 and source.prompt_tokens_of(i) is not None}
    meta["complete"] = True
    meta["queries_written"] = len(have)
    meta["finished"] = _now()
    atomic_write_json(meta, plan.pool / "pool.json")
    if have and plan.score_column is not None:  # replay must read what was written, --prior and --side included
        load_pool(plan.pool, score=plan.score_column, prior=plan.req.prior, side=plan.side_column, quiet=True)

def _created(meta: dict) -> int:
    """The Batch output lines' `created`: when the run's first process started (now, if that is unknown)."""
    started = (meta.get("runs") or [{}])[0].get("started")
    try:
        from datetime import datetime

        return int(datetime.fromisoformat(started).timestamp())
    except Exception:
        return int(time.time())


def _write_results(plan: RunPlan, results: list[dict], summary: dict, meta: dict):
    import polars as pl

    from ttc.replay.outputs import atomic_file, write_parquet

    out = Path(plan.req.out)
    created = _created(meta)
    with atomic_file(out / "results.jsonl") as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in results:
                f.write(json.dumps(batch_line(plan, row, created), ensure_ascii=False) + "\n")
    write_parquet(pl.DataFrame(results, schema=_schema()), out / "results.parquet", "run")
    write_summary(out, summary)


def _stream_pool_end(plan: RunPlan, queries: list[Query], prompts: dict, meta: dict, backend, scorer=None,
                     score_s: float = 0.0):
    """queries.parquet: the queries of this process with a response, added to those an earlier process listed."""
    import polars as pl

    from ttc.replay.pool import atomic_write_json, atomic_write_parquet

    from ..pipeline import part_files, queries_frame

    have = set()
    files = part_files(plan.pool)
    if files:
        have = set(pl.scan_parquet(files).select("query_id").unique().collect()["query_id"].to_list())
    frames = []
    qf = plan.pool / "queries.parquet"
    if qf.exists():
        frames.append(pl.read_parquet(qf))
    new = [q for q in queries if q.query_id in have]
    if new:
        frames.append(queries_frame(new, prompts, {}, str(plan.generation["dataset"].get("source"))))
    if frames:
        df = pl.concat(frames, how="diagonal_relaxed").unique("query_id", keep="last", maintain_order=True)
        atomic_write_parquet(df.filter(pl.col("query_id").is_in(list(have))), qf)
    _record_backend(meta, backend)
    if plan.req.oracle in SCORER_ORACLES:
        _record_oracle(plan, meta, scorer, score_s)
    meta["complete"] = True
    meta["finished"] = _now()
    atomic_write_json(meta, plan.pool / "pool.json")


def stream_summary(plan: RunPlan, rows: list[dict], meta: dict, stats: dict, *, load_s: float, wall_s: float,
                   prompt_counted: bool) -> dict:
    """run.json of a --stream run: its valid rows' outcome, the cost over every process, this process's stats."""
    req, cfg = plan.req, plan.config
    gt = req.oracle in TRUTH_ORACLES
    valid = [r for r in rows if r["status"] != "invalid"]
    counts = {st: sum(r["status"] == st for r in valid) for st in STATUS}
    runs = meta.get("runs", [])
    return {
        "format": FORMAT, "stream": True, "out": str(req.out), "model": req.model, "backend": req.backend,
        "queries": len(valid), "invalid_lines": len(rows) - len(valid), "policy": cfg.policy, "config": cfg.label(),
        "oracle": req.oracle, "select": plan.select, "unit": req.unit, "budget_per_query": req.budget,
        "budget_total": None, "rule": STREAM_RULE, "max_per_query": req.max_per_query, "seed": req.sampling.seed,
        "spent": {"samples": sum(r["responses"] for r in valid),
                  "tokens": sum(r["completion_tokens"] for r in valid)},
        "outcome": {**counts, "coverage": sum(bool(r["covered"]) for r in valid) / len(valid) if gt and valid
                    else None,
                    "accuracy": sum(bool(r["correct"]) for r in valid) / len(valid) if gt and valid else None},
        "cost": {"responses_generated": sum(r["generated"] for r in valid),
                 "responses_used": sum(r["responses"] for r in valid),
                 "completion_tokens_used": sum(r["completion_tokens"] for r in valid),
                 "prompt_tokens": _total(runs, "prompt_tokens"), "backend_calls": _total(runs, "backend_calls"),
                 "backend_s": _total(runs, "backend_s"), "score_s": _total(runs, "score_s"),
                 "load_s": _total(runs, "load_s"), "processes": len(runs)},
        "this_process": {"responses_generated": stats["generated"], "completion_tokens": stats["completion_tokens"],
                         "prompt_tokens": stats["prompt_tokens"] if prompt_counted else None,
                         "backend_calls": stats["calls"], "failed_calls": stats["failed_calls"],
                         "backend_s": round(stats["backend_s"], 3), "score_s": round(stats["score_s"], 3),
                         "load_s": round(load_s, 3), "engine_s": round(stats["engine_s"], 3),
                         "engine_runs": stats["runs"], "wall_s": round(wall_s, 3)},
        "failures": {r["query_id"]: r["error"] for r in valid if r["status"] == "failed"},
        "started": (runs[0] if runs else {}).get("started"), "finished": _now(),
    }


def _total(runs: list[dict], key: str):
    """A cost summed over the run's processes (None when one did not count it)."""
    vals = [r.get(key, 0) for r in runs]
    return None if any(v is None for v in vals) else round(sum(vals), 3)


def write_summary(out: Path, summary: dict) -> None:
    from ttc.replay.outputs import atomic_file

    with atomic_file(out / "run.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")


def _now() -> str:
    from ..pipeline import now

    return now()


def _record_oracle(plan: RunPlan, meta: dict, scorer: "Any | None", score_s: float):
    """pool.json's `oracles` (and `answers`) for the run's oracle: the record `ttc score` writes, so `ttc info`,
    `ttc score` and replay read a live run's columns as a scored pool's."""
    oracle = plan.req.oracle
    if oracle == "gt":
        from ..scoring import ScoreOptions, oracle_config

        meta["oracles"] = {"gt": {**oracle_config("gt", ScoreOptions(timeout_s=plan.req.grade_timeout_s)),
                                  "scored": "live, one response at a time (ttc run)"}}
    elif oracle in ("sc", "confidence"):
        meta["oracles"] = {}
        meta["answers"] = (f"answer column: the final answers ttc run --oracle {oracle} "
                           f"{'compared' if oracle == 'sc' else 'read (as --oracle sc does)'} (no ground truth)")
    else:
        rec = scorer.record(score_s) if scorer is not None else None
        if rec is not None or oracle not in (meta.get("oracles") or {}):  # a rerun that scored nothing keeps it
            meta["oracles"] = {oracle: rec if rec is not None else {**plan.oracle_config, "scored": None}}
        if oracle in ("prm", "judge"):
            meta["answers"] = (f"answer column: the final answers ttc run --oracle {oracle} read (as --oracle sc "
                               "does; no ground truth)")




# ---------------------------------------------------------------------------------------------------------------
# What the command prints


def report_lines(o: RunOutcome) -> list[str]:
    s = o.summary
    oc, cost, me = s["outcome"], s["cost"], s["this_process"]
    unit = s["unit"]
    spent = s["spent"][unit]
    scope = (f"a rate of {s['budget_per_query']:g} {unit}/query over {s['queries']:,} queries as they came"
             + (f" ({s['invalid_lines']} invalid request lines)" if s.get("invalid_lines") else "")
             if s.get("stream") else f"budget {s['budget_per_query']:g} {unit}/query ({s['budget_total']:,} in all) "
             f"over {s['queries']:,} queries")
    lines = [f"{s['config']} with --oracle {s['oracle']}: {scope}; spent {spent:,} "
             f"({s['spent']['samples']:,} responses, {s['spent']['tokens']:,} tokens)",
             f"queries: {oc['answered']:,} answered, {oc['budget']:,} stopped by the budget, {oc['capped']:,} capped, "
             f"{oc['exhausted']:,} exhausted (--max-per-query), {oc['failed']:,} failed"
             + (f"; coverage {oc['coverage']:.3f}, accuracy ({s['select']}) {oc['accuracy']:.3f}"
                if oc["accuracy"] is not None else "")]
    gen = cost["responses_generated"]
    pt = cost["prompt_tokens"]
    lines.append(f"cost: {gen:,} responses generated ({gen - cost['responses_used']:,} not used), "
                 f"{cost.get('completion_tokens_generated', cost['completion_tokens_used']):,} completion tokens"
                 + (f", {pt:,} prompt tokens" if pt is not None else ", prompt tokens not counted (no tokenizer)")
                 + f"; {cost['backend_calls']:,} backend calls, backend {cost['backend_s']:,.1f} s, scoring "
                 f"{cost['score_s']:,.1f} s" + (f" over {cost['processes']} processes" if cost["processes"] > 1
                                                  else ""))
    if me["responses_generated"]:
        b = max(me["backend_s"], 1e-9)
        lines.append(f"this process: {me['responses_generated']:,} responses in {me['backend_calls']:,} calls "
                     f"({me['responses_generated'] / b:,.1f} responses/s, {me['completion_tokens'] / b:,.0f} "
                     f"tokens/s of backend time)" + (
                         f"; everything but the backend and the oracle {me['overhead_s']:.3f} s "
                         f"({me['overhead_s'] / b:.2%} of the backend time): {me['engine_runs']} engine runs "
                         f"{me['engine_s']:.3f} s, writing {me['parts']} parts {me['write_s']:.3f} s"
                         if "overhead_s" in me else ""))
    else:
        lines.append(f"this process generated nothing: every response was already in {o.out / 'pool'}")
    if s["failures"]:
        first = next(iter(s["failures"].items()))
        lines.append(f"failed: {len(s['failures'])} queries kept what they had after their requests kept failing "
                     f"(e.g. {first[0]!r}: {first[1]}); see results.jsonl")
    lines.append(f"wrote {o.out}/results.jsonl, results.parquet, run.json and the pool {o.out}/pool "
                 f"(ttc info {o.out}/pool)")
    return lines
