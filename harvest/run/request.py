"""`ttc run`'s request and what it is checked against: the options (RunRequest, holding the policy's RunConfig),
the oracles a run scores with live, and the checks of the request against its inputs (the policy's extra inputs,
the oracle's columns, the extras installed) that planning (plan.py) runs before anything is written."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional, Sequence

from ttc.replay.errors import InputError

from ..types import Query, Sampling

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


@dataclass
class _RequestFields:
    out: Path
    model: str
    backend: str
    sampling: Sampling                  # n is ignored (the budget decides); temperature, top_p, max_tokens, seed
    budget: float                       # average per query, in config.unit
    config: Any = None                  # replay.policies.RunConfig: the policy, the budget unit and every parameter
    dataset: Optional[str] = None
    batch: Optional[Path] = None
    oracle: str = "gt"
    eliminate: Optional[str] = None     # None: the oracle's default (config.eliminate is replaced by it when planned)
    prior: Optional[str] = None         # marginal-gain: a field of each query (a --dataset column, a --batch line's
    #                                     top-level key) holding its predicted success probability
    side: Optional[str] = None          # side-eb: a score column the run records (a --confidence signal's, or the
    #                                     oracle's), each response's side signal
    conf: float = 0.95
    select: Optional[str] = None        # None: the oracle's default
    score: Optional[str] = None         # prm: the column the policy reads (prm_min, ...); None: the oracle's
    scoring: Any = None                 # harvest.scoring.ScoreOptions of exec / prm / judge (None: defaults)
    confidence: Any = None              # harvest.confidence.ConfidenceSpec: signals each response records (the
    #                                     scores of --oracle confidence; with another oracle, columns for replay)
    max_per_query: int = 256
    lookahead: int = 1
    probe_every: int = 500              # --depth-rule stability: a probe every this many tokens of a trace (the
    #                                     spacing replay reads from a probed pool's offsets: AutoTTS's 500)
    plan_ahead: bool = True             # uniform with a sample budget: generate every query's whole allocation up
    #                                     front (planned_counts), one backend call per distinct count
    free_slots: bool = True             # a backend that takes concurrent calls (openai): each query's next response
    #                                     asked for as soon as the run wants it, up to --concurrency in flight
    #                                     (harvest.live.BackendSource slots); False: one call per round
    retries: int = 2
    retry_delay_s: float = 1.0
    grade_timeout_s: float = 5.0
    template: Optional[str] = None
    chat: Optional[bool] = None
    revision: Optional[str] = None
    limit: Optional[int] = None
    task: Optional[str] = None
    id_column: Optional[str] = None
    problem_column: Optional[str] = None
    answer_column: Optional[str] = None
    split: Optional[str] = None
    backend_options: dict = field(default_factory=dict)  # keyword -> value, for the backend's constructor
    progress: bool = True
    flush_s: float = 5.0                # part files: a write at least this long after the last (_PartWriter)
    part_min: int = 4096                # ... or as soon as this many responses are waiting
    stream: bool = False                # queries one at a time from --batch FILE or - (stdin): execute's stream mode
    stream_idle_s: float = 0.0          # a growing --batch FILE: stop after this long without a new line


class RunRequest(_RequestFields):
    """Everything `ttc run` is given. The policy and its parameters are one RunConfig (`config`), not re-listed
    here: RunRequest(..., policy="ucb", K=4) builds it from RunConfig's own field names (a bad value is an InputError
    at once), or pass config=RunConfig(...). The one exception is `eliminate`, whose default is the oracle's
    (DEFAULT_ELIMINATE) and so is kept beside the config until the run is planned."""

    def __init__(self, *args, **kw):
        from ttc.replay.policies import RunConfig
        from ttc.replay.run import config_from_options

        names = {f.name for f in fields(RunConfig)} - {"eliminate"}
        given = {k: kw.pop(k) for k in list(kw) if k in names}
        if given and kw.get("config") is not None:
            raise TypeError(f"RunRequest: give the policy's parameters in config= or as keywords, not both "
                            f"({', '.join(sorted(given))})")
        if kw.get("config") is None:
            kw["config"] = config_from_options(given.pop("policy", "elimination"), **given)
        super().__init__(*args, **kw)

    @property
    def policy(self) -> str:
        return self.config.policy

    @property
    def unit(self) -> str:
        return self.config.unit


# ---------------------------------------------------------------------------------------------------------------
# The request against its inputs: every check before anything is written (plan.py runs them)


def run_config(req: RunRequest, eliminate: str):
    """The RunConfig the run allocates with: the request's, with the elimination rule resolved (the oracle's
    default when not given) and the parameters `ttc run` cannot take yet refused unless left at their defaults
    (DEPTH_FIELDS: replay only, but parallel-probe's and cmc's own parameters when they run)."""
    from dataclasses import replace

    from ttc.replay.policies import DEPTH_FIELDS, DEPTH_POLICIES, REGISTRY, RunConfig, flag

    default = RunConfig(req.config.policy)
    own = REGISTRY[req.config.policy].params if req.config.policy in DEPTH_POLICIES else ()
    for name in DEPTH_FIELDS:
        if name not in own and getattr(req.config, name) != getattr(default, name):
            raise RunError(f"{flag(name)} is replay only: ttc run charges a trace the tokens it ran (ttc replay "
                           f"RUN/pool {flag(name)} replays the run's pool with it)")
    try:
        return replace(req.config, eliminate=eliminate)
    except ValueError as e:
        raise InputError(str(e)) from None


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
    from ..registry import ORACLES, SIGNALS

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

    from ..pipeline import QUERY_COLUMNS

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
    from ttc.replay.policies import DEPTH_POLICIES, ELIMINATION_RULES, REGISTRY

    if req.oracle in UNSUPPORTED:
        raise RunError(f"--oracle {req.oracle}: {UNSUPPORTED[req.oracle]} (ttc run scores with "
                       f"{' or '.join(LIVE_ORACLES)}); run it, then score its pool: ttc score {req.out}/pool "
                       f"--oracle {req.oracle}")
    if req.oracle not in LIVE_ORACLES:
        raise RunError(f"unknown oracle {req.oracle!r}; ttc run scores with {', '.join(LIVE_ORACLES)}")
    if not REGISTRY[cfg.policy].live and cfg.policy not in DEPTH_POLICIES:  # (depth's: run_live_depth)
        from ttc.replay.live import LIVE_POLICIES

        raise RunError(f"--policy {cfg.policy} needs hindsight and cannot run live; choose from "
                       f"{', '.join(LIVE_POLICIES + DEPTH_POLICIES)}")
    if not ELIMINATION_RULES[cfg.eliminate].live:
        raise RunError(f"--eliminate {cfg.eliminate} needs hindsight (the query's whole pool) and cannot run live; "
                       f"choose from {', '.join(n for n, r in ELIMINATION_RULES.items() if r.live)}")
    if cfg.hindsight_values():
        raise RunError(f"{', '.join(cfg.hindsight_values())} needs hindsight (the query's whole pool) and cannot run "
                       f"live")
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

    from ..scoring import ScoreOptions, oracle_config

    opts = replace(req.scoring or ScoreOptions(), progress=False)
    return column, opts, oracle_config(req.oracle, opts)


def _confidence_column(req: RunRequest) -> str:
    """--oracle confidence: the score column of the --confidence signal the policy reads (the first one recorded, or
    --score's: a signal name or its column)."""
    from ..registry import SIGNALS

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
    from ..scoring import check_applicable

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

    from ..registry import BACKENDS, ORACLES

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

