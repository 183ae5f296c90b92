"""Phase two, anywhere: replay allocation policies over cached pools (the numba engine, its plain-Python reference,
the commands' implementations). It never imports ttc.harvest (tests/test_layering.py).

The package is also the function `ttc.replay(pool, policies=..., budgets=..., seeds=..., **params)` (replay/api.py):
`ttc.replay` must name this subpackage (`import ttc.replay.pool` sets it), and the public API's verb is the same
word, so the module object is made callable rather than one of the two being renamed."""
import sys
import types


class _Callable(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from .api import replay

        return replay(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
