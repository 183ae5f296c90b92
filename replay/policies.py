"""The registry of allocation policies, elimination rules and selection rules: each declared once here, with
its kernel code, the parameters it uses, what it needs from a pool and its one-line description. The command
line's choices and help, the README's tables (tests/test_registry.py checks them), the report's lists, the
figures' styles and the live driver read these entries.

Adding a policy = a code and a branch in replay/kernel.py's run_one, its plain-Python twin in
replay/reference.py, one `Policy` entry below, and its paragraph in docs/semantics.md.
"""
from __future__ import annotations

import math

from dataclasses import asdict, dataclass

import numpy as np

from .kernel import (CONFIG, DEEPCONF_ONLINE, DSC, ELIM_AC_DIRICHLET, ELIM_AC_ENTROPY, ELIM_AC_MAJORITY, ELIM_ESC, ELIM_NONE,
                     ELIM_SC_BETA, ELIM_SC_SHARE, ELIM_THRESHOLD, ELIMINATION, ENTROPY, GAP, GAP_LITERAL,
                     MARGINAL_GAIN, OPTSCALE, ORACLE, SIDE_EB, STREAMING, TWO_STAGE, UCB, UNIFORM, UNIT_SAMPLES,
                     UNIT_TOKENS)
from .kernel import BOINF_ALPHA, ELIM_BOINF


@dataclass(frozen=True)
class Policy:
    """One allocation policy. params: the RunConfig fields that change what it does, in label order (the others
    are ignored and dropped from its label; gamma is also read through a threshold rule, and listed here only
    where the policy reads it whatever the rule); needs: what a pool must have ("answers", "gt", "lows": the record
    lows of each response's group confidence, which replay/pool.py loads only for a policy that needs them); lam: its default exploration
    bonus; live: whether it can run without hindsight; published: from the literature (False: this project's own,
    which `ttc compare` measures against the best published policy, tuned alike); grid: the report's parameter
    sweeps it takes part in;
    style: (colour, marker, line style) in every figure; inputs: the signals beyond the pool's scores it reads,
    "prior" (a per-query predicted success probability: --prior COLUMN) or "side" (a per-response side signal: --side
    COLUMN), so that `ttc run` can refuse such an option for a policy that would ignore it."""

    name: str
    code: int
    doc: str
    params: tuple = ()
    needs: frozenset = frozenset()
    lam: float | None = None
    live: bool = True
    published: bool = True
    grid: frozenset = frozenset()
    style: tuple = ("#4d4d4d", "o", "-")
    inputs: tuple = ()


_ADAPTIVE = ("K", "eliminate", "max_samples")
REGISTRY = {p.name: p for p in (
    Policy("uniform", UNIFORM, "the same number of responses for every query (round-robin, no elimination)",
           style=("#4d4d4d", "o", "-")),
    Policy("elimination", ELIMINATION, "round-robin over the queries not yet answered", _ADAPTIVE,
           grid=frozenset({"K", "gamma", "tokens", "cap"}), style=("#1f77b4", "s", "-")),
    Policy("ucb", UCB, "highest mean score + lambda / sqrt(n) first", ("K", "eliminate", "lam", "max_samples"), lam=1.0,
           grid=frozenset({"K", "lambda", "gamma", "tokens"}), style=("#ff7f0e", "^", "--")),
    Policy("gap", GAP, "smallest sqrt(n) (abs(gamma - mean) + eps) first (APT form)",
           ("K", "eliminate", "eps", "max_samples", "gamma"),
           grid=frozenset({"K", "gamma", "tokens"}), style=("#2ca02c", "v", ":")),
    Policy("gap-literal", GAP_LITERAL, "the paper's printed gap formula, for comparison only",
           _ADAPTIVE + ("gamma",), style=("#8c564b", "x", "-.")),
    Policy("entropy", ENTROPY, "highest answer entropy + lambda / sqrt(n) first",
           ("K", "eliminate", "lam", "max_samples"),
           needs=frozenset({"answers"}), lam=3.0, grid=frozenset({"K", "lambda", "gamma", "tokens"}),
           style=("#d62728", "D", "-")),
    Policy("two-stage", TWO_STAGE, "round-robin with a share rho of the budget, the rest by posterior mean",
           ("eliminate", "rho", "max_samples"), grid=frozenset({"tokens"}), style=("#9467bd", "P", "--")),
    Policy("streaming", STREAMING, "queries one at a time in order, each until answered or capped",
           _ADAPTIVE, grid=frozenset({"tokens", "cap"}), style=("#17becf", "*", "-.")),
    Policy("oracle", ORACLE, "hindsight ceiling: each query up to its first correct response, cheapest first",
           needs=frozenset({"gt"}), live=False, style=("#bcbd22", "h", ":")),
    Policy("optscale", OPTSCALE, "OptScale: a warm-up per query, then each its own N: the fewest draws that reach "
           "gamma with probability 1 - percentile, from the warm-up's success rate",
           ("warmup", "percentile", "max_samples", "gamma"), style=("#e377c2", "p", "--")),
    Policy("marginal-gain", MARGINAL_GAIN, "each pull to the unsolved query whose next response most likely reaches "
           "gamma: a Beta posterior mean from its --prior prediction (else Laplace's) and its scores",
           ("K", "eliminate", "max_samples", "gamma", "prior_strength"), style=("#7f7f7f", "d", "-."),
           inputs=("prior",)),
    Policy("dsc", DSC, "DSC: one draw per query ranks them by its score; a binary search marks the easy prefix (its "
           "judges stop at their first window of K); the rest draw windows of K until the rule stops them",
           ("K", "eliminate", "max_samples", "judge"), style=("#aec7e8", "8", ":")),
    Policy("side-eb", SIDE_EB, "each pull to the unanswered query whose next response most likely answers it per "
           "unit cost: an empirical-Bayes rate learnt during the run per bin of the --side signal of its failed draws",
           ("K", "eliminate", "max_samples", "prior_strength", "bins", "refresh", "horizon"), published=False,
           style=("#ffbb78", "X", "--"),
           inputs=("side",)),
    Policy("deepconf-online", DEEPCONF_ONLINE, "DeepConf online: a warm-up of whole traces per query sets its threshold "
           "(the percentile of their lowest group confidences keeping the top share percentile); then one trace at a "
           "time, round-robin, until its confidence-weighted vote reaches tau; a trace whose group confidence falls "
           "below the threshold stops there, pays its tokens so far and does not vote",
           ("warmup", "percentile", "tau", "max_samples"), needs=frozenset({"lows", "answers"}),
           style=("#c5b0d5", "<", "-")),
)}


@dataclass(frozen=True)
class Rule:
    """An elimination rule (when a query counts as answered) or a selection rule (which response a query
    finally gives); params: the RunConfig fields it reads; needs as for Policy."""

    name: str
    code: int
    doc: str
    params: tuple = ()
    needs: frozenset = frozenset()


ELIMINATION_RULES = {r.name: r for r in (
    Rule("threshold", ELIM_THRESHOLD, "a score >= gamma", ("gamma",)),
    Rule("sc-share", ELIM_SC_SHARE, "leading answer > tau of the draws, after m_min", ("tau", "m_min"),
         frozenset({"answers"})),
    Rule("sc-beta", ELIM_SC_BETA, "Adaptive-Consistency's Beta rule: P(leading > runner-up) >= conf", (),
         frozenset({"answers"})),
    Rule("esc", ELIM_ESC, "ESC: the last K draws (a window) all give the same valid answer", ("K",),
         frozenset({"answers"})),
    Rule("ac-majority", ELIM_AC_MAJORITY, "Adaptive-Consistency's majority rule: leading answer >= share of the "
         "draws, after 2", ("share",), frozenset({"answers"})),
    Rule("ac-entropy", ELIM_AC_ENTROPY, "Adaptive-Consistency's entropy rule: normalised answer entropy <= hmax, "
         "after 2", ("hmax",), frozenset({"answers"})),
    Rule("ac-dirichlet", ELIM_AC_DIRICHLET, "Adaptive-Consistency's Dirichlet rule: P(leading answer's share is the "
         "largest of the top 5) >= dirichlet_conf, exact", ("dirichlet_conf",), frozenset({"answers"})),
    Rule("none", ELIM_NONE, "never"),
    # the 2025-26 per-query stops (issue 29)
    Rule("boinf", ELIM_BOINF, f"Best-of-Infinity's adaptive sampling: (answers + 1) P(leading answer is the mode) / "
         f"(1 - P) >= bf, P under the Dirichlet posterior of the answer counts with an unknown bucket of {BOINF_ALPHA}, "
         "estimated as its code does from bf_mc draws (0: exact, the paper's)",
         ("bf", "bf_mc"), frozenset({"answers"})),
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

# Views of the registry under the names the rest of the package has used.
POLICIES = {name: p.code for name, p in REGISTRY.items()}
UNITS = {"samples": UNIT_SAMPLES, "tokens": UNIT_TOKENS}
ELIMS = {name: r.code for name, r in ELIMINATION_RULES.items()}
MAX_COUNT = 2**31  # bound on K and max_samples


def supported(pool, eliminate: str = "threshold") -> list[str]:
    """The policies a pool can run under an elimination rule: what each needs ("gt": ground truth, "answers":
    answer categories, its own or through the rule) the pool has."""
    has = {"gt": pool.has_gt, "answers": pool.has_answers, "lows": pool.lows is not None}
    rule = ELIMINATION_RULES[eliminate].needs if eliminate in ELIMINATION_RULES else frozenset()
    return [name for name, p in REGISTRY.items()
            if all(has[n] for n in p.needs | (rule if "eliminate" in p.params else frozenset()))]


def in_grid(sweep: str) -> tuple:
    """The policies a report sweep (K, lambda, gamma, tokens, cap) runs, in registry order."""
    return tuple(name for name, p in REGISTRY.items() if sweep in p.grid)


def markdown_choices(entries: dict) -> str:
    """`name`: doc; ... for the README tables and --help."""
    return "; ".join(f"`{n}`: {e.doc}" for n, e in entries.items())


@dataclass(frozen=True)
class RunConfig:
    """One policy configuration. unit: samples, tokens or token-matched; max_samples 0 means no cap."""

    policy: str
    unit: str = "samples"
    K: int = 1
    eliminate: str = "threshold"
    gamma: float = 1.0
    lam: float | None = None
    eps: float = 0.01
    max_samples: int = 0
    rho: float = 0.5
    tau: float = 0.5
    m_min: int = 3
    share: float = 0.8
    hmax: float = 0.75
    warmup: int = 3
    percentile: float = 0.05
    prior_strength: float = 2.0
    judge: int = 32
    bins: int = 3
    refresh: int = 8
    dirichlet_conf: float = 0.95
    horizon: int = 0
    bf: float = 10.0
    bf_mc: int = 1000

    def __post_init__(self):
        if not 0.0 < self.bf < math.inf:
            raise ValueError(f"bf must be a finite number > 0 (boinf's Bayes factor threshold), got {self.bf}")
        if not 0 <= self.bf_mc <= 10**9:
            raise ValueError(f"bf_mc must be in 0..1e9 (the source's Monte Carlo draws whose Hoeffding branch boinf "
                             f"follows; 0: the exact Bayes factor), got {self.bf_mc}")
        if self.horizon not in (0, 1):
            raise ValueError(f"horizon must be 0 (side-eb's one-step index) or 1 (its rate over the draws each query "
                             f"can still get), got {self.horizon}")
        if not (1 <= self.bins <= 1024 and 1 <= self.refresh <= MAX_COUNT):
            raise ValueError(f"bins must be in 1..1024 and refresh in 1..{MAX_COUNT:,} (pulls between refreshes), got "
                             f"{self.bins} and {self.refresh}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; choose from {', '.join(POLICIES)}")
        if self.eliminate not in ELIMS:
            raise ValueError(f"unknown elimination rule {self.eliminate!r}; choose from {', '.join(ELIMS)}")
        if self.unit not in ("samples", "tokens", "token-matched"):
            raise ValueError(f"unknown budget unit {self.unit!r}; choose samples, tokens or token-matched")
        if self.K < 1:
            raise ValueError(f"K must be >= 1, got {self.K}")
        if self.K > MAX_COUNT or self.max_samples > MAX_COUNT:  # the kernel multiplies counts in int64
            raise ValueError(f"K and max_samples must be <= {MAX_COUNT:,} (a pull can draw no more than a pool)")
        if self.max_samples < 0:
            raise ValueError(f"max_samples must be >= 0 (0 = no cap), got {self.max_samples}")
        if not 0.0 < self.rho < 1.0:
            raise ValueError(f"rho must be in (0, 1), got {self.rho}")
        if not 0.0 <= self.tau < 1.0:
            raise ValueError(f"tau must be in [0, 1), got {self.tau}")
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {self.share}")
        if not 0.0 <= self.hmax <= 1.0:
            raise ValueError(f"hmax must be in [0, 1] (a normalised entropy), got {self.hmax}")
        if self.m_min < 1:
            raise ValueError(f"m_min must be >= 1, got {self.m_min}")
        if not 0.5 < self.dirichlet_conf < 1.0:
            raise ValueError(f"dirichlet_conf must be in (0.5, 1) (a probability that the leading answer leads), got "
                             f"{self.dirichlet_conf}")
        # `not x >= 0` rather than `x < 0`: NaN fails every comparison and would otherwise pass as a valid value
        if not 0.0 <= self.eps < math.inf:
            raise ValueError(f"eps must be a finite number >= 0, got {self.eps}")
        if self.lam is not None and not 0.0 <= self.lam < math.inf:
            raise ValueError(f"lambda must be a finite number >= 0, got {self.lam}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1] (scores are), got {self.gamma}")
        if not 1 <= self.warmup <= MAX_COUNT:
            raise ValueError(f"warmup must be in 1..{MAX_COUNT:,} (responses per query before its N is set), got "
                             f"{self.warmup}")
        if not 0.0 < self.percentile < 1.0:
            raise ValueError(f"percentile must be in (0, 1) (the chance of no success it accepts), got "
                             f"{self.percentile}")
        if not 0.0 < self.prior_strength < math.inf:
            raise ValueError(f"prior_strength must be a finite number > 0 (pseudo-draws), got {self.prior_strength}")
        if not 2 <= self.judge <= MAX_COUNT:
            raise ValueError(f"judge must be in 2..{MAX_COUNT:,} (queries judged around each midpoint), got "
                             f"{self.judge}")

    @property
    def lam_value(self) -> float:
        default = REGISTRY[self.policy].lam
        return self.lam if self.lam is not None else (1.0 if default is None else default)

    @property
    def kernel_unit(self) -> int:
        return UNITS["samples" if self.unit == "samples" else "tokens"]

    def record(self) -> np.ndarray:
        """This configuration as the kernels read it: a CONFIG record (a one-element array; index [0])."""
        r = np.zeros(1, CONFIG)
        r["policy"], r["unit"], r["K"], r["elim"] = POLICIES[self.policy], self.kernel_unit, self.K, \
            ELIMS[self.eliminate]
        r["max_samples"], r["m_min"] = self.max_samples, self.m_min
        r["gamma"], r["lam"], r["eps"], r["rho"], r["tau"] = self.gamma, self.lam_value, self.eps, self.rho, self.tau
        r["share"], r["hmax"] = self.share, self.hmax
        r["warmup"], r["judge"], r["percentile"], r["prior_strength"] = self.warmup, self.judge, self.percentile, \
            self.prior_strength
        r["bins"], r["refresh"] = self.bins, self.refresh
        r["dirichlet_conf"], r["horizon"] = self.dirichlet_conf, self.horizon
        r["bf"], r["bf_mc"] = self.bf, self.bf_mc
        return r

    def used_params(self) -> tuple:
        own = REGISTRY[self.policy].params
        used = tuple(p for p in own if p != "gamma")
        if "eliminate" in used:  # (a rule may read one of the policy's own, as esc reads K)
            used = used + tuple(p for p in ELIMINATION_RULES[self.eliminate].params if p not in used)
        if "gamma" in own and "gamma" not in used:
            used = used + ("gamma",)
        return used

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
