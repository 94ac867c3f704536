"""Find a special token the HF processor puts before every prompt's text.

Some processors prepend their tokenizer's BOS to each prompt string
themselves, because the tokenizer does not add it::

    # Emu3, prepare_inputs_layout
    if text is not None and kwargs.get("add_special_tokens", True):
        text = [f"{self.bos_token}{sample}" for sample in text]

    # Molmo2, __call__
    bos_token = self.tokenizer.bos_token or self.tokenizer.eos_token
    text = [prompt if prompt.startswith(bos_token) else bos_token + prompt for prompt in text]

vLLM tokenizes the prompt itself and shows the HF processor only the data,
so the port has to put that token into the prompt ids. The prepended value is
followed back to the tokenizer attributes it reads: ``self.tokenizer.<attr>``,
a constructor's ``self.<name> = tokenizer.<attr>``, a local name, and
``a or b`` (``b`` when the tokenizer has no ``a``). Only the tokenizer's
named special tokens count; prepending anything else is another rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import SelfAssignments, find_method
from mmport.spec import Source, TextPrefix

__all__ = ["analyze_text_prefix"]

# The methods in which HF rewrites the prompt strings before tokenizing them.
TEXT_METHODS = ("prepare_inputs_layout", "__call__")


class _Contains(cst.CSTVisitor):
    def __init__(self, target: cst.CSTNode) -> None:
        self.target = target
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.found = self.found or node is self.target
        return not self.found


def _contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    visitor = _Contains(node)
    tree.visit(visitor)
    return visitor.found


def _is_name(expr: cst.BaseExpression, name: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == name


def _prefixed(elt: cst.BaseExpression, sample: str) -> cst.BaseExpression | None:
    """``f"{token}{sample}"`` or ``token + sample`` → ``token``."""
    if isinstance(elt, cst.FormattedString) and len(elt.parts) == 2:
        head, tail = elt.parts
        if isinstance(head, cst.FormattedStringExpression) and isinstance(
            tail, cst.FormattedStringExpression
        ):
            return head.expression if _is_name(tail.expression, sample) else None
    if (
        isinstance(elt, cst.BinaryOperation)
        and isinstance(elt.operator, cst.Add)
        and _is_name(elt.right, sample)
    ):
        return elt.left
    return None


def _starts_with(test: cst.BaseExpression, sample: str) -> cst.BaseExpression | None:
    """``sample.startswith(token)`` → ``token``."""
    if (
        isinstance(test, cst.Call)
        and isinstance(test.func, cst.Attribute)
        and len(test.args) == 1
        and test.func.attr.value == "startswith"
        and _is_name(test.func.value, sample)
    ):
        return test.args[0].value
    return None


def _prefix_rule(
    elt: cst.BaseExpression, sample: str
) -> tuple[cst.BaseExpression, str] | None:
    """The prepended expression and when HF skips it (see :class:`~mmport.spec.TextPrefix`)."""
    token = _prefixed(elt, sample)
    if token is not None:
        return token, ""
    if isinstance(elt, cst.IfExp) and _is_name(elt.body, sample):
        checked, token = _starts_with(elt.test, sample), _prefixed(elt.orelse, sample)
        if checked is not None and token is not None and checked.deep_equals(token):
            return token, "starts_with"
    return None


class _PrefixedText(cst.CSTVisitor):
    """Collect ``[<rule> for sample in text]`` with its enclosing ``if`` tests and the local bindings."""

    def __init__(self) -> None:
        self.locals: dict[str, cst.BaseExpression] = {}
        self.branches: list[tuple[cst.BaseExpression, cst.BaseSuite]] = []
        self.found: (
            tuple[cst.ListComp, cst.BaseExpression, str, tuple[cst.BaseExpression, ...]]
            | None
        ) = None
        # The bindings in force where the comprehension runs.
        self.locals_then: dict[str, cst.BaseExpression] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if isinstance(target, cst.Name):
            self.locals[target.value] = node.value

    def visit_If(self, node: cst.If) -> None:
        self.branches.append((node.test, node.body))

    def leave_If(self, original_node: cst.If) -> None:
        self.branches.pop()

    def visit_ListComp(self, node: cst.ListComp) -> None:
        for_in = node.for_in
        if self.found is not None or for_in.ifs or for_in.inner_for_in is not None:
            return
        if not (_is_name(for_in.iter, "text") and isinstance(for_in.target, cst.Name)):
            return
        rule = _prefix_rule(node.elt, for_in.target.value)
        if rule is not None:
            guards = tuple(
                test for test, body in self.branches if _contains(body, node)
            )
            self.found = (node, rule[0], rule[1], guards)
            self.locals_then = dict(self.locals)


def _is_tokenizer(expr: cst.BaseExpression) -> bool:
    """``tokenizer`` (a constructor's argument) or ``self.tokenizer``."""
    if isinstance(expr, cst.Attribute) and _is_name(expr.value, "self"):
        return expr.attr.value == "tokenizer"
    return _is_name(expr, "tokenizer")


def _tokenizer_attrs(
    expr: cst.BaseExpression,
    local: Mapping[str, cst.BaseExpression],
    init: Mapping[str, cst.BaseExpression],
) -> tuple[str, ...]:
    """The tokenizer attributes ``expr`` reads, in fallback order; ``()`` when it reads anything else."""
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
        left, right = (
            _tokenizer_attrs(expr.left, local, init),
            _tokenizer_attrs(expr.right, local, init),
        )
        return left + right if left and right else ()
    if isinstance(expr, cst.Name) and expr.value in local:
        rest = {
            k: v for k, v in local.items() if k != expr.value
        }  # `x = x or y` must not loop
        return _tokenizer_attrs(local[expr.value], rest, init)
    if not isinstance(expr, cst.Attribute):
        return ()
    owner, attr = expr.value, expr.attr.value
    if _is_tokenizer(owner):
        return (attr,)
    if _is_name(owner, "self") and attr in init:
        return _tokenizer_attrs(init[attr], {}, {})
    return ()


def _constructor_values(processor_cls: type[Any]) -> dict[str, cst.BaseExpression]:
    """``self.<name> = <value>`` of the processor's constructor, by name."""
    found = find_method(processor_cls, "__init__", models_only=True)
    if found is None:
        return {}
    visitor = SelfAssignments()
    found[1].visit(visitor)
    return {name: node.value for name, node in visitor.nodes.items()}


class _Words(cst.CSTVisitor):
    """Names and string constants of an expression."""

    def __init__(self) -> None:
        self.words: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.words.add(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.words.add(str(node.evaluated_value))


def _reads_add_special_tokens(test: cst.BaseExpression) -> bool:
    """``kwargs.get("add_special_tokens", True)`` or a local ``add_special_tokens`` in an ``if`` test."""
    visitor = _Words()
    test.visit(visitor)
    return "add_special_tokens" in visitor.words


def analyze_text_prefix(processor_cls: type[Any]) -> TextPrefix | None:
    """The special token the processor prepends to each prompt string, if it does (see module doc)."""
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    for method in TEXT_METHODS:
        found = find_method(processor_cls, method, models_only=True)
        if found is None:
            continue
        parsed, func = found
        visitor = _PrefixedText()
        func.visit(visitor)
        if visitor.found is None:
            continue
        comp, token, unless, guards = visitor.found
        attrs = _tokenizer_attrs(
            token, visitor.locals_then, _constructor_values(processor_cls)
        )
        if attrs and set(attrs) <= set(
            PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES
        ):
            with_special = any(_reads_add_special_tokens(test) for test in guards)
            return TextPrefix(attrs, parsed.source(comp), unless, with_special)
    return None


EXAMPLES = [
    valid(
        "emu3_prepends_bos_in_its_layout_with_special_tokens",
        """
        class Emu3Processor:
            def __init__(self, image_processor, tokenizer, chat_template=None, **kwargs):
                self.bos_token = tokenizer.bos_token

            def prepare_inputs_layout(self, images=None, text=None, **kwargs):
                images, text, *_ = super().prepare_inputs_layout(images=images, text=text, **kwargs)
                if text is not None and kwargs.get("add_special_tokens", True):
                    # Add BOS once per sample; GPT tokenizer doesn't add it automatically
                    text = [f"{self.bos_token}{sample}" for sample in text]
                return images, text, None, None
        """,
        lambda snippet: analyze_text_prefix(snippet.Emu3Processor),
        TextPrefix(
            ("bos_token",),
            Source(
                SNIPPET_FILE,
                9,
                'text = [f"{self.bos_token}{sample}" for sample in text]',
            ),
            "",
            True,
        ),
    ),
    valid(
        "molmo2_prepends_bos_or_eos_unless_present",
        """
        class Molmo2Processor:
            def __call__(self, images=None, text=None, **kwargs):
                bos_token = self.tokenizer.bos_token or self.tokenizer.eos_token
                text = [prompt if prompt.startswith(bos_token) else bos_token + prompt for prompt in text]
                return self.tokenizer(text)
        """,
        lambda snippet: analyze_text_prefix(snippet.Molmo2Processor),
        TextPrefix(
            ("bos_token", "eos_token"),
            Source(
                SNIPPET_FILE,
                4,
                "text = [prompt if prompt.startswith(bos_token) else bos_token + prompt for prompt in text]",
            ),
            "starts_with",
            False,
        ),
    ),
    invalid(
        "prepending_the_image_token_is_not_a_text_prefix",
        """
        class Proc:
            def __init__(self, tokenizer):
                self.image_token = tokenizer.image_token

            def prepare_inputs_layout(self, images=None, text=None, **kwargs):
                return images, [f"{self.image_token}{sample}" for sample in text]
        """,
        lambda snippet: analyze_text_prefix(snippet.Proc),
    ),
]
