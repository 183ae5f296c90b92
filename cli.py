"""`ttc`: the project's command line (typer). `ttc replay` replays allocation policies over a cached pool."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Adaptive test-time compute allocation: harvest sample pools, replay allocation policies.")


@app.callback()
def _root():
    """Adaptive test-time compute allocation: harvest sample pools, replay allocation policies."""


def _fail(msg: str, code: int = 2):
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        _fail(f"{name} takes comma-separated numbers, got {text!r}")
    if not vals:
        _fail(f"{name} is empty")
    return vals


def _ints(text: str, name: str) -> list[int]:
    vals = _floats(text, name)
    if any(v != int(v) for v in vals):
        _fail(f"{name} takes comma-separated integers, got {text!r}")
    return [int(v) for v in vals]


@app.command("replay")
def replay_cmd(
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool directory (default: the embedded pool in data/)."),
    policy: Optional[List[str]] = typer.Option(
        None, "--policy", metavar="NAME", help="Policies (repeat or comma-separate): uniform, elimination, ucb, gap, gap-literal, "
        "entropy, two-stage, streaming, oracle. Default: all the pool supports."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query (samples, or tokens with --unit tokens)."),
    seeds: int = typer.Option(100, help="Number of seeds (permutations) per configuration."),
    seed_start: int = typer.Option(0, help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    score: str = typer.Option("gt", help="Score column (score_<name> or <name>), or gt: 1 if correct else 0."),
    eliminate: str = typer.Option("threshold", help="Elimination rule: threshold, sc-share, sc-beta or none."),
    gamma: str = typer.Option("1.0", help="Threshold gamma (list allowed): eliminate when a score >= gamma."),
    select: str = typer.Option("bon", help="Selection for accuracy: bon, weighted or sc."),
    unit: str = typer.Option("samples", help="Budget unit: samples, tokens or token-matched."),
    k: str = typer.Option("1", "--K", "-K", help="Responses per pull (list allowed)."),
    lam: Optional[str] = typer.Option(None, "--lambda", help="Exploration bonus (list); default ucb 1, entropy 3."),
    eps: float = typer.Option(0.01, help="gap's epsilon."),
    max_samples: str = typer.Option("0", help="Per-query cap for adaptive policies (list; 0 = the pool size)."),
    rho: str = typer.Option("0.25,0.5,0.75", help="two-stage: share of the budget spent in stage 1 (list)."),
    tau: str = typer.Option("0.5", help="sc-share: the leading answer's share needed (list)."),
    m_min: int = typer.Option(3, help="sc-share: responses needed before it can stop."),
    conf: float = typer.Option(0.95, help="sc-beta: confidence P(p1 > p2) needed to stop."),
    out: Optional[Path] = typer.Option(None, help="Write one row per (configuration, budget, seed) to this Parquet file."),
    per_query: Optional[Path] = typer.Option(None, help="Write the per-query allocation of every run to this Parquet file."),
    curve: Optional[Path] = typer.Option(None, help="Write uniform's exact curves (coverage@k, best-of-k) to this Parquet file."),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on it."),
):
    """Replay allocation policies over a cached pool at many budgets and seeds; print mean ± standard error."""
    from replay.run import ReplayRequest, run_replay

    req = ReplayRequest(
        pool=pool, policies=[p.strip() for item in (policy or []) for p in item.split(",") if p.strip()],
        budgets=_floats(budgets, "--budgets"), seeds=seeds, seed_start=seed_start, score=score,
        eliminate=eliminate, gammas=_floats(gamma, "--gamma"), select=select, unit=unit, Ks=_ints(k, "--K"),
        lams=_floats(lam, "--lambda") if lam else None, eps=eps, max_samples=_ints(max_samples, "--max-samples"),
        rhos=_floats(rho, "--rho"), taus=_floats(tau, "--tau"), m_min=m_min, conf=conf, out=out,
        per_query=per_query, curve=curve, threads=threads)
    try:
        run_replay(req)
    except ValueError as e:  # PoolError and bad parameters: a message, never a traceback
        _fail(str(e))


@app.command("import")
def import_cmd(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="lastletters-esc, math500-ivt, qwen-math-rm or generic."),
    source: Path = typer.Argument(..., help="The dump file as published (generic: .parquet, .csv, .jsonl)."),
    out: Path = typer.Option(..., "--out", help="Pool directory to write (new or empty)."),
    query_id: str = typer.Option("query_id", help="generic: the query id column."),
    correct: Optional[str] = typer.Option(None, help="generic: the ground-truth column (bool or 0/1)."),
    answer: Optional[str] = typer.Option(None, help="generic: the final-answer column (empty = invalid)."),
    score: Optional[List[str]] = typer.Option(None, metavar="NAME=COLUMN", help="generic: a score column in [0, 1] (repeat)."),
    n_tokens: Optional[str] = typer.Option(None, help="generic: the token-count column."),
    sample_idx: Optional[str] = typer.Option(None, help="generic: the generation-order column (default: row order)."),
    hash_answers: bool = typer.Option(False, help="generic: store answers as hashes (no third-party text)."),
):
    """Convert a sample dump into a pool. Named formats are public dumps; `generic` maps any table: one row per
    response, or one row per query with list columns (exploded in list order)."""
    from replay.importers import import_pool
    from replay.pool import load_pool

    options = None
    if fmt == "generic":
        pairs = [s.split("=", 1) for s in (score or [])]
        if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
            _fail("--score takes NAME=COLUMN, e.g. --score prm=prm_min")
        options = {"query_id": query_id, "correct": correct, "answer": answer, "scores": dict(pairs),
                   "n_tokens": n_tokens, "sample_idx": sample_idx, "hash_answers": hash_answers}
    try:
        pool = import_pool(fmt, source, out, options)
        p = load_pool(pool)
    except ValueError as e:
        _fail(str(e))
    typer.echo(f"wrote {out}: {p.n_queries} queries, {p.off[-1]} responses")


@app.command("info")
def info_cmd(
    pool: Path = typer.Argument(..., help="Pool directory."),
    plot: Optional[Path] = typer.Option(None, help="Write uniform's exact curves as a PNG."),
):
    """What to check before trusting a pool: sizes, columns, difficulty, exact curves, score-vs-truth agreement."""
    from replay.run import run_info

    try:
        run_info(pool, plot)
    except ValueError as e:
        _fail(str(e))


@app.command("bench")
def bench_cmd(
    queries: int = typer.Option(500, help="Queries in the synthetic pool."),
    responses: int = typer.Option(64, help="Responses per query."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query."),
    seeds: int = typer.Option(100, help="Seeds per (policy, budget)."),
    repeats: int = typer.Option(5, help="Timing repeats; the median is reported."),
    reference_seeds: int = typer.Option(1, help="Seeds the plain-Python reference runs per row (0: skip it)."),
    growth: str = typer.Option("500,5000,50000", help="Pool sizes (queries) for the growth table; empty: skip."),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores)."),
):
    """Time every policy on a synthetic pool against the plain-Python reference, and its growth with pool size."""
    from replay.run import run_bench

    try:
        run_bench(queries=queries, responses=responses, budgets=_floats(budgets, "--budgets"), seeds=seeds,
                  repeats=repeats, reference_seeds=reference_seeds,
                  growth=_ints(growth, "--growth") if growth.strip() else [], threads=threads)
    except ValueError as e:
        _fail(str(e))


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
