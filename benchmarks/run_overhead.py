"""What `ttc run` costs beyond the model: scheduling overhead per allocation round, and backend calls per run.

    python benchmarks/run_overhead.py [--queries 500] [--responses 64] [--budget 8] [--delay 0]
        [--delay-per-token 0] [--policies uniform,elimination,ucb,entropy,two-stage,streaming] [--concurrency 16]
        [--lookahead 1] [--modes free,round]

A synthetic pool (answers are numbers, the gold one correct with a per-query rate) is served by the loopback
OpenAI-compatible server (tests/fixtures/harvest/pool_openai_server.py, `--delay` seconds per request and
`--delay-per-token` seconds per completion token: a model's decoding time, 50-400 tokens per response here), and each
policy runs through `ttc run`'s own path (harvest.run.plan_run and execute) with the openai backend over HTTP. Per
policy it prints the backend calls against the allocation rounds (round-robin: the deepest query's responses; the
others: the engine runs that stopped for a response), the backend time (HTTP round trips, the server), the scoring time
(math-verify grading in one warm process), and everything else (the allocation loop's wall time less those two: the
engine's runs (each goes on where the last stopped), taking responses, writing the pool's parts), as seconds, per call,
and as a share of the backend time. `uniform` with a sample budget generates its whole allocation up front
(harvest.run.planned_counts: one call per distinct count, not one per round); the seconds that planning took, part of
`other`, are printed under it. --modes: `free` (the openai backend's default: each query's next response asked for as
soon as the run wants it, --concurrency in flight; calls are then requests, one per query at a time, and backend s the
time the driver waited for them) and/or `round` (--no-free-slots: one backend call per allocation round); wall s is the
allocation loop's. Not a test: the numbers depend on the machine and its load."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SERVER = ROOT / "tests" / "fixtures" / "harvest" / "pool_openai_server.py"


def make_pool(d: Path, n: int, size: int, seed: int = 0):
    import numpy as np
    import polars as pl

    from ttc.replay.pool import samples_frame, write_pool

    rng = np.random.default_rng(seed)
    ids = [f"q{i:05d}" for i in range(n)]
    gold = [str(int(g)) for g in rng.integers(1, 1000, n)]
    p = rng.beta(0.6, 0.9, n)
    p[rng.random(n) < 0.15] = 0.0
    rows = {"query_id": [], "sample_idx": [], "answer": [], "correct": [], "n_tokens": []}
    for i, q in enumerate(ids):
        u = rng.random(size)
        wrong = rng.integers(1000, 1004, size)
        for k in range(size):
            a = gold[i] if u[k] < p[i] else None if u[k] > 0.92 else str(int(wrong[k]))
            rows["query_id"].append(q)
            rows["sample_idx"].append(k)
            rows["answer"].append(a)
            rows["correct"].append(a == gold[i])
            rows["n_tokens"].append(int(rng.integers(50, 400)))
    queries = pl.DataFrame({"query_id": ids, "problem": [f"problem {q}" for q in ids], "gold": gold})
    write_pool(d / "pool", samples_frame(rows), {"name": "overhead-bench"}, queries=queries)
    (d / "queries.jsonl").write_text("".join(json.dumps({"id": q, "problem": f"problem {q}", "answer": g}) + "\n"
                                             for q, g in zip(ids, gold)))
    return d / "pool", d / "queries.jsonl"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--responses", type=int, default=64)
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--delay-per-token", type=float, default=0.0)
    ap.add_argument("--modes", default="free")
    ap.add_argument("--policies", default="uniform,elimination,ucb,entropy,two-stage,streaming")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--lookahead", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from ttc.harvest.backends import make_backend
    from ttc.harvest.run import RunRequest, execute, plan_run
    from ttc.harvest.types import Sampling

    tmp = Path(tempfile.mkdtemp(prefix="ttc-run-overhead-"))
    t0 = time.perf_counter()
    pool, data = make_pool(tmp, args.queries, args.responses)
    print(f"pool: {args.queries} queries x {args.responses} responses ({time.perf_counter() - t0:.1f} s to build); "
          f"budget {args.budget:g}/query, concurrency {args.concurrency}, lookahead {args.lookahead}, server delay "
          f"{args.delay:g} s per request + {args.delay_per_token:g} s per token")
    server = subprocess.Popen([sys.executable, str(SERVER), "--pool", str(pool), "--seed", str(args.seed), "--key",
                               "bench", "--delay", str(args.delay), "--delay-per-token", str(args.delay_per_token)],
                              stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    import os

    os.environ["TTC_BENCH_KEY"] = "bench"
    header = (f"{'policy':<12} {'mode':<5} {'calls':>6} {'rounds':>6} {'responses':>9} {'wall s':>7} {'backend s':>9} "
              f"{'scoring s':>9} {'engine s':>8} {'write s':>7} {'other s':>8} {'other/call ms':>13} "
              f"{'other/backend':>13}")
    print(header)
    print("-" * len(header))
    try:
        for policy, mode in [(p, m) for p in args.policies.split(",") for m in args.modes.split(",")]:
            backend = make_backend("openai", model="pool-model", base_url=f"http://127.0.0.1:{port}/v1",
                                   api_key_env="TTC_BENCH_KEY", concurrency=args.concurrency)
            eliminate = None
            req = RunRequest(out=tmp / f"run-{policy}-{mode}", model="pool-model", backend="openai", dataset=str(data),
                             template="plain", sampling=Sampling(n=1, max_tokens=512, seed=args.seed),
                             budget=args.budget, policy=policy, eliminate=eliminate,
                             max_per_query=args.responses, lookahead=args.lookahead, progress=False,
                             free_slots=mode == "free", backend_options={"concurrency": args.concurrency})
            t_run = time.perf_counter()
            o = execute(plan_run(req), backend, None, echo=lambda s: None)
            wall = time.perf_counter() - t_run
            me = o.summary["this_process"]
            if policy in ("uniform", "elimination", "two-stage"):
                rounds = max(r["responses"] for r in o.results)
                if policy == "two-stage":
                    rounds = f"{rounds}*"
            else:
                rounds = o.live["runs"] - 1
            b = max(me["backend_s"], 1e-9)
            runs = max(me["backend_calls"], 1)
            print(f"{policy:<12} {mode:<5} {me['backend_calls']:>6} {rounds!s:>6} {me['responses_generated']:>9} "
                  f"{wall:>7.2f} {me['backend_s']:>9.2f} {me['score_s']:>9.2f} {me['engine_s']:>8.3f} "
                  f"{me['write_s']:>7.3f} "
                  f"{me['overhead_s']:>8.3f} {1000 * me['overhead_s'] / runs:>13.2f} {me['overhead_s'] / b:>13.2%}")
            if me.get("plan_s") is not None:  # uniform with a sample budget: its allocation computed up front
                print(f"{'':<12} (planned up front: {me['plan_s']:.3f} s of `other`, in {me['backend_calls']} "
                      f"call{'s' if me['backend_calls'] != 1 else ''} instead of {rounds} rounds)")
            backend.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    print("rounds: round-robin policies, the deepest query's responses (two-stage*: stage 1 and 2 together); the "
          "others, the engine runs that stopped for a response. other: the allocation loop's wall time less the "
          "backend and the scoring, i.e. everything else (the engine's runs, taking responses, writing "
          "the pool's parts: engine s and write s are parts of it).")


if __name__ == "__main__":
    main()
