"""Parse HF source files once, with positions, and find classes across the MRO."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mmport.spec import Source

__all__ = ["ParsedSource", "find_method", "parse_file"]


@dataclass(frozen=True)
class ParsedSource:
    """One parsed module: its tree, positions, and path relative to transformers."""

    relpath: str
    module: cst.Module
    positions: dict

    def source(self, node: cst.CSTNode) -> Source:
        """Provenance of ``node``: file, first line and that line's code."""
        line = self.positions[node].start.line
        code = self.module.code.splitlines()[line - 1].strip()
        return Source(self.relpath, line, code)

    def code(self, node: cst.CSTNode) -> str:
        """The exact source text of ``node``."""
        return self.module.code_for_node(node)

    def find_class(self, name: str) -> cst.ClassDef | None:
        """The top-level class called ``name`` in this module, if any."""
        for stmt in self.module.body:
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
                return stmt
        return None


def _relative(path: Path) -> str:
    import transformers

    root = Path(transformers.__file__).parent
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@lru_cache(maxsize=64)
def parse_file(path: str) -> ParsedSource:
    """Parse ``path`` with position metadata (cached per path)."""
    wrapper = MetadataWrapper(cst.parse_module(Path(path).read_text()), unsafe_skip_copy=True)
    positions = dict(wrapper.resolve(PositionProvider))
    return ParsedSource(_relative(Path(path)), wrapper.module, positions)


def _methods(classdef: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {
        stmt.name.value: stmt
        for stmt in classdef.body.body
        if isinstance(stmt, cst.FunctionDef)
    }


def find_method(cls: type, name: str) -> tuple[ParsedSource, cst.FunctionDef] | None:
    """The first definition of method ``name`` along ``cls``'s MRO, parsed."""
    for klass in cls.__mro__:
        if name not in vars(klass):
            continue
        filename = inspect.getsourcefile(klass)
        if filename is None:
            return None
        parsed = parse_file(filename)
        classdef = parsed.find_class(klass.__name__)
        if classdef is not None and name in _methods(classdef):
            return parsed, _methods(classdef)[name]
    return None
