"""Which code is HF's, and the source of one of its methods.

transformers' own classes and the modules a snapshot ships (``auto_map``,
imported under :data:`REMOTE_CODE_PACKAGE`) are HF code; a class's MRO
restricted to them is where mmport looks for what a processor does.
"""

from __future__ import annotations

import inspect
import textwrap
from functools import lru_cache
from typing import Any

__all__ = ["REMOTE_CODE_PACKAGE", "defining_class", "is_hf_code", "method_node", "transformers_classes"]

# The package HF imports a snapshot's own code under (``trust_remote_code``).
REMOTE_CODE_PACKAGE = "transformers_modules"


def is_hf_code(module: str, *, models_only: bool = False) -> bool:
    """Is ``module`` transformers' (optionally a model's, under ``models/``) or code a snapshot ships?

    A snapshot's own modules count as model code: transplanted into ports, never imported.
    """
    return module.startswith(REMOTE_CODE_PACKAGE + ".") or module.startswith("transformers.models." if models_only else "transformers.")


def transformers_classes(cls: type[Any], *, models_only: bool = False) -> list[type]:
    """``cls``'s MRO restricted to transformers (optionally its ``models/``) classes."""
    return [k for k in cls.__mro__ if is_hf_code(k.__module__, models_only=models_only) or k is cls]


def defining_class(cls: type[Any], name: str, *, models_only: bool = False) -> type | None:
    """The first class along :func:`transformers_classes` whose body defines ``name``."""
    return next((k for k in transformers_classes(cls, models_only=models_only) if name in vars(k)), None)


@lru_cache(maxsize=256)
def method_node(cls: type[Any], name: str, *, models_only: bool = False) -> Any:
    """The libcst ``FunctionDef`` of method ``name`` where :func:`defining_class` defines it, or None.

    Only the method's own source is parsed, without positions: what HF's
    code says, not where (provenance is the analyzers' business).
    """
    import libcst as cst

    klass = defining_class(cls, name, models_only=models_only)
    function = vars(klass).get(name) if klass is not None else None
    if function is None:
        return None
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # no source to read (a builtin, a class built at run time)
        return None
    node = cst.parse_module(textwrap.dedent(source)).body[0]
    return node if isinstance(node, cst.FunctionDef) else None
