"""Make ``import vllm...`` resolve to this package, for the duration of a block.

The bundled backend imports and runs a port inside :func:`vllm_aliased`.
On entry every ``vllm`` / ``vllm.*`` entry of ``sys.modules`` (a real vLLM
may already be imported) is set aside and replaced by this package's modules
under their vLLM names; on exit the aliases go and the set-aside entries come
back, so a real vLLM in the same process is never shadowed outside the block.
A port keeps the module objects it bound at import time, so it goes on
working after the block ends; only a *new* ``import vllm`` needs the block.

Both blocks hold one process-wide re-entrant lock, so that a port running on
the bundled runtime in one thread never makes another thread's ``import vllm``
(meant for the real vLLM, inside :func:`vllm_unaliased`) find the aliases.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from types import ModuleType

__all__ = ["compat_modules", "vllm_aliased", "vllm_unaliased"]

_PACKAGE = __name__.rsplit(".", 1)[0]
_ALIAS_ROOT = "vllm"
_lock = threading.RLock()
_depth = 0
_set_aside: dict[str, ModuleType] = {}


@cache
def compat_modules() -> dict[str, ModuleType]:
    """Every module of this package, keyed by the vLLM name it stands for."""
    package = importlib.import_module(_PACKAGE)
    modules = {_ALIAS_ROOT: package}
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{_PACKAGE}."):
        if info.name == __name__:
            continue
        modules[_ALIAS_ROOT + info.name[len(_PACKAGE) :]] = importlib.import_module(
            info.name
        )
    return modules


def _real_vllm_names() -> list[str]:
    """Names of real vLLM modules in ``sys.modules``.

    Scanning ``sys.modules`` (thousands of names) on every block would cost
    more than most ports' work, so it is done only when a real ``vllm`` is
    loaded: no ``vllm.<sub>`` can be imported without its parent.
    """
    if _ALIAS_ROOT not in sys.modules:
        return []
    return [
        n for n in sys.modules if n == _ALIAS_ROOT or n.startswith(_ALIAS_ROOT + ".")
    ]


@contextmanager
def vllm_aliased() -> Iterator[None]:
    """While active, ``vllm`` and ``vllm.<sub>`` are this package's modules (nestable)."""
    global _depth
    with _lock:
        if _depth == 0:
            aliases = compat_modules()
            _set_aside.update({n: sys.modules.pop(n) for n in _real_vllm_names()})
            sys.modules.update(aliases)
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
            if _depth == 0:
                # Every vLLM name a block can add is one of the aliases (the
                # package's modules are all aliased up front).
                for name in compat_modules():
                    sys.modules.pop(name, None)
                sys.modules.update(_set_aside)
                _set_aside.clear()


@contextmanager
def vllm_unaliased() -> Iterator[None]:
    """While active, ``vllm`` is whatever is really installed; no alias block can start."""
    with _lock:
        if _depth:
            raise RuntimeError(
                "the real vLLM was requested inside a bundled-runtime block"
            )
        yield
