"""`ttc replay` through the command line: output table and files, policy and parameter selection, and bad input
giving exit code 2 with a one-line "error: ..." message on stderr, never a traceback."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.replay.policies import POLICIES, REGISTRY

# what the embedded pools run by default: every policy but those needing record lows, which none of them has
# the default list: what an embedded pool supports (no record lows, probes or side signal), less the slow ones (pets)
EMBEDDED = [p for p in POLICIES if not {"lows", "probes", "side"} & REGISTRY[p].needs and not REGISTRY[p].slow]

REPO = Path(__file__).resolve().parents[1]
MATH = REPO / "data" / "math500-llama3.1-8b-48"
N_DEFAULT = 500  # queries in the embedded default pool (data/lastletters-gpt35-40)
PARAMS = ["K", "eliminate", "gamma", "lam", "max_samples", "rho", "tau", "m_min", "unit", "select", "score"]
RUN_COLUMNS = ["policy", "budget", "seed", "coverage", "accuracy", "samples_used", "tokens_used", "exhausted"]

runner = CliRunner()


def replay(*args):
    """Invoke `ttc replay` in-process; --seeds 2 --budgets 2 unless given."""
    args = [str(a) for a in args]
    if "--seeds" not in args:
        args += ["--seeds", "2"]
    if "--budgets" not in args:
        args += ["--budgets", "2"]
    return runner.invoke(app, ["replay", *args])


def ok(result):
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def assert_clean_error(result, pattern=None):
    """Exit code 2, stderr starts with 'error:', no traceback and no uncaught exception."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stderr.startswith("error:"), result.stderr
    assert "Traceback" not in result.output
    if pattern:
        assert re.search(pattern, result.stderr), result.stderr


def table_policies(stdout):
    """The policy cells (configuration labels) of the printed table."""
    cells = set()
    for line in stdout.splitlines():
        parts = re.split(r"[│|]", line)
        if len(parts) > 3 and re.fullmatch(r"\s*[\d.]+\s*", parts[1]):
            cells.add(parts[2].strip())
    return cells


def small_pool(root, name="pool", **cols):
    """A 3-query pool with ground truth and answers, plus extra columns (lists of 6)."""
    d = root / name
    d.mkdir()
    pl.DataFrame({"query_id": ["a", "a", "b", "b", "c", "c"], "sample_idx": [0, 1] * 3,
                  "correct": [True, False, False, False, True, True], "answer": ["x", "y", "y", "z", "x", "x"],
                  **cols}).write_parquet(d / "samples.parquet")
    return d


# -------------------------------------------------------------------------------------------- successful runs

def test_default_pool_table_lists_every_policy():
    r = ok(replay("--seeds", 3, "--budgets", "2,4", "--wide"))  # the full grid: every configuration's row
    out = r.stdout
    assert "lastletters-gpt35-40" in out
    labels = table_policies(out)
    for name in EMBEDDED:
        assert re.search(rf"\s{re.escape(name)}[\s(]", out), f"{name} missing from the table"
    # every policy, plus the spec's "best of rho" row for two-stage (three rhos by default)
    assert {label.split("(")[0] for label in labels} == set(EMBEDDED) | {"two-stage best "}
    assert {"two-stage(rho=0.25)", "two-stage", "two-stage(rho=0.75)"} <= labels
    assert "Traceback" not in r.output


def test_out_parquet_one_row_per_config_budget_seed(tmp_path):
    out = tmp_path / "sub" / "runs.parquet"  # the parent is created
    ok(replay("--seeds", 3, "--budgets", "2,4", "--out", out))
    df = pl.read_parquet(out)
    missing = [c for c in RUN_COLUMNS + PARAMS if c not in df.columns]
    assert not missing, missing
    n_configs = df["config"].n_unique()
    # all 9 policies, two-stage once per default rho (0.25, 0.5, 0.75)
    assert n_configs == len(EMBEDDED) + 2
    assert df.height == n_configs * 2 * 3
    assert df.select("config", "budget", "seed").is_unique().all()
    assert set(df["policy"]) == set(EMBEDDED)
    assert sorted(set(df["budget"])) == [2.0, 4.0]
    assert sorted(set(df["seed"])) == [0, 1, 2]
    assert set(df["select"]) == {"bon"} and set(df["score"]) == {"gt"} and set(df["unit"]) == {"samples"}
    assert sorted(set(df.filter(pl.col("policy") == "two-stage")["rho"])) == [0.25, 0.5, 0.75]
    assert df["tokens_used"].null_count() == df.height  # the default pool has no token counts
    assert df["coverage"].is_between(0, 1).all() and df["accuracy"].is_between(0, 1).all()
    # a sample budget is never exceeded
    assert (df["samples_used"] <= (df["budget"] * N_DEFAULT).round()).all()


def test_seed_start(tmp_path):
    out = tmp_path / "runs.parquet"
    ok(replay("--policy", "uniform", "--seeds", 2, "--seed-start", 7, "--out", out))
    assert sorted(pl.read_parquet(out)["seed"]) == [7, 8]


def test_per_query_rows_sum_to_samples_used(tmp_path):
    out, pq = tmp_path / "runs.parquet", tmp_path / "per_query.parquet"
    ok(replay("--seeds", 2, "--budgets", "2,3", "--policy", "uniform,ucb,two-stage,oracle", "--out", out,
              "--per-query", pq))
    runs, per = pl.read_parquet(out), pl.read_parquet(pq)
    assert {"config", "budget", "seed", "query_id", "n_drawn"} <= set(per.columns)
    assert per.height == runs.height * N_DEFAULT
    counts = per.group_by("config", "budget", "seed").agg(pl.len().alias("n"), pl.col("query_id").n_unique()
                                                          .alias("q"), pl.col("n_drawn").sum().alias("drawn"))
    assert (counts["n"] == N_DEFAULT).all() and (counts["q"] == N_DEFAULT).all()
    joined = runs.join(counts, on=["config", "budget", "seed"], how="left")
    assert joined["drawn"].null_count() == 0
    assert (joined["drawn"] == joined["samples_used"]).all()


@pytest.mark.parametrize("policy_args", [["--policy", "ucb", "--policy", "gap"], ["--policy", "ucb,gap"],
                                         ["--policy", "gap, ucb"], ["--policy", "ucb,gap", "--policy", "ucb"]])
def test_policy_selection(tmp_path, policy_args):
    out = tmp_path / "runs.parquet"
    r = ok(replay(*policy_args, "--out", out, "--wide"))
    assert set(pl.read_parquet(out)["policy"]) == {"ucb", "gap"}
    assert pl.read_parquet(out)["config"].n_unique() == 2  # repeated names are not run twice
    assert table_policies(r.stdout) == {"ucb", "gap"}


def test_K_and_lambda_grid(tmp_path):
    out = tmp_path / "runs.parquet"
    ok(replay("--policy", "ucb", "--K", "1,2", "--lambda", "1,2", "--out", out))
    df = pl.read_parquet(out)
    assert df["config"].n_unique() == 4
    assert set(df.select("K", "lam").unique().iter_rows()) == {(1, 1.0), (1, 2.0), (2, 1.0), (2, 2.0)}
    assert df.height == 4 * 1 * 2


@pytest.mark.parametrize("args, col, value", [
    (["--select", "sc"], "select", "sc"),
    (["--select", "weighted"], "select", "weighted"),
    (["--eliminate", "sc-share"], "eliminate", "sc-share"),
    (["--eliminate", "sc-beta"], "eliminate", "sc-beta"),
    (["--eliminate", "none"], "eliminate", "none"),
])
def test_answer_based_options_on_default_pool(tmp_path, args, col, value):
    out = tmp_path / "runs.parquet"
    ok(replay(*args, "--out", out))
    df = pl.read_parquet(out)
    assert value in set(df[col])
    assert "entropy" in set(df["policy"])  # the default pool has answers: entropy runs


def test_sc_share_parameters(tmp_path):
    out = tmp_path / "runs.parquet"
    ok(replay("--policy", "elimination", "--eliminate", "sc-share", "--tau", "0.3,0.6", "--m-min", 2, "--out", out))
    df = pl.read_parquet(out)
    assert sorted(set(df["tau"])) == [0.3, 0.6] and set(df["m_min"]) == {2}


def test_math500_with_score_column(tmp_path):
    out = tmp_path / "runs.parquet"
    r = ok(replay(MATH, "--score", "conf", "--out", out))
    assert "math500-llama3.1-8b-48" in r.stdout
    df = pl.read_parquet(out)
    assert set(df["score"]) == {"score_conf"}
    # no answer column: entropy is left out of the default set; everything else runs (the pool has ground truth)
    assert set(df["policy"]) == set(EMBEDDED) - {"entropy"}


def test_math500_entropy_needs_answers():
    r = replay(MATH, "--score", "conf", "--policy", "entropy")
    assert_clean_error(r, r"entropy needs an 'answer' column")


@pytest.mark.parametrize("args, pattern", [
    (["--select", "sc"], r"--select sc needs an 'answer' column"),
    (["--select", "weighted"], r"--select weighted needs an 'answer' column"),
    (["--eliminate", "sc-beta", "--policy", "ucb"], r"ucb\(eliminate=sc-beta\) needs an 'answer' column"),
    (["--invalid-votes"], r"--invalid-votes .* no 'answer' column"),
])
def test_math500_answer_options_refused(args, pattern):
    assert_clean_error(replay(MATH, "--score", "conf", *args), pattern)


def test_invalid_votes_changes_the_stops_and_is_recorded(tmp_path):
    args = ["--policy", "elimination", "--eliminate", "ac-majority", "--max-samples", "40", "--budgets", "40",
            "--select", "sc", "--seeds", "3"]
    r = ok(replay(*args, "--invalid-votes", "--out", tmp_path / "v.parquet"))
    assert "invalid answers vote" in r.stdout
    ok(replay(*args, "--out", tmp_path / "d.parquet"))
    v, d = pl.read_parquet(tmp_path / "v.parquet"), pl.read_parquet(tmp_path / "d.parquet")
    assert v["invalid_votes"].to_list() == [True] * 3 and d["invalid_votes"].to_list() == [False] * 3
    assert v["samples_used"].to_list() != d["samples_used"].to_list()  # 73 invalid answers in the default pool


def test_help_lists_options():
    r = ok(runner.invoke(app, ["replay", "--help"]))
    assert "POOL" in r.stdout
    for opt in ("--policy", "--budgets", "--seeds", "--score", "--select", "--eliminate", "--unit",
                "--out", "--per-query", "--threads"):
        assert opt in r.stdout


# --------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, pattern", [
    (["--policy", "nope"], r"unknown policy 'nope'; choose from uniform, "),
    (["--policy", "ucb,nope"], r"unknown policy 'nope'"),
    (["--select", "best"], r"Invalid value for '--select'.*'best' is not one of 'bon', 'weighted', 'sc'"),
    (["--eliminate", "never"], r"Invalid value for '--eliminate'.*'never' is not one of 'threshold', "),
    (["--budgets", "4,x"], r"--budgets takes comma-separated numbers, got '4,x'"),
    (["--budgets", "0"], r"budgets must be finite and positive"),
    (["--budgets", "-1"], r"budgets must be finite and positive"),
    (["--budgets", "4,-1"], r"budgets must be finite and positive"),
    (["--budgets", "nan"], r"budgets must be finite and positive"),
    (["--budgets", ""], r"--budgets is empty"),
    (["--seeds", "0"], r"--seeds must be >= 1, got 0"),
    (["--seeds", "-3"], r"--seeds must be >= 1"),
    (["--score", "prm"], r"score column 'prm' does not exist; available: none and gt"),
    (["--unit", "tokens"], r"a token budget needs an 'n_tokens' column"),
    (["--unit", "token-matched"], r"a token budget needs an 'n_tokens' column"),
    (["--threads", "0"], r"--threads must be in 1\.\.\d+, got 0"),
    (["--threads", "100000"], r"--threads must be in 1\.\.\d+"),
    (["--rho", "1.5"], r"rho must be in \(0, 1\), got 1\.5"),
    (["--rho", "0"], r"rho must be in \(0, 1\)"),
    (["--K", "0"], r"--K must be an integer in 1\.\.2,147,483,648, got 0"),
    (["--K", str(2**40)], r"--K must be an integer in 1\.\.2,147,483,648, got 1099511627776"),
    (["--K", "1.5"], r"--K takes comma-separated integers, got '1\.5'"),
    (["--max-samples", "-1"], r"--max-samples must be an integer in 0\.\.2,147,483,648 \(0: no cap\), got -1"),
    (["--eps", "-1"], r"eps must be a finite number >= 0"),
    (["--eps", "nan", "--policy", "gap"], r"--eps must be a finite number >= 0, got nan"),  # ran silently before
    (["--eps", "inf", "--policy", "gap"], r"--eps must be a finite number >= 0, got inf"),
    (["--lambda", "nan", "--policy", "ucb"], r"--lambda must be a finite number >= 0, got nan"),
    (["--lambda", "1,inf", "--policy", "entropy"], r"--lambda must be a finite number >= 0, got inf"),
    (["--m-min", "0"], r"--m-min must be an integer in 1\.\."),
    (["--eliminate", "sc-share", "--tau", "1"], r"tau must be in \[0, 1\)"),
    (["--gamma", "a"], r"--gamma takes comma-separated numbers"),
])
def test_bad_input_default_pool(args, pattern):
    assert_clean_error(replay(*args), pattern)


def test_nonexistent_pool(tmp_path):
    assert_clean_error(replay(tmp_path / "nope"), r"pool directory .*nope does not exist")


def test_pool_with_score_out_of_range(tmp_path):
    d = small_pool(tmp_path, score_rm=[0.1, 0.2, 1.5, 0.3, 0.4, 0.5])
    assert_clean_error(replay(d, "--score", "rm"), r"column 'score_rm' has values outside \[0, 1\]")
    # every score column is validated on load (the pool contract), not only the one a run selects
    assert_clean_error(replay(d, "--score", "gt"), r"column 'score_rm' has values outside \[0, 1\]")


def test_pool_score_that_does_not_exist(tmp_path):
    d = small_pool(tmp_path, score_rm=[0.1] * 6)
    assert_clean_error(replay(d, "--score", "prm"), r"score column 'prm' does not exist; available: score_rm")


def test_score_gt_without_ground_truth(tmp_path):
    d = tmp_path / "nogt"
    d.mkdir()
    pl.DataFrame({"query_id": ["a", "a"], "sample_idx": [0, 1], "score_rm": [0.2, 0.9]}).write_parquet(
        d / "samples.parquet")
    assert_clean_error(replay(d), r"--score gt needs a 'correct' column")
    assert_clean_error(replay(d, "--score", "rm", "--policy", "oracle"), r"oracle needs ground truth")
    ok(replay(d, "--score", "rm"))


def test_token_pool_units(tmp_path):
    d = small_pool(tmp_path, n_tokens=[10, 20, 30, 40, 50, 60])
    out = tmp_path / "runs.parquet"
    ok(replay(d, "--unit", "tokens", "--budgets", "40", "--out", out))
    df = pl.read_parquet(out)
    assert set(df["unit"]) == {"tokens"} and df["tokens_used"].null_count() == 0
    assert (df["tokens_used"] <= 40 * 3).all()
    assert_clean_error(replay(d, "--unit", "foo"), r"'foo' is not one of 'samples', 'tokens', 'token-matched'")


def test_unknown_unit_on_pool_without_tokens():
    assert_clean_error(replay("--unit", "foo"), r"Invalid value for '--unit'")


@pytest.mark.parametrize("conf", ["1.5", "-0.1"])
def test_conf_out_of_range(conf):
    assert_clean_error(replay("--policy", "ucb", "--eliminate", "sc-beta", "--conf", conf), r"conf")


def test_out_is_a_directory(tmp_path):
    assert_clean_error(replay("--policy", "uniform", "--out", tmp_path), r"--out|directory")


def test_pool_json_not_an_object(tmp_path):
    d = small_pool(tmp_path)
    (d / "pool.json").write_text("[1, 2]")
    assert_clean_error(replay(d), r"pool\.json")


def test_invalid_pool_json(tmp_path):
    d = small_pool(tmp_path)
    (d / "pool.json").write_text("{oops")
    assert_clean_error(replay(d), r"pool\.json: not valid JSON")


# ------------------------------------------------------------------------------------- real subprocess runs

def ttc_cmd():
    exe = shutil.which("ttc")
    return [exe] if exe else [sys.executable, "-c", "from cli import app; app()"]


def run_ttc(*args, cwd):
    return subprocess.run(ttc_cmd() + ["replay", *[str(a) for a in args]], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_subprocess_success(tmp_path):
    out = tmp_path / "runs.parquet"
    p = run_ttc("--seeds", 2, "--budgets", 2, "--policy", "uniform,ucb", "--out", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert "ucb" in p.stdout and pl.read_parquet(out).height == 2 * 2


@pytest.mark.parametrize("args, pattern", [
    (["--policy", "nope"], r"unknown policy 'nope'"),
    (["--budgets", "4,x"], r"--budgets takes comma-separated numbers"),
    (["--seeds", "0"], r"--seeds must be >= 1"),
    (["--rho", "1.5"], r"rho must be in \(0, 1\)"),
    (["does-not-exist"], r"pool directory does-not-exist does not exist"),
])
def test_subprocess_bad_input(tmp_path, args, pattern):
    p = run_ttc("--seeds", 2, "--budgets", 2, *args, cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("error:"), p.stderr
    assert re.search(pattern, p.stderr), p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert p.stdout == ""


def test_subprocess_bad_score_pool(tmp_path):
    d = small_pool(tmp_path, score_rm=[0.1, 0.2, 0.3, -0.5, 0.4, 0.5])
    p = run_ttc("--seeds", 2, "--budgets", 2, d, "--score", "score_rm", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr, p.stderr
    assert "outside [0, 1]" in p.stderr


def test_subprocess_mismatched_sample_files(tmp_path):
    d = tmp_path / "pool"
    (d / "samples").mkdir(parents=True)
    pl.DataFrame({"query_id": ["a", "a"], "sample_idx": [0, 1], "correct": [True, False]}).write_parquet(
        d / "samples" / "0.parquet")
    pl.DataFrame({"query_id": ["b"], "sample_idx": pl.Series([0], dtype=pl.Int32), "correct": [True]}).write_parquet(
        d / "samples" / "1.parquet")
    p = run_ttc("--seeds", 2, "--budgets", 1, d, cwd=tmp_path)
    assert "Traceback" not in p.stderr
    assert p.returncode == 2 and p.stderr.startswith("error:"), p.stderr


# ------------------------------------------------------------------------- a bug is not bad input (issue 11)

def assert_bug_report(result, exc_name):
    """Exit code 1, the traceback on stderr naming the exception, then a hint to report it; never 'error: ...'."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert not result.stderr.startswith("error:"), result.stderr
    assert "Traceback (most recent call last)" in result.stderr, result.stderr
    assert exc_name in result.stderr
    tail = result.stderr.strip().splitlines()[-1]
    assert "bug in ttc" in tail and "ttc --version" in tail, tail


@pytest.mark.parametrize("exc", [ValueError("boom from inside"), KeyError("missing_key")])
def test_project_bug_in_replay_is_a_traceback_not_an_error_line(monkeypatch, exc):
    import ttc.replay.run as run_module

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(run_module, "summarize", broken)  # a bug after the pool loaded and the runs ran
    assert_bug_report(replay("--policy", "uniform"), type(exc).__name__)


def test_project_bug_in_info_is_a_traceback_not_an_error_line(monkeypatch):
    import ttc.replay.info as info_module

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(info_module, "coverage_at_k", broken)
    assert_bug_report(runner.invoke(app, ["info", str(MATH)]), "ValueError")


def test_every_named_error_is_a_user_error():
    """The errors the project raises for bad input all end as one 'error:' line: they derive from UserError."""
    from ttc.harvest.backends import BackendError
    from ttc.harvest.importers import SourceError
    from ttc.harvest.pipeline import HarvestError
    from ttc.replay.errors import InputError, UserError
    from ttc.replay.extras import MissingExtra
    from ttc.replay.pool import PoolError
    from ttc.replay.synth import SynthError

    for cls in (PoolError, SynthError, MissingExtra, SourceError, HarvestError, InputError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError) and cls.exit_code == 2, cls
    assert issubclass(BackendError, UserError) and BackendError.exit_code == 1  # the environment, not the input
    assert not issubclass(ValueError, UserError)


def test_run_config_value_error_is_bad_input_only_from_options():
    """RunConfig's ValueError is the user's mistake where options become configurations, a bug elsewhere."""
    from ttc.replay.errors import InputError
    from ttc.replay.policies import RunConfig
    from ttc.replay.run import config_from_options

    with pytest.raises(InputError, match="rho must be in"):
        config_from_options("two-stage", rho=2.0)
    with pytest.raises(ValueError) as e:
        RunConfig("two-stage", rho=2.0)
    assert not isinstance(e.value, InputError)


@pytest.mark.parametrize("args, pattern", [
    (["--seed-start", str(2**63 - 1)], r"--seed-start.*less than or equal to"),  # the parser's range (issue 27)
    (["--budgets", "1e17"], r"beyond the largest total budget"),
])
def test_out_of_range_numbers_are_bad_input_not_bugs(args, pattern):
    assert_clean_error(replay("--policy", "uniform", *args), pattern)


def test_version():
    r = ok(runner.invoke(app, ["--version"]))
    assert r.stdout.startswith("ttc ") and "python" in r.stdout and "numba" in r.stdout


# ------------------------------------------------------------------- one command-line convention (issue 11)

def test_pool_is_an_argument_and_defaults_to_the_embedded_pool(tmp_path):
    out = tmp_path / "runs.parquet"
    ok(replay(MATH, "--policy", "uniform", "--score", "conf", "--out", out))
    assert set(pl.read_parquet(out)["score"]) == {"score_conf"}
    r = ok(runner.invoke(app, ["info"]))  # info defaults to the embedded pool too
    assert "lastletters-gpt35-40" in r.stdout


def test_deprecated_pool_option_still_works_with_a_warning(tmp_path):
    out = tmp_path / "runs.parquet"
    r = ok(replay("--pool", MATH, "--policy", "uniform", "--score", "conf", "--out", out))
    assert "warning: --pool is deprecated" in r.stderr
    assert set(pl.read_parquet(out)["score"]) == {"score_conf"}
    assert "--pool" not in ok(runner.invoke(app, ["replay", "--help"])).stdout  # hidden
    assert_clean_error(replay(MATH, "--pool", MATH, "--policy", "uniform"), r"--pool is the old spelling")


@pytest.mark.parametrize("argv, flag", [
    (["replay", "--select", "best"], "--select"),
    (["replay", "--eliminate", "never"], "--eliminate"),
    (["replay", "--unit", "hours"], "--unit"),
    (["replay", "--policy", "ucb,nope"], "--policy"),
    (["report", "POOL", "--out", "OUT", "--select", "best"], "--select"),
    (["import", "nope", "SRC", "--out", "OUT"], "FORMAT"),
    (["harvest", "--dataset", "d", "--model", "m", "--responses", "2", "--max-tokens", "4", "--out", "o",
      "--backend", "tgi"], "--backend"),
    (["harvest", "--dataset", "d", "--model", "m", "--responses", "2", "--max-tokens", "4", "--out", "o",
      "--template", "nope"], "--template"),
    (["harvest", "--dataset", "d", "--model", "m", "--responses", "2", "--max-tokens", "4", "--out", "o",
      "--task", "poetry"], "--task"),
    (["harvest", "--dataset", "d", "--model", "m", "--responses", "2", "--max-tokens", "4", "--out", "o",
      "--oracle", "gt,bleu"], "--oracle"),
    (["score", "POOL", "--oracle", "bleu"], "--oracle"),
    (["score", "POOL", "--oracle", "judge", "--judge-backend", "tgi"], "--judge-backend"),
    (["score", "POOL", "--oracle", "prm", "--prm-step-mode", "sentence"], "--prm-step-mode"),
    (["theory", "--engine", "maybe"], "--engine"),
])
def test_enumerations_are_refused_by_the_parser(tmp_path, argv, flag):
    """A bad value of an enumeration never reaches the command (nothing is read or written): the parser refuses
    it with exit status 2 in the same one-line form as any bad input, naming the option."""
    argv = [str(tmp_path / a) if a in ("POOL", "OUT", "SRC") else a for a in argv]
    r = runner.invoke(app, argv)
    assert_clean_error(r, rf"Invalid value for '?{flag}")
    assert "--help" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command, flag, values", [
    ("replay", "--select", ["bon", "weighted", "sc"]),
    ("replay", "--eliminate", ["threshold", "sc-share", "sc-beta", "none"]),
    ("replay", "--unit", ["samples", "tokens", "token-matched"]),
    ("replay", "--policy", list(POLICIES)),
    ("report", "--select", ["bon", "weighted", "sc"]),
    ("harvest", "--backend", ["transformers", "vllm", "openai"]),
    ("score", "--oracle", ["gt", "exec", "prm", "judge"]),
    ("theory", "--engine", ["check", "bisect", "off"]),
])
def test_help_lists_the_choices(command, flag, values):
    text = ok(runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"})).stdout  # one line per option
    line = next(ln for ln in text.splitlines() if re.match(rf"\W*\s{re.escape(flag)}\s", ln))
    for v in values:
        assert re.search(rf"[\s<|,;]{re.escape(v)}[\s>|,.:]", line), (flag, v, line)


def test_the_cli_choices_are_the_registries():
    """cli.py reads its choices from the registries (replay/policies.py imports no numba) and lists none by hand."""
    from ttc import cli
    from ttc.replay.engine import SELECT
    from ttc.replay.policies import ELIMS, UNITS
    from ttc.replay.theory import ENGINE_MODES

    assert list(cli.POLICY_NAMES) == list(POLICIES)
    assert sorted(cli.ELIMINATION_RULES) == sorted(ELIMS)
    assert list(cli.SELECTIONS) == list(SELECT)
    assert set(cli.BUDGET_UNITS) == set(UNITS) | {"token-matched"}
    assert list(cli.THEORY_ENGINES) == list(ENGINE_MODES)


def test_the_command_line_starts_without_numba_or_polars():
    """`ttc --help` and building every command's options import the registries, never the engine."""
    code = ("import sys; from typer.main import get_command; from ttc.cli import app; get_command(app); "
            "print(sorted(m for m in ('numba', 'polars', 'torch', 'ttc.replay.kernel') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_harvest_and_score_share_one_declaration_of_the_scoring_options():
    import typer.main

    from ttc import cli

    group = typer.main.get_command(app)
    harvest, score = group.commands["harvest"], group.commands["score"]
    h = {p.name: p for p in harvest.params}
    s = {p.name: p for p in score.params}
    shared = list(cli._SCORING)
    assert {"workers", "timeout", "memory_mb", "prm_model", "prm_engine", "judge_model", "progress"} <= set(shared)
    shared += list(cli._ENGINE)  # --engine, --address, ...: where both run
    for name in shared:
        assert h[name].opts == s[name].opts and h[name].default == s[name].default and h[name].help == s[name].help
    assert set(s) - set(shared) == {"pool", "oracle"}


@pytest.mark.parametrize("argv, new", [
    (["import", "generic", "SRC", "--out", "OUT", "--per-query", "2"], "--responses"),
    (["theory", "--n", "4"], "--sizes"),
    (["theory", "--trials", "2"], "--seeds"),
    (["theory", "--seed", "1"], "--seed-start"),
    (["harvest", "--dataset", "SRC", "--model", "m", "--n", "2", "--max-tokens", "4", "--out", "OUT"], "--responses"),
])
def test_old_spellings_warn_and_are_hidden(tmp_path, argv, new):
    """Old option names still parse (hidden from --help) and warn; giving the old and the new name is refused."""
    old = next(a for a in argv if a in ("--per-query", "--n", "--trials", "--seed"))
    argv = [str(tmp_path / a) if a in ("SRC", "OUT") else a for a in argv]
    r = runner.invoke(app, argv)  # may fail later (no such source), but only after the warning
    assert f"warning: {old} is deprecated; use {new}" in r.stderr, r.output
    assert f" {old} " not in " ".join(ok(runner.invoke(app, [argv[0], "--help"])).stdout.split())
    both = argv + [new, argv[argv.index(old) + 1]]
    assert_clean_error(runner.invoke(app, both), rf"{old} is the old spelling of {new}")


def test_harvest_needs_responses(tmp_path):
    r = runner.invoke(app, ["harvest", "--dataset", "d", "--model", "m", "--max-tokens", "4", "--out", str(tmp_path)])
    assert_clean_error(r, r"missing option --responses")
