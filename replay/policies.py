"""Policy names, their parameters and defaults: the Python side of replay/kernel.py's integer codes."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .kernel import (CONFIG, ELIM_NONE, ELIM_SC_BETA, ELIM_SC_SHARE, ELIM_THRESHOLD, ELIMINATION, ENTROPY, GAP, GAP_LITERAL,
                     ORACLE, STREAMING, TWO_STAGE, UCB, UNIFORM, UNIT_SAMPLES, UNIT_TOKENS)

POLICIES = {
    "uniform": UNIFORM, "elimination": ELIMINATION, "ucb": UCB, "gap": GAP, "gap-literal": GAP_LITERAL,
    "entropy": ENTROPY, "two-stage": TWO_STAGE, "streaming": STREAMING, "oracle": ORACLE,
}
UNITS = {"samples": UNIT_SAMPLES, "tokens": UNIT_TOKENS}
ELIMS = {"none": ELIM_NONE, "threshold": ELIM_THRESHOLD, "sc-share": ELIM_SC_SHARE, "sc-beta": ELIM_SC_BETA}
DEFAULT_LAMBDA = {"ucb": 1.0, "entropy": 3.0}
MAX_COUNT = 2**31  # bound on K and max_samples
# Which parameters change what each policy does (the others are ignored, and dropped from its label).
USES = {
    "uniform": (),
    "elimination": ("K", "eliminate", "max_samples"),
    "ucb": ("K", "eliminate", "lam", "max_samples"),
    "gap": ("K", "eliminate", "eps", "max_samples"),
    "gap-literal": ("K", "eliminate", "max_samples"),
    "entropy": ("K", "eliminate", "lam", "max_samples"),
    "two-stage": ("eliminate", "rho", "max_samples"),
    "streaming": ("K", "eliminate", "max_samples"),
    "oracle": (),
}
ELIM_PARAMS = {"none": (), "threshold": ("gamma",), "sc-share": ("tau", "m_min"), "sc-beta": ()}
NEEDS_ANSWERS = {"entropy"}


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

    def __post_init__(self):
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
        if self.m_min < 1:
            raise ValueError(f"m_min must be >= 1, got {self.m_min}")
        if self.eps < 0:
            raise ValueError(f"eps must be >= 0, got {self.eps}")

    @property
    def lam_value(self) -> float:
        return self.lam if self.lam is not None else DEFAULT_LAMBDA.get(self.policy, 1.0)

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
        return r

    def used_params(self) -> tuple:
        used = USES[self.policy]
        if "eliminate" in used:
            used = used + ELIM_PARAMS[self.eliminate]
        if self.policy in ("gap", "gap-literal") and "gamma" not in used:
            used = used + ("gamma",)
        return used

    def needs_answers(self) -> bool:
        return self.policy in NEEDS_ANSWERS or (
            "eliminate" in USES[self.policy] and self.eliminate in ("sc-share", "sc-beta"))

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
