"""`ttc bench` runs end to end on a tiny grid and reports numbers that add up."""
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.bench import RULES, BenchSpec, bench, growth
from ttc.replay.policies import REGISTRY


def test_bench_rows_and_speedup_on_a_tiny_grid():
    df, info = bench(BenchSpec(n=20, size=8, budgets=(2, 4), seeds=3, repeats=1, reference_seeds=1))
    # every policy of the registry at 2 budgets but deepconf-online and the depth ones (a synthetic pool has no
    # record lows and no probes), and the rules of bench.RULES under elimination
    rows = len(REGISTRY) - 3 + len(RULES)
    assert df.height == rows * 2 and not {"deepconf-online", "parallel-probe", "cmc"} & set(df["policy"])
    assert info["configs"] == rows * 2 and info["full_grid_s"] > 0
    assert "elimination(eliminate=boinf)" in df["policy"].to_list()
    # uniform at budget b hands out exactly b responses to each of the 20 queries, in each of the 3 runs
    u = df.filter((df["policy"] == "uniform") & (df["budget"] == 4)).row(0, named=True)
    assert u["decisions"] == 4 * 20 * 3 and u["runs"] == 3
    assert (df["decisions_per_s"] > 0).all() and (df["speedup"] > 0).all()


def test_growth_table_covers_every_size_and_policy():
    g = growth(ns=(10, 40), size=6, budget=2, decisions=400, repeats=1, policies=("uniform", "ucb"))
    assert g.height == 4 and sorted(set(g["queries"])) == [10, 40]


def test_bench_command_prints_its_tables():
    # (wide enough that no header wraps: the words are looked for whole)
    r = CliRunner().invoke(app, ["bench", "--queries", "20", "--responses", "8", "--budgets", "2", "--seeds",
                                 "2", "--repeats", "1", "--growth", "10,20"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for word in ("full grid", "speed-up", "growth", "entropy", "oracle"):
        assert word in r.output
    bad = CliRunner().invoke(app, ["bench", "--seeds", "0"])
    assert bad.exit_code == 2


def test_side_eb_cost_per_decision_does_not_grow_with_the_pool():
    """Issue 28: side-eb's refresh renewed every index each 8 pulls, O(queries) work per decision (74x per decision
    at 50,000 queries against 500). Timed against elimination on the same pools, which cancels the memory
    hierarchy's share: once per round of the active queries, side-eb's cost per decision stays within a small
    factor of elimination's as the pool grows 100-fold (it was about 50x more at 20,000 queries)."""
    from ttc.replay.engine import get_threads, set_threads

    threads = get_threads()
    set_threads(1)
    try:
        g = growth(ns=(200, 20000), size=16, budget=8, decisions=320_000, repeats=3,
                   policies=("elimination", "side-eb"))
    finally:
        set_threads(threads)
    rate = {(r["queries"], r["policy"]): r["decisions_per_s"] for r in g.iter_rows(named=True)}
    slower = [rate[(n, "elimination")] / rate[(n, "side-eb")] for n in (200, 20000)]
    assert slower[1] / slower[0] < 4, slower
