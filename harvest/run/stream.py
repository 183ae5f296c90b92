"""--stream, the executor's second mode: each request of a Batch input file (or stdin) runs as it comes with the
streaming policy alone, under a budget rate (STREAM_RULE), and its result is appended to results.jsonl (and
pool/stream.jsonl, the full row) as soon as it is done."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..types import Query
from .batch import _append, _read_rows, batch_line, parse_batch_line, render_batch_prompt, shown_prompt, stream_lines
from .execute import Executor
from .output import (
    RunOutcome,
    _created,
    _result_row,
    _schema,
    _stream_pool_end,
    stream_summary,
    write_summary,
)
from .plan import RunPlan
from .request import TRUTH_ORACLES, RunError

# this process's totals over the stream's queries: the BackendSource attribute (or live output) each is summed from
_STATS = (("generated", "generated"), ("completion_tokens", "completion_tokens"), ("prompt_tokens", "prompt_tokens"),
          ("calls", "calls"), ("failed_calls", "failed_calls"), ("backend_s", "backend_s"), ("score_s", "score_s"))


def execute_stream(plan: RunPlan, backend: Any, tokenizer: Any = None, *, lines=None,
                   prompt_len: Callable[[str], int] | None = None, argv: Sequence[str] | None = None,
                   echo: Callable[[str], None] = print) -> RunOutcome:
    """--stream: each request of `lines` ((number, text) pairs; default stream_lines(--batch, --stream-idle)) runs
    as it comes. A request line that cannot be run (malformed, a repeated custom_id) gets an `invalid_request` error
    line and the stream goes on. A killed stream rerun with the same input skips the lines already done and ends as
    an uninterrupted one; results.parquet and run.json are written when the stream ends."""
    from ttc.replay.outputs import atomic_file, write_parquet

    req, out = plan.req, Path(plan.req.out)
    lines = stream_lines(req.batch, req.stream_idle_s) if lines is None else lines
    run = Executor(plan, backend, prompt_len=prompt_len, argv=argv, open_scorer=True)  # a new request may come
    state = plan.pool / "stream.jsonl"
    rows = _read_rows(state)
    with atomic_file(state) as tmp:  # drop a torn last line
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    created = _created(run.meta)
    with atomic_file(out / "results.jsonl") as tmp:  # the lines of the rows done, whole
        tmp.write_text("".join(json.dumps(batch_line(plan, r, created), ensure_ascii=False) + "\n" for r in rows))
    done_lines = max((r["line"] for r in rows), default=0)
    if rows:
        echo(f"{out}: resuming the stream after line {done_lines} ({sum(r['status'] != 'invalid' for r in rows)} "
             "queries done)")
    stream = _Stream(run, tokenizer, rows, created)
    run.start_writer(stream.snapshot)
    with open(state, "a", encoding="utf-8") as fstate, open(out / "results.jsonl", "a", encoding="utf-8") as fout:
        for n, text in lines:
            if n > done_lines and text.strip():
                row = stream.one(n, text)
                _append(fstate, row)
                _append(fout, batch_line(plan, row, created))
                rows.append(row)

    # ---- the end of the stream: the pool's queries, results.parquet, run.json
    stats = stream.stats
    stats["backend_s"] -= run.load_s()
    run.close(stream.snapshot())
    _stream_pool_end(plan, stream.queries, stream.prompts, run.meta, backend, run.scorer, stats["score_s"])
    import polars as pl

    write_parquet(pl.DataFrame([{k: v for k, v in r.items() if k != "line"} for r in rows], schema=_schema()),
                  out / "results.parquet", "run")
    summary = stream_summary(plan, rows, run.meta, stats, load_s=run.load_s(),
                             wall_s=time.perf_counter() - run.t_start, prompt_counted=prompt_len is not None)
    write_summary(out, summary)
    return RunOutcome(out=out, results=rows, summary=summary, live={}, resumed=bool(done_lines),
                      generated_now=stats["generated"])


class _Stream:
    """The stream's state over its queries: the ids seen, the queries done (t), the budget spent, this process's
    totals; one() runs one request line and returns its row."""

    def __init__(self, run: Executor, tokenizer: Any, rows: list[dict], created: int):
        from ..registry import BACKENDS

        self.run, self.plan, self.req, self.tokenizer, self.rows = run, run.plan, run.req, tokenizer, rows
        self.server = BACKENDS[self.req.backend].chat == "server"
        self.seen = {r["query_id"] for r in rows if r["query_id"] is not None}
        self.t = sum(r["status"] != "invalid" for r in rows)
        self.spent = sum(r["responses"] if self.req.unit == "samples" else r["completion_tokens"] for r in rows)
        self.stats = {"generated": 0, "completion_tokens": 0, "prompt_tokens": 0, "calls": 0, "failed_calls": 0,
                      "backend_s": 0.0, "score_s": 0.0, "engine_s": 0.0, "runs": 0}
        self.queries: list[Query] = []
        self.prompts: dict[str, str] = {}
        self.last_note = time.perf_counter()

    def snapshot(self) -> dict:
        s = self.stats
        return {"responses": s["generated"], "completion_tokens": s["completion_tokens"],
                "prompt_tokens": s["prompt_tokens"] if self.run.prompt_len is not None else None,
                "backend_calls": s["calls"], "failed_calls": s["failed_calls"],
                "backend_s": round(s["backend_s"], 3), "score_s": round(s["score_s"], 3), "queries_done": self.t}

    def one(self, n: int, text: str) -> dict:
        req, where = self.req, f"{self.req.batch}:{n}"
        try:
            q, prompt, _ = parse_batch_line(text, where, n, model=req.model, sampling=req.sampling,
                                            oracle=req.oracle)
            if q.query_id in self.seen:
                raise RunError(f"{where}: custom_id {q.query_id!r} came before; custom ids must be unique")
            prompt_text = render_batch_prompt(prompt, self.tokenizer, chat=req.chat, server=self.server)
        except RunError as e:
            return self._invalid(n, text, e)
        self.seen.add(q.query_id)
        run, writer = self.run, self.run.writer
        made: list = []  # this query's source, built below with on_call as an argument; on_call reads it

        def on_call(records, failures):
            src = made[0]
            writer.on_call(records, failures, [q], lambda i: src.ready(i), lambda i, k: src.columns(i, k))

        source = run.source([q], lambda _q: prompt_text, on_call)
        made.append(source)
        run.preload(source, {q.query_id: 0})
        bank = int(round(req.budget * (self.t + 1))) - self.spent
        with run.guarded():
            live = run.allocate(source, [0], budget_total=bank)
        row = {**_result_row(q, 0, source, live, self.plan.select, req.oracle in TRUTH_ORACLES), "line": n}
        writer.flush()  # the query's responses are in the pool before its result says it is done
        self.queries.append(q)
        self.prompts[q.query_id] = shown_prompt(prompt_text)
        self.t += 1
        self.spent += int(live["samples_used"] if req.unit == "samples" else live["tokens_used"])
        for key, attr in _STATS:
            self.stats[key] += getattr(source, attr)
        self.stats["engine_s"] += live["driver_s"]
        self.stats["runs"] += live["runs"]
        self._note(row)
        return row

    def _invalid(self, n: int, text: str, e: RunError) -> dict:
        """A request line that cannot be run: its row, with its custom_id when it has a usable one."""
        cid = None
        try:
            cid = json.loads(text).get("custom_id")
            cid = cid if isinstance(cid, str) and cid.strip() and cid not in self.seen else None
        except Exception:
            pass
        return {"query_id": cid, "status": "invalid", "answered": False, "capped": False, "exhausted": False,
                "error": str(e), "responses": 0, "generated": 0, "completion_tokens": 0, "prompt_tokens": None,
                "selected": -1, "returned": -1, "answer": None, "text": None, "finish_reason": None, "correct": None,
                "covered": None, "line": n}

    def _note(self, row: dict) -> None:
        """Every 10 s with --progress, a line on stderr: how far the stream got and at what rate."""
        req, s = self.req, self.stats
        if not req.progress or time.perf_counter() - self.last_note < 10:
            return
        self.last_note = time.perf_counter()
        b = max(s["backend_s"], 1e-9)
        answered = sum(r["answered"] for r in self.rows) + bool(row["answered"])
        print(f"stream: {self.t:,} queries, {self.spent:,} {req.unit} spent ({self.spent / self.t:.2f} per query, "
              f"rate {req.budget:g}), {answered:,} answered; {s['generated'] / b:,.1f} responses/s, "
              f"{s['completion_tokens'] / b:,.0f} tokens/s", file=sys.stderr, flush=True)
