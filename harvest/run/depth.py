"""`ttc run --policy parallel-probe | cmc`: the depth policies live (docs/run.md, "Depth policies"). Their driver is
replay.live.run_live_depth; here is its source over a backend that decodes a trace a segment at a time
(`backend.trace(prompt, seed, sampling, stop)`, TransformersBackend's TraceStream), the run's pool (one row per
trace started: its probes as `ttc import autotts` writes them, its end, or finish_reason "open" for a trace the
policy left running), and the resume from that pool.

Trace k of a query is the sample k of `ttc harvest` (seed query_seed(seed, query id) + k), each segment
--probe-every tokens, so a trace the policy runs to its end is the whole sample. The pool is one part file,
rewritten whole (atomically) when the run ends, stops on an error or Ctrl-C, and every --flush-s seconds: a trace is
one row that grows. A rerun serves every segment the pool holds without generating it, and continues an open trace
by decoding it again up to where it stopped (the same tokens: its own generator) and on from there; the policy
makes the same decisions, so the resumed run is the run that was interrupted."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..live import PromptCache
from ..types import Query, Response
from .request import PART_PREFIX, RunError

PART = f"{PART_PREFIX}00000.parquet"  # the run's one part file (a trace's row grows: the part is rewritten)


class _Trace:
    """One trace: its segments so far (probes: (offset, answer, correct, the probe's text: the trace, PROBE_PROMPT and
    the probe's continuation; None when it came from an earlier process's row); end: (Response, answer,
    correct) or None), how many of them the driver has been served in this process, and its decoding stream."""

    def __init__(self, probes=(), end=None):
        self.probes: list[tuple[int, Any, bool, str | None]] = list(probes)
        self.end: tuple[Response, Any, bool] | None = end
        self.served = 0
        self.stream = None

    @property
    def tokens(self) -> int:
        return self.end[0].n_tokens if self.end is not None else self.probes[-1][0] if self.probes else 0


class BackendTraces(PromptCache):
    """replay.live's TraceSource over a backend with trace(): segment(i, k) serves trace k of query i's next segment
    from what the run holds (an earlier process's pool), else decodes it (every `every` tokens a probe, graded as
    the final answers are: --oracle gt against the gold answer, sc not graded). Accounting as BackendSource's:
    generated (traces started by this process), completion_tokens (decoded by it, a resumed trace's replayed
    prefix included), calls (segments decoded), backend_s / score_s."""

    def __init__(self, backend: Any, queries: Sequence[Query], prompt: Callable[[Query], str], sampling, *,
                 every: int, oracle: str, stop: Sequence[str] = (), grade_timeout_s: float = 5.0,
                 prompt_len: Callable[[str], int] | None = None, cap: int = 0):
        from ..live import ANSWER_RULES

        self.backend, self.queries, self.prompt, self.sampling = backend, list(queries), prompt, sampling
        self.every, self.oracle, self.stop, self.grade_timeout_s = int(every), oracle, tuple(stop), grade_timeout_s
        self.prompt_len, self.rules, self.cap = prompt_len, ANSWER_RULES, int(cap)
        # paid[(i, k)]: the segments of trace k the run paid for (set when it ends: run_live_depth's `paid`); item()
        # shows a trace as the run left it, the pool rows every segment generated
        self.paid: dict[tuple[int, int], int] = {}
        self.traces: list[list[_Trace]] = [[] for _ in self.queries]
        self._verdicts: list[dict] = [{} for _ in self.queries]
        self._prompts: dict[int, str] = {}
        self._prompt_tokens: dict[int, int] = {}
        self.generated = self.completion_tokens = self.prompt_tokens = self.calls = self.failed_calls = 0
        self.backend_s = self.score_s = 0.0

    # ---- replay.live.TraceSource
    @property
    def segment_tokens(self) -> int:
        """No segment runs more than --probe-every tokens past its trace's last probe (TraceStream.segment): the
        driver then asks for the segments a run surely reaches together (replay.live.TraceSource)."""
        return self.every

    def segments(self, wants):
        """Several traces' next segments (replay.live.TraceSource.segments): served or decoded one after the other,
        each trace holding its own decoding state (TraceStream); a backend that decodes several traces in one batch
        would take the list here."""
        return [self.segment(i, k) for i, k in wants]

    def segment(self, i: int, k: int):
        from ttc.replay.live import Segment

        ts = self.traces[i]
        if k > len(ts):
            raise ValueError(f"query {i}: trace {k} asked for before trace {len(ts)}")
        if k == len(ts):
            ts.append(_Trace())
        t = ts[k]
        e = t.served
        t.served += 1
        if e < len(t.probes):
            off, a, ok, _ = t.probes[e]
            return Segment(off, a, ok, False)
        if e == len(t.probes) and t.end is not None:
            return Segment(t.end[0].n_tokens, t.end[1], t.end[2], True)
        if e > len(t.probes):
            raise ValueError(f"query {i} trace {k}: a segment asked for after its end")
        self._decode(i, k, t)
        if t.end is not None:
            return Segment(t.end[0].n_tokens, t.end[1], t.end[2], True)
        off, a, ok, _ = t.probes[-1]
        return Segment(off, a, ok, False)

    def _decode(self, i: int, k: int, t: _Trace):
        from ..backends import probe_value
        from ..pipeline import query_seed
        from ..scoring import response_answer

        q = self.queries[i]
        t0 = time.perf_counter()
        if t.stream is None:
            t.stream = self.backend.trace(self.prompt_of(i), query_seed(self.sampling.seed, q.query_id) + k,
                                          self.sampling, stop=self.stop)
            if t.probes:  # an open trace of an earlier process: decoded again up to where it stopped
                t.stream.advance_to(t.probes[-1][0])
                self.completion_tokens += t.probes[-1][0]
            else:
                self.generated += 1
                self.prompt_tokens += self.prompt_tokens_of(i) or 0
        before = t.stream.tokens
        r, probe = t.stream.segment(self.every)
        self.backend_s += time.perf_counter() - t0
        self.calls += 1
        self.completion_tokens += r.n_tokens - before
        t0 = time.perf_counter()
        if probe is None:
            a = response_answer(self.rules.get(q.task, "gt"), r.text, r.finish_reason)
            t.end, t.stream = (r, a, self._grade(i, a)), None
        else:
            a = probe_value(probe)
            t.probes.append((r.n_tokens, a, self._grade(i, a), r.text))
        self.score_s += time.perf_counter() - t0

    def _grade(self, i: int, answer) -> bool:
        if answer is None or self.oracle != "gt":
            return False
        cache = self._verdicts[i]
        if answer not in cache:
            from ..oracles.math_answer import grade

            cache[answer] = bool(grade(answer, self.queries[i].gold, timeout_s=self.grade_timeout_s))
        return cache[answer]

    # ---- what harvest/run/output.py reads of a source
    def ready(self, i: int) -> int:
        return sum(1 for t in self.traces[i] if t.probes or t.end is not None)

    def item(self, i: int, k: int, paid: bool = True) -> tuple[Response, Any]:
        """Trace k as a response: its end, or (open) the answer its last probe holds: as the run paid for it (paid),
        else as far as it was generated; its text always as far as it was generated (the segment that did not fit
        and ended the run is the only difference). A trace still running at the cap ends there, holding its probe
        (finish_reason "cap", as --trace-cap writes it)."""
        from ttc.replay.live import Observed

        t = self.traces[i][k]
        p = self.paid.get((i, k), len(t.probes) + (t.end is not None)) if paid else len(t.probes) + (t.end is not None)
        if t.end is not None and p > len(t.probes):
            r, a, ok = t.end
        else:
            off, a, ok, probe = t.probes[p - 1]
            r = Response(text=t.end[0].text if t.end is not None else _open_text(self, i, k), n_tokens=off,
                         finish_reason="cap" if self.cap and off == self.cap else "open")
        return r, Observed(bool(ok), 1.0 if ok and self.oracle == "gt" else 0.0, a, r.n_tokens)

    def preload(self, i: int, rows: Sequence[dict]):
        """An earlier process's traces of query i (its pool rows, in sample order)."""
        for row in rows:
            probes = [(int(o), a, bool(ok) if ok is not None else False, None)
                      for o, a, ok in zip(row["probe_tokens"] or [], row["probe_answer"] or [],
                                          row["probe_correct"] or [], strict=True)]
            end = None
            if row["finish_reason"] not in ("open", "cap"):  # (a trace at the cap is open: the run ended it there)
                end = (Response(row["text"] or "", int(row["n_tokens"]), row["finish_reason"] or "unknown"),
                       row["answer"], bool(row.get("correct") or False))
            t = _Trace(probes, end)
            t.text = row["text"] or ""  # (an open trace's text: its last probe's)
            self.traces[i].append(t)
            for _, a, ok, _ in probes + ([(0, end[1], end[2], None)] if end else []):
                if a is not None and self.oracle == "gt":
                    self._verdicts[i][a] = ok


def _open_text(src: BackendTraces, i: int, k: int) -> str:
    """An open trace's text: its last probe's (the trace, PROBE_PROMPT and the probe, as it was decoded), or the
    text its row held when that probe came from an earlier process."""
    t = src.traces[i][k]
    if t.probes[-1][3] is not None:
        return t.probes[-1][3]
    return getattr(t, "text", "") or ""


def trace_rows(plan, src: BackendTraces) -> Any:
    """The run's pool: one row per trace started (query_id, sample_idx, text, n_tokens, finish_reason, answer,
    correct for gt, and the probes: probe_answer, probe_tokens, probe_correct, as `ttc import autotts` writes them)."""
    import polars as pl

    from ttc.replay.pool import samples_frame

    cols: dict[str, list] = {"query_id": [], "sample_idx": [], "text": [], "n_tokens": [], "finish_reason": [],
                             "answer": []}
    gt = plan.req.oracle == "gt"
    if gt:
        cols["correct"] = []
    pa, pt, pc = [], [], []
    for i, q in enumerate(src.queries):
        for k, t in enumerate(src.traces[i]):
            if not (t.probes or t.end is not None):
                continue
            r, o = src.item(i, k, paid=False)
            cols["query_id"].append(q.query_id)
            cols["sample_idx"].append(k)
            cols["text"].append(r.text)
            cols["n_tokens"].append(int(r.n_tokens))
            cols["finish_reason"].append(r.finish_reason)
            ended = r.finish_reason not in ("open", "cap")  # (no final answer: it holds its last probe's)
            cols["answer"].append(None if not ended or o.answer is None else str(o.answer))
            if gt:
                cols["correct"].append(bool(o.correct) if ended else False)
            pa.append([None if a is None else str(a) for _, a, _, _ in t.probes])
            pt.append([int(off) for off, _, _, _ in t.probes])
            pc.append([None if a is None else bool(ok) for _, a, ok, _ in t.probes] if gt else
                      [None if a is None else False for _, a, _, _ in t.probes])
    return samples_frame(cols).with_columns(pl.Series("probe_answer", pa, pl.List(pl.String)),
                                            pl.Series("probe_tokens", pt, pl.List(pl.Int64)),
                                            pl.Series("probe_correct", pc, pl.List(pl.Boolean)))


class _TraceWriter:
    """Rewrites the run's one part file with every trace so far (atomically: a kill leaves the last whole one),
    and pool.json with this process's record; at the end, on an error, and every flush_s seconds of segments."""

    def __init__(self, plan, meta: dict, src: BackendTraces, snapshot: Callable[[], dict], flush_s: float):
        self.plan, self.meta, self.src, self.snapshot, self.flush_s = plan, meta, src, snapshot, flush_s
        self.last, self.write_s, self.parts = time.perf_counter(), 0.0, 0

    def tick(self):
        if time.perf_counter() - self.last >= self.flush_s:
            self.flush()

    def flush(self):
        from ttc.replay.pool import atomic_write_json, atomic_write_parquet

        t0 = time.perf_counter()
        if any(self.src.ready(i) for i in range(len(self.src.queries))):
            atomic_write_parquet(trace_rows(self.plan, self.src), self.plan.pool / "samples" / PART)
            self.parts += 1
        self.meta["runs"][-1].update(self.snapshot())
        atomic_write_json(self.meta, self.plan.pool / "pool.json")
        self.last = time.perf_counter()
        self.write_s += self.last - t0

    def flush_quietly(self):
        try:
            self.flush()
        except Exception:
            pass


def _read_traces(plan) -> dict[str, list[dict]]:
    """An earlier process's traces (the part file), per query id in sample order."""
    from ttc.replay.pool import PoolError, verify_file

    f = plan.pool / "samples" / PART
    if not f.exists():
        return {}
    try:
        df = verify_file(f)
    except PoolError as e:
        raise RunError(f"{e}; delete {f} and rerun to generate its traces again") from None
    missing = [c for c in ("probe_answer", "probe_tokens", "probe_correct") if c not in df.columns]
    if missing:
        raise RunError(f"{f} has no {missing[0]!r} column: it is not a depth run's pool")
    out: dict[str, list[dict]] = {}
    for r in df.sort("query_id", "sample_idx").iter_rows(named=True):
        out.setdefault(r["query_id"], []).append(r)
    for qid, rows in out.items():
        if [r["sample_idx"] for r in rows] != list(range(len(rows))):
            raise RunError(f"{f}: query {qid!r}'s traces are not samples 0, 1, ...; delete it and rerun")
    return out


def execute_depth(plan, backend: Any, tokenizer: Any = None, *, prompt_len=None, argv=None,
                  echo: Callable[[str], None] = print):
    """A depth policy's run (execute's batch mode for parallel-probe and cmc): resume from --out's traces, run
    replay.live.run_live_depth over a BackendTraces, write the pool, results and run.json as every run does."""
    from ttc.replay.live import run_live_depth
    from ttc.replay.rng import query_keys, query_order

    from .execute import Executor, _prompt_fn
    from .output import RunOutcome, _results, _summary, _write_pool_end, _write_results

    req, out, queries = plan.req, Path(plan.req.out), plan.queries
    index = {q.query_id: i for i, q in enumerate(queries)}
    prompt_fn = _prompt_fn(plan, tokenizer, index)
    run = Executor(plan, backend, prompt_len=prompt_len, argv=argv, open_scorer=False)
    earlier = _read_traces(plan)
    src = BackendTraces(backend, queries, prompt_fn, req.sampling, every=req.probe_every, oracle=req.oracle,
                        stop=plan.template_info.get("stop") or (), grade_timeout_s=req.grade_timeout_s,
                        prompt_len=prompt_len, cap=plan.config.trace_cap)
    for qid, rows in earlier.items():
        if qid in index:
            src.preload(index[qid], rows)
    resumed = bool(earlier)
    if resumed:
        echo(f"{out}: resuming: {sum(len(v) for v in earlier.values()):,} traces of {len(earlier):,} queries already "
             "started")

    def snapshot() -> dict:
        return {"responses": src.generated, "completion_tokens": src.completion_tokens,
                "prompt_tokens": src.prompt_tokens if prompt_len is not None else None, "backend_calls": src.calls,
                "failed_calls": 0, "backend_s": round(src.backend_s, 3), "score_s": round(src.score_s, 3)}

    writer = _TraceWriter(plan, run.meta, src, snapshot, req.flush_s)
    run.writer = writer
    rank, _ = query_order(query_keys([q.query_id for q in queries]), req.sampling.seed)
    t_loop = time.perf_counter()

    class _Ticking:  # the writer's clock between segments
        segment_tokens = src.segment_tokens

        def segment(self, i, k):
            s = src.segment(i, k)
            writer.tick()
            return s

        def segments(self, wants):  # (one at a time, BackendTraces' own way: the clock ticks between them)
            return [self.segment(i, k) for i, k in wants]

    with run.guarded():
        depth = run_live_depth(_Ticking(), [req.max_per_query] * len(queries), rank, config=plan.config,
                               budget_total=plan.budget_total)
    writer.flush()
    t_loop = time.perf_counter() - t_loop
    src.paid = {(i, k): p for i, q in enumerate(depth["paid"]) for k, p in enumerate(q)}
    live = as_live(depth, src)
    load_s = run.load_s()
    src.backend_s -= load_s
    overhead_s = max(0.0, t_loop - src.backend_s - src.score_s - load_s)
    run.close(snapshot(), overhead_s=round(overhead_s, 3))
    results = _results(plan, src, live)
    summary = _summary(plan, src, live, results, run.meta, run.record, time.perf_counter() - run.t_start)
    summary["this_process"].update(overhead_s=round(overhead_s, 3), write_s=round(writer.write_s, 3),
                                   parts=writer.parts, plan_s=None, slots=0)
    _write_pool_end(plan, src, live, run.meta, backend, prompt_fn, tokenizer, None)
    _write_results(plan, results, summary, run.meta)
    return RunOutcome(out=out, results=results, summary=summary, live=live, resumed=resumed,
                      generated_now=src.generated)


def as_live(depth: dict, src: BackendTraces) -> dict:
    """run_live_depth's output in run_live's form, as harvest/run/output.py reads it: n_drawn the traces paid for;
    the sc selection the first of them whose answer (its end's, or an open trace's last probe's) is the query's;
    covered: one of them holds a correct answer where the run left it (kernel.depth_tally's coverage)."""
    n = len(depth["started"])
    sel, covered = [], []
    for i in range(n):
        started = depth["started"][i]
        held = [src.item(i, k)[1] for k in range(started)]
        k = next((k for k, o in enumerate(held) if depth["answer"][i] is not None and o.answer == depth["answer"][i]),
                 -1)
        sel.append(k)
        covered.append(any(o.correct for o in held))
    return {"n_drawn": depth["started"], "answered": depth["answered"], "capped": [False] * n,
            "exhausted_q": [False] * n, "failed": {}, "selected": {"sc": sel, "bon": sel, "weighted": sel},
            "sel_sc": depth["correct"], "sel_bon": depth["correct"], "sel_weighted": depth["correct"],
            "covered": covered, "samples_used": depth["samples_used"], "tokens_used": depth["tokens_used"],
            "driver_s": depth["driver_s"], "runs": depth["segments"]}
