"""Optional dependencies: the base install (what `ttc replay` needs) leaves out plotting and math grading, which come
with pyproject.toml's extras. A command that needs one and finds it missing says so in one line: MissingExtra is a
UserError (replay/errors.py), which the command line prints as `error: ...` with exit status 2."""
from __future__ import annotations

import importlib
import importlib.util
import sys

from .errors import InputError

# module -> (what pip installs, the extra that brings it)
EXTRAS = {
    "matplotlib": ("matplotlib", "plot"),
    "math_verify": ("math-verify", "grade"),
    "yaml": ("pyyaml", "grade"),
    "openai": ("openai", "openai"),
    "transformers": ("transformers", "harvest"),
    "torch": ("torch", "harvest"),
    "vllm": ("vllm", "gpu"),
}
# an extra of pyproject.toml -> the module whose absence says it is missing
EXTRA_MODULE = {"plot": "matplotlib", "grade": "math_verify", "openai": "openai", "harvest": "transformers",
                "gpu": "vllm"}


class MissingExtra(InputError):
    """An optional dependency a command needs is not installed; the message says which extra brings it."""


def _missing(module: str, what: str) -> MissingExtra:
    dist, extra = EXTRAS[module.split(".")[0]]
    return MissingExtra(f"{what} needs {dist}: pip install 'ttc[{extra}]'")


def check(module: str, what: str) -> None:
    """Raise MissingExtra (as `require`) if `module` is not installed, without importing it: a command's early check,
    before its long part, of a module it imports later or in other processes."""
    # None in sys.modules is the import system's "blocked" (importing it raises ModuleNotFoundError, find_spec a
    # ValueError): the same as not installed
    if module in sys.modules and sys.modules[module] is None:
        raise _missing(module, what)
    if module in _FOUND:  # (find_spec searches the file system: a grade per response checked once per process)
        return
    if importlib.util.find_spec(module) is None:
        raise _missing(module, what)
    _FOUND.add(module)


_FOUND: set[str] = set()


def require(module: str, what: str):
    """Import and return `module` (a key of EXTRAS), or raise MissingExtra: "`what` needs X: pip install 'ttc[extra]'".
    Only the module itself missing counts; an installed module that fails to import raises as it is."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != module.split(".")[0]:
            raise
        raise _missing(module, what) from None
