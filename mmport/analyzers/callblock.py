"""Processors whose own ``__call__`` puts a block of item tokens before the prompt.

BLIP-2 style processors define no ``replace_<modality>_token`` and read no
placeholder from the text. Their ``__call__`` builds one block and prepends
it to each tokenized sample::

    image_tokens = self.image_token.content * self.num_query_tokens
    image_text_encoding = self.tokenizer(image_tokens, **output_kwargs["text_kwargs"])
    for k in text_encoding:
        text_encoding[k] = [image_text_encoding[k] + sample for sample in text_encoding[k]]

which means: *insert* ``num_query_tokens`` image tokens at the very start
(before BOS) of the tokenized prompt. A block added on the right of the
sample is inserted at the end instead. The token may stand anywhere in a
product, whose other factors are the count: InstructBLIP-Video's

    video_tokens = self.video_token.content * self.num_query_tokens * 4

inserts ``processor.num_query_tokens * 4`` video tokens. The count may read
only processor attributes and literals: a block built once per prompt gives
every item the same count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from mmport.analyzers.count import ReplacementFacts, port_code
from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method
from mmport.errors import AnalysisError
from mmport.spec import CountRule, PromptUpdateSpec, Source

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
    if (
        isinstance(expr, cst.Attribute)
        and isinstance(expr.value, cst.Name)
        and expr.value.value == "self"
    ):
        return expr.attr.value if expr.attr.value.endswith("_token") else None
    return None


def _factors(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The factors of a product chain: ``a * b * 4`` → ``[a, b, 4]`` (anything else is one factor)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(
        expr.operator, cst.Multiply
    ):
        return [*_factors(expr.left), *_factors(expr.right)]
    return [expr]


def _product(factors: list[cst.BaseExpression]) -> cst.BaseExpression:
    """The factors multiplied again, in their order."""
    product = factors[0]
    for factor in factors[1:]:
        product = cst.BinaryOperation(product, cst.Multiply(), factor)
    return product


def _is_constant(factor: cst.BaseExpression) -> bool:
    """A literal or a processor attribute (``4``, ``self.num_query_tokens``): the same for every item."""
    if isinstance(factor, cst.Integer):
        return True
    return (
        isinstance(factor, cst.Attribute)
        and isinstance(factor.value, cst.Name)
        and factor.value.value == "self"
    )


def _split_block(
    value: cst.BaseExpression, token_attr: str
) -> cst.BaseExpression | None:
    """The count of ``value`` when it repeats ``self.<token_attr>`` a fixed number of times (see module doc), else None.

    A count read from a local (CSM's ``self.audio_token * num_audio_tokens``,
    one per audio) is no block of the prompt's.
    """
    factors = _factors(value)
    tokens = [f for f in factors if _token_attr(f) == token_attr]
    count = [f for f in factors if all(f is not t for t in tokens)]
    if len(tokens) != 1 or not count or not all(_is_constant(f) for f in count):
        return None
    return _product(count)


class _BlockFlow(cst.CSTVisitor):
    """Find ``name = self.<token> * count``, follow ``name`` into a ``+`` with the sample."""

    def __init__(self, token_attr: str) -> None:
        self.token_attr = token_attr
        self.block: tuple[cst.BaseExpression, cst.Assign] | None = None
        self.tainted: set[str] = set()
        self.side: str | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target, value = node.targets[0].target, node.value
        if self.block is None and isinstance(target, cst.Name):
            count = _split_block(value, self.token_attr)
            if count is not None:
                self.block = (count, node)
                self.tainted.add(target.value)
                return
        if self.tainted and isinstance(target, cst.Name) and _uses(value, self.tainted):
            self.tainted.add(target.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self.side is None and self.tainted and isinstance(node.operator, cst.Add):
            left, right = (
                _uses(node.left, self.tainted),
                _uses(node.right, self.tainted),
            )
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


def analyze_call_block(processor_cls: type[Any], modality: str = "image") -> CallBlock:
    """Read the block of ``<modality>_token`` a model's own ``__call__`` inserts (see module doc)."""
    token_attr = f"{modality}_token"
    found = find_method(processor_cls, "__call__", models_only=True)
    if found is None:
        raise AnalysisError(
            f"{processor_cls.__name__} has no __call__ of its own that inserts {modality} tokens"
        )
    parsed, func = found
    visitor = _BlockFlow(token_attr)
    func.visit(visitor)
    if visitor.block is None or visitor.side is None:
        raise AnalysisError(
            f"{processor_cls.__name__}.__call__ builds no `{token_attr} * count` block joined to the prompt"
        )
    count, assign = visitor.block
    return CallBlock(
        _facts(parsed, token_attr, count, assign), _update(parsed, visitor.side, assign)
    )


def _facts(
    parsed: ParsedClass, attr: str, count: cst.BaseExpression, assign: cst.Assign
) -> ReplacementFacts:
    rule = CountRule(
        (), port_code(parsed, count), False, "derived", parsed.source(assign)
    )
    return ReplacementFacts(rule, attr)


def _update(parsed: ParsedClass, side: str, assign: cst.Assign) -> PromptUpdateSpec:
    return PromptUpdateSpec(mode="insert", target=side, source=parsed.source(assign))


# BLIP-2: num_query_tokens image tokens before every tokenized sample.
_BLIP2 = """
class Blip2Processor:
    def __call__(self, images=None, text=None, **kwargs):
        output_kwargs = self._merge_kwargs(**kwargs)
        text_encoding = self.tokenizer(text, **output_kwargs["text_kwargs"])
        if self.num_query_tokens is not None and images is not None:
            image_tokens = self.image_token.content * self.num_query_tokens
            image_token_encoding = self.tokenizer(image_tokens, **output_kwargs["text_kwargs"])
            for k in text_encoding:
                text_encoding[k] = [image_token_encoding[k] + sample for sample in text_encoding[k]]
        return text_encoding
"""

_BLIP2_BLOCK = Source(
    SNIPPET_FILE, 6, "image_tokens = self.image_token.content * self.num_query_tokens"
)

EXAMPLES = [
    valid(
        "blip2_inserts_query_tokens_at_the_start",
        _BLIP2,
        lambda snippet: analyze_call_block(snippet.Blip2Processor),
        CallBlock(
            ReplacementFacts(
                CountRule(
                    (), "processor.num_query_tokens", False, "derived", _BLIP2_BLOCK
                ),
                "image_token",
            ),
            PromptUpdateSpec(mode="insert", target="start", source=_BLIP2_BLOCK),
        ),
    ),
    valid(
        "instructblip_video_count_is_a_product_chain",
        """
        class InstructBlipVideoProcessor:
            def __call__(self, images=None, text=None, **kwargs):
                encoding = self.tokenizer(text, **kwargs)
                video_tokens = self.video_token.content * self.num_query_tokens * 4
                video_text_encoding = self.tokenizer(video_tokens, add_special_tokens=False)
                for k in encoding:
                    encoding[k] = [sample + video_text_encoding[k] for sample in encoding[k]]
                return encoding
        """,
        lambda snippet: (
            analyze_call_block(
                snippet.InstructBlipVideoProcessor, "video"
            ).facts.count.result,
            analyze_call_block(
                snippet.InstructBlipVideoProcessor, "video"
            ).update.target,
        ),
        ("processor.num_query_tokens * 4", "end"),
    ),
    invalid(
        "csm_counts_per_audio_not_per_prompt",
        """
        class CsmProcessor:
            def __call__(self, text=None, audio=None, **kwargs):
                for num_audio_tokens in self._counts(audio):
                    audio_tokens = self.audio_token * num_audio_tokens
                    text = [audio_tokens + sample for sample in text]
                return self.tokenizer(text)
        """,
        lambda snippet: analyze_call_block(snippet.CsmProcessor, "audio"),
        refusal=AnalysisError,
        match="builds no `audio_token \\* count` block",
    ),
    invalid(
        "a_5x_processor_has_no_call_of_its_own",
        """
        class LlavaProcessor:
            def replace_image_token(self, image_inputs, image_idx, **kwargs):
                return self.image_token * self.image_seq_length
        """,
        lambda snippet: analyze_call_block(snippet.LlavaProcessor),
        refusal=AnalysisError,
        match="has no __call__ of its own",
    ),
]
