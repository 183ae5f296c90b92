"""Two phases, one direction: harvest/ produces pools and may import replay/; replay/ consumes pools and never
imports harvest/ (a laptop replaying pools needs none of the generation stack, and the pool format is the only thing
the two sides share). Checked twice: statically over every replay/*.py, and by importing every replay module in a
fresh interpreter.

The tests have one direction too: a test module imports the shared helpers from tests/support (and fixtures come
from tests/conftest.py), never from a sibling test module, which would run that module's import-time setup, tie
the two files' names together, and collect nothing the reader can see."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "replay"


def _names_harvest(module: str | None) -> bool:
    return module is not None and (module in ("harvest", "ttc.harvest")
                                   or module.startswith(("harvest.", "ttc.harvest.")))


def harvest_imports(path: Path) -> list[str]:
    """'line N: statement' for every import of harvest (absolute, or relative from above replay/) in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _names_harvest(a.name)]
        elif isinstance(node, ast.ImportFrom):
            # `from harvest import x`, `from harvest.oracles import y`; from inside replay/, `from .. import harvest`
            # and `from ..harvest import x` reach it too
            if (node.level == 0 and _names_harvest(node.module)) or (
                    node.level >= 2 and (_names_harvest(node.module)
                                         or (node.module is None and any(a.name == "harvest" for a in node.names)))):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import "
                             + ", ".join(a.name for a in node.names))
    return found


def test_static_replay_never_imports_harvest():
    files = sorted(REPLAY.rglob("*.py"))
    assert files, f"no Python files under {REPLAY}"
    bad = {str(f.relative_to(ROOT)): hits for f in files if (hits := harvest_imports(f))}
    assert not bad, f"replay/ must not import harvest/ (harvest produces pools, replay consumes them): {bad}"


def test_static_check_catches_harvest_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nimport harvest.oracles\nfrom harvest import pipeline\nfrom ..harvest.x import y\n"
                 "from .. import harvest\nfrom .harvesting import z\ndef f():\n    from harvest.importers import g\n")
    assert [h.split(":")[0] for h in harvest_imports(f)] == ["line 2", "line 3", "line 4", "line 5", "line 8"]


CHILD = """
import importlib, json, pkgutil, sys
import ttc.replay
names = sorted(m.name for m in pkgutil.walk_packages(ttc.replay.__path__, "ttc.replay."))
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names,
                  "harvest": sorted(m for m in sys.modules if m == "ttc.harvest" or m.startswith("ttc.harvest."))}))
"""


def test_importing_every_replay_module_loads_no_harvest_module():
    r = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "ttc.replay.pool" in out["modules"] and "ttc.replay.run" in out["modules"]  # the walk found the package
    assert out["harvest"] == [], f"importing replay's modules loaded {out['harvest']}"


# --- tests import helpers from tests/support, never from a sibling test module ----------------------------------

TESTS = ROOT / "tests"
# an import statement at the start of a line of a string: the code a test runs in a subprocess
_CODE_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


def sibling_imports(path: Path, test_modules: set[str]) -> list[str]:
    """'line N: module' for every import of one of test_modules in one file: import statements anywhere (a function's
    own included), and import lines inside string constants (code a test hands to a subprocess)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [m.group(1) or m.group(2) for m in _CODE_IMPORT.finditer(node.value)]
        found += [f"line {node.lineno}: {n}" for n in names if n.split(".")[0] in test_modules]
    return found


def _test_modules(folder: Path) -> set[str]:
    return {f.stem for f in folder.glob("*.py") if f.stem.startswith("test_") or f.stem == "conftest"}


def test_no_test_imports_a_sibling_test_module():
    modules = _test_modules(TESTS)
    assert "test_layering" in modules and (TESTS / "support" / "__init__.py").exists()
    files = sorted(TESTS.glob("*.py")) + sorted((TESTS / "support").rglob("*.py"))
    bad = {str(f.relative_to(ROOT)): hits for f in files if (hits := sibling_imports(f, modules))}
    assert not bad, f"import shared test helpers from tests/support (fixtures: tests/conftest.py): {bad}"


def test_sibling_import_check_catches_each_form(tmp_path):
    (tmp_path / "test_a.py").write_text("")
    f = tmp_path / "test_b.py"
    f.write_text("import os\nimport test_a\nfrom test_a import x\nfrom support.pools import y\nimport test_a.sub\n"
                 "def f():\n    from test_a import z\n"
                 "CHILD = \"\"\"\nimport sys\nfrom test_a import w\n\"\"\"\nTEXT = 'from tests import test_a'\n")
    hits = sibling_imports(f, _test_modules(tmp_path))
    assert [h.split(":")[0] for h in hits] == ["line 2", "line 3", "line 5", "line 7", "line 8"]


# --- the reference twins are the test oracle, not production code --------------------------------------------------

# The one module besides the tests that may run a twin: `ttc bench` times the engine against its twins (that is what
# it measures), as it times run_one against replay/reference.py.
ORACLE_READERS = {"replay/bench.py"}


def oracle_imports(path: Path) -> list[str]:
    """'line N: statement' for every import of replay/reference_depth.py in one file (absolute or relative)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[-1] == "reference_depth"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[-1] == "reference_depth" or any(a.name == "reference_depth" for a in node.names):
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import "
                             + ", ".join(a.name for a in node.names))
    return found


def test_no_production_module_runs_the_depth_twins():
    """replay/reference_depth.py is the depth kernels' test oracle (issue 30): the live depth run (replay/live.py,
    harvest/run/depth.py) runs the kernels, and nothing the tool runs in production imports the twins."""
    files = [f for f in sorted(ROOT.rglob("*.py")) if f.relative_to(ROOT).parts[0] not in ("tests", "benchmarks")
             and not any(part.startswith(".") for part in f.relative_to(ROOT).parts)]
    assert ROOT / "replay" / "live.py" in files and ROOT / "harvest" / "run" / "depth.py" in files
    bad = {rel: hits for f in files if (rel := str(f.relative_to(ROOT))) not in ORACLE_READERS
           and (hits := oracle_imports(f))}
    assert not bad, f"the reference twins are the test oracle; production code runs the kernels: {bad}"


def test_oracle_import_check_catches_each_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom .reference_depth import cmc_events\nfrom . import reference_depth as ref\n"
                 "import ttc.replay.reference_depth\nfrom ttc.replay.reference import run_reference\n"
                 "def f():\n    from ttc.replay.reference_depth import trace_events\n")
    assert [h.split(":")[0] for h in oracle_imports(f)] == ["line 2", "line 3", "line 4", "line 7"]
