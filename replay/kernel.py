"""Every jitted function of the replay engine, in one module.

numba's on-disk cache (cache=True) is invalidated only by a change to the module that defines a function, not to
the modules it calls or the globals it freezes; so the kernels, the constants they read and the helpers they
call all live here, and any edit recompiles all of them (tests/test_kernel_module.py guards this).

`run_one` replays one policy configuration on one permutation, every exploration rule in one loop body. The
per-step operations (pull responses for a query and fold them in, check elimination, compute an index) are
closures inside it: numba inlines them with the arrays captured once, which keeps a draw at ~11-25 ns (the same
code as separate @njit functions taking the arrays cost 3-10x more per call, measured: a function called per
query or per draw must take few arrays, or be written inline). Each exploration rule is one branch built from
those operations; adding one is a code here and its branch in `run_one`, its entry in replay/policies.py's
registry, its twin in replay/reference.py (the plain-Python test oracle) and its paragraph in docs/semantics.md,
the contract.

State is five arrays so that the kernels touch no Python objects: `qs` (one QSTATE record per query), `si` and
`sf` (per-answer slots: query i owns aoff[i] .. aoff[i + 1] - 1, slot aoff[i] counting invalid answers and slot
aoff[i] + 1 + a answer a; see answer_offsets) and `tot` (run totals); `mm` (rows as si's) is mmc's ranking of the
answers it has read (run_one's mmc_stops).
"""
from __future__ import annotations

import math
from collections import namedtuple
from enum import IntEnum

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.ir_utils import build_definitions
from numba.core.untyped_passes import DeadBranchPrune, RewriteSemanticConstants, WithLifting
from numba.extending import intrinsic


class Policy(IntEnum):
    """The width policies' codes (a CONFIG record's `policy`; replay/policies.py's registry names them). Depth
    policies have codes of their own in the depth section (from 20)."""
    UNIFORM = 0
    ELIMINATION = 1
    UCB = 2
    GAP = 3
    GAP_LITERAL = 4
    ENTROPY = 5
    TWO_STAGE = 6
    STREAMING = 7
    ORACLE = 8
    OPTSCALE = 9
    MARGINAL_GAIN = 10
    DSC = 11
    SIDE_EB = 12
    DEEPCONF_ONLINE = 13
    UAB = 15  # the 2025-26 cross-query allocations (issue 29) from 15 on (14: Blend-ASC, reserved)
    PETS = 16
    PETS_ONLINE = 17


class Unit(IntEnum):
    """What a budget counts (a CONFIG record's `unit`)."""
    SAMPLES = 0
    TOKENS = 1


class Elim(IntEnum):
    """The elimination rules' codes (a CONFIG record's `elim`); the 2025-26 per-query stops (issue 29) from 8 on."""
    NONE = 0
    THRESHOLD = 1
    SC_SHARE = 2
    SC_BETA = 3
    ESC = 4
    AC_MAJORITY = 5
    AC_ENTROPY = 6
    AC_DIRICHLET = 7
    BOINF = 8
    MMC = 9
    LBAYES = 10


# The kernels branch on each code as a plain int, the name below (tests/test_kernel_module.py checks each against its
# enum member): numba types an IntEnum member as IntEnum<int64>, which its builtins reject (`min(Policy.UCB, policy)`:
# no matching overload of min, numba 0.68), so a member inside a kernel would need a cast at each such use.
UNIFORM, ELIMINATION, UCB, GAP, GAP_LITERAL, ENTROPY, TWO_STAGE, STREAMING, ORACLE, OPTSCALE, MARGINAL_GAIN, DSC, \
    SIDE_EB, DEEPCONF_ONLINE, UAB, PETS, PETS_ONLINE = map(int, Policy)
# The 2025-26 cross-query allocations (issue 29) read the drawn responses' side signal or answer slots at their stage
# boundaries, so run_one compiles their code only with `reading` (as the reading rules).
READING_POLICIES = (UAB, PETS, PETS_ONLINE)
# The policies whose phase 1 is a round-robin (run_one's st.rr_on) and those that pick by an index from a heap
ROUND_ROBIN_POLICIES = (UNIFORM, ELIMINATION, TWO_STAGE, OPTSCALE, DSC, UAB)
INDEX_POLICIES = (UCB, GAP, GAP_LITERAL, ENTROPY, MARGINAL_GAIN, SIDE_EB, PETS)
# pets: Simpson intervals of its quadrature of the Dirichlet argmax probability (docs/semantics.md)
OKG_NODES = 256
UNIT_SAMPLES, UNIT_TOKENS = map(int, Unit)
OKG_MC_NODES = 64  # pets_mc: its exact I vectors need only be far finer than the Monte Carlo error (~0.02)
# pets: slots of a run's memo of OKG rewards by count vector (okg_memo_reward; a power of two): `ttc bench`'s pool
# (500 queries, 4 answers) reaches ~2,700 distinct vectors in a run at 32 draws a query, 17 at 4. A vector looks
# PETS_PROBE slots on from its hash's; none free, it takes its home slot (the memo only saves work: a miss is the
# same reward, computed). Above 16 buckets, fewer slots (halved down to 64), so that the keys stay within 1 MB
PETS_MEMO, PETS_PROBE = 8192, 8
ELIM_NONE, ELIM_THRESHOLD, ELIM_SC_SHARE, ELIM_SC_BETA, ELIM_ESC, ELIM_AC_MAJORITY, ELIM_AC_ENTROPY, \
    ELIM_AC_DIRICHLET, ELIM_BOINF, ELIM_MMC, ELIM_LBAYES = map(int, Elim)
# The rules that read the drawn responses or the answer slots at each check (the others read the running counts):
# run_one compiles them in only when its `reading` argument is not None, so that a grid without them (the default
# replay's) does not pay their compile (engine.reading_flag picks the argument from the configurations).
READING_RULES = (ELIM_ESC, ELIM_AC_ENTROPY, ELIM_AC_DIRICHLET, ELIM_BOINF, ELIM_MMC, ELIM_LBAYES)
# boinf: the weight of the source's "unknown" answer bucket (test_main.py's alpha = 0.3: a pseudo-count always in its
# Dirichlet, so that one answer seen once does not stop a query at once)
BOINF_ALPHA = 0.3
# mmc: the source's plug-in bet stays within these bounds (its BernoulliMixtureEProcess's clip)
MMC_Q_LO, MMC_Q_HI = 0.50001, 0.99999
# mmc's options as the CONFIG record holds them (a choice's index in its param's choices): mmc_labels drawn (the
# answers seen so far, its class's labels=None) or pool (every distinct valid answer of the query's pool known in
# advance, its training code's call; hindsight); mmc_leader_check off or on (the class's
# require_current_leader_match)
MMC_LABELS_DRAWN, MMC_LABELS_POOL = 0, 1
MMC_LEADER_OFF, MMC_LEADER_ON = 0, 1

LOG2 = math.log(2.0)
MMC_LOG_SLACK = 1e-9  # (far above the rounding of s log 2 and of mmc_log_e at any count a pool holds)
# ac-entropy stops at h <= hmax + AC_ENTROPY_TIE: an entropy exactly equal to hmax (counts 8, 3, 1 give 0.75 exactly)
# computes a few ulps either side of it in floating point; the margin, far above that error and far below any gap
# between distinct values of h at the counts a pool holds, makes such a tie stop, as `h <= hmax` says
AC_ENTROPY_TIE = 1e-12
# Responses in a pool from which run_one prefetches the next decision's state (prefetch): below, the pool's arrays
# (~33 bytes a response) fit in a core's L2 and the prefetches only cost (ucb at 500 x 64: +25% per decision).
PREFETCH_FROM = 1 << 16

# Per-query state: one record per query. The kernels read and write its fields by name (qs[i].n); Python reads a
# column by the constants below (W.qs[N]). n: responses drawn; best_j / best: the highest-scored one and its score;
# covered: one was correct; lead / lead_cnt / second_cnt: the leading valid answer, its count and the runner-up's;
# wlead / wlead_sum: the answer with the largest summed score and that sum; elim / capped / exh: answered, at its
# cap, exhausted; ssum: the summed score; s: entropy's sum of c log c (deepconf-online: the summed vote).
# mm_*: mmc's e-processes, advanced at each check over the draws since the last (run_one's mmc_stops): mm_p draws read,
# mm_d answers seen, mm_last the leader chosen before the latest vote, mm_s1 / mm_f1 / mm_q1 the pair e-process's
# successes, failures and latest bet (its log e is mmc_log_e of the three), mm_s2 / mm_f2 / mm_q2 the other one's.
# The record is two cache lines (_lines): every policy's fields on the first (counts and answer ids in 32 bits, flags
# in 8, so that they fit), mmc's on the second, so that a pull reads one line of it where the 184-byte record of
# int64 fields spanned two or three (docs/performance.md, growth item 5). One line only where the array starts on a
# 64-byte boundary, as numba's allocations of a pool-sized state did in every check; else two, never a wrong value.
_QHOT = [("ssum", np.float64), ("best", np.float64), ("s", np.float64), ("wlead_sum", np.float64),
         ("best_j", np.int64), ("n", np.int32), ("lead", np.int32), ("lead_cnt", np.int32), ("second_cnt", np.int32),
         ("wlead", np.int32), ("covered", np.int8), ("elim", np.int8), ("capped", np.int8), ("exh", np.int8)]
_QMMC = [("mm_q1", np.float64), ("mm_q2", np.float64), ("mm_p", np.int32), ("mm_d", np.int32),
         ("mm_last", np.int32), ("mm_s1", np.int32), ("mm_f1", np.int32), ("mm_s2", np.int32), ("mm_f2", np.int32)]


def _lines(*groups) -> np.dtype:
    """A record of cache lines: each group of fields packed from the start of its own 64-byte line."""
    names, formats, offsets = [], [], []
    for g, fields in enumerate(groups):
        at = 64 * g
        for name, t in fields:
            names.append(name)
            formats.append(t)
            offsets.append(at)
            at += np.dtype(t).itemsize
        assert at <= 64 * (g + 1), "a group outgrows its line"
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": 64 * len(groups)})


QSTATE = _lines(_QHOT, _QMMC)
N, BEST_J, COVERED, LEAD, LEAD_CNT, SECOND_CNT, WLEAD, ELIM, CAPPED, EXH, SSUM, BEST, S, WLEAD_SUM = (
    "n", "best_j", "covered", "lead", "lead_cnt", "second_cnt", "wlead", "elim", "capped", "exh", "ssum", "best", "s",
    "wlead_sum")
# si columns (sf holds the summed score of each answer)
CNT, FIRST_J = 0, 1
# mm columns (one row per answer slot, as si: mmc's ranking of the answers over the draws it has read): an answer's
# count and the order it was first seen in (MM_CNT, MM_FIRST), the answer at rank r (row base + r, MM_ORDER) and an
# answer's rank (MM_RANK). With mmc_labels pool, an answer not drawn yet (count 0) has MM_RANK 1 if the query's pool
# holds it, else 0 (its rank is read only once it is drawn).
MM_CNT, MM_FIRST, MM_ORDER, MM_RANK = 0, 1, 2, 3
# tot slots. NEED: 1 + the query whose next response is not there yet (live runs), 0 when none
SAMPLES, TOKENS, EXHAUSTED, STOP, NEED = range(5)
TOT_SLOTS = 5

# One policy configuration as the kernels read it: a record, filled by name (replay/policies.py RunConfig.record).
CONFIG = np.dtype([("policy", np.int64), ("unit", np.int64), ("K", np.int64), ("elim", np.int64),
                   ("max_samples", np.int64), ("m_min", np.int64), ("gamma", np.float64), ("lam", np.float64),
                   ("eps", np.float64), ("rho", np.float64), ("tau", np.float64), ("share", np.float64),
                   ("hmax", np.float64), ("warmup", np.int64), ("judge", np.int64), ("percentile", np.float64),
                   ("prior_strength", np.float64), ("bins", np.int64), ("refresh", np.int64),
                   ("dirichlet_conf", np.float64), ("horizon", np.int64),
                   ("bf", np.float64), ("bf_mc", np.int64), ("mmc_delta", np.float64), ("mmc_m", np.int64),
                   ("mmc_labels", np.int64), ("mmc_min_updates", np.int64), ("mmc_leader_check", np.int64),
                   ("lb_thre", np.float64), ("lb_l", np.int64), ("uab_tau", np.float64),
                   ("pets_options", np.int64), ("pets_mc", np.int64), ("pets_train", np.int64),
                   ("pets_curve_mc", np.int64)], align=True)

# What a run reads (read-only): the pool's per-response arrays grouped by query (off), the answer slots (aoff,
# answer_offsets), have[i] = how many of query i's responses exist (its pool size in replay; fewer in a live run,
# which stops at the first response it lacks), the lookup tables (replay/tables.py) and prior[i], a per-query
# predicted success probability in [0, 1] (marginal-gain's --prior; NaN for none: always an array, so that every
# run has the one compiled signature) and side[j], a per-response side signal in [0, 1] (side-eb's --side; an
# empty array for none, read as 0.5 everywhere: likewise always an array, and no pass over the pool per call).
# mode[p]: answer slot p's answer is a most frequent valid answer of its query's whole pool (the self-consistency
# rate's reference, the infinite-budget majority: engine.pool_modes).
# resp[j]: response j's score, tokens and correctness (tc = 2 tokens + correct) and answer in one 16-byte record
# (engine.pack_responses), the fields a draw reads: one cache line a draw instead of four (score, tok, ans and
# correct are separate arrays, each line of them a miss of its own once the pool outgrows the cache: docs/
# performance.md, "Growth with the pool"). An empty resp (a live run, whose arrays fill as responses come, or
# values outside the record's ranges) and the draws read the separate arrays: the same values either way. run_one
# reads the records through its own argument, `packed` (engine.packed_arg), so that which draws a kernel compiles is
# chosen before typing.
# lbm: lbayes' memo of its posterior by (query, valid draws n, leader's count n1), the one thing its check reads
# at L = 2 (and below two distinct answers at any L) besides the query's pool: query i's posterior at (n, n1) in
# lbm[i, n (n + 1) / 2 + n1], NaN until computed, for n (n + 1) / 2 + n1 < lbm.shape[1] (engine.lbayes_memo sizes it
# to the pool's largest query; past it, computed each time). A grid's seeds and configurations revisit the same few
# (n, n1) of a query thousands of times (each posterior a recursion over the query's answers: tens of microseconds,
# tens of milliseconds at 150 draws over 80 answers), so engine.run_grid gives a memo to a grid that runs lbayes,
# shared by its threads (a value is the same whoever computes it: a thread that reads NaN computes it and writes the
# same 8 bytes); an empty lbm (every other run) computes each check.
RESP = np.dtype([("score", np.float64), ("tc", np.int32), ("ans", np.int32)])
PoolArrays = namedtuple("PoolArrays", "off aoff correct score ans tok have T L min_a prior side mode resp lbm")
# What a run writes: the permutation and its lazy-generation state (perm, qgen, hs; qgen has no rows when perm is
# given whole), the query order, and the state arrays qs, si, sf, tot. The grid allocates one per thread.
Scratch = namedtuple("Scratch", "perm qgen hs order qs si sf tot mm act hk hr hq eb ex U alloc cost first cand sch dfr")
# ... and the scheduler's, a Sched that engine.sched allocates: its per-query arrays (act: round-robin's active
# queries; hk, hr, hq: the index rules' heap; eb, ex: side-eb's bins and per-query sums; U, alloc: two-stage's,
# optscale's and dsc's stage 2; cost, first, cand: the oracle's candidates), sch: its cursors (one SCHED record,
# sch[0]), and dfr: a live run's deferred queries (query, pulls left) inside a block of round-robin rounds (run_one).
# (Flat in Scratch: with the Sched nested in it, numba 0.68 compiled run_one without the stores before a live stop;
# tests/test_live.py caught it.) run_one keeps its cursors in the record as it goes, so a live run that stops
# (tot[NEED]) leaves all of them where it stopped, with resume = 1: the next call goes on from there instead of from
# the start (replay/live.py), and each live round costs its own decisions only.
Sched = namedtuple("Sched", "act hk hr hq eb ex U alloc cost first cand sch dfr")
_I8 = np.int64
# The scheduler's cursors, by policy: run_one's init / pick / fold blocks read and write them by name (st.m).
SCHED = np.dtype([
    ("resume", _I8),  # (live) 0: from the start; 1: make the pending pull (i .. reps) again; 2: sweep the deferred
    ("stage", _I8),  # the phase of a staged policy: 1, then 2 (two-stage, optscale, dsc), 3 (dsc); deepconf-online's
    # round-robin (every policy whose phase is one: uniform, elimination, two-stage / optscale stage 1, dsc 1 and 3):
    # rounds over act[:m], p reads and w keeps; per pull rr_k responses, the budget rr_budget, the cap rr_cap (alloc[i]
    # when per_cap), the rule rr_elim; blk rounds in a block, paid when the budget pays all of them; one_pull: no rule
    # between its pulls (the block is one pull); by_rank: act is in rank order; rr_on: a round-robin phase runs
    ("rr_on", _I8), ("rr_budget", _I8), ("rr_k", _I8), ("rr_cap", _I8), ("rr_elim", _I8), ("one_pull", _I8),
    ("per_cap", _I8), ("by_rank", _I8), ("blk", _I8), ("paid", _I8), ("m", _I8), ("p", _I8), ("w", _I8),
    ("nd", _I8), ("dp", _I8), ("nd2", _I8),  # (live) deferred queries in dfr[:nd], the sweep's cursor, still waiting
    # index policies: the heap's size, the pulled query's draws before the pull; side-eb's pulls since its refresh
    ("size", _I8), ("n0", _I8), ("pulls", _I8),
    ("u", _I8), ("q", _I8), ("start", _I8),  # two-stage's stage 2: U[:u], its cursor q, tokens at the turn's start
    ("c", _I8), ("left", _I8),  # oracle: candidates (its cursor is q), the budget left
    ("sp", _I8),  # streaming: the current query's position in the order (pets-online's too)
    ("pb0", _I8), ("pb1", _I8),  # pets-online: its plan, the draws of a query whose warm-up agrees (pb0) or not
    # dsc's partition, a binary search over U (dsc_judge): [lo, hi), its midpoint, the judges [first, end), the next
    ("ds_lo", _I8), ("ds_hi", _I8), ("ds_mid", _I8), ("ds_first", _I8), ("ds_end", _I8), ("ds_next", _I8),
    # (live) the pending pull (run_one's pull arguments; reps: its pulls left)
    ("i", _I8), ("want", _I8), ("bud", _I8), ("uu", _I8), ("cap", _I8), ("rule", _I8), ("reps", _I8),
    # the pool's longest response in tokens, set by the grid (engine.grid_sched; 0: not known, as in a live run):
    # round-robin in tokens runs blocks of rounds that a draw this long each would fit, as in samples (a decision in
    # a block cost 13 ns against 32 ns alone: elimination with sc-beta, depth view of bench.probed_synth, 16x)
    ("maxtok", _I8),
], align=True)



# Per-query flag bits of the allocation output.
F_ANSWERED, F_COVERED, F_EXHAUSTED, F_CAPPED = 1, 2, 4, 8
F_SEL = (16, 32, 64, 128, 256)  # bon, weighted, sc, cisc, deepconf selected a correct response (the flags
# of a query are a uint16: cisc and deepconf, computed after a run by confidence_votes, need bits 7 and 8)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_RANK_SALT = np.uint64(0xD1B54A32D192ED03)
_BOINF_SALT = np.uint64(0x8BB84B93962EACC9)
_PETS_SALT = np.uint64(0x3C6EF372FE94F82B)
_PETS_CURVE_SALT = np.uint64(0xA0761D6478BD642F)  # pets-online's curve estimates (pets_curve_fit)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
# The decorators. No kernel is taken as a first-class function, so none has a cfunc wrapper, and a helper only
# kernels call (`inner`) has no CPython wrapper either (Python cannot call it): each wrapper is code that a first
# run types, lowers and emits (-1.1 to -1.5 s of a cold `ttc replay` for the 17 helpers, measured interleaved).
jit = njit(cache=True, no_cfunc_wrapper=True)
inner = njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
# ... and one inlined where it is called (numba IR inlining: each call site compiles its own copy; an array argument
# is still increfed and decrefed at each call, which LLVM did not prune inside run_one: see its mmc_stops)
inline = njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True, inline="always")


@register_pass(mutates_CFG=False, analysis_only=False)
class RebuildDefinitions(FunctionPass):
    """The IR's table of each variable's definitions, rebuilt from its blocks. numba's dead-branch pruning deletes
    the dead blocks but not their assignments from that table, and closure inlining finds a closure through it: a
    name assigned only in a pruned block would still lead to the closure (run_one's `stops`)."""
    _name = "rebuild_definitions"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        state.func_ir._definitions = build_definitions(state.func_ir.blocks)
        return True


class PruneFirst(CompilerBase):
    """numba's nopython pipeline with its dead-branch pruning (and the constant rewrite it reads) run once more
    before closures are inlined, for run_one. Inlining its closures (pull, answered, index_of, sift_down) runs
    dead-code elimination over the whole function, about 4.5 s of a first run's compile, most of run_one's; the
    default pipeline prunes only after it, so the branches a specialisation drops (the other policies', the
    reading rules' and live runs' code on a None argument) were still paid for there. Pruning first, that pass
    sees only the code the variant keeps, of run_one's own body: a test inside a closure is pruned only once the
    closure is inlined (hence run_one's `stops`)."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(RebuildDefinitions, WithLifting)  # (each lands right after WithLifting: this one last)
        pm.add_pass_after(DeadBranchPrune, WithLifting)
        pm.add_pass_after(RewriteSemanticConstants, WithLifting)
        pm.finalize()
        return [pm]


# run_one's decorator: an inner helper compiled with PruneFirst
inner_pruned = njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True, pipeline_class=PruneFirst)

# Indexing with an unsigned integer skips numba's negative-index wraparound (a compare and a select per access);
# the hot loops cast their (never negative) indices with it: 12-15% fewer ns per draw, measured.
_ix = np.uint64


@intrinsic
def prefetch(typingctx, arr, i, b):
    """Ask for the cache line `b` bytes past arr[i] (a row's start for a 2-d array) without waiting for it: llvm's
    prefetch (read, high locality). numba has no builtin for it. A hint only: it never faults, nothing depends on it.
    The run's next query is known (or likely) before the current decision ends; warming its state then lets the
    loads of the next decision overlap this one's work instead of following it (docs/performance.md, growth)."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer) or not isinstance(b, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, args[1], sig.args[1], types.intp)]
        idx += [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer2(context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
                                        cgutils.unpack_tuple(builder, ary.strides), aryty.layout, idx,
                                        wraparound=False, boundscheck=False)
        i8, i32 = ir.IntType(8), ir.IntType(32)
        at = builder.gep(builder.bitcast(ptr, i8.as_pointer()), [context.cast(builder, args[2], sig.args[2],
                                                                             types.intp)])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i32,
                                                                                            i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [at, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(arr, i, b), codegen



@jit
def mix64(z):
    """splitmix64 finaliser (a bijection on uint64 with full avalanche)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@jit
def seed_stream(seed, qkey):
    return mix64(mix64(np.uint64(seed) * _GOLDEN + _ONE) ^ qkey)


@inner
def swap_index(h, k, m):
    """Step k of query's forward Fisher-Yates (stream h, m responses) swaps position k with this one:
    k + floor(u * (m - k)) for a 32-bit uniform u from the hash of (h, k), by multiply-shift."""
    r = mix64(h + np.uint64(k + 1) * _GOLDEN)
    return k + np.int64(((r >> _S32) * np.uint64(m - k)) >> _S32)


@jit
def fill_permutation(off, qkeys, seed, perm):
    """perm[off[i] + k] = global index of the k-th response query i receives (forward Fisher-Yates).

    The first k entries depend only on the first k counters, so a policy that draws k responses sees the
    same k whatever it does later."""
    n = off.shape[0] - 1
    for i in range(n):
        a = off[i]
        m = off[i + 1] - a
        for k in range(m):
            perm[a + k] = a + k
        h = seed_stream(seed, qkeys[i])
        for k in range(m - 1):
            j = swap_index(h, k, m)
            t = perm[a + k]
            perm[a + k] = perm[a + j]
            perm[a + j] = t


@jit
def fill_query_order(qkeys, seed, rank, order):
    """order: the per-run random order of queries (by a hash of (seed, query key), ties by index); rank[i]:
    position of query i in it. The hashes are uniform, so a bucket sort on their top bits followed by an
    insertion sort runs in expected O(n) (an argsort was most of a short run's fixed cost)."""
    n = qkeys.shape[0]
    keys = np.empty(n, dtype=np.uint64)
    for i in range(n):
        keys[i] = mix64(seed_stream(seed, qkeys[i]) ^ _RANK_SALT)
    bits = 1
    while (1 << bits) < n:
        bits += 1
    shift = np.uint64(64 - bits)
    start = np.zeros((1 << bits) + 1, np.int64)
    for i in range(n):
        start[np.int64(keys[i] >> shift) + 1] += 1
    for b in range(1 << bits):
        start[b + 1] += start[b]
    for i in range(n):  # by bucket, by index within a bucket
        b = np.int64(keys[i] >> shift)
        order[start[b]] = i
        start[b] += 1
    for p in range(1, n):  # stable insertion sort: moves only within a bucket
        i = order[p]
        k = keys[i]
        q = p
        while q > 0 and keys[order[q - 1]] > k:
            order[q] = order[q - 1]
            q -= 1
        order[q] = i
    for p in range(n):
        rank[order[p]] = p


@jit
def pool_modes(off, aoff, ans):
    """Per answer slot (answer_offsets' layout): 1 when its answer is a most frequent valid answer of its query's
    whole pool, else 0 (the invalid answers' slots, a query without valid answers); engine.pool_modes says what for.
    One pass over the pool: numpy's repeat / bincount / maximum.at took 74 ms a grid call at 50,000 x 64, more than
    the decisions of the growth table's two seeds of uniform there (docs/performance.md)."""
    n = off.shape[0] - 1
    out = np.zeros(aoff[n], np.int8)
    width = 1
    for i in range(n):
        width = max(width, aoff[i + 1] - aoff[i])
    cnt = np.zeros(width, np.int64)
    for i in range(n):
        lo = aoff[i]
        w = aoff[i + 1] - lo
        for t in range(w):
            cnt[t] = 0
        top = 0
        for j in range(off[i], off[i + 1]):
            a = ans[j]
            if a >= 0:
                c = cnt[a + 1] + 1
                cnt[a + 1] = c
                top = max(top, c)
        for t in range(1, w):
            if cnt[t] > 0 and cnt[t] == top:
                out[lo + t] = 1
    return out


@jit
def answer_offsets(off, ans):
    """aoff[i]: the first answer slot of query i, which owns 2 + (its largest answer id) slots: one for
    invalid answers, one per answer id. Answer ids are dense ranks within a query, so a query with few
    distinct answers has a small block: cheap to clear between runs, and it stays in cache."""
    n = off.shape[0] - 1
    aoff = np.empty(n + 1, np.int64)
    aoff[0] = 0
    for i in range(n):
        mx = -1
        for j in range(off[i], off[i + 1]):
            mx = max(mx, ans[j])
        aoff[i + 1] = aoff[i] + 2 + mx
    return aoff


@jit
def kth_smallest(a, k):
    """The k-th smallest value of a (k from 0), by quickselect on a copy: expected O(len(a)). np.partition
    would do, but it alone added 3.5 s to the first run's compile."""
    b = a.copy()
    return _kth_in_place(b, b.shape[0], k)


@jit
def new_state(n, slots):
    """Fresh state for n queries with `slots` answer slots in all (answer_offsets(...)[n])."""
    qs = np.empty(n, QSTATE)
    si = np.zeros((slots, 2), np.int64)
    sf = np.zeros(slots)
    tot = np.zeros(TOT_SLOTS, np.int64)
    mm = np.empty((slots, 4), np.int64)  # (mmc_stops clears a query's rows when it first reads the query)
    for i in range(n):
        _reset_query(qs, i)
    for j in range(slots):
        si[j, FIRST_J] = -1
    return qs, si, sf, tot, mm


@inner
def _reset_query(qs, i):
    r = qs[i]
    r.n = 0
    r.best_j = -1
    r.covered = 0
    r.lead = -1
    r.lead_cnt = 0
    r.second_cnt = 0
    r.wlead = -1
    r.elim = 0
    r.capped = 0
    r.exh = 0
    r.ssum = 0.0
    r.best = -1.0
    r.s = 0.0
    r.wlead_sum = -1.0
    r.mm_p = 0
    r.mm_d = 0
    r.mm_last = -1
    r.mm_s1 = 0
    r.mm_f1 = 0
    r.mm_s2 = 0
    r.mm_f2 = 0
    r.mm_q1 = 0.5
    r.mm_q2 = 0.5


@inner
def reset_state(qs, si, sf, tot, off, aoff, ans, perm):
    """Back to the initial state, touching only the answer slots the run used (O(draws + n))."""
    n = off.shape[0] - 1
    for i in range(n):
        drawn = qs[i].n
        base = aoff[i]  # the query's answer slots: base (invalid), base + 1 + a (answer a)
        if 4 * drawn >= aoff[i + 1] - base:  # clear the whole block: sequential, cheaper than a walk
            for p in range(base, aoff[i + 1]):
                si[p, CNT] = 0
                si[p, FIRST_J] = -1
                sf[p] = 0.0
        else:  # clear only the slots of the answers drawn
            for k in range(drawn):
                p = off[i] + k
                a = ans[perm[p]]
                si[base + 1 + a, CNT] = 0
                si[base + 1 + a, FIRST_J] = -1
                sf[base + 1 + a] = 0.0
        _reset_query(qs, i)
    for k in range(TOT_SLOTS):
        tot[k] = 0


@inner
def restore_identity(off, perm, qgen, hs, epoch):
    """Undo this seed's lazy Fisher-Yates steps: every position a step touched (its own and the one it swapped
    with) gets its identity entry back, so the next seed starts from the identity at O(steps) cost. Cheaper per
    draw than stamping entries with the seed: no stamp loads and no data-dependent branches."""
    n = off.shape[0] - 1
    for i in range(n):
        if qgen[i, 1] != epoch:
            continue
        a = off[i]
        m = off[i + 1] - a
        g = qgen[i, 0]
        if 4 * g >= m:  # the whole block: sequential stores, cheaper than recomputing the swaps
            for p in range(a, a + m):
                perm[p] = p
        else:
            h = hs[i]
            for k in range(g):
                j = a + swap_index(h, k, m)
                perm[a + k] = a + k
                perm[j] = j


@jit
def stable_argsort(keys, m):
    """Indices that sort keys[:m] (non-negative integers) ascending, ties in index order. A counting sort when the
    keys span at most 4 m + 64 values (sample costs: at most the pool size), else a merge sort over insertion-
    sorted runs of 16 (token costs). np.argsort's mergesort alone cost ~3 s of the first run's compile."""
    out = np.empty(m, np.int64)
    if m == 0:
        return out
    lo = keys[0]
    hi = keys[0]
    for t in range(m):
        lo = min(lo, keys[t])
        hi = max(hi, keys[t])
    if hi - lo <= 4 * m + 64:
        start = np.zeros(hi - lo + 2, np.int64)
        for t in range(m):
            start[keys[t] - lo + 1] += 1
        for v in range(hi - lo + 1):
            start[v + 1] += start[v]
        for t in range(m):
            v = keys[t] - lo
            out[start[v]] = t
            start[v] += 1
        return out
    a = out
    for t in range(m):
        a[t] = t
    for lo_ in range(0, m, 16):  # insertion sort within runs of 16 (stable)
        for p in range(lo_ + 1, min(lo_ + 16, m)):
            x = a[p]
            q = p
            while q > lo_ and keys[a[q - 1]] > keys[x]:
                a[q] = a[q - 1]
                q -= 1
            a[q] = x
    b = np.empty(m, np.int64)
    width = 16
    while width < m:
        for lo_ in range(0, m, 2 * width):
            mid = min(lo_ + width, m)
            hi_ = min(lo_ + 2 * width, m)
            x, y, k = lo_, mid, lo_
            while x < mid and y < hi_:
                if keys[a[y]] < keys[a[x]]:
                    b[k] = a[y]
                    y += 1
                else:
                    b[k] = a[x]
                    x += 1
                k += 1
            while x < mid:
                b[k] = a[x]
                x += 1
                k += 1
            while y < hi_:
                b[k] = a[y]
                y += 1
                k += 1
        a, b = b, a
        width *= 2
    return a


@inline
def warm_block(a0, m, perm, score, tok, ans, correct):
    """Prefetch every cache line of the permutation entries and responses a0 .. a0 + m - 1 (at most 64 of them; the
    8-byte columns, and correct's bytes): a pull of several draws, or the oracle's walk, lands at random among them."""
    m = min(m, 64)
    if m <= 0:
        return
    for b in range(0, 8 * m + 63, 64):
        e = min(b, 8 * m - 1)
        prefetch(perm, a0, e)
        prefetch(score, a0, e)
        prefetch(tok, a0, e)
        prefetch(ans, a0, e)
    prefetch(correct, a0, 0)
    prefetch(correct, a0, m - 1)


@inline
def warm_records(a0, m, perm, resp):
    """warm_block's lines where the draws read the packed records (PoolArrays.resp): the permutation entries and
    the records a0 .. a0 + m - 1 (at most 64 of them)."""
    m = min(m, 64)
    if m <= 0:
        return
    for b in range(0, 8 * m + 63, 64):
        prefetch(perm, a0, min(b, 8 * m - 1))
    for b in range(0, 16 * m + 63, 64):
        prefetch(resp, a0, min(b, 16 * m - 1))


@inner
def oracle_candidates(P, W, epoch, unit, cost, first, cand):
    """The oracle's once-per-run plan: the queries with a correct response in their pool, in rank order (cand[:c]),
    with per query i the position of its first correct draw (first[i], -1 for none) and its cost (cost[i],
    responses or tokens up to it). Returns c. The draws are walked in memory order, a stream through the pool
    that the hardware prefetcher follows (in rank order each query's block was a miss: 4x the cost per query at
    50,000 x 64 as at 500, docs/performance.md); only the listing goes by rank."""
    off, correct, tok, perm, qgen, hs = P.off, P.correct, P.tok, W.perm, W.qgen, W.hs
    lazy = qgen.shape[0] > 0
    nq = off.shape[0] - 1
    big = off[nq] >= PREFETCH_FROM
    for i in range(nq):
        first[i] = -1
        if big and i + 2 < nq:  # the block after next: its draws land anywhere in it (a stream the prefetcher
            # follows line by line only when every line is read)
            a2, m2 = off[i + 2], min(off[i + 3] - off[i + 2], 64)
            for b in range(0, 8 * m2 + 63 if m2 > 0 else 0, 64):
                e = min(b, 8 * m2 - 1)
                prefetch(perm, a2, e)
                prefetch(tok, a2, e)
        solvable = False  # a query with no correct response in its pool is never a candidate: skip its draws
        for t in range(off[i], off[i + 1]):
            if correct[t] == 1:
                solvable = True
                break
        if not solvable:
            continue
        toks = 0
        a = off[i]
        m = off[i + 1] - a
        g = 0  # (lazy) the query's Fisher-Yates steps made so far this seed
        if lazy:
            if qgen[i, 1] != epoch:
                qgen[i, 1] = epoch
                qgen[i, 0] = 0
            g = qgen[i, 0]
        for k in range(m):
            if lazy and k == g:  # step k puts the k-th draw at position k (as run_one's pull)
                jj = a + swap_index(hs[i], k, m)
                x = perm[a + k]
                perm[a + k] = perm[jj]
                perm[jj] = x
                g += 1
            j = perm[a + k]
            toks += tok[j]
            if correct[j] == 1:
                cost[i] = k + 1 if unit == UNIT_SAMPLES else toks
                first[i] = k
                break
        if lazy:
            qgen[i, 0] = g
    c = 0
    for pos in range(nq):
        i = W.order[pos]
        if first[i] >= 0:
            cand[c] = i
            c += 1
    return c


@inner
def active_by_rank(qs, order, act):
    """act[:m] = the active queries of `order` (rank order; or any list, act[:w] itself included: each entry is read
    before one at or before it is written), in its order; returns m."""
    m = 0
    for pos in range(order.shape[0]):
        i = order[pos]
        if qs[i].elim == 0 and qs[i].capped == 0 and qs[i].exh == 0:
            act[m] = i
            m += 1
    return m


@inner
def stage2_split(qs, U, u, alloc, R, unit, n):
    """Two-stage's stage 2: what is left of the budget (R) split over the unanswered queries U[:u] in proportion
    to (sum + 1) / (N + 2). Samples: largest remainder (ties by rank, U's order), then U and alloc put in memory
    order, since allocations that sum to what is left may be drawn in any order. Tokens: a floor allowance each."""
    wq = np.empty(u)
    W = 0.0
    for t in range(u):
        wq[t] = (qs[U[t]].ssum + 1.0) / (qs[U[t]].n + 2.0)
        W += wq[t]
    if unit != UNIT_SAMPLES:
        for t in range(u):
            alloc[t] = np.int64(math.floor(R * wq[t] / W))
        return
    negfrac = np.empty(u)
    total = 0
    for t in range(u):
        x = R * wq[t] / W
        alloc[t] = np.int64(math.floor(x))
        negfrac[t] = -(x - alloc[t])
        total += alloc[t]
    r = min(R - total, u)  # the r smallest negfrac get one more; ties go by rank (U's order)
    if r > 0:
        thr = kth_smallest(negfrac, r - 1)
        below = 0
        for t in range(u):
            below += negfrac[t] < thr
        ties = r - below
        for t in range(u):
            if negfrac[t] < thr:
                alloc[t] += 1
            elif negfrac[t] == thr and ties > 0:
                alloc[t] += 1
                ties -= 1
    slot = np.empty(n, np.int64)
    slot[:] = -1
    for t in range(u):
        slot[U[t]] = alloc[t]
    t = 0
    for pos in range(n):
        if slot[pos] >= 0:
            U[t] = pos
            alloc[t] = slot[pos]
            t += 1


@jit
def optscale_target(drawn, wins, lo, cap, pct):
    """optscale's N_i (docs/semantics.md): with p = wins / drawn the estimated chance that a draw succeeds, the
    smallest N >= 1 with (1 - p)^N <= pct (the product (drawn - wins) / drawn multiplied N times from 1.0, so that
    the reference computes the same bits), raised to lo (the warm-up) and at most cap; cap when no N up to cap
    reaches it (the source's `return max_N`), at once when no warm-up draw succeeded."""
    if wins == 0 or drawn == 0:
        return cap
    q = (drawn - wins) / drawn
    t = 1.0
    k = 0
    while k < cap:
        k += 1
        t *= q
        if t <= pct:
            break
    return min(max(lo, k), cap)


@inner
def gain_index(prior, qs, i, c0, gamma):
    """marginal-gain's index of query i: the expected gain of its next response, 0 once one of its draws reached
    gamma (solved), else c0 p / (c0 + N), the mean of the Beta(c0 p, c0 (1 - p)) prior (mean p = prior[i], the
    prediction; strength c0) updated by its N draws, all failures; with no prediction (NaN) Laplace's, p = 1/2 and
    c0 = 2. A function of its own rather than a branch of run_one's index_of: the branch there cost ~1 s of compile."""
    if qs[i].best >= gamma:
        return 0.0
    pm = prior[i]
    if pm != pm:
        pm, c0 = 0.5, 2.0
    return c0 * pm / (c0 + qs[i].n)


REFRESH = np.int64(-1)  # side_eb's query for a refresh (an int64: with a literal -1 numba compiled side_eb twice)
INT64_MAX = np.iinfo(np.int64).max  # (a constant: np.iinfo in the kernel compiled two library functions)
EB_SHRINK = 32.0  # side-eb: the bins' ratios start at 1 with this many expected successes (docs/semantics.md)
EB_HMAX = 1024  # side-eb --horizon 1: the longest horizon h, in draws (docs/semantics.md)


@inner
def side_eb(hk, hr, hq, size, qs, ex, eb, i, n0, side, tok, perm, off, nb, c0, unit, tot, hz, budget):
    """side-eb's bookkeeping (docs/semantics.md), one function (each njit function costs compile time).
    i >= 0: fold in the pull of query i that held n0 draws (all failures): the bin it was in gains the pull's draws
    (and, a failed bin, the successes the base rate expected of them, before this pull's news) and a success when
    the pull answered it, as does row nb + 1 (the failed bins together) for a failed bin; its side and token sums
    take in the new draws; returns its new index. i < 0: the refresh: every query in the heap gets its index anew,
    then Floyd's construction (the order of the tops depends only on the keys and ranks, not on the positions).
    The index of q: N = 0: (successes + 1) / (draws + 2) of the first draws (row nb); N >= 1: the base rate
    c0 M / (c0 + N), M = (successes + 1) / (draws + 2) of row nb + 1, times its bin's ratio (successes + a) /
    (expected + a), a = EB_SHRINK, its bin floor(nb x) clamped to 0 .. nb - 1, x = ex[q, 0] / N, the mean side
    signal of its draws; hz = 1 (--horizon 1): instead P(a success within h draws) / E[draws used], the rates
    p_k along the way the same model's at N + k (k = 0 .. h - 1; N + k = 0: row nb's; N = 0, k >= 1: ratio 1), each
    at most 1, h = (budget left in draws) // (queries in the heap), 1 .. EB_HMAX; unit tokens: divided by 1 + its
    expected cost, (its tokens + the run's mean per draw) / (N + 1)."""
    lo, hi = 0, size
    if i >= 0:
        lo, hi = -1, 0
        b = nb
        nd = qs[i].n
        if n0 > 0:
            b = min(nb - 1, max(0, np.int64(math.floor(ex[i, 0] / n0 * nb))))
            eb[b, 2] += (nd - n0) * (c0 * ((eb[nb + 1, 0] + 1.0) / (eb[nb + 1, 1] + 2.0)) / (c0 + n0))
        for k in range(n0, nd):
            j = perm[off[i] + k]
            ex[i, 0] += side[j] if side.shape[0] > 0 else 0.5
            ex[i, 1] += tok[j]
        for r in range(b, b + 2 if b < nb else b + 1):  # its bin, and row nb + 1 for a failed bin
            rr = nb + 1 if r > b else b
            eb[rr, 1] += nd - n0
            if qs[i].elim:
                eb[rr, 0] += 1.0
    g = 0.0
    mbar = 1.0 if tot[SAMPLES] == 0 else tot[TOKENS] / tot[SAMPLES]
    h = np.int64(1)
    if hz > 0 and size > 0:  # the draws each query in the heap can still get on average
        if unit == UNIT_TOKENS:  # (mbar 0: every draw so far was free)
            x = EB_HMAX if mbar <= 0.0 else (budget - tot[TOKENS]) / mbar / size
            h = np.int64(EB_HMAX if x >= EB_HMAX else math.floor(x))
        else:
            h = (budget - tot[SAMPLES]) // size
        h = min(EB_HMAX, max(1, h))
    for t in range(lo, hi):
        q = i if t < 0 else hq[t]
        nd = qs[q].n
        ratio = 1.0
        if nd > 0:
            b = min(nb - 1, max(0, np.int64(math.floor(ex[q, 0] / nd * nb))))
            ratio = (eb[b, 0] + EB_SHRINK) / (eb[b, 2] + EB_SHRINK)
        num, den, surv = 0.0, 0.0, 1.0
        for k in range(h):
            if nd + k == 0:
                g = (eb[nb, 0] + 1.0) / (eb[nb, 1] + 2.0)
            else:
                g = c0 * ((eb[nb + 1, 0] + 1.0) / (eb[nb + 1, 1] + 2.0)) / (c0 + (nd + k))
                g = g * ratio
            if hz > 0:
                g = min(1.0, g)
                den += surv
                num += surv * g
                surv *= 1.0 - g
        if hz > 0:
            g = num / den
        if unit == UNIT_TOKENS:
            g = g / ((ex[q, 1] + mbar) / (nd + 1) + 1.0)
        if t >= 0:
            hk[t] = g
    if i < 0:
        heapify(hk, hr, hq, size)
    return g


@inner
def optscale_caps(qs, score, off, perm, cap, warmup, max_samples, gamma, pct):
    """After optscale's warm-up: cap[i] = query i's N_i from its draws that reach gamma (optscale_target, at most
    max_samples, else its pool size), and capped = it holds N_i (or max_samples) already; exhausted queries keep
    what they have."""
    for i in range(qs.shape[0]):
        nd = qs[i].n
        qs[i].capped = 1 if max_samples > 0 and nd >= max_samples else 0
        if qs[i].exh or qs[i].capped:
            continue
        wins = np.int64(0)  # (not a literal 0: that compiled optscale_target a second time)
        for k in range(nd):
            wins += score[perm[off[i] + k]] >= gamma
        cap[i] = optscale_target(nd, wins, warmup, max_samples if max_samples > 0 else off[i + 1] - off[i], pct)
        if nd >= cap[i]:
            qs[i].capped = 1


@inner
def dsc_judge(qs, off, tot, U, alloc, st, K, judge):
    """dsc's partition (docs/semantics.md), the source's binary search over U (the queries easiest first) for the
    easy prefix, in st's ds_* fields (SCHED): returns the next judge that must draw its first window (the caller pulls
    K - N for it, then sets alloc[st.ds_next] = 1 and moves ds_next on), or -1 once the search is over. ds_hi = -1
    before the first call; alloc[pos] = 1 once position pos is judged. A function of its own: in run_one's loop this
    code cost ~1 s of compile."""
    n = U.shape[0]
    if st.ds_hi < 0:
        for t in range(n):
            alloc[t] = 0
        st.ds_hi = n
        st.ds_mid = n // 2
        st.ds_first, st.ds_end = max(0, st.ds_mid - judge // 2), min(st.ds_mid + judge // 2, n)
        st.ds_next = st.ds_first
    while True:
        jb = st.ds_next
        if jb < st.ds_end:
            i = U[jb]
            n_i = qs[i].n
            if alloc[jb] or qs[i].elim or qs[i].capped or qs[i].exh or n_i >= K:
                alloc[jb] = 1  # nothing to draw: easy if answered (its rule was checked on what it holds)
                st.ds_next = jb + 1
                continue
            if n_i == off[i + 1] - off[i]:  # its pool is used up before its first window is full
                alloc[jb] = 1
                qs[i].exh = 1
                tot[EXHAUSTED] += 1
                st.ds_next = jb + 1
                continue
            return i
        easy = True
        for t in range(st.ds_first, st.ds_end):
            if qs[U[t]].elim == 0:
                easy = False
                break
        if easy:  # every query from lo to the midpoint is easy: it draws nothing more
            for t in range(st.ds_lo, st.ds_mid + 1):
                qs[U[t]].elim = 1
            st.ds_lo = st.ds_mid + 1
        else:
            st.ds_hi = st.ds_mid
        if st.ds_lo >= st.ds_hi:
            return -1
        st.ds_mid = (st.ds_lo + st.ds_hi) // 2
        st.ds_first, st.ds_end = max(0, st.ds_mid - judge // 2), min(st.ds_mid + judge // 2, n)
        st.ds_next = st.ds_first


@inner
def heapify(hk, hr, hq, size):
    """Floyd's bottom-up heap construction on (key desc, rank asc), for an index rule whose first indices are not
    all +inf (marginal-gain: the predictions). The heap is 4-ary (run_one's sift_down says why)."""
    for p0 in range((size - 2) // 4, -1, -1):
        sift_from(hk, hr, hq, size, p0, hk[p0], hr[p0], hq[p0])


@inner
def sift_from(hk, hr, hq, size, p, k, r, q):
    """Place (key k, rank r, query q) at heap position p of the 4-ary heap and sift it down (key desc, rank asc):
    heapify's step and uab_split's. run_one keeps its own branch-free copy, a closure (sift_down)."""
    while True:
        c = 4 * p + 1
        if c >= size:
            break
        for t in range(c + 1, min(c + 4, size)):
            if hk[t] > hk[c] or (hk[t] == hk[c] and hr[t] < hr[c]):
                c = t
        if hk[c] > k or (hk[c] == k and hr[c] < r):
            hk[p], hr[p], hq[p] = hk[c], hr[c], hq[c]
            p = c
        else:
            break
    hk[p], hr[p], hq[p] = k, r, q


@inner
def uab_split(qs, side, perm, off, U, alloc, hk, hr, hq, tau, cap, budget, tot, unit):
    """UAB's phase 2 (docs/semantics.md): each query holding its one phase-1 draw gets p = exp(ln(conf) / tau), conf
    its draw's side signal (exp(-ANLL), so p is the source's exp(-ANLL / tau)); the draws left go one at a time to
    the largest p (1 - p)^c (c: what it got so far; the key multiplied by 1 - p per draw, as the reference does),
    ties to the lowest query index (the source's np.argmax over its questions), at most its pool's rest and the cap.
    Draws left: the sample budget's rest; tokens: the token budget's rest over phase 1's mean tokens per draw, and
    each query then gets an allowance of the tokens left in proportion to its draws. Fills U[:u], alloc[:u] in
    memory order (two-stage's stage 2 draws them) and returns u. hk, hr, hq: the index rules' heap (not in use)."""
    n = qs.shape[0]
    p = np.empty(n)
    room = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        alloc[i] = 0
        room[i] = 0
        if cap > 0 and qs[i].n >= cap:
            qs[i].capped = 1
        if qs[i].n == 0 or qs[i].exh or qs[i].capped:
            continue
        x = side[perm[off[i]]] if side.shape[0] > 0 else 0.5  # (an empty side: none, 0.5 everywhere)
        p[i] = math.exp(math.log(x) / tau) if x > 0.0 else 0.0
        r = off[i + 1] - off[i] - qs[i].n
        room[i] = min(r, cap - qs[i].n) if cap > 0 else r
        if room[i] > 0:
            hk[size], hr[size], hq[size] = p[i], i, i
            size += 1
    hk[size] = -np.inf
    heapify(hk, hr, hq, size)
    left = budget - tot[SAMPLES] if unit == UNIT_SAMPLES else budget - tot[TOKENS]
    E = left
    if unit != UNIT_SAMPLES:
        mbar = tot[TOKENS] / tot[SAMPLES] if tot[SAMPLES] > 0 else 0.0
        E = INT64_MAX if mbar <= 0.0 else np.int64(min(math.floor(left / mbar), 4.0e18))
    total = np.int64(0)
    while total < E and size > 0:
        i = hq[0]
        alloc[i] += 1
        total += 1
        if alloc[i] >= room[i]:  # its pool's rest or its cap: it leaves the heap
            size -= 1
            k, r, q = hk[size], hr[size], hq[size]
            hk[size] = -np.inf
        else:
            k, r, q = hk[0] * (1.0 - p[i]), hr[0], i
        sift_from(hk, hr, hq, size, 0, k, r, q)
    u = 0
    for i in range(n):  # (u <= i: alloc[i] is read before alloc[u] is written)
        if alloc[i] > 0:
            a = alloc[i]
            U[u] = i
            alloc[u] = a if unit == UNIT_SAMPLES else np.int64(math.floor(left * a / total))
            u += 1
    return u


@jit
def okg_lead_prob(c, m):
    """pets: I = P(bucket 0 has the largest share) under Dirichlet(c[0] + 1, .., c[m - 1] + 1), c sorted descending
    (c[0] the leading count): for independent Gamma(c_k + 1) variables, the integral over x of the Gamma(c[0] + 1)
    density (Poisson(x)'s pmf at c[0]) times each other's CDF (P(Poisson(x) > c_k)), by Simpson's rule with
    OKG_NODES intervals (8 times as many below a = 8) on [max(0, a - 10 sqrt(a) - 10), a + 10 sqrt(a) + 30], a =
    c[0] + 1 (the mass of the Gamma(a) density outside it is below 1e-13): within 1e-8 of the closed forms
    (tests/test_pets.py). Every count is <= c[0], so one upward pass over the Poisson terms
    at each node gives every CDF. replay/reference.py's okg_lead_prob is this code in plain Python, operation for
    operation (so both give the same bits: the rewards they compare tie exactly where they should)."""
    a = c[0] + 1
    fa = float(a)
    lo = max(0.0, fa - 10.0 * math.sqrt(fa) - 10.0)
    hi = fa + 10.0 * math.sqrt(fa) + 30.0
    nodes = OKG_NODES if a >= 8 else 8 * OKG_NODES  # a small leading count: a narrow density, finer steps
    h = (hi - lo) / nodes
    cum = np.empty(a)
    total = 0.0
    for k in range(nodes + 1):
        x = lo + k * h
        term = math.exp(-x)
        acc = term
        cum[0] = acc
        for j in range(1, a):
            term = term * x / j
            acc += term
            cum[j] = acc
        f = term  # Poisson(x)'s pmf at a - 1: the Gamma(a) density at x
        for t in range(1, m):
            f *= 1.0 - cum[c[t]]
        w = 1.0 if k == 0 or k == nodes else (4.0 if k % 2 == 1 else 2.0)
        total += w * f
    return total * h / 3.0


@jit
def okg_reward(c, m):
    """pets: OKG's reward of one more draw for a query whose m option buckets hold the counts c (sorted descending;
    buckets never drawn count 0): max over the buckets of h(c + e_k) - h(c), h the largest argmax probability (the
    leading bucket's, okg_lead_prob). Buckets with equal counts give the same term, so one term per distinct count;
    c is restored before it returns. Every h but the leader's gain (position 0 one higher: a wider Gamma) shares h(c)'s
    nodes, Poisson terms and the product's factors before the changed one, so one pass over the nodes computes them
    all (okg_lead_prob's operations on each, in its order: the same bits), at about a third of the cost."""
    a = c[0] + 1
    fa = float(a)
    lo = max(0.0, fa - 10.0 * math.sqrt(fa) - 10.0)
    hi = fa + 10.0 * math.sqrt(fa) + 30.0
    nodes = OKG_NODES if a >= 8 else 8 * OKG_NODES
    h = (hi - lo) / nodes
    cum = np.empty(a)
    tot = np.zeros(m)  # tot[0]: h(c)'s sum; tot[t], t >= 1 the first bucket of a count: h(c + e_t)'s
    for k in range(nodes + 1):
        x = lo + k * h
        term = math.exp(-x)
        acc = term
        cum[0] = acc
        for j in range(1, a):
            term = term * x / j
            acc += term
            cum[j] = acc
        w = 1.0 if k == 0 or k == nodes else (4.0 if k % 2 == 1 else 2.0)
        f = term
        for t in range(1, m):
            v = c[t]
            if v != c[t - 1]:  # c + e_t (v + 1 <= c[t - 1]: still sorted): the same product up to t, then
                # 1 - cum[v + 1] and the rest
                g = f * (1.0 - cum[v + 1])
                for s in range(t + 1, m):
                    g *= 1.0 - cum[c[s]]
                tot[t] += w * g
            f *= 1.0 - cum[v]
        tot[0] += w * f
    base = tot[0] * h / 3.0
    v = c[0]
    c[0] = v + 1
    best = okg_lead_prob(c, m) - base
    c[0] = v
    for t in range(1, m):
        if c[t] != c[t - 1]:
            d = tot[t] * h / 3.0 - base
            if d > best:
                best = d
    return best


@inner
def okg_memo_reward(c, m, nb, mh, mk, mv):
    """pets: okg_reward(c, m) through a run's memo (mh: a slot's hash, 0 while free; mk: its count vector; mv: its
    reward). The reward is a function of the sorted counts alone, and a run revisits few of them (every query starts
    from one answer, then (2), (1, 1), ...), so each distinct vector pays its 3-5 quadratures once, not at every
    pull: the same bits as okg_reward. c[:nb] are the nonzero counts, the rest 0."""
    cap = mh.shape[0]
    if cap == 0:
        return okg_reward(c, m)
    h = _ONE
    for t in range(nb):
        h = mix64(h ^ (np.uint64(c[t]) * _GOLDEN + _ONE))
    h |= _ONE  # never 0, a free slot's mark
    home = np.int64(h & np.uint64(cap - 1))
    for d in range(PETS_PROBE):
        s = (home + d) & (cap - 1)
        if mh[s] == 0:
            home = s  # a free slot: the vector goes here
            break
        if mh[s] == h:  # the same vector if the same nonzero counts and no more of them (the rest are 0)
            t = 0
            while t < nb and mk[s, t] == c[t]:
                t += 1
            if t == nb and (nb == m or mk[s, nb] == 0):
                return mv[s]
    v = okg_reward(c, m)
    mh[home] = h
    for t in range(m):
        mk[home, t] = c[t]
    mv[home] = v
    return v


@inner
def pets_index(ans, perm, off, i, nd, M, mc, key, mh, mk, mv):
    """pets: query i's OKG reward from its nd draws: its valid answers in draw order fill M option buckets (a new
    answer when all M hold one is discarded, as the source's `_consume_one`; an invalid answer counts in none).
    Exact with mc = 0 (through the run's memo mh, mk, mv: okg_memo_reward), else the source's Monte Carlo estimate
    from mc draws per h (okg_mc_reward, drawn from key)."""
    ids = np.empty(M, np.int64)
    c = np.zeros(M, np.int64)
    nb = 0
    for k in range(nd):
        a = ans[perm[off[i] + k]]
        if a < 0:
            continue
        t = 0
        while t < nb and ids[t] != a:
            t += 1
        if t < nb:
            c[t] += 1
        elif nb < M:
            ids[nb] = a
            c[nb] = 1
            nb += 1
    for t in range(1, nb):  # descending (insertion sort: nb <= M, a handful)
        v = c[t]
        u = t
        while u > 0 and c[u - 1] < v:
            c[u] = c[u - 1]
            u -= 1
        c[u] = v
    return okg_memo_reward(c, M, nb, mh, mk, mv) if mc == 0 else okg_mc_reward(c, M, mc, key)


@jit
def okg_probs(c, m, out):
    """pets_mc: the whole I vector, out[t] = P(bucket t has the largest share) under Dirichlet(c + 1), c sorted
    descending: for each distinct count v, the integral of the Gamma(v + 1) density times every other bucket's CDF,
    by Simpson's rule with OKG_MC_NODES intervals (8 times as many below v + 1 = 8) on okg_lead_prob's range for
    a = v + 1; buckets of equal count share it. replay/reference.py's okg_probs is this code, operation for
    operation (the draws it feeds compare uniforms with its running sums, so both must give the same bits)."""
    top = c[0]
    cum = np.empty(top + 1)
    t = 0
    while t < m:
        v = c[t]
        fa = float(v + 1)
        lo = max(0.0, fa - 10.0 * math.sqrt(fa) - 10.0)
        hi = fa + 10.0 * math.sqrt(fa) + 30.0
        nodes = OKG_MC_NODES if v + 1 >= 8 else 8 * OKG_MC_NODES
        h = (hi - lo) / nodes
        total = 0.0
        for k in range(nodes + 1):
            x = lo + k * h
            term = math.exp(-x)
            acc = term
            cum[0] = acc
            f = term
            for j in range(1, top + 1):
                term = term * x / j
                acc += term
                cum[j] = acc
                if j == v:
                    f = term  # Poisson(x)'s pmf at v: the Gamma(v + 1) density at x
            for s in range(m):
                if s != t:
                    f *= 1.0 - cum[c[s]]
            w = 1.0 if k == 0 or k == nodes else (4.0 if k % 2 == 1 else 2.0)
            total += w * f
        p = total * h / 3.0
        u = t
        while u < m and c[u] == v:
            out[u] = p
            u += 1
        t = u


@jit
def okg_mc_h(p, m, mc, key, cnt):
    """pets_mc: the source's estimate of h = max_m I_m from mc draws (its _estimate_I_vector: the argmax of mc Gamma
    vectors, i.e. a categorical draw from the exact I, here by inverse CDF from hashed uniforms, the r-th one
    mix64(key + (r + 1) * golden)); the largest bucket count over mc."""
    for t in range(m):
        cnt[t] = 0
    for r in range(mc):
        u = np.float64(mix64(key + np.uint64(r + 1) * _GOLDEN) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
        t = 0
        acc = p[0]
        while u >= acc and t < m - 1:
            t += 1
            acc += p[t]
        cnt[t] += 1
    best = 0
    for t in range(m):
        if cnt[t] > best:
            best = cnt[t]
    return best / mc


@jit
def okg_mc_reward(c, m, mc, key):
    """pets_mc: OKG's reward as the source computes it (select_next): h of the base counts estimated once, then for
    every one of the m buckets (equal counts included: each its own estimate) h of the counts with that bucket one
    higher, estimated afresh; the largest difference. Estimate e (0 the base, 1 + k bucket k) draws from the key
    mix64(key + (e + 1) * golden)."""
    p = np.empty(m)
    q = np.empty(m)
    cnt = np.empty(m, np.int64)
    okg_probs(c, m, p)
    base = okg_mc_h(p, m, mc, mix64(key + _GOLDEN), cnt)
    best = -np.inf
    for k in range(m):
        v = c[k]
        if k == 0 or c[k - 1] != v:  # a new group: its first bucket one higher keeps the order
            c[k] = v + 1
            okg_probs(c, m, q)
            c[k] = v
        d = okg_mc_h(q, m, mc, mix64(key + np.uint64(k + 2) * _GOLDEN), cnt) - base
        if d > best:
            best = d
    return best


@inner
def pets_key(tok, score, perm, a0, n, i, t):
    """pets_mc: the key of query i's noisy reward at the step after t draws in all: a hash of i, of its n draws'
    token counts and scores in order (as boinf_uniform: a replay and a live run of the same draws hash the same)
    and of t, so that every step draws every query's reward afresh, as the source does."""
    h = mix64(_PETS_SALT ^ np.uint64(i))
    for k in range(a0, a0 + n):
        j = perm[k]
        h = mix64(h ^ (np.uint64(tok[j]) * _GOLDEN + _ONE))
        h = mix64(h ^ np.uint64(score[j] * 4294967296.0))
    return mix64(h ^ (np.uint64(t) * _GOLDEN + _ONE))



# pets-online (the source's FillintheBlank_online.py; reference.py's pets_* twins, docs/semantics.md)
PETS_K0 = 4  # accepted warm-up answers, whose agreement names a query's bucket
PETS_KMIN, PETS_KMAX = 3, 32  # the probit's fit over k = 3 .. 32
PETS_BMAX = 64  # the plan's cap per query without max_samples
PETS_CLIP = 1e-12


@inner
def ndtri(p):
    """The standard normal quantile, Wichura's AS241 (reference.ndtri, operation for operation)."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        num = (((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r
                   + 45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r
                + 133.14166789178437745) * r + 3.387132872796366608)
        den = (((((((5226.495278852545925 * r + 28729.085735721942674) * r + 39307.89580009271061) * r
                   + 21213.794301586595867) * r + 5394.1960214247511077) * r + 687.1870074920579083) * r
                + 42.313330701600911252) * r + 1.0)
        return q * num / den
    r = p if q <= 0.0 else 1.0 - p
    r = math.sqrt(-math.log(r))
    if r <= 5.0:
        r = r - 1.6
        num = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r + 0.24178072517745061177) * r
                   + 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.7694972214606914055) * r
                + 4.6303378461565452959) * r + 1.42343711074968357734)
        den = (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r + 0.0151986665636164571966) * r
                   + 0.14810397642748007459) * r + 0.68976733498510000455) * r + 1.6763848301838038494) * r
                + 2.05319162663775882187) * r + 1.0)
    else:
        r = r - 5.0
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 0.0012426609473880784386) * r
                   + 0.026532189526576123093) * r + 0.29656057182850489123) * r + 1.7848265399172913358) * r
                + 5.4637849111641143699) * r + 6.6579046435011037772)
        den = (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r + 1.8463183175100546818e-5) * r
                   + 7.868691311456132591e-4) * r + 0.0148753612908506148525) * r + 0.13692988092273580531) * r
                + 0.59983220655588793769) * r + 1.0)
    x = num / den
    return -x if q < 0.0 else x


@inner
def pets_curve_fit(c, m1, mc, key):
    """pets-online: (a, b) of the probit fitted to A(k), k = 3 .. 32, the chance that the majority of k draws from
    the shares of the counts c[:m1] (sorted descending, all > 0) is the top answer, ties split: exactly (mc = 0) or
    as the source's mc-draw estimate (reference.pets_curve and pets_fit: q[k, t], the chance that the top wins tied
    with t others, from D[t, s], the sums of prod p_i^c_i / c_i! over the others' counts <= c0 summing to s, t of
    them equal to c0; the estimate's draws by inverse CDF over q[k] from hashed uniforms)."""
    K = PETS_KMAX
    tot = 0.0
    for o in range(m1):
        tot += c[o]
    m = m1 - 1
    fact = np.ones(K + 1)
    for k in range(1, K + 1):
        fact[k] = fact[k - 1] * k
    A = np.zeros(K + 1)
    A[0] = 0.5
    p0 = c[0] / tot
    q = np.zeros((K + 1, m + 1))
    D = np.zeros((m + 1, K + 1))
    N = np.zeros((m + 1, K + 1))
    w = np.zeros(K + 1)
    for c0 in range(1, K + 1):
        S = K - c0
        for t in range(m + 1):
            for s in range(S + 1):
                D[t, s] = 0.0
        D[0, 0] = 1.0
        for o in range(1, m + 1):
            po = c[o] / tot
            for x in range(min(c0, S) + 1):
                w[x] = po ** x / fact[x]
            for t in range(m + 1):
                for s in range(S + 1):
                    N[t, s] = 0.0
            for t in range(o):
                for s in range(S + 1):
                    v = D[t, s]
                    if v == 0.0:
                        continue
                    for x in range(min(c0, S - s) + 1):
                        if x == c0:
                            N[t + 1, s + x] += v * w[x]
                        else:
                            N[t, s + x] += v * w[x]
            for t in range(m + 1):
                for s in range(S + 1):
                    D[t, s] = N[t, s]
        lead = p0 ** c0 / fact[c0]
        for k in range(c0, K + 1):
            for t in range(m + 1):
                q[k, t] += fact[k] * lead * D[t, k - c0]
    n = np.zeros(m + 2, np.int64)
    for k in range(1, K + 1):
        if mc > 0 and k >= PETS_KMIN:
            kk = mix64(key ^ (np.uint64(k) * _GOLDEN + _ONE))
            for t in range(m + 2):
                n[t] = 0
            for r in range(mc):
                u = np.float64(mix64(kk + np.uint64(r + 1) * _GOLDEN) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
                t = 0
                acc = q[k, 0]
                while u >= acc and t < m + 1:
                    t += 1
                    acc += q[k, t] if t <= m else 1.0
                n[t] += 1
            for t in range(m + 1):
                A[k] += n[t] / (1 + t)
            A[k] = A[k] / mc
        else:
            for t in range(m + 1):
                A[k] += q[k, t] / (1 + t)
    nk = K - PETS_KMIN + 1
    xm, ym = 0.0, 0.0
    for k in range(PETS_KMIN, K + 1):
        xm += math.sqrt(k)
        ym += ndtri(min(max(A[k], PETS_CLIP), 1.0 - PETS_CLIP))
    xm /= nk
    ym /= nk
    sxy, sxx = 0.0, 0.0
    for k in range(PETS_KMIN, K + 1):
        x = math.sqrt(k)
        y = ndtri(min(max(A[k], PETS_CLIP), 1.0 - PETS_CLIP))
        sxy += (x - xm) * (y - ym)
        sxx += (x - xm) * (x - xm)
    a = sxy / sxx
    return a, ym - a * xm


@inner
def pets_gain(k, a, b):
    """pets-online: Phi(a sqrt(k + 1) + b) - Phi(a sqrt(k) + b) through the log survival functions, as the
    source's stable_marginal_gain_probit_sqrtk (reference.pets_gain)."""
    x1 = a * math.sqrt(k) + b
    x2 = a * math.sqrt(k + 1) + b
    e1 = 0.5 * math.erfc(x1 / math.sqrt(2.0))
    e2 = 0.5 * math.erfc(x2 / math.sqrt(2.0))
    if e1 <= 0.0 or e2 <= 0.0:
        return 0.5 * math.erfc(-x2 / math.sqrt(2.0)) - 0.5 * math.erfc(-x1 / math.sqrt(2.0))
    l1, l2 = math.log(e1), math.log(e2)
    if l1 < l2:
        l1, l2 = l2, l1
    return math.exp(l1) * -math.expm1(l2 - l1)


@inner
def pets_plan(off, ans, tok, order, T, M, budget, unit, bmax, mc):
    """pets-online's plan (reference.pets_online_plan and pets_plan): the two buckets' budgets in draws, from the
    whole pools of the first T queries of the order (hindsight) that hold at least K0 valid answers."""
    n = off.shape[0] - 1
    T = min(T, n)
    fa = np.zeros(T)
    fb = np.zeros(T)
    fg = np.zeros(T)
    q = 0
    ntok = 0
    nresp = 0
    for r in range(T):
        i = order[r]
        a0 = off[i]
        size = off[i + 1] - a0
        cnt = np.zeros(size + 1, np.int64)  # every valid answer's count in the pool
        cap = np.zeros(size + 1, np.int64)  # the first M distinct ones' counts, in the order first seen
        slot = np.empty(size + 1, np.int64)
        for x in range(size + 1):
            slot[x] = -1
        distinct = 0
        valid = 0
        for j in range(a0, a0 + size):
            ntok += tok[j]
            nresp += 1
            x = ans[j]
            if x < 0:
                continue
            valid += 1
            cnt[x] += 1
            if slot[x] < 0 and distinct < M:
                slot[x] = distinct
                distinct += 1
            if slot[x] >= 0:
                cap[slot[x]] += 1
        if valid < PETS_K0:
            continue
        c = np.empty(distinct)
        for e in range(distinct):  # descending, by insertion (a few answers)
            v = cap[e]
            d = e
            while d > 0 and c[d - 1] < v:
                c[d] = c[d - 1]
                d -= 1
            c[d] = v
        fa[q], fb[q] = pets_curve_fit(c, distinct, mc, mix64(_PETS_CURVE_SALT ^ np.uint64(i)))
        agree = 0
        for x in range(size):
            agree += cnt[x] * (cnt[x] - 1) * (cnt[x] - 2) * (cnt[x] - 3) // 24
        fg[q] = agree / (valid * (valid - 1) * (valid - 2) * (valid - 3) // 24)
        q += 1
    bbar = budget / n if n > 0 else 0.0
    if unit == UNIT_TOKENS:
        bbar = bbar / (ntok / nresp) if ntok > 0 else np.inf
    if q == 0:  # no training query can warm up: the fixed baseline
        f = max(PETS_K0, min(bmax, int(bbar)) if bbar < np.inf else bmax)
        return f, f
    m0, m1 = 0.0, 0.0
    for r in range(q):
        m0 += fg[r]
    for r in range(q):
        m1 += 1.0 - fg[r]
    m0 /= q
    m1 /= q
    pi0 = m0 / (m0 + m1 + 1e-12)
    pi1 = m1 / (m0 + m1 + 1e-12)
    w0, w1, sa0, sa1, sb0, sb1 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for r in range(q):
        w0 += fg[r]
    for r in range(q):
        w1 += 1.0 - fg[r]
    for r in range(q):
        sa0 += fg[r] * fa[r]
    for r in range(q):
        sa1 += (1.0 - fg[r]) * fa[r]
    for r in range(q):
        sb0 += fg[r] * fb[r]
    for r in range(q):
        sb1 += (1.0 - fg[r]) * fb[r]
    a_0, a_1 = sa0 / (w0 + 1e-12), sa1 / (w1 + 1e-12)
    b_0, b_1 = sb0 / (w0 + 1e-12), sb1 / (w1 + 1e-12)
    B0, B1 = PETS_K0, PETS_K0
    used = pi0 * B0 + pi1 * B1
    if used >= bbar:
        return B0, B1
    # the source's heap of (-gain, bucket) holds at most one entry per bucket: in0 / in1 and their gains
    g0 = pets_gain(B0, a_0, b_0) if B0 + 1 <= bmax else -np.inf
    g1 = pets_gain(B1, a_1, b_1) if B1 + 1 <= bmax else -np.inf
    in0, in1 = g0 > 0, g1 > 0
    eps = 1e-12
    while (in0 or in1) and used + eps < bbar:
        t = 0 if in0 and (not in1 or g0 >= g1) else 1
        if t == 0:
            in0 = False
            if used + pi0 > bbar + eps:
                break
            if B0 >= bmax or g0 <= 0:
                continue
            B0 += 1
            used += pi0
            g0 = pets_gain(B0, a_0, b_0) if B0 + 1 <= bmax else -np.inf
            in0 = g0 > 0 and B0 < bmax
        else:
            in1 = False
            if used + pi1 > bbar + eps:
                break
            if B1 >= bmax or g1 <= 0:
                continue
            B1 += 1
            used += pi1
            g1 = pets_gain(B1, a_1, b_1) if B1 + 1 <= bmax else -np.inf
            in1 = g1 > 0 and B1 < bmax
    return B0, B1


@inner
def pets_warm(ans, perm, a0, nd, M):
    """pets-online: (accepted answers among a query's nd draws, capped at K0; whether its first K0 agree): a draw is
    accepted when its answer is valid and among the first M distinct valid ones (reference.pets_accepted)."""
    seen = np.empty(M, np.int64)
    ns = 0
    acc = 0
    first = -1
    same = True
    for k in range(nd):
        x = ans[perm[a0 + k]]
        if x < 0:
            continue
        known = False
        for e in range(ns):
            if seen[e] == x:
                known = True
                break
        if not known:
            if ns >= M:
                continue
            seen[ns] = x
            ns += 1
        if acc == 0:
            first = x
        elif x != first:
            same = False
        acc += 1
        if acc == PETS_K0:
            break
    return acc, same


_E52 = 4503599627370496.0  # 2**52


@inner
def difficulty_order(score, off, perm, order, out):
    """dsc's ranking: out = the queries sorted by the score of their first draw, highest (easiest) first, ties by
    rank. A double x in [0, 1] (scores are) = f 2^e (frexp: f in [0.5, 1)) orders like the integer
    (e + 1075) 2^52 + (2^53 f - 2^52), 0 below every positive x (a -0.0 score is 0), so an integer stable sort on its
    negation does it: the order of the bits of x read as an int64, without x.view (which cost ~0.5 s of compile)."""
    n = order.shape[0]
    key = np.empty(n, np.int64)
    for t in range(n):
        x = score[perm[off[order[t]]]]
        k = np.int64(0)
        if x > 0.0:
            f, e = math.frexp(x)
            k = (np.int64(e) + 1075) * np.int64(4503599627370496) + (np.int64(f * (2.0 * _E52)) - np.int64(_E52))
        key[t] = -k
    by = stable_argsort(key, n)
    for t in range(n):
        out[t] = order[by[t]]


@inner
def esc_window(ans, perm, a0, K):
    """ESC's rule: the K draws perm[a0 .. a0 + K - 1] (a query's last window) share one valid answer. A function of
    its own, not inlined in run_one's rule check: the check is inlined at three call sites, and this loop is read
    only under --eliminate esc (each inlined copy costs compile time; the call costs nothing measurable)."""
    first = ans[perm[a0]]
    if first < 0:
        return False
    for k in range(a0 + 1, a0 + K):
        if ans[perm[k]] != first:
            return False
    return True


@inner
def ac_entropy(si, T, L, lo, hi, n_):
    """Adaptive-Consistency's normalised entropy of a query's answer categories (its slots si[lo:hi], invalid
    first), with the source's pseudo-category of count 1 when there is one category. Its own function for the
    reason esc_window is."""
    total = 0.0
    ncat = 0
    for p in range(lo, hi):
        c = si[p, CNT]
        if c > 0:
            ncat += 1
            total += T[c]
    if ncat == 1:
        return (L[n_ + 1] - T[n_] / (n_ + 1)) / L[2]
    return (L[n_] - total / n_) / L[ncat]


@jit
def ac_dirichlet(si, lo, hi, lead, lc, conf):
    """Adaptive-Consistency's Dirichlet probability (docs/semantics.md, ac-dirichlet): with a = lc + 1 (the leading
    answer's count plus one) and b + 1 for each of the four most frequent other valid answers (slots lo + 1 .. hi - 1;
    slot lo, the invalid answers', does not vote), P(G_a > every G_(b+1)) for independent Gamma(alpha, 1) variables:
    the integral over x > 0 of the Gamma(a) density times each Gamma(b + 1) CDF, 1 - P(Poisson(x) <= b), by the
    trapezoid rule in t = log(x / a) (absolute error below 1e-14). A lone answer gives 1 - 2^-a exactly (the source's
    Beta rule with no runner-up); that and the probability against the runner-up alone, P(G_a > G_(b1+1)), both
    bound P, and when either is below conf it is returned as it is, without integrating. Its own function for the
    reason esc_window is."""
    b1 = b2 = b3 = b4 = 0  # the four largest counts of the other valid answers, 0 for none
    for p in range(lo + 1, hi):
        c = si[p, CNT]
        if c <= b4 or p == lo + 1 + lead:
            continue
        if c > b1:
            b1, b2, b3, b4 = c, b1, b2, b3
        elif c > b2:
            b2, b3, b4 = c, b2, b3
        elif c > b3:
            b3, b4 = c, b3
        else:
            b4 = c
    a = lc + 1
    q = 1.0
    for _ in range(a):
        q *= 0.5
    if b1 == 0 or 1.0 - q < conf:
        return 1.0 - q
    # P <= P(G_a > G_(b1+1)) = P(Binomial(lc + b1 + 1, 1/2) <= lc), summed from k = 0 (no underflow below 1,000 draws)
    nb = lc + b1 + 1
    if nb < 1000:
        pk = 1.0
        for _ in range(nb):
            pk *= 0.5
        p2 = 0.0
        for k in range(lc + 1):
            p2 += pk
            pk *= (nb - k) / (k + 1.0)
        if p2 < conf:
            return p2
    fa = float(a)
    # Nodes t = lo_t + i h: outside [lo_t, hi_t] the Gamma(a) mass is below e^-40 (Chernoff: P(log(G / a) beyond t)
    # <= exp(-a (e^t - 1 - t))), and below x = e^(-40 / (a + 1)) the integrand's (a density times a CDF <= x) too.
    r = math.sqrt(80.0 / fa)
    lo_t = max(-(1.0 + 40.0 / fa) if a < 65 else -1.5 * r, -40.0 / (fa + 1.0) - math.log(fa))
    hi_t = min(r, math.log(2.0 + 80.0 / fa))
    h = min(0.2, 0.3 / math.sqrt(fa))  # a step of 0.3 standard deviations of log G at most
    # log(a^a e^-a / Gamma(a)), for a >= 20 by Stirling's series (no cancellation between large terms)
    if a < 20:
        lc0 = fa * math.log(fa) - fa - math.lgamma(fa)
    else:
        z2 = 1.0 / (fa * fa)
        lc0 = 0.5 * math.log(fa / (2.0 * math.pi)) - (1.0 / 12.0 - z2 * (1.0 / 360.0 - z2 * (
            1.0 / 1260.0 - z2 * (1.0 / 1680.0 - z2 / 1188.0)))) / fa
    c0 = math.exp(lc0)
    total = 0.0
    for k in range(int((hi_t - lo_t) / h) + 2):
        t = lo_t + k * h
        x = fa * math.exp(t)
        w = math.exp(fa * (t - math.expm1(t)))  # the Gamma(a) density of t, over c0
        term = c0 * w / x  # P(Poisson(x) = m) for m = a - 1, then down to 0
        tail = 0.0
        u1 = u2 = u3 = u4 = 0.0  # P(b_j < Poisson(x) < a)
        for m in range(a - 1, -1, -1):
            if m == b1:
                u1 = tail
            if m == b2:
                u2 = tail
            if m == b3:
                u3 = tail
            if m == b4:
                u4 = tail
            tail += term
            term *= m / x
        f = 1.0 - tail + u1
        if b2 > 0:
            f *= 1.0 - tail + u2
        if b3 > 0:
            f *= 1.0 - tail + u3
        if b4 > 0:
            f *= 1.0 - tail + u4
        total += w * f
    return total * c0 * h


@jit
def gamma_cdf(s, x):
    """The regularised lower incomplete gamma function P(s, x) (the Gamma(s, 1) CDF) for a shape s > 0 of a few
    units, by its power series e^-x x^s / Gamma(s + 1) sum_k x^k / ((s + 1) .. (s + k)); above x = 60 + 2 s the upper
    tail is below 1e-20 for the shapes boinf uses (1.3) and it returns 1."""
    if x <= 0.0:
        return 0.0
    if x > 60.0 + 2.0 * s:
        return 1.0
    t = 1.0
    total = 1.0
    k = 1
    while t > 1e-17 * total:
        t *= x / (s + k)
        total += t
        k += 1
    return min(1.0, total * math.exp(s * math.log(x) - x - math.lgamma(s + 1.0)))


@jit
def boinf_lead_prob(si, lo, hi, lead, lc, alpha):
    """Best-of-Infinity's P(mode | D) (docs/semantics.md, boinf): under the Dirichlet posterior with parameter
    count + 1 for each valid answer drawn (slots lo + 1 .. hi - 1; slot lo, the invalid answers', does not vote) and
    alpha + 1 for the source's unknown bucket, the chance that the leading answer's share (parameter a = lc + 1) is
    the largest: for independent Gamma variables, the integral over x of the Gamma(a) density times each other
    Gamma CDF (1 - P(Poisson(x) <= c) for parameter c + 1; P(alpha + 1, x) for the bucket), by ac_dirichlet's
    trapezoid rule in t = log(x / a), over every answer instead of the top five. Every count is <= lc, so the
    Poisson CDFs at x come from one downward pass over m = a - 1 .. 0."""
    a = lc + 1
    fa = float(a)
    r = math.sqrt(80.0 / fa)
    lo_t = max(-(1.0 + 40.0 / fa) if a < 65 else -1.5 * r, -40.0 / (fa + 1.0) - math.log(fa))
    hi_t = min(r, math.log(2.0 + 80.0 / fa))
    h = min(0.2, 0.3 / math.sqrt(fa))
    if a < 20:
        lc0 = fa * math.log(fa) - fa - math.lgamma(fa)
    else:
        z2 = 1.0 / (fa * fa)
        lc0 = 0.5 * math.log(fa / (2.0 * math.pi)) - (1.0 / 12.0 - z2 * (1.0 / 360.0 - z2 * (
            1.0 / 1260.0 - z2 * (1.0 / 1680.0 - z2 / 1188.0)))) / fa
    c0 = math.exp(lc0)
    u = np.empty(a)  # u[c] = P(c < Poisson(x) < a) at the current node
    lead_slot = lo + 1 + lead
    total = 0.0
    for k in range(int((hi_t - lo_t) / h) + 2):
        t = lo_t + k * h
        x = fa * math.exp(t)
        w = math.exp(fa * (t - math.expm1(t)))
        term = c0 * w / x
        tail = 0.0
        for m in range(a - 1, -1, -1):
            u[m] = tail
            tail += term
            term *= m / x
        f = gamma_cdf(alpha + 1.0, x)
        for p in range(lo + 1, hi):
            c = si[p, CNT]
            if c > 0 and p != lead_slot:
                f *= 1.0 - tail + u[c]
        total += w * f
    return total * c0 * h


@jit
def boinf_counts(si, lo, hi, lead):
    """(m, drawn, c2) of a query's answer slots: the valid answers drawn, their draws, and the largest count of an
    answer other than the leading one (0 for none)."""
    m = 0
    drawn = 0
    c2 = 0
    for p in range(lo + 1, hi):
        c = si[p, CNT]
        if c > 0:
            m += 1
            drawn += c
            if p != lo + 1 + lead and c > c2:
                c2 = c
    return m, drawn, c2


@jit
def boinf_bayes_factor(si, lo, hi, lead, lc, alpha):
    """Best-of-Infinity's Bayes factor as its paper states it (docs/semantics.md, boinf; --bf-mc 0): with m valid
    answers drawn and the unknown bucket, (m + 1) P / (1 - P), P = boinf_lead_prob."""
    m, _, _ = boinf_counts(si, lo, hi, lead)
    pm = boinf_lead_prob(si, lo, hi, lead, lc, alpha)
    q = 1.0 - pm
    if q <= 0.0:
        return math.inf
    return (m + 1) * pm / q


@jit
def boinf_stop_prob(si, lo, hi, lead, lc, alpha, bf, mc):
    """The chance that the source's check stops the query (boinf/test_main.py calculate_bayes_factor_mc at commit
    fbcb097, mc Dirichlet draws): its estimate of P is X / mc for X ~ Binomial(mc, P); X = 0 gives a Bayes factor of
    0, 0 < X < mc gives (m + 1) (X / mc) / (1 - X / mc), in its float form, and X = mc its Hoeffding form (m + 1) /
    exp(-c1 g^2 / 2), g = max(c1 / S - c2' / S, 1e-4) (S: the draws plus alpha; c2': the second largest count with
    the bucket). So P(stop) = P(h <= X < mc) + P(X = mc) [Hoeffding >= bf], h the fewest hits whose estimate
    reaches bf; the binomial terms by recurrence out from the largest one in range (no underflow where it
    matters)."""
    m, drawn, c2i = boinf_counts(si, lo, hi, lead)
    pm = boinf_lead_prob(si, lo, hi, lead, lc, alpha)
    pm = min(max(pm, 0.0), 1.0)
    k = m + 1
    h = mc  # the fewest hits below mc whose estimate reaches bf (mc: none)
    a, b = 1, mc - 1
    while a <= b:
        mid = (a + b) // 2
        r = mid / mc
        if k * r / (1.0 - r) >= bf:
            h = mid
            b = mid - 1
        else:
            a = mid + 1
    total = drawn + alpha
    c2 = max(float(c2i), alpha)
    g = max(lc / total - c2 / total, 0.0001)
    hoeff = k * 1.0 / math.exp(-lc * g * g / 2) >= bf
    if pm >= 1.0:
        return 1.0 if hoeff else 0.0
    if pm <= 0.0:
        return 0.0
    lp = math.log(pm)
    lq = math.log1p(-pm)
    k0 = min(max(int(math.floor((mc + 1) * pm)), h), mc)  # the binomial's mode, within [h, mc]
    t0 = math.exp(math.lgamma(mc + 1.0) - math.lgamma(k0 + 1.0) - math.lgamma(mc - k0 + 1.0) + k0 * lp
                  + (mc - k0) * lq)
    ratio = pm / (1.0 - pm)
    out = 0.0
    t = t0
    for x in range(k0, mc + 1):  # upward: terms k0 .. mc, falling away from the mode (none left to matter below
        if x == mc:  # 1e-17 of the sum)
            out += t if hoeff else 0.0
        else:
            out += t
        t *= (mc - x) / (x + 1.0) * ratio
        if t < 1e-17 * out:
            break
    t = t0
    for x in range(k0 - 1, h - 1, -1):  # downward: terms k0 - 1 .. h
        t *= (x + 1.0) / (mc - x) / ratio
        out += t
        if t < 1e-17 * out:
            break
    return min(out, 1.0)


@inner
def boinf_uniform(tok, score, perm, a0, n, i):
    """The uniform that draws the source's Monte Carlo outcome at query i's check after n draws: a hash of the query
    and of its draws' token counts and scores, in order, so that a replay and a live run of the same draws draw the
    same (their response indices and answer ids differ), and each check its own."""
    h = mix64(_BOINF_SALT ^ np.uint64(i))
    for k in range(a0, a0 + n):
        j = perm[k]
        h = mix64(h ^ (np.uint64(tok[j]) * _GOLDEN + _ONE))
        h = mix64(h ^ np.uint64(score[j] * 4294967296.0))
    return np.float64(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@inner
def boinf_stops(si, lo, hi, lead, lc, bf, mc, tok, score, perm, a0, n, i):
    """boinf's check on query i (n draws from a0): the paper's Bayes factor with mc = 0, else the source's Monte Carlo
    decision drawn from its law. One call in run_one's rule check, which is inlined at three call sites (each inlined
    line costs compile time, as for esc_window)."""
    if mc == 0:
        return boinf_bayes_factor(si, lo, hi, lead, lc, BOINF_ALPHA) >= bf
    return boinf_uniform(tok, score, perm, a0, n, i) < boinf_stop_prob(si, lo, hi, lead, lc, BOINF_ALPHA, bf, mc)


@jit
def mmc_bet(s, f):
    """The source's plug-in bet of one e-process before its next update (BernoulliMixtureEProcess.update): (s + 1/2)
    / (s + f + 1), clipped to [MMC_Q_LO, MMC_Q_HI]."""
    return min(max((s + 0.5) / (s + f + 1), MMC_Q_LO), MMC_Q_HI)


@jit
def mmc_log_e(s, f, q):
    """One e-process's log e-value after s successes and f failures at bet q, as the source writes it: (s + f) log 2
    + s log q + f log(1 - q) (the bet of its latest update applied to all of its past)."""
    return (s + f) * math.log(2.0) + s * math.log(q) + f * math.log1p(-q)


@jit
def log_add(x, y):
    """log(e^x + e^y) as the lbayes source's log_add computes it (-inf: a zero)."""
    if x == -math.inf:
        return y
    if y == -math.inf:
        return x
    if x > y:
        return x + math.log1p(math.exp(y - x))
    return y + math.log1p(math.exp(x - y))


@jit
def lbayes_s_size(size, nl, vd):
    """The largest tie count m Algorithm 2's recursion keeps over `size` categories (nl draws, each at most vd), or
    -1 where S is 0 (draws to spread and no room: vd 0)."""
    if vd > 0:
        return min(size, nl // vd)
    return -1 if nl > 0 else size


@jit
def lbayes_s_step(A, B, pj, lf, lg, mmin, nl, vd):
    """One category of Algorithm 2's recursion (lbayes_log_s): B from A over the category of prior share pj, each
    spread's count r < vd added (or r = vd: one more tie), in log space. A and B: (mmin + 1, nl + 1) views; lf the
    log factorials to vd; lg scratch of vd + 1."""
    B[:, :] = -math.inf
    if pj <= 0:
        lg[:] = -math.inf
        lg[0] = 0.0
    else:
        lp = math.log(pj)
        for r in range(vd + 1):
            lg[r] = r * lp - lf[r]
    for m in range(mmin + 1):
        for t in range(nl + 1):
            la = A[m, t]
            if la == -math.inf:
                continue
            for r in range(min(vd - 1, nl - t) + 1):
                B[m, t + r] = log_add(B[m, t + r], la + lg[r])
            if t + vd <= nl and m + 1 <= mmin:
                B[m + 1, t + vd] = log_add(B[m + 1, t + vd], la + lg[vd])


@jit
def lbayes_s_end(A, mmin, nl, cp):
    """log S from the recursion's last state: the spreads of all nl draws, m ties weighted 1 / binom(cp + m, cp)
    (exactly, as a float product), times nl!."""
    out = -math.inf
    for m in range(mmin + 1):
        lv = A[m, nl]
        if lv == -math.inf:
            continue
        c = 1.0  # binom(cp + m, cp), exactly
        for k in range(1, cp + 1):
            c = c * (m + k) / k
        out = log_add(out, lv + -math.log(c))
    if out != -math.inf:
        out += math.lgamma(nl + 1)
    return out


@jit
def lbayes_s_start(A, lf, vd):
    """The recursion's state before its first category (nothing spread: log 1 at m = 0, t = 0) and the log factorials
    lf[r] = log r! to vd."""
    A[:, :] = -math.inf
    A[0, 0] = 0.0
    lf[:] = 0.0
    for r in range(2, vd + 1):
        lf[r] = math.lgamma(r + 1)


@jit
def lbayes_log_s(p, skip1, skip2, skip3, nl, vd, cp, work):
    """log S of the L-aggregated Bayesian stop's Algorithm 2 (the source's _compute_log_S_psi_algo2_strict,
    docs/semantics.md, lbayes) over the prior p without its entries skip1, skip2 and skip3 (-1: none): the nl draws
    outside the head spread over the remaining categories, each below vd (or at vd: a tie, m of them), summed as
    nl! sum prod p_j^r_j / r_j!, each tie count m weighted 1 / binom(cp + m, cp)."""
    mmin = lbayes_s_size(p.shape[0] - (skip1 >= 0) - (skip2 >= 0) - (skip3 >= 0), nl, vd)
    if mmin < 0:
        return -math.inf
    A = work[0, :mmin + 1, :nl + 1]  # (work: scratch of at least (4, mmin + 1, max(nl, vd) + 1), one per posterior)
    B = work[1, :mmin + 1, :nl + 1]
    lf = work[2, 0, :vd + 1]
    lg = work[3, 0, :vd + 1]
    lbayes_s_start(A, lf, vd)
    for j in range(p.shape[0]):
        if j == skip1 or j == skip2 or j == skip3:
            continue
        lbayes_s_step(A, B, p[j], lf, lg, mmin, nl, vd)
        A, B = B, A
    return lbayes_s_end(A, mmin, nl, cp)


@jit
def lbayes_l2_terms(p, n, n1, terms, work):
    """The L = 2 posterior's log likelihoods terms[i] = n1 log p_i + log S_i (S_i: lbayes_log_s without entry i),
    each the same floats as lbayes_log_s's own recursion computes, at a fraction of its cost: hypothesis i's
    recursion runs over categories 0 .. i - 1 and then i + 1 .. K - 1, so the state after 0 .. i - 1 is shared by
    every later hypothesis (kept as a running prefix: the first categories are not redone per hypothesis), and
    entries of equal share next to one another (a sorted prior's ties: every answer drawn once in the pool) leave the
    same sequence of shares when either is taken out, so one recursion serves the whole run (bit for bit: the same
    operations in the same order; tests/test_lbayes.py against its direct twin). K recursions of K - 1
    categories become one pass plus, per run of equal shares starting at a, K - 1 - a categories."""
    K = p.shape[0]
    nl, vd = n - n1, n1
    mmin = lbayes_s_size(K - 1, nl, vd)
    if mmin < 0:
        terms[:] = -math.inf
        return
    P = work[0, :mmin + 1, :nl + 1]  # (work: (5, K + 1, n + 1))
    A = work[1, :mmin + 1, :nl + 1]
    B = work[2, :mmin + 1, :nl + 1]
    lf = work[3, 0, :vd + 1]
    lg = work[4, 0, :vd + 1]
    lbayes_s_start(P, lf, vd)
    a = 0
    while a < K:
        b = a + 1
        while b < K and p[b] == p[a]:
            b += 1
        if p[a] > 0:
            A[:, :] = P
            for j in range(a + 1, K):
                lbayes_s_step(A, B, p[j], lf, lg, mmin, nl, vd)
                A, B = B, A
            ls = lbayes_s_end(A, mmin, nl, 1)
            t = n1 * math.log(p[a]) + ls if ls != -math.inf else -math.inf
        else:
            t = -math.inf
        for i in range(a, b):
            terms[i] = t
        if b < K:  # (the prefix past this run: the next run's hypothesis starts there)
            for j in range(a, b):
                lbayes_s_step(P, B, p[j], lf, lg, mmin, nl, vd)
                P, B = B, P
        a = b


@jit
def lbayes_prior(ans, a0, a1, na):
    """The known prior of the source's LLM_known_prior notebook for one query: the shares of its answers among its
    pool's valid responses ans[a0:a1], sorted largest first and renormalised as the source does (p / sum(p))."""
    cnt = np.zeros(na, np.int64)
    total = 0
    for j in range(a0, a1):
        if ans[j] >= 0:
            cnt[ans[j]] += 1
            total += 1
    k = 0
    for a in range(na):
        if cnt[a] > 0:
            k += 1
    p = np.empty(k)
    k = 0
    for a in range(na):
        if cnt[a] > 0:
            p[k] = cnt[a] / total
            k += 1
    p = -np.sort(-p)
    s = 0.0
    for x in p:
        s += x
    return p / s


@jit
def lbayes_runs(p):
    """Each entry's run of equal shares next to one another (0, 1, ...), and the first entry of each run."""
    K = p.shape[0]
    grp = np.empty(K, np.int64)
    first = np.empty(K, np.int64)
    R = 0
    for i in range(K):
        if i == 0 or p[i] != p[i - 1]:
            first[R] = i
            R += 1
        grp[i] = R - 1
    return grp, first[:R]


@jit
def lbayes_posterior(p, n, n1, n2, n3, uniq, L):
    """The source's posterior that the leading answer drawn is the mode (L2_posterior_tilde, L3_posterior_tilde,
    L4_posterior_tilde of LLM_known_prior_final.ipynb): n valid draws, the largest counts n1, n2, n3 and uniq
    distinct answers drawn; L = 2 keeps the head count only, L = 3 also the runner-up's (back to L = 2 below two
    distinct answers), L = 4 also the third's (back to L = 3 below three). The largest hypothesis's share of their
    sum, clipped to [0, 1]. The same floats as the direct computation's one recursion per hypothesis, computed once
    per distinct sequence of shares: L = 2 by lbayes_l2_terms; L = 3 and 4 with S memoised per run of the entries
    left out (taking out any entry of a run of equal shares leaves the same sequence) and one hypothesis per run."""
    K = p.shape[0]
    if n == 0:
        return 0.0
    terms = np.empty(K)
    if L == 2 or uniq < 2:
        lbayes_l2_terms(p, n, n1, terms, np.empty((5, K + 1, n + 1)))
    else:
        work = np.empty((4, K + 1, n + 1))  # the recursion's scratch, shared by its runs
        four = L == 4 and uniq >= 3
        # tie weight: the heads at the last head count (L = 3: 2 if n1 == n2; L = 4: the source's
        # head_counts.count(v_d))
        if four:
            cp = 1 + (n2 == n3) + (n1 == n3)
        else:
            cp = 2 if n1 == n2 else 1
        grp, first = lbayes_runs(p)
        R = first.shape[0]
        memo = np.empty(R * R * R if four else R * R)  # log S by the sorted runs of the entries left out
        have = np.zeros(memo.shape[0], np.bool_)
        tj = np.empty(K * K)
        for g in range(R):
            i = first[g]
            terms[i] = -math.inf
            if p[i] <= 0:
                continue
            nt = 0
            for j in range(K):
                if i == j or p[j] <= 0:
                    continue
                if not four:
                    x, y = min(grp[i], grp[j]), max(grp[i], grp[j])
                    key = x * R + y
                    if not have[key]:
                        memo[key] = lbayes_log_s(p, i, j, -1, n - n1 - n2, n2, cp, work)
                        have[key] = True
                    ls = memo[key]
                    if ls != -math.inf:
                        tj[nt] = n1 * math.log(p[i]) + n2 * math.log(p[j]) + ls
                        nt += 1
                    continue
                for k in range(K):
                    if k == i or k == j or p[k] <= 0:
                        continue
                    x, y, z = grp[i], grp[j], grp[k]
                    if x > y:
                        x, y = y, x
                    if y > z:
                        y, z = z, y
                    if x > y:
                        x, y = y, x
                    key = (x * R + y) * R + z
                    if not have[key]:
                        memo[key] = lbayes_log_s(p, i, j, k, n - n1 - n2 - n3, n3, cp, work)
                        have[key] = True
                    ls = memo[key]
                    if ls != -math.inf:
                        tj[nt] = n1 * math.log(p[i]) + n2 * math.log(p[j]) + n3 * math.log(p[k]) + ls
                        nt += 1
            if nt > 0:
                mx = tj[0]
                for u in range(1, nt):
                    mx = max(mx, tj[u])
                e = 0.0
                for u in range(nt):
                    e += math.exp(tj[u] - mx)
                terms[i] = mx + math.log(e)
        for i in range(K):  # (every entry of a run: its first's)
            terms[i] = terms[first[grp[i]]]
    mx = terms[0]
    for i in range(1, K):
        mx = max(mx, terms[i])
    if mx == -math.inf:
        return 0.0
    d = 0.0
    for i in range(K):
        d += math.exp(terms[i] - mx)
    return max(0.0, min(1.0, math.exp(mx - (mx + math.log(d)))))


@inner
def lbayes_stops(si, lo, hi, lead, lc, ans, a0, a1, L, thre, lbm, i):
    """lbayes's check on query i (answer slots lo .. hi - 1, pool responses a0 .. a1 - 1): its posterior >= thre.
    One call in run_one's rule check; lbm: the grid's memo (PoolArrays.lbm; empty: none)."""
    m, drawn, c2 = boinf_counts(si, lo, hi, lead)
    k = drawn * (drawn + 1) // 2 + lc
    if (L == 2 or m < 2) and k < lbm.shape[1]:  # (the posterior a function of drawn and lc alone)
        v = lbm[i, k]
        if v != v:
            v = lbayes_posterior(lbayes_prior(ans, a0, a1, hi - lo - 1), drawn, lc, c2, 0, m, L)
            lbm[i, k] = v
        return v >= thre
    c3 = 0  # (L = 4: the third largest count, the largest below c2's answer among the others)
    if L == 4:
        b2 = 0
        for q in range(lo + 1, hi):
            c = si[q, CNT]
            if q == lo + 1 + lead or c == 0:
                continue
            if c > b2:
                c3, b2 = b2, c
            elif c > c3:
                c3 = c
    p = lbayes_prior(ans, a0, a1, hi - lo - 1)
    return lbayes_posterior(p, drawn, lc, c2, c3, m, L) >= thre


@inner
def dc_threshold(v, m, pct):
    """deepconf-online's stopping threshold from the m lowest group confidences in v[:m] (reordered: scratch): their
    percentile 100 (1 - pct) by numpy's linear interpolation, h = (m - 1) (1 - pct), between the sorted values at
    floor(h) and the next, in numpy's two-sided form (docs/semantics.md)."""
    h = (m - 1) * (1.0 - pct)
    lo = np.int64(math.floor(h))
    t = h - lo
    a = _kth_in_place(v, m, lo)
    if t == 0.0:
        return a
    b = _kth_in_place(v, m, lo + 1)
    if a == b:
        return a
    if b == np.inf:
        return np.inf
    d = b - a
    return a + d * t if t < 0.5 else b - d * (1.0 - t)


@inner
def deepconf_online(P, W, dc, unit, warmup, pct, tau, max_samples, budget, epoch):
    """deepconf-online (DeepConf's online mode under a shared budget, docs/semantics.md): a round-robin warm-up of
    `warmup` whole traces per query; each query's threshold s (W.ex[i, 0]) from its warm-up's lowest group
    confidences; then round-robin, one trace per turn, over the queries whose confidence-weighted vote has not reached
    consensus tau: a trace whose lowest group confidence is below s stops at its first record low below s (dc = the
    pool's record lows), pays its tokens up to there and does not vote. The answer slots hold the
    votes only (weight: the trace's lowest group confidence), so weighted and sc select from them; qs[i].s holds the
    query's summed vote. dc: (lstart, lend, lpos, lval), response j's record lows being lpos / lval[lstart[j] ..
    lend[j]): a live run appends them as responses arrive, in any order of the queries.

    Live (have[i] below the pool size): the run stops at the first trace that has not arrived (tot[NEED] = 1 + its
    query, st.resume = 1, st.want = 1) with its place (st.stage: the phase, st.p: the position in the round; st =
    W.sch[0], SCHED), and the next call goes on from there: the live run is the replay's run cut where traces were
    missing.
    From phase 1 on, W.ex[i, 0] is query i's threshold: what a backend that stops traces mid-way is given."""
    off, aoff, correct, score, ans, tok, have = P.off, P.aoff, P.correct, P.score, P.ans, P.tok, P.have
    lstart, lend, lpos, lval = dc
    perm, qgen, hs, order, qs, si, sf, tot, ex = W.perm, W.qgen, W.hs, W.order, W.qs, W.si, W.sf, W.tot, W.ex
    st = W.sch[0]  # (live) where a stopped run was (SCHED)
    n = off.shape[0] - 1
    lazy = qgen.shape[0] > 0
    w = warmup if max_samples == 0 else min(warmup, max_samples)
    tot[NEED] = 0
    first_phase, first_pos = 0, 0
    if st.resume != 0:  # (live) where the last call stopped
        first_phase, first_pos = st.stage, st.p
        st.resume = 0

    def nxt(i):
        """The next response of query i (the lazy Fisher-Yates step when the permutation is generated lazily)."""
        a0 = off[i]
        k = qs[i].n
        if lazy:
            if qgen[i, 1] != epoch:
                qgen[i, 1] = epoch
                qgen[i, 0] = 0
            if k == qgen[i, 0]:
                jj = a0 + swap_index(hs[i], k, off[i + 1] - a0)
                x = perm[a0 + k]
                perm[a0 + k] = perm[jj]
                perm[jj] = x
                qgen[i, 0] = k + 1
        return perm[a0 + k]

    def low(j):  # the trace's lowest group confidence (its last record low; none, no tokens: 0.0, as the source's)
        return lval[lend[j] - 1] if lend[j] > lstart[j] else 0.0

    def whole(i, j):  # a trace that ran to its end: its score and correctness count
        sc_ = score[j]
        qs[i].ssum += sc_
        if sc_ > qs[i].best:
            qs[i].best = sc_
            qs[i].best_j = j
        qs[i].covered |= correct[j]

    def vote(i, j):  # a whole trace at or above the threshold with an answer votes, weight its lowest group conf.
        a = ans[j]
        if a < 0:
            return
        slot = aoff[i] + 1 + a
        c = si[slot, CNT]
        si[slot, CNT] = c + 1
        if c == 0:
            si[slot, FIRST_J] = j
        v = sf[slot] + low(j)
        sf[slot] = v
        qs[i].s += low(j)
        nc = c + 1
        lead, lc = qs[i].lead, qs[i].lead_cnt
        if a == lead:
            qs[i].lead_cnt = nc
        elif nc > lc:
            qs[i].second_cnt = lc
            qs[i].lead = a
            qs[i].lead_cnt = nc
        elif nc > qs[i].second_cnt:
            qs[i].second_cnt = nc
        if v > qs[i].wlead_sum:
            qs[i].wlead = a
            qs[i].wlead_sum = v

    def consensus(i):  # the leading answer's share of the summed vote reaches tau (none before a vote)
        if qs[i].s > 0.0 and qs[i].wlead_sum / qs[i].s >= tau:
            qs[i].elim = 1

    def thresholds():
        """After the warm-up: each query's threshold and its warm-up's votes (also when the budget ended the
        warm-up: what it drew is voted)."""
        buf = np.empty(max(w, 1))
        for i in range(n):
            m = qs[i].n
            if m == 0:
                continue
            for k in range(m):
                buf[k] = low(perm[off[i] + k])
            s = dc_threshold(buf, m, pct)
            ex[i, 0] = s
            for k in range(m):
                j = perm[off[i] + k]
                if low(j) >= s:
                    vote(i, j)
            consensus(i)
            if max_samples > 0 and m >= max_samples:
                qs[i].capped = 1

    # Two phases of round-robin in rank order, one trace per turn: the warm-up (each query up to w whole traces),
    # then the queries without consensus, each trace stopped at its first low below the query's threshold.
    ended = False
    waits = False  # (live) stopped for a trace that has not arrived (a flag, not a return: see below)
    for phase in range(first_phase, 2):
        if waits:
            break
        if phase == 1 and first_phase == 0:
            thresholds()
        while not ended:
            any_ = False
            for pos in range(first_pos, n):
                i = order[pos]
                wants = qs[i].n < w if phase == 0 else qs[i].elim == 0 and qs[i].capped == 0
                if qs[i].exh or not wants:
                    continue
                any_ = True
                if unit == UNIT_SAMPLES and budget - tot[SAMPLES] <= 0:
                    ended = True
                    break
                if qs[i].n == off[i + 1] - off[i]:
                    qs[i].exh = 1
                    tot[EXHAUSTED] += 1
                    continue
                if qs[i].n >= have[i]:  # (live) not arrived: stop here, go on from here next call
                    tot[NEED] = i + 1
                    st.resume, st.want, st.stage, st.p = 1, 1, phase, pos
                    # (not a return: inlined into run_one by numba, an early return here left tot[NEED] at 0)
                    waits = ended = True
                    break
                j = nxt(i)
                cost = tok[j]
                stopped = False
                if phase == 1:
                    s = ex[i, 0]
                    stopped = low(j) < s
                    if stopped:
                        for k in range(lstart[j], lend[j]):
                            if lval[k] < s:
                                cost = lpos[k] + 1
                                break
                if unit == UNIT_TOKENS and cost > budget - tot[TOKENS]:
                    ended = True
                    break
                qs[i].n += 1
                tot[SAMPLES] += 1
                tot[TOKENS] += cost
                if not stopped:
                    whole(i, j)
                if phase == 1:
                    if not stopped:
                        vote(i, j)
                        consensus(i)
                    if max_samples > 0 and qs[i].n >= max_samples:
                        qs[i].capped = 1
            first_pos = 0  # (a resumed round goes on from its place; the next starts from the first query)
            if not any_:
                break


@inner
def live_reach(e, want_k, tokens, room, tok, perm, at):
    """(live) How far a pull may draw when only e of its responses exist (perm[at:at + e]): its whole pulls of
    want_k, or with a token budget all e when one of them does not fit in `room` (the pull stops there, before the
    missing ones). A function of its own, not in run_one's pull: numba inlines that closure, at a cost that grows
    with its size, in every run, live or not."""
    reach = (e // want_k) * want_k
    if tokens:
        for x in range(e):
            room -= tok[perm[at + x]]
            if room < 0:
                return e if x >= reach else reach
    return reach


@inner
def live_fold(dfr, st, act, qs, tot, i, unmade):
    """(live) Round-robin's cursor (st: SCHED) after query i's pull left `unmade` pulls for missing responses, in a
    block of rounds the budget pays in full (run_one's docstring): such a query is deferred (dfr[:st.nd]: the query,
    its pulls left) and stays in act; after the pass over act[:m], a sweep makes the deferred queries' pulls again
    (cursor st.dp, those still waiting kept in dfr[:st.nd2]). Returns go: 0 the pass or the sweep goes on, 1 the pass
    is over (act[:w]: the queries still active, compacted in order), 2 every query left waits (tot[NEED] names the
    first). A function of its own, not in run_one: numba inlines run_one's closures at a cost that grows with
    run_one's size, in every run (measured: 0.85 s of the first run's compile as part of run_one)."""
    nd = st.nd
    if nd > 0 and st.p == st.m:  # a deferred query's pulls, again
        nd2 = st.nd2
        if unmade > 0:  # still waiting
            dfr[nd2, 0] = i
            dfr[nd2, 1] = unmade
            nd2 += 1
            tot[NEED] = 0
        dp = st.dp + 1
        if dp < nd:
            st.dp, st.nd2 = dp, nd2
            return 0
        nd = nd2
        st.nd, st.dp, st.nd2 = nd, 0, 0
    else:
        if unmade > 0:  # its responses are missing: deferred, the block goes on (it stays active)
            dfr[nd, 0] = i
            dfr[nd, 1] = unmade
            nd += 1
            st.nd = nd
            tot[NEED] = 0
        if unmade > 0 or (qs[i].elim == 0 and qs[i].capped == 0 and qs[i].exh == 0):  # still active
            act[st.w] = i
            st.w += 1
        st.p += 1
        if st.p < st.m:
            return 0
    if nd > 0:  # the pass (and the sweep after it) is over, and some wait
        tot[NEED] = dfr[0, 0] + 1
        return 2
    # deferred queries may have left the active set since their pass: act[:w] compacted in place, in its order
    st.w = active_by_rank(qs, act[:st.w], act)
    return 1


@inner_pruned
def run_one(P, W, cfg, code, budget, epoch, packed, reading, live_run, dc):
    """Replay one configuration (a CONFIG record) at total budget `budget`; the outcome is left in W's state
    arrays (qs, si, sf, tot).

    The permutation is either given whole (W.qgen has no rows: perm holds it) or generated lazily: the forward
    Fisher-Yates of query i (stream hs[i] = seed_stream(seed, qkeys[i]), filled by the caller) advances only as
    far as a policy draws, so a seed costs O(draws), not O(pool). Lazily, perm starts as the identity, qgen[i] =
    (steps made, epoch of the seed they belong to) lets the configurations of one seed share the steps, and
    restore_identity undoes them before the next seed. Both give the same permutation.

    A live run (replay/live.py) passes have[i] < pool size for the queries whose later responses do not exist
    yet: a pull makes only its whole pulls whose responses exist (the rule is checked after each; with a token
    budget it goes on into the rest when one of them does not fit, which stops it before the missing ones), keeps
    them, and the run stops with tot[NEED] = 1 + that query and the scheduler's state in W (st.resume = 1);
    called again with the same W once the responses are there, it makes the pulls left and goes on, so a live run
    costs its decisions once, as a replay does, and is the replay's run cut into pieces. Inside a block of
    round-robin rounds the budget pays in full (any order of its queries gives the same outcome), a query lacking a
    response is deferred instead (W.dfr: the query, its pulls left) and the block goes on; the run stops when every
    query left in the block waits (st.resume = 2) and sweeps them on the next call, so the driver can ask for
    all of them at once and a query whose responses come early need not wait for the others. The pool arrays P may
    grow between the calls only where have[i] says (replay/live.py lays the answer slots out with room for as many
    answers as a query may receive, so that new answers move no slot).

    dc: the pool's record lows (lstart, lend, lpos, lval) when the run is deepconf-online's, else None: then its
    code is not compiled at all (numba prunes the branch on a None argument before typing, as for `reading` and
    `live_run`), and a deepconf-online configuration does nothing (the engine always gives it dc).

    packed: (P.resp,), the pool's responses as RESP records, which the draws then read instead of the four arrays,
    or () (engine.packed_arg: () below PREFETCH_FROM responses, where the arrays fit a core's L2). A tuple, as `code`
    is, for its length, a constant before typing: a small pool's kernel never types the records' draws and
    prefetches, nor a big pool's the arrays' (both typed in every kernel cost ~0.4 s of a cold one-policy replay;
    docs/performance.md, "Start-up"; a None argument would prune only the small pool's kernel). The records
    themselves rather than a flag, so that the kernel cannot be told to read empty ones.

    code: cfg's policy code as a length (policy = len(code)): range(cfg.policy), known only as it runs (run_one_any,
    every policy in one compiled kernel), or a tuple of that many Nones, whose length numba knows before it types
    the function (its semantic-constant rewrite of len(tuple) turns it into a constant, and dead-branch pruning
    then drops every `policy == X` branch of the other policies, with the helpers only they call): a grid of one
    policy compiles that policy's code alone (_grid's `only`). run_one is compiled with PruneFirst, which prunes
    before the closures are inlined. A branch on the policy must test `policy` itself, `policy == X` or `policy in
    TUPLE` (a module constant), for the pruning to see it: a flag assigned in two branches (`a or b`) is not."""
    policy = len(code)
    if policy == DEEPCONF_ONLINE:
        if dc is not None:
            deepconf_online(P, W, dc, cfg.unit, cfg.warmup, cfg.percentile, cfg.tau, cfg.max_samples, budget, epoch)
        return
    off, aoff, correct, score, ans, tok, have = P.off, P.aoff, P.correct, P.score, P.ans, P.tok, P.have
    T, L, min_a, prior, side = P.T, P.L, P.min_a, P.prior, P.side
    records = len(packed) > 0  # (a constant: `packed`, above; each test of it is pruned, each read is packed[0])
    perm, qgen, hs, order = W.perm, W.qgen, W.hs, W.order
    qs, si, sf, tot, mm = W.qs, W.si, W.sf, W.tot, W.mm
    unit, K, elim, max_samples, m_min = cfg.unit, cfg.K, cfg.elim, cfg.max_samples, cfg.m_min
    gamma, lam, eps, rho, tau, share, hmax = cfg.gamma, cfg.lam, cfg.eps, cfg.rho, cfg.tau, cfg.share, cfg.hmax
    warmup, judge, pct, strength = cfg.warmup, cfg.judge, cfg.percentile, cfg.prior_strength
    nb, refresh, hz = cfg.bins, cfg.refresh, cfg.horizon
    n = off.shape[0] - 1
    lazy = qgen.shape[0] > 0  # a runtime bool: one specialisation for lazy and given permutations
    big = off[n] >= PREFETCH_FROM  # the pool's arrays outgrow the cache: warm the next decision's (prefetch)
    tot[NEED] = 0
    st = W.sch[0]  # the scheduler's cursors (SCHED), by name
    live = False
    resume = False
    how = 0
    if live_run is not None:
        for i in range(n):
            if have[i] < off[i + 1] - off[i]:
                live = True
                break
        how = st.resume  # a live run that stopped for a response: this call goes on from there
        resume = how != 0
        st.resume = 0
        live = live or resume

    def mmc_stops(i, n_):
        """MMC's certificate on query i's first n_ draws (docs/semantics.md, mmc): both e-processes at or above
        log(1 / mmc_delta), each after at least mmc_min_updates updates, and (mmc_leader_check on) the leader
        unchanged by the last vote.

        Its two e-processes (qs[i]'s mm_* fields) are brought up to the n_ draws vote by vote, as its source does:
        before each valid vote, the leader i and runner-up j and the top mmc_m answers C from the counts so far
        (ties: the answer drawn first; mmc_labels pool: over every answer of the query's pool, those not drawn yet
        last, ties to the smaller answer id, the answer text's order in a loaded pool, as the source's alphabetical
        ties); the vote then updates the pair e-process (i: a success, j: a failure) and the
        other one (i: a success, an answer outside C: a failure). Invalid answers do not vote. The state after each
        vote depends on the order of the votes, not only on the counts, so a check cannot recompute it from si; it
        goes on from the draws the last check read (mm_p), so that a query's checks cost O(its draws) in all. Each
        process keeps its latest bet rather than its log e (the source's log e is a function of (s, f, that bet)),
        so the logs wait for a check that needs them. The answers read are kept ranked (mm's rows: MM_ORDER,
        MM_RANK, by count, ties to the first seen), so that a vote costs its rank's move up rather than a scan.

        A closure over run_one's arrays rather than a function of them: numba increfs an array passed to a
        function, or bound to an inlined function's argument, and decrefs it after (an atomic add each), and in
        run_one's rule check LLVM's refcount pruning removed none of those pairs: five per check, about half of
        mmc's cost per decision (docs/semantics.md, mmc). A closure reads the arrays as they are."""
        base = aoff[i] + 1
        r = qs[i]
        p = r.mm_p
        known = cfg.mmc_labels == MMC_LABELS_POOL
        if p < n_:
            if p == 0:  # the query's first check: its rows cleared (and, labels known, the pool's answers marked)
                for a in range(aoff[i + 1] - base):
                    mm[base + a, MM_CNT] = 0
                    mm[base + a, MM_RANK] = 0
                if known:
                    for j in range(off[i], off[i + 1]):
                        if ans[j] >= 0:
                            mm[base + ans[j], MM_RANK] = 1
            m_top = cfg.mmc_m
            na = aoff[i + 1] - base
            d, last_i = r.mm_d, r.mm_last
            s1, f1, s2, f2, q1, q2 = r.mm_s1, r.mm_f1, r.mm_s2, r.mm_f2, r.mm_q1, r.mm_q2
            for k in range(off[i] + p, off[i] + n_):
                a = ans[perm[k]]
                if a < 0:
                    continue
                ra = base + a
                c = mm[ra, MM_CNT]
                i1 = mm[base, MM_ORDER] if d > 0 else -1
                i2 = mm[base + 1, MM_ORDER] if d > 1 else -1
                in_c = c > 0 and mm[ra, MM_RANK] < m_top
                if known and (d < 2 or (c == 0 and d < m_top)):
                    # Labels known in advance: the answers not drawn yet rank after the drawn ones (count 0), among
                    # themselves by answer id (marked in MM_RANK); the first two fill i and j while fewer than two
                    # answers have been drawn, and a new answer is in C if its rank, d plus the unseen answers with a
                    # smaller id, is below mmc_m. (A few answers a query: a scan, only while d is below 2 or mmc_m.)
                    u1, u2, before = -1, -1, 0
                    for b in range(na):
                        if mm[base + b, MM_CNT] == 0 and mm[base + b, MM_RANK] == 1:
                            if u1 < 0:
                                u1 = b
                            elif u2 < 0:
                                u2 = b
                            before += b < a
                    if d == 0:
                        i1, i2 = u1, u2
                    elif d == 1:
                        i2 = u1
                    if c == 0:
                        in_c = d + before < m_top
                if i1 >= 0 and i2 >= 0 and (a == i1 or a == i2):
                    q1 = mmc_bet(s1, f1)
                    if a == i1:
                        s1 += 1
                    else:
                        f1 += 1
                if i1 >= 0 and (a == i1 or not in_c):
                    q2 = mmc_bet(s2, f2)
                    if a == i1:
                        s2 += 1
                    else:
                        f2 += 1
                last_i = i1
                if c == 0:
                    mm[ra, MM_FIRST] = a if known else d  # (the ties' order: answer id, or first seen)
                    mm[base + d, MM_ORDER] = a
                    mm[ra, MM_RANK] = d
                    d += 1
                c += 1
                mm[ra, MM_CNT] = c
                fa = mm[ra, MM_FIRST]
                rk = mm[ra, MM_RANK]
                while rk > 0:
                    b = mm[base + rk - 1, MM_ORDER]
                    cb = mm[base + b, MM_CNT]
                    if cb > c or (cb == c and mm[base + b, MM_FIRST] < fa):
                        break
                    mm[base + rk, MM_ORDER] = b
                    mm[base + b, MM_RANK] = rk
                    rk -= 1
                mm[base + rk, MM_ORDER] = a
                mm[ra, MM_RANK] = rk
            r.mm_p = n_
            r.mm_d, r.mm_last = d, last_i
            r.mm_s1, r.mm_f1, r.mm_s2, r.mm_f2, r.mm_q1, r.mm_q2 = s1, f1, s2, f2, q1, q2
        guard = cfg.mmc_min_updates
        if r.mm_s1 + r.mm_f1 < guard or r.mm_s2 + r.mm_f2 < guard:
            return False
        # (mm_last >= 0: an answer was seen; without the check the source's prev_i may be None only before any
        # update, which the guard (>= 1) refuses)
        if cfg.mmc_leader_check == MMC_LEADER_ON and (r.mm_last < 0 or mm[base, MM_ORDER] != r.mm_last):
            return False
        # the logs only now, as the source computes them (the latest bet over the whole past): one check's worth,
        # not one per vote read, and only where they can reach the bar: with its bet in [1/2, 1), a process's log e
        # is below s log 2 (s its successes), so the logs wait until both have enough successes (log and log1p
        # were 7% of a run at budget 8 before; MMC_LOG_SLACK keeps float rounding from ever refusing a pass)
        bar = math.log(1.0 / cfg.mmc_delta)
        if min(r.mm_s1, r.mm_s2) * LOG2 + MMC_LOG_SLACK < bar:
            return False
        return mmc_log_e(r.mm_s1, r.mm_f1, r.mm_q1) >= bar and mmc_log_e(r.mm_s2, r.mm_f2, r.mm_q2) >= bar

    def reading_stops(i, rule, n_, lead, lc, sc):
        """The rules (READING_RULES) that need more than the running counts, on query i's state (n_ responses
        drawn): they read the drawn responses or the answer slots here, at the rule check only, so that the draw
        loop stays as it is for every rule. Reached through `stops` below only."""
        if rule == ELIM_ESC:
            return n_ >= K and lead >= 0 and esc_window(ans, perm, off[i] + n_ - K, K)
        if rule == ELIM_AC_ENTROPY:
            return n_ >= 2 and lead >= 0 and ac_entropy(si, T, L, aoff[i], aoff[i + 1], n_) <= hmax + AC_ENTROPY_TIE
        if rule == ELIM_AC_DIRICHLET:
            conf = cfg.dirichlet_conf
            return lead >= 0 and ac_dirichlet(si, aoff[i], aoff[i + 1], lead, lc, conf) >= conf
        if rule == ELIM_BOINF:
            return lead >= 0 and boinf_stops(si, aoff[i], aoff[i + 1], lead, lc, cfg.bf, cfg.bf_mc, tok, score, perm,
                                             off[i], n_, i)
        if rule == ELIM_MMC:
            # (skipped while one answer has been drawn: no runner-up, the pair e-process has not moved; the next
            # check reads the votes it skipped)
            # (with labels known in advance the runner-up exists from the first vote: no skip)
            return (sc > 0 or cfg.mmc_labels == MMC_LABELS_POOL) and mmc_stops(i, n_)
        if rule == ELIM_LBAYES:
            return lead >= 0 and lbayes_stops(si, aoff[i], aoff[i + 1], lead, lc, ans, off[i], off[i + 1], cfg.lb_l,
                                              cfg.lb_thre, P.lbm, i)
        return False

    # answered reaches reading_stops through this name, defined only with `reading`: PruneFirst prunes this test on
    # the argument before the closures are inlined, so a kernel without the reading rules has nothing there to inline
    # (answered's own test is pruned only after: each of its three inlined copies carried the six rules, mmc's check
    # inlined in each, through the inlining pass, +2.4 s of CPU to compile a one-policy kernel; docs/performance.md,
    # "Start-up"). One definition where it is kept: numba inlines a closure only through a name with one.
    if reading is not None:
        stops = reading_stops

    def answered(i, rule, n_, best, lead, lc, sc):
        """The elimination rule on query i's state (n_ responses drawn): the rules on the running counts here, the
        others through `stops` (reading_stops), in a kernel with them."""
        if rule == ELIM_THRESHOLD:
            return best >= gamma
        if rule == ELIM_SC_SHARE:
            return n_ >= m_min and lc > tau * n_
        if rule == ELIM_SC_BETA:
            return lead >= 0 and lc >= min_a[sc]
        if rule == ELIM_AC_MAJORITY:
            return n_ >= 2 and lc >= share * n_
        if reading is None:  # (no `stops`: see above)
            return False
        return stops(i, rule, n_, lead, lc, sc)

    def pull(i, want_k, bud, u, cap, rule, reps):
        """Up to `reps` pulls of want_k responses each for query i under total budget bud, stopping early when
        the query leaves the active set or the budget stops the run (tot[STOP]: no budget left at the start,
        or with unit tokens a response that does not fit). reps > 1 only where nothing else could run in
        between (a block of round-robin rounds the budget pays for, streaming's current query), so it equals
        that many separate pulls; when the sample budget runs out after a draw, the scheduler's next pull
        finds it spent. Returns 0, or in a live run the pulls it could not make for a missing response.

        The query's state lives in locals for the whole call (the arrays could alias, so LLVM would otherwise
        load and store every field at every draw). Folding a response in is branch-free: which branch it
        takes is a coin flip to the predictor. Invalid answers count in the query's slot 0 (entropy's invalid
        category), answer a in slot a + 1."""
        a0 = off[i]
        size_i = off[i + 1] - a0
        base = aoff[i] + 1
        n_ = qs[i].n
        best = qs[i].best
        bj = qs[i].best_j
        ssum = qs[i].ssum
        cov = qs[i].covered
        lead = qs[i].lead
        lc = qs[i].lead_cnt
        sc = qs[i].second_cnt
        wl = qs[i].wlead
        ws = qs[i].wlead_sum
        ent = qs[i].s
        el = qs[i].elim
        capped = qs[i].capped
        exh = qs[i].exh
        used_s = tot[SAMPLES]
        used_t = tot[TOKENS]
        stop = 0
        g = 0  # lazy: the query's Fisher-Yates has made g steps (perm[a0 .. a0 + g - 1] are its first g draws)
        h = np.uint64(0)
        if lazy:
            if qgen[i, 1] != epoch:
                qgen[i, 1] = epoch
            else:
                g = qgen[i, 0]
            h = hs[i]
        # The reps pulls as one run of draws: D draws at most (reps pulls of want_k, the cap, the budget left,
        # the pool), a pull ending every want_k draws (the rule is checked there), and the pull that finds
        # the pool short (fewer responses left than it wants) marking the query exhausted when it starts.
        D = reps * want_k
        if cap > 0:
            D = min(D, cap - n_)
        if u == UNIT_SAMPLES:
            stop = 1 if bud - used_s <= 0 else 0  # (then D <= 0: nothing is drawn)
            D = min(D, bud - used_s)
        avail = size_i - n_
        short = (avail // want_k) * want_k if avail < D else -1  # the draw at which the short pull starts
        D = min(D, avail)
        Dh = D
        if live_run is not None and live and have[i] - n_ < D:  # (live) the whole pulls whose responses exist
            Dh = live_reach(have[i] - n_, want_k, u == UNIT_TOKENS, bud - used_t, tok, perm, a0 + n_)
        start = 0  # the current pull starts at this many draws and ends at end
        end = min(want_k, D)
        d = 0
        fired = False  # the rule ended this run of pulls
        while d < Dh:
            if d == short:
                exh = 1
            k = n_ + d
            if lazy and k == g:  # step k of the Fisher-Yates: the entry it puts at position k is the draw
                jj = a0 + swap_index(h, k, size_i)
                x = perm[_ix(a0 + k)]
                j = perm[_ix(jj)]
                perm[_ix(a0 + k)] = j
                perm[_ix(jj)] = x
                g += 1
            else:
                j = perm[_ix(a0 + k)]
            if records:  # the response's one record
                rj = packed[0][_ix(j)]
                tc = np.int64(rj.tc)
                t, s, cj, a = tc >> 1, rj.score, tc & 1, np.int64(rj.ans)
            else:
                t, s, cj, a = tok[_ix(j)], score[_ix(j)], np.int64(correct[_ix(j)]), ans[_ix(j)]
            if u == UNIT_TOKENS and t > bud - used_t:
                stop = 1
                break
            used_t += t
            d += 1
            better = s > best
            best = s if better else best
            bj = j if better else bj
            ssum += s
            cov |= cj
            valid = a >= 0
            slot = base + a
            c = si[_ix(slot), CNT]
            si[_ix(slot), CNT] = c + 1
            fj = si[_ix(slot), FIRST_J]
            si[_ix(slot), FIRST_J] = j if c == 0 else fj
            v = sf[_ix(slot)] + s
            sf[_ix(slot)] = v
            nc = c + 1
            gt = valid & (nc > lc)
            sw = gt & (a != lead)
            up2 = valid & (nc <= lc) & (nc > sc)  # valid and not gt: the runner-up may rise
            sc = lc if sw else (nc if up2 else sc)
            lead = a if sw else lead
            lc = nc if gt else lc
            wup = valid & (v > ws)
            wl = a if wup else wl
            ws = v if wup else ws
            if policy == ENTROPY:
                ent += T[_ix(nc)] - T[_ix(c)]
            if d == end:  # a pull ends: the rule
                start, end = end, min(end + want_k, D)
                if el == 0 and answered(i, rule, n_ + d, best, lead, lc, sc):
                    el = 1
                    fired = True
                    break
        unmade = 0  # (live) pulls not made for a missing response
        if live_run is not None and live and d == Dh and Dh < D and not fired and not stop:
            unmade = reps - d // want_k  # the next pull's responses do not all exist yet: the pulls made stay
            tot[NEED] = i + 1
        if stop and d > start:  # (tokens) a pull cut short by the budget, after some draws: the rule
            if el == 0 and answered(i, rule, n_ + d, best, lead, lc, sc):
                el = 1
        if d == short and not fired and not stop and unmade == 0:  # the short pull finds nothing left to draw
            exh = 1
        if exh and qs[i].exh == 0:
            tot[EXHAUSTED] += 1
        n_ += d
        used_s += d
        if cap > 0 and d > 0 and n_ >= cap:
            capped = 1
        qs[i].n = n_
        qs[i].best = best
        qs[i].best_j = bj
        qs[i].ssum = ssum
        qs[i].covered = cov
        qs[i].lead = lead
        qs[i].lead_cnt = lc
        qs[i].second_cnt = sc
        qs[i].wlead = wl
        qs[i].wlead_sum = ws
        qs[i].s = ent
        qs[i].elim = el
        qs[i].capped = capped
        qs[i].exh = exh
        tot[SAMPLES] = used_s
        tot[TOKENS] = used_t
        tot[STOP] = stop
        if lazy:
            qgen[i, 0] = g
        return unmade

    def index_of(i):
        cnt = qs[i].n
        if cnt == 0:
            return np.inf
        m = qs[i].ssum / cnt
        r = math.sqrt(cnt)
        if policy == UCB:
            return m + lam / r
        if policy == GAP:
            return -(r * (abs(gamma - m) + eps))
        if policy == GAP_LITERAL:
            return -((gamma - m) / r)
        return (L[cnt] - qs[i].s / cnt) + lam / r  # ENTROPY

    def warm(q):
        """Prefetch what query q's next pull reads first (its record's hot line, its offsets, its lazy Fisher-Yates
        state), so that those loads overlap the current decision instead of starting the next."""
        prefetch(qs, q, 0)  # (one line: QSTATE's hot fields; mmc's are on its second)
        prefetch(off, q, 0)
        prefetch(aoff, q, 0)
        if lazy:
            prefetch(qgen, q, 0)
            prefetch(hs, q, 0)

    def warm_draw(q):
        """Prefetch the permutation entry of query q's next draw and (lazily, a step not made yet) the entry its
        Fisher-Yates step swaps in and that response's score, tokens, answer and correctness: until a seed's steps
        touch it, perm is the identity there, so the response is most likely the position's own."""
        a0 = off[q]
        k = qs[q].n
        prefetch(perm, a0 + k, 0)
        b0, b1 = aoff[q], aoff[q + 1] - 1  # its answer slots (aoff, warmed with off): the draw's is among them
        prefetch(si, b0, 0)
        prefetch(sf, b0, 0)
        if b1 - b0 < 16:  # (a small block: its last line too; in a larger one the answer may be anywhere)
            prefetch(si, b1, 8)
            prefetch(sf, b1, 0)
        if lazy:
            g = qgen[q, 0] if qgen[q, 1] == epoch else 0
            if k == g and k < off[q + 1] - a0:
                jj = a0 + swap_index(hs[q], k, off[q + 1] - a0)
                prefetch(perm, jj, 0)
                if records:
                    prefetch(packed[0], jj, 0)
                else:
                    prefetch(score, jj, 0)
                    prefetch(tok, jj, 0)
                    prefetch(ans, jj, 0)
                    prefetch(correct, jj, 0)

    def warm_pull(q, several):
        """Prefetch what query q's next pull reads: for a pull of several draws every line of its block (they land
        anywhere in it), else its next draw's (warm_draw)."""
        if several:
            if records:
                warm_records(off[q], off[q + 1] - off[q], perm, packed[0])
            else:
                warm_block(off[q], off[q + 1] - off[q], perm, score, tok, ans, correct)
        else:
            warm_draw(q)

    def top_child(hk, hr, m):
        """The root's largest child in a heap of m > 1 entries: the next top unless the root stays."""
        c = 1
        for t in range(2, min(5, m)):
            if hk[t] > hk[c] or (hk[t] == hk[c] and hr[t] < hr[c]):
                c = t
        return c

    def sift_down(hk, hr, hq, size, k, r, q):
        """Place (key k, rank r, query q) at the top of the heap and sift it down with a hole. The heap is 4-ary
        (children of p at 4 p + 1 .. 4 p + 4: half the levels of a binary heap, so half the chain of dependent
        loads, and the four sibling keys on one or two cache lines), keeps keys and ranks by position (adjacent
        reads), and picks the largest child branch-free, as a two-round tournament (it is a coin flip to the branch
        predictor); a family cut by the heap's end (one per heap) takes a loop instead."""
        p = 0
        while True:
            c = 4 * p + 1
            if c >= size:
                break
            if c + 3 < size:
                x = c + ((hk[_ix(c + 1)] > hk[_ix(c)])
                         | ((hk[_ix(c + 1)] == hk[_ix(c)]) & (hr[_ix(c + 1)] < hr[_ix(c)])))
                y = c + 2 + ((hk[_ix(c + 3)] > hk[_ix(c + 2)])
                             | ((hk[_ix(c + 3)] == hk[_ix(c + 2)]) & (hr[_ix(c + 3)] < hr[_ix(c + 2)])))
                c = y if (hk[_ix(y)] > hk[_ix(x)]) | ((hk[_ix(y)] == hk[_ix(x)]) & (hr[_ix(y)] < hr[_ix(x)])) else x
            else:
                for t in range(c + 1, size):
                    if hk[_ix(t)] > hk[_ix(c)] or (hk[_ix(t)] == hk[_ix(c)] and hr[_ix(t)] < hr[_ix(c)]):
                        c = t
            if hk[_ix(c)] > k or (hk[_ix(c)] == k and hr[_ix(c)] < r):
                hk[_ix(p)] = hk[_ix(c)]
                hr[_ix(p)] = hr[_ix(c)]
                hq[_ix(p)] = hq[_ix(c)]
                p = c
            else:
                break
        hk[_ix(p)] = k
        hr[_ix(p)] = r
        hq[_ix(p)] = q

    # Every rule below is a scheduler: each turn of the loop names the next pull (query, size, budget, cap,
    # elimination rule, repeats), makes it at the single `pull` call site, then updates the rule's own cursor.
    # numba inlines `pull` wherever it is called, and each copy costs ~2 s of compile time, hence one call
    # site; it is also the shape a live driver needs (pick the next pulls; fold the responses in).
    # (one `in` each, so that a one-policy kernel prunes the other kind's blocks with them, as the closures are
    # inlined: see run_one's `code`; uab and pets always run with `reading`, the engine gives it)
    is_rr = policy in ROUND_ROBIN_POLICIES
    is_index = policy in INDEX_POLICIES

    act, hk, hr, hq, eb, ex = W.act, W.hk, W.hr, W.hq, W.eb, W.ex
    U, alloc, cost, first, cand, dfr = W.U, W.alloc, W.cost, W.first, W.cand, W.dfr
    by_cost = cost
    n_max = off[n] + 1  # more pulls than any query can make
    if reading is not None:  # pets' memo of rewards by count vector (okg_memo_reward), for this call's pulls
        pm = PETS_MEMO if policy == PETS and cfg.pets_mc == 0 else 0
        while pm > 64 and pm * cfg.pets_options > 16 * PETS_MEMO:  # its keys within 1 MB whatever the buckets
            pm //= 2
        mh, mk, mv = np.zeros(pm, np.uint64), np.empty((pm, cfg.pets_options), np.int64), np.empty(pm)
    if not (live_run is not None and resume):  # (a live run that goes on finds st and the arrays where it stopped)
        # ==== init: every policy's cursor (SCHED) and scratch ====
        # round-robin (uniform, elimination, two-stage's stage 1, optscale's warm-up, dsc's first draw): rounds over
        # act[:m] in order; p reads, w keeps. A block of rounds the budget pays for may run its queries in any order
        # (none can be starved), so act starts in memory order, which on large pools halves the cache misses of a
        # query's first draws; the first round the budget may cut short puts act in rank order, which compaction
        # keeps.
        st.rr_budget, st.rr_k, st.rr_cap, st.rr_elim = budget, 1, 0, ELIM_NONE
        if policy == ELIMINATION:
            st.rr_k, st.rr_cap, st.rr_elim = K, max_samples, elim
        elif policy == TWO_STAGE:
            st.rr_budget = np.int64(math.floor(rho * budget))
        elif policy == OPTSCALE:  # the warm-up: round-robin up to `warmup` responses each
            st.rr_cap = warmup if max_samples == 0 else min(warmup, max_samples)
        elif policy == DSC or policy == UAB:  # the ranking's (UAB: phase 1's) first draw: one response each
            st.rr_cap = 1
        st.one_pull = st.rr_elim == ELIM_NONE and st.rr_cap == 0
        st.rr_on = is_rr  # a round-robin phase is running (two-stage's stage 2 and dsc's partition are not)
        st.per_cap = False  # optscale's stage 2: each query's cap is its own N_i, alloc[i]
        st.blk = 1  # rounds in the current block
        st.paid = False  # the budget pays for the whole block
        st.nd, st.dp, st.nd2 = 0, 0, 0  # (live) the block's deferred queries: live_fold
        st.by_rank = False
        st.m = n if is_rr else 0
        st.p = 0
        st.w = 0
        st.stage = 1
        for t in range(n):
            act[t] = t

        # index rules: a max-heap by (index desc, rank asc). Every index starts at +inf, so the queries in rank
        # order already form a valid heap; only the pulled query's index changes.
        size = n if is_index else 0
        st.size = size
        # (loops, not np.arange / np.full / slice assignment: each of those compiles a library function of its own,
        # ~0.1-3 s of the first run's compile, measured)
        for t in range(size + 1):
            hk[t] = np.inf
            hr[t] = t
        hk[size] = -np.inf
        for t in range(size):
            hq[t] = order[t]
        if policy == MARGINAL_GAIN:  # its first indices are the predictions: heap them
            for t in range(size):
                hk[t] = gain_index(prior, qs, hq[t], strength, gamma)
            heapify(hk, hr, hq, size)
        # side-eb: per bin (successes, draws), bin nb for the queries not drawn yet; per query (side sum, token sum)
        st.pulls = 0
        st.n0 = 0
        if policy == SIDE_EB:
            for r in range(nb + 2):
                for t in range(3):
                    eb[r, t] = 0.0
            for t in range(n):
                ex[t, 0] = 0.0
                ex[t, 1] = 0.0
            side_eb(hk, hr, hq, size, qs, ex, eb, REFRESH, st.n0, side, tok, perm, off, nb, strength, unit, tot, hz,
                    budget)

        # two-stage's stage 2: the unanswered queries U[:u] and their allocations; q is the cursor
        for t in range(n):
            alloc[t] = 0
        st.u = 0
        st.q = 0
        st.start = 0

        # oracle: candidates (queries with a correct response) by (cost, rank)
        st.c = oracle_candidates(P, W, epoch, unit, cost, first, cand) if policy == ORACLE else 0
        if policy == ORACLE:  # the candidates by cost, ties by rank (cand is in rank order; U its costs, scratch here)
            for t in range(st.c):
                U[t] = cost[cand[t]]
            by_cost = stable_argsort(U, st.c)
        st.left = budget

        st.sp = 0  # streaming: position of the current query in the order
        if reading is not None and policy == PETS_ONLINE:  # -- pets-online: its plan, from the first queries' pools
            st.pb0, st.pb1 = pets_plan(off, ans, tok, order, cfg.pets_train, cfg.pets_options, budget, unit,
                                       max_samples if max_samples > 0 else PETS_BMAX, cfg.pets_curve_mc)
        st.ds_lo, st.ds_hi = 0, -1  # dsc's partition: its binary search (dsc_judge; ds_hi = -1: not started)

    pending = resume and how == 1
    halt = 0  # (live) the run stops for a response: 1 in a pull, 2 with deferred queries
    i, want, bud, uu, cap, rule, unmade = -1, 0, budget, unit, max_samples, elim, 0
    while True:
        i, want, bud, uu, cap, rule, reps = -1, 0, budget, unit, max_samples, elim, 1
        # ==== pick: the next pull, by the policy's cursor ====
        if live_run is not None and pending:  # (live) the pull the last call could not finish, made again
            pending = False
            i, want, bud, uu, cap, rule, reps = st.i, st.want, st.bud, st.uu, st.cap, st.rule, st.reps
        elif live_run is not None and st.rr_on and st.nd > 0 and st.p == st.m:  # (live) a deferred query's pulls
            i, want, bud, cap, rule, reps = dfr[st.dp, 0], st.rr_k, st.rr_budget, st.rr_cap, st.rr_elim, \
                dfr[st.dp, 1]
            if st.per_cap:
                cap = alloc[i]
        elif st.rr_on:  # -- round-robin (uniform, elimination; stage 1 of two-stage, optscale, dsc, uab; dsc's 3)
            if st.m == 0:
                if st.stage != 1 or (policy != TWO_STAGE and policy != OPTSCALE and policy != DSC
                                     and policy != UAB):
                    break
                if policy != TWO_STAGE:  # optscale's and dsc's first round-robin: its cap was its own
                    if tot[STOP]:
                        break
                    for i in range(n):
                        qs[i].capped = 0
                if reading is not None and policy == UAB:  # -- uab, phase 2 (uab_split), drawn as two-stage's 2
                    st.u = uab_split(qs, side, perm, off, U, alloc, hk, hr, hq, cfg.uab_tau, max_samples, budget, tot,
                                     unit)
                    st.stage, st.rr_on, st.start = 2, False, tot[TOKENS]
                    continue
                if policy == OPTSCALE:  # -- optscale, stage 2: each query's N_i (alloc) from its warm-up
                    optscale_caps(qs, score, off, perm, alloc, warmup, max_samples, gamma, pct)
                    st.m = active_by_rank(qs, order, act)
                    st.by_rank, st.per_cap, st.p, st.w, st.stage = True, True, 0, 0, 2
                    continue
                # -- two-stage's stage 2 and dsc's partition: one check of the elimination rule (dsc: on the first
                # draw); two-stage then splits what is left of the budget over the unanswered queries in proportion
                # to (sum + 1) / (N + 2), drawn without elimination.
                tot[STOP] = 0
                st.stage = 2
                st.rr_on = False
                u = np.int64(0)
                for pos in range(n):
                    i = order[pos]
                    if max_samples > 0 and qs[i].n >= max_samples:
                        qs[i].capped = 1
                    if qs[i].exh or qs[i].capped:
                        continue
                    if answered(i, elim, qs[i].n, qs[i].best, qs[i].lead, qs[i].lead_cnt, qs[i].second_cnt):
                        qs[i].elim = 1
                    else:
                        U[u] = i
                        u += 1
                st.u = u
                if policy == DSC:  # the ranking (U: easiest first), then the partition (dsc_judge)
                    difficulty_order(score, off, perm, order, U)
                    continue
                if u > 0:
                    stage2_split(qs, U, u, alloc, budget - (tot[SAMPLES] if unit == UNIT_SAMPLES else tot[TOKENS]),
                                 unit, n)
                st.start = tot[TOKENS]
                continue
            if st.p == 0:  # a new round: run as many rounds as the budget pays for whatever they draw in one go
                m = st.m
                if unit == UNIT_SAMPLES:
                    blk = (st.rr_budget - tot[SAMPLES]) // (m * st.rr_k)
                elif st.maxtok > 0:  # tokens: the rounds paid even if every draw were the pool's longest response
                    blk = (st.rr_budget - tot[TOKENS]) // (m * st.rr_k * st.maxtok)
                else:
                    blk = 0
                st.paid = blk >= 1
                if blk < 1 and not st.by_rank and (unit == UNIT_TOKENS or st.rr_budget > tot[SAMPLES]):
                    # the budget may run out in this round: rank order from now on (act[:m] holds exactly the
                    # active queries)
                    st.m = active_by_rank(qs, order, act)
                    st.by_rank = True
                st.blk = max(1, blk)
            i, want, bud, cap, rule, reps = act[st.p], st.rr_k, st.rr_budget, st.rr_cap, st.rr_elim, st.blk
            if big:  # the round's next two queries: warm the one after next, the next one's draw (four and two
                # turns on instead: no difference, five alternated runs, docs/performance.md)
                if st.p + 2 < st.m:
                    warm(act[st.p + 2])
                if st.p + 1 < st.m:
                    warm_pull(act[st.p + 1], st.blk > 1 or st.rr_k > 1)
            if st.per_cap:
                cap = alloc[i]
            if st.one_pull and not live:  # no rule between its pulls: the block is one pull (live: pulls, which
                # the query can make as their responses come)
                want, reps = st.rr_k * st.blk, 1
        elif policy == TWO_STAGE or policy == UAB:  # -- two-stage's stage 2, uab's phase 2: U[q] draws alloc[q]
            q = st.q
            if q >= st.u:
                break
            i = U[q]
            if unit == UNIT_SAMPLES:  # one pull of alloc[q]
                if alloc[q] == 0:
                    st.q = q + 1
                    continue
                want, rule = alloc[q], ELIM_NONE
            else:  # one response at a time while it fits in the allowance
                done = False
                if max_samples > 0 and qs[i].n >= max_samples:
                    qs[i].capped = 1
                    done = True
                elif qs[i].n == off[i + 1] - off[i]:
                    if alloc[q] - (tot[TOKENS] - st.start) > 0 and qs[i].exh == 0:
                        qs[i].exh = 1
                        tot[EXHAUSTED] += 1
                    done = True
                if done:
                    st.q = q + 1
                    st.start = tot[TOKENS]
                    continue
                want, bud, cap, rule = 1, st.start + alloc[q], 0, ELIM_NONE
        elif policy == DSC:  # -- dsc, stage 2, the partition: dsc_judge names the next judge (-1: it is over)
            i = dsc_judge(qs, off, tot, U, alloc, st, K, judge)
            if i < 0:  # stage 3: windows of K for the others, round-robin easiest first, the rule after each window
                st.m = active_by_rank(qs, U, act)
                st.rr_k, st.rr_cap, st.rr_elim, st.one_pull = K, max_samples, elim, False
                st.rr_on, st.by_rank, st.p, st.w, st.stage = True, True, 0, 0, 3
                continue
            want = K - qs[i].n  # its first window, then the rule
        elif is_index:  # -- the index policies (ucb, gap, gap-literal, entropy, marginal-gain, side-eb): the top
            if st.size == 0:
                break
            i, want, rule = hq[0], K, (ELIM_NONE if policy == PETS else elim)
            st.n0 = qs[i].n
            if big and st.size > 1:  # the next top is this query again or the root's larger child: warm the child
                # (and the likely top after it too, top_after on branch s5-grow: no gain, measured twice)
                c = top_child(hk, hr, st.size)
                warm(hq[c])
        elif policy == STREAMING:  # -- streaming: the queries in order, each until it stops or meets the reserve
            sp = st.sp
            if sp >= n:
                break
            i = order[sp]
            to_come = n - sp - 1
            if big and sp + 1 < n:  # the next two queries in the order: as round-robin's
                if sp + 2 < n:
                    warm(order[sp + 2])
                warm_draw(order[sp + 1])
            # (the active test written out at each use: as a closure, each call site was one more inlined copy)
            if qs[i].elim or qs[i].capped or qs[i].exh:  # not active
                st.sp = sp + 1
                continue
            if unit == UNIT_SAMPLES:
                room = budget - tot[SAMPLES]
                if room <= to_come:  # the reserve: one response for each query still to come
                    st.sp = sp + 1
                    continue
                want, bud, reps = K, budget - to_come, n_max  # pulls until the query stops or reaches the reserve
            else:
                su = tot[SAMPLES]
                reserve = 0 if su == 0 else (to_come * tot[TOKENS] + su - 1) // su
                if budget - tot[TOKENS] <= reserve:
                    st.sp = sp + 1
                    continue
                want, bud = K, budget - reserve
        elif policy == PETS_ONLINE:  # -- pets-online: the queries in order, each warming up to K0 accepted answers
            # (one draw at a time), then drawing to its bucket's budget in one pull; no rule
            if reading is None:  # (never: the engine gives it `reading`; its code is not compiled without)
                break
            sp = st.sp
            if sp >= n:
                break
            i = order[sp]
            if qs[i].capped or qs[i].exh:
                st.sp = sp + 1
                continue
            acc, same = pets_warm(ans, perm, off[i], qs[i].n, cfg.pets_options)
            want, rule = 1, ELIM_NONE
            if acc >= PETS_K0:
                want = (st.pb0 if same else st.pb1) - qs[i].n
                if want <= 0:
                    st.sp = sp + 1
                    continue
        elif policy == ORACLE:  # -- oracle: exactly each candidate's first k + 1 responses, cheapest first, while
            # they fit (a branch of its own, not the chain's `else`, so that the other policies' kernels prune it)
            q = st.q
            if q >= st.c or cost[cand[by_cost[q]]] > st.left:
                break
            i = cand[by_cost[q]]
            st.left -= cost[i]
            want, bud, uu, cap, rule = first[i] + 1, INT64_MAX, UNIT_SAMPLES, 0, ELIM_NONE
            if big and q + 1 < st.c:  # the next two candidates (a pull of several draws: all the next one's lines,
                # its draws anywhere in its block after the walk's steps)
                if q + 2 < st.c:
                    warm(cand[by_cost[q + 2]])
                q1 = cand[by_cost[q + 1]]
                warm_pull(q1, first[q1] > 0)
        else:  # (never: every policy has its branch above)
            break

        unmade = pull(i, want, bud, uu, cap, rule, reps)
        if live_run is not None and unmade > 0 and not (st.rr_on and st.paid):  # (live) a response that does not
            # exist yet: stop here, keeping this pull's rest for the next call
            halt = 1
            break

        # ==== fold: the pull's outcome into the policy's cursor ====
        if st.rr_on:  # -- round-robin
            if tot[STOP]:
                st.m = 0  # the (stage's) budget is spent
                continue
            if live_run is not None and live:  # (live) with the deferred queries of a block
                go = live_fold(dfr, st, act, qs, tot, i, unmade)
                if go == 0:  # the pass or the sweep goes on
                    continue
                if go == 2:  # every query left in the block waits: stop until their responses come
                    halt = 2
                    break
            else:
                if qs[i].elim == 0 and qs[i].capped == 0 and qs[i].exh == 0:  # still active
                    act[st.w] = i
                    st.w += 1
                st.p += 1
                if st.p < st.m:
                    continue
            st.m, st.p, st.w = st.w, 0, 0
        elif policy == DSC:  # -- dsc, stage 2: a judge's window was drawn
            alloc[st.ds_next] = 1
            st.ds_next += 1
            if tot[STOP]:
                break
        elif policy == TWO_STAGE or policy == UAB:  # -- two-stage's stage 2, uab's phase 2
            if unit == UNIT_SAMPLES or tot[STOP]:
                tot[STOP] = 0
                st.q += 1
                st.start = tot[TOKENS]
        elif is_index:  # -- the index policies: the pulled query's new index, or it leaves the heap
            if tot[STOP]:
                break
            size = st.size
            key = 0.0
            if policy == SIDE_EB:  # the pull's outcome into the bins; its new index
                key = side_eb(hk, hr, hq, size, qs, ex, eb, i, st.n0, side, tok, perm, off, nb, strength, unit, tot,
                              hz, budget)
                st.pulls += 1
            if reading is not None and policy == PETS:  # -- pets: its OKG reward (pets_index; pets_mc: redrawn below)
                key = pets_index(ans, perm, off, i, qs[i].n, cfg.pets_options, 0, _ONE, mh, mk, mv) \
                    if cfg.pets_mc == 0 else 0.0
            if qs[i].elim == 0 and qs[i].capped == 0 and qs[i].exh == 0:  # active: its new index at the top
                key, r0, q0 = (gain_index(prior, qs, i, strength, gamma) if policy == MARGINAL_GAIN else
                               key if policy == SIDE_EB or policy == PETS else index_of(i)), hr[0], i
            else:  # it leaves the heap: the last entry moves to the top
                size -= 1
                st.size = size
                key, r0, q0 = hk[size], hr[size], hq[size]
                hk[size] = -np.inf
            if big and size > 1:  # the likely next top (warmed at the pick): its next draw
                warm_draw(hq[top_child(hk, hr, size)])
            sift_down(hk, hr, hq, size, key, r0, q0)
            if reading is not None and policy == PETS and cfg.pets_mc > 0:  # the source's noise: at every step every
                # query's reward estimated afresh (those not drawn yet stay +inf), then the largest
                for e in range(size):
                    q2 = hq[e]
                    if qs[q2].n > 0:
                        hk[e] = pets_index(ans, perm, off, q2, qs[q2].n, cfg.pets_options, cfg.pets_mc,
                                           pets_key(tok, score, perm, off[q2], qs[q2].n, q2, tot[SAMPLES]),
                                           mh, mk, mv)
                heapify(hk, hr, hq, size)
            if policy == SIDE_EB and st.pulls >= max(refresh, size):  # every bin's news reaches every query's
                # index, once per R pulls or per round of the queries in the heap if more: a refresh is a pass over
                # the heap, so a fixed R made each decision's cost grow with the pool (docs/semantics.md)
                side_eb(hk, hr, hq, size, qs, ex, eb, REFRESH, st.n0, side, tok, perm, off, nb, strength, unit, tot,
                        hz, budget)
                st.pulls = 0
        elif policy == STREAMING:  # -- streaming
            if tot[STOP]:  # the reserve is reached (tokens: the next response does not fit): the turn ends
                tot[STOP] = 0
                st.sp += 1
        elif policy == PETS_ONLINE:  # -- pets-online: the budget's end ends the run (a pull cut short by the sample
            # budget finds it spent at the next pull)
            if tot[STOP]:
                break
        else:  # -- oracle
            st.q += 1
    if live_run is not None and halt > 0:  # (live) the pull that stopped, for the next call: st.resume = 1 makes it
        # again (its pulls left), 2 sweeps the deferred queries; the cursors are in st already
        st.i, st.want, st.bud, st.uu, st.cap, st.rule, st.reps = i, want, bud, uu, cap, rule, unmade
        st.resume = halt


@jit
def run_one_any(P, W, cfg, budget, epoch, reading, live_run, dc):
    """run_one of whatever policy cfg names, with its code known only as it runs: Python's entry to run_one
    (engine.run_once, live runs; numba cannot type a range passed from Python), the same kernel as the grid's
    generic one, reading the four arrays (packed (): a live run's arrays fill as it goes, and run_once is for
    tests and drivers, whose pools are small)."""
    run_one(P, W, cfg, range(cfg.policy), budget, epoch, (), reading, live_run, dc)


@jit
def selections(qs, si, aoff, correct, out):
    """out[i]: which selections of query i pick a correct response, as F_SEL bits (bon = highest score,
    weighted = largest summed score, sc = majority; an answer's selected response is its first draw). One call
    per run: called per query, passing the arrays cost ~8 µs per 500-query run, measured."""
    for i in range(qs.shape[0]):
        bits = 0
        j = qs[i].best_j
        if j >= 0 and correct[j] == 1:
            bits |= 16
        a = qs[i].wlead
        if a >= 0 and correct[si[aoff[i] + 1 + a, FIRST_J]] == 1:
            bits |= 32
        a = qs[i].lead
        if a >= 0 and correct[si[aoff[i] + 1 + a, FIRST_J]] == 1:
            bits |= 64
        out[i] = bits


@jit
def cisc_weights(score, temp, out):
    """out[j] = exp((score[j] - 1) / temp): CISC's softmax weight of response j times a factor shared by every
    response (docs/semantics.md), so it is computed once per pool, not per run. The shift by the largest possible
    score keeps every weight in [exp(-1 / temp), 1]: no overflow, and no underflow for temp >= 1/700."""
    for j in range(score.shape[0]):
        out[j] = math.exp((score[j] - 1.0) / temp)


@inner
def _kth_in_place(b, m, k):
    """The k-th smallest of b[:m] (k from 0), by quickselect in place (b is scratch; Hoare partition:
    b[lo..j] <= pivot <= b[i..hi]). deepconf calls it once per query per run, kth_smallest on a copy."""
    lo, hi = 0, m - 1
    while lo < hi:
        pivot = b[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while b[i] < pivot:
                i += 1
            while b[j] > pivot:
                j -= 1
            if i <= j:
                b[i], b[j] = b[j], b[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return b[k]


@inner
def _vote(off, aoff, ans, perm, i, d, w, thr, conf, acc, first, lst):
    """Weighted vote over query i's first d draws (perm order): the valid responses j with conf[j] >= thr each
    add w[j] to their answer. Returns the earliest drawn of those responses whose answer has the largest sum
    (ties: the answer drawn first among them), -1 when none votes. acc, first and lst are per-answer-slot
    scratch, left cleared (first = -1)."""
    base = aoff[i] + 1
    u = 0
    for k in range(d):
        j = perm[off[i] + k]
        a = ans[j]
        if a < 0 or conf[j] < thr:
            continue
        s = base + a
        if first[s] < 0:  # the answer's first vote: in the order of first votes, for the tie rule
            first[s] = j
            acc[s] = 0.0
            lst[u] = s
            u += 1
        acc[s] += w[j]
    if u == 0:
        return -1
    win = lst[0]
    for t in range(1, u):
        if acc[lst[t]] > acc[win]:  # strict: a tie keeps the earlier answer
            win = lst[t]
    jw = first[win]
    for t in range(u):
        first[lst[t]] = -1
    return jw


@jit
def confidence_votes(off, aoff, correct, score, ans, perm, qs, cw, eta, acc, first, lst, buf, out):
    """ORs into out[i] the F_SEL bits of the confidence-weighted votes of query i, read from its drawn responses
    perm[off[i] .. off[i] + qs[i].n - 1] after a run (docs/semantics.md): cisc (128), the vote weighted by
    cw (cisc_weights), and deepconf (256), the vote over the valid draws whose score reaches the
    ceil((m - 1) (100 - eta) / 100)-th smallest of the m valid draws' scores, weighted by the score. A pass after
    the run rather than state kept per draw, so that the draw loop does no more work for them (one call per run;
    acc, first (all -1), lst and buf are scratch of the answer slots and of the largest pool)."""
    for i in range(qs.shape[0]):
        d = qs[i].n
        if d == 0:
            continue
        bits = 0
        j = _vote(off, aoff, ans, perm, i, d, cw, -np.inf, score, acc, first, lst)
        if j >= 0 and correct[j] == 1:
            bits |= 128
        m = np.int64(0)  # (not a literal 0: that compiled _kth_in_place a second time)
        top = 0.0
        for k in range(d):
            jj = perm[off[i] + k]
            if ans[jj] >= 0:
                buf[m] = score[jj]
                top = max(top, score[jj])
                m += 1
        if m > 0 and top > 0.0:  # DeepConf votes only when some kept confidence is positive
            kk = np.int64(math.ceil((m - 1) * (100.0 - eta) / 100.0))
            thr = _kth_in_place(buf, m, kk)
            j = _vote(off, aoff, ans, perm, i, d, score, thr, score, acc, first, lst)
            if j >= 0 and correct[j] == 1:
                bits |= 256
        out[i] |= bits


@njit(nogil=True, cache=True, no_cfunc_wrapper=True)
def _grid(P, qkeys, seeds, cfgs, only, budgets, cw, eta, out_f, out_i, pq_n, pq_flags, sched, perm, s_lo, s_hi,
          packed, reading, dc, done):
    """Every configuration (cfgs: CONFIG records) at budgets[c, s] on seeds s_lo .. s_hi - 1, with scratch
    allocated once. It releases the GIL: engine.run_grid runs contiguous chunks of seeds on threads, and a
    seed's results depend only on the seed. (Threads rather than prange: numba's parallel compile pipeline
    cost ~8 s of the first run's compile, measured.) cw: (cisc's per-response weights,) (cisc_weights), and eta
    deepconf's kept percentage; with no weights (an empty array) the confidence votes are skipped (their bits 0), and
    with cw = () they are not compiled at all (its length is a constant that prunes their code before typing, as
    run_one's `packed`: engine.weights_arg passes () to a one-policy grid without them, as `ttc replay --policy P
    --score gt` is; confidence_votes with its helpers and scratch was ~0.6 s of CPU of its cold run, docs/
    performance.md, "Start-up"). sched:
    the scheduler's scratch (engine.sched), one per thread; perm: the thread's permutation, the identity (each seed
    leaves it so again: restore_identity; engine.take_identities keeps it from call to call). packed, reading, dc:
    run_one's (packed: the pool's records on a big pool, else (), engine.packed_arg; reading, dc: None unless a
    configuration needs them). done[0] counts the runs made, for progress: one element per thread, which
    engine.run_grid reads while the threads run (a run of a large pool takes long enough that progress per block of
    seeds fell silent for minutes, issue 27). only: () for configurations of any policies (one compiled kernel for
    all of them), or 1 + k Nones when every configuration is policy k (engine.only_arg): a kernel compiled for that
    policy alone (run_one's `code`), its length a constant that prunes the other branch below before typing."""
    off, aoff, correct = P.off, P.aoff, P.correct
    n = qkeys.shape[0]
    per_query = pq_n.shape[0] > 0
    weights = len(cw) > 0  # (a constant: cw, above)
    if s_lo < s_hi:
        qs, si, sf, tot, mm = new_state(n, aoff[n])
        qgen = np.zeros((n, 2), np.int64)
        hs = np.empty(n, np.uint64)  # (filled for every seed before it is read)
        order = np.empty(n, np.int64)
        rank = np.empty(n, np.int64)
        sel = np.empty(n, np.int64)
        W = Scratch(perm, qgen, hs, order, qs, si, sf, tot, mm, sched.act, sched.hk, sched.hr, sched.hq, sched.eb,
                    sched.ex, sched.U, sched.alloc, sched.cost, sched.first, sched.cand, sched.sch, sched.dfr)
        if weights:  # the confidence votes' scratch (the largest pool's, the answer slots')
            votes = cw[0].shape[0] > 0
            biggest = 0
            for i in range(n):
                biggest = max(biggest, off[i + 1] - off[i])
            v_acc = np.zeros(aoff[n] if votes else 0)
            v_first = np.empty(aoff[n] if votes else 0, np.int64)
            v_first[:] = -1
            v_lst = np.empty(biggest + 1, np.int64)
            v_buf = np.empty(biggest + 1)
        for s in range(s_lo, s_hi):
            epoch = np.int64(s + 1)
            fill_query_order(qkeys, seeds[s], rank, order)
            for i in range(n):  # each query's permutation stream, in one vectorisable loop
                hs[i] = seed_stream(seeds[s], qkeys[i])
            for c in range(cfgs.shape[0]):
                if len(only) == 0:
                    run_one(P, W, cfgs[c], range(cfgs[c].policy), budgets[c, s], epoch, packed, reading, None, dc)
                else:
                    run_one(P, W, cfgs[c], only[1:], budgets[c, s], epoch, packed, reading, None, dc)
                selections(qs, si, aoff, correct, sel)
                if weights:
                    if votes:
                        confidence_votes(off, aoff, correct, P.score, P.ans, perm, qs, cw[0], eta, v_acc, v_first,
                                         v_lst, v_buf, sel)
                cov = 0
                acc0 = 0
                acc1 = 0
                acc2 = 0
                acc3 = 0
                acc4 = 0
                answered = 0
                cons = 0  # the self-consistency rate: the majority drawn (sc's lead) is a majority of the pool
                for i in range(n):
                    if qs[i].lead >= 0:
                        cons += P.mode[aoff[i] + 1 + qs[i].lead]
                    cov += qs[i].covered
                    answered += qs[i].elim
                    acc0 += (sel[i] >> 4) & 1
                    acc1 += (sel[i] >> 5) & 1
                    acc2 += (sel[i] >> 6) & 1
                    acc3 += (sel[i] >> 7) & 1
                    acc4 += (sel[i] >> 8) & 1
                    if per_query:
                        pq_n[c, s, i] = qs[i].n
                        pq_flags[c, s, i] = (qs[i].elim * 1 + qs[i].covered * 2 + qs[i].exh * 4
                                             + qs[i].capped * 8 + sel[i])
                out_f[c, s, 0] = cov / n
                out_f[c, s, 1] = acc0 / n
                out_f[c, s, 2] = acc1 / n
                out_f[c, s, 3] = acc2 / n
                out_f[c, s, 4] = acc3 / n
                out_f[c, s, 5] = acc4 / n
                out_f[c, s, 6] = cons / n
                out_i[c, s, 0] = tot[SAMPLES]
                out_i[c, s, 1] = tot[TOKENS]
                out_i[c, s, 2] = tot[EXHAUSTED]
                out_i[c, s, 3] = answered
                reset_state(qs, si, sf, tot, off, aoff, P.ans, perm)
                done[0] += 1
            restore_identity(off, perm, qgen, hs, epoch)


# ------------------------------------------------------------------------------------------------------ depth
# Depth (issue 30): a trace advanced probe by probe, stopped part-way. Codes of their own, on their own lines (the
# range tuples above belong to the width engine). None of this is reached from run_one or _grid: a grid without a
# depth policy compiles none of it (docs/semantics.md, "Depth").
PARALLEL_PROBE = 20
DEPTH_STABILITY = 13  # a trace stops when its last m probes agree (one valid answer)
DEPTH_WHOLE = 14  # no depth rule: a trace runs to its end (or to the trace cap)
PROBE_COST_TOKENS = 0  # a probe costs its token offset; probes at or past the trace's end are never reached
PROBE_COST_AUTOTTS = 1  # AutoTTS's replay: every probe is reached and paid; finishing pays max(total, last offset)
PP_MAX_STEPS = 100  # Parallel-Probe's max_steps (the source's default, never changed by its evaluator)
# A live run's record not generated yet (replay.live.run_live_depth): rec[k, 1] < 0, never a real record's code
MISSING_SEGMENT = -1


@jit
def depth_view(poff, ptok, pans, pok, tok, ans, correct, rule, m, cap, cost_mode, out_tok, out_ans, out_ok,
               out_reach):
    """Each trace j as the depth rule stops it, as a whole response the width engine can draw: out_tok[j] its
    cost, out_ans[j] / out_ok[j] the answer it holds (its last probe's when stopped, its final one when it ran to
    its end) and whether that is correct, out_reach[j] the probes it can reach (what Parallel-Probe advances
    through). A trace reaches a probe whose offset is below its end (cost_mode PROBE_COST_TOKENS; AutoTTS's replay
    reaches all of them) and, with a trace cap (cap > 0), at most the cap: a trace whose end is past the cap stops
    there, costs cap and holds its last probe at or below it (none: -1, not correct). rule DEPTH_STABILITY stops a
    trace at the first probe that makes m agreeing valid answers in a row, at that probe's offset. Per trace, not
    per draw: a depth rule that reads one trace alone is a property of the trace, so every width policy runs under
    it on this view unchanged (docs/semantics.md)."""
    for j in range(tok.shape[0]):
        a0, a1 = poff[j], poff[j + 1]
        T = tok[j]
        end = T
        if cost_mode == PROBE_COST_AUTOTTS and a1 > a0:
            end = max(T, ptok[a1 - 1])
        reach = 0
        for k in range(a0, a1):
            if (cost_mode == PROBE_COST_TOKENS and ptok[k] >= T) or (cap > 0 and ptok[k] > cap):
                break
            reach += 1
        out_reach[j] = reach
        if cap > 0 and end > cap:  # stopped by the cap: its last probe there
            out_tok[j] = cap
            out_ans[j] = pans[a0 + reach - 1] if reach > 0 else -1
            out_ok[j] = pok[a0 + reach - 1] if reach > 0 else 0
        else:
            out_tok[j] = end
            out_ans[j] = ans[j]
            out_ok[j] = correct[j]
        if rule == DEPTH_STABILITY:
            run = 0
            for k in range(a0, a0 + reach):
                a = pans[k]
                if a >= 0 and run > 0 and a == pans[k - 1]:
                    run += 1
                else:
                    run = 1 if a >= 0 else 0
                if run >= m:
                    out_tok[j] = ptok[k]
                    out_ans[j] = a
                    out_ok[j] = pok[k]
                    break


@inner
def depth_records(poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, rec):
    """Each trace's segments as one run of records a depth policy reads in order: trace j's at poff[j] + j onwards,
    its reach[j] probes then its end (rec sized poff[-1] + traces). A record is (tokens at its end, 4 * (answer + 1)
    + 2 * (it is the end) + correct): one cache line for what a segment reads, where the probe arrays, the trace's
    offsets and its end put a segment's reads on up to eight lines, all missed once the batch has moved on.
    Returns the most tokens a segment costs (each pays its tokens past the last one's, at least none)."""
    seg = 0
    for j in range(reach.shape[0]):
        r = poff[j] + j
        for k in range(poff[j], poff[j] + reach[j]):
            rec[r, 0] = ptok[k]
            rec[r, 1] = 4 * (pans[k] + 1) + pok[k]
            seg = max(seg, ptok[k] - (ptok[k - 1] if k > poff[j] else 0))
            r += 1
        rec[r, 0] = end_tok[j]
        rec[r, 1] = 4 * (end_ans[j] + 1) + 2 + end_ok[j]
        seg = max(seg, end_tok[j] - (ptok[poff[j] + reach[j] - 1] if reach[j] > 0 else 0))
    return seg


@inner
def depth_want(want, blk, i, p, unit, bound, room):
    """A live depth run (blk an array; replay passes None, which compiles the live branches away) reached trace p's
    next segment (query i's), not generated yet: it is wanted (want[1 .. want[0]], in the order reached) and query i
    waits (blk[i]: its decisions need it). The run goes on collecting only while what it reaches is sure to be
    reached however the wanted segments turn out: the budget pays them in full at `bound` tokens each (the most a
    segment may cost; <= 0: unknown), and a waiting query's next decision ends the collection. True when the run may
    go on (paying `bound` for it), False when the wanted segment may not fit in `room` (the run ends there: the
    segment is reached, nothing after it surely is). Under a sample budget a segment costs no samples and always
    fits."""
    want[0] += 1
    want[want[0]] = p
    blk[i] = 1
    return unit != UNIT_TOKENS or (0 < bound <= room)


@inner
def depth_sure(unit, bound, count, room):
    """(live, depth_want) Whether `count` more segments a waiting query may explore (a burst's rest, a widening's
    starts) surely fit in `room` tokens at `bound` each: the run goes on collecting past them only then."""
    return unit != UNIT_TOKENS or count <= 0 or (bound > 0 and count * bound <= room)


@inner
def parallel_probe(off, aoff, poff, rec, perm, order, chains, T, patience, warm, unit, budget, t_r, t_paid, t_st,
                   t_off, t_ans, t_ok, qi, cnt, tot, bound, want, blk):
    """Parallel-Probe (arXiv 2602.03845, as AutoTTS's replay runs it: docs/semantics.md) on every query, under one
    budget shared by the batch. Each query starts `chains` traces (its permutation's first), each explored once
    (one probe, or its end); then steps, round-robin over the queries in rank order, one step each per round: every
    live trace advances one segment, the query's winner is the majority of its unpruned traces' latest answers
    (ties: the answer first met in trace order), after `warm` steps a live trace whose latest answer is off the
    winner `patience` steps in a row is pruned, and the query stops when its winner has been the same for T steps
    in a row, when every trace has finished or been pruned, or after PP_MAX_STEPS steps. A segment or a trace
    that does not fit in the budget left ends the run; a query then holds the majority of its unpruned traces'
    latest answers. The segments are depth_records' rec. Per trace (a position p of the permutation): t_r its next
    record, t_paid tokens paid, t_st (0 live, 1 finished, 2 pruned), t_off off-track count, t_ans / t_ok its latest
    answer. Per query qi[i]: chains started, step, stable count, previous winner (-2: none), done, held answer,
    held correct, steps run, traces pruned. cnt: per answer slot, the unpruned traces whose latest answer it is
    (zero on entry; the invalid answers' slot aoff[i] counts too, so that a segment updates it without a branch;
    kept as traces advance and are pruned, so a majority is one pass over the query's traces). Live (blk an array:
    depth_want's protocol) a record not generated yet is wanted instead of read."""
    n = off.shape[0] - 1
    ended = False
    lim = budget if unit == UNIT_TOKENS else np.int64(1) << 62  # the tokens a run may spend
    used = tot[TOKENS]
    bnd = bound if unit == UNIT_TOKENS else 0  # (live) the most a wanted segment may cost

    def majority(i):
        """(winner, its correctness): the winner -1 when no unpruned trace has a valid answer; the first in trace
        order of the answers held by the most unpruned traces (cnt). With fewer answer slots than traces, the most
        votes come from the slots and the winner from the first trace that holds that many (the majority is
        usually met early); else from one pass over the traces."""
        base = aoff[i] + 1
        best, bc, bok = -1, 0, 0
        if aoff[i + 1] - base < qi[i, 0]:
            for s in range(_ix(base), _ix(aoff[i + 1])):
                bc = max(bc, cnt[s])
            if bc > 0:
                for p in range(_ix(off[i]), _ix(off[i] + qi[i, 0])):
                    a = t_ans[p]
                    if t_st[p] != 2 and a >= 0 and cnt[_ix(base + a)] == bc:
                        return a, t_ok[p]
            return best, bok
        for p in range(_ix(off[i]), _ix(off[i] + qi[i, 0])):
            a = t_ans[p]
            if t_st[p] != 2 and a >= 0 and cnt[_ix(base + a)] > bc:
                best, bc, bok = a, cnt[_ix(base + a)], t_ok[p]
        return best, bok

    # round 0: every query starts its chains, in rank order, each explored once
    for r in range(n):
        i = order[r]
        base = aoff[i] + 1
        for p in range(off[i], off[i] + min(chains, off[i + 1] - off[i])):
            if unit == UNIT_SAMPLES and tot[SAMPLES] >= budget:
                ended = True
                break
            j = perm[p]
            k = poff[j] + j
            if blk is not None and rec[k, 1] < 0:
                if not depth_want(want, blk, i, p, unit, bound, lim - used):
                    ended = True
                    break
                used += bnd
                qi[i, 0] += 1
                tot[SAMPLES] += 1
                continue
            cost = rec[k, 0]
            fin = rec[k, 1] & 2
            if fin:
                cost = max(0, cost)
            if cost > lim - used:
                ended = True
                break
            used += cost
            a = (rec[k, 1] >> 2) - 1
            t_r[p], t_paid[p], t_st[p], t_off[p], t_ans[p], t_ok[p] = k + 1, cost, fin >> 1, 0, a, rec[k, 1] & 1
            cnt[base + a] += 1
            qi[i, 0] += 1
            tot[SAMPLES] += 1
        if ended:
            break
    while not ended:
        going = False
        for r in range(n):
            i = order[r]
            if qi[i, 4] != 0:
                continue
            if blk is not None and blk[i] != 0:  # its step reads a wanted segment: nothing after is sure
                ended = True
                break
            going = True
            a0 = off[i]
            m = qi[i, 0]
            step = qi[i, 1]
            base = aoff[i] + 1
            for p in range(_ix(a0), _ix(a0 + m)):  # forward every live trace one segment
                if t_st[p] != 0:
                    continue
                k = t_r[p]
                if blk is not None and rec[_ix(k), 1] < 0:
                    if not depth_want(want, blk, i, p, unit, bound, lim - used):
                        ended = True
                        break
                    used += bnd
                    continue
                cost = rec[_ix(k), 0] - t_paid[p]
                fin = rec[_ix(k), 1] & 2
                if fin:
                    cost = max(0, cost)
                if cost > lim - used:
                    ended = True
                    break
                used += cost
                t_paid[p] += cost
                cnt[_ix(base + t_ans[p])] -= 1
                a = (rec[_ix(k), 1] >> 2) - 1
                t_ans[p], t_ok[p], t_r[p], t_st[p] = a, rec[_ix(k), 1] & 1, k + 1, fin >> 1
                cnt[_ix(base + a)] += 1
            if ended:
                break
            if blk is not None and blk[i] != 0:  # (its decisions wait for the wanted segments)
                continue
            w, wok = majority(i)
            if step >= warm and m - qi[i, 8] > 1:
                pruned = False  # (a trace's off-track count reads w only: counted and pruned in one pass)
                for p in range(_ix(a0), _ix(a0 + m)):
                    if t_st[p] == 0:
                        t_off[p] = t_off[p] + 1 if t_ans[p] != w else 0
                        if t_off[p] >= patience:
                            t_st[p] = 2
                            cnt[_ix(base + t_ans[p])] -= 1
                            qi[i, 8] += 1
                            pruned = True
                if pruned:
                    w, wok = majority(i)
                    if qi[i, 8] == m:  # every trace pruned: the previous winner stands
                        qi[i, 4] = 1
                        qi[i, 7] = step + 1
                        continue
            qi[i, 2] = qi[i, 2] + 1 if w == qi[i, 3] else 0
            qi[i, 3] = w
            qi[i, 5], qi[i, 6] = w, wok
            qi[i, 1] = step + 1
            qi[i, 7] = step + 1
            if qi[i, 2] >= T:
                qi[i, 4] = 2  # consensus: answered
                continue
            alive = False
            for p in range(_ix(a0), _ix(a0 + m)):
                if t_st[p] == 0:
                    alive = True
                    break
            if not alive or step + 1 >= PP_MAX_STEPS:
                qi[i, 4] = 1
        if not going:
            break
    tot[TOKENS] = used
    for i in range(n):  # (the budget ended the run) the majority of what each query's traces hold now
        if qi[i, 4] == 0 and qi[i, 0] > qi[i, 8]:
            qi[i, 5], qi[i, 6] = majority(i)


@inner
def depth_tally(off, qi, state_col, right_col, t_ok, tot, per_query, pq_n, pq_flags, out_f, out_i, c, s):
    """One depth run's outcome into the grid's outputs, as _grid writes a width run's: coverage (some trace's held
    answer correct), accuracy (the query's answer, qi[i, right_col]), answered (qi[i, state_col] == 2), the totals;
    qi[i, 0] is the traces query i drew. Shared by parallel-probe's and cmc's grids, whose per-query state keeps these
    in different columns."""
    n = qi.shape[0]
    acc = 0
    cov = 0
    answered = 0
    for i in range(n):
        acc += qi[i, right_col]
        answered += 1 if qi[i, state_col] == 2 else 0
        hit = 0
        for p in range(off[i], off[i] + qi[i, 0]):
            if t_ok[p] == 1:
                hit = 1
                break
        cov += hit
        if per_query:
            pq_n[c, s, i] = qi[i, 0]
            pq_flags[c, s, i] = (1 if qi[i, state_col] == 2 else 0) + 2 * hit + 64 * qi[i, right_col]
    out_f[c, s, 0] = cov / n
    out_f[c, s, 3] = acc / n
    out_i[c, s, 0] = tot[SAMPLES]
    out_i[c, s, 1] = tot[TOKENS]
    out_i[c, s, 3] = answered


@njit(nogil=True, cache=True, no_cfunc_wrapper=True)
def _depth_grid(off, aoff, qkeys, seeds, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, cfgs, budgets,
                out_f, out_i, pq_n, pq_flags, s_lo, s_hi):
    """Parallel-Probe's grid (cfgs rows: chains, T, patience, warm, unit) on seeds s_lo .. s_hi - 1, the same
    permutations and query orders as _grid's (fill_permutation, fill_query_order: common random numbers with the
    width policies). Outputs as _grid's: out_f[c, s] = (coverage, held answer correct (in the sc column), ...),
    out_i[c, s] = (traces started, tokens, 0, queries stopped by consensus)."""
    n = qkeys.shape[0]
    total = off[n]
    perm = np.empty(total, np.int64)
    order = np.empty(n, np.int64)
    rank = np.empty(n, np.int64)
    rec = np.empty((poff[-1] + reach.shape[0], 2), np.int64)
    depth_records(poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, rec)
    t_r = np.zeros(total, np.int64)
    t_paid = np.zeros(total, np.int64)
    t_st = np.zeros(total, np.int64)
    t_off = np.zeros(total, np.int64)
    t_ans = np.zeros(total, np.int64)
    t_ok = np.zeros(total, np.int64)
    qi = np.zeros((n, 9), np.int64)
    cnt = np.zeros(aoff[n], np.int64)
    tot = np.zeros(TOT_SLOTS, np.int64)
    per_query = pq_n.shape[0] > 0
    for s in range(s_lo, s_hi):
        fill_permutation(off, qkeys, seeds[s], perm)
        fill_query_order(qkeys, seeds[s], rank, order)
        for c in range(cfgs.shape[0]):
            qi[:] = 0
            tot[:] = 0
            cnt[:] = 0
            for i in range(n):
                qi[i, 3] = -2
                qi[i, 5] = -1
            parallel_probe(off, aoff, poff, rec, perm, order, cfgs[c, 0], cfgs[c, 1], cfgs[c, 2], cfgs[c, 3],
                           cfgs[c, 4], budgets[c, s], t_r, t_paid, t_st, t_off, t_ans, t_ok, qi, cnt, tot, 0, None,
                           None)
            depth_tally(off, qi, 4, 6, t_ok, tot, per_query, pq_n, pq_flags, out_f, out_i, c, s)


@inner
def _pp_run_scratch(off, aoff):
    """One Parallel-Probe run's state, fresh (parallel_probe_once's and parallel_probe_live's; the grid resets its
    own between runs): per trace t_r, t_paid, t_st, t_off, t_ans (-1: none), t_ok; per query qi (its previous
    winner, column 3, -2: none; its held answer, column 5, -1); per answer slot cnt; tot."""
    n = off.shape[0] - 1
    total = off[n]
    qi = np.zeros((n, 9), np.int64)
    for i in range(n):
        qi[i, 3] = -2
        qi[i, 5] = -1
    return (np.zeros(total, np.int64), np.zeros(total, np.int64), np.zeros(total, np.int64), np.zeros(total, np.int64),
            np.full(total, -1, np.int64), np.zeros(total, np.int64), qi, np.zeros(aoff[n], np.int64),
            np.zeros(TOT_SLOTS, np.int64))


@jit
def parallel_probe_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, perm, order, chains, T,
                        patience, warm, unit, budget):
    """One Parallel-Probe run on a given permutation and query order (tests, and the comparison with the source's
    own shuffles): (qi, tot, t_ok, t_paid) as parallel_probe leaves them (t_paid: the tokens each trace paid, at
    its permutation position)."""
    rec = np.empty((poff[-1] + reach.shape[0], 2), np.int64)
    depth_records(poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, rec)
    t_r, t_paid, t_st, t_off, t_ans, t_ok, qi, cnt, tot = _pp_run_scratch(off, aoff)
    parallel_probe(off, aoff, poff, rec, perm, order, chains, T, patience, warm, unit, budget, t_r, t_paid, t_st,
                   t_off, t_ans, t_ok, qi, cnt, tot, 0, None, None)
    return qi, tot, t_ok, t_paid


CMC = 21  # AutoTTS's discovered controller (Confidence Momentum Controller)


@inner
def _largest(off):
    """The largest query's size (a per-query scratch's length)."""
    big = 0
    for i in range(off.shape[0] - 1):
        big = max(big, off[i + 1] - off[i])
    return big


@inner
def _cmc_conf():
    """conf[m, b]: the chance of at most b heads in m fair flips (the Beta(1, 1) posterior's confidence that the
    leader, b of m - 1 completed votes ahead of the runner-up, is the majority), summed term by term in the order
    _cmc_stats used to: the same floats, looked up instead of summed at every round."""
    pascal = np.zeros((80, 80), np.int64)
    for a in range(80):
        pascal[a, 0] = 1
        for b in range(1, a + 1):
            pascal[a, b] = pascal[a - 1, b - 1] + pascal[a - 1, b]
    conf = np.zeros((80, 80))
    for m in range(80):
        h = 0.5 ** m
        acc = 0.0
        for k in range(m):
            acc += np.float64(pascal[m, k]) * h
            conf[m, k] = acc
    return conf


@inner
def _cmc_stats(aoff, i, cc, fr, cok, conf, qi, qf):
    """(winner, its correctness, confidence) over query i's completed answers (cc: counts per answer slot, fr: the
    order each answer was first completed in; ties to the first completed, as a Counter); winner -2 when none. They
    change only when a trace of the query completes (complete clears qi[i, 8]): kept in qi[i, 9], qi[i, 10] and
    qf[i, 1] until then, as a round reads them twice and most rounds complete nothing."""
    if qi[i, 8] == 1:
        return qi[i, 9], qi[i, 10], qf[i, 1]
    best, bc, bf, bok, second = -2, 0, 0, 0, 0
    for s in range(aoff[i] + 1, aoff[i + 1]):
        c = cc[s]
        if c == 0:
            continue
        if c > bc or (c == bc and fr[s] < bf):
            if bc > 0:
                second = max(second, bc)
            best, bc, bf, bok = s - aoff[i] - 1, c, fr[s], cok[s]
        else:
            second = max(second, c)
    cf = conf[bc + second + 1, bc] if bc > 0 else 0.0
    qi[i, 8], qi[i, 9], qi[i, 10], qf[i, 1] = 1, best, bok, cf
    return best, bok, cf


@inner
def cmc(off, aoff, poff, rec, seg, perm, order, kn, kf, unit, budget, t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok, qi,
        qf, hist, cc, fr, cok, conf, tot, srv, done, bound, want, blk):
    """AutoTTS's Confidence Momentum Controller (its search's round r0004; docs/semantics.md) on every query under one
    shared budget, round-robin in rank order as parallel_probe. kn: (n_init, max_branch, warm_up, abandon_patience,
    T_ema, burst_aligned, widen_burst, min_complete), kf: (ema_alpha, conf_thresh, delta_slack, trend_thresh). The
    segments are depth_records' rec. Per trace at position p: t_r its next record; t_st 0 live, 1 finished, 2
    abandoned; t_pr probes run; t_dis rounds off the pool winner. Per query qi[i]: traces started, step, done (1
    ended, 2 stopped by the gate), held answer, held correct, hist length, distinct completed answers, completed
    count, then _cmc_stats' cache (columns 8-10); qf[i, 0] the EMA, qf[i, 1] the cached confidence (conf:
    _cmc_conf's table). seg: the costliest segment (depth_records'). srv (the largest query's size) and done (2 x
    that): scratch. Live (blk an array: depth_want's protocol) a record not generated yet is wanted instead of read;
    seg then bounds the wanted segments too."""
    n = off.shape[0] - 1
    bnd = bound if unit == UNIT_TOKENS else 0  # (live) the most a wanted segment may cost
    n_init, max_branch, warm_up, patience, t_ema, burst, widen, min_complete = kn[0], kn[1], kn[2], kn[3], kn[4], \
        kn[5], kn[6], kn[7]
    alpha, thresh, slack, trend = kf[0], kf[1], kf[2], kf[3]
    lim = budget if unit == UNIT_TOKENS else np.int64(1) << 62  # the tokens a run may spend

    def explore(i, p):
        """1: trace p explored one segment; 0: it does not fit (the run ends); 2 (live): its segment is wanted (the
        budget pays `bound` for it)."""
        k = t_r[p]
        if blk is not None and rec[k, 1] < 0:
            if not depth_want(want, blk, i, p, unit, bound, lim - tot[TOKENS]):
                return 0
            tot[TOKENS] += bnd
            return 2
        cost = rec[k, 0] - t_paid[p]
        fin = rec[k, 1] & 2
        if fin:
            cost = max(0, cost)
        if cost > lim - tot[TOKENS]:
            return 0
        tot[TOKENS] += cost
        t_paid[p] += cost
        t_ans[p], t_ok[p], t_r[p], t_st[p] = (rec[k, 1] >> 2) - 1, rec[k, 1] & 1, k + 1, fin >> 1
        return 1

    def complete(i, p):
        a = t_ans[p]
        qi[i, 7] += 1
        if a < 0:
            return
        s = aoff[i] + 1 + a
        if cc[s] == 0:
            fr[s] = qi[i, 6]
            qi[i, 6] += 1
            cok[s] = t_ok[p]
        cc[s] += 1
        qi[i, 8] = 0

    def start(i):
        """Open query i's next trace (False: the budget ended the run; True also when it has none left)."""
        m = qi[i, 0]
        if m >= off[i + 1] - off[i]:
            return True
        p = off[i] + m
        if unit == UNIT_SAMPLES and tot[SAMPLES] >= budget:
            return False
        j = perm[p]
        t_r[p], t_paid[p], t_st[p], t_pr[p], t_dis[p], t_ans[p], t_ok[p] = poff[j] + j, 0, 0, 0, 0, -1, 0
        e = explore(i, p)
        if e == 0:
            return False
        qi[i, 0] = m + 1
        tot[SAMPLES] += 1
        if e == 1 and t_st[p] == 1:
            complete(i, p)
        return True

    def final(i):  # the completed answers' winner, else the majority of the latest answers of the traces kept
        w, wok, _ = _cmc_stats(aoff, i, cc, fr, cok, conf, qi, qf)
        if w == -2:
            best, bc, bok = -1, 0, 0
            a0 = off[i]
            for p in range(a0, a0 + qi[i, 0]):
                if t_st[p] != 2 and t_ans[p] >= 0:
                    c = 0
                    for q in range(a0, a0 + qi[i, 0]):
                        if t_st[q] != 2 and t_ans[q] == t_ans[p]:
                            c += 1
                    if c > bc:
                        best, bc, bok = t_ans[p], c, t_ok[p]
            w, wok = best, bok
        qi[i, 3], qi[i, 4] = w, wok

    ended = False
    for r in range(n):
        i = order[r]
        for _ in range(n_init):
            if not start(i):
                ended = True
                break
        if ended:
            break
    going = not ended
    while going:
        going = False
        for r in range(n):
            i = order[r]
            if qi[i, 2] != 0:
                continue
            if blk is not None and blk[i] != 0:  # its step reads a wanted segment: nothing after is sure
                ended = True
                break
            going = True
            a0 = off[i]
            m = qi[i, 0]
            step = qi[i, 1]
            w, _, cf = _cmc_stats(aoff, i, cc, fr, cok, conf, qi, qf)
            warm = step >= warm_up
            ema = (1.0 - alpha) * qf[i, 0] + alpha * cf
            hl = qi[i, 5]
            if hl == t_ema:  # the window is full: drop its oldest
                for h in range(t_ema - 1):
                    hist[i, h] = hist[i, h + 1]
                hl -= 1
            hist[i, hl] = ema
            hl += 1
            qi[i, 5] = hl
            # The live traces' rounds off the pool winner (after warm-up), and the most deviant abandoned
            upd = warm and w != -2
            live = 0
            cand = 0
            for p in range(_ix(a0), _ix(a0 + m)):
                if t_st[p] == 0:
                    if upd:
                        t_dis[p] = t_dis[p] + 1 if t_ans[p] != w else 0
                        cand += t_dis[p] >= patience
                    live += 1
            if 0 < cand <= live - 2:  # every candidate goes
                for p in range(_ix(a0), _ix(a0 + m)):
                    if t_st[p] == 0 and t_dis[p] >= patience:
                        t_st[p] = 2
                live -= cand
            elif cand > 0:
                left = max(0, live - 2)  # abandon the most deviant first (ties: trace order), keep 2 alive
                while left > 0:
                    bp, bd = -1, patience - 1
                    for p in range(a0, a0 + m):
                        if t_st[p] == 0 and t_dis[p] > bd:
                            bp, bd = p, t_dis[p]
                    if bp < 0:
                        break
                    t_st[bp] = 2
                    left -= 1
                    live -= 1
            # depth: aligned traces `burst` segments, the others one, served by probes run, most first (ties: trace
            # order). Serving order shows only where the budget ends inside the round and in the order traces
            # complete (an answer's first completion, its tie-break): when the round's every segment fits
            # (seg: depth_records' costliest), the live traces are served in trace order without a budget check,
            # and their completions then taken in serving order (done: (probes run at the round's start, trace)).
            if live * max(burst, 1) <= (lim - tot[TOKENS]) // max(seg, 1):
                used = tot[TOKENS]
                nd = 0
                for p in range(_ix(a0), _ix(a0 + m)):
                    if t_st[p] != 0:
                        continue
                    steps = burst if (upd and t_ans[p] == w) else 1
                    pr0 = t_pr[p]
                    for s_ in range(steps):
                        k = t_r[p]
                        if blk is not None and rec[_ix(k), 1] < 0:  # (wanted; seg bounds it and the burst after it)
                            depth_want(want, blk, i, p, unit, bound, lim - used)
                            used += bnd * (steps - s_)
                            k = -1
                            break
                        cost = rec[_ix(k), 0] - t_paid[p]
                        fin = rec[_ix(k), 1] & 2
                        if fin:
                            cost = max(0, cost)
                        used += cost
                        t_paid[p] += cost
                        t_r[p] = k + 1
                        t_pr[p] += 1
                        if fin:
                            t_st[p] = 1
                            d = nd  # (a stable insertion: most probes run first, then trace order)
                            while d > 0 and done[0, d - 1] < pr0:
                                done[0, d], done[1, d] = done[0, d - 1], done[1, d - 1]
                                d -= 1
                            done[0, d], done[1, d] = pr0, p
                            nd += 1
                            break
                    if k >= 0:
                        t_ans[p], t_ok[p] = (rec[_ix(k), 1] >> 2) - 1, rec[_ix(k), 1] & 1
                tot[TOKENS] = used
                for d in range(nd):
                    complete(i, done[1, d])
            else:  # the budget may end inside the round: served one by one in order, each checked
                ns = 0
                for p in range(a0, a0 + m):  # (a stable insertion sort: the traces run in near lockstep)
                    if t_st[p] == 0:
                        k = ns
                        while k > 0 and t_pr[srv[k - 1]] < t_pr[p]:
                            srv[k] = srv[k - 1]
                            k -= 1
                        srv[k] = p
                        ns += 1
                for k in range(ns):
                    p = srv[k]
                    steps = burst if (upd and t_ans[p] == w) else 1
                    for s_ in range(steps):
                        e = explore(i, p)
                        if e == 0:
                            ended = True
                            break
                        if e == 2:  # (wanted: the rest of its burst may follow it, at `bound` each)
                            ended = not depth_sure(unit, bound, steps - 1 - s_, lim - tot[TOKENS])
                            tot[TOKENS] += bnd * (steps - 1 - s_)
                            break
                        t_pr[p] += 1
                        if t_st[p] == 1:
                            complete(i, p)
                            break
                    if ended:
                        break
                if ended:
                    break
            if blk is not None and blk[i] != 0:  # its decisions wait for the wanted segments; it may widen (depth_sure)
                wm = min(widen, max_branch - m, off[i + 1] - off[i] - m) if step >= max(1, warm_up // 2) else 0
                if wm > 0:
                    if (unit == UNIT_SAMPLES and tot[SAMPLES] + wm > budget) or not depth_sure(
                            unit, bound, wm, lim - tot[TOKENS]):
                        ended = True
                        break
                    tot[SAMPLES] += wm
                    tot[TOKENS] += bnd * wm
                continue
            w, wok, cf = _cmc_stats(aoff, i, cc, fr, cok, conf, qi, qf)
            ema = (1.0 - alpha) * ema + alpha * cf
            qf[i, 0] = ema
            hist[i, hl - 1] = ema
            delta = hist[i, hl - 1] - hist[i, 0] if hl >= 2 else 0.0
            if warm and qi[i, 7] >= min_complete and ema >= thresh and delta >= -slack:
                qi[i, 3], qi[i, 4], qi[i, 2] = w, wok, 2
                continue
            resolved = True
            for p in range(_ix(a0), _ix(a0 + m)):  # (a trace not live at the round's start is not live now)
                if t_st[p] == 0:
                    resolved = False
                    break
            if resolved:
                final(i)
                qi[i, 2] = 1
                continue
            if m < max_branch and delta <= trend and step >= max(1, warm_up // 2) and ema < thresh:
                for _ in range(widen):
                    if qi[i, 0] >= max_branch or qi[i, 0] >= off[i + 1] - off[i]:
                        break
                    if not start(i):
                        ended = True
                        break
                if ended:
                    break
            qi[i, 1] = step + 1
            if step + 1 >= 500:
                final(i)
                qi[i, 2] = 1
        if ended:
            break
    for i in range(n):
        if qi[i, 2] == 0:
            final(i)


@jit
def cmc_once(off, aoff, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, perm, order, kn, kf, unit, budget):
    """One CMC run on a given permutation and query order: (qi, tot, t_paid)."""
    rec = np.empty((poff[-1] + reach.shape[0], 2), np.int64)
    seg = depth_records(poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, rec)
    t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok, qi, qf, hist, cc, fr, cok, tot, srv, done = _cmc_run_scratch(off, aoff,
                                                                                                             kn)
    cmc(off, aoff, poff, rec, seg, perm, order, kn, kf, unit, budget, t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok, qi,
        qf, hist, cc, fr, cok, _cmc_conf(), tot, srv, done, 0, None, None)
    return qi, tot, t_paid


@inner
def _cmc_run_scratch(off, aoff, kn):
    """One CMC run's state and scratch, fresh (cmc_once's and cmc_live's; the grid resets its own between runs):
    per trace t_r, t_paid, t_st, t_pr, t_dis, t_ans (-1: none), t_ok; per query qi (its leader, column 3, -1), qf,
    hist; per answer slot cc, fr, cok; tot; the serving scratch srv, done."""
    n = off.shape[0] - 1
    total = off[n]
    z = np.zeros(total, np.int64)
    t_ans = np.full(total, -1, np.int64)
    qi = np.zeros((n, 11), np.int64)
    for i in range(n):
        qi[i, 3] = -1
    big = max(_largest(off), 1)
    return (z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), t_ans, z, qi, np.zeros((n, 2)),
            np.zeros((n, max(kn[4], 1))), np.zeros(aoff[n], np.int64), np.zeros(aoff[n], np.int64),
            np.zeros(aoff[n], np.int64), np.zeros(TOT_SLOTS, np.int64), np.empty(big, np.int64),
            np.empty((2, big), np.int64))


@inner
def _live_layout(off, width):
    """A live run's records as the depth kernels index them: trace p (query i's k-th at p = off[i] + k, its own
    permutation) at rows p * width on (poff[p] + p), and the scratch the live wrappers share: (perm, poff, want,
    blk)."""
    n = off.shape[0] - 1
    total = off[n]
    perm = np.arange(total)
    poff = np.arange(total + 1) * (width - 1)
    return perm, poff, np.zeros(total + 1, np.int64), np.zeros(max(n, 1), np.int64)


@jit
def parallel_probe_live(off, aoff, rec, width, order, chains, T, patience, warm, unit, budget, bound):
    """Parallel-Probe over the segments a live run holds (replay.live.run_live_depth): trace p's records at rows
    p * width on, then MISSING_SEGMENT where its next segment is still to come; bound: the most tokens a segment may
    cost (<= 0: unknown). (qi, tot, t_r, want) as parallel_probe leaves them: want[0] == 0 when the run is whole
    (its outcome final), else want[1 .. want[0]] the traces whose next segment it needs, in the order reached
    (depth_want), and the rest is to be run again once they came."""
    perm, poff, want, blk = _live_layout(off, width)
    t_r, t_paid, t_st, t_off, t_ans, t_ok, qi, cnt, tot = _pp_run_scratch(off, aoff)
    parallel_probe(off, aoff, poff, rec, perm, order, chains, T, patience, warm, unit, budget, t_r, t_paid, t_st,
                   t_off, t_ans, t_ok, qi, cnt, tot, bound, want, blk)
    return qi, tot, t_r, want


@jit
def cmc_live(off, aoff, rec, width, seg, order, kn, kf, unit, budget, bound):
    """CMC over the segments a live run holds, as parallel_probe_live (seg: the costliest segment it may read, the
    wanted ones' bound included); (qi, tot, t_r, want)."""
    perm, poff, want, blk = _live_layout(off, width)
    t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok, qi, qf, hist, cc, fr, cok, tot, srv, done = _cmc_run_scratch(off, aoff,
                                                                                                             kn)
    cmc(off, aoff, poff, rec, seg, perm, order, kn, kf, unit, budget, t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok, qi,
        qf, hist, cc, fr, cok, _cmc_conf(), tot, srv, done, bound, want, blk)
    return qi, tot, t_r, want


@njit(nogil=True, cache=True, no_cfunc_wrapper=True)
def _cmc_grid(off, aoff, qkeys, seeds, poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, kns, kfs, units,
              budgets, out_f, out_i, pq_n, pq_flags, s_lo, s_hi):
    """CMC's grid (configuration c: knobs kns[c], kfs[c], unit units[c]) on seeds s_lo .. s_hi - 1, on the width
    policies' permutations and query orders; outputs as _depth_grid's."""
    n = qkeys.shape[0]
    total = off[n]
    perm = np.empty(total, np.int64)
    order = np.empty(n, np.int64)
    rank = np.empty(n, np.int64)
    rec = np.empty((poff[-1] + reach.shape[0], 2), np.int64)
    seg = depth_records(poff, pans, pok, ptok, reach, end_tok, end_ans, end_ok, rec)
    z = np.zeros(total, np.int64)
    t_r, t_paid, t_st, t_pr, t_dis, t_ans, t_ok = z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), \
        z.copy()
    qi = np.zeros((n, 11), np.int64)
    qf = np.zeros((n, 2))
    hist = np.zeros((n, 16))
    cc = np.zeros(aoff[n], np.int64)
    fr = np.zeros(aoff[n], np.int64)
    cok = np.zeros(aoff[n], np.int64)
    conf = _cmc_conf()
    tot = np.zeros(TOT_SLOTS, np.int64)
    srv = np.empty(_largest(off), np.int64)
    done = np.empty((2, _largest(off)), np.int64)
    per_query = pq_n.shape[0] > 0
    for s in range(s_lo, s_hi):
        fill_permutation(off, qkeys, seeds[s], perm)
        fill_query_order(qkeys, seeds[s], rank, order)
        for c in range(kns.shape[0]):
            qi[:] = 0
            qf[:] = 0.0
            cc[:] = 0
            tot[:] = 0
            for i in range(n):
                qi[i, 3] = -1
            cmc(off, aoff, poff, rec, seg, perm, order, kns[c], kfs[c], units[c], budgets[c, s], t_r, t_paid, t_st,
                t_pr, t_dis, t_ans, t_ok, qi, qf, hist, cc, fr, cok, conf, tot, srv, done, 0, None, None)
            depth_tally(off, qi, 2, 4, t_ok, tot, per_query, pq_n, pq_flags, out_f, out_i, c, s)
