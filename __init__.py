"""ttc: adaptive test-time compute allocation for LLMs (docs/api.md has the walk-through).

`import ttc` is cheap: the public names below are looked up on first use, so neither numba nor polars is imported
until something that needs them runs."""
from __future__ import annotations

__version__ = "0.1.0"
