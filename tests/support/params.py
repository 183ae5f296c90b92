"""Values generated from each RunConfig parameter's declaration (replay/policies.py param(): `within` or
`choices`), so that a test covering every parameter needs no edit when one is added: a value just outside each end
of its range (which every layer must refuse) and a valid value other than its default (which must reach the run)."""
from __future__ import annotations

import math

from ttc.replay.policies import PARAMS_BY_NAME, param_type


def outside(name: str, integral_only: bool = False) -> list:
    """Values just outside `name`'s allowed values: each finite end's nearest neighbour outside (an int's end -/+ 1,
    a float's next representable number, or the end itself where it is open), NaN and infinity for a float, a value
    beside a few-valued int's choices and an unknown string for a string's. `integral_only`: leave out a
    non-integer value for an int (a command line refuses it in its parser, before the range is read)."""
    m, kind = PARAMS_BY_NAME[name].metadata, param_type(name)
    if m["choices"]:
        if kind is str:
            return ["no-such-" + name]
        return [min(m["choices"]) - 1, max(m["choices"]) + 1]
    r, bad = m["range"], []
    if kind is int:
        bad += [r.lo - 1, r.hi + 1] + ([] if integral_only else [r.lo + 0.5])
    else:
        if math.isfinite(r.lo):
            bad.append(r.lo if r.lo_open else math.nextafter(r.lo, -math.inf))
        if math.isfinite(r.hi):
            bad.append(r.hi if r.hi_open else math.nextafter(r.hi, math.inf))
        bad += [math.nan] + ([math.inf] if r.hi == math.inf and r.hi_open else [])
    return bad


def inside(name: str) -> list:
    """Values at or next to each end inside `name`'s range (or each of its choices): every one must be taken."""
    m, kind = PARAMS_BY_NAME[name].metadata, param_type(name)
    if m["choices"]:
        return list(m["choices"])
    r = m["range"]
    if kind is int:
        return [r.lo, r.hi]
    lo = math.nextafter(r.lo, math.inf) if r.lo_open else r.lo
    hi = (1e300 if r.hi == math.inf else math.nextafter(r.hi, -math.inf)) if r.hi_open else r.hi
    return [lo, hi]


def example(name: str):
    """A valid value of `name` other than its default (None: the policy's own, for lam), from its declaration."""
    f = PARAMS_BY_NAME[name]
    m, kind, default = f.metadata, param_type(name), f.default
    if m["choices"]:
        return next(c for c in m["choices"] if c != default)
    r = m["range"]
    if default is None:  # any value inside differs from None
        return r.lo + 1 if kind is int else (r.lo + min(r.hi, r.lo + 2)) / 2
    if kind is int:
        return next(v for v in (default + 1, default - 1) if r.holds(v))
    hi = r.hi if math.isfinite(r.hi) else default + 2
    return next(v for v in ((default + hi) / 2, (r.lo + default) / 2) if v != default and r.holds(v))
