"""Attention scales vLLM's Transformers backend cannot read, found in HF's text model statically.

The backend hands each attention layer to vLLM's attention with the softmax
scale the HF module passes its attention interface (``scaling=``). It reads
that keyword from the module's ``forward`` source and resolves it on the
module only when it is a literal or a ``self.<attribute>``; anything else
(ModernBERT's ``self.head_dim ** -0.5``) stops the whole text model at
construction ("Cannot resolve attention scaling expression"). This finds
such a keyword before a port is written, in the classes the text model
builds: the model class and every class of its module its ``__init__`` (or
a base's) names, transitively, since the same file may hold a vision
tower's attention the backend never sees.
"""

from __future__ import annotations

import ast
import functools
import sys
from typing import Any

from mmport.analyzers.examples import valid

__all__ = ["EXAMPLES", "unreadable_scale"]

# The table the backend looks an attention function up in (``_is_interface_lookup`` in vLLM).
_INTERFACES = "ALL_ATTENTION_FUNCTIONS"


def unreadable_scale(model_class: type) -> str:
    """``Class: expression`` for the first attention module of ``model_class``'s text model whose
    ``scaling=`` the backend cannot resolve, or "" when every one is readable (or none is found)."""
    try:
        tree = _module_tree(sys.modules[model_class.__module__].__file__ or "")
    except (KeyError, OSError, SyntaxError, TypeError):
        return ""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for name in _built_from(model_class.__name__, classes):
        expression = _scale_expression(classes[name], classes)
        if expression is not None and not _resolvable(expression):
            return f"{name}: {ast.unparse(expression)}"
    return ""


@functools.cache
def _module_tree(path: str) -> ast.Module:
    """The parsed module at ``path`` (cached: one file serves every class it defines)."""
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read())


def _built_from(root: str, classes: dict[str, ast.ClassDef]) -> list[str]:
    """``root`` and every class of the module its construction reaches, in the order found."""
    found: list[str] = []
    pending = [root]
    while pending:
        name = pending.pop(0)
        if name in found or name not in classes:
            continue
        found.append(name)
        for node in _lineage(classes[name], classes):
            pending += [
                call.func.id
                for call in ast.walk(_method(node, "__init__") or ast.Module([], []))
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            ]
    return found


def _lineage(
    node: ast.ClassDef, classes: dict[str, ast.ClassDef]
) -> list[ast.ClassDef]:
    """``node`` and its bases defined in the same module, nearest first."""
    chain = [node]
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            chain += _lineage(classes[base.id], classes)
    return chain


def _method(node: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """The method ``name`` defined in the class body itself, if any."""
    return next(
        (m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == name),
        None,
    )


def _scale_expression(
    node: ast.ClassDef, classes: dict[str, ast.ClassDef]
) -> ast.expr | None:
    """The ``scaling=`` a class's ``forward`` hands its one attention-interface call, if it makes one."""
    forward = next(
        (f for c in _lineage(node, classes) if (f := _method(c, "forward"))), None
    )
    if forward is None:
        return None
    looked_up = {
        target.id
        for assign in ast.walk(forward)
        if isinstance(assign, (ast.Assign, ast.AnnAssign)) and _is_lookup(assign.value)
        for target in (
            assign.targets if isinstance(assign, ast.Assign) else [assign.target]
        )
        if isinstance(target, ast.Name)
    }
    calls = [
        call
        for call in ast.walk(forward)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in looked_up
    ]
    if len(calls) != 1:
        return None
    return next((kw.value for kw in calls[0].keywords if kw.arg == "scaling"), None)


def _is_lookup(node: ast.expr | None) -> bool:
    """``ALL_ATTENTION_FUNCTIONS.get_interface(...)`` or ``ALL_ATTENTION_FUNCTIONS[...]``."""
    if isinstance(node, ast.Call):
        node = node.func
    return (
        isinstance(node, (ast.Attribute, ast.Subscript))
        and isinstance(node.value, ast.Name)
        and node.value.id == _INTERFACES
    )


def _resolvable(expression: ast.expr) -> bool:
    """Whether the backend resolves ``expression`` on the module: a literal or ``self.<attribute>``."""
    return isinstance(expression, ast.Constant) or (
        isinstance(expression, ast.Attribute)
        and isinstance(expression.value, ast.Name)
        and expression.value.id == "self"
    )


def _example(snippet: Any) -> str:
    """The example's finding for its text model class, read from the snippet's own file."""
    return unreadable_scale(snippet.AcmeTextModel)


_ATTENTION = """
from collections.abc import Callable

ALL_ATTENTION_FUNCTIONS = {{}}


class AcmeAttention:
    def __init__(self, config):
        self.head_dim = 64
        self.scaling = self.head_dim**-0.5

    def forward(self, hidden_states):
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface("sdpa", None)
        return attention_interface(self, hidden_states, scaling={scaling})


class AcmeVisionAttention(AcmeAttention):
    def forward(self, hidden_states):
        attention_interface = ALL_ATTENTION_FUNCTIONS["sdpa"]
        return attention_interface(self, hidden_states, scaling=1 / 8)


class AcmeLayer:
    def __init__(self, config):
        self.attn = AcmeAttention(config)


class AcmeTextModel:
    def __init__(self, config):
        self.layers = [AcmeLayer(config) for _ in range(2)]
"""

EXAMPLES = [
    valid(
        "a_scale_the_module_holds_is_readable",
        _ATTENTION.format(scaling="self.scaling"),
        _example,
        "",
    ),
    valid(
        "a_scale_computed_in_the_call_is_not",
        _ATTENTION.format(scaling="self.head_dim**-0.5"),
        _example,
        "AcmeAttention: self.head_dim ** (-0.5)",
    ),
    valid(
        "an_attention_the_text_model_does_not_build_is_not_read",
        _ATTENTION.format(scaling="0.125"),
        _example,
        "",
    ),
]
