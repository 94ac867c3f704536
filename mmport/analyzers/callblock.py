"""Processors whose own ``__call__`` puts a block of image tokens before the prompt.

BLIP-2 style processors define no ``replace_image_token`` and read no
placeholder from the text. Their ``__call__`` builds one block and prepends
it to each tokenized sample::

    image_tokens = self.image_token.content * self.num_query_tokens
    image_text_encoding = self.tokenizer(image_tokens, **output_kwargs["text_kwargs"])
    for k in text_encoding:
        text_encoding[k] = [image_text_encoding[k] + sample for sample in text_encoding[k]]

which means: *insert* ``num_query_tokens`` image tokens at the very start
(before BOS) of the tokenized prompt. A block added on the right of the
sample is inserted at the end instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mmport.analyzers.count import ReplacementFacts, port_code
from mmport.analyzers.sourcefile import ParsedClass, find_method
from mmport.errors import AnalysisError
from mmport.spec import CountRule, PromptUpdateSpec

__all__ = ["CallBlock", "analyze_call_block"]


@dataclass(frozen=True)
class CallBlock:
    """The block ``__call__`` inserts: its count rule and where it goes."""

    facts: ReplacementFacts
    update: PromptUpdateSpec


def _token_attr(expr: cst.BaseExpression) -> str | None:
    """``self.<name>_token`` or ``self.<name>_token.content`` → ``<name>_token``."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "content":
        expr = expr.value
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value if expr.attr.value.endswith("_token") else None
    return None


class _BlockFlow(cst.CSTVisitor):
    """Find ``name = self.<token> * count``, follow ``name`` into a ``+`` with the sample."""

    def __init__(self) -> None:
        self.block: tuple[str, cst.BaseExpression, cst.Assign] | None = None
        self.tainted: set[str] = set()
        self.side: str | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target, value = node.targets[0].target, node.value
        if self.block is None and isinstance(target, cst.Name) and isinstance(value, cst.BinaryOperation):
            if isinstance(value.operator, cst.Multiply):
                for token, count in ((value.left, value.right), (value.right, value.left)):
                    attr = _token_attr(token)
                    if attr is not None:
                        self.block = (attr, count, node)
                        self.tainted.add(target.value)
                        return
        if self.tainted and isinstance(target, cst.Name) and _uses(value, self.tainted):
            self.tainted.add(target.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self.side is None and self.tainted and isinstance(node.operator, cst.Add):
            left, right = _uses(node.left, self.tainted), _uses(node.right, self.tainted)
            if left != right:
                self.side = "start" if left else "end"


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _uses(node: cst.CSTNode, names: set[str]) -> bool:
    visitor = _Names()
    node.visit(visitor)
    return bool(visitor.names & names)


def analyze_call_block(processor_cls: type) -> CallBlock:
    """Read the image-token block a model's own ``__call__`` inserts (see module doc)."""
    found = find_method(processor_cls, "__call__", models_only=True)
    if found is None:
        raise AnalysisError(f"{processor_cls.__name__} has no __call__ of its own that inserts image tokens")
    parsed, func = found
    visitor = _BlockFlow()
    func.visit(visitor)
    if visitor.block is None or visitor.side is None:
        raise AnalysisError(f"{processor_cls.__name__}.__call__ builds no `token * count` block joined to the prompt")
    attr, count, assign = visitor.block
    return CallBlock(_facts(parsed, attr, count, assign), _update(parsed, visitor.side, assign))


def _facts(parsed: ParsedClass, attr: str, count: cst.BaseExpression, assign: cst.Assign) -> ReplacementFacts:
    rule = CountRule((), port_code(parsed, count), False, "derived", parsed.source(assign))
    return ReplacementFacts(rule, attr)


def _update(parsed: ParsedClass, side: str, assign: cst.Assign) -> PromptUpdateSpec:
    return PromptUpdateSpec(mode="insert", target=side, source=parsed.source(assign))
