"""Two phases, one direction: harvest/ produces pools and may import replay/; replay/ consumes pools and never
imports harvest/ (a laptop replaying pools needs none of the generation stack, and the pool format is the only thing
the two sides share). Checked twice: statically over every replay/*.py, and by importing every replay module in a
fresh interpreter."""
import ast
import json
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
