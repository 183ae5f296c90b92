"""Where the embedded pools (the repository's data/) are, however ttc is installed.

A wheel or `pip install .` ships data/ as the package `ttc_data` (pyproject.toml maps it); `pip install -e .` maps
`ttc_data` to the checkout's data/; a plain checkout with no install has only data/ beside replay/. A checkout (a
pyproject.toml beside replay/) uses its own data/, so that code and pools come from the same tree; anything else
asks the import system for `ttc_data`. Stdlib only: `replay` must import with the base install."""
from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "ttc_data"
_CHECKOUT = Path(__file__).resolve().parent.parent


def data_dir() -> Path | None:
    """The directory holding the embedded pools, or None if neither a checkout nor an installed ttc_data has one."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "data").is_dir():
        return _CHECKOUT / "data"
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    # ttc_data has no __init__.py, so it is a namespace package: its directories are its search locations
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        if Path(loc).is_dir():
            return Path(loc)
    return None


def embedded_pool(name: str) -> Path:
    """The embedded pool `name` (e.g. "lastletters-gpt35-40"). When it cannot be found, the path it would have in a
    checkout, so that loading it fails with an error that names a path."""
    base = data_dir()
    return (base if base is not None else _CHECKOUT / "data") / name


DEFAULT_POOL = embedded_pool("lastletters-gpt35-40")


def embedded_pools() -> list[Path]:
    """Every embedded pool (a directory of data/ holding samples.parquet or samples/), sorted by name: what `ttc
    compare` compares when given no pool. Empty when no data/ can be found."""
    base = data_dir()
    if base is None:
        return []
    return sorted(d for d in base.iterdir()
                  if d.is_dir() and ((d / "samples.parquet").is_file() or (d / "samples").is_dir()))
