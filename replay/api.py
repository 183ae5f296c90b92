"""The Python API behind `ttc.load_pool`, `ttc.replay`, `ttc.summarize`, `ttc.tune` and `ttc.compare`
(docs/api.md walks through it). The same requests and code paths as the command line, returning polars
DataFrames and printing nothing unless asked (`progress=True` shows a bar on stderr).

Parameters are the RunConfig fields under their own names (`K`, `lam`, `gamma`, `warmup`, ...): a list sweeps the
policies that read it, as the command line's comma lists do, for the fields a replay sweeps (GRID_FIELDS); every
other field is one value. A mistake is a `ttc.UserError` (an InputError or PoolError) whose message is the line the
command line would print."""
from __future__ import annotations

import io
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Sequence

import polars as pl
from rich.console import Console

from .errors import InputError
from .pool import Pool
from .pool import load_pool as _load_pool


def resolve(pool: Any) -> Path:
    """A pool given as a path, or as the name of an embedded pool (`"math500-llama3.1-8b-48"`); None: the default; a
    Pool: the directory it was read from (tune and compare read their pools themselves, with their own options)."""
    from .data import DEFAULT_POOL, embedded_pool

    if pool is None:
        return DEFAULT_POOL
    if isinstance(pool, Pool):
        return pool.path
    path = Path(pool)
    if not path.exists() and len(path.parts) == 1 and embedded_pool(path.name).is_dir():
        return embedded_pool(path.name)
    return path


def load_pool(pool: Any = None, *, score: str = "gt", tokens: bool = False, prior: str | None = None,
              side: str | None = None, lows: bool | None = False, invalid_votes: bool = False) -> Pool:
    """Read and validate a pool: a directory, an embedded pool's name, or None for the default (last letters).

    score: the column the policies read (`gt`: correctness, or a `score_<oracle>` column, or its oracle's name);
    tokens: read `n_tokens` (token budgets); prior / side: marginal-gain's and side-eb's columns; lows:
    deepconf-online's record lows (None: when the pool has them); invalid_votes: each query's invalid answers as one
    more answer category. Only the columns asked for are held in memory."""
    return _load_pool(resolve(pool), score=score, need_tokens=tokens, prior=prior, side=side, lows=lows,
                      invalid_votes=invalid_votes)


def _request(pool, policies, budgets, seeds, params: dict):
    from .policies import RunConfig
    from .run import GRID_FIELDS, ReplayRequest

    req_fields = {f.name for f in fields(ReplayRequest)}
    config_fields = {f.name for f in fields(RunConfig)[1:]}
    kw: dict[str, Any] = {}
    for name, value in params.items():
        if name in GRID_FIELDS:
            values = list(value) if isinstance(value, (list, tuple, range)) else [value]
            kw[name] = [_typed(name, v) for v in values]
        elif name in req_fields and name not in _NOT_PARAMS:
            if isinstance(value, (list, tuple)) and name in config_fields:
                raise InputError(f"{name} takes one value (the lists a replay sweeps: {', '.join(GRID_FIELDS)})")
            kw[name] = _typed(name, value)
        else:
            raise InputError(f"unknown parameter {name!r}; a replay takes the RunConfig fields "
                             f"({', '.join(sorted(config_fields))}) and {', '.join(sorted(_OPTIONS))}")
    if isinstance(policies, str):
        policies = [policies]
    if isinstance(seeds, Iterable) and not isinstance(seeds, str):  # a range of seeds rather than a count
        seeds = list(seeds)
        if not seeds or seeds != list(range(seeds[0], seeds[0] + len(seeds))):
            raise InputError("seeds: a count, or a range of consecutive seeds")
        kw["seed_start"], seeds = seeds[0], len(seeds)
    return ReplayRequest(pool=None if isinstance(pool, Pool) else resolve(pool), policies=list(policies or []),
                         budgets=[float(b) for b in budgets], seeds=int(seeds), **kw)


def _typed(name: str, value: Any) -> Any:
    """A value as its RunConfig field's type, as the command line's parsers give it: `lam=2` is the float 2.0, so
    that labels, result columns and records are the command line's (ucb(lambda=2), a Float64 column)."""
    from typing import get_type_hints

    from .policies import RunConfig

    hint = str(get_type_hints(RunConfig).get(name, ""))
    try:
        if value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            if "float" in hint:
                return float(value)
            if hint == "<class 'int'>" and float(value).is_integer():
                return int(value)
    except (OverflowError, ValueError):  # inf / nan as an int: RunConfig refuses the value itself
        pass
    return value


# ReplayRequest fields that are this function's own arguments, the command line's outputs, or the swept lists
_NOT_PARAMS = frozenset(("pool", "policies", "budgets", "seeds", "out", "per_query", "curve", "force"))
# Options of a replay that are not RunConfig fields (the ReplayRequest's own), for the error message above.
_OPTIONS = ("seed_start", "score", "select", "cisc_temp", "deepconf_eta", "prior", "side", "conf", "threads",
            "invalid_votes")


def replay(pool: Any = None, policies: Sequence[str] | str | None = None,
           budgets: Sequence[float] = (4, 8, 16, 32), seeds: int | range = 100, *, per_query: bool = False,
           progress: bool = False, **params) -> pl.DataFrame | tuple[pl.DataFrame, pl.DataFrame]:
    """Replay policies over a pool at every budget and seed: one row per (configuration, budget, seed).

    pool: a Pool (ttc.load_pool), a directory, an embedded pool's name, or None for the default. policies: names
    from ttc.POLICIES (None: every one the pool supports). budgets: average per-query budgets, in `unit`. seeds: a
    count (from seed_start, default 0) or a range. params: RunConfig fields (`K=[1, 4]` sweeps) and the replay's
    options (`select`, `eliminate`, `unit`, `score`, `conf`, ...). With per_query, also one row per query of
    each run: (runs, per_query)."""
    from .engine import replay as run_grid
    from .progress import progress as bar

    req = _request(pool, policies, budgets, seeds, params)
    from .run import prepare

    pool_obj, configs, seed_range = prepare(req, pool if isinstance(pool, Pool) else None)
    if per_query:
        from .run import check_per_query_memory

        check_per_query_memory(len(configs) * len(req.budgets), req.seeds, pool_obj.n_queries, "per_query")
    console = Console(stderr=True) if progress else Console(file=io.StringIO())
    with bar(len(configs) * len(req.budgets) * req.seeds, "replaying", "runs", console=console,
             enabled=progress) as b:
        df, pq = run_grid(pool_obj, configs, req.budgets, seed_range, select=req.select, conf=req.conf,
                          cisc_temp=req.cisc_temp, deepconf_eta=req.deepconf_eta, per_query=per_query,
                          progress=b.advance)
    return (df, pq) if per_query else df


def summarize(runs: pl.DataFrame, pool: Any = None, select: str = "bon") -> pl.DataFrame:
    """Mean and standard error over seeds per (configuration, budget), against uniform's exact curves, with the
    efficiency gains `ttc replay` prints. pool: the one the runs came from (a Pool, a path or a name)."""
    from .exact import best_of_k, coverage_at_k
    from .summary import summarize as _summarize

    p = pool if isinstance(pool, Pool) else load_pool(pool)
    curves = (coverage_at_k(p) if p.has_gt else None, best_of_k(p) if p.has_gt and select == "bon" else None)
    return _summarize(runs, p, select, curves)


def tune(pool: Any = None, policy: str | None = None, *, method: str | None = None, grid: dict | None = None,
         budgets: Sequence[float] = (4, 8, 16, 32), seeds: int = 100, progress: bool = False, **options
         ) -> pl.DataFrame:
    """`ttc tune` as a function: choose a policy's parameters on a seeded share of the queries and report them on
    the others. grid: RunConfig field -> the values to try (e.g. {"lam": [1, 2, 3]}). options: TuneRequest's
    (holdout, split_seed, select, metric, eliminate, unit, score, ...). Returns the tuned rows."""
    from .tune import TuneRequest, run_tune

    unknown = sorted(set(options) - {f.name for f in fields(TuneRequest)} - {"pool", "policy"})
    if unknown:
        raise InputError(f"unknown tune option {unknown[0]!r}")
    req = TuneRequest(pool=resolve(pool), policy=policy, method=method, grid=dict(grid or {}),
                      budgets=[float(b) for b in budgets], seeds=seeds, **options)
    return run_tune(req, console=_quiet(progress))


def compare(pools: Sequence[Any] | None = None, *, budgets: Sequence[float] = (4, 8, 16, 32), seeds: int = 100,
            progress: bool = False, **options) -> pl.DataFrame:
    """`ttc compare` as a function: every published policy tuned on held-out queries against the new ones and the
    oracle, per pool. pools: paths or embedded names (None: every embedded pool). options: CompareRequest's."""
    from .compare import CompareRequest, run_compare

    unknown = sorted(set(options) - {f.name for f in fields(CompareRequest)})
    if unknown:
        raise InputError(f"unknown compare option {unknown[0]!r}")
    req = CompareRequest(pools=[resolve(p) for p in (pools or [])], budgets=[float(b) for b in budgets],
                         seeds=seeds, **options)
    return run_compare(req, console=_quiet(progress))


def _quiet(progress: bool) -> Console:
    """The commands print to a console: a notebook gets the DataFrame instead, and with progress=True the command's
    own lines (progress, its table) on stderr."""
    return Console(stderr=True) if progress else Console(file=io.StringIO())

