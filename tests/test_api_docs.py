"""docs/api.md is a walk-through a notebook would run: every ```python block runs, in order, in one namespace, in a
fresh interpreter (so that `import ttc` is what a user's first import does)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S)


def test_every_code_block_of_the_api_page_runs(tmp_path):
    code = blocks()
    assert len(code) >= 8, "docs/api.md lost its walk-through"
    script = "\n".join(f"# --- block {i}\n{c}" for i, c in enumerate(code))
    (tmp_path / "walk.py").write_text(script)
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {sys.path!r}; "
                        f"exec(compile(open({str(tmp_path / 'walk.py')!r}).read(), 'api.md', 'exec'))"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stderr == "", r.stderr[-3000:]  # no printing unless asked: nothing on stderr without progress=True


def test_the_readmes_python_block_runs(tmp_path):
    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert code, "README lost its Python example"
    r = subprocess.run([sys.executable, "-c", "\n".join(code)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
