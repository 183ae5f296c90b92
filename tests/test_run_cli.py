"""`ttc run` on the command line: its choices are the registries' (live policies, live oracles), and every mistake a
user can make is one `error:` line, exit status 2, with nothing written."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttc import cli
from ttc.cli import app

HERE = Path(__file__).resolve().parent
MATH = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
runner = CliRunner()


def test_the_choices_are_the_registries():
    from ttc.harvest.registry import ORACLES
    from ttc.harvest.run import LIVE_ORACLES, UNSUPPORTED
    from ttc.replay.live import LIVE_POLICIES

    assert cli.LIVE_POLICY_NAMES == LIVE_POLICIES
    assert set(cli.RUN_ORACLES) == set(LIVE_ORACLES) | set(ORACLES)
    assert set(UNSUPPORTED) == set(ORACLES) - set(LIVE_ORACLES)  # every registry oracle is run or refused


def base(tmp_path, *extra):
    return ["run", "--dataset", str(MATH), "--model", "m", "--backend", "transformers", "--max-tokens", "8",
            "--budget", "2", "--out", str(tmp_path / "out"), *extra]


@pytest.mark.parametrize("extra, message", [
    (["--budget", "0.5"], "--budget must be at least 1"),
    (["--budget", "inf"], "--budget must be at least 1"),
    (["--budget", "300"], "more than --max-per-query"),
    (["--policy", "oracle"], "Invalid value for '--policy'"),
    (["--oracle", "prm", "--prm-model", "./no-such-prm"], "--prm-model ./no-such-prm: not a model directory"),
    (["--oracle", "prm", "--prm-model", "./no-such-prm", "--score", "prm_max"], "prm_min, prm_last, prm_prod"),
    (["--oracle", "prm", "--prm-model", "./no-such-prm", "--judge-model", "j"],
     "--judge-model applies to ttc run --oracle judge, not prm"),
    (["--oracle", "judge"], "needs --judge-model"),
    (["--oracle", "judge", "--judge-model", "j", "--judge-base-url", "http://x/v1"],
     "--judge-base-url applies to --judge-backend openai"),
    (["--oracle", "exec"], "--oracle exec runs LiveCodeBench code-execution queries"),
    (["--score", "prm_min"], "nothing to choose"),
    (["--oracle", "sc", "--policy", "gap"], "ranks queries by their scores"),
    (["--oracle", "sc"], "compares scores"),  # sc's default eliminate is sc-share; elimination + threshold is not
    (["--unit", "token-matched"], "Invalid value for '--unit'"),
    (["--temperature", "-1"], "--temperature"),
    (["--max-per-query", "0"], "--max-per-query"),
    (["--lookahead", "0"], "--lookahead"),
    (["--retries", "-1"], "--retries"),
    (["--K", "0"], "K must be"),
    (["--rho", "1.5"], "rho"),
    (["--conf", "1"], "--conf"),
    (["--timeout", "0"], "--timeout"),
    (["--prm-model", "x"], "--prm-model applies to ttc run --oracle prm, not gt"),
    (["--workers", "2"], "--workers applies to ttc run --oracle exec, not gt"),
    (["--concurrency", "4"], "--concurrency applies to --backend openai"),
    (["--batch", str(MATH)], "one of the two"),
    (["--template", "lcb-exec-cot"], "template 'lcb-exec-cot' is for lcb-exec"),
    (["--limit", "0"], "--limit"),
])
def test_mistakes_are_one_error_line_and_nothing_is_written(tmp_path, extra, message):
    args = base(tmp_path, *extra)
    if extra[:2] == ["--oracle", "sc"] and len(extra) == 2:
        args += ["--eliminate", "threshold"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output and message in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("error:")]) == 1, r.output
    assert not (tmp_path / "out").exists()


def test_no_queries_and_a_model_that_does_not_load(tmp_path):
    r = runner.invoke(app, [a for a in base(tmp_path) if a not in ("--dataset", str(MATH))])
    assert r.exit_code == 2 and "--dataset NAME|FILE or as --batch FILE" in r.output
    r = runner.invoke(app, base(tmp_path, "--model", str(tmp_path / "no-such-model")))
    assert r.exit_code == 2 and "could not load the tokenizer" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("x")
    r = runner.invoke(app, [*base(tmp_path)[:-1], str(tmp_path / "file")])
    assert r.exit_code == 2 and "is a file" in r.output
