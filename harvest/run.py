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
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ttc.replay.errors import InputError

from .types import Query, Response, Sampling

FORMAT = "ttc-run/1"
CRASH_ENV = "TTC_RUN_CRASH_AT_CALL"  # fault injection for the resume tests: die while writing this process's part K
PART_PREFIX = "part-"
# The oracles that score responses live. Any other (a registry oracle added later) is refused with UNSUPPORTED's
# reason. gt and sc are scored by harvest.live.BackendSource itself (one math-verify grade per distinct answer, in
# this process); exec, prm and judge through harvest.scoring.LiveScorer: the OracleImpl of `ttc score`, one batched
# call per backend call, so the pool's columns are the ones `ttc score` writes.
LIVE_ORACLES = {
    "gt": "ground truth: the final answer (\\boxed{} or 'the final answer is') graded with math-verify against the "
          "gold answer; score = correctness (math queries with gold answers)",
    "sc": "answer agreement (self-consistency): the same final answers, no grading and no gold answer; every score "
          "is 0, so answers alone decide (--eliminate sc-share / sc-beta / none, --select sc)",
    "exec": "ground truth by code execution: the [ANSWER] literal run as the completed assertion of the query's "
            "function in the sandbox; score = correctness (lcb-exec queries: code and input columns)",
    "prm": "a process reward model's step scores (--prm-model); the policy reads --score (prm_min, prm_last or "
           "prm_prod) and the final answers",
    "judge": "an LLM judge's verdict on the final answer against the gold one (--judge-model); score = the share of "
             "yes verdicts, and the final answers",
    "confidence": "the response's own token-log-prob confidence (a --confidence signal; --score picks which when "
                  "several are recorded): score = that signal in [0, 1], and the final answers as --oracle sc "
                  "extracts them (no gold, no grading, no extra model)",
}
UNSUPPORTED: dict[str, str] = {}
TRUTH_ORACLES = ("gt", "exec")             # score = correctness; results carry correct and covered
SCORER_ORACLES = ("exec", "prm", "judge")  # scored through harvest.scoring.LiveScorer
DEFAULT_ELIMINATE = {"gt": "threshold", "sc": "sc-share", "exec": "threshold", "prm": "threshold",
                     "judge": "threshold", "confidence": "sc-share"}
DEFAULT_SELECT = {"gt": "bon", "sc": "sc", "exec": "bon", "prm": "weighted", "judge": "bon", "confidence": "weighted"}
# the score column the policy reads: fixed by the oracle, or for prm chosen with --score (default prm_min)
SCORE_COLUMNS = {"gt": ("gt",), "exec": ("gt",), "sc": (None,), "judge": ("score_judge",),
                 "prm": ("score_prm_min", "score_prm_last", "score_prm_prod"),
                 "confidence": ()}  # (the --confidence signals recorded: oracle_settings)
SCORE_POLICIES = ("ucb", "gap", "gap-literal", "two-stage")  # they rank queries by scores, which sc does not give
BATCH_URLS = ("/v1/chat/completions", "/v1/completions")
BATCH_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_tokens",
                  "max_completion_tokens": "max_tokens"}
QUERY_ORDER_RULE = "replay.rng.query_order(query_keys(query ids), seed): the order ttc replay gives the seed"
STREAM_RULE = ("query t (0-based, in the order they come) runs the streaming policy alone with the budget "
               "round(budget x (t + 1)) minus what queries 0 .. t-1 spent: each query until answered, capped "
               "(--max-samples) or that bank is spent")


class RunError(InputError):
    """A run that cannot go on as asked; one `error:` line."""


# ---------------------------------------------------------------------------------------------------------------
# The request


def _request_class():
    from ttc.replay.policies import config_fields

    return make_dataclass("RunRequest", [
        ("out", Path),
        ("model", str),
        ("backend", str),
        ("sampling", Sampling),             # n is ignored (the budget decides); temperature, top_p, max_tokens, seed
        ("budget", float),                  # average per query, in `unit`
        ("policy", str, "elimination"),
        ("dataset", Optional[str], None),
        ("batch", Optional[Path], None),
        ("unit", str, "samples"),
        ("oracle", str, "gt"),
        ("eliminate", Optional[str], None),  # None: the oracle's default
        ("prior", Optional[str], None),     # marginal-gain: a field of each query (a --dataset column, a --batch
        #                                     line's top-level key) holding its predicted success probability
        ("side", Optional[str], None),      # side-eb: a score column the run records (a --confidence signal's, or
        #                                     the oracle's), each response's side signal
        ("conf", float, 0.95),
        ("select", Optional[str], None),    # None: the oracle's default
        ("score", Optional[str], None),     # prm: the column the policy reads (prm_min, ...); None: the oracle's
        ("scoring", Any, None),             # harvest.scoring.ScoreOptions of exec / prm / judge (None: defaults)
        ("confidence", Any, None),          # harvest.confidence.ConfidenceSpec: signals each response records (the
        #                                     scores of --oracle confidence; with another oracle, columns for replay)
        ("max_per_query", int, 256),
        ("lookahead", int, 1),
        ("plan_ahead", bool, True),         # uniform with a sample budget: generate every query's whole allocation
        #                                     up front (planned_counts), one backend call per distinct count
        ("free_slots", bool, True),         # a backend that takes concurrent calls (openai): each query's next
        #                                     response asked for as soon as the run wants it, up to --concurrency in
        #                                     flight (harvest.live.BackendSource slots); False: one call per round
        ("retries", int, 2),
        ("retry_delay_s", float, 1.0),
        ("grade_timeout_s", float, 5.0),
        ("template", Optional[str], None),
        ("chat", Optional[bool], None),
        ("revision", Optional[str], None),
        ("limit", Optional[int], None),
        ("task", Optional[str], None),
        ("id_column", Optional[str], None),
        ("problem_column", Optional[str], None),
        ("answer_column", Optional[str], None),
        ("split", Optional[str], None),
        ("backend_options", dict, field(default_factory=dict)),  # keyword -> value, for the backend's constructor
        ("progress", bool, True),
        ("flush_s", float, 5.0),            # part files: a write at least this long after the last (_PartWriter)
        ("part_min", int, 4096),            # ... or as soon as this many responses are waiting
        ("stream", bool, False),            # queries one at a time from --batch FILE or - (stdin): execute_stream
        ("stream_idle_s", float, 0.0),      # a growing --batch FILE: stop after this long without a new line
        *config_fields(live_only=True),     # every RunConfig parameter a live run takes, its own name and default
    ])


RunRequest = _request_class()
RunRequest.__module__ = __name__  # (make_dataclass takes module= from Python 3.12 on): pickling finds it here
RunRequest.__doc__ = """Everything `ttc run` is given. The policy's parameters are RunConfig's, generated from it (one
field each, its name and default; _config reads every one by name); the eliminate default is the oracle's instead,
which is why it is None."""


@dataclass
class RunPlan:
    req: RunRequest
    queries: list[Query]
    messages: list | None                  # batch input: each query's chat messages (or prompt string)
    config: Any                            # replay.policies.RunConfig
    budget_total: int
    select: str
    template: str | None                   # the prompt template (dataset input)
    template_info: dict
    generation: dict
    allocation: dict
    meta: dict                             # the existing pool.json of a resumed run ({} for a new one)
    inputs: list[Path]
    score_column: str | None = None        # what the policy reads: "gt", a score column, None (sc: answers only)
    scoring: Any = None                    # ScoreOptions of a SCORER_ORACLES oracle (progress off)
    oracle_config: dict | None = None      # its harvest.scoring.oracle_config, recorded in allocation and pool.json
    prior: list | None = None              # --prior: each query's predicted success probability, in query order
    side_column: str | None = None         # --side: the recorded score column that is each response's side signal

    @property
    def pool(self) -> Path:
        return self.req.out / "pool"


# ---------------------------------------------------------------------------------------------------------------
# Queries: a data set, or an OpenAI Batch API input file


def _digest(parts) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p.encode("utf-8") + b"\0")
    return h.hexdigest()


def _content(value: Any, where: str) -> str:
    """A message's content: a string, or a list of parts of which the text ones are joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        texts = [p.get("text") for p in value if p.get("type") == "text"]
        if len(texts) == len(value) and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    raise RunError(f"{where}: a message's content must be a string or a list of text parts")


def parse_batch_line(line: str, where: str, n: int, *, model: str, sampling: Sampling, oracle: str,
                     keep: Sequence[str] = ()) -> tuple[Query, Any, set[str]]:
    """One request of an OpenAI Batch API input file (read_batch): its query, its messages (a list) or prompt (a
    string), and the body fields ignored. keep: top-level keys that become query fields when present (--prior's,
    checked by read_prior). RunError names `where` (FILE:LINE) and what is wrong."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise RunError(f"{where}: not a JSON line ({e.msg})") from None
    if not isinstance(row, dict):
        raise RunError(f"{where}: each line must be a JSON object (a batch request)")
    cid = row.get("custom_id")
    if not isinstance(cid, str) or not cid.strip():
        raise RunError(f"{where}: no custom_id (a non-empty string naming the request)")
    if row.get("method") != "POST":
        raise RunError(f"{where}: method must be \"POST\", got {row.get('method')!r}")
    url = row.get("url")
    if url not in BATCH_URLS:
        raise RunError(f"{where}: url must be {' or '.join(BATCH_URLS)}, got {url!r}")
    body = row.get("body")
    if not isinstance(body, dict):
        raise RunError(f"{where}: no body object")
    if "model" in body and body["model"] != model:
        raise RunError(f"{where}: body.model {body['model']!r} is not --model {model!r}; a run uses one model")
    if body.get("n", 1) != 1:
        raise RunError(f"{where}: body.n is {body['n']!r}; the budget decides how many responses each query "
                       "gets, so n must be 1 or absent")
    if "seed" in body:
        raise RunError(f"{where}: body.seed is set; each response's seed is derived from --seed, the query and "
                       "the sample (as ttc harvest does), so leave it out")
    wanted = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens}
    for key, option in BATCH_SAMPLING.items():
        if key in body and body[key] != wanted[option]:
            raise RunError(f"{where}: body.{key} is {body[key]!r} but --{option.replace('_', '-')} is "
                           f"{wanted[option]!r}; one run samples every query alike (pass --"
                           f"{option.replace('_', '-')} {body[key]})")
    ignored = set(body) - {"model", "messages", "prompt", "n", *BATCH_SAMPLING}
    if url == "/v1/chat/completions":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise RunError(f"{where}: body.messages must be a non-empty list of messages")
        clean = []
        for m in msgs:
            role = m.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise RunError(f"{where}: a message's role must be system, developer, user or assistant, got "
                               f"{role!r}")
            clean.append({"role": role, "content": _content(m.get("content"), where)})
        if clean[-1]["role"] != "user":
            raise RunError(f"{where}: the last message must be the user's (the model answers it)")
        prompt: Any = clean
        problem = clean[-1]["content"]
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise RunError(f"{where}: body.prompt must be a non-empty string")
        problem = prompt
    gold = row.get("gold")
    if gold is not None and not isinstance(gold, (str, int, float)):
        raise RunError(f"{where}: gold must be a string or a number")
    gold = None if gold is None or not str(gold).strip() else str(gold).strip()
    if oracle in ("gt", "judge") and gold is None:
        raise RunError(f"{where}: --oracle {oracle} needs a gold answer on every line (a top-level \"gold\"); "
                       "without gold answers use --oracle sc or prm")
    query = Query(query_id=cid.strip(), task="math" if oracle == "gt" else "custom", problem=problem, gold=gold,
                  fields={"batch_line": n, **{k: row[k] for k in keep if k in row and k != "batch_line"}})
    return query, prompt, ignored


def read_batch(path: Path, *, model: str, sampling: Sampling, oracle: str, keep: Sequence[str] = ()
               ) -> tuple[list[Query], list]:
    """Queries from an OpenAI Batch API input file (JSONL; one request per line: custom_id, method, url, body), as
    `vllm run-batch` reads it: custom_id is the query id; body.messages (chat completions) or body.prompt
    (completions) the prompt. A top-level "gold" is the gold answer (`--oracle gt` needs it on every line). Sampling
    fields in a body must agree with the run's options, body.model with --model, body.n be 1: one run samples every
    query alike, and the budget decides how many responses each gets. Returns the queries and, per query, its
    messages (a list) or prompt (a string)."""
    path = Path(path)
    if not path.is_file():
        raise RunError(f"--batch {path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RunError(f"--batch {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    queries, messages, seen = [], [], {}
    ignored: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        q, prompt, skipped = parse_batch_line(line, where, n, model=model, sampling=sampling, oracle=oracle,
                                              keep=keep)
        if q.query_id in seen:
            raise RunError(f"{where}: custom_id {q.query_id!r} is also on line {seen[q.query_id]}; custom ids must "
                           "be unique")
        seen[q.query_id] = n
        ignored |= skipped
        queries.append(q)
        messages.append(prompt)
    if not queries:
        raise RunError(f"--batch {path}: no requests")
    if ignored:
        print(f"warning: --batch {path}: ignored body fields {', '.join(sorted(ignored))}", file=sys.stderr)
    return queries, messages


# A prompt that stands for a whole conversation on a server backend: this prefix, then the messages as JSON.
# ServerUsage sends it as those messages (harvest.backends.OpenAIBackend itself sends a prompt as one user message).
MESSAGES_KEY = "\x00ttc-messages\x00"


def render_batch_prompt(prompt: Any, tokenizer: Any, *, chat: bool | None, server: bool) -> str:
    """The text a backend completes for one batch request. Messages go through the model's chat template (a
    tokenizer backend, unless --no-chat); a server backend (openai) with --chat gets them as the request's messages
    (the server applies its template): a single user message as its prompt, several (a system message, earlier
    turns) as MESSAGES_KEY + their JSON, which ServerUsage sends as they are. Several messages need a chat template,
    here or on the server."""
    if isinstance(prompt, str):
        return prompt
    from .prompts import has_chat_template

    if not server and chat is not False and has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        return prompt[0]["content"]
    if server and chat:
        return MESSAGES_KEY + json.dumps(prompt, ensure_ascii=False)
    why = ("--no-chat sends each prompt to the completions endpoint" if server else
           "--no-chat" if chat is False else "the model's tokenizer has no chat template")
    raise RunError(f"a request holds {len(prompt)} messages, and {why}; give one user message per request, or "
                   "use the chat endpoint (--chat) or a chat model")


def shown_prompt(prompt: str | None) -> str | None:
    """A prompt as queries.parquet shows it: a conversation's messages as JSON, without MESSAGES_KEY."""
    return prompt[len(MESSAGES_KEY):] if prompt is not None and prompt.startswith(MESSAGES_KEY) else prompt


class _Namespace:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ServerUsage:
    """The openai backend's (harvest.backends.OpenAIBackend) prompt side, through its client: a prompt that stands for
    a conversation (MESSAGES_KEY) goes out as its messages, system message included, and each response's
    usage.prompt_tokens (the server's count, its chat template applied) is kept per prompt, which prompt_len(prompt)
    reads (None until a response to that prompt came back; harvest.live.BackendSource counts it then). The backend
    sends each prompt as one user message and keeps only usage.completion_tokens; its client is the one seam that
    changes neither. attach(backend) wraps the client of a backend that has one and returns the backend."""

    def __init__(self):
        import threading

        self.counts: dict[str, int] = {}
        self.requests = 0
        self._lock = threading.Lock()

    def attach(self, backend):
        client = getattr(backend, "_client", None)
        if client is not None and not isinstance(client, _UsageClient):
            backend._client = _UsageClient(client, self)
        return backend

    def prompt_len(self, prompt: str) -> int | None:
        return self.counts.get(prompt)

    def record(self, key: str, resp: Any):
        n = getattr(getattr(resp, "usage", None), "prompt_tokens", None)
        with self._lock:
            self.requests += 1
            if isinstance(n, int) and n >= 0:
                self.counts[key] = n


class _UsageClient:
    """An openai client whose chat.completions.create and completions.create go through ServerUsage."""

    def __init__(self, client, usage: ServerUsage):
        self._client, self._usage = client, usage
        self.chat = _Namespace(completions=_Namespace(create=self._chat))
        self.completions = _Namespace(create=self._complete)

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _chat(self, *, messages, **kw):
        key = messages[-1]["content"] if messages else ""
        if len(messages) == 1 and isinstance(key, str) and key.startswith(MESSAGES_KEY):
            messages = json.loads(key[len(MESSAGES_KEY):])
        resp = self._client.chat.completions.create(messages=messages, **kw)
        self._usage.record(key, resp)
        return resp

    def _complete(self, *, prompt, **kw):
        resp = self._client.completions.create(prompt=prompt, **kw)
        self._usage.record(prompt, resp)
        return resp


# ---------------------------------------------------------------------------------------------------------------
# Planning: every check before anything is written


def _config(req: RunRequest, eliminate: str):
    """The RunConfig of the request: every RunConfig field read from the RunRequest field of the same name (a
    hand-kept list here once dropped optscale's, marginal-gain's, dsc's and side-eb's parameters)."""
    from dataclasses import fields

    from ttc.replay.policies import DEPTH_FIELDS, RunConfig
    from ttc.replay.run import config_from_options

    params = {f.name: getattr(req, f.name) for f in fields(RunConfig)
              if f.name not in ("policy", "eliminate") + DEPTH_FIELDS}  # (depth: replay only, for now)
    return config_from_options(req.policy, eliminate=eliminate, **params)


def check_inputs(req: RunRequest, cfg) -> None:
    """--prior and --side feed one policy each (the registry's Policy.inputs); given to another policy they would
    be ignored without a word, so they are refused."""
    from ttc.replay.policies import REGISTRY

    for name, value in (("prior", req.prior), ("side", req.side)):
        if value is not None and name not in REGISTRY[cfg.policy].inputs:
            readers = [p for p, entry in REGISTRY.items() if name in entry.inputs]
            raise RunError(f"--{name} is read by --policy {' or '.join(readers)}; --policy {cfg.policy} would ignore "
                           "it")
    if "side" in REGISTRY[cfg.policy].needs and req.side is None:  # (uab: its confidence; 0.5 would be no signal)
        raise RunError(f"--policy {cfg.policy} reads each response's side signal: record a confidence and name its "
                       "column, e.g. --confidence mean-logprob --side score_mean_logprob")


def side_columns(req: RunRequest) -> list[str]:
    """The score columns this run records for every response, any of which --side may name: each --confidence
    signal's score and the score columns of --oracle prm or judge (correctness is the oracle itself, not a side
    signal). Only score_* columns: the pool format holds them in [0, 1] with no null, as a side signal must be."""
    from .registry import ORACLES, SIGNALS

    cols = [SIGNALS[name].column for name in req.confidence.signals if SIGNALS[name].scores] \
        if req.confidence is not None else []
    if req.oracle in SCORER_ORACLES:
        cols += [c for c in ORACLES[req.oracle].columns if c.startswith("score_")]
    return list(dict.fromkeys(cols))


def side_column(req: RunRequest) -> str | None:
    """--side COLUMN checked against what the run records (side_columns): the column each response's side signal is
    read from as it arrives, and the one `ttc replay RUN/pool --side COLUMN` reads."""
    if req.side is None:
        return None
    cols = side_columns(req)
    if req.side in cols:
        return req.side
    if not cols:
        raise RunError(f"--side {req.side}: side-eb's side signal is a score this run records for every response, "
                       f"and --oracle {req.oracle} records none: add a --confidence signal (--side score_<signal>), or "
                       "score with --oracle prm (score_prm_min, ...) or judge (score_judge)")
    raise RunError(f"--side {req.side}: this run records {', '.join(cols)} for every response; name one of them")


def read_prior(req: RunRequest, queries: Sequence[Query]) -> tuple[list[Query], list[float] | None]:
    """--prior COLUMN: each query's predicted success probability, from its field COLUMN (a column of the --dataset
    file, or a top-level key of each --batch line), a number in [0, 1] for every query. Returns the queries with that
    field as a float (so queries.parquet holds it as one Float64 column, which `ttc replay RUN/pool --prior COLUMN`
    reads) and the values in query order."""
    if req.prior is None:
        return list(queries), None
    from dataclasses import replace

    from .pipeline import QUERY_COLUMNS

    col = req.prior
    if col in QUERY_COLUMNS:
        raise RunError(f"--prior {col}: the run's queries.parquet keeps the name {col!r} for its own column; name the "
                       "predictions otherwise")

    def where(q: Query) -> str:
        line = q.fields.get("batch_line")
        return f"{req.batch}:{line}" if req.batch is not None and line is not None else f"query {q.query_id!r}"

    if not any(col in q.fields for q in queries):
        what = (f"no line of --batch {req.batch} has a top-level {col!r}" if req.batch is not None else
                f"the queries of --dataset {req.dataset} have no column {col!r} (fields: "
                f"{', '.join(sorted({k for q in queries for k in q.fields})) or 'none'})")
        raise RunError(f"--prior {col}: {what}; marginal-gain reads each query's predicted success probability there")
    out, values = [], []
    for q in queries:
        v = q.fields.get(col)
        if v is None:
            raise RunError(f"--prior {col}: {where(q)} has none; every query needs a predicted success probability")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RunError(f"--prior {col}: {where(q)} has {v!r}, not a number (a predicted success probability in "
                           "[0, 1])")
        if not 0.0 <= float(v) <= 1.0:  # (NaN fails too)
            raise RunError(f"--prior {col}: {where(q)} has {v!r}, outside [0, 1] (a predicted success probability)")
        values.append(float(v))
        out.append(replace(q, fields={**q.fields, col: float(v)}))
    return out, values


def check_oracle(req: RunRequest, cfg, select: str):
    """What the oracle gives against what the policy, elimination rule and selection read."""
    from ttc.replay.policies import ELIMINATION_RULES, REGISTRY

    if req.oracle in UNSUPPORTED:
        raise RunError(f"--oracle {req.oracle}: {UNSUPPORTED[req.oracle]} (ttc run scores with "
                       f"{' or '.join(LIVE_ORACLES)}); run it, then score its pool: ttc score {req.out}/pool "
                       f"--oracle {req.oracle}")
    if req.oracle not in LIVE_ORACLES:
        raise RunError(f"unknown oracle {req.oracle!r}; ttc run scores with {', '.join(LIVE_ORACLES)}")
    if not REGISTRY[cfg.policy].live:
        from ttc.replay.live import LIVE_POLICIES

        raise RunError(f"--policy {cfg.policy} needs hindsight and cannot run live; choose from "
                       f"{', '.join(LIVE_POLICIES)}")
    if cfg.policy == "deepconf-online" and (req.confidence is None or "group-lows" not in req.confidence.signals):
        raise RunError("--policy deepconf-online stops each trace at its first record low of the group confidence "
                       "below its query's threshold: record them with --confidence group-lows (its window, "
                       "--confidence-window, is DeepConf's 2048 by default)")
    if req.oracle == "sc":
        if cfg.policy in SCORE_POLICIES:
            raise RunError(f"--policy {cfg.policy} ranks queries by their scores, and --oracle sc gives none (every "
                           f"score is 0); with sc use uniform, elimination, entropy or streaming")
        if "eliminate" in cfg.used_params() and "gamma" in ELIMINATION_RULES[cfg.eliminate].params:
            raise RunError(f"--eliminate {cfg.eliminate} compares scores with --gamma, and --oracle sc gives none; "
                           "use --eliminate sc-share, sc-beta or none")
        if select != "sc":
            raise RunError(f"--select {select} picks by score, and --oracle sc gives none; use --select sc")


def oracle_settings(req: RunRequest) -> tuple[str | None, Any, dict | None]:
    """The column the policy reads ("gt", a score column, or None for sc) and, for exec / prm / judge, the scoring
    options (progress bars off: a bar per round would flood the log) and the oracle's configuration (recorded in
    the run's allocation, so a resume with other scorer settings is refused)."""
    if req.oracle == "confidence":
        return _confidence_column(req), None, None
    cols = SCORE_COLUMNS[req.oracle]
    column = cols[0]
    if req.score is not None:
        name = req.score if req.score.startswith("score_") else f"score_{req.score}"
        if len(cols) == 1:
            raise RunError(f"--score chooses among the score columns of --oracle prm; --oracle {req.oracle} gives "
                           f"{'correctness' if cols[0] == 'gt' else cols[0] or 'no score'} and nothing to choose")
        if name not in cols:
            raise RunError(f"--score {req.score}: --oracle {req.oracle} gives "
                           f"{', '.join(c.removeprefix('score_') for c in cols)}")
        column = name
    if req.oracle not in SCORER_ORACLES:
        if req.scoring is not None:
            raise RunError(f"the scoring options are for --oracle {', '.join(SCORER_ORACLES)}; --oracle {req.oracle} "
                           "reads only --timeout")
        return column, None, None
    from dataclasses import replace

    from .scoring import ScoreOptions, oracle_config

    opts = replace(req.scoring or ScoreOptions(), progress=False)
    return column, opts, oracle_config(req.oracle, opts)


def _confidence_column(req: RunRequest) -> str:
    """--oracle confidence: the score column of the --confidence signal the policy reads (the first one recorded, or
    --score's: a signal name or its column)."""
    from .registry import SIGNALS

    if req.scoring is not None:
        raise RunError("the scoring options are for --oracle exec, prm, judge; --oracle confidence reads the "
                       "response's own log-probs")
    if req.confidence is None:
        raise RunError("--oracle confidence scores each response with a confidence signal from its token log-probs: "
                       f"name one with --confidence ({', '.join(SIGNALS)})")
    recorded = {name: SIGNALS[name].column for name in req.confidence.signals if SIGNALS[name].scores}
    if req.score is None:
        return next(iter(recorded.values()))
    for name, col in recorded.items():
        if req.score in (name, col, col.removeprefix("score_")):
            return col
    raise RunError(f"--score {req.score}: --oracle confidence reads one of the --confidence signals recorded "
                   f"({', '.join(recorded)})")


def check_scorer(req: RunRequest, queries: Sequence[Query], opts) -> None:
    """exec, prm, judge against the queries, before anything is written: what `ttc score` would refuse (tasks, gold
    answers, each query's code and input, a PRM this machine cannot find, a judge without --judge-model)."""
    from .scoring import check_applicable

    if req.oracle == "exec":
        if req.batch is not None:
            raise RunError("--oracle exec runs LiveCodeBench code-execution queries, whose code and input come from a "
                           "data set (--dataset with question_id, code, input and output columns); --batch requests "
                           "carry no code to run")
        wrong = sorted({q.task for q in queries} - {"lcb-exec"})
        if wrong:
            raise RunError(f"--oracle exec runs LiveCodeBench code-execution queries (task lcb-exec: a data set with "
                           f"question_id, code, input and output columns), and this data set holds "
                           f"{', '.join(wrong)} queries" + (" (use --oracle gt)" if wrong == ["math"] else ""))
    check_applicable(list(queries), req.oracle, opts)


def _inputs(req: RunRequest) -> list[Path]:
    if req.batch is not None and str(req.batch) == "-":
        return []
    src = req.batch if req.batch is not None else Path(str(req.dataset)).expanduser()
    return [Path(src)] if Path(src).is_file() else []


def check_extras(req: RunRequest) -> None:
    """The extras the run needs, before anything is written or sent: its backend's (openai, harvest, gpu) and its
    oracle's (gt: math-verify; prm: transformers; judge: its judge backend's). A missing openai extra had been found
    after --out was created (a rerun with any changed option was then refused), and a missing grade extra after 8
    requests (issue 28)."""
    from ttc.replay.extras import EXTRA_MODULE, check

    from .registry import BACKENDS, ORACLES

    extra = BACKENDS[req.backend].extra if req.backend in BACKENDS else None
    if extra in EXTRA_MODULE:
        check(EXTRA_MODULE[extra], f"--backend {req.backend}")
    oracle = ORACLES.get(req.oracle)
    extra = oracle.extra if oracle is not None else None
    if extra in EXTRA_MODULE:  # (judge's, "backend", is its judge backend's, which check_scorer looks at)
        check(EXTRA_MODULE[extra], f"--oracle {req.oracle}")


def check_access(backend) -> None:
    """One cheap request to a server backend (its check_access: GET /models) before the first write or generation:
    a refused key stops the run here, exit 2."""
    probe = getattr(backend, "check_access", None)
    if probe is not None:
        probe()


def plan_run(req: RunRequest) -> RunPlan:
    """Check the whole request and the output directory, read the queries, and compare with a run already in
    `--out` (a resume); nothing is written and no model is loaded."""
    from ttc.replay.outputs import check_output
    from ttc.replay.policies import ELIMINATION_RULES, LIVE_SELECTIONS, SELECTION_RULES

    from .pipeline import SEED_RULE, SEED_SPACING, _diff, comparable_generation, dataset_digest, read_meta

    check_extras(req)

    if (req.dataset is None) == (req.batch is None):
        raise RunError("give the queries as --dataset NAME|FILE or as --batch FILE (an OpenAI Batch API input file), "
                       "one of the two")
    if req.stream:
        if req.batch is None:
            raise RunError("--stream reads requests as they come from --batch FILE (a file that grows) or "
                           "--batch - (stdin); --dataset is read whole")
        if req.policy != "streaming":
            raise RunError("--stream allocates each query as it comes, before the next is known: use --policy "
                           "streaming (the per-query cap is --max-samples, the budget a rate per query)")
        if not 0 <= req.stream_idle_s < math.inf:
            raise RunError(f"--stream-idle must be a finite number of seconds >= 0, got {req.stream_idle_s}")
    elif str(req.batch) == "-":
        raise RunError("--batch - reads requests from stdin, which only --stream does")
    if req.oracle in UNSUPPORTED or req.oracle not in LIVE_ORACLES:
        check_oracle(req, None, "")
    if not (math.isfinite(req.budget) and req.budget >= 1):
        raise RunError(f"--budget must be at least 1 {req.unit[:-1]} per query on average (a budget below one "
                       f"response per query leaves queries without any), got {req.budget}")
    if not 1 <= req.max_per_query < SEED_SPACING:
        raise RunError(f"--max-per-query must be between 1 and {SEED_SPACING - 1}, got {req.max_per_query}")
    if req.unit == "samples" and req.budget > req.max_per_query:
        raise RunError(f"--budget {req.budget:g} per query is more than --max-per-query {req.max_per_query}: not "
                       f"even an even split fits; raise --max-per-query")
    if req.unit not in ("samples", "tokens"):
        raise RunError(f"--unit must be samples or tokens, got {req.unit!r}")
    for flag, v in (("--lookahead", req.lookahead), ("--max-tokens", req.sampling.max_tokens)):
        if v < 1:
            raise RunError(f"{flag} must be at least 1, got {v}")
    if req.retries < 0 or not 0 <= req.retry_delay_s < math.inf:
        raise RunError(f"--retries must be >= 0 and --retry-delay a finite number >= 0, got {req.retries} and "
                       f"{req.retry_delay_s}")
    if not 0 < req.grade_timeout_s < math.inf:
        raise RunError(f"--timeout must be a positive number of seconds, got {req.grade_timeout_s}")
    if not 0.0 < req.conf < 1.0:
        raise RunError(f"--conf must be in (0, 1), got {req.conf}")
    if req.limit is not None and req.limit < 1:
        raise RunError(f"--limit must be at least 1, got {req.limit}")
    eliminate = req.eliminate or DEFAULT_ELIMINATE[req.oracle]
    select = req.select or DEFAULT_SELECT[req.oracle]
    if eliminate not in ELIMINATION_RULES or select not in SELECTION_RULES:
        raise RunError(f"unknown --eliminate {eliminate!r} or --select {select!r}")
    if select not in LIVE_SELECTIONS:  # (the command line offers only these; a RunRequest built in Python may not)
        raise RunError(f"--select {select} is computed by replay only; ttc run returns {', '.join(LIVE_SELECTIONS)}")
    cfg = _config(req, eliminate)
    check_oracle(req, cfg, select)
    check_inputs(req, cfg)
    score_column, scoring, scorer_config = oracle_settings(req)
    side = side_column(req)
    inputs = _inputs(req)
    out = Path(req.out)
    check_output(out, flag="--out", command="run", reads=inputs, kind="dir")

    # the queries
    from .prompts import default_template, template_info

    messages = None
    if req.stream:
        queries, messages, template = [], [], None
        info = {"name": "batch-messages", "version": 1, "chat": True, "stop": [],
                "description": "each request's messages (or prompt) as given, read as they come (--stream)"}
        dataset = {"source": str(req.batch), "kind": "openai-batch-stream"}
    elif req.batch is not None:
        for flag, v in (("--template", req.template), ("--limit", req.limit), ("--task", req.task),
                        ("--id-column", req.id_column), ("--problem-column", req.problem_column),
                        ("--answer-column", req.answer_column), ("--split", req.split)):
            if v is not None:
                raise RunError(f"{flag} applies to --dataset; a --batch file carries its own prompts and ids")
        queries, messages = read_batch(req.batch, model=req.model, sampling=req.sampling, oracle=req.oracle,
                                       keep=(req.prior,) if req.prior is not None else ())
        template = None
        info = {"name": "batch-messages", "version": 1, "chat": True, "stop": [],
                "description": "each request's messages (or prompt) as given; chat messages through the model's "
                               "chat template (tokenizer backends) or sent as the request's messages (openai "
                               "--chat)"}
        dataset = {"source": str(req.batch), "kind": "openai-batch", "path": str(Path(req.batch).resolve()),
                   "n_queries": len(queries),
                   "digest": _digest(f"{q.query_id}\0{json.dumps(m, sort_keys=True)}\0{q.gold}"
                                     for q, m in zip(queries, messages))}
    else:
        from .datasets import load_queries

        # --oracle exec reads LiveCodeBench code execution: a file lacking its columns is named as such
        task = req.task if req.task is not None or req.oracle != "exec" else "lcb-exec"
        try:
            queries = load_queries(req.dataset, task=task, limit=req.limit, id_column=req.id_column,
                                   problem_column=req.problem_column, answer_column=req.answer_column,
                                   split=req.split)
        except InputError as e:
            if task == req.task:
                raise
            raise RunError(f"--oracle exec runs LiveCodeBench code-execution queries (question_id, code, input and "
                           f"output columns): {e}") from None
        tasks = sorted({q.task for q in queries})
        template = req.template or default_template(tasks[0], req.dataset)
        info = template_info(template)
        if info["task"] != "any" and tasks != [info["task"]]:
            raise RunError(f"template {template!r} is for {info['task']} queries; this data set holds "
                           f"{', '.join(tasks)}")
        if req.oracle == "gt":
            nogold = [q.query_id for q in queries if q.gold is None]
            if nogold:
                raise RunError(f"--oracle gt needs gold answers, and {len(nogold)} queries have none (e.g. "
                               f"{nogold[0]!r}; name the column with --answer-column, or use --oracle sc)")
            wrong = sorted({q.task for q in queries} - {"math"})
            if wrong:
                raise RunError(f"--oracle gt grades math answers, and this data set holds {', '.join(wrong)} queries"
                               + (" (lcb-exec: use --oracle exec)" if "lcb-exec" in wrong else ""))
        dataset = {"source": req.dataset, "task": req.task, "limit": req.limit, "split": req.split,
                   "columns": {"id": req.id_column, "problem": req.problem_column, "answer": req.answer_column},
                   "n_queries": len(queries), "digest": dataset_digest(queries)}
        if Path(req.dataset).expanduser().is_file():
            dataset["path"] = str(Path(req.dataset).expanduser().resolve())
    n = len(queries)
    if len({q.query_id for q in queries}) != n:
        raise RunError("the queries' ids are not unique")
    queries, prior = read_prior(req, queries)
    if scoring is not None:
        check_scorer(req, queries, scoring)
    budget_total = int(round(req.budget * n))  # (--stream: 0, the budget is a rate per query)
    from ttc.replay.run import MAX_BUDGET_TOTAL

    if budget_total >= MAX_BUDGET_TOTAL:
        raise RunError(f"--budget {req.budget:g} x {n:,} queries is beyond the largest total budget")
    memory = n * req.max_per_query * 64  # bytes the driver's arrays take (replay/live.py: ~64 per response slot)
    if memory > 8 * 2**30:
        raise RunError(f"{n:,} queries x --max-per-query {req.max_per_query} would take about {memory / 2**30:.0f} "
                       "GiB of driver memory; lower --max-per-query or split the queries")

    from .fingerprint import model_fingerprint

    s = req.sampling
    generation = {"model": req.model, "revision": req.revision, "backend": req.backend,
                  "sampling": {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
                               "seed": s.seed},
                  "seed_rule": SEED_RULE, "template": {**info, "chat_option": req.chat}, "dataset": dataset,
                  "weights": model_fingerprint(req.model, req.revision, req.backend,
                                               dtype=req.backend_options.get("dtype"))}
    if req.confidence is not None:  # in the generation block, as ttc harvest records it: a resume must agree
        generation["confidence"] = req.confidence.record()
    allocation = {"policy": cfg.policy, "config": cfg.label(), "unit": req.unit, "budget_per_query": req.budget,
                  "budget_total": budget_total, "max_per_query": req.max_per_query, "oracle": req.oracle,
                  "conf": req.conf if cfg.eliminate == "sc-beta" and "eliminate" in cfg.used_params() else None,
                  "parameters": {p: getattr(cfg, p) for p in cfg.used_params()},
                  "query_order": QUERY_ORDER_RULE, "response_order": "sample order (sample k: seed + k)"}
    if req.stream:
        allocation.update(budget_total=None, query_order="the order the requests come in",
                          stream=STREAM_RULE)
    if req.oracle == "gt":
        allocation["grader"] = {"grade": "harvest.oracles.math_answer.grade (math-verify, gold first)",
                                "timeout_s": req.grade_timeout_s}
    if scorer_config is not None:
        allocation.update(score=score_column, scorer=scorer_config)
    if req.oracle == "confidence":
        allocation["score"] = score_column
    if prior is not None:  # (only when given: the allocation of a run without them reads as before, for its resume)
        allocation["prior"] = {"column": req.prior, "digest": _digest(f"{q.query_id}\0{v!r}"
                                                                      for q, v in zip(queries, prior))}
    if side is not None:
        allocation["side"] = side

    meta: dict = {}
    pool = out / "pool"
    if (pool / "pool.json").exists():
        meta = read_meta(pool)
        if meta.get("format") != FORMAT or "generation" not in meta or "allocation" not in meta:
            raise RunError(f"--out {out} holds a pool that ttc run did not write; choose a new directory")
        old = {"generation": comparable_generation(meta["generation"], generation), "allocation": meta["allocation"]}
        new = {"generation": comparable_generation(generation, meta["generation"]), "allocation": allocation}
        diffs = _diff(old, new)
        if diffs:
            raise RunError(f"--out {out} holds a run with another configuration; resume only with the same options, "
                           "or choose a new directory. Differences (existing vs now): " + "; ".join(diffs[:6])
                           + (f"; ... {len(diffs) - 6} more" if len(diffs) > 6 else ""))
    return RunPlan(req=req, queries=queries, messages=messages, config=cfg, budget_total=budget_total, select=select,
                   template=template, template_info=info, generation=generation, allocation=allocation, meta=meta,
                   inputs=inputs, score_column=score_column, scoring=scoring, oracle_config=scorer_config,
                   prior=prior, side_column=side)


# ---------------------------------------------------------------------------------------------------------------
# Backends


def backend_kwargs(backend: str, model: str, revision: str | None, chat: bool | None, options: dict,
                   given: set[str] = frozenset()) -> dict:
    """The keywords that build `backend` (harvest/registry.py BACKENDS) from the command line's backend options
    (parameter -> value), as `ttc harvest` builds it: an option given on the command line that the backend does not
    take is refused, a required one must be there, None means the backend's own default."""
    from .registry import BACKEND_OPTIONS, BACKENDS, taking

    if backend not in BACKENDS:
        raise RunError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    entry = BACKENDS[backend]
    for param, o in BACKEND_OPTIONS.items():
        if param not in entry.options and param in given:
            raise RunError(f"{o.flag.split('/')[0]} applies to --backend {' or '.join(taking(BACKENDS, param))}, "
                           f"not {backend}")
    for param in entry.required:
        if options.get(param) is None:
            o = BACKEND_OPTIONS[param]
            raise RunError(f"--backend {backend} needs {o.flag} ({o.help.rstrip('.')})")
    kw: dict = {"model": model, "revision": revision}
    if entry.chat == "server":
        kw["chat"] = bool(chat)
    for param in entry.options:
        if options.get(param) is not None:
            kw[BACKEND_OPTIONS[param].keyword] = options[param]
    if options.get("base_url") is not None and "base_url" in entry.options:
        from .backends import check_base_url

        check_base_url(options["base_url"], BACKEND_OPTIONS["base_url"].flag.split("/")[0])  # before --out is made
    device = kw.get("device")
    if device and str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RunError(f"--device {device}: torch {torch.__version__} sees no CUDA device on this machine; use "
                           "--device cpu, or install a CUDA build of torch")
    return kw


def effective_chat(backend: str, chat: bool | None, batch: Path | None) -> bool | None:
    """--chat as given; for a --batch file of chat requests sent to a server backend, chat requests by default."""
    from .registry import BACKENDS

    if chat is None and batch is not None and BACKENDS[backend].chat == "server":
        return True
    return chat


def load_tokenizer(backend: str, model: str, revision: str | None, kw: dict):
    """The model's tokenizer, to render prompts (chat template) and count prompt tokens before the model loads;
    None for a server backend (the server holds it)."""
    from .registry import BACKENDS

    if BACKENDS[backend].chat == "server":
        return None
    from .backends import _load_tokenizer

    return _load_tokenizer(model, revision, bool(kw.get("trust_remote_code", False)))


# ---------------------------------------------------------------------------------------------------------------
# Executing


@dataclass
class RunOutcome:
    out: Path
    results: list[dict]          # one per query, the results.parquet row
    summary: dict                # run.json
    live: dict                   # replay.live.run_live's output
    resumed: bool
    generated_now: int


def _open_run(plan: RunPlan, argv: Sequence[str] | None) -> tuple[dict, dict, dict]:
    """Create (or reopen) the run's directory: its marker, pool.json with this process's run record, and the
    responses an earlier process wrote (by query id). Returns (meta, record, cache)."""
    from ttc.replay.outputs import DIR_MARK
    from ttc.replay.pool import atomic_write_json

    from .pipeline import library_versions

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

    from .pipeline import part_files

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
        from .pipeline import part_files

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
        from .scoring import _with_columns

        df = _with_columns(df, extra)
    if signals:  # after the rest, typed as ttc harvest writes them
        import polars as pl

        df = df.with_columns(pl.Series(c, v, dtype=dtype) for (c, v), dtype in zip(signals.items(),
                                                                                  spec.schema().values()))
    return df


def written_columns(oracle: str) -> tuple[str, ...]:
    """The oracle columns a live run's parts carry: the registry's columns of the oracle, plus `answer` for a score
    oracle (the answers the policy saw; harvest.scoring.LiveScorer)."""
    from .registry import ORACLES

    own = tuple(ORACLES[oracle].columns)
    return own if "answer" in own else ("answer",) + own


def _source_oracle(oracle: str) -> str:
    """What harvest.live.BackendSource scores with: --oracle confidence is --oracle sc's answers with the signal as
    the score (BackendSource's score_signal)."""
    return "sc" if oracle == "confidence" else oracle


def _signal_options(plan: RunPlan) -> dict:
    """BackendSource's confidence options: the signals to ask the backend for, and the one that scores."""
    return {"confidence": plan.req.confidence,
            "score_signal": plan.score_column if plan.req.oracle == "confidence" else None}


def _now() -> str:
    from .pipeline import now

    return now()


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
            from .scoring import LiveScorer

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


def _record_oracle(plan: RunPlan, meta: dict, scorer: "_Scorer | None", score_s: float):
    """pool.json's `oracles` (and `answers`) for the run's oracle: the record `ttc score` writes, so `ttc info`,
    `ttc score` and replay read a live run's columns as a scored pool's."""
    oracle = plan.req.oracle
    if oracle == "gt":
        from .scoring import ScoreOptions, oracle_config

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


PLANNED_POLICIES = ("uniform",)  # with a sample budget: decides nothing from responses (planned_counts)


def backend_stops(req: RunRequest) -> bool:
    """Whether the backend stops a trace mid-way at a group-confidence threshold (the registry's `stops`): with it,
    deepconf-online's traces after the warm-up end where the run stops paying for them; without, they are generated
    whole and the run pays the same (replay.live.run_live's threshold)."""
    from .registry import BACKENDS

    return req.policy == "deepconf-online" and BACKENDS[req.backend].stops


def free_slots(req: RunRequest) -> int:
    """The requests a run keeps in flight one query at a time (harvest.live.BackendSource slots): the backend's
    --concurrency when it takes concurrent calls (the registry's `concurrent`) and --free-slots is on, else 0 (a
    backend call per allocation round)."""
    from .registry import BACKEND_OPTIONS, BACKENDS

    if not (req.free_slots and BACKENDS[req.backend].concurrent):
        return 0
    option = BACKEND_OPTIONS["concurrency"]
    return int(req.backend_options.get(option.keyword) or option.default)


def planned(plan: RunPlan) -> bool:
    """Whether the run's whole allocation is known before its first response (docs/run.md, "Rounds, backend calls,
    and freeing slots early"): `uniform` with a sample budget, which reads no response; with a token budget a
    response's length decides whether the next one fits, and every other policy reads the responses' scores or
    answers."""
    return plan.req.plan_ahead and plan.config.policy in PLANNED_POLICIES and plan.req.unit == "samples"


def planned_counts(plan: RunPlan, source: Any, rank: Sequence[int]) -> list[int]:
    """How many responses of each query a live run of `plan` generates in all, found by running the live driver
    itself (replay.live.run_live) on a harvest.live.BackendSource like `source` (the same queries, lookahead,
    cached responses and failed queries) over a backend that answers at once with blank responses: for a policy
    that reads no response (planned()) the engine makes the same decisions on them, and the source tops up the
    same queries by the same counts, as the run will (the last, partial round's requests included), so generating
    these counts up front changes nothing but the number of backend calls."""
    from ttc.replay.live import Observed, run_live

    from .live import BackendSource

    blank = Response("", 0, "stop")

    class Instant:
        def generate(self, prompts, sampling, seeds, **kw):
            return [[blank] * sampling.n for _ in prompts]

    req = plan.req
    dry = BackendSource(Instant(), plan.queries, lambda q: "", req.sampling, lookahead=req.lookahead, retries=0,
                        retry_delay_s=0.0)
    for i in range(len(plan.queries)):
        have = source.ready(i)
        if have:
            dry.preload(i, [(blank, Observed(False, 0.0, None, 0))] * have)
    dry.fail = dict(source.fail)
    run_live(dry, [req.max_per_query] * len(plan.queries), rank, config=plan.config, budget_total=plan.budget_total,
             conf=req.conf, prior=plan.prior)
    return [dry.ready(i) for i in range(len(plan.queries))]


def execute(plan: RunPlan, backend: Any, tokenizer: Any = None, *, prompt_len: Callable[[str], int] | None = None,
            argv: Sequence[str] | None = None, echo: Callable[[str], None] = print) -> RunOutcome:
    """Run the plan: resume from what `--out` holds, allocate live, write the results, run.json and the pool.
    `backend` is any harvest.types.Backend (a harvest.live.LazyBackend loads the model only when a response is
    needed); `tokenizer` renders chat prompts; prompt_len(prompt) counts a prompt's tokens (None: not counted)."""
    from ttc.replay.live import run_live
    from ttc.replay.progress import progress
    from ttc.replay.rng import query_keys, query_order

    from .live import BackendSource
    from .prompts import render
    from .registry import BACKENDS

    req, out = plan.req, Path(plan.req.out)
    queries = plan.queries
    index = {q.query_id: i for i, q in enumerate(queries)}
    t_start = time.perf_counter()

    entry = BACKENDS[req.backend]
    server = entry.chat == "server"
    if plan.messages is not None:  # a request the backend cannot take is refused before anything is written
        for m in plan.messages:
            render_batch_prompt(m, tokenizer, chat=req.chat, server=server)

    # ---- the oracle's model (exec / prm / judge), loaded before anything is written unless the run is finished
    scorer = _Scorer(plan) if req.oracle in SCORER_ORACLES else None
    if scorer is not None and not plan.meta.get("complete"):
        scorer.open()

    # ---- the directory, and what an earlier process of this run left in it
    meta, record, cache = _open_run(plan, argv)
    resumed = bool(cache) or bool(meta["failures"])

    # ---- the source
    if plan.messages is not None:
        prompt_fn = lambda q: render_batch_prompt(plan.messages[index[q.query_id]], tokenizer,  # noqa: E731
                                                  chat=req.chat, server=server)
    else:
        render_chat = False if server else req.chat
        prompt_fn = lambda q: render(plan.template, q, tokenizer, chat=render_chat)  # noqa: E731
    def snapshot() -> dict:
        return {"responses": source.generated, "completion_tokens": source.completion_tokens,
                "prompt_tokens": source.prompt_tokens if prompt_len is not None else None,
                "backend_calls": source.calls, "failed_calls": source.failed_calls,
                "backend_s": round(source.backend_s, 3), "score_s": round(source.score_s, 3)}

    writer = _PartWriter(plan, meta, snapshot, flush_s=req.flush_s, min_responses=req.part_min)
    on_call = lambda records, failures: writer.on_call(records, failures, queries, source.ready,  # noqa: E731
                                                       source.columns)

    source = BackendSource(backend, queries, prompt_fn, req.sampling, lookahead=req.lookahead,
                           oracle=None if scorer is not None else _source_oracle(req.oracle),
                           stop=plan.template_info.get("stop") or (), retries=req.retries,
                           retry_delay_s=req.retry_delay_s, grade_timeout_s=req.grade_timeout_s,
                           prompt_len=prompt_len, on_call=on_call, scorer=scorer, side_column=plan.side_column,
                           slots=free_slots(req), stops=backend_stops(req),
                           **_signal_options(plan))
    for qid, items in cache.items():
        source.preload(index[qid], items)
    for qid, n in (meta.get("prompt_tokens") or {}).items():  # counted before (a server's count: ServerUsage)
        if qid in index and n is not None:
            source.known_prompt_tokens(index[qid], n)
    for qid, f in meta["failures"].items():
        if qid in index:
            source.fail[index[qid]] = f.get("error") or "failed"
    cached = sum(len(v) for v in cache.values())
    if resumed:
        echo(f"{out}: resuming: {cached:,} responses of {len(cache):,} queries already generated"
             + (f", {len(meta['failures'])} queries failed" if meta["failures"] else ""))

    # ---- allocate
    ids = [q.query_id for q in queries]
    rank, _ = query_order(query_keys(ids), req.sampling.seed)
    spent = [0]
    unit_idx = "samples" if req.unit == "samples" else "tokens"
    with progress(plan.budget_total, f"run ({len(queries)} queries)", req.unit, enabled=req.progress,
                  rates=("responses", "tokens")) as bar:
        def on_run(state):
            delta = state[unit_idx] - spent[0]
            made = source.generated - bar.amounts.get("responses", 0)
            toks = source.completion_tokens - bar.amounts.get("tokens", 0)
            if delta > 0 or made > 0:
                bar.label = f"run ({state['answered']}/{len(queries)} answered)"
                bar.advance(max(delta, 0), responses=made, tokens=toks)
                spent[0] = state[unit_idx]

        t_loop = time.perf_counter()
        plan_s = None
        try:
            if planned(plan):  # every query's whole allocation, in as many backend calls as there are distinct counts
                t_plan = time.perf_counter()
                source.plan(planned_counts(plan, source, rank))
                plan_s = time.perf_counter() - t_plan
            live = run_live(source, [req.max_per_query] * len(queries), rank, config=plan.config,
                            budget_total=plan.budget_total, conf=req.conf, prior=plan.prior, on_run=on_run)
        except BaseException:
            record.update(finished=_now(), seconds=round(time.perf_counter() - t_start, 3))
            writer.flush_quietly()
            raise
        writer.flush()
        t_loop = time.perf_counter() - t_loop

    # ---- results
    load_s = float(getattr(backend, "load_s", 0.0))  # a LazyBackend's model load, inside the first call's time
    source.backend_s -= load_s
    # everything but the backend and the oracle: engine runs, taking responses, writing the pool
    overhead_s = max(0.0, t_loop - source.backend_s - source.score_s - load_s)
    record.update(finished=_now(), seconds=round(time.perf_counter() - t_start, 3), load_s=round(load_s, 3),
                  **snapshot(), overhead_s=round(overhead_s, 3))
    results = _results(plan, source, live)
    summary = _summary(plan, source, live, results, meta, record, time.perf_counter() - t_start)
    summary["this_process"].update(overhead_s=round(overhead_s, 3), write_s=round(writer.write_s, 3),
                                   parts=writer.parts, plan_s=None if plan_s is None else round(plan_s, 3),
                                   slots=source.slots)
    if scorer is not None:
        summary["this_process"]["scorer_load_s"] = round(scorer.load_s, 3)
    _write_pool_end(plan, source, live, meta, backend, prompt_fn, tokenizer, scorer)
    _write_results(plan, results, summary, meta)
    return RunOutcome(out=out, results=results, summary=summary, live=live, resumed=resumed,
                      generated_now=source.generated)


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

    def total(key):
        vals = [r.get(key, 0) for r in runs]
        return None if any(v is None for v in vals) else round(sum(vals), 3)

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

    from .pipeline import promoted_fields, queries_frame

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
        load_pool(plan.pool, score=plan.score_column, prior=plan.req.prior, side=plan.side_column)


def batch_line(plan: RunPlan, row: dict, created: int) -> dict:
    """One result as a line of the OpenAI Batch output file."""
    qid = row["query_id"]
    rid = hashlib.blake2b(str(qid if qid is not None else f"line {row.get('line')}").encode("utf-8"),
                          digest_size=8).hexdigest()
    error = None
    if row["status"] == "invalid":  # --stream: a request line that could not be run
        error = {"code": "invalid_request", "message": row["error"]}
    elif row["error"]:
        error = {"code": "backend_error", "message": row["error"]}
    elif row["returned"] < 0:
        error = {"code": "no_response", "message": "the budget ran out before this query got a response"}
    response = None
    if row["returned"] >= 0:
        usage = {"prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
                 "total_tokens": None if row["prompt_tokens"] is None else row["prompt_tokens"]
                 + row["completion_tokens"]}
        body = {"id": f"chatcmpl-ttc-{rid}", "object": "chat.completion", "created": created,
                "model": plan.req.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": row["text"]},
                             "finish_reason": row["finish_reason"], "logprobs": None}],
                "usage": usage,
                "ttc": {k: row[k] for k in ("status", "answer", "responses", "generated", "selected", "returned",
                                            "correct", "covered", "answered", "capped", "exhausted")}
                | {"select": plan.select}}
        response = {"status_code": 200, "request_id": f"ttc-{rid}", "body": body}
    return {"id": f"batch_req_ttc_{rid}", "custom_id": qid, "response": response, "error": error}


def _write_results(plan: RunPlan, results: list[dict], summary: dict, meta: dict):
    import polars as pl

    from ttc.replay.outputs import atomic_file, write_parquet

    out = Path(plan.req.out)
    started = (meta.get("runs") or [{}])[0].get("started")
    try:
        from datetime import datetime

        created = int(datetime.fromisoformat(started).timestamp())
    except Exception:
        created = int(time.time())
    with atomic_file(out / "results.jsonl") as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in results:
                f.write(json.dumps(batch_line(plan, row, created), ensure_ascii=False) + "\n")
    write_parquet(pl.DataFrame(results, schema=_schema()), out / "results.parquet", "run")
    with atomic_file(out / "run.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# --stream: queries one at a time, as they come


def stream_lines(src: Path | str, idle_s: float = 0.0, poll_s: float = 0.2):
    """(line number, text) of each line of `src` as it comes: stdin ("-") until it closes; a file until its end,
    or, with idle_s > 0, until it has not grown for idle_s seconds (the time spent on a line does not count)."""
    if str(src) == "-":
        for n, line in enumerate(sys.stdin, 1):
            yield n, line.rstrip("\n")
        return
    try:
        f = open(src, encoding="utf-8")
    except OSError as e:
        raise RunError(f"--batch {src}: {e.strerror}") from None
    with f:
        n, buf = 0, ""
        last = time.monotonic()
        while True:
            chunk = f.readline()
            if chunk:
                buf += chunk
                if buf.endswith("\n"):
                    n += 1
                    yield n, buf.rstrip("\n")
                    buf, last = "", time.monotonic()
                continue
            if time.monotonic() - last >= idle_s:
                if buf:
                    yield n + 1, buf
                return
            time.sleep(poll_s)


def _append(f, row: dict):
    f.write(json.dumps(row, ensure_ascii=False) + "\n")
    f.flush()
    os.fsync(f.fileno())


def _read_rows(path: Path) -> list[dict]:
    """The complete lines of an append-only JSONL file; a torn last line (a kill while appending) is dropped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def execute_stream(plan: RunPlan, backend: Any, tokenizer: Any = None, *, lines=None,
                   prompt_len: Callable[[str], int] | None = None, argv: Sequence[str] | None = None,
                   echo: Callable[[str], None] = print) -> RunOutcome:
    """--stream: each request of `lines` ((number, text) pairs; default stream_lines(--batch, --stream-idle)) runs
    as it comes with the streaming policy alone, under a budget rate (STREAM_RULE), and its result is appended to
    results.jsonl (and pool/stream.jsonl, the full row) as soon as it is done. A request line that cannot be run
    (malformed, a repeated custom_id) gets an `invalid_request` error line and the stream goes on. A killed stream
    rerun with the same input skips the lines already done and ends as an uninterrupted one; results.parquet and
    run.json are written when the stream ends."""
    from ttc.replay.live import run_live
    from ttc.replay.outputs import atomic_file

    from .live import BackendSource
    from .registry import BACKENDS

    req, out, pool = plan.req, Path(plan.req.out), plan.pool
    cfg, rule, gt = plan.config, plan.select, req.oracle in TRUTH_ORACLES
    server = BACKENDS[req.backend].chat == "server"
    lines = stream_lines(req.batch, req.stream_idle_s) if lines is None else lines
    t_start = time.perf_counter()
    scorer = _Scorer(plan) if req.oracle in SCORER_ORACLES else None
    if scorer is not None:
        scorer.open()  # a stream may always get a new request
    meta, record, cache = _open_run(plan, argv)
    state = pool / "stream.jsonl"
    rows = _read_rows(state)
    with atomic_file(state) as tmp:  # drop a torn last line
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    runs = meta.get("runs") or [record]
    started = runs[0].get("started")
    try:
        from datetime import datetime

        created = int(datetime.fromisoformat(started).timestamp())
    except Exception:
        created = int(time.time())
    with atomic_file(out / "results.jsonl") as tmp:  # the lines of the rows done, whole
        tmp.write_text("".join(json.dumps(batch_line(plan, r, created), ensure_ascii=False) + "\n" for r in rows))
    done_lines = max((r["line"] for r in rows), default=0)
    seen = {r["query_id"] for r in rows if r["query_id"] is not None}
    t = sum(r["status"] != "invalid" for r in rows)
    unit = req.unit
    spent = sum(r["responses"] if unit == "samples" else r["completion_tokens"] for r in rows)
    if rows:
        echo(f"{out}: resuming the stream after line {done_lines} ({t} queries done)")
    stats = {"generated": 0, "completion_tokens": 0, "prompt_tokens": 0, "calls": 0, "failed_calls": 0,
             "backend_s": 0.0, "score_s": 0.0, "engine_s": 0.0, "runs": 0}
    queries: list[Query] = []
    prompts: dict[str, str] = {}
    last_note = time.perf_counter()

    def snapshot() -> dict:
        return {"responses": stats["generated"], "completion_tokens": stats["completion_tokens"],
                "prompt_tokens": stats["prompt_tokens"] if prompt_len is not None else None,
                "backend_calls": stats["calls"], "failed_calls": stats["failed_calls"],
                "backend_s": round(stats["backend_s"], 3), "score_s": round(stats["score_s"], 3), "queries_done": t}

    writer = _PartWriter(plan, meta, snapshot, flush_s=req.flush_s, min_responses=req.part_min)
    with open(state, "a", encoding="utf-8") as fstate, open(out / "results.jsonl", "a", encoding="utf-8") as fout:
        for n, text in lines:
            if n <= done_lines or not text.strip():
                continue
            where = f"{req.batch}:{n}"
            try:
                q, prompt, _ = parse_batch_line(text, where, n, model=req.model, sampling=req.sampling,
                                                oracle=req.oracle)
                if q.query_id in seen:
                    raise RunError(f"{where}: custom_id {q.query_id!r} came before; custom ids must be unique")
                prompt_text = render_batch_prompt(prompt, tokenizer, chat=req.chat, server=server)
            except RunError as e:
                cid = None
                try:
                    cid = json.loads(text).get("custom_id")
                    cid = cid if isinstance(cid, str) and cid.strip() and cid not in seen else None
                except Exception:
                    pass
                row = {"query_id": cid, "status": "invalid", "answered": False, "capped": False, "exhausted": False,
                       "error": str(e), "responses": 0, "generated": 0, "completion_tokens": 0,
                       "prompt_tokens": None, "selected": -1, "returned": -1, "answer": None, "text": None,
                       "finish_reason": None, "correct": None, "covered": None, "line": n}
                _append(fstate, row)
                _append(fout, batch_line(plan, row, created))
                rows.append(row)
                continue
            seen.add(q.query_id)
            one = [q]

            made: list = []  # this query's source, built below with on_call as an argument; on_call reads it

            def on_call(records, failures, one=one, made=made):
                src = made[0]
                writer.on_call(records, failures, one, lambda i: src.ready(i), lambda i, k: src.columns(i, k))

            source = BackendSource(backend, one, lambda _q, text=prompt_text: text, req.sampling,
                                   lookahead=req.lookahead,
                                   oracle=None if scorer is not None else _source_oracle(req.oracle),
                                   retries=req.retries, retry_delay_s=req.retry_delay_s,
                                   grade_timeout_s=req.grade_timeout_s, prompt_len=prompt_len, on_call=on_call,
                                   scorer=scorer, **_signal_options(plan))
            made.append(source)
            if q.query_id in cache:
                source.preload(0, cache[q.query_id])
            if q.query_id in meta["failures"]:
                source.fail[0] = meta["failures"][q.query_id].get("error") or "failed"
            bank = int(round(req.budget * (t + 1))) - spent
            try:
                live = run_live(source, [req.max_per_query], [0], config=cfg, budget_total=bank,
                                conf=req.conf)
            except BaseException:
                writer.flush_quietly()
                raise
            row = {**_result_row(q, 0, source, live, rule, gt), "line": n}
            writer.flush()  # the query's responses are in the pool before its result says it is done
            _append(fstate, row)
            _append(fout, batch_line(plan, row, created))
            rows.append(row)
            queries.append(q)
            prompts[q.query_id] = shown_prompt(prompt_text)
            t += 1
            spent += int(live["samples_used"] if unit == "samples" else live["tokens_used"])
            for key, v in (("generated", source.generated), ("completion_tokens", source.completion_tokens),
                           ("prompt_tokens", source.prompt_tokens), ("calls", source.calls),
                           ("failed_calls", source.failed_calls), ("backend_s", source.backend_s),
                           ("score_s", source.score_s), ("engine_s", live["driver_s"]), ("runs", live["runs"])):
                stats[key] += v
            if req.progress and time.perf_counter() - last_note >= 10:
                last_note = time.perf_counter()
                b = max(stats["backend_s"], 1e-9)
                print(f"stream: {t:,} queries, {spent:,} {unit} spent ({spent / t:.2f} per query, rate "
                      f"{req.budget:g}), {sum(r['answered'] for r in rows):,} answered; "
                      f"{stats['generated'] / b:,.1f} responses/s, {stats['completion_tokens'] / b:,.0f} tokens/s",
                      file=sys.stderr, flush=True)

    # ---- the end of the stream: the pool's queries, results.parquet, run.json
    load_s = float(getattr(backend, "load_s", 0.0))
    stats["backend_s"] -= load_s
    record.update(finished=_now(), **snapshot(), load_s=round(load_s, 3),
                  seconds=round(time.perf_counter() - t_start, 3))
    _stream_pool_end(plan, queries, prompts, meta, backend, scorer, stats["score_s"])
    import polars as pl

    from ttc.replay.outputs import write_parquet

    write_parquet(pl.DataFrame([{k: v for k, v in r.items() if k != "line"} for r in rows], schema=_schema()),
                  out / "results.parquet", "run")
    valid = [r for r in rows if r["status"] != "invalid"]
    counts = {st: sum(r["status"] == st for r in valid) for st in STATUS}

    def total(key):
        vals = [r.get(key, 0) for r in meta.get("runs", [])]
        return None if any(v is None for v in vals) else round(sum(vals), 3)

    summary = {
        "format": FORMAT, "stream": True, "out": str(out), "model": req.model, "backend": req.backend,
        "queries": len(valid), "invalid_lines": len(rows) - len(valid), "policy": cfg.policy, "config": cfg.label(),
        "oracle": req.oracle, "select": rule, "unit": unit, "budget_per_query": req.budget, "budget_total": None,
        "rule": STREAM_RULE, "max_per_query": req.max_per_query, "seed": req.sampling.seed,
        "spent": {"samples": sum(r["responses"] for r in valid),
                  "tokens": sum(r["completion_tokens"] for r in valid)},
        "outcome": {**counts, "coverage": sum(bool(r["covered"]) for r in valid) / len(valid) if gt and valid
                    else None,
                    "accuracy": sum(bool(r["correct"]) for r in valid) / len(valid) if gt and valid else None},
        "cost": {"responses_generated": sum(r["generated"] for r in valid),
                 "responses_used": sum(r["responses"] for r in valid),
                 "completion_tokens_used": sum(r["completion_tokens"] for r in valid),
                 "prompt_tokens": total("prompt_tokens"), "backend_calls": total("backend_calls"),
                 "backend_s": total("backend_s"), "score_s": total("score_s"), "load_s": total("load_s"),
                 "processes": len(meta.get("runs", []))},
        "this_process": {"responses_generated": stats["generated"], "completion_tokens": stats["completion_tokens"],
                         "prompt_tokens": stats["prompt_tokens"] if prompt_len is not None else None,
                         "backend_calls": stats["calls"], "failed_calls": stats["failed_calls"],
                         "backend_s": round(stats["backend_s"], 3), "score_s": round(stats["score_s"], 3),
                         "load_s": round(load_s, 3), "engine_s": round(stats["engine_s"], 3),
                         "engine_runs": stats["runs"], "wall_s": round(time.perf_counter() - t_start, 3)},
        "failures": {r["query_id"]: r["error"] for r in valid if r["status"] == "failed"},
        "started": started, "finished": _now(),
    }
    with atomic_file(out / "run.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return RunOutcome(out=out, results=rows, summary=summary, live={}, resumed=bool(done_lines),
                      generated_now=stats["generated"])


def _stream_pool_end(plan: RunPlan, queries: list[Query], prompts: dict, meta: dict, backend, scorer=None,
                     score_s: float = 0.0):
    """queries.parquet: the queries of this process with a response, added to those an earlier process listed."""
    import polars as pl

    from ttc.replay.pool import atomic_write_json, atomic_write_parquet

    from .pipeline import part_files, queries_frame

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
