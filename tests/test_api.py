"""The public Python API (ttc/__init__.py, replay/api.py): cheap to import, the same numbers as the command line,
one error type for bad input."""
import json
import subprocess
import sys

import polars as pl
import pytest

import ttc
from ttc.replay.errors import UserError


def _fresh(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_import_ttc_loads_no_numba_polars_or_torch():
    out = json.loads(_fresh("import json, sys, ttc; ttc.__version__; dir(ttc); "
                            "print(json.dumps(sorted(m for m in ('numba', 'polars', 'numpy', 'torch', 'rich', "
                            "'typer', 'ttc.replay.kernel') if m in sys.modules)))"))
    assert out == []


def test_the_registries_load_without_replaying():
    out = json.loads(_fresh("import json, sys, ttc; names = list(ttc.POLICIES); "
                            "print(json.dumps([names[:2], 'ttc.replay.kernel' in sys.modules]))"))
    assert out[0] == ["uniform", "elimination"]


def test_every_public_name_resolves():
    for name in ttc.__all__:
        assert getattr(ttc, name) is not None, name
    with pytest.raises(AttributeError):
        ttc.no_such_name  # noqa: B018


def test_replay_is_the_subpackage_and_the_function():
    import ttc.replay.pool

    assert ttc.replay.pool.load_pool is not None
    df = ttc.replay(policies=["uniform", "elimination"], budgets=[4, 8], seeds=5)
    assert isinstance(df, pl.DataFrame) and df.height == 2 * 2 * 5


def test_api_equals_the_command_line_on_the_same_seeds(tmp_path):
    """ttc.replay and `ttc replay --out` run the same request: the same rows, value for value."""
    from typer.testing import CliRunner

    from ttc.cli import app

    out = tmp_path / "r.parquet"
    r = CliRunner().invoke(app, ["replay", "--policy", "ucb,entropy", "--lambda", "1,2", "--budgets", "4,16",
                                 "--seeds", "4", "--seed-start", "7", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cli = pl.read_parquet(out)
    api = ttc.replay(None, ["ucb", "entropy"], [4, 16], range(7, 11), lam=[1, 2])
    assert api.equals(cli)


def test_a_pool_object_is_reused_and_invalid_votes_applies_to_it():
    pool = ttc.load_pool()
    a = ttc.replay(pool, "elimination", [4], 3, eliminate="sc-beta", select="sc", invalid_votes=True)
    b = ttc.replay(None, "elimination", [4], 3, eliminate="sc-beta", select="sc", invalid_votes=True)
    assert a.equals(b)
    c = ttc.replay(pool, "elimination", [4], 3, eliminate="sc-beta", select="sc")
    assert not c.equals(a)  # the convention changes stops on this pool (73 invalid answers)


@pytest.mark.parametrize("kw, msg", [
    (dict(policies="nope"), "unknown policy 'nope'"),
    (dict(bogus=1), "unknown parameter 'bogus'"),
    (dict(warmup=[1, 2]), "warmup takes one value"),
    (dict(seeds=0), "--seeds must be >= 1"),
    (dict(seeds=[3, 5]), "consecutive seeds"),
    (dict(pool="no-such-pool"), "no-such-pool"),
])
def test_bad_input_is_one_user_error(kw, msg):
    args = {"policies": "uniform", "budgets": [4], "seeds": 2, **kw}
    with pytest.raises(UserError, match=msg):
        ttc.replay(**args)


def test_summarize_matches_what_ttc_replay_prints():
    pool = ttc.load_pool()
    runs = ttc.replay(pool, ["uniform"], [4], 10)
    s = ttc.summarize(runs, pool)
    row = s.row(0, named=True)
    assert abs(row["accuracy"] - runs["accuracy"].mean()) < 1e-12
    # uniform against its own exact expectation: within a few SE, and its gain about 1
    assert abs(row["accuracy"] - row["uniform_accuracy"]) < 4 * row["accuracy_se"] + 1e-9


class _Coin:
    """A generator for ttc.run: answers 7 with probability 0.6 per sample seed, 12 tokens each."""

    def generate(self, prompts, sampling, seeds):
        import numpy as np

        from ttc.harvest.types import Response

        draw = lambda s: 7 if np.random.default_rng(s).random() < 0.6 else 3  # noqa: E731
        return [[Response(f"so the final answer is \\boxed{{{draw(s)}}}", 12, "stop")] * sampling.n for s in seeds]


def _queries(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"problem {i}", "answer": "7"}) + "\n"
                            for i in range(5)))
    return path


def test_run_is_the_command_as_a_function(tmp_path, capsys):
    """ttc.run plans and executes as `ttc run` does (harvest.run.plan_run + execute on the same request: the same
    results and run.json outcome), prints nothing unless asked, and refuses a bad option as a UserError."""
    from ttc.harvest.run import RunRequest, execute, plan_run
    from ttc.harvest.types import Sampling

    data = _queries(tmp_path)
    kw = dict(dataset=str(data), template="plain", budget=3, max_tokens=64, backend="transformers", oracle="sc",
              policy="elimination", max_per_query=8, seed=5, K=2)
    got = ttc.run("coin", out=tmp_path / "api", generator=_Coin(), **kw)
    assert capsys.readouterr() == ("", "")
    plan = plan_run(RunRequest(out=tmp_path / "direct", model="coin", backend="transformers", dataset=str(data),
                               template="plain", budget=3.0, oracle="sc", policy="elimination", max_per_query=8, K=2,
                               sampling=Sampling(n=1, max_tokens=64, seed=5), progress=False))
    direct = execute(plan, _Coin(), None, echo=lambda s: None)
    assert got.results == direct.results and got.summary["outcome"] == direct.summary["outcome"]
    assert got.summary["config"] == "elimination(K=2, eliminate=sc-share)" and got.frame().height == 5
    assert json.loads((tmp_path / "api" / "pool" / "pool.json").read_text())["runs"][0]["argv"] == ["ttc.run"]
    ttc.run("coin", out=tmp_path / "api", generator=_Coin(), echo=True, **kw)  # a finished run: read back, echoed
    assert "resuming" in capsys.readouterr().out
    with pytest.raises(UserError, match="unknown option 'bogus'"):
        ttc.run("coin", out=tmp_path / "x", generator=_Coin(), bogus=1, **kw)
    with pytest.raises(UserError, match="--K must be an integer in 1"):
        ttc.run("coin", out=tmp_path / "x", generator=_Coin(), **{**kw, "K": 0})
    assert not (tmp_path / "x").exists()
