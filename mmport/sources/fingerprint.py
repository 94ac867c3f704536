"""Which of mmport's own modules a synthetic snapshot depends on, and their hash.

A synthetic snapshot is cached under a key that must change whenever the
code that builds it changes: not only the builder (``synthetic.py``) but
everything it calls — measuring the vision tower on a tiny twin, observing the
processor's output, the wrapped placeholder, the probe image. Listing those
modules by hand goes stale as soon as the builder imports one more, so the
list is derived: every mmport module reachable by ``import`` (at module level
or inside a function) from the builder, read with :mod:`ast`::

    >>> names = builder_modules()
    >>> "mmport.sources.measure" in names and "mmport.hf.tiny" in names
    True

A package's ``__init__`` counts only where it is imported from by name
(``from mmport.sources import resolve``), not merely passed through on the
way to a submodule, so editing an unrelated analyzer keeps the cache.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

__all__ = ["BUILDER", "builder_fingerprint", "builder_modules"]

# The module whose import closure builds a synthetic snapshot.
BUILDER = "mmport.sources.synthetic"
_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the mmport package


def _file_of(module: str) -> Path | None:
    """The source file of an mmport module or package, or None when there is none."""
    base = _ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _existing_file(module: str) -> Path:
    """:func:`_file_of` a module that has one: one :func:`_imports` found, or the root named."""
    path = _file_of(module)
    if path is None:
        raise FileNotFoundError(f"mmport module {module!r} has no source file")
    return path


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a (possibly relative) ``from X import ...`` names."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def _imports(module: str, path: Path) -> set[str]:
    """The mmport modules ``module`` imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(node, module, path.name == "__init__.py")
            for alias in node.names:
                # ``from mmport.sources import tokens``: the submodule, when there is one.
                submodule = f"{source}.{alias.name}"
                found.add(submodule if _file_of(submodule) else source)
    return {name for name in found if name.split(".")[0] == "mmport" and _file_of(name)}


@cache
def builder_modules(root: str = BUILDER) -> frozenset[str]:
    """Every mmport module reachable by import from ``root``, ``root`` included."""
    seen: set[str] = set()
    pending = [root]
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        pending.extend(_imports(module, _existing_file(module)) - seen)
    return frozenset(seen)


@cache
def builder_fingerprint(root: str = BUILDER) -> str:
    """A short hash of the source of every module :func:`builder_modules` lists."""
    digest = hashlib.sha1()
    for module in sorted(builder_modules(root)):
        digest.update(module.encode() + b"\0" + _existing_file(module).read_bytes())
    return digest.hexdigest()[:10]
