"""`ttc bench` runs end to end on a tiny grid and reports numbers that add up."""
import re

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.bench import RULES, BenchSpec, bench, estimate_s, growth, growth_cells, growth_ratios
from ttc.replay.policies import REGISTRY


def test_bench_rows_and_speedup_on_a_tiny_grid():
    df, info = bench(BenchSpec(n=20, size=8, budgets=(2, 4), seeds=3, repeats=1, reference_seeds=1))
    # every policy of the registry at 2 budgets but deepconf-online and the depth ones (a synthetic pool has no
    # record lows and no probes), the slow ones (pets) included, and the rules of bench.RULES under elimination
    rows = len(REGISTRY) - 3 + len(RULES)
    assert df.height == rows * 2 and not {"deepconf-online", "parallel-probe", "cmc"} & set(df["policy"])
    assert {p for p, e in REGISTRY.items() if e.slow} <= set(df["policy"])
    assert info["configs"] == rows * 2 and info["full_grid_s"] > 0
    assert "elimination(eliminate=boinf)" in df["policy"].to_list()
    # uniform at budget b hands out exactly b responses to each of the 20 queries, in each of the 3 runs
    u = df.filter((df["policy"] == "uniform") & (df["budget"] == 4)).row(0, named=True)
    assert u["decisions"] == 4 * 20 * 3 and u["runs"] == 3
    assert (df["decisions_per_s"] > 0).all() and (df["speedup"] > 0).all()
    # the speed-up is the ratio of the two rates, whatever part of its runs the reference was timed on
    for r in df.iter_rows(named=True):
        assert r["speedup"] == r["decisions_per_s"] / r["reference_decisions_per_s"]
        assert 0 < r["reference_decisions"] <= r["reference_of"]


def test_an_uncapped_reference_makes_the_engine_runs():
    # reference_s 0: every reference run to its end, the same run as the engine's seed 0 (same decisions)
    df, _ = bench(BenchSpec(n=20, size=8, budgets=(3,), seeds=2, repeats=1, reference_seeds=1, reference_s=0,
                            policies=("uniform", "ucb", "pets-online"), rules=("boinf",)))
    assert (df["reference_decisions"] == df["reference_of"]).all() and (df["reference_of"] > 0).all()


def test_the_reference_time_cap_stops_a_slow_run():
    """Issue 28: boinf's reference (a Python Monte Carlo per check, ~100 decisions a second) made the default bench
    11 minutes. Capped at 0.2 s after its first decision, the run stops there: far fewer decisions than its
    1,600, and well under the ~16 s of CPU the whole run costs."""
    from ttc.replay.bench import time_reference
    from ttc.replay.policies import RunConfig
    from ttc.replay.synth import make_pool

    pool = make_pool(n=200, size=16, seed=0)
    decisions, seconds, whole = time_reference(pool, RunConfig("elimination", eliminate="boinf"), 8 * 200, 0, 0.2)
    assert not whole and 0 < decisions < 800 and seconds < 8, (decisions, seconds)
    # (uniform's run is far quicker than the cap: whole, every decision of its budget)
    assert time_reference(pool, RunConfig("uniform"), 8 * 200, 0, 5.0)[::2] == (1600, True)


def test_the_estimate_is_printed_before_the_work_starts(monkeypatch):
    import io

    from rich.console import Console

    from ttc.replay import bench as bench_module
    from ttc.replay.run import run_bench

    out = io.StringIO()

    class Started(Exception):
        pass

    def started(*a, **k):
        assert re.search(r"ttc bench: about \d+ (s|min)", out.getvalue()), out.getvalue()
        raise Started

    monkeypatch.setattr(bench_module, "bench", started)
    try:
        run_bench(queries=20, responses=8, budgets=[2.0], seeds=2, repeats=1, reference_seeds=1, growth=[],
                  console=Console(file=out, width=200), depth=False)
    except Started:
        pass
    else:
        raise AssertionError("bench was not called")


def test_the_estimate_counts_each_rows_cost_and_the_cap():
    # boinf's rows: capped, so doubling the queries leaves their reference's estimate about the same; without the
    # cap it doubles
    one = BenchSpec(policies=(), rules=("boinf",))
    two = BenchSpec(n=1000, policies=(), rules=("boinf",))
    assert estimate_s(two)["reference"] < 1.2 * estimate_s(one)["reference"]
    free = [estimate_s(BenchSpec(n=n, policies=(), rules=("boinf",), reference_s=0))["reference"] for n in (500, 1000)]
    assert free[1] > 1.9 * free[0] and free[0] > 10 * estimate_s(one)["reference"]
    # pets costs the engine more than uniform per decision
    assert estimate_s(BenchSpec(policies=("pets",), rules=()))["engine"] > \
        5 * estimate_s(BenchSpec(policies=("uniform",), rules=()))["engine"]


def test_growth_table_covers_every_size_and_policy():
    g = growth(ns=(10, 40), size=6, budget=2, decisions=400, rounds=2, policies=("uniform", "ucb"))
    # each size's pool, and the control: the smallest size's queries with the largest pool's responses
    assert g.height == 6 and set(zip(g["queries"], g["responses"])) == {(10, 6), (40, 6), (10, 24)}
    # every cell timed each round, each decision counted (budget 2 per query, seeds scaled to 400 decisions)
    assert g["rounds"].to_list() == [2] * 6
    assert g.filter(pl.col("queries") == 10)["runs"].to_list() == [20, 20, 20, 20]
    assert (g["decisions"] == g["runs"] * 2 * g["queries"]).all() and (g["cpu_ns_per_decision"] > 0).all()
    ratios = growth_ratios(g)
    for p in ("uniform", "ucb"):
        ns = g.filter((pl.col("policy") == p) & (pl.col("responses") == 6)).sort("queries")["cpu_ns_per_decision"]
        ctrl = g.filter((pl.col("policy") == p) & (pl.col("responses") == 24))["cpu_ns_per_decision"][0]
        r = ratios[p]
        assert r.ns == ns.to_list() and r.ratio == ns[1] / ns[0]
        assert r.control_ns == ctrl and r.control_ratio == ns[1] / ctrl
    one = growth_ratios(growth(ns=(10,), size=6, budget=2, decisions=40, rounds=1, policies=("uniform",)))
    assert one["uniform"].control_ns is None and one["uniform"].ratio == 1


def test_growth_cells_add_a_control_as_large_as_the_largest_pool():
    """The control has the smallest size's queries (its heap and per-query state) and as many responses as the
    largest pool, so that the largest's cost over it is what the query count adds (issue 28)."""
    assert growth_cells((500, 5000, 50000), 64) == [(500, 64), (5000, 64), (50000, 64), (500, 6400)]
    assert growth_cells((40, 10, 40), 6) == [(40, 6), (10, 6), (10, 24)]
    assert growth_cells((10,), 6) == [(10, 6)] and growth_cells((), 6) == []
    assert growth_cells((10, 11), 1) == [(10, 1), (11, 1)]  # (no control that would repeat the smallest pool)
    # the estimate counts the control: as dear as its seeds at the largest pool's bytes
    spec = BenchSpec(policies=("uniform",), rules=())
    with_ctrl = estimate_s(spec, ns=(500, 50000))["growth"]
    assert with_ctrl > estimate_s(spec, ns=(500,))["growth"] + estimate_s(spec, ns=(50000,))["growth"]


def test_growth_times_one_thread_and_gives_the_threads_back():
    """The growth table's cells are one thread's CPU time (the kernel on the calling thread): the thread count is
    set to 1 while it runs and restored after, also when a cell fails."""
    from ttc.replay.engine import get_threads, set_threads

    set_threads(2)
    seen = []
    growth(ns=(10,), size=6, budget=2, decisions=40, rounds=1, policies=("uniform",),
           progress=lambda s: seen.append(get_threads()))
    assert set(seen) == {1} and get_threads() == 2
    with pytest.raises(ValueError):
        growth(ns=(10,), size=6, budget=2, decisions=40, rounds=1, policies=("no-such-policy",))
    assert get_threads() == 2
    set_threads(None)


def test_bench_command_prints_its_tables():
    # (wide enough that no header wraps: the words are looked for whole)
    r = CliRunner().invoke(app, ["bench", "--queries", "20", "--responses", "8", "--budgets", "2", "--seeds",
                                 "2", "--repeats", "1", "--growth", "10,20", "--growth-decisions", "2000"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for word in ("full grid", "speed-up", "reference timed on", "growth", "entropy", "oracle", "depth",
                 "parallel-probe", "cmc"):
        assert word in r.output
    # issue 28's check in words: how many policies stay within the bound, and which do not
    flat = " ".join(r.output.split())
    assert re.search(r"growth check: \d+ of \d+ policies within 3x from 10 to 20 queries", flat)
    # and the control's split of it: the same bytes with the smallest size's queries
    assert re.search(r"At the same pool bytes \(the control\) \d+ of \d+ within 3x from 10 to 20 queries \(the "
                     r"most, [a-z-]+ \d+\.\d\dx\)", flat), flat[-1500:]
    assert "control: 10 queries x 16 responses" in flat and "÷ control" in flat
    for flags in (["--seeds", "0"], ["--reference-s", "-1"], ["--reference-s", "nan"], ["--growth-decisions", "0"]):
        bad = CliRunner().invoke(app, ["bench", *flags])
        assert bad.exit_code == 2 and "error:" in bad.output, (flags, bad.output)


def test_side_eb_work_per_decision_does_not_grow_with_the_pool():
    """Issue 28: side-eb's refresh renewed every index each 8 pulls, O(queries) work per decision (74x slower per
    decision at 50,000 queries than at 500). Counted, not timed (a shared machine's timings make a flaky test; the
    timings are `ttc bench`'s growth table and docs/performance.md): in the reference, which the engine equals on
    every permutation (tests/test_side_eb.py), the index recomputations per pull stay about one (the pulled query's,
    plus a refresh of the active queries once per round of them) whether the pool has 40 or 800 queries; with the old
    rule they were about n / 8 + 1 per pull (101 at 800 queries)."""
    import numpy as np

    from ttc.replay import reference
    from ttc.replay.rng import query_order
    from ttc.replay.synth import make_pool

    per_pull = {}
    for n in (40, 800):
        pool = make_pool(n=n, size=16, seed=1)
        perm = np.concatenate([pool.off[i] + np.random.default_rng(i).permutation(pool.sizes[i])
                               for i in range(n)])
        rank, _ = query_order(pool.qkeys, 0)
        reference.WORK["side_eb_index"] = 0
        out = reference.run_reference(pool.off, pool.correct, pool.score, pool.ans, pool.tok, perm, rank,
                                      policy="side-eb", budget_total=6 * n, side=np.full(int(pool.off[-1]), 0.5))
        pulls = max(1, int(out["samples_used"]))
        per_pull[n] = reference.WORK["side_eb_index"] / pulls
    assert per_pull[40] < 3 and per_pull[800] < 3, per_pull


def test_depth_rows_match_their_reference_runs():
    # bench_depth checks each reference run against the engine's (traces and tokens) and raises on a difference:
    # rows here mean the engine and the twins made the same runs
    from ttc.replay.bench import DEPTH_CONFIGS, bench_depth, probed_synth

    pool = probed_synth(n=6, size=8)
    assert pool.probe_off[-1] == len(pool.probe_tok) and (pool.probe_tok[pool.probe_off[1:] - 1] < pool.tok).all()
    d = bench_depth(n=6, size=8, multiples=(1, 4), seeds=3, repeats=1, reference_seeds=2)
    assert d.height == 2 * len(DEPTH_CONFIGS) and set(d["budget"]) == {1.0, 4.0}
    assert {"parallel-probe(tokens)", "cmc(tokens)"} <= set(d["policy"])
    assert (d["decisions"] > 0).all() and (d["speedup"] > 0).all()


def test_bench_says_when_its_first_call_compiles(monkeypatch):
    """A first `ttc bench` sat at 0% for a minute and a half without a word: its note asked compile_expected about no
    pool at all, which always answered False. Now it asks about the bench's own kernels."""
    import io

    from rich.console import Console

    from ttc.replay import bench as bench_module
    from ttc.replay import engine
    from ttc.replay.run import run_bench

    spec = BenchSpec(n=20, size=8, budgets=(2.0,), seeds=2, repeats=1)
    monkeypatch.setattr(engine, "grid_kernels", lambda cached=True: set())  # an empty cache
    assert bench_module.bench_compile_expected(spec)
    monkeypatch.setattr(engine, "grid_kernels", lambda cached=True: None)  # a cache that cannot be read: no note
    assert not bench_module.bench_compile_expected(spec)
    monkeypatch.setattr(engine, "grid_kernels", lambda cached=True: set())
    out = io.StringIO()

    class Started(Exception):
        pass

    def started(*a, **k):
        raise Started

    monkeypatch.setattr(bench_module, "bench", started)
    with pytest.raises(Started):
        run_bench(queries=20, responses=8, budgets=[2.0], seeds=2, repeats=1, reference_seeds=1, growth=[],
                  console=Console(file=out, width=300, force_terminal=True), depth=False)
    assert "compiling the engine's kernels once" in out.getvalue()


def test_an_interrupted_bench_stops_its_side_compile(monkeypatch):
    from ttc.replay import bench as bench_module
    from ttc.replay.run import run_bench

    class Side:
        stopped = False

        def poll(self):
            return None

        def terminate(self):
            Side.stopped = True

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_module, "side_compile", lambda *a, **k: Side())
    monkeypatch.setattr(bench_module, "bench", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_bench(queries=20, responses=8, budgets=[2.0], seeds=2, repeats=1, reference_seeds=1, growth=[5000],
                  depth=False)
    assert Side.stopped


SIDE_SCRIPT = """
from ttc.replay.bench import growth_kernels_missing, side_compile
from ttc.replay.engine import _grid

assert side_compile((500,), 64, ("uniform",)) is None  # (32,000 responses: the arrays' kernel, no records)
assert growth_kernels_missing((500, 2000), 64, ("uniform",)) == ["uniform"]
proc = side_compile((500, 2000), 64, ("uniform",))
assert proc.wait() == 0
assert growth_kernels_missing((500, 2000), 64, ("uniform",)) == []  # in numba's cache index now
assert not _grid.signatures  # (compiled by the other process, none here)
print("side compile: ok")
"""


def test_side_compile_puts_the_growth_tables_kernels_in_numbas_cache(tmp_path):
    """A first `ttc bench` waited ~1 min for the growth table's large-pool kernels after everything else; side_compile
    compiles them in another process while the bench compiles its own. In a fresh interpreter with an empty cache."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "side.py"
    script.write_text(SIDE_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "side compile: ok" in r.stdout, r.stdout + r.stderr


def test_a_growth_round_of_a_dear_policy_makes_fewer_decisions():
    """pets-online's plan per run made its 500-query cell 3.7 s a round at 400,000 decisions, 11 s of the default
    bench; a round now stops near GROWTH_ROUND_S by the estimate, and a cheap policy keeps its decisions."""
    from ttc.replay.bench import GROWTH_ROUND_S, growth_cell_s, growth_runs

    assert growth_runs("uniform", 500, 400_000) == 100
    dear = growth_runs("pets-online", 500, 400_000)
    assert 1 <= dear < 100
    one_round = growth_cell_s("pets-online", 500, 400_000, 1) - growth_cell_s("pets-online", 500, 400_000, 0)
    assert 0.5 * GROWTH_ROUND_S < one_round <= GROWTH_ROUND_S
    g = growth(ns=(500,), size=4, budget=8, decisions=400_000, rounds=1, policies=("pets-online",))
    assert g["runs"].to_list() == [growth_runs("pets-online", 500, 400_000, 8)]


def test_the_growth_table_fits_80_columns():
    """The default table (three sizes, the control, every policy) renders without a cut cell in a standard
    terminal (issue 28's first-screen rule, here for `ttc bench`)."""
    from rich.console import Console

    from ttc.replay.bench import POLICIES, growth_cells
    from ttc.replay.run import _growth_table

    ns = (500, 5000, 50000)
    rows = [{"queries": n, "responses": r, "policy": p, "cpu_ns_per_decision": 12345.6}
            for p in POLICIES for n, r in growth_cells(ns, 64)]
    for width in (80, 120):
        console = Console(width=width, record=True, color_system=None)
        _growth_table(pl.DataFrame(rows), ns, 64, console)
        text = console.export_text()
        assert "…" not in text and all(len(x) <= width for x in text.splitlines()), text
        assert all(p in text for p in POLICIES) and "÷ control" in text
