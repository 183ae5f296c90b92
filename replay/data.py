"""Where the embedded pools are, however ttc is installed.

data/ is the package `ttc.data`, beside `ttc.replay` both in a checkout (the repository root is the package `ttc`,
pyproject.toml maps it) and in an installed wheel (site-packages/ttc/data), so the pools are always this file's
../data. Stdlib only: `ttc.replay` must import with the base install."""
from __future__ import annotations

from pathlib import Path

_DATA = Path(__file__).resolve().parent.parent / "data"


def data_dir() -> Path | None:
    """The directory holding the embedded pools, or None if this install has none."""
    return _DATA if _DATA.is_dir() else None


def embedded_pool(name: str) -> Path:
    """The embedded pool `name` (e.g. "lastletters-gpt35-40"). When it cannot be found, the path it would have, so
    that loading it fails with an error that names a path."""
    return _DATA / name


DEFAULT_POOL = embedded_pool("lastletters-gpt35-40")


def embedded_pools() -> list[Path]:
    """Every embedded pool (a directory of data/ holding samples.parquet or samples/), sorted by name: what `ttc
    compare` compares when given no pool. Empty when no data/ can be found."""
    base = data_dir()
    if base is None:
        return []
    return sorted(d for d in base.iterdir()
                  if d.is_dir() and ((d / "samples.parquet").is_file() or (d / "samples").is_dir()))


def resolve_pool(path):
    """A pool argument as given, or, when no such path exists and it is the name of an embedded pool (e.g.
    "math500-llama3.1-8b-48"), that pool: the data/... paths of a checkout do not exist after a wheel install, and
    the name works from anywhere (issue 28)."""
    if path is None:
        return None
    p = Path(path)
    if not p.exists() and len(p.parts) == 1:
        named = _DATA / p.name
        if named.is_dir():
            return named
    return p
