"""Per-response confidence signals from a backend's token log-probs: what DeepConf (Fu et al. 2025, "Deep Think with
Confidence", arXiv:2508.15260; code github.com/facebookresearch/deepconf) and confidence-weighted self-consistency
(CISC, Taubenfeld et al. 2025) weigh or filter responses by.

Which signals exist, their columns and the map of each to [0, 1] are declared in harvest/registry.py's SIGNALS; this
module holds the arithmetic, shared by the three backends (each reduces its own log-prob format to two numbers per
generated token, right as it decodes, so no per-token top-k table is ever held for a whole batch) and by the
importers that map published confidences.

The definitions follow DeepConf's released code (deepconf/utils.py, deepconf/processors.py) rather than a
paraphrase, since the paper leaves edge cases open:
- token confidence C_i = -(1/k) * sum of the k largest log-probs at position i (the processor's `compute_conf`; the
  offline helper averages vLLM's logprob dict, which holds k + 1 entries when the sampled token is outside the top k:
  here always exactly the k largest, the paper's equation);
- group confidence: the mean of C over each window of `window` consecutive tokens, sliding by one token; a response
  shorter than the window is one group, the mean over all its tokens (`compute_least_grouped`);
- lowest group confidence: the smallest group confidence; bottom-10%: the mean of the lowest
  max(1, int(0.1 * groups)) group confidences (`calculate_bottom_window_confidence`); tail: the mean of C over the
  last `tail` tokens (`calculate_tail_confidence`); mean: the mean of C over all tokens;
- record lows (group-lows, DeepConf online's stopping data): the positions where the group confidence of the window
  ending there falls below every earlier one, and those values (group_lows: the online filter stops a trace at the
  first of them below its threshold, whatever the threshold, so replay needs nothing else to stop it exactly).
DeepConf rounds every C to three decimals; this does not (rounding changes rankings between close traces and buys
nothing). The mean token log-prob (CISC's "response probability" in log space, and what the math500-ivt dump
publishes) is of the sampled tokens.

The log-probs are those of the model's own next-token distribution, before temperature and top-p: vLLM's default
(`raw_logprobs`), and what the transformers backend computes from the logits, so the signals of a pool do not move
with the sampling temperature. Every generated token counts, the end-of-sequence token included, as in n_tokens.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ttc.replay.errors import InputError

from .registry import SIGNAL_DEFAULTS as DEFAULTS

BOTTOM_SHARE = 0.1   # DeepConf's bottom-10% group confidence (bottom_percent=0.1)
FLAGS = {"window": "--confidence-window", "top_k": "--confidence-top-k", "tail": "--confidence-tail"}
LOGPROBS_RULE = ("log-probs of the model's next-token distribution before temperature and top-p (transformers: "
                 "log_softmax of the logits here; vLLM: its default raw_logprobs; openai: as the server returns "
                 "them); every generated token counts, EOS included")


class SignalError(InputError):
    """Log-probs that cannot make a signal (NaN, no alternatives where top-k ones were asked for)."""


# ---------------------------------------------------------------------------------------------------- per token


def token_confidence(logprobs: Iterable[float], k: int) -> float:
    """DeepConf's C_i: minus the mean of the k largest log-probs given for one position. Fewer than k given (an
    OpenAI-style completions endpoint keys alternatives by token text, so two tokens spelled alike count once): the
    mean of those given."""
    top = sorted(logprobs, reverse=True)[:k]
    if not top:
        raise SignalError("a position came back without its top log-probs")
    return -math.fsum(top) / len(top)


# ----------------------------------------------------------------------------------------------- per response


def _windows(conf: np.ndarray, window: int) -> np.ndarray:
    """Means of every run of `window` consecutive values (one value, the mean of all, when there are fewer), via
    prefix sums: O(n) where the literal definition is O(n * window), which at DeepConf's 2048 would dominate a
    harvest. Infinite confidences (a -inf log-prob among the top k) would turn prefix differences into NaN, so they are
    counted apart: a window holding one has mean +inf."""
    n = len(conf)
    if n < window:
        return np.array([conf.mean()])
    inf = np.isposinf(conf)
    finite = np.where(inf, 0.0, conf)
    s = np.concatenate(([0.0], np.cumsum(finite)))
    means = (s[window:] - s[:-window]) / window
    if inf.any():
        c = np.concatenate(([0], np.cumsum(inf)))
        means[(c[window:] - c[:-window]) > 0] = math.inf
    return means


def mean_logprob(sampled: np.ndarray, conf: np.ndarray | None, spec: "ConfidenceSpec") -> float:
    return float(sampled.mean())


def mean_confidence(sampled: np.ndarray, conf: np.ndarray, spec: "ConfidenceSpec") -> float:
    return float(conf.mean())


def lowest_group(sampled: np.ndarray, conf: np.ndarray, spec: "ConfidenceSpec") -> float:
    return float(_windows(conf, spec.window).min())


def bottom_groups(sampled: np.ndarray, conf: np.ndarray, spec: "ConfidenceSpec") -> float:
    means = _windows(conf, spec.window)
    m = max(1, int(len(means) * BOTTOM_SHARE))
    return float(np.sort(means)[:m].mean())


def tail_confidence(sampled: np.ndarray, conf: np.ndarray, spec: "ConfidenceSpec") -> float:
    return float(conf[-spec.tail:].mean())


def record_lows(groups: np.ndarray, first: int) -> tuple[list[int], list[float]]:
    """The record lows of a sequence whose k-th value belongs to position first + k: the positions where it falls
    below every earlier value (the first value always), and those values; values strictly decrease, positions
    strictly increase, and the last value is the sequence's minimum."""
    pos: list[int] = []
    val: list[float] = []
    low = math.inf
    for k, g in enumerate(groups.tolist()):
        if g < low or not pos:
            low = g
            pos.append(first + k)
            val.append(g)
    return pos, val


def group_lows(sampled: np.ndarray, conf: np.ndarray, spec: "ConfidenceSpec") -> tuple[list[int], list[float]]:
    """DeepConf online's stopping data for one response. Its filter (deepconf/processors.py,
    ConfPerReqLogitsProcessor) computes C_t at each decoding step t from that step's logits, keeps the last `window`
    of them, and once it holds `window` ("if len(self.conf_group_list) >= self.conf_group_size and
    self.conf_grouped / len(self.conf_group_list) < self.threshold") forces the end-of-sequence token at step t when
    their mean is below the threshold s: the trace then holds t + 1 tokens. C_t depends only on tokens before t, so
    the same response generated with the filter on agrees with this one up to step t, and it stops at the first t >=
    window - 1 whose group (tokens t - window + 1 .. t) is below s: the first record low of the group sequence below
    s. A response shorter than the window is one group ending at its last token (compute_least_grouped): the filter
    never stops it, but the source's post-hoc check (`if trace["min_conf"] < output.conf_bar: trace["stop_reason"] =
    "gconf_threshold"`) drops it from the vote all the same, having paid its whole length, which is what a stop at
    its last token means too. The group means are _windows' (the lowest-group signal's numbers: its minimum is the
    last value here)."""
    groups = _windows(conf, spec.window)
    return record_lows(groups, spec.window - 1 if len(conf) >= spec.window else len(conf) - 1)


class GroupStop:
    """DeepConf online's filter for one trace as it is generated: feed(C_t) at each step t, True at the step where the
    trace must stop (it then holds t + 1 tokens). The arithmetic is _windows', operation for operation (sequential
    float64 prefix sums, +inf counted apart), not a running sum over a deque as in DeepConf's processor: so it fires
    at exactly the first record low below the threshold that group_lows finds on the whole trace, and the truncated
    trace's own lows end there, so replaying it stops it at its last token. Only a full window stops a trace."""

    def __init__(self, window: int, threshold: float):
        self.window = window
        self.threshold = threshold
        self.n = 0                                        # confidences fed
        self._sums = deque([0.0], maxlen=window + 1)      # prefix sums s[t + 1 - window] .. s[t + 1]
        self._infs = deque([0], maxlen=window + 1)        # the same of the +inf count

    def feed(self, c: float) -> bool:
        inf = c == math.inf
        finite = 0.0 if inf else c
        # np.cumsum's first element is the value itself, not 0.0 + value (they differ for -0.0)
        self._sums.append(self._sums[-1] + finite if self.n else finite)
        self._infs.append(self._infs[-1] + inf)
        self.n += 1
        if self.n < self.window:
            return False
        mean = math.inf if self._infs[-1] - self._infs[0] > 0 else (self._sums[-1] - self._sums[0]) / self.window
        return mean < self.threshold


# ------------------------------------------------------------------------------------------------ maps to [0, 1]


def exp_map(x: float, k: int | None = None) -> float:
    """exp of a mean log-prob: the geometric-mean token probability, already in [0, 1]."""
    return min(1.0, math.exp(x))


def confidence_map(x: float, k: int) -> float:
    """1 - ln(k) / C for a DeepConf confidence C. C is at least ln k (the k largest probabilities sum to at most 1,
    and their log-mean is largest when they are equal), reached when the model spreads its mass evenly over the top
    k, and unbounded above: so 0 = as unsure as the top k allow, 1 = C infinite, strictly increasing in between
    without the saturation of 1 - exp(-C) (typical C of 5-20 stay spread out over 0.4-0.85 at k = 20). A C below
    ln k (float rounding, or fewer than k alternatives returned) maps to 0."""
    if math.isinf(x):
        return 1.0
    return min(1.0, max(0.0, 1.0 - math.log(k) / x)) if x > 0 else 0.0


MAPS = {"exp": exp_map, "confidence": confidence_map}


# ------------------------------------------------------------------------------------------------------ the spec


@dataclass(frozen=True)
class ConfidenceSpec:
    """The signals a harvest records and the parameters they use (DeepConf's defaults: window 2048, k 20, tail
    2048). Frozen and picklable: the vLLM data-parallel workers compute the signals in their own processes."""

    signals: tuple[str, ...]
    window: int = DEFAULTS["window"]
    top_k: int = DEFAULTS["top_k"]
    tail: int = DEFAULTS["tail"]

    def __post_init__(self):
        from .registry import SIGNALS

        if not self.signals:
            raise InputError("--confidence needs at least one signal")
        for s in self.signals:
            if s not in SIGNALS:
                raise InputError(f"unknown confidence signal {s!r}; choose from {', '.join(SIGNALS)}")
        if len(set(self.signals)) != len(self.signals):
            object.__setattr__(self, "signals", tuple(dict.fromkeys(self.signals)))
        for name in ("window", "top_k", "tail"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{FLAGS[name]} must be a positive integer, got {v!r}")

    @property
    def entries(self):
        from .registry import SIGNALS

        return [SIGNALS[s] for s in self.signals]

    @property
    def top_logprobs(self) -> int:
        """Alternatives per position the backend must return: k when a DeepConf confidence is asked for, else 0 (the
        sampled token's log-prob alone, which vLLM and OpenAI-compatible servers return with logprobs=0)."""
        return self.top_k if any(e.needs == "top-k" for e in self.entries) else 0

    def uses(self) -> set[str]:
        return {o for e in self.entries for o in e.options}

    def columns(self) -> list[str]:
        """The sample columns written, in registry order: each signal's score, then its raw value (a "lows" signal:
        its positions, then its values)."""
        from .registry import SIGNALS

        return [c for name, e in SIGNALS.items() if name in self.signals for c in (e.column, e.raw)]

    def score_columns(self) -> list[str]:
        """The score columns in [0, 1] among columns() (what --score or --side may name)."""
        return [e.column for e in self.entries if e.scores]

    def schema(self) -> dict:
        """columns() with their types, as every writer of them (ttc harvest, ttc run) types them: a score_* column and
        a record-lows column as the pool format declares them, a raw value as a plain float."""
        import polars as pl

        from ttc.replay.pool import SAMPLE_COLUMNS, column

        return {c: column(c).dtype if c.startswith("score_") or c in SAMPLE_COLUMNS else pl.Float64
                for c in self.columns()}

    def record(self) -> dict:
        """pool.json's account (in the generation block, so a resume or merge with other signals is refused)."""
        params = {o: getattr(self, o) for o in ("window", "top_k", "tail") if o in self.uses()}
        out: dict = {"signals": list(self.signals), **params, "logprobs": LOGPROBS_RULE}
        if self.top_logprobs:
            out["token_confidence"] = ("C_i = -(1/k) * sum of the k largest log-probs at token i (DeepConf, Fu et al. "
                                       f"2025), k = {self.top_k}")
        out["columns"] = {e.column: {"signal": e.name, "raw": e.raw, "raw_is": e.how, "map": e.map_doc,
                                     "empty": "no tokens: raw null, score 0"}
                          for e in self.entries if e.scores}
        for e in self.entries:
            if not e.scores:
                out["columns"][e.column] = {
                    "signal": e.name, "values": e.raw, "is": e.how, "map": e.map_doc,
                    "units": "DeepConf's group confidence itself (not mapped): the threshold replay sets from the "
                             "warm-up's lowest group confidences is in the same units",
                    "stop": "a trace stops at the first position whose value is below the threshold s, having paid "
                            "position + 1 tokens; none below s: it runs to its end",
                    "empty": "no tokens: both lists empty"}
        return out

    def compute(self, sampled: Sequence[float], conf: Sequence[float] | None) -> dict[str, float | list | None]:
        """Every requested signal of one response, score and raw columns, from its generated tokens' sampled
        log-probs and (when a DeepConf signal is asked for) token confidences. No tokens: raw None and score 0 (no
        evidence of anything, as a PRM's no steps)."""
        s = np.asarray(sampled, dtype=np.float64)
        c = None if conf is None else np.asarray(conf, dtype=np.float64)
        if np.isnan(s).any() or (c is not None and np.isnan(c).any()):
            raise SignalError("the backend returned a NaN log-prob")
        out: dict[str, float | None] = {}
        for e in self.entries:
            data = c if e.needs == "top-k" else s
            if data is None:
                raise SignalError(f"confidence signal {e.name} needs top-{self.top_k} log-probs, which the backend "
                                  "did not return")
            if not e.scores:  # the record lows: two lists
                out[e.column], out[e.raw] = e.load()(s, c, self) if len(data) else ([], [])
                continue
            if len(data) == 0:
                out[e.column], out[e.raw] = 0.0, None
                continue
            raw = e.load()(s, c, self)
            out[e.raw] = raw
            out[e.column] = MAPS[e.map](raw, self.top_k)
        return out


def parse_signals(items: Sequence[str] | None, window: int = DEFAULTS["window"], top_k: int = DEFAULTS["top_k"],
                  tail: int = DEFAULTS["tail"], given: Iterable[str] = ()) -> ConfidenceSpec | None:
    """The spec of `--confidence a,b --confidence c` with its parameters; None when no signal is asked for.
    `given`: the parameters set on the command line, refused when no requested signal reads them (an option that
    does nothing is an error, not a silent default)."""
    names = [n.strip() for item in items or () for n in str(item).split(",") if n.strip()]
    given = set(given)
    if not names:
        if given:
            raise InputError(f"{FLAGS[sorted(given)[0]]} applies only with --confidence")
        return None
    spec = ConfidenceSpec(tuple(names), window=window, top_k=top_k, tail=tail)
    for o in sorted(given - spec.uses()):
        from .registry import SIGNALS, taking

        raise InputError(f"{FLAGS[o]} applies to --confidence {' or '.join(taking(SIGNALS, o))}, which this run "
                         "does not ask for")
    return spec
