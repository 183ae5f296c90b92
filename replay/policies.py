"""The registry of allocation policies, elimination rules and selection rules: each declared once here, with
its kernel code, the parameters it uses, what it needs from a pool and its one-line description. The command
line's choices and help, the README's tables (tests/test_registry.py checks them), the report's lists, the
figures' styles and the live driver read these entries.

Adding a policy = a code and a branch in replay/kernel.py's run_one (the code also in kernel.ROUND_ROBIN_POLICIES
or INDEX_POLICIES when it schedules as those do), its plain-Python twin in replay/reference.py, one `Policy` entry
below, and its paragraph in docs/semantics.md.

The module imports neither numba nor numpy, so that the command line's choices and `ttc.POLICIES` cost nothing: an
entry names its kernel code (`kernel="UCB"`, a constant of replay/kernel.py) and `.code` looks it up on first use
(tests/test_registry.py holds every name to the kernel); POLICIES, ELIMS and UNITS, the code tables, are built
from the kernel when first read.
"""
from __future__ import annotations

import functools
import importlib
import math
import re
from dataclasses import asdict, dataclass, field, fields


def _kernel():
    return importlib.import_module(".kernel", __package__)


ENGINE_NS, REF_US = 25.0, 5.0  # a decision's cost for most policies (Cost)
COST_BUDGETS = (4, 8, 16, 32)  # the budgets per query a Cost's tuple values were measured at (`ttc bench`'s)


@dataclass(frozen=True)
class Cost:
    """What a policy's (or a rule's) work costs on `ttc bench`'s synthetic pool (500 queries x 64 responses), CPU
    time measured on the shared 2-core machine, so that `ttc bench` can say how long it will take before it starts
    (replay/bench.py estimate_s; docs/performance.md, 'ttc bench's estimate', has the commands that measure them).
    A decision here is one of the budget's (budget x queries: a rule that answers every query early makes its
    decisions cost less). engine_ns: the engine's ns per decision, one thread; ref_us: the plain-Python reference's us
    per decision, plus
    ref_scan_us per query of the pool (an index policy's reference scans every query per decision); each a number,
    or its values at the budgets per query of COST_BUDGETS where a decision costs more as a query's draws grow
    (pets' and lbayes' counts; between them interpolated, beyond them the nearest); engine_run_s and ref_run_s:
    once per run, before its first decision (pets-online's plan). A rule's cost adds to its policy's (its check)."""

    engine_ns: float | tuple = 0.0
    ref_us: float | tuple = 0.0
    ref_scan_us: float = 0.0
    engine_run_s: float = 0.0
    ref_run_s: float = 0.0

    @staticmethod
    def at(value, budget: float) -> float:
        """A value of this Cost at `budget` draws a query."""
        if not isinstance(value, tuple):
            return float(value)
        pts = list(zip(COST_BUDGETS, value, strict=True))
        if budget <= pts[0][0]:
            return float(pts[0][1])
        for (b0, v0), (b1, v1) in zip(pts, pts[1:], strict=False):
            if budget <= b1:
                return v0 + (v1 - v0) * (budget - b0) / (b1 - b0)
        return float(pts[-1][1])


@dataclass(frozen=True)
class Policy:
    """One allocation policy. params: the RunConfig fields that change what it does, in label order (the others
    are ignored and dropped from its label; gamma is also read through a threshold rule, and listed here only
    where the policy reads it whatever the rule); needs: what a pool must have ("answers", "gt", "lows": the record
    lows of each response's group confidence, which replay/pool.py loads only for a policy that needs them); lam: its
    default exploration bonus; live: whether it can run without hindsight; published: from the literature (False:
    this project's own, which `ttc compare` measures against the best published policy, tuned alike); grid: the
    report's parameter sweeps it takes part in;
    style: (colour, marker, line style) in every figure; inputs: the signals beyond the pool's scores it reads,
    "prior" (a per-query predicted success probability: --prior COLUMN) or "side" (a per-response side signal: --side
    COLUMN), so that `ttc run` can refuse such an option for a policy that would ignore it; slow: it costs far more
    than the others (pets: not per decision any more, 2-9 us, but its code compiles into run_one's reading
    specialisation, which a default replay would then compile instead of the plain one, about twice the first run's
    CPU: docs/semantics.md; pets-online likewise), so ttc replay, compare and the leaderboard run it only where it is
    named (--policy)."""

    name: str
    kernel: str  # its code's name in replay/kernel.py
    doc: str
    params: tuple = ()
    needs: frozenset = frozenset()
    lam: float | None = None
    live: bool = True
    published: bool = True
    grid: frozenset = frozenset()
    style: tuple = ("#4d4d4d", "o", "-")
    inputs: tuple = ()
    slow: bool = False
    cost: Cost = Cost(engine_ns=ENGINE_NS, ref_us=REF_US)  # for `ttc bench`'s estimate (Cost)

    @property
    def code(self) -> int:
        return getattr(_kernel(), self.kernel)


_ADAPTIVE = ("K", "eliminate", "max_samples")
REGISTRY = {p.name: p for p in (
    Policy("uniform", "UNIFORM", "the same number of responses for every query (round-robin, no elimination)",
           style=("#4d4d4d", "o", "-")),
    Policy("elimination", "ELIMINATION", "round-robin over the queries not yet answered", _ADAPTIVE,
           grid=frozenset({"K", "gamma", "tokens", "cap"}), style=("#1f77b4", "s", "-")),
    Policy("ucb", "UCB", "highest mean score + lambda / sqrt(n) first", ("K", "eliminate", "lam", "max_samples"),
           lam=1.0,
           grid=frozenset({"K", "lambda", "gamma", "tokens"}), style=("#ff7f0e", "^", "--"),
           cost=Cost(65.0, REF_US, 0.135)),
    Policy("gap", "GAP", "smallest sqrt(n) (abs(gamma - mean) + eps) first (APT form)",
           ("K", "eliminate", "eps", "max_samples", "gamma"),
           grid=frozenset({"K", "gamma", "tokens"}), style=("#2ca02c", "v", ":"),
           cost=Cost(70.0, REF_US, 0.154)),
    Policy("gap-literal", "GAP_LITERAL", "the paper's printed gap formula, for comparison only",
           _ADAPTIVE + ("gamma",), style=("#8c564b", "x", "-."),
           cost=Cost(40.0, REF_US, 0.13)),
    Policy("entropy", "ENTROPY", "highest answer entropy + lambda / sqrt(n) first",
           ("K", "eliminate", "lam", "max_samples"),
           needs=frozenset({"answers"}), lam=3.0, grid=frozenset({"K", "lambda", "gamma", "tokens"}),
           style=("#d62728", "D", "-"),
           cost=Cost(60.0, REF_US, 0.184)),
    Policy("two-stage", "TWO_STAGE", "round-robin with a share rho of the budget, the rest by posterior mean",
           ("eliminate", "rho", "max_samples"), grid=frozenset({"tokens"}), style=("#9467bd", "P", "--")),
    Policy("streaming", "STREAMING", "queries one at a time in order, each until answered or capped",
           _ADAPTIVE, grid=frozenset({"tokens", "cap"}), style=("#17becf", "*", "-.")),
    Policy("oracle", "ORACLE", "hindsight ceiling: each query up to its first correct response, cheapest first",
           needs=frozenset({"gt"}), live=False, style=("#bcbd22", "h", ":")),
    Policy("optscale", "OPTSCALE", "OptScale: a warm-up per query, then each its own N: the fewest draws that reach "
           "gamma with probability 1 - percentile, from the warm-up's success rate",
           ("warmup", "percentile", "max_samples", "gamma"), style=("#e377c2", "p", "--")),
    Policy("marginal-gain", "MARGINAL_GAIN", "each pull to the unsolved query whose next response most likely reaches "
           "gamma: a Beta posterior mean from its --prior prediction (else Laplace's) and its scores",
           ("K", "eliminate", "max_samples", "gamma", "prior_strength"), style=("#7f7f7f", "d", "-."),
           inputs=("prior",),
           cost=Cost(75.0, REF_US, 0.13)),
    Policy("dsc", "DSC", "DSC: one draw per query ranks them by its score; a binary search marks the easy prefix (its "
           "judges stop at their first window of K); the rest draw windows of K until the rule stops them",
           ("K", "eliminate", "max_samples", "judge"), style=("#aec7e8", "8", ":")),
    Policy("side-eb", "SIDE_EB", "each pull to the unanswered query whose next response most likely answers it per "
           "unit cost: an empirical-Bayes rate learnt during the run per bin of the --side signal of its failed draws",
           ("K", "eliminate", "max_samples", "prior_strength", "bins", "refresh", "horizon"), published=False,
           style=("#ffbb78", "X", "--"),
           inputs=("side",),
           cost=Cost(210.0, REF_US, 0.205)),
    Policy("deepconf-online", "DEEPCONF_ONLINE",
           "DeepConf online: a warm-up of whole traces per query sets its threshold "
           "(the percentile of their lowest group confidences keeping the top share percentile); then one trace at a "
           "time, round-robin, until its confidence-weighted vote reaches tau; a trace whose group confidence falls "
           "below the threshold stops there, pays its tokens so far and does not vote",
           ("warmup", "percentile", "tau", "max_samples"), needs=frozenset({"lows", "answers"}),
           style=("#c5b0d5", "<", "-")),
    # the 2025-26 cross-query allocations (issue 29)
    Policy("uab", "UAB", "UAB: one draw per query, its --side confidence (exp(-mean NLL)) giving p = conf^(1/uab_tau); "
           "the rest of the budget one draw at a time to the largest p (1 - p)^c (a concave coverage surrogate), then "
           "drawn", ("uab_tau", "max_samples"), needs=frozenset({"side"}), style=("#843c39", ">", "-."),
           inputs=("side",),
           cost=Cost(80.0, 19.5)),
    Policy("pets", "PETS", "PETS offline (OKG): one draw per query, then each draw to the query whose next draw most "
           "raises the largest argmax probability of the Dirichlet over its pets_options answer buckets (optimistic "
           "knowledge gradient, computed exactly, or as the source estimates it with pets_mc); no stop",
           ("K", "max_samples", "pets_options", "pets_mc"),
           needs=frozenset({"answers"}), style=("#5254a3", "<", ":"), slow=True,
           cost=Cost((1180.0, 1980.0, 5320.0, 8150.0), 1000.0)),
    Policy("pets-online", "PETS_ONLINE", "PETS online: the first pets_train queries of the order fit, on their whole "
           "pools (hindsight), a probit curve of majority accuracy per bucket (the 4 warm-up answers agree / not) and "
           "a greedy plan of draws per bucket within the budget per query; then each query in order draws to 4 "
           "accepted answers (pets_options buckets), takes its bucket's budget and draws to it; no stop",
           ("max_samples", "pets_options", "pets_train", "pets_curve_mc"), needs=frozenset({"answers"}),
           live=False, style=("#9c9ede", ">", "--"), slow=True,
           cost=Cost(ENGINE_NS, REF_US, engine_run_s=0.037, ref_run_s=2.9)),
    # depth (issue 30): policies that stop traces part-way, read the pool's probes
    Policy("parallel-probe", "PARALLEL_PROBE", "Parallel-Probe: `chains` traces per query advanced one probe per step "
           "in lockstep; the majority of their latest answers stops the query once it has held for `stable` steps; "
           "after `probe_warmup` steps a trace off the majority `patience` steps in a row is pruned; its answer is "
           "that majority", ("chains", "stable", "patience", "probe_warmup"), needs=frozenset({"probes", "answers"}),
           live=False, style=("#393b79", "H", "-")),
    Policy("cmc", "CMC",
           "AutoTTS's discovered controller (Confidence Momentum Controller): traces probed in rounds, the "
           "most-probed first and those agreeing with the finished traces' majority deeper; it stops when an EMA of "
           "that majority's Beta confidence is high and not falling, widens when it stalls, abandons persistently "
           "deviant traces; every knob from one scalar cmc_beta in [0, 1]", ("cmc_beta",),
           needs=frozenset({"probes", "answers"}), live=False, published=True, style=("#637939", "p", "--")),
)}


@dataclass(frozen=True)
class Rule:
    """An elimination rule (when a query counts as answered) or a selection rule (which response a query
    finally gives); params: the RunConfig fields it reads; needs as for Policy."""

    name: str
    kernel: str | int  # its code's name in replay/kernel.py (a selection's: its index in the kernel's order)
    doc: str
    params: tuple = ()
    needs: frozenset = frozenset()
    live: bool = True  # an elimination rule that reads hindsight (the query's whole pool) cannot run live
    cost: Cost = Cost()  # an elimination rule's check, added to its policy's (`ttc bench`'s estimate)

    @property
    def code(self) -> int:
        return self.kernel if isinstance(self.kernel, int) else getattr(_kernel(), self.kernel)


# Depth rules (issue 30): when a trace stops part-way, each trace on its own (so every width policy runs under one:
# engine.depth_pool); a query then holds the trace's last probe's answer.
DEPTH_RULES = {r.name: r for r in (
    Rule("whole", "DEPTH_WHOLE", "none: a trace runs to its end (or to --trace-cap)"),
    Rule("stability", "DEPTH_STABILITY", "answer stability: a trace stops at the first probe that makes depth_m "
         "agreeing valid answers in a row", ("depth_m",), frozenset({"probes"})),
)}
PROBE_COSTS = {"tokens": "PROBE_COST_TOKENS", "autotts": "PROBE_COST_AUTOTTS"}  # name -> its kernel code's name
# The policies that stop traces part-way on their own (their own grids, kernel._depth_grid and _cmc_grid), not
# width policies
DEPTH_POLICIES = ("parallel-probe", "cmc")

ELIMINATION_RULES = {r.name: r for r in (
    Rule("threshold", "ELIM_THRESHOLD", "a score >= gamma", ("gamma",)),
    Rule("sc-share", "ELIM_SC_SHARE", "leading answer > tau of the draws, after m_min", ("tau", "m_min"),
         frozenset({"answers"})),
    Rule("sc-beta", "ELIM_SC_BETA", "Adaptive-Consistency's Beta rule: P(leading > runner-up) >= conf", (),
         frozenset({"answers"})),
    Rule("esc", "ELIM_ESC", "ESC: the last K draws (a window) all give the same valid answer", ("K",),
         frozenset({"answers"})),
    Rule("ac-majority", "ELIM_AC_MAJORITY", "Adaptive-Consistency's majority rule: leading answer >= share of the "
         "draws, after 2", ("share",), frozenset({"answers"})),
    Rule("ac-entropy", "ELIM_AC_ENTROPY", "Adaptive-Consistency's entropy rule: normalised answer entropy <= hmax, "
         "after 2", ("hmax",), frozenset({"answers"})),
    Rule("ac-dirichlet", "ELIM_AC_DIRICHLET", "Adaptive-Consistency's Dirichlet rule: P(leading answer's share is the "
         "largest of the top 5) >= dirichlet_conf, exact", ("dirichlet_conf",), frozenset({"answers"})),
    Rule("none", "ELIM_NONE", "never"),
    # the 2025-26 per-query stops (issue 29)
    Rule("boinf", "ELIM_BOINF", "Best-of-Infinity's adaptive sampling: (answers + 1) P(leading answer is the mode) / "
         "(1 - P) >= bf, P under the Dirichlet posterior of the answer counts with an unknown bucket of 0.3 "
         "(kernel.BOINF_ALPHA), estimated as its code does from bf_mc draws (0: exact, the paper's)",
         ("bf", "bf_mc"), frozenset({"answers"}),
         cost=Cost((6140.0, 6620.0, 6600.0, 3290.0), 9500.0)),
    Rule("mmc", "ELIM_MMC", "the martingale majority certificate (MMC): two e-processes, leader vs runner-up and "
         "leader vs the answers outside the top mmc_m, each >= 1 / mmc_delta after >= mmc_min_updates updates, the "
         "leader unchanged by the last vote (mmc_leader_check on); mmc_labels pool: the query's answers known in "
         "advance (hindsight: replay only)", ("mmc_delta", "mmc_m", "mmc_labels", "mmc_min_updates",
                                              "mmc_leader_check"), frozenset({"answers"}),
         cost=Cost(25.0, (3.0, 4.0, 10.0, 20.0))),
    Rule("lbayes", "ELIM_LBAYES", "the L-aggregated Bayesian stop (known prior): P(leading answer is the mode) >= "
         "lb_thre, from the head counts (lb_l - 1 of them) and the query's own answer shares in its pool as the "
         "prior (hindsight: replay only)", ("lb_thre", "lb_l"), frozenset({"answers"}), live=False,
         cost=Cost((1040.0, 1470.0, 2760.0, 7820.0), (142.0, 268.0, 740.0, 1000.0))),
)}
# A selection rule's params are the replay() arguments it reads (not RunConfig fields: a selection is computed from
# what a run drew, so one run serves every selection).
SELECTION_RULES = {r.name: r for r in (
    Rule("bon", 0, "highest score"),
    Rule("weighted", 1, "largest summed score per answer", needs=frozenset({"answers"})),
    Rule("sc", 2, "majority answer", needs=frozenset({"answers"})),
    Rule("cisc", 3, "CISC: answer with the largest sum of softmax(score / T) weights", ("cisc_temp",),
         frozenset({"answers"})),
    Rule("deepconf", 4, "DeepConf offline: the top eta% of draws by score, then the largest summed score",
         ("deepconf_eta",), frozenset({"answers"})),
)}
LIVE_SELECTIONS = ("bon", "weighted", "sc")  # what replay/live.py returns (cisc and deepconf: replay only)
CISC_TEMP = 0.2  # the CISC authors' notebook value for P(True) confidences in [0, 1] (docs/semantics.md)
CISC_TEMP_MIN = 1 / 700  # below it exp((score - 1) / T) underflows for score 0
DEEPCONF_ETA = 10.0  # DeepConf's top-10% filter (its code's top10_* votes; the paper's DeepConf-low)


def check_selection_params(cisc_temp: float, deepconf_eta: float) -> str | None:
    """Why the selection parameters are out of range (None when they are fine): cisc's T in [1/700, inf] (inf:
    plain majority vote with the first-drawn tie rule), deepconf's eta a percentage in (0, 100]."""
    if not CISC_TEMP_MIN <= cisc_temp <= math.inf:  # NaN fails
        return (f"--cisc-temp must be >= 1/700 (about {CISC_TEMP_MIN:.5f}; below it a score-0 response's weight "
                f"exp((score - 1) / T) underflows to 0), got {cisc_temp}")
    if not 0.0 < deepconf_eta <= 100.0:
        return f"--deepconf-eta must be a percentage in (0, 100] (the share of draws kept), got {deepconf_eta}"
    return None

BUDGET_UNITS = ("samples", "tokens", "token-matched")  # token-matched: a token budget matched to uniform's (run.py)


def __getattr__(name: str):
    """The code tables (name -> kernel code), built from the kernel on first use: POLICIES, ELIMS, UNITS."""
    tables = {"POLICIES": lambda: {n: p.code for n, p in REGISTRY.items()},
              "ELIMS": lambda: {n: r.code for n, r in ELIMINATION_RULES.items()},
              "UNITS": lambda: {"samples": _kernel().UNIT_SAMPLES, "tokens": _kernel().UNIT_TOKENS}}
    if name not in tables:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = tables[name]()
    return value
MAX_COUNT = 2**31  # bound on K and max_samples


def supported(pool, eliminate: str = "threshold") -> list[str]:
    """The policies a pool can run under an elimination rule: what each needs ("gt": ground truth, "answers":
    answer categories, its own or through the rule) the pool has."""
    has = {"gt": pool.has_gt, "answers": pool.has_answers, "lows": pool.lows is not None,
           "probes": pool.probe_off is not None, "side": getattr(pool, "side", None) is not None}
    rule = ELIMINATION_RULES[eliminate].needs if eliminate in ELIMINATION_RULES else frozenset()
    return [name for name, p in REGISTRY.items()
            if all(has[n] for n in p.needs | (rule if "eliminate" in p.params else frozenset()))]


def lacking(pool, policy: str) -> str:
    """Why `pool` cannot run `policy` (threshold rule), in NEEDS's words ('' when it can): the line a command shows
    for a policy it leaves out (uab without --side), so a method missing from a table is never a silent hole."""
    what = [NEEDS[n][1] for n in sorted(REGISTRY[policy].needs) if n in NEEDS and not NEEDS[n][0](pool)]
    return f"needs {' and '.join(what)}, and this pool has none" if what else ""


def in_grid(sweep: str) -> tuple:
    """The policies a report sweep (K, lambda, gamma, tokens, cap) runs, in registry order."""
    return tuple(name for name, p in REGISTRY.items() if sweep in p.grid)


def markdown_choices(entries: dict) -> str:
    """`name`: doc; ... for the README tables and --help."""
    return "; ".join(f"`{n}`: {e.doc}" for n, e in entries.items())


@dataclass(frozen=True)
class Range:
    """A numeric parameter's allowed values, declared once with its field (param's `within`) as interval text:
    "(0, 1]", "[0, inf)", f"[1, {MAX_COUNT}]" (an int's ends are written closed). RunConfig refuses a value outside
    it, and --help, docs/cli.md and the README's table show it, so the range a user reads is the one checked."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    @classmethod
    def parse(cls, text: str) -> "Range":
        m = re.fullmatch(r"\s*([\[(])\s*([^,\s]+)\s*,\s*([^\]\s)]+)\s*([\])])\s*", text)
        if not m:
            raise ValueError(f"a range is written like '(0, 1]' or '[1, 1024]', not {text!r}")
        lo, hi = (int(v) if re.fullmatch(r"-?\d+", v) else float(v) for v in m.group(2, 3))
        if not lo < hi:
            raise ValueError(f"range {text!r} holds no value")
        return cls(lo, hi, m.group(1) == "(", m.group(4) == ")")

    def holds(self, value) -> bool:
        """Whether `value` is in it (NaN never is: it fails every comparison)."""
        above = self.lo < value if self.lo_open else self.lo <= value
        below = value < self.hi if self.hi_open else value <= self.hi
        return bool(above and below)

    def text(self, kind: type = float) -> str:
        """Interval notation, or lo..hi for an int (its thousands separated): what the docs and --help show."""
        if kind is int:
            return f"{self.lo:,}..{self.hi:,}"
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"

    def phrase(self, kind: type = float) -> str:
        """The range in an error message: 'in (0, 1)', 'a finite number >= 0'."""
        if kind is float and self.hi == math.inf and self.hi_open:
            return f"a finite number {'>' if self.lo_open else '>='} {self.lo:g}"
        return f"{'an integer ' if kind is int else ''}in {self.text(kind)}"


def param(default, doc: str, *, flag: str | None = None, short: str | None = None, sweep: bool = False,
          replay_default: str | None = None, choices: tuple | None = None, within: str | None = None,
          why: str = "", scope: str | None = None, live: bool = True, view: bool = False, hindsight: tuple = ()):
    """A RunConfig field with its one declaration of what the layers above need: its help (`doc`, which policy or
    rule reads it first), its command-line flag (default `--name-with-dashes`; `short`: an alias), whether `ttc
    replay` sweeps it as a comma list (`sweep`, with `replay_default` its list default where it is not the field's)
    and so whether a replay's results carry it per configuration. cli.py builds the options of ttc replay, tune and
    run from these; ReplayRequest and RunRequest take their fields from RunConfig's (replay/run.py, harvest/run/);
    ttc.replay's keywords are the field names; the kernel reads the record fields of the same names (record()).
    Its allowed values, which RunConfig checks (param_problem) and the help and docs show: `within`, a numeric
    parameter's range (Range.parse's interval text), or `choices`, the values of a string parameter or of an int
    one that takes a few; `why`: what the range means, said in the error message (e.g. "0: no cap").
    scope: who reads it when no registry entry lists it (depth's, read by every policy through the pool's depth
    view); live: whether `ttc run` takes it (--probe-cost is replay only: a live trace pays the tokens it ran);
    view: read through the pool's depth view (engine.depth_pool), never by a width policy's own code or its
    reference twin; hindsight: its values that read a query's whole pool, which ttc run and run_live refuse
    (RunConfig.hindsight_values) while they take the others."""
    return field(default=default, metadata={"doc": doc, "flag": flag, "short": short, "sweep": sweep,
                                            "replay_default": replay_default, "choices": choices,
                                            "range": Range.parse(within) if within is not None else None, "why": why,
                                            "scope": scope, "live": live, "view": view,
                                            "hindsight": tuple(hindsight)})


@dataclass(frozen=True)
class RunConfig:
    """One policy configuration. unit: samples, tokens or token-matched; max_samples 0 means no cap. Every field
    after `eliminate` is a parameter declared with param(): adding one is its declaration here (its allowed values
    included: within= or choices=, which __post_init__ checks through param_problem), plus the kernel and reference
    code that read it."""

    policy: str
    unit: str = "samples"
    K: int = param(1, "Responses per pull.", flag="--K", short="-K", sweep=True, within=f"[1, {MAX_COUNT}]")
    eliminate: str = "threshold"
    gamma: float = param(1.0, "Threshold gamma: eliminate when a score >= gamma.", sweep=True, within="[0, 1]",
                         why="scores are")
    lam: float | None = param(None, "Exploration bonus (default ucb 1, entropy 3).", flag="--lambda", sweep=True,
                              within="[0, inf)")
    eps: float = param(0.01, "gap's epsilon.", within="[0, inf)")
    max_samples: int = param(0, "Per-query cap of the adaptive policies (0: none, the pool size; ttc run: "
                             "--max-per-query).", sweep=True, within=f"[0, {MAX_COUNT}]", why="0: no cap")
    rho: float = param(0.5, "two-stage: share of the budget spent in stage 1.", sweep=True,
                       replay_default="0.25,0.5,0.75", within="(0, 1)")
    tau: float = param(0.5, "sc-share: the leading answer's share needed; deepconf-online: the leading answer's "
                       "share of the confidence-weighted vote that stops a query (DeepConf's 0.95).", sweep=True,
                       within="[0, 1)")
    m_min: int = param(3, "sc-share: responses needed before it can stop.", within=f"[1, {MAX_COUNT}]")
    share: float = param(0.8, "ac-majority: the leading answer's share of the draws needed to stop.", within="(0, 1]")
    hmax: float = param(0.75, "ac-entropy: the normalised answer entropy at or below which it stops.", within="[0, 1]",
                        why="a normalised entropy")
    warmup: int = param(3, "optscale: responses per query before its N is set (the source's smallest "
                        "peek_number); deepconf-online: whole traces per query before its threshold is set "
                        "(DeepConf's 16).", within=f"[1, {MAX_COUNT}]",
                        why="responses per query before its N or threshold is set")
    percentile: float = param(0.05, "optscale: the chance of no draw reaching gamma that its N accepts (the "
                              "source's percentile; N: the fewest with (1 - p)^N <= it); deepconf-online: the share "
                              "of warm-up traces at or above its threshold (DeepConf's confidence_percentile / 100: "
                              "0.1 DeepConf-low, 0.9 DeepConf-high).", within="(0, 1)")
    prior_strength: float = param(2.0, "marginal-gain: the prediction's weight in pseudo-draws (its Beta prior's "
                                  "a + b); side-eb: the strength of its base rate's Beta prior.", within="(0, inf)",
                                  why="pseudo-draws")
    judge: int = param(32, "dsc: queries judged around each midpoint of its partition's binary search (the "
                       "source's judge_window_size).", within=f"[2, {MAX_COUNT}]",
                       why="queries judged around each midpoint")
    bins: int = param(3, "side-eb: bins of the side signal's mean over a query's failed draws.", within="[1, 1024]")
    refresh: int = param(8, "side-eb: pulls between refreshes of every query's index (at least one round of the "
                         "active queries).", within=f"[1, {MAX_COUNT}]", why="pulls between refreshes")
    dirichlet_conf: float = param(0.95, "ac-dirichlet: the chance that the leading answer is the most likely one "
                                  "(Dirichlet posterior over the top 5) needed to stop (the source's conf_thresh).",
                                  within="(0.5, 1)", why="a probability that the leading answer leads")
    horizon: int = param(0, "side-eb: 0: its index is the next draw's chance; 1: the chance of a success within the "
                         "draws each active query can still get (budget left / active queries) per draw used "
                         "(docs/semantics.md).", choices=(0, 1),
                         why="0: side-eb's one-step index; 1: its rate over the draws each query can still get")
    # depth (issue 30): every policy's traces under a depth rule and a token cap per trace (0: none), with a probe
    # cost convention; parallel-probe's and cmc's own parameters (the values of AutoTTS's evaluator)
    depth_rule: str = param("whole", "Depth, every width policy: when a trace stops part-way: whole (runs to its "
                            "end) or stability (its last --depth-m probes agree; ttc run: a backend that can probe a "
                            "trace, transformers, every --probe-every tokens).", choices=("whole", "stability"),
                            scope="every width policy (depth)", view=True)
    depth_m: int = param(3, "stability: agreeing valid probe answers in a row that stop a trace.",
                         scope="the stability depth rule", view=True, within=f"[1, {MAX_COUNT}]",
                         why="agreeing probes in a row")
    trace_cap: int = param(0, "Depth, every policy: each trace stops at this many tokens and answers its last probe "
                           "there (0: none; replay: needs the pool's probes; ttc run: a backend that can stop a trace "
                           "and probe it, transformers).", scope="every policy (depth)", view=True,
                           within=f"[0, {2**62 - 1}]", why="tokens; 0: none")
    probe_cost: str = param("tokens", "Depth: tokens (a probe costs its offset; probes at or past a trace's end are "
                            "not reached) or autotts (AutoTTS's replay: every probe paid, finishing pays max(total, "
                            "last offset)).", choices=("tokens", "autotts"), scope="every policy (depth)", live=False,
                            view=True)
    chains: int = param(64, "parallel-probe: traces per query.", within=f"[1, {MAX_COUNT}]")
    stable: int = param(40, "parallel-probe: steps the majority must hold to stop a query.",
                        within=f"[1, {MAX_COUNT}]")
    patience: int = param(7, "parallel-probe: steps off the majority in a row that prune a trace.",
                          within=f"[1, {MAX_COUNT}]")
    probe_warmup: int = param(15, "parallel-probe: steps before any pruning.", within=f"[0, {MAX_COUNT}]",
                              why="steps")
    cmc_beta: float = param(0.5, "cmc: its one knob in [0, 1] (0: few traces, easy to stop; 1: up to 64).",
                            within="[0, 1]")
    # the 2025-26 per-query stops (issue 29)
    bf: float = param(10.0, "boinf: the Bayes factor at or above which a query stops (Best-of-Infinity's "
                      "--bayes-threshold; its sweep: 2, 5, 7, 10, 30, 100, 300, ...).", within="(0, inf)",
                      why="boinf's Bayes factor threshold")
    bf_mc: int = param(1000, "boinf: the Dirichlet draws of the source's Monte Carlo estimate of P, whose random "
                       "decision (its Hoeffding term where every draw favours the mode) the engine draws from the same "
                       "law (docs/semantics.md); 0: the exact Bayes factor, the paper's rule.",
                       within="[0, 1000000000]", why="the source's Monte Carlo draws; 0: the exact Bayes factor")
    mmc_delta: float = param(0.05, "mmc: the error level delta; a query stops when both e-processes reach 1 / delta "
                             "(the source's delta).", within="(0, 1)", why="mmc's error level")
    mmc_m: int = param(3, "mmc: the contender set's size (the source's M): votes outside the top mmc_m answers count "
                       "against the leader in the leader-vs-others e-process.", within=f"[1, {MAX_COUNT}]",
                       why="mmc's contender set of top answers")
    mmc_labels: str = param("drawn", "mmc: the answers it ranks: drawn (those seen so far, the source's class with "
                            "labels=None) or pool (every distinct valid answer of the query's pool known in advance, "
                            "those not drawn yet ranked last by count 0, as its training code's call; hindsight: "
                            "replay only).", choices=("drawn", "pool"), hindsight=("pool",))
    mmc_min_updates: int = param(2, "mmc: the updates each e-process needs before it may certify (the source's "
                                 "min_pair_updates and min_other_updates: 2 in its class, 1 in its training code's "
                                 "call).", within=f"[1, {MAX_COUNT}]", why="updates per e-process")
    mmc_leader_check: str = param("on", "mmc: on: certify only if the leader before the last vote still leads after "
                                  "it (the source's require_current_leader_match: on in its class, off in its "
                                  "training code's call).", choices=("off", "on"))
    lb_thre: float = param(0.95, "lbayes: the posterior probability that the leading answer is the mode needed to "
                           "stop (the source's prob_thre: 0.95, 0.975, 0.99).", within="(0, 1]",
                           why="lbayes's posterior threshold")
    lb_l: int = param(2, "lbayes: L, the head counts the posterior keeps plus one (2: the leader's; 3: also the "
                      "runner-up's; 4: also the third's).", choices=(2, 3, 4), why="the source's L")
    # the 2025-26 cross-query allocations (issue 29)
    uab_tau: float = param(0.2, "uab: the temperature of p = exp(-ANLL / uab_tau) = conf^(1 / uab_tau), the success "
                           "chance its greedy split reads from the first draw's confidence (the source's --tau, 0.2).",
                           within="(0, inf)", why="UAB's temperature: p = exp(-ANLL / uab_tau)")
    pets_options: int = param(16, "pets: the Dirichlet's answer buckets per query (the source's --max_options, 16); a "
                              "new answer once all hold one is discarded (its draw paid).", within="[2, 1024]",
                              why="answer buckets")
    pets_mc: int = param(0, "pets: 0: OKG's rewards exactly; N: as the source estimates them (its --nsamples, 500), "
                         "each h from N draws afresh for every query at every step, drawn from a hash of the query's "
                         "draws (docs/semantics.md).", within="[0, 1000000]",
                         why="the source's Monte Carlo draws per estimate; 0: exact")
    pets_train: int = param(10, "pets-online: the queries at the head of the query order whose whole pools fit its "
                            "plan (the source's --train-size, 10; hindsight, so replay only).",
                            within=f"[1, {MAX_COUNT}]", why="training queries")
    pets_curve_mc: int = param(20000, "pets-online: N: each training query's majority-accuracy curve A(k) estimated "
                               "as the source does, from N multinomial draws (its 20,000; seeded here, from a hash of "
                               "the query); 0: exactly (docs/semantics.md).", within="[0, 10000000]",
                               why="Monte Carlo draws per curve point; 0: exact")

    def __post_init__(self):
        # Each parameter's range is its declaration's (param_problem): none is checked by hand here
        # (tests/test_params_once.py). No check compares one field with another: the cross-field checks live where
        # the second value is known (README, below the parameter table).
        if self.policy not in REGISTRY:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {', '.join(REGISTRY)}")
        if self.eliminate not in ELIMINATION_RULES:
            raise ValueError(f"unknown elimination rule {self.eliminate!r}; choose from {', '.join(ELIMINATION_RULES)}")
        if self.unit not in BUDGET_UNITS:
            raise ValueError(f"unknown budget unit {self.unit!r}; choose samples, tokens or token-matched")
        for name, ok in _fast_checks():
            value = getattr(self, name)
            if not ok(value):  # (a value the quick test does not vouch for, such as a numpy number: the full one)
                why = param_problem(name, value)
                if why:
                    raise ValueError(why)

    @property
    def lam_value(self) -> float:
        default = REGISTRY[self.policy].lam
        return self.lam if self.lam is not None else (1.0 if default is None else default)

    @property
    def kernel_unit(self) -> int:
        k = _kernel()
        return k.UNIT_SAMPLES if self.unit == "samples" else k.UNIT_TOKENS

    def record(self):
        """This configuration as the kernels read it: a CONFIG record (a one-element array; index [0]) whose fields
        are filled by name, so a parameter the kernel reads needs no line here."""
        import numpy as np

        k = _kernel()
        r = np.zeros(1, k.CONFIG)
        special = {"policy": REGISTRY[self.policy].code, "unit": self.kernel_unit,
                   "elim": ELIMINATION_RULES[self.eliminate].code, "lam": self.lam_value}
        for name in k.CONFIG.names:
            if name in special:
                r[name] = special[name]
                continue
            value = getattr(self, name)  # a string choice: its index in the choices (the kernel's constants)
            r[name] = PARAMS_BY_NAME[name].metadata["choices"].index(value) if isinstance(value, str) else value
        return r

    def hindsight_values(self) -> list[str]:
        """The options it uses at a value that reads a query's whole pool (param's hindsight), as `--flag value`:
        what ttc run and run_live refuse."""
        return [f"{flag(n)} {getattr(self, n)}" for n in self.used_params()
                if n in PARAMS_BY_NAME and getattr(self, n) in PARAMS_BY_NAME[n].metadata["hindsight"]]

    def used_params(self) -> tuple:
        own = REGISTRY[self.policy].params
        used = tuple(p for p in own if p != "gamma")
        if "eliminate" in used:  # (a rule may read one of the policy's own, as esc reads K)
            used = used + tuple(p for p in ELIMINATION_RULES[self.eliminate].params if p not in used)
        if "gamma" in own and "gamma" not in used:
            used = used + ("gamma",)
        return used

    def depth_key(self) -> tuple:
        """What the pool's depth view depends on (engine.depth_pool): equal keys share one view."""
        return (self.depth_rule, self.depth_m if self.depth_rule == "stability" else 0, self.trace_cap,
                self.probe_cost)

    def needs_probes(self) -> bool:
        return "probes" in REGISTRY[self.policy].needs or self.depth_key() != ("whole", 0, 0, "tokens")

    def needs_answers(self) -> bool:
        return "answers" in REGISTRY[self.policy].needs or (
            "eliminate" in REGISTRY[self.policy].params and "answers" in ELIMINATION_RULES[self.eliminate].needs)

    def label(self) -> str:
        """The policy plus the parameters it uses that differ from the defaults, e.g. ucb(lam=2, K=4)."""
        d = RunConfig(self.policy)
        vals = asdict(self)
        vals["lam"], default_lam = self.lam_value, d.lam_value
        parts = [f"{'lambda' if k == 'lam' else k}={vals[k]:g}" if isinstance(vals[k], float)
                 else f"{k}={vals[k]}" for k in self.used_params()
                 if vals[k] != (default_lam if k == "lam" else getattr(d, k))]
        if self.depth_rule != "whole":
            parts.append(f"depth={self.depth_rule}" + (f":{self.depth_m}" if self.depth_rule == "stability" else ""))
        if self.trace_cap:
            parts.append(f"trace_cap={self.trace_cap}")
        if self.probe_cost != "tokens":
            parts.append(f"probe_cost={self.probe_cost}")
        if self.unit != "samples":
            parts.append(self.unit)
        return self.policy + (f"({', '.join(parts)})" if parts else "")


# ------------------------------------------------------------------------------------------------ methods
# The field's methods as presets: each a named combination of the registries' parts above, so that the report
# compares "adaptive-consistency" with "self-consistency" by name rather than as policy-and-rule labels.
import dataclasses as _dc  # noqa: E402  (this section is appended to the registry; its imports stay with it)

# What a method may need from the pool it runs on: need -> (test on a Pool, what is missing when the test fails).
# "score": a score that varies (a constant one ranks nothing); under --score gt it is the ground truth, a perfect
# verifier, as in the bandit paper's oracle setting.
NEEDS = {
    "gt": (lambda pool: pool.has_gt, "ground truth (a 'correct' column)"),
    "answers": (lambda pool: pool.has_answers, "answer categories (an 'answer' column)"),
    "tokens": (lambda pool: pool.has_tokens, "token counts (an 'n_tokens' column)"),
    "lows": (lambda pool: pool.lows is not None, "each response's record lows of its group confidence ('conf_lows_pos' "
             "and 'conf_lows': ttc harvest --confidence group-lows)"),
    "probes": (lambda pool: pool.probe_off is not None, "each trace's probes ('probe_answer', 'probe_tokens' and "
               "'probe_correct': ttc import autotts)"),
    "side": (lambda pool: pool.side is not None, "a per-response side signal (--side COLUMN)"),
    "score": (lambda pool: pool.score.size > 0 and float(pool.score.min()) < float(pool.score.max()),
              "a score that varies between responses"),
}


@_dc.dataclass(frozen=True)
class Method:
    """A method of the literature as a preset of the registries: config holds the RunConfig fields it fixes
    (policy first), select its selection rule. Its parts are named, not imported, and resolved when it is used:
    a method whose policy, rule, selection or RunConfig field has not landed in this build is reported as such by
    `missing` (and skipped by the report with that reason) instead of breaking the import of this module.
    needs: what it needs beyond what its parts declare (NEEDS); baseline: the report measures every other method's
    cost saved at equal accuracy against it. The fields a method leaves open that its configuration uses (gamma,
    max_samples) come from the report's options (`run_config`)."""

    name: str
    doc: str
    citation: str
    config: dict = _dc.field(hash=False)
    select: str = "bon"
    needs: frozenset = frozenset()
    baseline: bool = False

    def missing(self) -> str:
        """Why this method cannot be built in this build ('' when it can): a part not (yet) in the registries."""
        known = {f.name for f in _dc.fields(RunConfig)}
        unknown = [k for k in self.config if k not in known]
        if unknown:
            return f"RunConfig has no field {unknown[0]!r} in this build"
        policy, rule = self.config.get("policy"), self.config.get("eliminate", "threshold")
        if policy not in REGISTRY:
            return f"policy {policy!r} is not in this build's registry"
        if rule not in ELIMINATION_RULES:
            return f"elimination rule {rule!r} is not in this build's registry"
        if self.select not in SELECTION_RULES:
            return f"selection rule {self.select!r} is not in this build's registry"
        unknown = sorted(n for n in self.all_needs() if n not in NEEDS)
        if unknown:
            return f"it needs {unknown[0]!r}, which this build cannot check a pool for"
        return ""

    def all_needs(self) -> frozenset:
        """Its own needs and those its parts declare (the policy, the elimination rule it uses, the selection)."""
        needs = set(self.needs)
        policy = REGISTRY.get(self.config.get("policy"))
        if policy is not None:
            needs |= policy.needs
            if "eliminate" in policy.params:
                rule = ELIMINATION_RULES.get(self.config.get("eliminate", "threshold"))
                needs |= rule.needs if rule is not None else set()
        sel = SELECTION_RULES.get(self.select)
        return frozenset(needs | (sel.needs if sel is not None else set()))

    def run_config(self, **options) -> RunConfig:
        """Its RunConfig: the fields it fixes, then `options` (e.g. the report's unit, gamma, max_samples) for the
        fields its configuration uses and it leaves open; options it does not use are dropped, as `ttc replay`
        drops the parameters a policy ignores."""
        base = RunConfig(**self.config)
        used = set(base.used_params()) | {"unit"}
        extra = {k: v for k, v in options.items() if k in used and k not in self.config}
        return _dc.replace(base, **extra) if extra else base

    def applies(self, pool) -> tuple[bool, str]:
        """(True, '') when this build has its parts and the pool has what it needs; else (False, why not)."""
        why = self.missing()
        if why:
            return False, f"not in this build: {why}"
        lacking = [NEEDS[n][1] for n in sorted(self.all_needs()) if not NEEDS[n][0](pool)]
        if lacking:
            return False, f"needs {' and '.join(lacking)}, and this pool has none"
        return True, ""


_BANDIT = "Zuo & Zhu 2025, Strategic Scaling of Test-Time Compute: A Bandit Learning Approach (arXiv:2506.12721)"
METHODS = {m.name: m for m in (
    Method("best-of-n", "N responses per query, the highest-scored one", "Cobbe et al. 2021, Training Verifiers to "
           "Solve Math Word Problems (arXiv:2110.14168)", {"policy": "uniform"}, "bon", frozenset({"score"}),
           baseline=True),
    Method("self-consistency", "N responses per query, the majority answer", "Wang et al. 2023, Self-Consistency "
           "Improves Chain of Thought Reasoning in Language Models, ICLR (arXiv:2203.11171)", {"policy": "uniform"},
           "sc", baseline=True),
    Method("weighted-vote", "N responses per query, the answer with the largest summed score", "Li et al. 2023, "
           "Making Language Models Better Reasoners with Step-Aware Verifier, ACL (arXiv:2206.02336)",
           {"policy": "uniform"}, "weighted", frozenset({"score"})),
    Method("adaptive-consistency", "one response at a time per query until the Beta rule is confident in the "
           "majority answer, at most 40 (the self-consistency budget it is compared with), then the majority",
           "Aggarwal et al. 2023, Let's Sample Step by Step: Adaptive-Consistency for Efficient Reasoning and Coding "
           "with LLMs, EMNLP (arXiv:2305.11860)",
           {"policy": "elimination", "K": 1, "eliminate": "sc-beta", "max_samples": 40}, "sc"),
    Method("esc", "windows of 5 responses per query until one window is unanimous, at most 40, then the majority "
           "answer", "Li et al. 2024, Escape Sky-high Cost: Early-stopping Self-Consistency for Multi-step Reasoning, "
           "ICLR (arXiv:2401.10480)", {"policy": "elimination", "K": 5, "eliminate": "esc", "max_samples": 40}, "sc"),
    Method("ac-majority", "one response at a time per query until the majority answer holds 80% of them, at most "
           "40, then the majority", "Aggarwal et al. 2023 (arXiv:2305.11860), MajorityStoppingCriteria",
           {"policy": "elimination", "K": 1, "eliminate": "ac-majority", "max_samples": 40}, "sc"),
    Method("ac-entropy", "one response at a time per query until the normalised answer entropy is <= 0.75, at most "
           "40, then the majority", "Aggarwal et al. 2023 (arXiv:2305.11860), EntropyStoppingCriteria",
           {"policy": "elimination", "K": 1, "eliminate": "ac-entropy", "max_samples": 40}, "sc"),
    Method("ac-dirichlet", "one response at a time per query until the Dirichlet posterior of the top 5 answers "
           "makes the majority answer the most likely one with probability >= 0.95, at most 40, then the majority",
           "Aggarwal et al. 2023 "
           "(arXiv:2305.11860), DirichletStoppingCriteria",
           {"policy": "elimination", "K": 1, "eliminate": "ac-dirichlet", "max_samples": 40}, "sc"),
    Method("cisc", "N responses per query, the answer with the largest sum of softmax(confidence / T) weights",
           "Taubenfeld et al. 2025, Confidence Improves Self-Consistency in LLMs (arXiv:2502.06233)",
           {"policy": "uniform"}, "cisc", frozenset({"score"})),
    Method("deepconf-offline", "N responses per query, the top eta% by confidence, then the largest summed "
           "confidence", "Fu et al. 2025, Deep Think with Confidence (arXiv:2508.15260), offline mode",
           {"policy": "uniform"}, "deepconf", frozenset({"score"})),
    Method("deepconf-online", "a warm-up of 16 whole traces per query sets its threshold (DeepConf-low: the 90th "
           "percentile of their lowest group confidences); then one trace at a time until the confidence-weighted vote "
           "reaches 95%; a trace whose group confidence falls below the threshold stops early and does not vote; the "
           "confidence-weighted vote", "Fu et al. 2025, Deep Think with Confidence (arXiv:2508.15260), online mode",
           {"policy": "deepconf-online", "warmup": 16, "percentile": 0.1, "tau": 0.95}, "weighted"),
    Method("optscale", "a warm-up of 3 per query, then each query its own N: the fewest draws that reach gamma with "
           "probability 0.95 at its warm-up's success rate; the highest-scored response", "Wang et al. 2025, OptScale: "
           "Probabilistic Optimality for Inference-time Scaling, AAAI 2026 (arXiv:2506.22376)", {"policy": "optscale"},
           "bon", frozenset({"score"})),
    Method("marginal-gain", "the next response to the unsolved query most likely to succeed: a Beta posterior from "
           "its predicted success probability (ttc replay --prior) and its failures; the highest-scored response",
           "Damani et al. 2024, Learning How Hard to Think: Input-Adaptive Allocation of LM Computation "
           "(arXiv:2410.04707)", {"policy": "marginal-gain"}, "bon", frozenset({"score"})),
    Method("dsc", "one draw per query ranks the batch; a binary search gives the easiest prefix nothing more; the "
           "rest draw windows of 4 until the Beta rule stops, at most 40; the majority answer", "Wang et al. 2025, "
           "Make Every Penny Count: Difficulty-Adaptive Self-Consistency for Cost-Efficient Reasoning, NAACL "
           "Findings (arXiv:2408.13457)", {"policy": "dsc", "K": 4, "eliminate": "sc-beta", "max_samples": 40}, "sc"),
    Method("side-eb", "the next response to the unanswered query most likely to be answered by it per unit cost: a "
           "success rate learnt during the run per bin of the side signal of its failed draws (ttc replay --side); "
           "the highest-scored response", "this project (issue 15): an empirical-Bayes index",
           {"policy": "side-eb"}, "bon", frozenset({"score"})),
    Method("elimination", "round-robin over the queries no response of which has reached the score threshold gamma "
           "yet; the highest-scored response", _BANDIT, {"policy": "elimination"}, "bon", frozenset({"score"})),
    Method("ucb", "the next response to the query with the highest mean score + lambda / sqrt(n), until one reaches "
           "gamma; the highest-scored response", _BANDIT, {"policy": "ucb"}, "bon", frozenset({"score"})),
    # the 2025-26 methods (issue 29)
    Method("boinf", "one response at a time per query until the Bayes factor of its majority answer (a Dirichlet "
           "posterior with an unknown bucket) reaches 10, at most 100 (its script's defaults), then the majority",
           "Komiyama et al. 2025, Best-of-Infinity: Asymptotic Performance of Test-Time Compute (arXiv:2509.21091)",
           {"policy": "elimination", "K": 1, "eliminate": "boinf", "max_samples": 100}, "sc"),
    Method("mmc", "one response at a time per query until the martingale majority certificate holds at delta 0.05 "
           "(leader vs runner-up and vs the rest, anytime-valid), at most 32 (its code's defaults), then the majority",
           "Cordero-Encinar & Duncan 2025, Certified Self-Consistency: Statistical Guarantees and Test-Time Training "
           "for Reliable Reasoning in LLMs (arXiv:2510.17472)",
           {"policy": "elimination", "K": 1, "eliminate": "mmc", "max_samples": 32}, "sc"),
    Method("lbayes", "one response at a time per query until the posterior that its leading answer is the mode "
           "reaches 0.95 (L = 2: the leader's count and the query's own answer shares as the prior, hindsight), at "
           "most 100, then the majority", "Optimal Bayesian Stopping for Efficient Inference of Consistent LLM "
           "Answers, 2026 (arXiv:2602.05395; code github.com/jh9959-afk/Paper)",
           {"policy": "elimination", "K": 1, "eliminate": "lbayes", "max_samples": 100}, "sc"),
    Method("uab", "one draw per query, its confidence (--side: exp(mean token log-prob)) giving p = conf^5; the rest "
           "of the budget one draw at a time to the largest p (1 - p)^c; the majority answer",
           "Nguyen, Gupta & Le 2026, Uncertainty-Aware Budget Allocation for Adaptive Test-Time Reasoning "
           "(arXiv:2605.26849)", {"policy": "uab"}, "sc", frozenset({"side"})),
    Method("pets", "one draw per query, then each draw to the query whose next answer most raises the chance that its "
           "leading answer leads the Dirichlet posterior over 16 answer buckets (OKG); the majority answer", "Liu et "
           "al. 2026, PETS: A Principled Framework Towards Optimal Trajectory Allocation for Efficient Test-Time "
           "Self-Consistency (arXiv:2602.16745)", {"policy": "pets"}, "sc"),
    Method("pets-online", "the first 10 queries' whole pools fit a plan of draws per difficulty bucket (4 warm-up "
           "answers agree or not); each query then warms up to 4 answers over 10 buckets and draws to its bucket's "
           "budget; the majority answer", "Liu et al. 2026, PETS (arXiv:2602.16745), its streaming allocation",
           {"policy": "pets-online", "pets_options": 10}, "sc"),
)}


def markdown_methods() -> str:
    """METHODS as the README's table (tests/test_report_methods.py checks the README holds it): from the
    declarations alone, so that it reads the same whether or not a method's parts have landed."""
    def parts(m: Method) -> str:
        cfg = ", ".join(f"{k}={v}" for k, v in m.config.items() if k != "policy")
        return f"`{m.config.get('policy')}`" + (f" ({cfg})" if cfg else "")

    rows = [f"| `{m.name}`{' (baseline)' if m.baseline else ''} | {m.doc} | {parts(m)} | `{m.select}` | "
            f"{', '.join(sorted(m.needs)) or '—'} | {m.citation} |" for m in METHODS.values()]
    return "\n".join(["| method | what it does | policy (fixed parameters) | selection | needs beyond its parts | "
                      "source |", "|---|---|---|---|---|---|"] + rows)


PARAMS = tuple(f for f in fields(RunConfig) if "doc" in f.metadata)  # the parameters, in declaration order
PARAMS_BY_NAME = {f.name: f for f in PARAMS}
# The depth parameters read on the pool's depth view or by the depth policies (replay/reference_depth.py), not by a
# width policy: the replay-only ones (live=False: --probe-cost) and parallel-probe's and cmc's own, which `ttc run`
# takes for those two policies (harvest/run/depth.py) and leaves at their defaults for every other
DEPTH_FIELDS = tuple(f.name for f in PARAMS if not f.metadata["live"]
                     or any(f.name in REGISTRY[p].params for p in DEPTH_POLICIES))
VIEW_FIELDS = tuple(f.name for f in PARAMS if f.metadata["view"])  # the depth view's (all but probe_cost also live)
SWEPT = tuple(f.name for f in PARAMS if f.metadata["sweep"])  # what ttc replay takes as comma lists


def flag(name: str) -> str:
    """A parameter's command-line flag (`--max-samples`, `--lambda`)."""
    return PARAMS_BY_NAME[name].metadata["flag"] or "--" + name.replace("_", "-")


def param_type(name: str) -> type:
    """int, float or str: what a parameter's values parse as (lam, Optional, is a float)."""
    return _param_types()[name]


@functools.cache
def _param_types() -> dict:
    """The types of every parameter, read from the annotations once (get_type_hints costs ~0.2 ms a call, and
    RunConfig checks each field at every construction)."""
    from typing import get_type_hints

    hints = get_type_hints(RunConfig)
    return {f.name: hints[f.name] if hints[f.name] in (int, str) else float for f in PARAMS}


@functools.cache
def _fast_checks() -> tuple:
    """(name, test) per parameter: a quick test that vouches only for a plain int, float or choice inside the
    declared range (True means allowed; False sends the value to param_problem, the full check and its message),
    so that building a RunConfig stays cheap (a report builds thousands)."""
    def test(f):
        m, kind = f.metadata, param_type(f.name)
        nullable = f.default is None
        if m["choices"]:
            choices = frozenset(m["choices"])
            return lambda v: type(v) is kind and v in choices
        holds, types = m["range"].holds, ((int,) if kind is int else (int, float))
        return lambda v: (nullable and v is None) or (type(v) in types and holds(v))

    return tuple((f.name, test(f)) for f in PARAMS)


def _check_declarations():
    """Each parameter declares its allowed values (a number its range, a string its choices): one without would be
    checked nowhere, so the registry refuses to load, naming it."""
    for f in PARAMS:
        m = f.metadata
        if not (m["choices"] or (m["range"] is not None and param_type(f.name) is not str)):
            raise TypeError(f"RunConfig.{f.name}: declare its allowed values, param(within='[lo, hi]') for a number, "
                            f"param(choices=...) for a string or a few-valued int")


_check_declarations()


def allowed(name: str) -> str:
    """A parameter's allowed values as the docs and --help show them: '(0, 1]', '1..1,024', '2 or 3'."""
    m = PARAMS_BY_NAME[name].metadata
    if m["choices"]:
        return " or ".join(map(str, m["choices"]))
    return m["range"].text(param_type(name))


def param_problem(name: str, value) -> str | None:
    """Why `value` is not allowed for parameter `name` (None when it is), in one line that names the option and its
    allowed values: the one range check of every parameter, read from its declaration (RunConfig runs it for each
    field). None stands for the policy's default where the field's default is None (lam)."""
    f = PARAMS_BY_NAME[name]
    m, kind = f.metadata, param_type(name)
    if value is None and f.default is None:
        return None
    why = f" ({m['why']})" if m["why"] else ""
    if m["choices"]:
        if value not in m["choices"] or isinstance(value, bool):
            shown = repr(value) if isinstance(value, str) else value
            return f"{flag(name)} must be {allowed(name)}{why}, got {shown}"
        return None
    rng = m["range"]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:  # numpy scalars are numbers too
        number = number or (float(value) == value and not isinstance(value, (str, bool)))
    except (TypeError, ValueError):
        number = False
    integral = number and (kind is not int or (math.isfinite(value) and int(value) == value))
    if not (integral and rng.holds(value)):
        shown = repr(value) if isinstance(value, str) else value
        return f"{flag(name)} must be {rng.phrase(kind)}{why}, got {shown}"
    return None


def readers(name: str) -> list[str]:
    """The policies and elimination rules that read a parameter (their registry entries' params), or its scope."""
    scope = next(f.metadata["scope"] for f in PARAMS if f.name == name)
    return [n for n, p in REGISTRY.items() if name in p.params] + \
        [n for n, r in ELIMINATION_RULES.items() if name in r.params] + ([scope] if scope else [])


def config_fields(lists: bool = False, live_only: bool = False, **defaults) -> list[tuple]:
    """RunConfig's parameters as fields of a request (make_dataclass form): the same names and defaults (but those
    given in `defaults`), and with `lists`, the ones a replay sweeps (SWEPT) as lists: ReplayRequest and RunRequest
    re-list none of them by hand."""
    out = []
    for f in PARAMS:
        if live_only and not f.metadata["live"]:
            continue
        if lists and f.metadata["sweep"]:
            text = f.metadata["replay_default"]
            values = [param_type(f.name)(v) for v in text.split(",")] if text else [f.default]
            out.append((f.name, list, field(default_factory=lambda v=values: list(v))))
        elif f.name in defaults:
            out.append((f.name, object, field(default=defaults[f.name])))
        else:
            out.append((f.name, type(f.default) if f.default is not None else object, field(default=f.default)))
    return out


def markdown_params() -> str:
    """The README's table of the policy parameters, one row per RunConfig parameter (tests/test_params_once.py
    checks the README holds it; paste this function's output after a change)."""
    rows = ["| option | default | allowed | read by | meaning |", "|---|---|---|---|---|"]
    for f in PARAMS:
        m = f.metadata
        text = m["replay_default"] or ("policy's own" if f.default is None else
                                       f.default if isinstance(f.default, str) else format(f.default, "g"))
        opt = f"`{flag(f.name)}`" + (" (list)" if m["sweep"] else "")
        rows.append(f"| {opt} | `{text}` | {allowed(f.name)} | {', '.join(readers(f.name))} | {m['doc']} |")
    return "\n".join(rows)
