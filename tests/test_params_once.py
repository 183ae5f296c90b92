"""Each policy parameter is declared once: a RunConfig field made with param() (replay/policies.py), its help, flag,
default and whether a replay sweeps it. The command line's options of ttc replay, tune and run, ReplayRequest,
RunRequest and ttc.replay's keywords are derived from it; a layer that lists a parameter by hand fails below."""
import ast
import dataclasses
from pathlib import Path

import pytest
import typer.main

from ttc import cli
from ttc.harvest.run import RunRequest
from ttc.replay.policies import PARAMS, SWEPT, RunConfig, flag, param_type, readers
from ttc.replay.run import ReplayRequest

ROOT = Path(__file__).resolve().parent.parent
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
