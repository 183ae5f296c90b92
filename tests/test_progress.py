"""Honest progress (issue 28, issue 27 item 8): no time left until the work since the first step can measure a
rate, and the time before the first step (start-up, numba's compile) is not counted in it; a line at least every
interval while the work goes on, with a word about the first compile; replay and compare report per run, and
compare counts all its work."""
import io
import time

from ttc.replay import engine
from ttc.replay.policies import RunConfig
from ttc.replay.progress import estimate, progress
from ttc.replay.synth import make_pool


def test_no_estimate_until_enough_work_and_none_from_the_warm_up():
    assert estimate(100, 1, 1, 30.0) is None  # only the first step: no rate yet
    assert estimate(100, 3, 1, 30.0) is None  # 2% of the work since it
    assert estimate(100, 40, 1, 1.0) is None  # a second of it
    assert estimate(100, 51, 1, 10.0) == 10.0 * 49 / 50  # the rate since the first step
    # the first replay: a step of 32 seeds of 100 ended after a 15 s compile, the rest took 1 s: the old estimate
    # (elapsed x left / done) said about 32 s left with 68 to go; from the first step on, nothing until the rate is
    # measured
    p = progress(100, "replaying", enabled=False)
    p.__enter__()
    p.t0 -= 15.0
    p.advance(32)
    assert p.left() is None


def test_a_line_at_least_every_interval_while_nothing_advances():
    out = io.StringIO()
    with progress(10, "replaying", "runs", every_s=0.2, stream=out, note="compiling the engine once") as p:
        time.sleep(0.7)  # a first compile: no step ends
        p.advance(10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "replaying: compiling the engine once"
    beats = [ln for ln in lines if ln.startswith("replaying: 0/10 runs")]
    assert len(beats) >= 2 and all("compiling the engine once" in ln for ln in beats), lines
    assert lines[-1].startswith("replaying: 10/10 runs (100%)")


def test_replay_reports_per_run_not_per_block_of_seeds(monkeypatch):
    """27.8: progress came per block of up to 32 seeds (6 min 48 s without a line on a 5M-response pool); the
    kernel counts each run and run_grid passes them on while it works."""
    monkeypatch.setattr(engine, "TICK_S", 0.001)
    pool = make_pool(n=3000, size=16, seed=0)
    calls = []
    configs = [RunConfig("ucb"), RunConfig("side-eb"), RunConfig("elimination")]
    engine.replay(pool, configs, [8, 16], range(6), progress=calls.append)
    assert sum(calls) == len(configs) * 2 * 6
    assert len(calls) > 1, calls  # (before: one call, the block of 6 seeds)


def test_compile_expected_reads_the_cache():
    pool = make_pool(n=20, size=8, seed=0)
    engine.replay(pool, [RunConfig("uniform")], [2], range(1))
    assert engine.compile_expected(pool, [RunConfig("uniform")]) is False


def test_compare_counts_every_engine_calls_work(tmp_path):
    """compare said "28 s left" and ran 100 s more: its total counted engine calls, each a unit whatever its size.
    Its total is now query-runs, and the ticks it receives add up to exactly that total."""
    from ttc.replay.compare import CompareRequest, plan_pool
    from ttc.replay.synth import SynthSpec, write_synth

    path = write_synth(tmp_path / "p", SynthSpec(queries=40, responses=8, seed=1, tokens=0))[0]
    req = CompareRequest(pools=[path], policies=["uniform", "elimination"], budgets=[2, 4], seeds=3)
    plan = plan_pool(path, req)
    got = []
    from ttc.replay.compare import compare_pool

    compare_pool(plan, req, progress=got.append)
    assert sum(got) == plan.work(req.budgets, req.seeds)


def test_signals_reports_per_seed_and_k():
    """27.8: `signals --bootstrap 100000000` was silent past 150 s: progress came once per seed, after every k and
    signal of it; now per (seed, k)."""
    import tempfile
    from pathlib import Path

    from ttc.replay.pool import load_pool
    from ttc.replay.signals import measure, pool_signals
    from ttc.replay.synth import SynthSpec, write_synth

    with tempfile.TemporaryDirectory() as d:
        path = write_synth(Path(d) / "p", SynthSpec(queries=30, responses=8, seed=1, tokens=0))[0]
        pool = load_pool(path)
        calls = []
        measure(pool, pool_signals(path, pool), [1, 2, 4], range(3), bootstrap=5, progress=calls.append)
    assert len(calls) == 3 * 3 and sum(calls) == 9
