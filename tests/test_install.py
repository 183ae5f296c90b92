"""What a non-editable install gets: build the wheel from a clean copy of the sources (no stale build/, nothing
written into the checkout), read its file list, and import the installed copy from outside the checkout.

The wheel is built offline (--no-build-isolation: the test extra brings setuptools>=77, the build-system's
requirement). .ci/run goes further: it installs the wheel into a fresh venv with the base dependencies only and runs
`ttc replay` and `ttc info` there."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
POOLS = ("lastletters-gpt35-40", "math500-llama3.1-8b-48", "humaneval-codegen16b-100")
POOL_FILES = ("samples.parquet", "queries.parquet", "pool.json")
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "__init__.py", "cli.py", "replay", "harvest", "data")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"building the wheel failed (the test extra brings setuptools>=77):\n"
                               f"{r.stdout}\n{r.stderr}")
    (whl,) = (tmp / "dist").glob("ttc-*.whl")
    return whl


def _names(whl: Path) -> set[str]:
    with zipfile.ZipFile(whl) as z:
        return set(z.namelist())


def test_wheel_has_every_module(wheel):
    names = _names(wheel)
    assert {"ttc/__init__.py", "ttc/cli.py"} <= names
    for pkg in ("replay", "harvest"):
        tracked = {"ttc/" + p.relative_to(ROOT).as_posix() for p in (ROOT / pkg).rglob("*.py")
                   if "__pycache__" not in p.parts}
        assert tracked, pkg
        # a package directory (with an __init__.py) that pyproject.toml does not list would be missing here
        assert not tracked - names, (f"the wheel leaves out {sorted(tracked - names)}; "
                                     "list the package in pyproject.toml")
    oracles = {n for n in names if n.startswith("ttc/harvest/oracles/") and n.endswith(".py")}
    assert {"ttc/harvest/oracles/__init__.py", "ttc/harvest/oracles/math_answer.py", "ttc/harvest/oracles/code_exec.py",
            "ttc/harvest/oracles/sandbox.py"} <= oracles


def test_wheel_installs_only_the_ttc_package(wheel):
    """Nothing but `ttc` and its dist-info at the top of site-packages: no `cli`, `replay`, `harvest` of its own
    (generic names, and the last two are other distributions on PyPI), and none of the checkout's other files."""
    top = {n.split("/")[0] for n in _names(wheel)}
    dist = {t for t in top if t.endswith(".dist-info")}
    assert len(dist) == 1 and top - dist == {"ttc"}, sorted(top)
    stray = sorted(n for n in _names(wheel) if n.startswith("ttc/") and n.count("/") == 1
                   and not n.endswith(".py"))
    assert stray == [], stray  # the root's README.md, LICENSE, pyproject.toml are not files of the package


def test_wheel_has_the_embedded_pools(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        expected = [f"ttc/data/{p}/{f}" for p in POOLS for f in POOL_FILES] + ["ttc/data/README.md"]
        missing = [n for n in expected if n not in names]
        assert not missing, f"the wheel leaves out {missing}"
        for n in expected:  # byte for byte what data/ holds
            assert z.read(n) == (ROOT / "data" / n.removeprefix("ttc/data/")).read_bytes(), n
        lic = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(lic) == 1 and b"MIT License" in z.read(lic[0])


def test_wheel_metadata_keeps_plots_and_grading_optional(wheel):
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        msg = Parser().parsestr(z.read(meta).decode())
    requires = msg.get_all("Requires-Dist") or []
    base = {r.split(";")[0].split(">")[0].split("[")[0].strip().lower() for r in requires if "extra ==" not in r}
    assert base == {"numpy", "numba", "polars", "typer", "rich"}, requires
    extras = set(msg.get_all("Provides-Extra") or [])
    assert {"plot", "grade", "test", "harvest", "gpu"} <= extras
    assert msg["License-Expression"] == "MIT"


def test_installed_wheel_finds_its_pools_outside_the_checkout(wheel, tmp_path):
    """Unpacked into a bare directory (pip --target, no dependencies: the test environment has them) and imported
    from elsewhere: the default pool is the installed copy, not the checkout's data/."""
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                        str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import json, ttc, ttc.replay.data\n"
            "from ttc.replay.pool import DEFAULT_POOL, load_pool\n"
            "p = load_pool(DEFAULT_POOL)\n"
            "others = [load_pool(ttc.replay.data.embedded_pool(n)).n_queries for n in %r]\n"
            "print(json.dumps({'replay': ttc.__file__, 'pool': str(DEFAULT_POOL), 'queries': p.n_queries,"
            " 'others': others}))" % (POOLS[1:],))
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["replay"]).resolve().is_relative_to(target.resolve())
    assert Path(out["pool"]).resolve() == (target / "ttc" / "data" / "lastletters-gpt35-40").resolve()
    assert out["queries"] == 500 and all(n > 0 for n in out["others"])


# --- the base install: a command whose extra is missing says so in one line -----------------------------------------

FIX = ROOT / "tests" / "fixtures" / "import"


def _without(monkeypatch, *modules):
    """As if not installed: None in sys.modules makes importing them raise ModuleNotFoundError."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def _invoke(*args):
    from typer.testing import CliRunner

    from ttc.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line_error(r, expected):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.output.strip().splitlines()[-1] == expected, r.output


@pytest.mark.parametrize("args, command", [
    (lambda tmp: ["report", "DEFAULT", "--out", tmp / "out"], "ttc report"),
    (lambda tmp: ["theory", "--sizes", "10,20", "--seeds", "5", "--out", tmp / "out"], "ttc theory --out"),
    (lambda tmp: ["info", "DEFAULT", "--plot", tmp / "out" / "c.png"], "ttc info --plot"),
])
def test_plot_commands_without_matplotlib(monkeypatch, tmp_path, args, command):
    from ttc.replay.pool import DEFAULT_POOL

    _without(monkeypatch, "matplotlib", "matplotlib.pyplot", "matplotlib.ticker")
    argv = [DEFAULT_POOL if a == "DEFAULT" else a for a in args(tmp_path)]
    r = _invoke(*argv)
    _one_line_error(r, f"error: {command} needs matplotlib: pip install 'ttc[plot]'")
    if command != "ttc info --plot":  # checked before the long part: nothing written
        assert not (tmp_path / "out").exists()


def test_import_llmonkeys_without_pyyaml(monkeypatch, tmp_path):
    _without(monkeypatch, "yaml")
    r = _invoke("import", "llmonkeys", FIX / "llmonkeys", "--out", tmp_path / "p")
    _one_line_error(r, "error: ttc import llmonkeys needs pyyaml: pip install 'ttc[grade]'")
    assert not (tmp_path / "p").exists()


def test_math_grading_without_math_verify(monkeypatch, tmp_path):
    _without(monkeypatch, "math_verify")
    r = _invoke("import", "search-and-learn", FIX / "search_and_learn_bon.jsonl", "--out", tmp_path / "p")
    _one_line_error(r, "error: grading math answers needs math-verify: pip install 'ttc[grade]'")
    assert not (tmp_path / "p").exists()
