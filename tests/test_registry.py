"""The registry (replay/policies.py) is the one place a policy or rule is declared: the README's option table, the
report's sweeps, the figures' styles and the live driver read it, and every kernel code has exactly one entry."""
import re
from pathlib import Path

from replay import kernel
from replay.engine import SELECT
from replay.figures import STYLE
from replay.live import LIVE_POLICIES
from replay.policies import (ELIMINATION_RULES, POLICIES, REGISTRY, SELECTION_RULES, RunConfig, markdown_choices,
                             supported)
from replay.pool import Pool

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _row(option):
    rows = [line for line in README.splitlines() if line.startswith(f"| `{option}")]
    assert len(rows) == 1, option
    return rows[0]


def test_readme_option_rows_are_rendered_from_the_registry():
    assert markdown_choices(REGISTRY) in _row("--policy")
    assert markdown_choices(ELIMINATION_RULES) in _row("--eliminate")
    assert markdown_choices(SELECTION_RULES) in _row("--select")
    for entry in (*REGISTRY.values(), *ELIMINATION_RULES.values(), *SELECTION_RULES.values()):
        assert "|" not in entry.doc, entry.name  # would break the markdown table


def test_every_kernel_policy_code_has_one_entry():
    codes = {v for k, v in vars(kernel).items() if k in {"UNIFORM", "ELIMINATION", "UCB", "GAP", "GAP_LITERAL",
                                                         "ENTROPY", "TWO_STAGE", "STREAMING", "ORACLE"}}
    assert sorted(p.code for p in REGISTRY.values()) == sorted(codes)
    elim_codes = {v for k, v in vars(kernel).items() if k.startswith("ELIM_")}
    assert sorted(r.code for r in ELIMINATION_RULES.values()) == sorted(elim_codes)
    assert SELECT == {n: r.code for n, r in SELECTION_RULES.items()}
    assert POLICIES == {n: p.code for n, p in REGISTRY.items()}


def test_the_readers_follow_the_registry():
    assert set(STYLE) == set(REGISTRY)
    assert LIVE_POLICIES == tuple(n for n, p in REGISTRY.items() if p.live) and "oracle" not in LIVE_POLICIES
    for name, p in REGISTRY.items():  # every parameter a policy declares is a RunConfig field
        assert set(p.params) <= set(RunConfig.__dataclass_fields__), name


def test_supported_reads_the_needs():
    import numpy as np
    off = np.array([0, 2])
    bare = Pool.from_arrays(off, score=np.array([0.5, 1.0]))
    full = Pool.from_arrays(off, correct=np.array([1, 0]), ans=np.array([0, 1]))
    assert "oracle" not in supported(bare) and "entropy" not in supported(bare)
    assert supported(full) == list(REGISTRY)
    assert "elimination" not in supported(bare, "sc-beta") and "uniform" in supported(bare, "sc-beta")
    assert not re.search("oracle|entropy", " ".join(supported(bare, "sc-share")))
