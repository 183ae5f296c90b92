"""numba's cache=True invalidates a compiled function only when its own module changes. A jitted function in
another module called by a kernel would keep serving stale machine code after an edit, so every jitted
function of the package must live in replay/kernel.py."""
import importlib
import pkgutil

from numba.core.registry import CPUDispatcher

import ttc.replay


def test_every_jitted_function_lives_in_the_kernel_module():
    found = []
    for info in pkgutil.iter_modules(ttc.replay.__path__):
        mod = importlib.import_module(f"ttc.replay.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher):
                found.append((info.name, name, obj.py_func.__module__))
    assert found, "no jitted function found: the check would be vacuous"
    misplaced = [f for f in found if f[2] != "ttc.replay.kernel"]
    assert not misplaced, misplaced


def test_the_kernel_constants_are_the_enums_codes():
    """The kernels branch on plain ints (numba's builtins reject IntEnum members): each is its enum member's code, and
    no two members of an enum share one."""
    from ttc.replay import kernel

    for enum, prefix in ((kernel.Policy, ""), (kernel.Unit, "UNIT_"), (kernel.Elim, "ELIM_")):
        for member in enum:
            value = getattr(kernel, prefix + member.name)
            assert type(value) is int and value == member, (prefix + member.name, value, member)
        assert len({int(m) for m in enum}) == len(enum)
