"""The replay grid: every (policy configuration, budget) x seed run over one pool, in parallel over seeds.

The public wrapper `replay` validates and allocates; the kernel `_grid` computes. Permutations and query
orders are regenerated inside the kernel from (seed, query key), so every configuration and budget sees the
same permutation of a seed (common random numbers), and results do not depend on the thread count.
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numba
import numpy as np
import polars as pl

from . import kernel
from .kernel import (
    CAPPED,
    CONFIG,
    COVERED,
    DEEPCONF_ONLINE,
    ELIM,
    EXH,
    EXHAUSTED,
    F_ANSWERED,
    F_CAPPED,
    F_COVERED,
    F_EXHAUSTED,
    F_SEL,
    PREFETCH_FROM,
    READING_POLICIES,
    READING_RULES,
    RESP,
    SAMPLES,
    SCHED,
    TOKENS,
    N,
    PoolArrays,
    Sched,
    Scratch,
    _cmc_grid,
    _depth_grid,
    _grid,
    answer_offsets,
    cisc_weights,
    confidence_votes,
    depth_view,
    new_state,
    run_one_any,
    selections,
)
from .policies import (
    CISC_TEMP,
    DEEPCONF_ETA,
    DEPTH_POLICIES,
    DEPTH_RULES,
    PROBE_COSTS,
    REGISTRY,
    SELECTION_RULES,
    RunConfig,
    check_selection_params,
)
from .pool import Pool, PoolError
from .tables import make_tables

SELECT = {name: r.code for name, r in SELECTION_RULES.items()}
_threads: int | None = None
TICK_S = 0.5  # run_grid's progress: how often it reads the kernel's run counters


def set_threads(n: int | None):
    """Worker threads of the grid (None: every core numba sees). Results do not depend on it."""
    global _threads
    if n is not None and not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise PoolError(f"--threads must be in 1..{numba.config.NUMBA_NUM_THREADS}, got {n}")
    _threads = n


def get_threads() -> int:
    return _threads or numba.config.NUMBA_NUM_THREADS


def frozen(a, dtype) -> np.ndarray:
    """A C-contiguous read-only array of dtype (a view when a already is one). Every array a kernel only reads
    goes through here: numba compiles one specialisation per (dtype, layout, writability) pattern, and arrays from
    polars are read-only for some columns and writable for others, so without it a second pool compiled the
    engine again."""
    a = np.ascontiguousarray(a, dtype)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def pool_arrays(off, correct, score, ans, tok, tables, have=None, prior=None, side=None, aoff=None,
                resp=None) -> PoolArrays:
    """What a run reads, in the one form every kernel is compiled for. have: responses that exist per query
    (default: the whole pool); prior: a per-query predicted success probability (marginal-gain's --prior; default
    none, NaN: an array all the same, so that the kernels keep one signature); side: a per-response side signal in
    [0, 1] (side-eb's --side; default none, an empty array that side-eb reads as 0.5 everywhere, no information: a
    full array of 0.5 cost a pass over the pool per call); aoff: the answer slots' layout
    (default: answer_offsets, as many as the pool's answers need; a live run gives room for more); resp: the
    responses packed in records (kernel.RESP; default: pack_responses of these arrays on a pool of at least
    PREFETCH_FROM responses, else none, an empty array: below, the four arrays fit a core's L2 and a record saves
    nothing; none with have given, a live run's arrays fill after this call). Arrays already in that form are taken
    as read-only views, not copies: a live run's later responses show through."""
    off = frozen(off, np.int64)
    ans = frozen(ans, np.int64)
    T, L, min_a = tables
    n = len(off) - 1
    aoff = frozen(answer_offsets(off, ans) if aoff is None else aoff, np.int64)  # (once: pool_modes reads it too)
    return PoolArrays(off, aoff, frozen(correct, np.int8),
                      frozen(score, np.float64), ans, frozen(tok, np.int64),
                      frozen(np.diff(off) if have is None else have, np.int64), frozen(T, np.float64),
                      frozen(L, np.float64), frozen(min_a, np.int64),
                      frozen(np.full(n, np.nan) if prior is None else prior, np.float64),
                      frozen(np.zeros(0) if side is None else side, np.float64),
                      frozen(pool_modes(off, aoff, ans), np.int8),
                      frozen(resp if resp is not None else pack_responses(correct, score, ans, tok)
                             if have is None and off[n] >= PREFETCH_FROM else np.zeros(0, RESP), RESP),
                      np.zeros((0, 0)))  # (lbm: no memo; run_grid gives one to a grid that runs lbayes)


def pack_responses(correct, score, ans, tok) -> np.ndarray:
    """The responses as kernel.RESP records, which the draws read instead of the four arrays (one cache line a draw
    instead of four: docs/performance.md, "Growth with the pool"), or an empty array when a value does not fit a
    record (tokens outside [0, 2^30), an answer id at or past 2^31, a correctness other than 0 / 1): the draws then
    read the arrays, with the same outcomes."""
    correct, ans, tok = np.asarray(correct), np.asarray(ans), np.asarray(tok)
    if not records_fit(correct, ans, tok):
        return np.zeros(0, RESP)
    out = np.empty(len(tok), RESP)
    out["score"] = score
    out["tc"] = (tok << 1) | correct
    out["ans"] = ans
    return out


def records_fit(correct, ans, tok) -> bool:
    """Whether every response's values fit a kernel.RESP record (pack_responses): tokens in [0, 2^30), answer ids
    in [-1, 2^31), correctness 0 / 1 (an empty pool: none to pack)."""
    correct, ans, tok = np.asarray(correct), np.asarray(ans), np.asarray(tok)
    return len(tok) > 0 and bool(tok.min() >= 0 and tok.max() < 1 << 30 and ans.max() < 1 << 31 and ans.min() >= -1
                                 and correct.min() >= 0 and correct.max() <= 1)


def packed_arg(P: PoolArrays) -> tuple:
    """run_one's `packed` for a grid on these arrays: (their records,) where pool_arrays made them (P.resp), else ().
    Which draws a kernel reads is thereby its compile-time type, as its policy is (`only`): a small pool's kernel
    compiles the arrays' draws alone, a big pool's the records' alone (its own specialisation, cached like the
    others; docs/performance.md, "Start-up")."""
    return (P.resp,) if P.resp.shape[0] > 0 else ()


_PACKED = numba.typeof((frozen(np.zeros(0, RESP), RESP),)), numba.typeof(())  # (packed_arg's two types)


def packed_type(pool: Pool):
    """The type of packed_arg(grid_arrays(pool, ...)) without building the arrays: the records' on a pool of at
    least PREFETCH_FROM responses whose values fit them, else ()'s (a part of _grid's specialisation's key)."""
    big = int(pool.off[-1]) >= PREFETCH_FROM
    return _PACKED[0] if big and records_fit(pool.correct, pool.ans, pool.tok) else _PACKED[1]


def grid_arrays(pool: Pool, tables) -> PoolArrays:
    """pool_arrays of a pool as run_grid reads it, kept on the pool from call to call: building it is a pass over the
    pool (answer slots, pool modes) and a dozen array conversions, ~0.1 ms of CPU a call at 200 x 64, as much as
    3,000 of mmc's decisions (docs/performance.md, "The grid call's fixed cost"). Kept while every array it is
    built from is the same object (held here, so an id is never reused) and the tables are those or equal ones: a
    pool given a new array (a field assigned, dataclasses.replace, with_invalid_votes, a depth view) builds anew.
    The pools' arrays are never written in place (load_pool, from_arrays, the importers and synth build new ones;
    the query keys and depth views cached on a pool rely on it too)."""
    key = (pool.off, pool.correct, pool.score, pool.ans, pool.tok, pool.prior, pool.side)
    got = pool.__dict__.get("_grid_arrays")
    if got is not None and all(a is b for a, b in zip(got[0], key, strict=True)) and all(
            a is b or (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b))
            for a, b in zip(got[1], tables, strict=True)):
        return got[2]
    P = pool_arrays(pool.off, pool.correct, pool.score, pool.ans, pool.tok, tables, prior=pool.prior, side=pool.side)
    pool.__dict__["_grid_arrays"] = (key, tuple(tables), P)
    return P


def grid_maxtok(pool: Pool) -> int:
    """The pool's longest response in tokens (0 for none), kept on the pool while its tok is the same object (a pass
    over the pool: as grid_arrays)."""
    got = pool.__dict__.get("_grid_maxtok")
    if got is None or got[0] is not pool.tok:
        got = pool.__dict__["_grid_maxtok"] = (pool.tok, max(0, int(np.max(pool.tok, initial=0))))
    return got[1]


def pool_modes(off, aoff, ans) -> np.ndarray:
    """Per answer slot (answer_offsets' layout): 1 when its answer is a most frequent valid answer of its query's
    whole pool, else 0 (the invalid answers' slots, a query without valid answers). The `consistency` column counts
    a query whose drawn majority (sc's) is one: PETS's self-consistency rate, agreement with the infinite-budget
    majority, a pool tie counting either answer (docs/semantics.md)."""
    return kernel.pool_modes(frozen(off, np.int64), frozen(aoff, np.int64), frozen(ans, np.int64))


def config_records(configs: list[RunConfig]) -> np.ndarray:
    """The configurations' CONFIG records, a new array. Each configuration's is made once and kept on it, as bytes (a
    RunConfig is frozen, and its record is a function of its fields): record() fills its fields by name, ~25 us a
    configuration and call, and numpy copies a record array field by field, ~30 us more; joined as bytes, ~5 us."""
    if not configs:
        return np.zeros(0, CONFIG)
    return np.concatenate([_record_bytes(c) for c in configs]).view(CONFIG)


def _record_bytes(c: RunConfig) -> np.ndarray:
    got = c.__dict__.get("_record")
    if got is None:
        got = c.__dict__["_record"] = c.record().view(np.uint8)
    return got


# A result row's configuration: every RunConfig field after the policy (which leads the row), one column each.
CONFIG_COLUMNS = tuple(f.name for f in dataclasses.fields(RunConfig))[1:]


def config_value(c: RunConfig, name: str):
    """Field `name` of c as its result column holds it: the elimination rule only where the policy reads one (else
    "none"), lambda as the value the run used (the policy's default when unset)."""
    if name == "eliminate":
        return c.eliminate if "eliminate" in c.used_params() else "none"
    return c.lam_value if name == "lam" else getattr(c, name)


def vote_weights(score, votes) -> tuple[tuple, float]:
    """The confidence votes' inputs to the kernels: (cisc's per-response weights,) and deepconf's eta, from votes =
    (cisc_temp, deepconf_eta); no weights, (), when votes is None: _grid then compiles none of the votes' code (its
    `cw`)."""
    if votes is None:
        return (), 100.0
    cw = np.empty(len(score))
    cisc_weights(frozen(score, np.float64), float(votes[0]), cw)
    return (frozen(cw, np.float64),), float(votes[1])


_NO_WEIGHTS = (frozen(np.zeros(0), np.float64),)  # _grid's cw with the votes' code compiled and skipped


def replay_votes(pool: Pool, select: str, cisc_temp: float = CISC_TEMP, deepconf_eta: float = DEEPCONF_ETA):
    """replay's votes: (cisc_temp, deepconf_eta) or None. The confidence votes need answers to vote on and ground
    truth to score; without, their columns are NaN. Under --score gt they would weigh responses by their correctness
    (an oracle, as bon there is) at about two thirds of the grid's time again, so they run then only when asked for
    by --select."""
    return (cisc_temp, deepconf_eta) if pool.has_answers and pool.has_gt and (
        pool.score_name != "gt" or select in ("cisc", "deepconf")) else None


def reading_flag(records):
    """run_one's `reading` argument for these configurations (CONFIG records): True when one uses a rule that
    reads the drawn responses (kernel.READING_RULES) or a policy that does (kernel.READING_POLICIES), else None, which
    compiles a kernel without that code (its own cached specialisation, ~4 s less to compile on a first run)."""
    return True if (not _READING_RULES.isdisjoint(records["elim"].tolist())
                    or not _READING_POLICIES.isdisjoint(records["policy"].tolist())) else None


_READING_RULES, _READING_POLICIES = frozenset(READING_RULES), frozenset(READING_POLICIES)  # (np.isin: ~30 us a call)


def lows_arg(lows, records):
    """run_one's `dc` argument for these configurations (CONFIG records): the pool's record lows (loff, lpos, lval) as
    the kernel reads them, (lstart, lend, lpos, lval) read-only, when one is deepconf-online, else None, which
    compiles a kernel without its code (as reading_flag does for the reading rules). A deepconf-online configuration
    on a pool without them is an error (check_configs says so first)."""
    if not (records["policy"] == DEEPCONF_ONLINE).any():
        return None
    if lows is None:
        raise PoolError("deepconf-online needs the pool's record lows (load_pool(..., lows=True)), and none were "
                        "loaded")
    loff, lpos, lval = lows
    loff = frozen(loff, np.int64)
    return loff[:-1], loff[1:], frozen(lpos, np.int64), frozen(lval, np.float64)


def only_arg(configs: list[RunConfig]) -> tuple:
    """_grid's `only` for a replay of these configurations: (None,) * (1 + k) when every one is policy k, which
    compiles a kernel with policy k's code alone (kernel.run_one's `code`: a first `ttc replay --policy elimination`
    compiles in well under half the time of the kernel every policy runs in, docs/performance.md, "Start-up"),
    else (), that kernel. A token-matched configuration of another policy runs uniform too (its spend), so the
    replay then has two policies."""
    codes = {REGISTRY[c.policy].code for c in configs}
    if any(c.unit == "token-matched" and c.policy != "uniform" for c in configs):
        codes.add(REGISTRY["uniform"].code)
    return (None,) * (1 + codes.pop()) if len(codes) == 1 else ()


COMPILE_NOTE = "compiling the engine once (about 20 s; later runs load it from numba's cache)"


def grid_kernels(cached: bool = True) -> set | None:
    """_grid's specialisations compiled or loaded in this process and, with cached, those in numba's cache index (a
    first run, or kernel.py edited: none), each as the types of its (only, cw, packed, reading, dc) arguments; None
    when numba's cache cannot be read."""
    try:
        sigs = list(_grid.signatures)
        cache = getattr(_grid, "_cache", None)
        if cached and cache is not None and hasattr(cache, "_cache_file"):
            sigs += [key[0] for key in cache._cache_file._load_index()]
        return {(sig[4], sig[6], sig[-4], sig[-3], sig[-2]) for sig in sigs}
    except Exception:  # numba's private cache layout changed
        return None


def arg_types(pool: Pool, configs: list[RunConfig]) -> tuple:
    """The types of _grid's (packed, reading, dc) arguments for these configurations on this pool (a part of its
    specialisation's key)."""
    records = config_records(configs)
    dc = lows_arg(pool.lows, records) if (records["policy"] == DEEPCONF_ONLINE).any() and pool.lows else None
    return packed_type(pool), numba.typeof(reading_flag(records)), numba.typeof(dc)


def grid_key(only: tuple, weights: bool, rest: tuple) -> tuple:
    """_grid's specialisation (grid_kernels' key) for this `only`, the votes' weights or none and rest = arg_types'
    (weights_arg's forms: the kernel every policy runs in always has the weights' type)."""
    return (numba.typeof(only), numba.typeof(_NO_WEIGHTS if weights or not only else ())) + rest


def weights_arg(cw: tuple, only: tuple, rest: tuple) -> tuple:
    """_grid's cw for a grid without the votes (cw = ()). The kernel every policy runs in always has the votes' code
    (an empty array skips them): one kernel for every pool, with or without them, as a leaderboard or report mixes
    them. A one-policy kernel (only) gets (), which compiles none of their code (a first `ttc replay --policy P`
    compiles less), unless this process has run that kernel with the weights for these rest = (packed, reading, dc)
    and not without: then that one, skipping them (the same outcomes at no compile; as kernel_only, this process's
    calls only)."""
    if cw:
        return cw
    if not only:
        return _NO_WEIGHTS
    have = grid_kernels(cached=False)
    rest = tuple(numba.typeof(a) for a in rest)
    if have is None or grid_key(only, False, rest) in have:
        return cw
    return _NO_WEIGHTS if grid_key(only, True, rest) in have else cw


def kernel_only(configs: list[RunConfig], pool: Pool, votes=None) -> tuple:
    """_grid's `only` for a replay of these configurations: only_arg's kernel of their one policy, unless this
    process has not run that one yet and has run the kernel every policy runs in: then that one, the same outcomes
    at no compile or load (a leaderboard or report mixes grids of many policies and of one, and a kernel per
    one-policy grid beside the mixed grids' would cost each a compile). numba's cache is not consulted, so that the
    choice depends on the process's own calls only. votes: replay's (a one-policy kernel's weights follow them:
    weights_arg)."""
    one = only_arg(configs)
    if not one:
        return ()
    have = grid_kernels(cached=False)
    if have is None:
        return one
    rest = arg_types(pool, configs)
    weights = votes is not None
    return () if grid_key(one, weights, rest) not in have and grid_key((), weights, rest) in have else one


def kernel_missing(have: set, pool: Pool, configs: list[RunConfig], only: tuple = (), weights: bool = False) -> bool:
    """Whether `have` (grid_kernels()) lacks _grid's specialisation for these configurations on this pool: its
    kernel (`only`, () for the one every policy runs in), the votes' weights or none, and arg_types' packed, reading
    and dc. compile_expected asks it of replay's kernel, `ttc bench` of the ones it times (bench.py)."""
    return grid_key(only, weights, arg_types(pool, configs)) not in have


def compile_expected(pool: Pool, configs: list[RunConfig], select: str = "bon") -> bool:
    """Whether the grid's first call will compile its kernel: no specialisation for these configurations' kernel
    (kernel_only), packed, reading and dc arguments in this process or in numba's cache index (a first run, or
    kernel.py edited). A progress bar then says so rather than sitting at 0 for 20 s (issue 28). False when numba's
    cache cannot be read: only the note is lost."""
    try:
        have = grid_kernels()
        votes = replay_votes(pool, select)
        return have is not None and kernel_missing(have, pool, configs, kernel_only(configs, pool, votes),
                                                   votes is not None)
    except Exception:  # numba's private cache layout changed: no note
        return False


def grid_outputs(C: int, S: int, n: int, per_query: bool) -> tuple:
    """The raw outputs of C configurations x S seeds that the grids fill (zeroed): out_f (coverage, accuracy and
    each selection's, the self-consistency rate), out_i (samples, tokens, exhausted, answered) and, with per_query,
    each query's draws and flags (else empty arrays): run_grid's, run_rows' and run_probe_grid's alike."""
    shape = (C, S, n) if per_query else (0, 0, 0)
    return (np.zeros((C, S, 3 + len(F_SEL))), np.zeros((C, S, 4), np.int64), np.zeros(shape, np.int32),
            np.zeros(shape, np.uint16))


# Identity permutations of the last pool size, free for a grid's threads: each thread's lazy Fisher-Yates leaves its
# permutation the identity again after each seed, so a finished call hands it back for the next instead of making one
# anew, a pass over the pool per call with its page faults (7-15 ms at 50,000 x 64, as much as two seeds of uniform's
# decisions there: docs/performance.md, "Growth with the pool"). Taken and given back under a lock, so calls from
# several threads never share one.
_free_perms: list = []
_perms_lock = threading.Lock()


def take_identities(total: int, k: int) -> list:
    with _perms_lock:
        if _free_perms and len(_free_perms[0]) != total:
            _free_perms.clear()
        got = [_free_perms.pop() for _ in range(min(k, len(_free_perms)))]
    return got + [np.arange(total, dtype=np.int64) for _ in range(k - len(got))]


def give_back_identities(perms: list):
    """After a call that finished (every seed restored its steps): they are the identity again."""
    with _perms_lock:
        if not _free_perms or len(_free_perms[0]) == len(perms[0]):
            _free_perms.extend(perms[:max(0, numba.config.NUMBA_NUM_THREADS - len(_free_perms))])


def run_grid(pool: Pool, configs: list[RunConfig], budget_totals: np.ndarray, seeds, tables,
             per_query: bool = False, votes: tuple | None = None, tick=None, only: tuple = ()):
    """Run configs[c] at total budget budget_totals[c, s] on each seed; raw arrays out. votes = (cisc_temp,
    deepconf_eta) computes the cisc and deepconf selections too (a pass over each run's draws after it; None:
    skipped, their columns 0): replay asks for them where they mean something (answers and ground truth).
    tick(k): called from this thread with the runs (configuration x seed) made since the last call, at most every
    TICK_S while the kernel runs and once at the end, so progress moves per run, not per call. only: _grid's (default
    (), the kernel every policy runs in; only_arg gives the one of a one-policy replay, whose first call compiles
    less: the same outcomes either way, tests/test_equivalence.py)."""
    C, S, n = len(configs), len(seeds), pool.n_queries
    if only and any(REGISTRY[c.policy].code != len(only) - 1 for c in configs):  # (a kernel without their code)
        raise ValueError(f"run_grid: only={len(only) - 1} for configurations {[c.policy for c in configs]}")
    out_f, out_i, pq_n, pq_flags = grid_outputs(C, S, n, per_query)
    if C and S:
        P = grid_arrays(pool, tables)
        if any(c.eliminate == "lbayes" and "eliminate" in c.used_params() for c in configs):
            P = P._replace(lbm=pool_lbayes_memo(pool, P))
        records = config_records(configs)
        packed, reading, dc = packed_arg(P), reading_flag(records), lows_arg(pool.lows, records)
        cw, eta = vote_weights(pool.score, votes)
        cw = weights_arg(cw, only, (packed, reading, dc))
        args = (P, frozen(pool.qkeys, np.uint64), frozen(seeds, np.int64), records, only,
                frozen(budget_totals, np.int64), cw, eta, out_f, out_i, pq_n, pq_flags)
        chunks = min(S, get_threads())
        bins = max(c.bins for c in configs)  # side-eb's, at most (each thread has its own scheduler scratch)
        done = np.zeros(chunks, np.int64)
        perms = take_identities(int(pool.off[-1]), chunks)
        # contiguous chunks of seeds; _grid releases the GIL, so this thread can report their progress
        maxtok = grid_maxtok(pool)
        run_chunks(lambda t: _grid(*args, grid_sched(n, bins, maxtok), perms[t], t * S // chunks,
                                   (t + 1) * S // chunks, packed, reading, dc, done[t:t + 1]), chunks, tick, done)
        give_back_identities(perms)
    return out_f, out_i, pq_n, pq_flags


LB_MEMO_BYTES = 1 << 28  # lbayes' memo at most this large (500 queries of 80 responses: 13 MB; of 500: cut to 250)


def lbayes_memo(n: int, size: int) -> np.ndarray:
    """lbayes' memo for a grid call (kernel.PoolArrays.lbm), NaN: per query a slot for each (valid draws, leader's
    count) up to the pool's largest query, or up to as many draws as LB_MEMO_BYTES holds (past them the check computes
    its posterior each time)."""
    while size > 0 and n * (size + 1) * (size + 2) // 2 * 8 > LB_MEMO_BYTES:
        size //= 2
    return np.full((n, (size + 1) * (size + 2) // 2), np.nan)


def pool_lbayes_memo(pool: Pool, P: PoolArrays) -> np.ndarray:
    """lbayes' memo of the pool, kept on it from call to call while its answers and offsets are those of P (the
    posterior reads nothing else of the pool), so that a leaderboard's tuning call and its held-out calls per budget
    fill it once: a posterior far into a query of many answers costs tens of ms (docs/performance.md, lbayes)."""
    got = pool.__dict__.get("_lbayes_memo")
    if got is None or got[0] is not P.ans or got[1] is not P.off:
        got = (P.ans, P.off, lbayes_memo(pool.n_queries, int(pool.sizes.max())))
        pool.__dict__["_lbayes_memo"] = got
    return got[2]


# The grids' worker threads, kept from call to call: a pool of threads started per call cost ~0.3 ms of CPU (start,
# join, their first wake-ups), a sixth of an mmc grid of 20 seeds at budget 8 (docs/performance.md, "The grid call's
# fixed cost"). As many as numba's threads (set_threads' ceiling); a call's chunks beyond the calling thread's own
# take as many, and calls from several threads at once share them (a chunk waits for a free one). Made anew in a
# forked child, where the parent's threads do not exist.
_workers: ThreadPoolExecutor | None = None
_workers_pid = 0
_workers_lock = threading.Lock()


def workers() -> ThreadPoolExecutor:
    global _workers, _workers_pid
    with _workers_lock:
        if _workers is None or _workers_pid != os.getpid():
            _workers = ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS, thread_name_prefix="ttc-grid")
            _workers_pid = os.getpid()
        return _workers


def run_chunks(run, chunks: int, tick=None, done=None):
    """run(t) for every chunk t < chunks, at once: chunk 0 on this thread and the others on the workers, or, with
    tick, every chunk on the workers while this thread calls tick(k) with the runs made since its last call (the sum
    of `done`, which the chunks count up) at most every TICK_S and once at the end. Returns when every chunk has
    returned (a chunk that raised does not leave the others writing the outputs), raising the first error."""
    if chunks == 1 and tick is None:
        run(0)
        return
    ex = workers()
    futures = [ex.submit(run, t) for t in range(0 if tick is not None else 1, chunks)]
    try:
        if tick is None:
            run(0)
        else:
            reported = 0
            while True:
                finished = not wait(futures, timeout=TICK_S).not_done
                now = int(done.sum())
                if now > reported:
                    tick(now - reported)
                    reported = now
                if finished:
                    break
    finally:
        wait(futures)
    for f in futures:
        f.result()


def pool_probes(pool: Pool) -> tuple | None:
    """The pool's probes as the kernels read them, (probe_off, probe_tok, probe_ans, probe_ok as int8), or None when
    none were loaded (load_pool(probes=True))."""
    if pool.probe_off is None:
        return None
    return (frozen(pool.probe_off, np.int64), frozen(pool.probe_tok, np.int64), frozen(pool.probe_ans, np.int64),
            frozen(pool.probe_ok, np.int8))


def cmc_knobs(beta: float) -> tuple[np.ndarray, np.ndarray]:
    """CMC's knobs from its one scalar beta in [0, 1], as AutoTTS's `_schedule` computes them (Python's round, half
    to even): (n_init, max_branch, warm_up, abandon_patience, T_ema, burst_aligned, widen_burst, min_complete) and
    (ema_alpha, conf_thresh, delta_slack, trend_thresh)."""
    b = max(0.0, min(1.0, float(beta)))
    kn = np.array([max(2, round(2 + 6 * b)), min(64, round(4 + 60 * b)), max(2, round(2 + 8 * b)),
                   max(3, round(3 + 9 * b)), max(2, round(2 + 6 * b)), max(1, round(1 + 2 * b)),
                   max(1, round(1 + 3 * b)), max(2, round(2 + 3 * b))], np.int64)
    kf = np.array([round(0.70 - 0.40 * b, 4), round(0.85 + 0.12 * b, 4), round(0.04 - 0.03 * b, 4),
                   round(0.04 - 0.03 * b, 4)], np.float64)
    return kn, kf


def depth_view_arrays(pool: Pool, key: tuple) -> tuple:
    """(tok, ans, correct, reach) of every trace of the pool under a depth key (RunConfig.depth_key): each trace as
    the depth rule and the trace cap stop it (kernel.depth_view), and the probes it can reach."""
    rule, m, cap, cost = key
    poff, ptok, pans, pok = pool_probes(pool)
    n = len(pool.tok)
    tok, ans, ok, reach = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int8), np.empty(n, np.int64)
    depth_view(frozen(poff, np.int64), frozen(ptok, np.int64), frozen(pans, np.int64), frozen(pok, np.int8),
               frozen(pool.tok, np.int64), frozen(pool.ans, np.int64), frozen(pool.correct, np.int8),
               DEPTH_RULES[rule].code, max(m, 1), cap, getattr(kernel, PROBE_COSTS[cost]), tok, ans, ok, reach)
    return tok, ans, ok, reach


def depth_pool(pool: Pool, key: tuple) -> Pool:
    """The pool as a width policy sees it under a depth key: each response is its trace stopped by the depth rule
    or the trace cap, with that stop's cost, answer and correctness (a score of gt follows the correctness; another
    score is the whole trace's, as the pool gives no other). The pool itself when the key changes nothing."""
    if key == ("whole", 0, 0, "tokens"):
        return pool
    if "_depth" not in pool.__dict__:
        pool.__dict__["_depth"] = {}
    views = pool.__dict__["_depth"]
    if key not in views:
        tok, ans, ok, _ = depth_view_arrays(pool, key)
        score = ok.astype(np.float64) if pool.score_name == "gt" else pool.score
        views[key] = dataclasses.replace(pool, tok=tok, ans=ans, correct=ok, score=score)
    return views[key]


def run_probe_grid(pool: Pool, configs: list[RunConfig], budget_totals: np.ndarray, seeds, per_query: bool):
    """parallel-probe's and cmc's rows (kernel._depth_grid, _cmc_grid), raw arrays out as run_grid's; configurations
    grouped by their policy and depth key (each group one view of the pool)."""
    C, S, n = len(configs), len(seeds), pool.n_queries
    out_f, out_i, pq_n, pq_flags = grid_outputs(C, S, n, per_query)
    poff, ptok, pans, pok = pool_probes(pool)
    off = frozen(pool.off, np.int64)
    for key in dict.fromkeys((c.policy,) + c.depth_key() for c in configs):
        rows = [k for k, c in enumerate(configs) if (c.policy,) + c.depth_key() == key]
        key = key[1:]
        tok, ans, ok, reach = depth_view_arrays(pool, ("whole", 0, key[2], key[3]))  # (its own depth, no rule)
        # (the answer slots: room for every answer a probe or a stopped trace may hold)
        aoff = frozen(answer_offsets(off, _slot_ids(pool)), np.int64)
        f = np.zeros((len(rows), S, out_f.shape[2]))
        i_ = np.zeros((len(rows), S, 4), np.int64)
        pn = np.zeros((len(rows), S, n) if per_query else (0, 0, 0), np.int32)
        pf = np.zeros((len(rows), S, n) if per_query else (0, 0, 0), np.uint16)
        common = (off, aoff, frozen(pool.qkeys, np.uint64), frozen(seeds, np.int64), frozen(poff, np.int64),
                  frozen(pans, np.int64), frozen(pok, np.int8), frozen(ptok, np.int64), frozen(reach, np.int64),
                  frozen(tok, np.int64), frozen(ans, np.int64), frozen(ok, np.int8))
        if configs[rows[0]].policy == "cmc":
            knobs = [cmc_knobs(configs[k].cmc_beta) for k in rows]
            grid, args = _cmc_grid, (*common, np.stack([kn for kn, _ in knobs]), np.stack([kf for _, kf in knobs]),
                                     np.array([configs[k].kernel_unit for k in rows], np.int64),
                                     frozen(budget_totals[rows], np.int64), f, i_, pn, pf)
        else:
            cfg = np.array([[configs[k].chains, configs[k].stable, configs[k].patience, configs[k].probe_warmup,
                             configs[k].kernel_unit] for k in rows], np.int64).reshape(len(rows), 5)
            grid, args = _depth_grid, (*common, cfg, frozen(budget_totals[rows], np.int64), f, i_, pn, pf)
        # contiguous chunks of seeds on the worker threads, as run_grid's (the grids release the GIL and keep their
        # scratch per call; each seed writes its own outputs)
        chunks = min(S, get_threads())
        run_chunks(lambda t, grid=grid, args=args, k=chunks: grid(*args, t * S // k, (t + 1) * S // k), chunks)
        out_f[rows], out_i[rows] = f, i_
        if per_query:
            pq_n[rows], pq_flags[rows] = pn, pf
    return out_f, out_i, pq_n, pq_flags


def _slot_ids(pool: Pool) -> np.ndarray:
    """Per response, the largest answer id its trace can hold (final or any probe): answer_offsets sizes each
    query's slots from it."""
    poff, _, pans, _ = pool_probes(pool)
    top = pool.ans.copy()
    has = np.diff(poff) > 0
    if len(pans):
        pmax = np.maximum.reduceat(pans, np.minimum(poff[:-1], len(pans) - 1))
        top = np.where(has, np.maximum(top, pmax), top)
    return top


def run_rows(pool: Pool, configs: list[RunConfig], budget_totals: np.ndarray, seeds, tables, per_query: bool = False,
             votes: tuple | None = None, tick=None, only: tuple = ()):
    """run_grid over configurations of any kind: parallel-probe's and cmc's to run_probe_grid, the others grouped by
    their depth key, each group on its view of the pool (depth_pool); without depth, run_grid itself (only: its)."""
    keys = [("pp",) if c.policy in DEPTH_POLICIES else c.depth_key() for c in configs]
    if all(k == ("whole", 0, 0, "tokens") for k in keys):
        return run_grid(pool, configs, budget_totals, seeds, tables, per_query, votes, tick=tick, only=only)
    C, S, n = len(configs), len(seeds), pool.n_queries
    out_f, out_i, pq_n, pq_flags = grid_outputs(C, S, n, per_query)
    for key in dict.fromkeys(keys):
        rows = [k for k in range(C) if keys[k] == key]
        sub = [configs[k] for k in rows]
        if key == ("pp",):
            res = run_probe_grid(pool, sub, budget_totals[rows], seeds, per_query)
            if tick is not None:
                tick(len(sub) * S)
        else:
            view = depth_pool(pool, key)
            res = run_grid(view, sub, budget_totals[rows], seeds, tables, per_query, votes, tick=tick, only=only)
        out_f[rows], out_i[rows] = res[0], res[1]
        if per_query:
            pq_n[rows], pq_flags[rows] = res[2], res[3]
    return out_f, out_i, pq_n, pq_flags


def check_configs(pool: Pool, configs: list[RunConfig], select: str):
    """Refuse runs the pool cannot support, naming what is missing."""
    if select not in SELECT:
        raise PoolError(f"unknown selection {select!r}; choose {', '.join(SELECTION_RULES)}")
    for c in configs:
        if c.needs_answers() and not pool.has_answers:
            raise PoolError(f"{c.label()} needs an 'answer' column (answer categories), and this pool has none")
        if c.unit != "samples" and not pool.has_tokens:
            raise PoolError(f"{c.label()}: a token budget needs an 'n_tokens' column, and this pool has none")
        if "side" in REGISTRY[c.policy].needs and pool.side is None:
            raise PoolError(f"{c.policy} reads each response's side signal (a confidence in [0, 1], e.g. exp(mean "
                            "token log-probability)): name its column with --side COLUMN")
        if "gt" in REGISTRY[c.policy].needs and not pool.has_gt:
            raise PoolError(f"{c.policy} needs ground truth (a 'correct' column), and this pool has none")
        if "lows" in REGISTRY[c.policy].needs and pool.lows is None:
            raise PoolError(f"{c.policy} needs each response's record lows of its group confidence (columns "
                            "'conf_lows_pos' and 'conf_lows': ttc harvest --confidence group-lows), and this pool has "
                            "none" + (" loaded" if pool.has_lows else ""))
        if c.needs_probes() and pool.probe_off is None:
            raise PoolError(f"{c.label()} stops traces part-way and needs each trace's probes (columns 'probe_answer', "
                            "'probe_tokens' and 'probe_correct': ttc import autotts), and this pool has none"
                            + (" loaded" if pool.has_probes else ""))
        if c.policy in DEPTH_POLICIES and select != "sc":
            raise PoolError(f"{c.policy} answers with its own vote over its traces' answers: select it "
                            f"with --select sc (got --select {select})")
        if c.policy == "deepconf-online" and select in ("cisc", "deepconf"):
            raise PoolError(f"--select {select} votes over every drawn response, and deepconf-online's stopped traces "
                            "have no answer: select its own vote with --select weighted (weighted by the lowest group "
                            "confidence, as DeepConf votes) or sc (the majority of the traces that vote)")
    if "answers" in SELECTION_RULES[select].needs and not pool.has_answers:
        raise PoolError(f"--select {select} needs an 'answer' column, and this pool has none: it votes over the "
                        f"responses' answers ({SELECTION_RULES[select].doc})"
                        + (f", and a score ({pool.score_name}) gives none to vote on" if select in
                           ("cisc", "deepconf") else ""))


def check_budgets(budgets, flag: str = "--budgets"):
    """Average budgets per query: at least one, each finite and positive (NaN fails every comparison, so the test
    is written as `not 0 < b < inf`). The one check replay, report, bench and the engine itself use."""
    if not budgets:
        raise PoolError(f"{flag}: no budgets given")
    if any(not 0 < b < math.inf for b in budgets):
        raise PoolError(f"{flag} must be finite and positive (average samples or tokens per query), got "
                        f"{list(budgets)}")


def replay(pool: Pool, configs: list[RunConfig], budgets, seeds, select: str = "bon", conf: float = 0.95,
           per_query: bool = False, progress=None, cisc_temp: float = CISC_TEMP,
           deepconf_eta: float = DEEPCONF_ETA) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Replay every configuration at every average per-query budget and seed.

    Returns one row per (configuration, budget, seed) and, with per_query, one row per query of each run.
    `progress(k)` is told of each k runs (configuration x budget x seed) made, at most every TICK_S as they run.
    cisc_temp and deepconf_eta: the cisc and deepconf
    selections' parameters (docs/semantics.md)."""
    check_configs(pool, configs, select)
    why = check_selection_params(cisc_temp, deepconf_eta)
    if why:
        raise PoolError(why)
    votes = replay_votes(pool, select, cisc_temp, deepconf_eta)
    budgets = [float(b) for b in budgets]
    seeds = np.asarray(list(seeds), np.int64)
    check_budgets(budgets, "budgets")
    if len(seeds) == 0:
        raise PoolError("no seeds given")
    n = pool.n_queries
    tables = make_tables(int(pool.sizes.max()), conf,
                         sc_beta=any(c.eliminate == "sc-beta" and "eliminate" in c.used_params() for c in configs))
    totals = {b: int(round(b * n)) for b in budgets}

    rows_cfg, rows_budget = [], []
    for c in configs:
        if c.policy == "uniform" and c.unit == "token-matched":
            c = RunConfig("uniform")  # uniform is its own token match
        for b in budgets:
            rows_cfg.append(c)
            rows_budget.append(b)
    matched_rows = [k for k, c in enumerate(rows_cfg) if c.unit == "token-matched"]
    uni = [RunConfig("uniform")] * len(budgets)

    only = kernel_only(rows_cfg, pool, votes)  # one policy: a kernel with its code alone (its first run compiles less)
    blocks = [seeds]
    parts = []
    for block in blocks:
        bt = np.array([[totals[b]] * len(block) for b in rows_budget], np.int64).reshape(len(rows_cfg), len(block))
        if matched_rows:
            # Token-matched runs spend, per (budget, seed), the tokens uniform spent at that sample budget.
            ub = np.array([[totals[b]] * len(block) for b in budgets], np.int64)
            _, oi, _, _ = run_grid(pool, uni, ub, block, tables, only=only)
            for k in matched_rows:
                bt[k] = oi[budgets.index(rows_budget[k]), :, 1]
        parts.append((bt,) + run_rows(pool, rows_cfg, bt, block, tables, per_query, votes, tick=progress, only=only))
    budget_totals, out_f, out_i, pq_n, pq_flags = (np.concatenate([p[k] for p in parts], axis=1)
                                                     for k in range(5))

    C, S = len(rows_cfg), len(seeds)
    sel = SELECT[select]
    # cisc's and deepconf's votes read every drawn response; deepconf-online's stopped traces have no answer: NaN
    online = np.array([[c.policy in ("deepconf-online",) + DEPTH_POLICIES] for c in rows_cfg], bool).reshape(C, 1)
    # a depth policy's answer is its own vote (the sc column): the other selections mean nothing for it
    pp = np.array([[c.policy in DEPTH_POLICIES] for c in rows_cfg], bool).reshape(C, 1)
    nan = float("nan")
    acc = out_f[:, :, 1 + sel] if pool.has_gt else np.full((C, S), nan)
    cols = {
        "policy": np.repeat([c.policy for c in rows_cfg], S),
        "config": np.repeat([c.label() for c in rows_cfg], S),
        "budget": np.repeat(rows_budget, S),
        "seed": np.tile(seeds, C),
        "coverage": (out_f[:, :, 0] if pool.has_gt else np.full((C, S), nan)).ravel(),
        "accuracy": acc.ravel(),
        "accuracy_bon": (np.where(pp, nan, out_f[:, :, 1]) if pool.has_gt else np.full((C, S), nan)).ravel(),
        "accuracy_weighted": (np.where(pp, nan, out_f[:, :, 2]) if pool.has_gt and pool.has_answers
                              else np.full((C, S), nan)).ravel(),
        "accuracy_sc": (out_f[:, :, 3] if pool.has_gt and pool.has_answers else np.full((C, S), nan)).ravel(),
        "accuracy_cisc": (np.where(online, nan, out_f[:, :, 4]) if votes else np.full((C, S), nan)).ravel(),
        "accuracy_deepconf": (np.where(online, nan, out_f[:, :, 5]) if votes else np.full((C, S), nan)).ravel(),
        # the self-consistency rate (PETS's objective): the drawn majority is a majority of the whole pool
        "consistency": (np.where(pp, nan, out_f[:, :, 6]) if pool.has_answers else np.full((C, S), nan)).ravel(),
        "samples_used": out_i[:, :, 0].ravel(),
        "tokens_used": out_i[:, :, 1].ravel() if pool.has_tokens else np.full(C * S, None),
        "exhausted": out_i[:, :, 2].ravel(),
        "answered": out_i[:, :, 3].ravel(),
        "budget_total": budget_totals.ravel(),
        **{name: np.repeat([config_value(c, name) for c in rows_cfg], S) for name in CONFIG_COLUMNS},
        "select": [select] * (C * S),
        "cisc_temp": [float(cisc_temp)] * (C * S),
        "deepconf_eta": [float(deepconf_eta)] * (C * S),
        "score": [pool.score_name] * (C * S),
        "invalid_votes": [pool.invalid_votes] * (C * S),
    }
    df = pl.DataFrame(cols, strict=False).with_columns(pl.col("tokens_used").cast(pl.Int64))
    pq = None
    if per_query:
        qids = pool.query_ids
        flags = pq_flags.reshape(C * S, n)
        pq = pl.DataFrame({
            "config": np.repeat(cols["config"], n),
            "budget": np.repeat(cols["budget"], n),
            "seed": np.repeat(cols["seed"], n),
            "query_id": np.tile(np.asarray(qids, dtype=object), C * S),
            "n_drawn": pq_n.reshape(-1),
            "answered": (flags & F_ANSWERED).astype(bool).ravel(),
            "covered": (flags & F_COVERED).astype(bool).ravel(),
            "exhausted": (flags & F_EXHAUSTED).astype(bool).ravel(),
            "capped": (flags & F_CAPPED).astype(bool).ravel(),
            "selected_correct": (flags & F_SEL[sel]).astype(bool).ravel(),
        }, strict=False)
    return df, pq


def scratch(n: int, slots: int, perm, order, bins: int = 0, live: bool = False) -> Scratch:
    """Scratch for runs on a given permutation (no lazy generation) and query order; bins: side-eb's, at most;
    live: room for a live run's deferred queries."""
    qs, si, sf, tot, mm = new_state(n, slots)
    return Scratch(np.ascontiguousarray(perm, np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.uint64),
                   np.ascontiguousarray(order, np.int64), qs, si, sf, tot, mm, *sched(n, bins, live))


def sched(n: int, bins: int = 0, live: bool = False) -> Sched:
    """The scheduler's scratch (kernel.Sched) for n queries, side-eb up to `bins` bins, and with live=True a live
    run's deferred queries (replay never defers one). Allocated here, not in the kernel: a jitted allocator cost 0.4
    s of the first run's compile."""
    e = np.empty
    return Sched(e(n, np.int64), e(n + 1), e(n + 1, np.int32), e(n + 1, np.int32), e((bins + 2, 3)), e((n, 2)),
                 e(n, np.int64), e(n, np.int64), e(n, np.int64), e(n, np.int64), e(n, np.int64),
                 np.zeros(1, SCHED), e((n if live else 0, 2), np.int64))


def grid_sched(n: int, bins: int, maxtok: int) -> Sched:
    """A grid thread's scheduler scratch: sched's, with the pool's longest response (maxtok, in tokens), the bound by
    which round-robin in tokens runs the rounds the budget surely pays for as one block (kernel.SCHED's maxtok: the
    same outcomes at less than half the cost a decision, docs/performance.md)."""
    s = sched(n, bins)
    s.sch[0]["maxtok"] = maxtok
    return s


def outcome(P: PoolArrays, W: Scratch, votes: tuple | None = None) -> dict:
    """A finished run's per-query outcomes and totals, as arrays; with votes = (cisc_temp, deepconf_eta) also
    sel_cisc and sel_deepconf."""
    n = len(P.off) - 1
    qs = W.qs
    bits = np.empty(n, np.int64)
    selections(qs, W.si, P.aoff, P.correct, bits)
    if votes is not None:
        cw, eta = vote_weights(P.score, votes)
        slots, biggest = int(P.aoff[-1]), int(np.diff(P.off).max(initial=0))
        confidence_votes(P.off, P.aoff, P.correct, P.score, P.ans, W.perm, qs, cw[0], eta, np.zeros(slots),
                         np.full(slots, -1, np.int64), np.empty(biggest + 1, np.int64), np.empty(biggest + 1), bits)
    sel = np.stack([(bits & f) > 0 for f in F_SEL], axis=1).reshape(n, len(F_SEL))
    out = {
        "n_drawn": qs[N].astype(np.int64), "answered": qs[ELIM].astype(bool), "covered": qs[COVERED].astype(bool),
        "exhausted_q": qs[EXH].astype(bool), "capped": qs[CAPPED].astype(bool),
        "sel_bon": sel[:, 0], "sel_weighted": sel[:, 1], "sel_sc": sel[:, 2],
        "samples_used": int(W.tot[SAMPLES]), "tokens_used": int(W.tot[TOKENS]), "exhausted": int(W.tot[EXHAUSTED]),
    }
    if votes is not None:
        out["sel_cisc"], out["sel_deepconf"] = sel[:, 3], sel[:, 4]
    return out


def run_once(off, correct, score, ans, tok, perm, rank, config: RunConfig, budget_total: int,
             conf: float = 0.95, votes: tuple | None = None, prior=None, side=None, lows=None) -> dict:
    """One run on explicit permutations (perm, rank): per-query outcomes as arrays. For tests and drivers. votes =
    (cisc_temp, deepconf_eta) adds sel_cisc and sel_deepconf; prior: per-query predictions (marginal-gain); lows:
    the record lows (loff, lpos, lval) deepconf-online reads."""
    off = np.asarray(off, np.int64)
    P = pool_arrays(off, correct, score, ans, tok, make_tables(int(np.diff(off).max(initial=1)), conf), prior=prior,
                    side=side)
    W = scratch(len(off) - 1, int(P.aoff[-1]), perm, np.argsort(np.asarray(rank, np.int64)), config.bins)
    record = config.record()
    run_one_any(P, W, record[0], np.int64(budget_total), np.int64(0), reading_flag(record), None,
                lows_arg(lows, record))
    return outcome(P, W, votes)
