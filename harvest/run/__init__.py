"""`ttc run`: adaptive allocation against a real model, one shared budget across a batch of queries.

A run reads its queries (a benchmark name or file, as `ttc harvest --dataset` reads them, or an OpenAI Batch API input
file), spends a total budget over them with a live policy of replay/policies.py on the compiled engine
(replay.live.run_live) and a generating source (harvest.live.BackendSource: one backend call per allocation round),
and writes, under `--out DIR`:

    DIR/results.jsonl        one line per query in the OpenAI Batch output shape (custom_id = query id)
    DIR/results.parquet      the same, one row per query
    DIR/run.json             the run's configuration, outcome and cost (responses, tokens, wall times)
    DIR/pool/                every response generated, in the pool format with harvest's provenance (pool.json):
                             `ttc info DIR/pool`, `ttc replay DIR/pool`, `ttc score DIR/pool` read it

The pool is also the run's memory: the responses generated are written as part files (pool/samples/part-XXXXX.parquet,
atomically; _PartWriter says when), and queries whose requests kept failing are recorded in pool.json at once. A
killed run rerun with the same command reads them back and, since
a live run is deterministic (the k-th response of a query is drawn with its sample seed, and the engine replays every
decision from the start), ends with the same results as an uninterrupted one; a rerun with another configuration is
refused, listing the differences. A finished run rerun rewrites the same results without loading the model.

Query order and response order: queries are ranked as `ttc replay` ranks them for the seed
(replay.rng.query_order), and each query's responses are taken in sample order (sample k drawn with the seed
`ttc harvest` gives sample k). So a run against a backend that answers from a pool in replay's permutation for the
seed (tests/fixtures/harvest/pool_openai_server.py) equals `ttc replay POOL --seed-start SEED --seeds 1` exactly.

Everything the user can get wrong is refused (InputError, one `error:` line) by plan_run, before anything is
written or a model loads.

The package, by what changes together: request.py (RunRequest, which holds the policy's RunConfig, the oracles a run
scores with, and the checks of the request against its inputs), batch.py (OpenAI Batch input and output lines),
plan.py (plan_run, and what the plan decides about the backend), execute.py (the one executor: checkpoints in the
pool and a resume from them; the batch mode), stream.py (its --stream mode), output.py (results, run.json, the
pool's last files, the printed report), command.py (the command as a function: backend, tokenizer, execute; the
command line and ttc.run, api.py, call it). This module re-exports what the command line, the API and the tests use.
"""
from __future__ import annotations

from .batch import ServerUsage, batch_line, parse_batch_line, read_batch, render_batch_prompt, stream_lines
from .command import run_command
from .execute import Executor, execute
from .output import STATUS, RunOutcome, report_lines
from .plan import (
    RunPlan,
    backend_kwargs,
    backend_stops,
    effective_chat,
    free_slots,
    load_tokenizer,
    plan_run,
    planned,
    planned_counts,
)
from .request import (
    CRASH_ENV,
    DEFAULT_ELIMINATE,
    DEFAULT_SELECT,
    FORMAT,
    LIVE_ORACLES,
    SCORER_ORACLES,
    TRUTH_ORACLES,
    UNSUPPORTED,
    RunError,
    RunRequest,
    check_access,
)
from .stream import execute_stream

__all__ = ["CRASH_ENV", "DEFAULT_ELIMINATE", "DEFAULT_SELECT", "FORMAT", "LIVE_ORACLES", "SCORER_ORACLES", "STATUS",
           "TRUTH_ORACLES", "UNSUPPORTED", "Executor", "RunError", "RunOutcome", "RunPlan", "RunRequest",
           "ServerUsage", "backend_kwargs", "backend_stops", "batch_line", "check_access", "effective_chat", "execute",
           "execute_stream", "free_slots", "load_tokenizer", "parse_batch_line", "plan_run", "planned",
           "planned_counts", "read_batch", "render_batch_prompt", "report_lines", "run_command", "stream_lines"]
