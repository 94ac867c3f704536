"""Placeholders the HF processor accepts only inside wrapper tokens.

Some processors check, in ``validate_inputs``, that every image token in the
prompt sits between a start and an end token, as their chat template writes it::

    if not self._has_wrappers(prompt, match.start(), self.image_start_token, self.image_token, self.image_end_token):
        raise ValueError(...)

A prompt then carries ``<image_start><image><image_end>`` per image; only the
middle token is replaced. Probes and dummy prompts must write the wrapped form.

Everyone who calls HF with a placeholder needs this (verify's reference, the
synthetic snapshot, the analyzers), so the reading of ``validate_inputs``
lives here; :mod:`mmport.analyzers.wrappers` adds where HF's source says it.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mmport.hf.code import method_node

__all__ = ["placeholder_wrappers", "wrapped_placeholder", "wrapper_call"]


def _self_token(node: cst.BaseExpression) -> str | None:
    """``self.<name>_token`` → ``<name>_token``."""
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
    ):
        return node.attr.value if node.attr.value.endswith("_token") else None
    return None


class _WrappedCalls(cst.CSTVisitor):
    def __init__(self, token_attr: str) -> None:
        self.token_attr = token_attr
        self.found: tuple[str, str, cst.Call] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        names = [_self_token(arg.value) for arg in node.args]
        for i in range(1, len(names) - 1):
            before, after = names[i - 1], names[i + 1]
            if names[i] == self.token_attr and before and after and self.found is None:
                self.found = (before, after, node)


def wrapper_call(
    validate_inputs: cst.FunctionDef, token_attr: str
) -> tuple[str, str, cst.Call] | None:
    """``(before, after, call)``: the attributes ``validate_inputs`` demands around ``token_attr``, and the call that checks."""
    visitor = _WrappedCalls(token_attr)
    validate_inputs.visit(visitor)
    return visitor.found


def placeholder_wrappers(
    processor_cls: type[Any], token_attr: str = "image_token"
) -> tuple[str, str] | None:
    """The attributes naming the tokens HF demands before and after ``token_attr``, if any."""
    func = method_node(processor_cls, "validate_inputs", models_only=True)  # type: ignore[arg-type]  # a class is hashable; mypy misreads type[...] against Hashable
    found = wrapper_call(func, token_attr) if func is not None else None
    return found[:2] if found else None


def wrapped_placeholder(
    processor: Any,
    token_attr: str = "image_token",
    wrappers: tuple[str, str] | None = None,
) -> str:
    """The text one item takes in a prompt the HF processor accepts (``wrappers``: the attributes, already read)."""
    token = str(getattr(processor, token_attr))
    wrappers = wrappers or placeholder_wrappers(type(processor), token_attr)
    if wrappers is None:
        return token
    before, after = wrappers
    return f"{getattr(processor, before)}{token}{getattr(processor, after)}"
