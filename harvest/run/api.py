"""`ttc.run`: the `ttc run` command as a Python function (docs/api.md), beside replay/api.py's functions: the same
request, checks and path as the command line (command.run_command), the outcome returned and nothing printed unless
asked. It lives in harvest, not replay/api.py: replay never imports harvest (tests/test_layering.py)."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from ttc.replay.errors import InputError


def run(model: str, *, out: Any, budget: float, max_tokens: int, dataset: str | None = None, batch: Any = None,
        backend: str = "vllm", generator: Any = None, policy: str = "elimination", oracle: str = "gt",
        temperature: float = 0.6, top_p: float = 1.0, seed: int = 0, confidence: Any = None, scoring: Any = None,
        backend_options: dict | None = None, progress: bool = False, echo: bool = False, **options):
    """`ttc run` as a function: spend one budget across a batch of queries live against a model, with checkpoints
    in `out` (a killed run called again resumes), and return its outcome: `.results` (one row per query, the
    results.parquet rows; `.frame()` as a DataFrame), `.summary` (run.json: outcome and cost), `.out`.

    backend: a registry name (ttc.BACKENDS); backend_options: its options by parameter name (device, dtype,
    base_url, concurrency, ...). generator: an object with generate(prompts, sampling, seeds) (harvest.types.Backend)
    that generates in place of the named backend, which still sets the conventions (prompts rendered without a
    tokenizer, calls per round): a model of your own, or a test double. confidence: the --confidence signals (a
    comma list or a harvest.confidence.ConfidenceSpec); scoring: harvest.scoring.ScoreOptions of exec / prm / judge.
    options: RunConfig fields under their own names (K, gamma, max_samples, ...) and the command's options as
    RunRequest names them (unit, eliminate, select, conf, prior, side, max_per_query, lookahead, template, chat,
    limit, retries, stream, ...). Nothing is printed unless asked: `progress` shows the bar, `echo` the command's
    lines (its report is harvest.run.report_lines(outcome))."""
    from ttc.replay.api import _typed
    from ttc.replay.policies import RunConfig

    from ..types import Sampling
    from .command import run_command
    from .execute import execute
    from .plan import plan_run
    from .request import RunRequest

    known = {f.name for f in fields(RunRequest)} | {f.name for f in fields(RunConfig)}
    unknown = sorted(set(options) - known - {"sampling", "config"})
    if unknown:
        raise InputError(f"unknown option {unknown[0]!r}; ttc.run takes RunConfig's fields and RunRequest's options")
    if isinstance(confidence, str):
        from ..confidence import parse_signals

        confidence = parse_signals([confidence])
    req = RunRequest(out=Path(out), model=model, backend=backend, budget=float(budget), dataset=dataset,
                     batch=None if batch is None else Path(batch), policy=policy, oracle=oracle,
                     sampling=Sampling(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed),
                     confidence=confidence, scoring=scoring, backend_options=dict(backend_options or {}),
                     progress=progress, **{k: _typed(k, v) for k, v in options.items()})
    say = _echo if echo else None
    argv = ["ttc.run"]  # (pool.json records how each process was started)
    if generator is None:
        return run_command(req, given=set(req.backend_options), argv=argv, echo=say, quiet=not progress)
    return execute(plan_run(req), generator, None, argv=argv, echo=say or (lambda *a, **k: None))


def _echo(text: str, err: bool = False) -> None:
    import sys

    print(text, file=sys.stderr if err else sys.stdout)
