"""ttc: adaptive test-time compute allocation for LLMs. docs/api.md walks through the Python API.

`import ttc` is cheap (no numba, polars or torch): every public name below is imported on first use. The package
is the repository root (pyproject.toml maps it): `ttc.replay` (the replay engine; also callable, `ttc.replay(pool,
...)`), `ttc.harvest` (generation and scoring), `ttc.cli` (the `ttc` command), `ttc.data` (the embedded pools)."""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> "module:attribute" (a module alone: the module). One table, read by __getattr__ and __dir__.
_API = {
    "load_pool": "ttc.replay.api:load_pool",
    "replay": "ttc.replay",  # the subpackage, callable as replay(pool, policies=..., budgets=..., seeds=...)
    "summarize": "ttc.replay.api:summarize",
    "tune": "ttc.replay.api:tune",
    "compare": "ttc.replay.api:compare",
    "run": "ttc.harvest.run.api:run",  # the whole `ttc run` command; run_live: the driver under it
    "run_live": "ttc.replay.live:run_live",
    "Observed": "ttc.replay.live:Observed",
    "Pool": "ttc.replay.pool:Pool",
    "RunConfig": "ttc.replay.policies:RunConfig",
    "UserError": "ttc.replay.errors:UserError",
    # the registries: every policy, rule and selection (replay), every oracle, backend and import format (harvest)
    "POLICIES": "ttc.replay.policies:REGISTRY",
    "ELIMINATION_RULES": "ttc.replay.policies:ELIMINATION_RULES",
    "SELECTIONS": "ttc.replay.policies:SELECTION_RULES",
    "ORACLES": "ttc.harvest.registry:ORACLES",
    "BACKENDS": "ttc.harvest.registry:BACKENDS",
    "IMPORTERS": "ttc.harvest.registry:IMPORTERS",
    "harvest": "ttc.harvest",
    "cli": "ttc.cli",
    "data": "ttc.data",
}
__all__ = sorted(_API)


def __getattr__(name: str):
    target = _API.get(name)
    if target is None:
        raise AttributeError(f"module 'ttc' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = importlib.import_module(module)
    if attr:
        value = getattr(value, attr)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
