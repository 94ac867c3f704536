"""Placeholders the HF processor accepts only inside wrapper tokens.

Some processors check, in ``validate_inputs``, that every image token in the
prompt sits between a start and an end token, as their chat template writes it::

    if not self._has_wrappers(prompt, match.start(), self.image_start_token, self.image_token, self.image_end_token):
        raise ValueError(...)

A prompt then carries ``<image_start><image><image_end>`` per image; only the
middle token is replaced. Probes and dummy prompts must write the wrapped form.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mmport.analyzers.sourcefile import find_method
from mmport.spec import Source

__all__ = ["PlaceholderWrappers", "analyze_placeholder_wrappers", "wrapped_placeholder"]


@dataclass(frozen=True)
class PlaceholderWrappers:
    """The processor attributes naming the tokens before and after the placeholder."""

    before: str
    after: str
    source: Source


def _self_token(node: cst.BaseExpression) -> str | None:
    """``self.<name>_token`` → ``<name>_token``."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value if node.attr.value.endswith("_token") else None
    return None


class _WrappedCalls(cst.CSTVisitor):
    def __init__(self, token_attr: str) -> None:
        self.token_attr = token_attr
        self.found: tuple[str, str, cst.Call] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        names = [_self_token(arg.value) for arg in node.args]
        for i in range(1, len(names) - 1):
            if names[i] == self.token_attr and names[i - 1] and names[i + 1] and self.found is None:
                self.found = (names[i - 1], names[i + 1], node)


def analyze_placeholder_wrappers(processor_cls: type, token_attr: str = "image_token") -> PlaceholderWrappers | None:
    """The wrapper tokens ``validate_inputs`` demands around ``token_attr``, if any."""
    found = find_method(processor_cls, "validate_inputs", models_only=True)
    if found is None:
        return None
    parsed, func = found
    visitor = _WrappedCalls(token_attr)
    func.visit(visitor)
    if visitor.found is None:
        return None
    before, after, call = visitor.found
    return PlaceholderWrappers(before, after, parsed.source(call))


def wrapped_placeholder(processor, token_attr: str = "image_token", wrappers: PlaceholderWrappers | None = None) -> str:
    """The text one image takes in a prompt the HF processor accepts (``wrappers``: already analysed)."""
    token = str(getattr(processor, token_attr))
    wrappers = wrappers or analyze_placeholder_wrappers(type(processor), token_attr)
    if wrappers is None:
        return token
    return f"{getattr(processor, wrappers.before)}{token}{getattr(processor, wrappers.after)}"
