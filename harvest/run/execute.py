"""Executing a `ttc run` plan: one executor whose run is checkpointed in the run's pool (part files written as
responses come, failures in pool.json at once; a killed run rerun resumes from them), in two modes: a batch, whose
queries share one budget (execute), and --stream, each query as it comes under a budget rate (stream.py). Both
open the run's directory, score through the same oracle, build the same generating source and write the same
pool; they differ in how queries arrive and how results are written."""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

from ttc.replay.errors import InputError

from ..types import Query, Response
from .batch import render_batch_prompt
from .output import RunOutcome, _now, _results, _summary, _write_pool_end, _write_results
from .plan import RunPlan, free_slots, planned, planned_counts
from .request import CRASH_ENV, FORMAT, PART_PREFIX, SCORER_ORACLES, TRUTH_ORACLES, RunError


class Executor:
    """What a run does in either mode: the oracle's model loaded (before anything is written, unless the run is
    finished: `open_scorer`), the run's directory opened with what an earlier process left (meta, record, cache),
    its part writer, the generating source of a set of queries, the live driver guarded so that an error or Ctrl-C
    writes what was generated, and this process's record at the end."""

    def __init__(self, plan: RunPlan, backend: Any, *, prompt_len: Callable[[str], int] | None,
                 argv: Sequence[str] | None, open_scorer: bool):
        self.plan, self.req, self.backend, self.prompt_len = plan, plan.req, backend, prompt_len
        self.t_start = time.perf_counter()
        self.scorer = _Scorer(plan) if plan.req.oracle in SCORER_ORACLES else None
        if self.scorer is not None and open_scorer:
            self.scorer.open()
        self.meta, self.record, self.cache = _open_run(plan, argv)
        self.writer: _PartWriter | None = None

    def start_writer(self, snapshot: Callable[[], dict]) -> _PartWriter:
        self.writer = _PartWriter(self.plan, self.meta, snapshot, flush_s=self.req.flush_s,
                                  min_responses=self.req.part_min)
        return self.writer

    def source(self, queries: Sequence[Query], prompt_fn: Callable[[Query], str], on_call, *, slots: int = 0):
        """A harvest.live.BackendSource of `queries`: the run's sampling, oracle, retries, signals and side column;
        `slots` requests in flight one query at a time (0: a backend call per round)."""
        from .. import run as package  # (tests swap backend_stops there)
        from ..live import BackendSource

        req, plan = self.req, self.plan
        return BackendSource(self.backend, queries, prompt_fn, req.sampling, lookahead=req.lookahead,
                             oracle=None if self.scorer is not None else _source_oracle(req.oracle),
                             stop=plan.template_info.get("stop") or (), retries=req.retries,
                             retry_delay_s=req.retry_delay_s, grade_timeout_s=req.grade_timeout_s,
                             prompt_len=self.prompt_len, on_call=on_call, scorer=self.scorer,
                             side_column=plan.side_column, slots=slots, stops=package.backend_stops(req),
                             token_cap=plan.config.trace_cap, depth=_depth(plan), **_signal_options(plan))

    def preload(self, source, index: dict[str, int]) -> None:
        """What an earlier process left for these queries: their responses, prompt counts and failures."""
        for qid, items in self.cache.items():
            if qid in index:
                source.preload(index[qid], items)
        for qid, n in (self.meta.get("prompt_tokens") or {}).items():  # counted before (a server's count)
            if qid in index and n is not None:
                source.known_prompt_tokens(index[qid], n)
        for qid, f in self.meta["failures"].items():
            if qid in index:
                source.fail[index[qid]] = f.get("error") or "failed"

    @contextmanager
    def guarded(self):
        """Generation: on the way out of an error or Ctrl-C, this process's record is closed and what was generated
        is written (a rerun resumes from it), and the error goes on."""
        try:
            yield
        except BaseException:
            self.record.update(finished=_now(), seconds=round(time.perf_counter() - self.t_start, 3))
            self.writer.flush_quietly()
            raise

    def allocate(self, source, rank: Sequence[int], *, budget_total: int, prior=None, on_run=None) -> dict:
        """replay.live.run_live over `source` with the run's configuration."""
        from ttc.replay.live import run_live

        req = self.req
        return run_live(source, [req.max_per_query] * len(rank), rank, config=self.plan.config,
                        budget_total=budget_total, conf=req.conf, prior=prior, on_run=on_run)

    def load_s(self) -> float:
        """A LazyBackend's model load, inside its first call's time: taken out of the backend time."""
        return float(getattr(self.backend, "load_s", 0.0))

    def close(self, snapshot: dict, **more) -> None:
        self.record.update(finished=_now(), seconds=round(time.perf_counter() - self.t_start, 3),
                           load_s=round(self.load_s(), 3), **snapshot, **more)


def execute(plan: RunPlan, backend: Any, tokenizer: Any = None, *, prompt_len: Callable[[str], int] | None = None,
            argv: Sequence[str] | None = None, echo: Callable[[str], None] = print, lines=None) -> RunOutcome:
    """Run the plan: resume from what `--out` holds, allocate live, write the results, run.json and the pool.
    `backend` is any harvest.types.Backend (a harvest.live.LazyBackend loads the model only when a response is
    needed); `tokenizer` renders chat prompts; prompt_len(prompt) counts a prompt's tokens (None: not counted).
    A --stream plan runs in the stream mode (stream.execute_stream; `lines`: its input lines)."""
    if plan.req.stream:
        from .stream import execute_stream

        return execute_stream(plan, backend, tokenizer, lines=lines, prompt_len=prompt_len, argv=argv, echo=echo)
    from ttc.replay.policies import DEPTH_POLICIES

    if plan.config.policy in DEPTH_POLICIES:  # traces a segment at a time (harvest/run/depth.py)
        from .depth import execute_depth

        return execute_depth(plan, backend, tokenizer, prompt_len=prompt_len, argv=argv, echo=echo)
    from ttc.replay.rng import query_keys, query_order

    req, out, queries = plan.req, Path(plan.req.out), plan.queries
    index = {q.query_id: i for i, q in enumerate(queries)}
    prompt_fn = _prompt_fn(plan, tokenizer, index)  # a request the backend cannot take is refused here
    run = Executor(plan, backend, prompt_len=prompt_len, argv=argv, open_scorer=not plan.meta.get("complete"))
    meta, cache = run.meta, run.cache
    resumed = bool(cache) or bool(meta["failures"])

    def snapshot() -> dict:
        return {"responses": source.generated, "completion_tokens": source.completion_tokens,
                "prompt_tokens": source.prompt_tokens if prompt_len is not None else None,
                "backend_calls": source.calls, "failed_calls": source.failed_calls,
                "backend_s": round(source.backend_s, 3), "score_s": round(source.score_s, 3)}

    writer = run.start_writer(snapshot)
    on_call = lambda records, failures: writer.on_call(records, failures, queries, source.ready,  # noqa: E731
                                                       source.columns)
    source = run.source(queries, prompt_fn, on_call, slots=free_slots(req))
    run.preload(source, index)
    if resumed:
        echo(f"{out}: resuming: {sum(len(v) for v in cache.values()):,} responses of {len(cache):,} queries already "
             "generated" + (f", {len(meta['failures'])} queries failed" if meta["failures"] else ""))
    rank, _ = query_order(query_keys([q.query_id for q in queries]), req.sampling.seed)
    t_loop = time.perf_counter()
    live, plan_s = _allocate(run, source, rank)
    writer.flush()
    t_loop = time.perf_counter() - t_loop

    # ---- results
    load_s = run.load_s()
    source.backend_s -= load_s
    # everything but the backend and the oracle: engine runs, taking responses, writing the pool
    overhead_s = max(0.0, t_loop - source.backend_s - source.score_s - load_s)
    run.close(snapshot(), overhead_s=round(overhead_s, 3))
    results = _results(plan, source, live)
    summary = _summary(plan, source, live, results, meta, run.record, time.perf_counter() - run.t_start)
    summary["this_process"].update(overhead_s=round(overhead_s, 3), write_s=round(writer.write_s, 3),
                                   parts=writer.parts, plan_s=None if plan_s is None else round(plan_s, 3),
                                   slots=source.slots)
    if run.scorer is not None:
        summary["this_process"]["scorer_load_s"] = round(run.scorer.load_s, 3)
    _write_pool_end(plan, source, live, meta, backend, prompt_fn, tokenizer, run.scorer)
    _write_results(plan, results, summary, meta)
    return RunOutcome(out=out, results=results, summary=summary, live=live, resumed=resumed,
                      generated_now=source.generated)


def _prompt_fn(plan: RunPlan, tokenizer: Any, index: dict[str, int]) -> Callable[[Query], str]:
    """Each query's prompt: a batch request's messages as the backend takes them (every request checked now, so
    that one the backend cannot take is refused before anything is written), or the template's rendering."""
    from ..prompts import render
    from ..registry import BACKENDS

    req = plan.req
    server = BACKENDS[req.backend].chat == "server"
    if plan.messages is not None:
        for m in plan.messages:
            render_batch_prompt(m, tokenizer, chat=req.chat, server=server)
        return lambda q: render_batch_prompt(plan.messages[index[q.query_id]], tokenizer, chat=req.chat,
                                             server=server)
    render_chat = False if server else req.chat
    return lambda q: render(plan.template, q, tokenizer, chat=render_chat)


def _allocate(run: Executor, source, rank) -> tuple[dict, float | None]:
    """The batch's allocation under a progress bar: a planned allocation generated up front (in as many backend
    calls as there are distinct counts), then the live driver. Returns its output and the seconds planning took."""
    from ttc.replay.progress import progress

    plan, req = run.plan, run.req
    spent = [0]
    unit_idx = "samples" if req.unit == "samples" else "tokens"
    with progress(plan.budget_total, f"run ({len(plan.queries)} queries)", req.unit, enabled=req.progress,
                  rates=("responses", "tokens")) as bar:
        def on_run(state):
            delta = state[unit_idx] - spent[0]
            made = source.generated - bar.amounts.get("responses", 0)
            toks = source.completion_tokens - bar.amounts.get("tokens", 0)
            if delta > 0 or made > 0:
                bar.label = f"run ({state['answered']}/{len(plan.queries)} answered)"
                bar.advance(max(delta, 0), responses=made, tokens=toks)
                spent[0] = state[unit_idx]

        plan_s = None
        with run.guarded():
            if planned(plan):
                t_plan = time.perf_counter()
                source.plan(planned_counts(plan, source, rank))
                plan_s = time.perf_counter() - t_plan
            live = run.allocate(source, rank, budget_total=plan.budget_total, prior=plan.prior, on_run=on_run)
    return live, plan_s


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: the run's directory, the responses written as they come, read back by a resume


def _open_run(plan: RunPlan, argv: Sequence[str] | None) -> tuple[dict, dict, dict]:
    """Create (or reopen) the run's directory: its marker, pool.json with this process's run record, and the
    responses an earlier process wrote (by query id). Returns (meta, record, cache)."""
    from ttc.replay.outputs import DIR_MARK
    from ttc.replay.pool import atomic_write_json

    from ..pipeline import library_versions

    req, out, pool = plan.req, Path(plan.req.out), plan.pool
    (pool / "samples").mkdir(parents=True, exist_ok=True)
    if not (out / DIR_MARK).exists():
        atomic_write_json({"command": "run"}, out / DIR_MARK)
    cache = _read_cache(plan) if plan.meta else {}
    meta = dict(plan.meta) if plan.meta else {"format": FORMAT, "created": _now(), "failures": {}, "runs": []}
    meta.update({"format": FORMAT, "name": f"{out.name}/pool", "model": req.model, "dataset": plan.generation[
        "dataset"].get("source"), "generation": plan.generation, "allocation": plan.allocation,
        "complete": False,
        "layout": "samples/part-XXXXX.parquet: one backend call each (query_id, sample_idx, text, n_tokens, "
                  "finish_reason, answer, correct); queries.parquet: the queries with a response"
                  + ("; stream.jsonl: each finished query's result, in the order they came" if req.stream else "")})
    if not req.stream:
        meta["expected_query_ids"] = [q.query_id for q in plan.queries]
    meta.setdefault("failures", {})
    meta.setdefault("runs", [])
    meta["versions"] = library_versions()
    record = {"started": _now(), "argv": list(argv if argv is not None else sys.argv), "responses": 0,
              "completion_tokens": 0, "prompt_tokens": 0, "backend_calls": 0, "backend_s": 0.0, "score_s": 0.0}
    meta["runs"] = list(meta["runs"]) + [record]
    atomic_write_json(meta, pool / "pool.json")
    return meta, record, cache


def _part_number(p: Path) -> int:
    try:
        return int(p.stem[len(PART_PREFIX):])
    except ValueError:
        return -1


def _read_cache(plan: RunPlan) -> dict[str, list[tuple[Response, Any]]]:
    """The responses a previous process of this run wrote (part files), per query id in sample order."""
    from ttc.replay.live import Observed
    from ttc.replay.pool import PoolError, remove_stale_temps, verify_file

    from ..pipeline import part_files

    remove_stale_temps(plan.pool / "samples")
    remove_stale_temps(plan.pool)
    ids = None if plan.req.stream else {q.query_id for q in plan.queries}
    rows: dict[str, dict[int, tuple]] = {}
    for f in part_files(plan.pool):
        try:
            df = verify_file(f)
        except PoolError as e:
            raise RunError(f"{e}; delete {f} and rerun to generate its responses again") from None
        has_answer, has_correct = "answer" in df.columns, "correct" in df.columns
        col = plan.score_column if plan.score_column not in (None, "gt") else None
        side = plan.side_column
        for c in (col, side):
            if c is not None and c not in df.columns:
                raise RunError(f"{f} has no {c!r} column, which this run writes; delete it and rerun to generate its "
                               "responses again")
        for r in df.iter_rows(named=True):
            qid, k = r["query_id"], int(r["sample_idx"])
            if ids is not None and qid not in ids:
                raise RunError(f"{f} holds query {qid!r}, which this run's queries do not include")
            if k in rows.setdefault(qid, {}):
                raise RunError(f"{f} repeats sample {k} of query {qid!r}; delete one of the parts holding it")
            answer = r["answer"] if has_answer else None
            correct = bool(r["correct"]) if has_correct and r["correct"] is not None else False
            score = (float(r[col]) if col is not None else
                     1.0 if correct and plan.req.oracle in TRUTH_ORACLES else 0.0)
            lows = ((tuple(r["conf_lows_pos"]), tuple(r["conf_lows"]))  # (deepconf-online's, when recorded)
                    if r.get("conf_lows_pos") is not None and r.get("conf_lows") is not None else None)
            rows[qid][k] = (Response(r["text"] or "", int(r["n_tokens"]), r["finish_reason"] or "unknown"),
                            Observed(correct, score, answer, int(r["n_tokens"]),
                                     0.5 if side is None else float(r[side]), lows))
    cache = {}
    for qid, by_k in rows.items():
        if sorted(by_k) != list(range(len(by_k))):
            missing = min(set(range(max(by_k) + 1)) - set(by_k))
            raise RunError(f"query {qid!r}: sample {missing} is missing from {plan.pool / 'samples'} while later "
                           "ones are there; delete the query's parts and rerun")
        cache[qid] = [by_k[k] for k in range(len(by_k))]
    return cache


class _PartWriter:
    """Writes the responses generated as part files of the run's pool, the memory a resume reads back.

    A part per backend call made a small-call policy (entropy, streaming: a call per pull) spend more time writing
    than scheduling, so responses are buffered and written when `min_responses` have gathered or `flush_s` seconds
    have passed since the last part, at the end, and when the run stops on an error or Ctrl-C (a hard kill loses at
    most the buffer: a resume generates those responses again, with the same seeds). Queries marked failed go to
    pool.json at once. CRASH_ENV=K (the resume tests) writes what came before call K (this process's, 0-based), then
    kills the process while the part holding call K is renamed into place."""

    def __init__(self, plan: RunPlan, meta: dict, snapshot: Callable[[], dict], *, flush_s: float = 5.0,
                 min_responses: int = 4096):
        from ..pipeline import part_files

        self.plan, self.meta, self.snapshot = plan, meta, snapshot
        self.flush_s, self.min_responses = flush_s, min_responses
        self.buffer: list[tuple[str, int, list, list]] = []
        self.buffered = 0
        self.next_part = max((_part_number(p) for p in part_files(plan.pool)), default=-1) + 1
        self.calls = 0
        crash = os.environ.get(CRASH_ENV)
        self.crash_at = int(crash) if crash not in (None, "") else None
        self.last = time.perf_counter()
        self.write_s = 0.0
        self.parts = 0

    def on_call(self, records, failures, queries: Sequence[Query], ready: Callable[[int], int],
                columns: Callable[[int, int], dict] = lambda i, k: {}):
        from ttc.replay.pool import atomic_write_json

        if failures:
            t0 = time.perf_counter()
            for i, msg in failures.items():
                self.meta["failures"][queries[i].query_id] = {"at": ready(i), "error": msg}
            atomic_write_json(self.meta, self.plan.pool / "pool.json")
            self.write_s += time.perf_counter() - t0
        crash = self.crash_at is not None and self.calls == self.crash_at
        if crash:
            self.flush()  # what came before is written whole; the part holding this call is the one torn
        for i, start, items in records:
            self.buffer.append((queries[i].query_id, start, items,
                                [columns(i, start + m) for m in range(len(items))]))
            self.buffered += len(items)
        self.calls += 1
        if crash or self.buffered >= self.min_responses or time.perf_counter() - self.last >= self.flush_s:
            self.flush(crash=crash)

    def flush(self, crash: bool = False):
        from ttc.replay.pool import atomic_write_json, atomic_write_parquet

        t0 = time.perf_counter()
        if self.buffer:
            part = self.plan.pool / "samples" / f"{PART_PREFIX}{self.next_part:05d}.parquet"
            hook = (lambda: os._exit(75)) if crash else None  # a kill with the part written but not yet renamed
            atomic_write_parquet(_part_frame(self.plan, self.buffer), part, before_rename=hook)
            self.next_part += 1
            self.parts += 1
            self.buffer, self.buffered = [], 0
        self.meta["runs"][-1].update(self.snapshot())
        atomic_write_json(self.meta, self.plan.pool / "pool.json")  # how far this process got
        self.last = time.perf_counter()
        self.write_s += self.last - t0

    def flush_quietly(self):
        """On the way out of an error: keep what can be kept, without hiding the error."""
        try:
            self.flush()
        except Exception:
            pass


def _part_frame(plan: RunPlan, records) -> Any:
    """A part file's rows: (query id, first sample index, [(Response, Observed), ...], [columns, ...]) per record.
    gt and sc write answer (and correct) from what the policy saw; exec, prm and judge write the columns of their
    LiveScorer, typed and ordered as `ttc score` writes them (harvest.scoring._with_columns)."""
    from ttc.replay.pool import samples_frame

    cols: dict[str, list] = {"query_id": [], "sample_idx": [], "text": [], "n_tokens": [], "finish_reason": []}
    oracle = plan.req.oracle
    if oracle in ("gt", "sc", "confidence"):
        cols["answer"] = []
    if oracle == "gt":
        cols["correct"] = []
    extra: dict[str, list] = {c: [] for c in written_columns(oracle)} if oracle in SCORER_ORACLES else {}
    spec = plan.req.confidence
    signals: dict[str, list] = {c: [] for c in spec.columns()} if spec is not None else {}
    for qid, start, items, more in records:
        for m, (r, o) in enumerate(items):
            cols["query_id"].append(qid)
            cols["sample_idx"].append(start + m)
            cols["text"].append(r.text)
            cols["n_tokens"].append(int(r.n_tokens))
            cols["finish_reason"].append(r.finish_reason)
            if "answer" in cols:
                cols["answer"].append(None if o.answer is None else str(o.answer))
            if "correct" in cols:
                cols["correct"].append(bool(o.correct))
            for c, values in extra.items():
                values.append(more[m][c])
            for c, values in signals.items():
                if r.signals is None or c not in r.signals:
                    raise RunError(f"the backend returned no confidence signals for query {qid!r} (--confidence)")
                values.append(r.signals[c])
    df = samples_frame(cols)
    if extra:
        from ..scoring import _with_columns

        df = _with_columns(df, extra)
    if signals:  # after the rest, typed as ttc harvest writes them
        import polars as pl

        df = df.with_columns(pl.Series(c, v, dtype=dtype) for (c, v), dtype in zip(signals.items(),
                                                                                  spec.schema().values()))
    return df


def written_columns(oracle: str) -> tuple[str, ...]:
    """The oracle columns a live run's parts carry: the registry's columns of the oracle, plus `answer` for a score
    oracle (the answers the policy saw; harvest.scoring.LiveScorer)."""
    from ..registry import ORACLES

    own = tuple(ORACLES[oracle].columns)
    return own if "answer" in own else ("answer",) + own


def _source_oracle(oracle: str) -> str:
    """What harvest.live.BackendSource scores with: --oracle confidence is --oracle sc's answers with the signal as
    the score (BackendSource's score_signal)."""
    return "sc" if oracle == "confidence" else oracle


def _depth(plan: RunPlan) -> tuple[int, int] | None:
    """--depth-rule stability: (probe spacing in tokens, agreeing probes that stop a trace); None: whole traces."""
    cfg = plan.config
    return (plan.req.probe_every, cfg.depth_m) if cfg.depth_rule == "stability" else None


def _signal_options(plan: RunPlan) -> dict:
    """BackendSource's confidence options: the signals to ask the backend for, and the one that scores."""
    return {"confidence": plan.req.confidence,
            "score_signal": plan.score_column if plan.req.oracle == "confidence" else None}


class _Scorer:
    """The run's harvest.scoring.LiveScorer for exec / prm / judge, opened (the PRM or judge model loaded) by
    open(): before anything is written for a run that may generate (a model that cannot load is one error line and
    an untouched --out), on the first score for a finished run rerun (which generates nothing, so loads nothing).
    load_s: the seconds opening took."""

    def __init__(self, plan: RunPlan):
        self.plan, self.scorer, self.load_s = plan, None, 0.0
        self.name = plan.req.oracle

    def open(self):
        if self.scorer is None:
            from ..scoring import LiveScorer

            plan = self.plan
            t0 = time.perf_counter()
            try:
                self.scorer = LiveScorer(self.name, plan.scoring, plan.score_column, cfg=plan.oracle_config)
            except InputError:
                raise
            except Exception as e:
                first = (str(e).strip().splitlines() or [""])[0][:300]
                what = {"prm": f"the PRM {plan.oracle_config.get('model')!r}",
                        "judge": f"the judge {plan.oracle_config.get('model')!r}"}.get(self.name, "the sandbox")
                raise RunError(f"--oracle {self.name}: {what} cannot be loaded ({type(e).__name__}: {first}); "
                               "nothing was written") from None
            self.load_s = time.perf_counter() - t0
        return self.scorer

    def score(self, queries, responses):
        return self.open().score(queries, responses)

    def record(self, score_s: float) -> dict | None:
        """pool.json's oracles entry (None when nothing was scored by this process)."""
        if self.scorer is None:
            return None
        rec = self.scorer.record(score_s)
        rec["runtime"]["load_s"] = round(self.load_s, 3)
        return rec


