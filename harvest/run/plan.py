"""Planning `ttc run`: the whole request checked, the queries read, the run's records (generation, allocation)
built and compared with a run already in --out, before anything is written or a model loads (plan_run); and what
the plan decides about the backend (its keywords, concurrent slots, stopping traces, planned allocations)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ttc.replay.errors import InputError

from ..types import Query, Response
from .batch import _digest, read_batch
from .request import (
    DEFAULT_ELIMINATE,
    DEFAULT_SELECT,
    FORMAT,
    LIVE_ORACLES,
    QUERY_ORDER_RULE,
    STREAM_RULE,
    UNSUPPORTED,
    RunError,
    RunRequest,
    _inputs,
    check_extras,
    check_inputs,
    check_oracle,
    check_scorer,
    oracle_settings,
    read_prior,
    run_config,
    side_column,
)


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


def plan_run(req: RunRequest) -> RunPlan:
    """Check the whole request and the output directory, read the queries, and compare with a run already in
    `--out` (a resume); nothing is written and no model is loaded."""
    from ttc.replay.outputs import check_output
    from ttc.replay.policies import ELIMINATION_RULES, LIVE_SELECTIONS, SELECTION_RULES

    check_trace_cap(req, req.config)  # (first: a backend that cannot probe is refused before its extra is asked for)
    check_request(req)
    eliminate = req.eliminate or DEFAULT_ELIMINATE[req.oracle]
    from ttc.replay.policies import DEPTH_POLICIES

    select = req.select or ("sc" if req.config.policy in DEPTH_POLICIES else DEFAULT_SELECT[req.oracle])
    if eliminate not in ELIMINATION_RULES or select not in SELECTION_RULES:
        raise RunError(f"unknown --eliminate {eliminate!r} or --select {select!r}")
    if select not in LIVE_SELECTIONS:  # (the command line offers only these; a RunRequest built in Python may not)
        raise RunError(f"--select {select} is computed by replay only; ttc run returns {', '.join(LIVE_SELECTIONS)}")
    cfg = run_config(req, eliminate)
    check_oracle(req, cfg, select)
    check_inputs(req, cfg)
    score_column, scoring, scorer_config = oracle_settings(req)
    side = side_column(req)
    inputs = _inputs(req)
    out = Path(req.out)
    check_output(out, flag="--out", command="run", reads=inputs, kind="dir")


    queries, messages, template, info, dataset = read_queries(req)
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


    generation, allocation = run_records(req, cfg, queries, info, dataset, budget_total=budget_total,
                                         score_column=score_column, scorer_config=scorer_config, prior=prior,
                                         side=side)
    meta = check_resume(out, generation, allocation)
    return RunPlan(req=req, queries=queries, messages=messages, config=cfg, budget_total=budget_total, select=select,
                   template=template, template_info=info, generation=generation, allocation=allocation, meta=meta,
                   inputs=inputs, score_column=score_column, scoring=scoring, oracle_config=scorer_config,
                   prior=prior, side_column=side)


def check_trace_cap(req: RunRequest, cfg) -> None:
    """--trace-cap and --depth-rule stability live: only a backend that can stop a trace part-way and probe it (the
    registry's `probes`), for math answers (the probe asks for a \\boxed{} one), below --max-tokens (a trace never
    runs past that), and not with deepconf-online (which stops traces its own way). Stability probes every
    --probe-every tokens; with a cap too, the cap is a probe's offset (replay answers a capped trace with its last
    probe at or below the cap, and the live trace answers the probe it gets there). parallel-probe and cmc
    (check_depth_policy) advance their traces --probe-every tokens at a time, each segment ending with a probe: the
    same terms."""
    from ttc.replay.policies import DEPTH_POLICIES

    from ..registry import BACKENDS

    cap, stability, policy = cfg.trace_cap, cfg.depth_rule == "stability", cfg.policy in DEPTH_POLICIES
    if not stability and not policy and req.probe_every != RunRequest.probe_every:
        raise RunError("--probe-every spaces the probes of --depth-rule stability, parallel-probe and cmc; without "
                       "them nothing reads it")
    if not cap and not stability and not policy:
        return
    what = f"--policy {cfg.policy}" if policy else "--trace-cap" if not stability else "--depth-rule stability"
    if policy:
        check_depth_policy(req, cfg)
    able = [name for name, b in BACKENDS.items() if b.probes]
    if req.backend in BACKENDS and not BACKENDS[req.backend].probes:
        raise RunError(f"{what} needs a backend that can stop a trace part-way and ask it for its answer so far "
                       f"({', '.join(able)}); --backend {req.backend} cannot (docs/run.md, \"Depth\")")
    if cap and cap >= req.sampling.max_tokens:
        raise RunError(f"--trace-cap {cap} is not below --max-tokens {req.sampling.max_tokens}: no trace runs past "
                       "--max-tokens, so the cap would stop none")
    if req.oracle in ("exec", "prm", "judge", "confidence") or cfg.policy == "deepconf-online":
        by = f"--policy {cfg.policy}" if cfg.policy == "deepconf-online" else f"--oracle {req.oracle}"
        raise RunError(f"{what} with {by} is replay only for now: a live trace stopped part-way answers "
                       "a \\boxed{} probe, read by --oracle gt or sc")
    every = req.probe_every
    if stability or policy:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise RunError(f"--probe-every must be a whole number of tokens >= 1, got {every!r}")
        if every >= req.sampling.max_tokens:
            raise RunError(f"--probe-every {every} is not below --max-tokens {req.sampling.max_tokens}: no trace "
                           "would be probed")
        if cap and cap % every:
            raise RunError(f"--trace-cap {cap} is not a multiple of --probe-every {every}: a capped trace answers its "
                           "last probe at or below the cap, so the cap must be a probe's offset")


def check_depth_policy(req: RunRequest, cfg) -> None:
    """parallel-probe and cmc live (harvest/run/depth.py): they stop their traces themselves (no depth rule), pay
    samples or tokens, answer with their own vote (--select sc), and take queries as one batch."""
    if cfg.depth_rule != "whole":
        raise RunError(f"--depth-rule does not apply to --policy {cfg.policy}: it stops its traces itself")
    if req.stream:
        raise RunError(f"--stream with --policy {cfg.policy}: its queries share rounds of segments; run them as one "
                       "batch")
    if req.select not in (None, "sc"):
        raise RunError(f"--policy {cfg.policy} answers with its own vote over its traces' answers: --select sc "
                       f"(got --select {req.select})")
    if req.prior is not None or req.side is not None or req.confidence is not None:
        raise RunError(f"--policy {cfg.policy} reads its traces' probes only (no --prior, --side or --confidence)")


def check_request(req: RunRequest) -> None:
    """The options alone: one source of queries, --stream's terms, the budget and the numbers in range."""
    from ..pipeline import SEED_SPACING

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


def read_queries(req: RunRequest) -> tuple[list[Query], list | None, str | None, dict, dict]:
    """The queries (a data set, a --batch file, or none yet with --stream), each batch request's messages, the
    prompt template, its record, and the data set's record: (queries, messages, template, template info, dataset)."""
    from ..pipeline import dataset_digest
    from ..prompts import default_template, template_info

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
        from ..datasets import load_queries

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
    return queries, messages, template, info, dataset


def run_records(req: RunRequest, cfg, queries: Sequence[Query], info: dict, dataset: dict, *, budget_total: int,
                score_column: str | None, scorer_config: dict | None, prior: list | None, side: str | None
                ) -> tuple[dict, dict]:
    """pool.json's generation and allocation blocks: what a resume must agree with."""
    from ..fingerprint import model_fingerprint
    from ..pipeline import SEED_RULE

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
    if cfg.trace_cap:  # (only then: the allocation of a run without it reads as before, for its resume)
        from ..backends import PROBE_PROMPT, PROBE_TOKENS

        allocation["trace_cap"] = {"tokens": cfg.trace_cap, "probe": PROBE_PROMPT, "probe_max_tokens": PROBE_TOKENS,
                                   "cost": "a trace stopped at the cap pays the cap; its probe is not charged"}
    if cfg.depth_rule == "stability":  # (likewise only then)
        from ..backends import PROBE_PROMPT, PROBE_TOKENS

        allocation["depth"] = {"rule": "stability", "m": cfg.depth_m, "probe_every": req.probe_every,
                               "probe": PROBE_PROMPT, "probe_max_tokens": PROBE_TOKENS,
                               "cost": "a trace stopped by its probes pays the tokens it ran; probes are not charged"}
    from ttc.replay.policies import DEPTH_POLICIES

    if cfg.policy in DEPTH_POLICIES:  # (likewise)
        from ..backends import PROBE_PROMPT, PROBE_TOKENS

        allocation["depth"] = {"policy": cfg.policy, "probe_every": req.probe_every, "probe": PROBE_PROMPT,
                               "probe_max_tokens": PROBE_TOKENS,
                               "cost": "each trace pays the tokens it ran (segments of probe_every tokens, each "
                                       "ending with a probe); probes are not charged"}

    return generation, allocation


def check_resume(out: Path, generation: dict, allocation: dict) -> dict:
    """The pool.json of a run already in --out ({} for a new one), refused when another configuration wrote it."""
    from ..pipeline import _diff, comparable_generation, read_meta

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
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Backends


def backend_kwargs(backend: str, model: str, revision: str | None, chat: bool | None, options: dict,
                   given: set[str] = frozenset()) -> dict:
    """The keywords that build `backend` (harvest/registry.py BACKENDS) from the command line's backend options
    (parameter -> value), as `ttc harvest` builds it: an option given on the command line that the backend does not
    take is refused, a required one must be there, None means the backend's own default."""
    from ..registry import BACKEND_OPTIONS, BACKENDS, taking

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
        from ..backends import check_base_url

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
    from ..registry import BACKENDS

    if chat is None and batch is not None and BACKENDS[backend].chat == "server":
        return True
    return chat


def load_tokenizer(backend: str, model: str, revision: str | None, kw: dict):
    """The model's tokenizer, to render prompts (chat template) and count prompt tokens before the model loads;
    None for a server backend (the server holds it)."""
    from ..registry import BACKENDS

    if BACKENDS[backend].chat == "server":
        return None
    from ..backends import _load_tokenizer

    return _load_tokenizer(model, revision, bool(kw.get("trust_remote_code", False)))

PLANNED_POLICIES = ("uniform",)  # with a sample budget: decides nothing from responses (planned_counts)


def backend_stops(req: RunRequest) -> bool:
    """Whether the backend stops a trace mid-way at a group-confidence threshold (the registry's `stops`): with it,
    deepconf-online's traces after the warm-up end where the run stops paying for them; without, they are generated
    whole and the run pays the same (replay.live.run_live's threshold)."""
    from ..registry import BACKENDS

    return req.policy == "deepconf-online" and BACKENDS[req.backend].stops


def free_slots(req: RunRequest) -> int:
    """The requests a run keeps in flight one query at a time (harvest.live.BackendSource slots): the backend's
    --concurrency when it takes concurrent calls (the registry's `concurrent`) and --free-slots is on, else 0 (a
    backend call per allocation round)."""
    from ..registry import BACKEND_OPTIONS, BACKENDS

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

    from ..live import BackendSource

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


