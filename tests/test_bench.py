"""`ttc bench` runs end to end on a tiny grid and reports numbers that add up."""
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.bench import RULES, BenchSpec, bench, growth
from ttc.replay.policies import REGISTRY


def test_bench_rows_and_speedup_on_a_tiny_grid():
    df, info = bench(BenchSpec(n=20, size=8, budgets=(2, 4), seeds=3, repeats=1, reference_seeds=1))
    # every policy of the registry at 2 budgets but deepconf-online (a synthetic pool has no record lows), and the
    # rules of bench.RULES under elimination
    rows = len(REGISTRY) - 1 + len(RULES)
    assert df.height == rows * 2 and "deepconf-online" not in df["policy"].to_list()
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
    r = CliRunner().invoke(app, ["bench", "--queries", "20", "--responses", "8", "--budgets", "2", "--seeds",
                                 "2", "--repeats", "1", "--growth", "10,20"])
    assert r.exit_code == 0, r.output
    for word in ("full grid", "speed-up", "growth", "entropy", "oracle"):
        assert word in r.output
    bad = CliRunner().invoke(app, ["bench", "--seeds", "0"])
    assert bad.exit_code == 2
