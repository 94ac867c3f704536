"""Parse HF classes once, with positions, and find methods along the MRO.

Only the class's own source is parsed (not its whole module): transformers'
base modules run to thousands of lines, and positions for a whole module cost
far more than the analysis itself. Lines are shifted back to file lines.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.hf.code import (
    REMOTE_CODE_PACKAGE,
    defining_class,
    outside_code_path,
    transformers_classes,
)
from mmport.spec import Source

__all__ = [
    "ParsedClass",
    "SelfAssignments",
    "bound_names",
    "class_assignments",
    "find_method",
    "init_assignment_source",
    "names_in",
    "parse_class",
    "relative_source_path",
    "self_call",
]


@dataclass(frozen=True)
class ParsedClass:
    """One parsed class: its tree, positions, and where it sits in its file."""

    relpath: str
    classdef: cst.ClassDef
    module: cst.Module
    positions: dict
    first_line: int

    @cached_property
    def lines(self) -> list[str]:
        """The class's source lines (generating a module's code is not cheap)."""
        return self.module.code.splitlines()

    def source(self, node: cst.CSTNode) -> Source:
        """Provenance of ``node``: file, line and that line's code."""
        line = self.positions[node].start.line
        code = self.lines[line - 1].strip()
        return Source(self.relpath, line + self.first_line - 1, code)

    def methods(self) -> dict[str, cst.FunctionDef]:
        """The methods the class body defines, by name."""
        return {
            stmt.name.value: stmt
            for stmt in self.classdef.body.body
            if isinstance(stmt, cst.FunctionDef)
        }


def relative_source_path(path: Path | str) -> str:
    """Provenance path: under transformers' package, a snapshot's own file by name, or under ``--processor-code``."""
    import transformers

    path = Path(path)
    if REMOTE_CODE_PACKAGE in path.parts:
        # HF copies the snapshot's files unchanged (same names, same lines).
        return path.name
    outside = outside_code_path(path)
    if outside is not None:
        return outside
    root = Path(transformers.__file__).parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


@lru_cache(maxsize=128)
def parse_class(klass: type[Any]) -> ParsedClass | None:
    """Parse ``klass``'s source with position metadata (cached per class)."""
    try:
        lines, first_line = inspect.getsourcelines(klass)
        filename = inspect.getsourcefile(klass)
    except (OSError, TypeError):
        return None
    wrapper = MetadataWrapper(
        cst.parse_module(textwrap.dedent("".join(lines))), unsafe_skip_copy=True
    )
    classdef = next(
        (s for s in wrapper.module.body if isinstance(s, cst.ClassDef)), None
    )
    if classdef is None or filename is None:
        return None
    positions = dict(wrapper.resolve(PositionProvider))
    return ParsedClass(
        relative_source_path(filename), classdef, wrapper.module, positions, first_line
    )


def find_method(
    cls: type[Any], name: str, *, models_only: bool = False
) -> tuple[ParsedClass, cst.FunctionDef] | None:
    """The first definition of method ``name`` along ``cls``'s MRO, parsed (see :func:`mmport.hf.code.defining_class`)."""
    klass = defining_class(cls, name, models_only=models_only)
    parsed = parse_class(klass) if klass is not None else None
    if parsed is None or name not in parsed.methods():
        return None
    return parsed, parsed.methods()[name]


def class_assignments(
    cls: type[Any],
) -> dict[str, tuple[ParsedClass, cst.Assign | cst.AnnAssign]]:
    """Class-level ``name = value`` (or ``name: T = value``) lines along the MRO (nearest class wins)."""
    found: dict[str, tuple[ParsedClass, cst.Assign | cst.AnnAssign]] = {}
    for klass in transformers_classes(cls):
        parsed = parse_class(klass)
        if parsed is None:
            continue
        for stmt in parsed.classdef.body.body:
            for node in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else []:
                if isinstance(node, (cst.Assign, cst.AnnAssign)):
                    targets = node.targets if isinstance(node, cst.Assign) else [node]
                    for target in targets:
                        if isinstance(target.target, cst.Name):
                            found.setdefault(target.target.value, (parsed, node))
    return found


def is_self_attr(expr: cst.CSTNode, attr: str) -> bool:
    """Whether ``expr`` is ``self.<attr>``."""
    return (
        isinstance(expr, cst.Attribute)
        and isinstance(expr.value, cst.Name)
        and expr.value.value == "self"
        and expr.attr.value == attr
    )


def self_call(call: cst.Call) -> str:
    """The attribute a ``self.<attr>(...)`` call calls, or "" for any other call."""
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
    ):
        return func.attr.value
    return ""


class SelfAssignments(cst.CSTVisitor):
    """``self.<name> = ...`` statements of a method (the first one per name), in order."""

    def __init__(self) -> None:
        self.nodes: dict[str, cst.Assign] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        ):
            self.nodes.setdefault(target.attr.value, node)


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def init_assignment_source(cls: type[Any], attr: str) -> Source | None:
    """Where ``cls``'s own ``__init__`` (a model's, not a base class of transformers') sets ``self.<attr>``."""
    found = find_method(cls, "__init__", models_only=True)
    if found is None:
        return None
    visitor = SelfAssignments()
    found[1].visit(visitor)
    return found[0].source(visitor.nodes[attr]) if attr in visitor.nodes else None


def names_in(node: cst.CSTNode) -> set[str]:
    """Every name ``node`` mentions."""
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


class _Bound(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names |= names_in(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.names |= names_in(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.names |= names_in(node.target)


def bound_names(stmt: cst.CSTNode) -> set[str]:
    """Names a statement binds, inside ``if``/``for`` bodies too (tuple targets included)."""
    visitor = _Bound()
    stmt.visit(visitor)
    return visitor.names


_LLAVA = """
class LlavaProcessor:
    valid_kwargs = ["patch_size", "vision_feature_select_strategy"]

    def __init__(self, image_processor=None, tokenizer=None, patch_size=None, image_token="<image>"):
        self.patch_size = patch_size
        self.image_token = tokenizer.image_token if hasattr(tokenizer, "image_token") else image_token
        self.image_token_id = tokenizer.encode(self.image_token, add_special_tokens=False)[0]

class LlavaNextProcessor(LlavaProcessor):
    valid_kwargs = ["patch_size", "vision_feature_select_strategy", "image_grid_pinpoints"]
"""

EXAMPLES = [
    valid(
        "init_assignment_found_along_the_mro",
        _LLAVA,
        lambda snippet: init_assignment_source(
            snippet.LlavaNextProcessor, "image_token"
        ),
        Source(
            SNIPPET_FILE,
            6,
            'self.image_token = tokenizer.image_token if hasattr(tokenizer, "image_token") else image_token',
        ),
    ),
    valid(
        "nearest_class_assignment_wins",
        _LLAVA,
        lambda snippet: (
            class_assignments(snippet.LlavaNextProcessor)["valid_kwargs"][0]
            .source(class_assignments(snippet.LlavaNextProcessor)["valid_kwargs"][1])
            .line
        ),
        10,
    ),
    valid(
        "names_bound_inside_branches_and_tuples",
        "",
        lambda snippet: bound_names(
            cst.parse_statement(
                "if resized:\n    height, width = image.shape[-2:]\n    n += 1\n"
            )
        ),
        {"height", "width", "n"},
    ),
    invalid(
        "attribute_the_constructor_never_sets",
        _LLAVA,
        lambda snippet: init_assignment_source(
            snippet.LlavaProcessor, "image_seq_length"
        ),
    ),
]
