"""One compiled specialisation of the engine for every valid pool: a second pool, budget, policy mix or seed count
must never compile it again (each specialisation of the grid costs seconds of CPU). The kernel has exactly the
specialisations it declares: the one every policy runs in and one per policy that a grid of that policy alone
runs (engine.only_arg), each with and without the rules that read the drawn responses (kernel.READING_RULES) and
deepconf-online's record lows, each for a pool's arrays or (a pool of at least PREFETCH_FROM responses) its packed
records, and live runs' own; each compiles once and numba caches it."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
from numba import types
from numba.core import ir
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.untyped_passes import InlineClosureLikes, LiteralPropagationSubPipelinePass

from ttc.replay.engine import pack_responses, pool_arrays, scratch
from ttc.replay.kernel import ELIMINATION, PruneFirst, run_one
from ttc.replay.policies import RunConfig
from ttc.replay.tables import make_tables

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json

import numpy as np
from ttc.replay import engine
from ttc.replay.engine import replay, run_once
from ttc.replay.kernel import _grid, run_one, run_one_any
from ttc.replay.live import PoolSource, run_live
from ttc.replay.policies import POLICIES, RunConfig
from ttc.replay.pool import Pool, load_pool
from ttc.replay.tables import make_tables

pools = [load_pool("data/lastletters-gpt35-40"), load_pool("data/math500-llama3.1-8b-48", score="conf"),
         load_pool("data/humaneval-codegen16b-100")]
# the arrays polars hands over differ in writability from pool to pool; the test is vacuous without that
assert len({tuple(a.flags.writeable for a in (p.correct, p.score, p.ans, p.tok)) for p in pools}) > 1
off = np.array([0, 3, 5]); correct = np.array([1, 0, 0, 1, 1], np.int8)
pools.append(Pool.from_arrays(off, correct=correct, score=np.linspace(0, 1, 5), ans=np.array([0, 1, 0, -1, 0]),
                              tok=np.arange(5)))
replay(pools[0], [RunConfig("elimination")], [4], range(2))  # elimination alone first: its own kernel
for k, pool in enumerate(pools):
    # (uab and pets read the drawn responses: they run in the reading rules' specialisation, as esc below)
    configs = [RunConfig(p) for p in POLICIES if (p != "entropy" or pool.has_answers)
               and p not in ("deepconf-online", "parallel-probe", "cmc", "uab", "pets", "pets-online")]
    replay(pool, configs, [2, 3 + k], range(k + 1), per_query=k % 2 == 1)
    replay(pool, [RunConfig("elimination", eliminate="sc-beta" if pool.has_answers else "none")], [4], range(2))
run_once(off, correct, np.zeros(5), np.zeros(5, np.int64), np.ones(5, np.int64), np.arange(5), [1, 0],
         RunConfig("ucb"), 4)
src = PoolSource(off, correct.astype(bool), np.zeros(5), np.full(5, -1), np.ones(5), np.arange(5))
run_live(src, [3, 2], [0, 1], policy="elimination", budget_total=4)

def grid_kinds():  # _grid's specialisations: (only: "any" policy or the one policy's code, cw: the confidence votes'
    # weights or none, reading, dc), each for the pools' arrays (packed: (); none of these pools reaches PREFETCH_FROM
    # responses). The kernel every policy runs in always has the weights (an empty array: no votes), so that a pool
    # with the votes and one without share it; a one-policy kernel has them only where its grid votes.
    assert all(s[-4].count == 0 for s in _grid.signatures), _grid.signatures
    return sorted({("any" if s[4].count == 0 else s[4].count - 1, "weights" if s[6].count else "none", str(s[-3]),
                    "none" if str(s[-2]) == "none" else "lows") for s in _grid.signatures}, key=str)


before = grid_kinds()  # (the grids above use no reading rule)
replay(pools[0], [RunConfig("elimination", K=2, eliminate="esc")], [4], range(2))
replay(pools[0], [RunConfig("pets")], [2], range(1))  # pets reads the drawn responses as esc does
# deepconf-online's grid: its own specialisation (dc not None), whatever other policies run beside it
lows = pools[3]
lows.lows = (np.array([0, 1, 2, 2, 3, 4]), np.array([0, 1, 2, 3]), np.array([2.0, 1.0, 3.0, 1.5]))
replay(lows, [RunConfig("deepconf-online", warmup=1), RunConfig("uniform")], [2], range(2))
replay(lows, [RunConfig("deepconf-online", warmup=2)], [3], range(3))
assert all(s[-4].count == 0 for s in run_one.signatures), run_one.signatures
one = sorted({("any" if "range" in str(s[3]) else s[3].count, str(s[-3]), str(s[-2]),
               "none" if str(s[-1]) == "none" else "lows") for s in run_one.signatures}, key=str)
# a one-policy kernel with the weights, then the same grid without the votes: that kernel again (engine.weights_arg),
# not a compile, with the outcomes of the kernel every policy runs in
tiny = pools[3]
assert engine.replay_votes(tiny, "bon") is not None
ucb, bt = [RunConfig("ucb")], np.full((1, 3), 2 * tiny.n_queries, np.int64)
tables = make_tables(int(tiny.sizes.max()), 0.95)
engine.run_grid(tiny, ucb, bt, np.arange(3), tables, votes=(1.0, 90.0), only=engine.only_arg(ucb))
n_ucb = len(_grid.signatures)
reuse = engine.run_grid(tiny, ucb, bt, np.arange(3), tables, per_query=True, only=engine.only_arg(ucb))
assert len(_grid.signatures) == n_ucb
assert all((a == b).all() for a, b in zip(reuse, engine.run_grid(tiny, ucb, bt, np.arange(3), tables, per_query=True),
                                          strict=True))
print(json.dumps({"before": before, "grid": grid_kinds(), "n_grid": len(_grid.signatures), "run_one": one,
                  "any": sorted(str(s[-3:]) for s in run_one_any.signatures)}))
"""


def test_one_compiled_signature_for_every_pool_and_run():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # elimination alone: its own kernel (sc-beta and none alike, again after the mixed grids of four pools: this
    # process ran it); the mixed grids: one kernel for every policy
    assert as_set(got["before"]) == {(1, "none", "none", "none"), ("any", "weights", "none", "none")}, got
    # then esc and pets alone (the reading rules: no kernel yet in this process), deepconf-online beside uniform (its
    # record lows) and alone (the mixed kernel with lows has run in this process: that one, engine.kernel_only)
    # (and ucb's kernel with the weights: its grid without them ran it again, the outcomes of the mixed kernel's)
    grid = {(1, "none", "bool", "none"), (1, "none", "none", "none"), (16, "none", "bool", "none"),
            ("any", "weights", "none", "lows"), ("any", "weights", "none", "none"), (2, "weights", "none", "none")}
    assert as_set(got["grid"]) == grid and got["n_grid"] == len(grid), got
    # Python's entry (run_once, live runs): the kernel every policy runs in, without and with every rule and live
    assert got["any"] == ["(bool, bool, none)", "(none, none, none)"], got
    # run_one's are listed only where compiled in this process rather than loaded from numba's cache (inside _grid's
    # or run_one_any's), and never one that no grid or entry above asks for
    assert as_set(got["run_one"]) <= {("any", "bool", "bool", "none"), *((g[0], g[2], "none", g[3]) for g in grid)}, got


def as_set(rows):
    return set(map(tuple, rows))


DEPTH_SCRIPT = r"""
from ttc.replay import kernel
from ttc.replay.run import ReplayRequest, load_for, run_replay

req = ReplayRequest(seeds=3)  # `ttc replay --seeds 3`: the default grid on the embedded pool
assert load_for(req).probe_off is None  # (a pool without probes: none read)
run_replay(req)
depth = [f for f in (kernel.depth_view, kernel._depth_grid, kernel._cmc_grid, kernel.parallel_probe_once,
                     kernel.cmc_once, kernel.parallel_probe, kernel.cmc, kernel.depth_tally, kernel.depth_records,
                     kernel._cmc_conf, kernel._cmc_stats) if f.signatures]
print(len(kernel._grid.signatures), [f.__name__ for f in depth])
"""


def test_the_default_grid_compiles_no_depth_kernel_on_a_pool_without_probes():
    # Issue 30: depth's kernels sit beside run_one and are never reached from it, so the default replay of a pool
    # without probes compiles (or loads) none of them: its first compile is the width engine's alone (measured in
    # docs/performance.md against a copy of the kernel module without the depth section)
    out = subprocess.run([sys.executable, "-c", DEPTH_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    grid, depth = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(grid) == 1 and depth == "[]", out.stdout[-500:]


class _Stopped(Exception):
    """Carries run_one's IR out of a compile stopped right after a pass (nothing typed, lowered or cached)."""


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopHere(FunctionPass):
    _name = "test_compile_stop_here"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise _Stopped(state.func_ir)


def _run_one_ir(after, records=False, reading=types.none):
    """run_one's IR for elimination's one-policy kernel on a pool's arrays or (records) its packed records, with this
    `reading` type, right after the pass `after` of its PruneFirst pipeline (untyped passes only)."""
    class UpTo(PruneFirst):
        def define_pipelines(self):
            [pm] = PruneFirst.define_pipelines(self)
            pm.add_pass_after(_StopHere, after)
            pm.finalize()
            return [pm]

    off = np.array([0, 3, 5], np.int64)
    z = np.zeros(5, np.int8)
    P = pool_arrays(off, z, np.zeros(5), np.array([0, 1, 0, -1, 0]), np.ones(5, np.int64), make_tables(3, 0.95),
                    resp=pack_responses(z, np.zeros(5), np.array([0, 1, 0, -1, 0]), np.ones(5, np.int64)))
    W = scratch(2, int(P.aoff[-1]), np.arange(5), np.zeros(2, np.int64), 0)
    sig = (numba.typeof(P), numba.typeof(W), numba.typeof(RunConfig("elimination").record()[0]),
           numba.typeof((None,) * ELIMINATION), types.int64, types.int64,
           numba.typeof((P.resp,) if records else ()), reading, types.none, types.none)
    try:
        numba.njit(pipeline_class=UpTo, no_cpython_wrapper=True)(run_one.py_func).compile(sig)
    except _Stopped as e:
        return e.args[0]
    raise AssertionError("the pipeline did not stop")


def _inlined(reading) -> set:
    """The closures that run_one's PruneFirst pipeline inlines for elimination's one-policy kernel with this
    `reading` type."""
    # an inlined closure's variables are named after it (run_one.<locals>.NAME -> ..._locals__NAME_v..)
    return {m.group(1) for v in _run_one_ir(InlineClosureLikes, reading=reading)._definitions
            for m in [re.search(r"_locals__([a-z_]+?)_v\d", v)] if m}


def test_a_kernel_without_the_reading_rules_inlines_none_of_their_code():
    # Issue 25 item 4: the inlining pass (and its dead-code elimination over the result) cost a one-policy kernel
    # without the reading rules ~2.4 s of CPU for their code (mmc's check inlined in each of answered's copies), which
    # the pruning after it then dropped. run_one reaches them through `stops`, assigned under its own test on
    # `reading`, which PruneFirst prunes before inlining (and rebuilds the definitions the inliner reads after it)
    without, kept = _inlined(types.none), _inlined(types.boolean)
    assert {"answered", "pull"} <= without and not {"reading_stops", "mmc_stops"} & without, without
    assert {"answered", "pull", "reading_stops", "mmc_stops"} <= kept, kept


def test_a_small_pools_kernel_types_none_of_the_records_draws_and_a_big_pools_none_of_the_arrays():
    # Issue 25 item 4: every kernel typed, lowered and optimised both the packed records' draws and prefetches and
    # the four arrays', chosen per pool at run time (~0.4 s of a cold one-policy replay). run_one's `packed` is a
    # tuple, () or (records,), whose length numba makes a constant that prunes each test of it before typing: in the
    # IR that type inference gets, a small pool's kernel reads `packed` nowhere and has no record prefetch
    # (warm_records, inlined with its variables named after it), a big pool's reads the records and has no
    # prefetch of the arrays' lines (warm_block)
    def reads(func_ir, name):  # the statements that read `name` or a copy of it (the inlined closures copy it)
        body = [st for b in func_ir.blocks.values() for st in b.body]
        names, n = {name}, -1
        while n != len(names):
            n = len(names)
            names |= {st.target.name for st in body if isinstance(st, ir.Assign) and isinstance(st.value, ir.Var)
                      and st.value.name in names}
        return [st for st in body if {v.name for v in st.list_vars()} & names
                and not (isinstance(st, ir.Assign) and isinstance(st.value, (ir.Var, ir.Arg)))]

    last = LiteralPropagationSubPipelinePass  # (the last untyped pass)
    small, big = _run_one_ir(last), _run_one_ir(last, records=True)
    names = [set(f._definitions) for f in (small, big)]
    assert reads(small, "packed") == [], [str(st) for st in reads(small, "packed")]
    assert not any("warm_records_v" in v for v in names[0]) and any("warm_block_v" in v for v in names[0])
    assert len(reads(big, "packed")) >= 3  # (the draw's record, its prefetch, the block's)
    assert any("warm_records_v" in v for v in names[1]) and not any("warm_block_v" in v for v in names[1])
