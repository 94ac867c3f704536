"""Typed reads of HF's code as libcst parses it.

libcst's own API is typed for the general case: ``m.findall`` answers plain
``CSTNode``s whatever the matcher, and ``SimpleString.evaluated_value`` is
``str | bytes``. The readers here answer what the caller asked for, so every
stage narrows in one place::

    calls = find_all(func.body, m.Call(func=m.Name("len")), cst.Call)  # list[cst.Call]
    key = string_value(call.args[0].value)  # "input_ids", or None for a non-literal
    value = rewritten(value, rename)  # a BaseExpression again, not a RemovalSentinel
"""

from __future__ import annotations

from typing import TypeVar, overload

import libcst as cst
import libcst.matchers as m

__all__ = ["find_all", "rewritten", "statements", "string_value"]

NodeT = TypeVar("NodeT", bound=cst.CSTNode)


def find_all(
    tree: cst.CSTNode, matcher: m.BaseMatcherNode, kind: type[NodeT]
) -> list[NodeT]:
    """``m.findall(tree, matcher)``, keeping the nodes of type ``kind`` (all of them, when ``matcher`` matches that kind)."""
    return [node for node in m.findall(tree, matcher) if isinstance(node, kind)]


def string_value(node: cst.CSTNode | None) -> str | None:
    """The text of a ``"..."`` literal; None for anything else (a name, a call, a ``b"..."`` literal)."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


# The kinds a rewrite keeps: an expression stays an expression, a statement a statement.
_KINDS: tuple[type[cst.CSTNode], ...] = (
    cst.BaseExpression,
    cst.BaseStatement,
    cst.BaseSuite,
    cst.CSTNode,
)


@overload
def rewritten(
    node: cst.BaseExpression, transformer: cst.CSTTransformer
) -> cst.BaseExpression: ...
@overload
def rewritten(
    node: cst.BaseStatement, transformer: cst.CSTTransformer
) -> cst.BaseStatement: ...
@overload
def rewritten(
    node: cst.BaseSuite, transformer: cst.CSTTransformer
) -> cst.BaseSuite: ...
@overload
def rewritten(node: cst.CSTNode, transformer: cst.CSTTransformer) -> cst.CSTNode: ...
def rewritten(node: cst.CSTNode, transformer: cst.CSTTransformer) -> cst.CSTNode:
    """``node.visit(transformer)``, for a transformer that replaces ``node`` by a node of its kind (never removes or flattens it)."""
    result = node.visit(transformer)
    kind = next(k for k in _KINDS if isinstance(node, k))
    if not isinstance(result, kind):
        raise TypeError(
            f"{type(transformer).__name__} turned a {type(node).__name__} into {result!r}, not a {kind.__name__}"
        )
    return result


def statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of an indented block; none for a one-line suite (``if x: y = 1``), which holds only small statements."""
    return list(suite.body) if isinstance(suite, cst.IndentedBlock) else []
