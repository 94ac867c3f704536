"""A snapshot's module read with libcst, without importing it: its top-level classes, with positions.

Shared by the static reads of remote code (:mod:`mmport.analyzers.remote_static`,
:mod:`mmport.analyzers.chatprompt`), which must not run a line of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mmport.spec import Source

__all__ = ["StaticModule", "code_of", "walk"]


class StaticModule:
    """One parsed snapshot module: its classes, with positions."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.lines = (directory / name).read_text().splitlines()
        wrapper = MetadataWrapper(
            cst.parse_module("\n".join(self.lines)), unsafe_skip_copy=True
        )
        self.positions = wrapper.resolve(PositionProvider)
        self.classes = {
            s.name.value: s for s in wrapper.module.body if isinstance(s, cst.ClassDef)
        }

    def source(self, node: cst.CSTNode) -> Source:
        """Provenance of ``node``: this module's name, its line and that line's code."""
        line = self.positions[node].start.line
        return Source(self.name, line, self.lines[line - 1].strip())


def code_of(node: cst.CSTNode) -> str:
    """The node's code on one line (a fact's value)."""
    return " ".join(cst.Module([]).code_for_node(node).split())


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node under it, depth first."""
    yield node
    for child in node.children:
        yield from walk(child)
