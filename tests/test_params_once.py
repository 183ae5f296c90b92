"""Each policy parameter is declared once: a RunConfig field made with param() (replay/policies.py), its help, flag,
default and whether a replay sweeps it. The command line's options of ttc replay, tune and run, ReplayRequest,
RunRequest and ttc.replay's keywords are derived from it; a layer that lists a parameter by hand fails below."""
import ast
import dataclasses
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from ttc import cli
from ttc.harvest.run import RunRequest
from ttc.replay.policies import (
    PARAMS,
    PARAMS_BY_NAME,
    SWEPT,
    Range,
    RunConfig,
    _fast_checks,
    allowed,
    flag,
    param_problem,
    param_type,
    readers,
)
from ttc.replay.run import ReplayRequest

from support.params import inside, outside

ROOT = Path(__file__).resolve().parent.parent
MATH = ROOT / "tests" / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
NAMES = {f.name for f in PARAMS}
COMMANDS = {c: {p.name: p for p in typer.main.get_command(cli.app).commands[c].params}
            for c in ("replay", "tune", "run")}


def test_every_parameter_is_a_documented_field_read_by_some_policy_or_rule():
    assert {f.name for f in dataclasses.fields(RunConfig)} == {"policy", "unit", "eliminate"} | NAMES
    for f in PARAMS:
        assert f.metadata["doc"].endswith(".") and readers(f.name), f.name
        assert param_type(f.name) in (int, float) or (param_type(f.name) is str and f.metadata["choices"])


@pytest.mark.parametrize("command", ["replay", "tune", "run"])
def test_each_command_has_every_parameter_with_its_declared_flag_help_and_default(command):
    opts = COMMANDS[command]
    for f in PARAMS:
        if command == "run" and not f.metadata["live"]:
            assert f.name not in opts, f.name  # replay only (depth): ttc run leaves it at its default
            continue
        o = opts[f.name]
        assert flag(f.name) in o.opts, (command, f.name, o.opts)
        assert o.help.startswith(f.metadata["doc"]), (command, f.name)
        if command == "run" or (command == "replay" and f.name not in SWEPT):
            assert o.default == f.default, (command, f.name)
        elif command == "tune":
            assert o.default is None  # a grid only when given


def test_the_requests_take_their_parameter_fields_from_runconfig():
    replay = {f.name: f for f in dataclasses.fields(ReplayRequest)}
    run = {f.name: f for f in dataclasses.fields(RunRequest)}  # RunRequest holds a RunConfig, re-listing none
    assert "config" in run and not set(run) & {f.name for f in PARAMS}
    r = ReplayRequest()
    for f in PARAMS:
        if f.name in SWEPT:
            text = f.metadata["replay_default"]
            assert getattr(r, f.name) == ([param_type(f.name)(v) for v in text.split(",")] if text else [f.default])
        else:
            assert replay[f.name].default == f.default, f.name


def _listed(tree: ast.AST) -> list[str]:
    """Where a module names a parameter by hand: a function parameter, a keyword argument, an annotated field."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in NAMES:
            found.append(f"line {node.lineno}: parameter {node.arg}")
        elif isinstance(node, ast.keyword) and node.arg in NAMES:
            found.append(f"line {node.value.lineno}: keyword {node.arg}=")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in NAMES:
            found.append(f"line {node.lineno}: field {node.target.id}")
    return found


@pytest.mark.parametrize("path, scope", [
    ("cli.py", ("replay_cmd", "tune_cmd", "run_cmd")),
    ("replay/run.py", None), ("harvest/run", None), ("replay/api.py", None), ("replay/live.py", None),
])
def test_no_layer_lists_the_parameters_by_hand(path, scope):
    files = sorted((ROOT / path).glob("*.py")) if (ROOT / path).is_dir() else [ROOT / path]  # a package: each module
    trees = [ast.parse(f.read_text()) for f in files]
    if scope:
        parts = [n for tree in trees for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in scope]
        assert len(parts) == len(scope)
    else:
        parts = trees
    found = [hit for part in parts for hit in _listed(part)]
    assert found == [], f"{path} lists parameters by hand (declare them once, with param() in RunConfig): {found}"


def test_the_scan_catches_a_hand_listed_parameter():
    tree = ast.parse("def f(warmup: int = 3):\n    g(K=1)\nclass R:\n    tau: float = 0.5\n")
    assert sorted(h.split(":")[1].strip() for h in _listed(tree)) == ["field tau", "keyword K=", "parameter warmup"]


def test_a_parameter_reaches_the_kernel_record_by_name():
    cfg = RunConfig("side-eb", bins=5, refresh=3, horizon=1, prior_strength=4.0)
    rec = cfg.record()[0]
    for name in ("bins", "refresh", "horizon", "prior_strength"):
        assert rec[name] == getattr(cfg, name), name


def test_the_readme_holds_the_parameter_table():
    from ttc.replay.policies import markdown_params

    assert markdown_params() in (ROOT / "README.md").read_text(), \
        "README's parameter table: paste ttc.replay.policies.markdown_params()"


# ------------------------------------------------------------------------ each parameter's allowed values, once
# A parameter's range is part of its declaration (param(within=...) or choices=...): RunConfig checks it
# (policies.param_problem), --help and the README show it, and the values below are generated from it.

BAD = [(f.name, v) for f in PARAMS for v in outside(f.name)]
BAD_CLI = [(f.name, v) for f in PARAMS for v in outside(f.name, integral_only=True)]


def _id(case) -> str:
    return f"{case[0]}={case[1]!r}"


def test_every_parameter_declares_its_allowed_values():
    for f in PARAMS:
        m, kind = f.metadata, param_type(f.name)
        if kind is str or m["choices"]:
            assert m["choices"] and m["range"] is None and all(type(c) is kind for c in m["choices"]), f.name
            assert f.default in m["choices"], f.name
        else:  # a number: its range, with an int's ends ints (closed) and the default inside
            r = m["range"]
            assert isinstance(r, Range), f"{f.name}: declare its range, param(within=...)"
            if kind is int:
                assert type(r.lo) is int and type(r.hi) is int and not (r.lo_open or r.hi_open), f.name
            assert f.default is None or r.holds(f.default), f.name


def test_range_text_is_parsed_and_shown_as_written():
    assert Range.parse("(0, 1]") == Range(0, 1, lo_open=True) and Range.parse("[0, inf)").text() == "[0, inf)"
    assert Range.parse("[1, 1024]").text(int) == "1..1,024" and Range.parse("(0.5, 1)").text() == "(0.5, 1)"
    assert Range.parse("(0, inf)").phrase() == "a finite number > 0"
    for bad in ("0, 1", "[1, 0]", "(0 1)", "[a, 1]"):
        with pytest.raises(ValueError):
            Range.parse(bad)


@pytest.mark.parametrize("case", [(f.name, v) for f in PARAMS for v in inside(f.name)], ids=_id)
def test_each_end_of_each_range_is_taken(case):
    name, value = case
    assert getattr(RunConfig("elimination", **{name: value}), name) == value and param_problem(name, value) is None
    assert dict(_fast_checks())[name](value)  # the quick test RunConfig runs first vouches for a plain value inside


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_runconfig_refuses_each_value_outside_its_declared_range(case):
    name, value = case
    with pytest.raises(ValueError) as e:
        RunConfig("elimination", **{name: value})
    assert str(e.value) == param_problem(name, value) and not dict(_fast_checks())[name](value)
    assert str(e.value).startswith(f"{flag(name)} must be ") and allowed_words(name) in str(e.value)


def allowed_words(name: str) -> str:
    """How an error message states `name`'s allowed values."""
    m = next(f for f in PARAMS if f.name == name).metadata
    return allowed(name) if m["choices"] else m["range"].phrase(param_type(name))


def _cli_error(r, name: str):
    assert r.exit_code == 2, (name, r.exit_code, r.output)
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    if param_type(name) is str and not next(f for f in PARAMS if f.name == name).metadata["sweep"]:
        assert "Invalid value for" in r.output and flag(name) in r.output, r.output  # typer's choice: the same list
    else:
        assert len(errors) == 1 and f"{flag(name)} must be {allowed_words(name)}" in errors[0], r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("case", BAD_CLI, ids=_id)
def test_ttc_replay_refuses_each_value_outside_its_declared_range(case, tmp_path):
    name, value = case
    r = CliRunner().invoke(cli.app, ["replay", f"{flag(name)}={value}", "--seeds", "1", "--budgets", "2",
                                     "--out", str(tmp_path / "r.parquet")])
    _cli_error(r, name)
    assert not (tmp_path / "r.parquet").exists()


@pytest.mark.parametrize("case", [c for c in BAD_CLI if PARAMS_BY_NAME[c[0]].metadata["live"]], ids=_id)
def test_ttc_run_refuses_each_value_outside_its_declared_range(case, tmp_path):
    name, value = case
    r = CliRunner().invoke(cli.app, ["run", "--dataset", str(MATH), "--model", "m", "--backend", "transformers",
                                     "--max-tokens", "8", "--budget", "2", "--out", str(tmp_path / "out"),
                                     f"{flag(name)}={value}"])
    _cli_error(r, name)
    assert not (tmp_path / "out").exists()


def _tuned_by(name: str) -> list[str]:
    """Options under which `ttc tune` tunes `name`: a policy that reads it, or elimination under a rule that does
    (tune refuses a grid its policy ignores before it reads a range)."""
    from ttc.replay.policies import ELIMINATION_RULES, REGISTRY

    policies = [p for p in readers(name) if p in REGISTRY]
    if policies:
        return ["--policy", policies[0]]
    rules = [r for r in readers(name) if r in ELIMINATION_RULES]
    if rules:
        return ["--policy", "elimination", "--eliminate", rules[0]]
    # a depth field, read by every policy through the depth view (the stability rule's own under that rule)
    return ["--policy", "uniform"] + (["--depth-rule", "stability"] if name != "depth_rule" else [])


@pytest.mark.parametrize("case", BAD_CLI, ids=_id)
def test_ttc_tune_refuses_each_value_outside_its_declared_range(case, tmp_path):
    name, value = case
    r = CliRunner().invoke(cli.app, ["tune", *_tuned_by(name), f"{flag(name)}={value}", "--seeds", "1",
                                     "--budgets", "2", "--out", str(tmp_path / "t.parquet")])
    assert r.exit_code == 2, (name, r.output)
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"{flag(name)} " in errors[0], r.output
    if param_type(name) is not str:
        assert f"{flag(name)} must be {allowed_words(name)}" in errors[0], r.output
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.parametrize("command", sorted(set(typer.main.get_command(cli.app).commands) - {"synth"}))
def test_each_numeric_option_shows_its_declared_range_in_its_help(command):
    """Every command's option named as a parameter (replay's, tune's, run's from _config_group; report's gamma and
    max_samples, its one value for every table) shows the range RunConfig checks. synth's --gamma is another
    quantity (the threshold its synthetic scores are drawn around), with its own range."""
    opts = {p.name: p for p in typer.main.get_command(cli.app).commands[command].params}
    for f in PARAMS:
        if f.name in opts and param_type(f.name) is not str:
            assert f"Allowed: {allowed(f.name)}" in opts[f.name].help, (command, f.name)


def _range_checks(tree: ast.AST) -> list[str]:
    """Where code compares a parameter (an attribute or a name spelled as one: self.rho, req.gamma, lam) with a
    number: a range checked by hand beside its declaration."""
    def number(n):
        if isinstance(n, ast.UnaryOp):
            n = n.operand
        return (isinstance(n, ast.Constant) and type(n.value) in (int, float)) or (
            isinstance(n, ast.Attribute) and n.attr in ("inf", "MAX_COUNT")) or (
            isinstance(n, ast.Name) and n.id == "MAX_COUNT")

    def named(n):
        return (isinstance(n, ast.Attribute) and n.attr in NAMES) or (isinstance(n, ast.Name) and n.id in NAMES)

    def bounds(n):  # a number, or a set of numbers that `in` tests against
        return number(n) or (isinstance(n, (ast.Tuple, ast.List, ast.Set)) and n.elts and all(map(number, n.elts)))

    order = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)  # (== 0 reads a special value; it checks nothing)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, order) for op in node.ops):
            sides = [node.left, *node.comparators]
            if any(named(s) for s in sides) and any(bounds(s) for s in sides):
                found.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [hit for _, hit in sorted(found)]


@pytest.mark.parametrize("path", ["cli.py", "replay/policies.py", "replay/run.py", "replay/report.py",
                                  "replay/tune.py", "replay/api.py", "replay/live.py", "harvest/run"])
def test_no_layer_checks_a_parameter_range_by_hand(path):
    """RunConfig.__post_init__ and the layers above it check no parameter's range themselves: param_problem does,
    from the declaration. (The checks of one value against another compare two values, not a value and a number:
    README, below the parameter table.) The engine and the reference, which read the values, are not scanned."""
    files = sorted((ROOT / path).glob("*.py")) if (ROOT / path).is_dir() else [ROOT / path]
    found = []
    for file in files:
        tree = ast.parse(file.read_text())
        if path == "replay/policies.py":  # the registry: RunConfig's checks (its other code reads no range)
            tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "RunConfig")
        found += [f"{file.relative_to(ROOT)} {hit}" for hit in _range_checks(tree)]
    assert found == [], f"ranges checked by hand (declare them in param(within=...)): {found}"


def test_the_range_scan_catches_a_hand_written_check():
    tree = ast.parse("\n".join(["def __post_init__(self):", "    if not 0.0 < self.rho < 1.0: pass",
                                 "    if req.K > MAX_COUNT: pass", "    if any(lam < -1 for lam in x): pass",
                                 "    if self.depth_rule != 'whole': pass", "    if self.lb_l not in (2, 3): pass",
                                 "    if cfg.max_samples == 0: pass"]))
    assert [h.split(":")[0] for h in _range_checks(tree)] == ["line 2", "line 3", "line 4", "line 6"]


def test_the_search_grids_hold_only_allowed_values():
    """The tuning grids (tune's DEFAULT_GRID and POLICY_GRID, the leaderboard's narrower ones) are search spaces
    written beside the code that tunes, not declarations: each of their values must be one RunConfig takes, so a
    narrowed range cannot leave a grid that fails (or, worse, one that a layer had let through) at run time."""
    from ttc.replay import leaderboard, tune

    grids = [tune.DEFAULT_GRID, leaderboard.LEADERBOARD_GRID, *tune.POLICY_GRID.values(),
             *leaderboard.RULE_GRID.values(), *leaderboard.DEPTH_GRID.values(), {"depth_m": leaderboard.DEPTH_M}]
    for grid in grids:
        for name, values in grid.items():
            assert name in NAMES, name
            for v in values:
                assert param_problem(name, v) is None, (name, v, param_problem(name, v))


def test_numpy_numbers_are_checked_as_numbers():
    """A grid read from an array holds numpy scalars: the quick test does not vouch for them, the full one takes
    them inside the range and refuses them outside."""
    import numpy as np

    c = RunConfig("elimination", K=np.int64(4), rho=np.float64(0.25), lb_l=np.int64(3))
    assert (c.K, c.rho, c.lb_l) == (4, 0.25, 3)
    for name, value in (("rho", np.float64("nan")), ("K", np.int64(0)), ("gamma", np.float32(1.5)), ("K", True)):
        with pytest.raises(ValueError, match=f"^{flag(name)} must be "):
            RunConfig("elimination", **{name: value})
