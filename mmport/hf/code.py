"""Which code is HF's, and the source of one of its methods.

transformers' own classes, the modules a snapshot ships (``auto_map``,
imported under :data:`REMOTE_CODE_PACKAGE`) and a processor's code kept
outside the snapshot (``--processor-code``) are HF code; a class's MRO
restricted to them is where mmport looks for what a processor does.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "REMOTE_CODE_PACKAGE",
    "add_outside_code",
    "defining_class",
    "is_hf_code",
    "method_node",
    "outside_code_path",
    "transformers_classes",
]

# The package HF imports a snapshot's own code under (``trust_remote_code``).
REMOTE_CODE_PACKAGE = "transformers_modules"


# Processor code kept outside any snapshot (``--processor-code``), once imported: each
# directory, and the folder its provenance paths are shown from (its package's parent).
_OUTSIDE_CODE: dict[Path, Path] = {}


def add_outside_code(root: Path, shown_from: Path) -> None:
    """Count every module under ``root`` as model code, as a snapshot's own (``--processor-code``, with consent)."""
    _OUTSIDE_CODE[root.resolve()] = shown_from.resolve()


def outside_code_path(filename: str | Path) -> str | None:
    """``filename`` as provenance shows it if it lies under ``--processor-code``, else None.

    ``processing_x.py`` in a folder of modules; ``pkg/models/processing_x.py`` in a package ``pkg``.
    """
    path = Path(filename).resolve()
    for root, shown_from in _OUTSIDE_CODE.items():
        if path.is_relative_to(root):
            return str(path.relative_to(shown_from))
    return None


def is_hf_code(module: str, *, models_only: bool = False) -> bool:
    """Is ``module`` transformers' (optionally a model's, under ``models/``) or code a snapshot ships?

    A snapshot's own modules count as model code: transplanted into ports, never
    imported; so do the modules of ``--processor-code`` (:func:`add_outside_code`).
    """
    if module.startswith(REMOTE_CODE_PACKAGE + ".") or module.startswith(
        "transformers.models." if models_only else "transformers."
    ):
        return True
    return bool(_OUTSIDE_CODE) and _is_outside_module(module)


def _is_outside_module(module: str) -> bool:
    filename = getattr(sys.modules.get(module), "__file__", None)
    return isinstance(filename, str) and outside_code_path(filename) is not None


def transformers_classes(cls: type[Any], *, models_only: bool = False) -> list[type]:
    """``cls``'s MRO restricted to transformers (optionally its ``models/``) classes."""
    return [
        k
        for k in cls.__mro__
        if is_hf_code(k.__module__, models_only=models_only) or k is cls
    ]


def defining_class(
    cls: type[Any], name: str, *, models_only: bool = False
) -> type | None:
    """The first class along :func:`transformers_classes` whose body defines ``name``."""
    return next(
        (
            k
            for k in transformers_classes(cls, models_only=models_only)
            if name in vars(k)
        ),
        None,
    )


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
    except (
        OSError,
        TypeError,
    ):  # no source to read (a builtin, a class built at run time)
        return None
    node = cst.parse_module(textwrap.dedent(source)).body[0]
    return node if isinstance(node, cst.FunctionDef) else None
