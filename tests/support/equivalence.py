"""Random pools and configurations for the engine-against-reference tests, and the comparison itself: the engine
(replay/engine.py run_once) and the plain-Python reference (replay/reference.py) must give the same outcome on the same
permutations. Used by tests/test_equivalence.py and every test that checks a policy or rule against its twin."""
import dataclasses
from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

from ttc.replay.engine import run_once
from ttc.replay.kernel import READING_RULES
from ttc.replay.policies import DEPTH_FIELDS, ELIMINATION_RULES, REGISTRY, VIEW_FIELDS, RunConfig
from ttc.replay.reference import run_reference

SCORES = [0.0, 0.25, 0.5, 0.75, 0.9, 1.0]

# The strategies below are built once per shape and reused: hypothesis draws the same values from an equal strategy,
# and building (and validating) a fresh one per list, per response and per example cost more CPU than the draws and
# the engine's run together (tests/test_equivalence.py alone draws some 15,000 examples).


@lru_cache(maxsize=None)
def _ints(lo, hi):
    return st.integers(lo, hi)


@lru_cache(maxsize=None)
def _lists(elements, size, unique=False):
    """Lists of exactly size elements; elements: ("ints", lo, hi) or ("from", values)."""
    el = st.integers(*elements[1:]) if elements[0] == "ints" else st.sampled_from(list(elements[1]))
    return st.lists(el, min_size=size, max_size=size, unique=unique)


@lru_cache(maxsize=None)
def _perms(m):
    return st.permutations(range(m))


def gt_or_graded(draw, correct):
    """The score of pools(): the ground truth itself, or graded scores with ties."""
    if draw(st.booleans()):
        return correct.astype(float)
    return np.array(draw(_lists(("from", tuple(SCORES)), len(correct))))


@st.composite
def pools(draw, max_size=12, scores=gt_or_graded):
    """(off, correct, score, ans, tok, perm, rank) of a random ragged pool: up to 8 queries of 1..max_size responses,
    invalid answers, ties; scores(draw, correct) draws the score column."""
    n = draw(_ints(1, 8))
    sizes = draw(_lists(("ints", 1, max_size), n))
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    correct = np.array(draw(_lists(("ints", 0, 1), total)), np.int8)
    score = scores(draw, correct)
    ans, perm = [], []
    for i, m in enumerate(sizes):
        ans += draw(_lists(("ints", -1, min(m - 1, 3)), m))
        perm += list(off[i] + np.array(draw(_perms(m))))
    tok = np.array(draw(_lists(("ints", 0, 6), total)), np.int64)
    rank = np.array(draw(_perms(n)), np.int64)
    return off, correct, score, np.array(ans, np.int64), tok, np.array(perm, np.int64), rank


LOW_VALUES = [4.0, 3.0, 2.5, 2.0, 1.5, 1.0]  # few values: thresholds land on them and between them


@st.composite
def record_lows(draw, tok):
    """deepconf-online's record lows of a pool whose responses have tok tokens: per response up to 3 increasing
    positions below its length and strictly decreasing values (none for a response without tokens), as the lists
    (the reference's form) and as (loff, lpos, lval) (the engine's)."""
    lists, loff, lpos, lval = [], [0], [], []
    for t in tok:
        k = draw(_ints(0 if t == 0 else 1, min(3, int(t))))
        pos = sorted(draw(_lists(("ints", 0, max(0, int(t) - 1)), k, unique=True)))
        val = sorted(draw(_lists(("from", tuple(LOW_VALUES)), k, unique=True)), reverse=True)
        lists.append((pos, val))
        lpos += pos
        lval += val
        loff.append(len(lpos))
    return lists, (np.array(loff, np.int64), np.array(lpos, np.int64), np.array(lval, np.float64))


def _from(*values):
    return st.sampled_from(list(values))


# configs()'s fields: (name, strategy), in the order they are drawn
_FIELDS = [
    ("K", _ints(1, 3)), ("eliminate", None),
    ("gamma", _from(0.5, 0.75, 1.0)), ("lam", _from(None, 0.5, 2.0)),
    ("eps", _from(0.0, 0.01, 0.3)), ("max_samples", _ints(0, 6)),
    ("rho", _from(0.25, 0.5, 0.75)), ("tau", _from(0.3, 0.5, 0.7)),
    ("m_min", _ints(1, 4)), ("share", _from(0.5, 0.6, 0.8, 1.0)),
    ("hmax", _from(0.0, 0.5, 0.75, 0.9)), ("warmup", _ints(1, 4)),
    ("percentile", _from(0.01, 0.05, 0.3, 0.7)), ("prior_strength", _from(0.5, 2.0, 8.0)),
    ("judge", _ints(2, 5)), ("bins", _ints(1, 5)), ("refresh", _ints(1, 4)),
    ("dirichlet_conf", _from(0.6, 0.8, 0.95)), ("horizon", _ints(0, 1)),
    ("bf", _from(2.0, 5.0, 10.0, 100.0)), ("bf_mc", _from(0, 50)),
    ("mmc_delta", _from(0.05, 0.2, 0.5)), ("mmc_m", _ints(1, 3)),
    ("mmc_labels", None),
    ("mmc_min_updates", _ints(1, 2)), ("mmc_leader_check", _from("on", "off")),
    # lb_thre: not 0.6, where the reference's exact 3/5 and the engine's float posterior could fall either side
    ("lb_thre", _from(0.62, 0.83, 0.953)), ("lb_l", _ints(2, 4)),
    ("uab_tau", _from(0.2, 1.0)), ("pets_options", _from(2, 3, 16)),
    ("pets_train", _ints(1, 4)), ("pets_curve_mc", _from(0, 0, 7, 50))]


# (the two fields left None above depend on live: run_live refuses the rules that need hindsight and the labels of
# the whole pool)
@lru_cache(maxsize=None)
def _rules(live, reading):
    """The elimination rules configs() draws from: every rule of the registry, less those that need hindsight when
    live, less the ones that read the drawn responses (kernel.READING_RULES) without reading."""
    return st.sampled_from([name for name, rule in ELIMINATION_RULES.items()
                            if (rule.live or not live) and (reading or rule.code not in READING_RULES)])


_LABELS = {live: st.sampled_from(["drawn"] if live else ["drawn", "pool"]) for live in (False, True)}


# deepconf-online takes no elimination rule (not among its params; run_one returns from its branch before reading
# cfg.elim): configs() draws it none of the rules that read the drawn responses, which would only make run_once
# compile its kernel once more with their code and the record lows (a full kernel: ~80 s of CPU cold) for no other
# test or command, to the same outcome. Its grids with such a rule (the kernels `ttc replay` runs) are drawn by
# test_equivalence's grid tests, which pick the rule per configuration themselves.
NO_RULE = ("deepconf-online",)
assert not any("eliminate" in REGISTRY[p].params for p in NO_RULE)


@st.composite
def configs(draw, total, tokens_total, policy, unit, live=False, reading=None):
    """A random configuration of policy and a budget; live=True draws only the rules that need no hindsight (run_live
    refuses the others), reading=False none of the rules that read the drawn responses (None: none for NO_RULE's
    policies, see above)."""
    reading = policy not in NO_RULE if reading is None else reading
    own = {"eliminate": _rules(live, reading), "mmc_labels": _LABELS[live]}
    cfg = RunConfig(policy, unit=unit, **{name: draw(s if s is not None else own[name]) for name, s in _FIELDS})
    hi = total + 3 if unit == "samples" else tokens_total + 5
    return cfg, draw(_ints(0, hi))


def config_kwargs(cfg):
    """A RunConfig as the keywords run_reference and run_live take (they are independent of RunConfig): every field
    but the depth ones (read by replay/reference_depth.py on the pool's depth view), eliminate under its reference
    name elim."""
    skip = DEPTH_FIELDS + VIEW_FIELDS
    kw = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(RunConfig) if f.name not in skip}
    kw["elim"] = kw.pop("eliminate")
    return kw


def _compare(data, cfg, budget, conf=0.95, prior=None, side=None, lows=None):
    off, correct, score, ans, tok, perm, rank = data
    ref = run_reference(off, correct, score, ans, tok, perm, rank, budget_total=budget, conf=conf, prior=prior,
                        side=side, lows=None if lows is None else lows[0], **config_kwargs(cfg))
    got = run_once(off, correct, score, ans, tok, perm, rank, cfg, budget, conf=conf, prior=prior, side=side,
                   lows=None if lows is None else lows[1])
    for key in ("n_drawn", "answered", "covered", "exhausted_q", "sel_bon", "sel_weighted", "sel_sc"):
        assert list(np.asarray(got[key]).astype(int)) == [int(v) for v in ref[key]], (key, cfg, budget)
    for key in ("samples_used", "tokens_used", "exhausted"):
        assert got[key] == ref[key], (key, cfg, budget)
    # Budgets are never exceeded.
    spent = got["samples_used"] if cfg.unit == "samples" else got["tokens_used"]
    assert spent <= budget
    return got

