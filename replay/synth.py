"""Synthetic pools: what real pools cannot show, because here every response is drawn from known parameters.

Two generators live here.

`make_pool` is the small in-memory pool the tests and `ttc bench` have used from the start (per-query success
rates from a Beta with a mass of unsolvable queries, noisy scores with ties, repeating wrong answers and
invalid outputs, token counts). Its output for given arguments must never change: tests and benchmark numbers
depend on it.

`generate` / `write_synth` (`ttc synth`) build a pool in the pool format from a `SynthSpec` whose every
parameter is recorded in pool.json. The generative model, per query i and response j of that query:

- success rate p_i from `difficulty`:
  `beta:A,B` p_i ~ Beta(A, B); `mixture:A,B,U` p_i = 0 (unsolvable) with probability U, else ~ Beta(A, B);
  `linear` p_i = (i + 1) / n for the i-th query in query_id order (1/n .. 1: the spec's example).
- correct_ij ~ Bernoulli(p_i), independently. With `exact_counts` query i instead holds exactly
  round(p_i * N_i) correct responses at uniformly random positions, so the pool's own rate is p_i (up to
  rounding) and replay differs from live sampling only by drawing without replacement (`ttc theory` uses it).
- reward model: first a verdict v_ij, the correct bit flipped with probability `fn` for a correct response
  (a false negative) and `fp` for a wrong one (a false positive); then the score from the verdict alone:
  `beta:A,B` v = 1 -> gamma + (1 - gamma) * X, X ~ Beta(A, B); v = 0 -> gamma * Y, Y ~ Beta(B, A), kept below
  gamma; `binary` v = 1 -> 1.0, v = 0 -> 0.0; `none` no score column. So `score >= gamma` is exactly the verdict:
  P(score >= gamma | wrong) = fp and P(score < gamma | correct) = fn, whatever the shape; the shape (A > B
  pushes positives toward 1 and negatives toward 0) only matters to rules that use the score's value (ucb, gap,
  best-of-N among several positives, weighted voting). The column is `score_rm`; replay it with
  `--score rm --gamma <gamma>`.
- answers: a correct response carries the gold answer "gold". A wrong response is invalid (answer null) with
  probability `invalid_rate` on a solvable query (p_i > 0) and `invalid_rate_unsolvable` on an unsolvable one
  (p_i = 0); otherwise it is one of `wrong_answers` = K wrong answers "wrong-1" .. "wrong-K", chosen with
  probability proportional to k^(-answer_skew) (Zipf; skew 0 = uniform), so one wrong answer dominates and
  self-consistency can be fooled on hard queries. Correct responses are never invalid.
- tokens (`tokens` = mean M > 0; 0 = no column): n_tokens = max(1, round(X)) with X lognormal of mean M for a
  correct response and M * `tokens_wrong` for a wrong or invalid one, log-standard deviation `tokens_sigma`
  (X = exp(N(log(mean) - sigma^2 / 2, sigma))): wrong responses ramble.
- side signal (`side_signal`; `none` = no column): a per-response column `score_side` that says something about
  the query, not about the response, to a designed degree, so that experiments can show when a policy that reads
  side information gains and that it does not lose when the signal is empty. `solvable:A`: score_side =
  logistic(X), X ~ N(d, 1) on a query with a correct response somewhere in its pool and N(0, 1) on one without,
  independently per response, with d = sqrt(2) Phi^-1(A); so one response's signal separates the two kinds of
  query with AUC exactly A (what `ttc signals` measures at k = 1, "solvable"; more draws separate them better).
  A = 0.5 is the no-information control (the column is there, its values independent of everything else); A < 0.5
  is a signal informative in reverse. Whether the response itself is correct does not enter.

Each component draws from its own stream, numpy's default_rng(SeedSequence([seed, component])), so one seed
gives identical files, and changing one parameter (say fp) leaves the other columns (say correct) unchanged.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from .errors import InputError, check_memory
from .pool import Pool, samples_frame

MAX_ROWS = 50_000_000  # one samples.parquet held in memory; beyond this, generate several pools
# peak memory of `ttc synth` (measured with /usr/bin/time on 1M rows: +400 MB; 3M wrong answers: +790 MB),
# rounded up: each response, and each distinct wrong answer (its label, its share, its place in string order)
ROW_BYTES = 450
WRONG_ANSWER_BYTES = 300
_DIFFICULTY, _CORRECT, _VERDICT, _SCORE, _ANSWER, _INVALID, _TOKENS, _SIDE = range(8)  # random stream ids


def make_pool(n=60, size=24, seed=0, ragged=False, scores="noisy", answers=True, tokens=True) -> Pool:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(max(2, size // 3), size + 1, n) if ragged else np.full(n, size)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    p = rng.beta(0.6, 0.9, n)
    p[rng.random(n) < 0.15] = 0.0  # a mass of unsolvable queries
    correct = (rng.random(total) < np.repeat(p, sizes)).astype(np.int8)
    score = None
    if scores != "gt":
        noise = rng.normal(0, 0.25, total)
        score = np.clip(0.25 + 0.5 * correct + noise, 0, 1).round(2)  # rounding makes ties
    ans = None
    if answers:
        # correct = answer 0; wrong answers repeat among 3 (ids 1..3), a fifth of them invalid (-1);
        # per-query ids must stay below the query's pool size
        ans = np.where(correct == 1, 0, rng.integers(1, 4, total))
        ans[(correct == 0) & (rng.random(total) < 0.2)] = -1
        ans[ans >= np.repeat(sizes, sizes)] = -1
    tok = rng.integers(50, 400, total) if tokens else None
    return Pool.from_arrays(off, correct=correct, score=score, ans=ans, tok=tok, name=f"synthetic-{n}x{size}-{seed}")


class SynthError(InputError):
    """A synthetic-pool parameter out of range; the message names it."""


@dataclass(frozen=True)
class SynthSpec:
    """Every parameter of a synthetic pool (module docstring: what each one means). Recorded in pool.json."""

    queries: int = 200
    responses: int = 64
    difficulty: str = "mixture:0.6,0.9,0.15"
    fp: float = 0.05
    fn: float = 0.1
    gamma: float = 0.5
    score_dist: str = "beta:4,1"
    wrong_answers: int = 4
    answer_skew: float = 1.0
    invalid_rate: float = 0.1
    invalid_rate_unsolvable: float = 0.5
    tokens: float = 300.0
    tokens_sigma: float = 0.5
    tokens_wrong: float = 1.5
    exact_counts: bool = False
    seed: int = 0
    side_signal: str = "none"

    def __post_init__(self):
        self.check()

    def check(self):
        if self.queries < 1 or self.responses < 1:
            raise SynthError(f"--queries and --responses must be >= 1, got {self.queries} and {self.responses}")
        if self.queries * self.responses > MAX_ROWS:
            raise SynthError(f"{self.queries} x {self.responses} responses is more than {MAX_ROWS:,} rows; "
                             "generate several smaller pools")
        parse_difficulty(self.difficulty)
        parse_score_dist(self.score_dist)
        parse_side_signal(self.side_signal)
        for name, v in (("--fp", self.fp), ("--fn", self.fn), ("--invalid-rate", self.invalid_rate),
                        ("--invalid-rate-unsolvable", self.invalid_rate_unsolvable)):
            if not 0.0 <= v <= 1.0:
                raise SynthError(f"{name} is a probability in [0, 1], got {v}")
        if not 0.0 < self.gamma <= 1.0:
            raise SynthError(f"--gamma must be in (0, 1] (the threshold where fp and fn hold), got {self.gamma}")
        if self.wrong_answers < 1:
            raise SynthError(f"--wrong-answers must be >= 1 (distinct wrong answers per query), got "
                             f"{self.wrong_answers}")
        check_memory(self.queries * self.responses * ROW_BYTES + self.wrong_answers * WRONG_ANSWER_BYTES,
                     f"{self.queries:,} x {self.responses:,} responses with {self.wrong_answers:,} wrong answers",
                     "use fewer queries, responses or wrong answers")
        if not 0 <= self.answer_skew < math.inf:
            raise SynthError(f"--answer-skew must be >= 0 (0 = wrong answers equally likely), got {self.answer_skew}")
        # bounded so that every lognormal token count fits the pool's integer column (NaN fails every comparison)
        if not (0 <= self.tokens <= 1e6 and 0 <= self.tokens_sigma <= 3 and 0 < self.tokens_wrong <= 100):
            raise SynthError(f"--tokens must be in [0, 1e6] (0 = no token column), --tokens-sigma in [0, 3] and "
                             f"--tokens-wrong in (0, 100]; got {self.tokens}, {self.tokens_sigma}, {self.tokens_wrong}")
        if self.seed < 0:
            raise SynthError(f"--seed must be >= 0, got {self.seed}")


def _numbers(text: str, what: str, count: int) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != count or not all(math.isfinite(v) for v in vals):
        raise SynthError(f"{what} needs {count} comma-separated numbers, got {text!r}")
    return vals


def parse_difficulty(text: str) -> tuple[str, list[float]]:
    """'beta:A,B', 'mixture:A,B,UNSOLVABLE_SHARE' or 'linear' -> (kind, parameters)."""
    kind, _, rest = text.strip().partition(":")
    if kind == "linear" and not rest:
        return kind, []
    if kind == "beta":
        a, b = _numbers(rest, "--difficulty beta:A,B", 2)
        if a <= 0 or b <= 0:
            raise SynthError(f"--difficulty beta:A,B needs A > 0 and B > 0, got {text!r}")
        return kind, [a, b]
    if kind == "mixture":
        a, b, u = _numbers(rest, "--difficulty mixture:A,B,UNSOLVABLE_SHARE", 3)
        if a <= 0 or b <= 0 or not 0.0 <= u <= 1.0:
            raise SynthError(f"--difficulty mixture:A,B,U needs A > 0, B > 0 and U in [0, 1], got {text!r}")
        return kind, [a, b, u]
    raise SynthError(f"unknown --difficulty {text!r}; use beta:A,B, mixture:A,B,UNSOLVABLE_SHARE or linear")


def parse_score_dist(text: str) -> tuple[str, list[float]]:
    """'beta:A,B', 'binary' or 'none' -> (kind, parameters)."""
    kind, _, rest = text.strip().partition(":")
    if kind in ("binary", "none") and not rest:
        return kind, []
    if kind == "beta":
        a, b = _numbers(rest, "--score-dist beta:A,B", 2)
        if a <= 0 or b <= 0:
            raise SynthError(f"--score-dist beta:A,B needs A > 0 and B > 0, got {text!r}")
        return kind, [a, b]
    raise SynthError(f"unknown --score-dist {text!r}; use beta:A,B, binary or none")


def parse_side_signal(text: str) -> tuple[str, list[float]]:
    """'none' or 'solvable:AUC' (AUC in (0, 1); 0.5 = no information) -> (kind, parameters)."""
    kind, _, rest = text.strip().partition(":")
    if kind == "none" and not rest:
        return kind, []
    if kind == "solvable":
        (a,) = _numbers(rest, "--side-signal solvable:AUC", 1)
        if not 0.0 < a < 1.0:
            raise SynthError(f"--side-signal solvable:AUC needs an AUC in (0, 1) (0.5 = no information), got {text!r}")
        return kind, [a]
    raise SynthError(f"unknown --side-signal {text!r}; use none or solvable:AUC (e.g. solvable:0.75; solvable:0.5 is "
                     "the no-information control)")


def side_shift(auc: float) -> float:
    """The mean shift d of the side signal's normal that gives two-sample AUC `auc`: AUC = Phi(d / sqrt(2))."""
    from statistics import NormalDist

    return math.sqrt(2.0) * NormalDist().inv_cdf(auc)


def _rng(seed: int, component: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, component]))


def success_rates(spec: SynthSpec) -> np.ndarray:
    kind, par = parse_difficulty(spec.difficulty)
    n = spec.queries
    if kind == "linear":
        return np.arange(1, n + 1) / n
    rng = _rng(spec.seed, _DIFFICULTY)
    p = rng.beta(par[0], par[1], n)
    if kind == "mixture":
        p[rng.random(n) < par[2]] = 0.0
    return p


def generate_arrays(spec: SynthSpec, sizes=None) -> dict:
    """The pool as flat arrays grouped by query (off, p, correct, score, ans, tok). `sizes` (one pool size per
    query) overrides spec.responses; `ttc theory` uses it to give hard queries larger pools."""
    n = spec.queries
    sizes = np.full(n, spec.responses, np.int64) if sizes is None else np.asarray(sizes, np.int64)
    if sizes.shape != (n,) or (sizes < 1).any():
        raise SynthError(f"sizes must hold {n} pool sizes >= 1")
    off = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    total = int(off[-1])
    qidx = np.repeat(np.arange(n), sizes)
    p = success_rates(spec)
    rng = _rng(spec.seed, _CORRECT)
    if spec.exact_counts:
        # round(p_i N_i) correct at uniformly random positions: rank random keys within each query
        keys = rng.random(total)
        order = np.lexsort((keys, qidx))
        pos = np.empty(total, np.int64)
        pos[order] = np.arange(total) - np.repeat(off[:-1], sizes)
        correct = pos < np.repeat(np.rint(p * sizes).astype(np.int64), sizes)
    else:
        correct = rng.random(total) < p[qidx]

    kind, par = parse_score_dist(spec.score_dist)
    score = None
    if kind != "none":
        flip = _rng(spec.seed, _VERDICT).random(total) < np.where(correct, spec.fn, spec.fp)
        verdict = correct ^ flip
        if kind == "binary":
            score = verdict.astype(np.float64)
        else:
            g = spec.gamma
            r = _rng(spec.seed, _SCORE)
            pos_s = g + (1.0 - g) * r.beta(par[0], par[1], total)
            neg_s = g * r.beta(par[1], par[0], total)
            score = np.where(verdict, np.clip(pos_s, g, 1.0), np.clip(neg_s, 0.0, np.nextafter(g, 0.0)))

    k = np.arange(1, spec.wrong_answers + 1)
    weights = k ** -float(spec.answer_skew)
    wrong_id = _rng(spec.seed, _ANSWER).choice(k, size=total, p=weights / weights.sum())
    inv_rate = np.where(p[qidx] > 0, spec.invalid_rate, spec.invalid_rate_unsolvable)
    invalid = ~correct & (_rng(spec.seed, _INVALID).random(total) < inv_rate)
    ans = np.where(correct, 0, np.where(invalid, -1, wrong_id)).astype(np.int64)  # 0 gold, k wrong-k, -1 invalid

    tok = None
    if spec.tokens > 0:
        mean = np.where(correct, spec.tokens, spec.tokens * spec.tokens_wrong)
        s = spec.tokens_sigma
        x = np.exp(_rng(spec.seed, _TOKENS).normal(np.log(mean) - s * s / 2, s))
        tok = np.maximum(1, np.rint(x)).astype(np.int64)

    side = None
    skind, spar = parse_side_signal(spec.side_signal)
    if skind == "solvable":
        solvable = np.add.reduceat(correct.astype(np.int64), off[:-1]) > 0
        x = _rng(spec.seed, _SIDE).normal(0.0, 1.0, total) + side_shift(spar[0]) * solvable[qidx]
        side = 1.0 / (1.0 + np.exp(-x))  # logistic: in (0, 1), and monotone, so the AUC is that of x
    return {"off": off, "sizes": sizes, "p": p, "correct": correct, "score": score, "ans": ans, "tok": tok,
            "side": side}


def query_ids(n: int) -> list[str]:
    width = max(5, len(str(n - 1)))
    return [f"q{i:0{width}d}" for i in range(n)]


def to_pool(spec: SynthSpec, arrays: dict) -> Pool:
    """The arrays as an in-memory Pool (answer ids are per-query dense ranks, as load_pool makes them)."""
    off, sizes, ans = arrays["off"], arrays["sizes"], arrays["ans"]
    n = len(sizes)
    qidx = np.repeat(np.arange(n), sizes)
    width = int(ans.max(initial=0)) + 2
    valid = ans >= 0
    key = qidx[valid] * width + _label_order(spec.wrong_answers)[ans[valid]]
    uniq, inv = np.unique(key, return_inverse=True)
    dense = np.full(len(ans), -1, np.int64)
    dense[valid] = inv - np.searchsorted(uniq, qidx[valid] * width)
    return Pool.from_arrays(off, correct=arrays["correct"], score=arrays["score"], ans=dense, tok=arrays["tok"],
                            query_ids=query_ids(n), name=pool_name(spec))


def _labels(k: int) -> np.ndarray:
    return np.array(["gold"] + [f"wrong-{j}" for j in range(1, k + 1)], dtype=object)


def _label_order(k: int) -> np.ndarray:
    """Position of each answer code's label in string order (load_pool numbers answers that way)."""
    labels = _labels(k)
    order = np.empty(len(labels), np.int64)
    order[np.argsort(labels.astype(str), kind="stable")] = np.arange(len(labels))
    return order


def pool_name(spec: SynthSpec) -> str:
    return f"synth-{spec.queries}x{spec.responses}-seed{spec.seed}"


def generate(spec: SynthSpec, sizes=None) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """(samples, queries, meta) in the pool format."""
    a = generate_arrays(spec, sizes)
    n, sizes = spec.queries, a["sizes"]
    ids = query_ids(n)
    labels = _labels(spec.wrong_answers)
    cols = {
        "query_id": pl.Series(ids, dtype=pl.String).gather(np.repeat(np.arange(n), sizes)),
        "sample_idx": np.arange(int(a["off"][-1])) - np.repeat(a["off"][:-1], sizes),
        "correct": a["correct"],
        "answer": pl.Series(a["ans"]).replace_strict({k: str(v) for k, v in enumerate(labels)}, default=None,
                                                      return_dtype=pl.String),
    }
    if a["tok"] is not None:
        cols["n_tokens"] = a["tok"]
    if a["score"] is not None:
        cols["score_rm"] = a["score"]
    if a.get("side") is not None:
        cols["score_side"] = a["side"]
    samples = samples_frame(cols)  # the pool format's column types
    queries = pl.DataFrame({"query_id": ids, "p_true": a["p"], "solvable": a["p"] > 0, "n_responses": sizes})
    return samples, queries, _meta(spec, a)


def _meta(spec: SynthSpec, a: dict) -> dict:
    correct = a["correct"]
    realised = {
        "mean_p_true": float(a["p"].mean()),
        "unsolvable_share": float((a["p"] == 0).mean()),
        "pass_at_1": float(correct.mean()),
        "invalid_share": float((a["ans"] < 0).mean()),
    }
    if a["score"] is not None:
        flagged = a["score"] >= spec.gamma
        realised["fp_rate"] = float(flagged[~correct].mean()) if (~correct).any() else None
        realised["fn_rate"] = float((~flagged[correct]).mean()) if correct.any() else None
    if a["tok"] is not None:
        realised["mean_tokens"] = float(a["tok"].mean())
    if a.get("side") is not None:
        realised["side_auc_wrong"] = _side_auc(a)
    return {
        "name": pool_name(spec),
        "generator": "ttc synth (replay/synth.py)",
        "seed": spec.seed,
        "parameters": asdict(spec),
        "model": "synthetic: no language model; every response is drawn from the parameters below",
        "derivation": {
            "p_true": "queries.parquet: the query's success probability (difficulty)",
            "correct": ("exactly round(p_true * n_responses) correct responses at random positions"
                        if spec.exact_counts else "Bernoulli(p_true), independently per response"),
            "score_rm": ("none" if a["score"] is None else
                         f"verdict = correct flipped with probability fn (if correct) or fp (if wrong); score "
                         f"{spec.score_dist} given the verdict, >= gamma={spec.gamma} exactly when the verdict is "
                         "positive (replay/synth.py)"),
            "answer": "correct -> 'gold'; wrong -> null (invalid) with invalid_rate (solvable query) or "
                      "invalid_rate_unsolvable (p_true = 0), else 'wrong-k' with probability ~ k^-answer_skew",
            **({} if a.get("side") is None else {"score_side": (
                f"{spec.side_signal}: logistic(N(d, 1)) on a query with a correct response in its pool, "
                f"logistic(N(0, 1)) on one without, d = sqrt(2) Phi^-1(AUC) = "
                f"{side_shift(parse_side_signal(spec.side_signal)[1][0]):.4f}"
                "; independent of the response's own correctness (replay/synth.py)")}),
            "n_tokens": ("none" if a["tok"] is None else
                         "max(1, round(lognormal)) with mean tokens (correct) or tokens * tokens_wrong (wrong), "
                         "log-sd tokens_sigma"),
        },
        "oracles": {"correct": "synthetic ground truth",
                    **({"score_rm": "synthetic reward model with known fp / fn at gamma"}
                       if a["score"] is not None else {})},
        "realised": realised,
    }


def _side_auc(a: dict) -> float | None:
    """The side signal's AUC over the wrong responses, solvable queries' against unsolvable ones' (the design's A,
    realised): None when one kind is missing."""
    from .signals import weighted_auc

    sizes, correct = a["sizes"], a["correct"]
    solvable = np.repeat(np.add.reduceat(correct.astype(np.int64), a["off"][:-1]) > 0, sizes)
    wrong = ~correct
    y = solvable[wrong]
    if y.all() or not y.any():
        return None
    return float(weighted_auc(a["side"][wrong], y, np.ones((1, int(wrong.sum()))))[0])


def write_synth(out, spec: SynthSpec) -> tuple[Path, dict]:
    """Write the pool and check that it loads (every score column included); refuses a non-empty --out, leaves
    nothing behind on failure (the pool format's atomic writer checks the pool before renaming it into place)."""
    from .outputs import check_new_pool
    from .pool import PoolError, load_pool, write_pool

    out = check_new_pool(Path(out))  # before generating
    samples, queries, meta = generate(spec)
    try:
        write_pool(out, samples, meta, queries, check=load_pool)  # a failing disk: OutputError, one line
    except PoolError as e:
        raise SynthError(f"could not write a valid pool to {out}: {e}") from None
    return out, meta


def summary_lines(out: Path, spec: SynthSpec, meta: dict) -> list[str]:
    """What `ttc synth` prints: the realised statistics next to the parameters they should match."""
    r = meta["realised"]
    lines = [f"wrote {out}: {spec.queries} queries x {spec.responses} responses (seed {spec.seed})",
             f"  difficulty {spec.difficulty}: mean p_true {r['mean_p_true']:.3f}, unsolvable "
             f"{r['unsolvable_share']:.1%}, pass@1 {r['pass_at_1']:.3f}",
             f"  answers: {spec.wrong_answers} wrong answers (skew {spec.answer_skew:g}), invalid "
             f"{r['invalid_share']:.1%} of all responses"]
    if "fp_rate" in r:
        fp = "n/a" if r["fp_rate"] is None else f"{r['fp_rate']:.3f}"
        fn = "n/a" if r["fn_rate"] is None else f"{r['fn_rate']:.3f}"
        lines.append(f"  score_rm ({spec.score_dist}): at gamma {spec.gamma:g} false-positive rate {fp} "
                     f"(set {spec.fp:g}), false-negative rate {fn} (set {spec.fn:g}); replay with "
                     f"--score rm --gamma {spec.gamma:g}")
    if "side_auc_wrong" in r:
        auc = "n/a (one kind of query is missing)" if r["side_auc_wrong"] is None else f"{r['side_auc_wrong']:.3f}"
        lines.append(f"  score_side ({spec.side_signal}): AUC of a wrong response's signal, solvable against "
                     f"unsolvable queries, {auc}; ttc signals shows it per k")
    if "mean_tokens" in r:
        lines.append(f"  n_tokens: mean {r['mean_tokens']:.0f} (correct ~{spec.tokens:g}, wrong "
                     f"~{spec.tokens * spec.tokens_wrong:g})")
    return lines
