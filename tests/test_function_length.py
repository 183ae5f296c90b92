"""No function in the project's code is over 120 lines (issue 25's habit: a function one can read in one sitting),
except the few listed in ALLOWED, each with its reason written beside it: a measured compile or speed reason where
numba forbids a shorter shape, or that its split is under way.

A function's length is its `def` line through its last line (decorators excluded; docstring, comments and blank
lines included), measured by `ast`; a nested function counts on its own and inside its parent. The code is every
.py file outside tests/: the package (cli.py, replay/, harvest/, data/) and the scripts of docs/ and benchmarks/.
To list the long functions:

    python -c "import sys; sys.path.insert(0, 'tests'); import test_function_length as t; print(t.long_functions())"
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 120
SKIP = {"tests", "build", "dist", ".hypothesis", ".git", ".venv", "__pycache__"}

# The kernel's per-step operations are closures numba inlines with the pool's arrays captured once: as separate @njit
# functions taking the arrays they cost 3-10x more per call (measured; replay/kernel.py's module docstring), so the
# functions holding them stay long, each policy's part a marked block (run_one: `==== init / pick / fold`, `# -- name`).
CLOSURES = "its per-step closures, inlined by numba (3-10x slower as @njit functions: replay/kernel.py's docstring)"
# "file:function" -> why it may stay over LIMIT lines
ALLOWED = {
    "replay/kernel.py:run_one": CLOSURES,
    "replay/kernel.py:pull": CLOSURES,  # (run_one's closure that draws and folds a pull)
    "replay/kernel.py:deepconf_online": CLOSURES,
    "replay/kernel.py:parallel_probe": CLOSURES,
    "replay/kernel.py:cmc": CLOSURES,
}


def code_files(root: Path = ROOT) -> list[Path]:
    return sorted(f for f in root.rglob("*.py")
                  if not SKIP & set(f.relative_to(root).parts[:-1]) and not f.name.startswith("."))


def function_lengths(path: Path) -> dict[str, int]:
    """name -> lines of every function and method in one file (the longest, if a name repeats)."""
    lengths: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lengths[node.name] = max(lengths.get(node.name, 0), node.end_lineno - node.lineno + 1)
    return lengths


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> dict[str, int]:
    """"file:function" -> lines, for every function over limit lines."""
    return {f"{f.relative_to(root).as_posix()}:{name}": n for f in code_files(root)
            for name, n in function_lengths(f).items() if n > limit}


def test_no_function_is_over_120_lines_unless_allowed_with_a_reason():
    found = long_functions()
    assert not {k: n for k, n in found.items() if k not in ALLOWED}, (
        f"functions over {LIMIT} lines: split them by meaning, or add them to ALLOWED with the measured reason")
    # an entry whose function is now short (or gone) is dropped, so the list stays the list of exceptions
    assert not set(ALLOWED) - set(found), f"under {LIMIT} lines now, remove from ALLOWED: {set(ALLOWED) - set(found)}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_measure_counts_def_to_last_line_and_finds_nested_functions(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(119))
    (tmp_path / "pkg").mkdir()
    # short: its def line and 119 more (the decorator and the blank line after it do not count)
    (tmp_path / "pkg" / "m.py").write_text(f"@decorator\ndef short():\n{body}\n"
                                           f"def long():\n    def inner():\n{body.replace('    ', '        ')}"
                                           f"        return 1\n    return inner\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(f"def test_long():\n{body}{body}")
    assert function_lengths(tmp_path / "pkg" / "m.py") == {"short": 120, "long": 123, "inner": 121}
    assert long_functions(tmp_path) == {"pkg/m.py:long": 123, "pkg/m.py:inner": 121}  # tests/ is not scanned
