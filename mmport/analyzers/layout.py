"""Find how the HF processor lays out the prompt around the items.

Most processors *replace* each placeholder in the user's text. Some build the
prompt themselves in ``prepare_inputs_layout`` with an f-string such as::

    f"{IMAGE_TOKEN * len(images)}{self.tokenizer.bos_token}{prompt}\\n"

which means: *insert* the items' tokens at the start with no placeholder in
the text, follow the last one with ``bos_token``, and append ``"\\n"``.
A constructor line ``tokenizer.add_bos_token = False`` means the prompt is
tokenized without special tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, class_assignments, find_method
from mmport.analyzers.textprefix import analyze_text_prefix
from mmport.spec import PromptUpdateSpec, Source

__all__ = ["analyze_layout"]


def _tokenizer_attr(expr: cst.BaseExpression) -> str | None:
    """``self.tokenizer.<attr>`` → ``attr``."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Attribute):
        inner = expr.value
        if (
            inner.attr.value == "tokenizer"
            and isinstance(inner.value, cst.Name)
            and inner.value.value == "self"
        ):
            return expr.attr.value
    return None


def _is_item_block(expr: cst.BaseExpression) -> bool:
    """``TOKEN * n``: the items' placeholder block at the head of the f-string."""
    return isinstance(expr, cst.BinaryOperation) and isinstance(
        expr.operator, cst.Multiply
    )


class _LayoutStrings(cst.CSTVisitor):
    """Collect f-strings that begin with the item block."""

    def __init__(self) -> None:
        self.found: list[cst.FormattedString] = []

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        first = node.parts[0] if node.parts else None
        if isinstance(first, cst.FormattedStringExpression) and _is_item_block(
            first.expression
        ):
            self.found.append(node)


def _insertion_from(
    parsed: ParsedClass, fstring: cst.FormattedString
) -> PromptUpdateSpec:
    trailing: list[str] = []
    suffix = ""
    seen_prompt = False
    for part in fstring.parts[1:]:
        if isinstance(part, cst.FormattedStringText):
            if seen_prompt:
                suffix += part.value.encode().decode("unicode_escape")
            continue
        attr = _tokenizer_attr(
            cst.ensure_type(part, cst.FormattedStringExpression).expression
        )  # an f-string's other kind of part
        if attr and not seen_prompt:
            trailing.append(attr)
        elif attr is None:
            seen_prompt = True
    source = parsed.source(fstring)
    return PromptUpdateSpec(
        mode="insert",
        target="start",
        source=source,
        trailing_tokens=tuple(trailing),
        prompt_suffix=suffix,
        suffix_source=source if suffix else None,
    )


class _BosSwitch(cst.CSTVisitor):
    """Find ``tokenizer.add_bos_token = False`` in a constructor."""

    def __init__(self) -> None:
        self.node: cst.Assign | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if (
            isinstance(target, cst.Attribute)
            and target.attr.value == "add_bos_token"
            and isinstance(node.value, cst.Name)
            and node.value.value == "False"
        ):
            self.node = node


def _bos_switch(processor_cls: type[Any]) -> Source | None:
    """Where the constructor turns its tokenizer's BOS off, if it does."""
    found = find_method(processor_cls, "__init__", models_only=True)
    if found is None:
        return None
    visitor = _BosSwitch()
    found[1].visit(visitor)
    return found[0].source(visitor.node) if visitor.node is not None else None


def _text_defaults_switch(processor_cls: type[Any]) -> Source | None:
    """Where the processor's kwargs defaults tokenize text without special tokens.

    5.x declares them as a ``text_kwargs = {...}`` class attribute of the
    processor, older releases as ``_defaults`` of its kwargs TypedDict.
    """
    import inspect

    text_kwargs = getattr(processor_cls, "text_kwargs", None)
    if isinstance(text_kwargs, dict) and text_kwargs.get("add_special_tokens") is False:
        found = class_assignments(processor_cls).get("text_kwargs")
        if found is not None:
            return found[0].source(found[1])
    kwargs_cls = getattr(processor_cls, "valid_processor_kwargs", None)
    defaults = getattr(kwargs_cls, "_defaults", None) or {}
    if (
        kwargs_cls is not None
        and defaults.get("text_kwargs", {}).get("add_special_tokens") is False
    ):
        lines, first = inspect.getsourcelines(kwargs_cls)
        offset = next(
            (i for i, line in enumerate(lines) if "add_special_tokens" in line), 0
        )
        file = inspect.getsourcefile(kwargs_cls) or ""
        return Source(
            file.split("transformers/", 1)[-1], first + offset, lines[offset].strip()
        )
    return None


class _SuffixStrings(cst.CSTVisitor):
    """Collect ``f"{sample}{self.tokenizer.sep_token}"``: a prompt with tokens appended."""

    def __init__(self) -> None:
        self.found: list[tuple[cst.FormattedString, tuple[str, ...]]] = []

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        first, rest = (node.parts[0], node.parts[1:]) if node.parts else (None, ())
        if not (
            isinstance(first, cst.FormattedStringExpression)
            and isinstance(first.expression, cst.Name)
        ):
            return
        attrs = [
            _tokenizer_attr(p.expression)
            if isinstance(p, cst.FormattedStringExpression)
            else None
            for p in rest
        ]
        named = [attr for attr in attrs if attr]
        if rest and len(named) == len(attrs):
            self.found.append((node, tuple(named)))


def _appended_tokens(processor_cls: type[Any]) -> tuple[tuple[str, ...], Source] | None:
    """Tokenizer tokens the processor's own ``__call__`` appends to every prompt.

    Chameleon (chat mode, its default) does
    ``text = [f"{sample}{self.tokenizer.sep_token}" for sample in text]``.
    """
    found = find_method(processor_cls, "__call__", models_only=True)
    if found is None:
        return None
    visitor = _SuffixStrings()
    found[1].visit(visitor)
    if not visitor.found:
        return None
    node, attrs = visitor.found[0]
    return attrs, found[0].source(node)


def analyze_layout(
    processor_cls: type[Any],
    placeholder_source: Source,
    inserted: PromptUpdateSpec | None = None,
) -> PromptUpdateSpec:
    """Replacement of the placeholder, unless the processor inserts items itself.

    ``inserted`` is an insertion already read from the processor's ``__call__``
    (see :mod:`mmport.analyzers.callblock`); the tokenizer switches and a
    token prepended to the text (:mod:`mmport.analyzers.textprefix`) still apply.
    """
    spec = inserted or _analyze_layout(processor_cls, placeholder_source)
    prefix = analyze_text_prefix(processor_cls)
    if prefix is not None:
        spec = dataclasses.replace(spec, prefix=prefix)
    appended = _appended_tokens(processor_cls)
    if appended is not None and not spec.prompt_suffix:
        spec = dataclasses.replace(
            spec, suffix_tokens=appended[0], suffix_source=appended[1]
        )
    # The constructor's BOS switch holds for a replacing layout too (ColPali
    # writes "<bos>" into its own prompt and turns the tokenizer's off).
    switch = _text_defaults_switch(processor_cls) or _bos_switch(processor_cls)
    if switch is not None and spec.add_special_tokens:
        return dataclasses.replace(
            spec, add_special_tokens=False, special_tokens_source=switch
        )
    return spec


def _analyze_layout(
    processor_cls: type[Any], placeholder_source: Source
) -> PromptUpdateSpec:
    # Only a model's own layout can build the prompt; the base class's is generic.
    found = find_method(processor_cls, "prepare_inputs_layout", models_only=True)
    if found is not None:
        parsed, func = found
        visitor = _LayoutStrings()
        func.visit(visitor)
        if visitor.found:
            switch = _bos_switch(processor_cls)
            return dataclasses.replace(
                _insertion_from(parsed, visitor.found[0]),
                add_special_tokens=switch is None,
                special_tokens_source=switch,
            )
    return PromptUpdateSpec(
        mode="replace", target="placeholder", source=placeholder_source
    )


# PaliGemma-style: the items' tokens, the tokenizer's BOS, the prompt and "\n", with the tokenizer's BOS off.
_PALIGEMMA = """
IMAGE_TOKEN = "<image>"

class PaliGemmaProcessor:
    def __init__(self, image_processor=None, tokenizer=None):
        tokenizer.add_bos_token = False

    def prepare_inputs_layout(self, images=None, text=None, **kwargs):
        text = [f"{IMAGE_TOKEN * self.image_seq_length * len(images)}{self.tokenizer.bos_token}{prompt}\\n" for prompt in text]
        return images, text, None, None
"""

_PLACEHOLDER = Source(SNIPPET_FILE, 1, 'self.image_token = "<image>"')

EXAMPLES = [
    valid(
        "paligemma_inserts_items_before_bos_and_prompt",
        _PALIGEMMA,
        lambda snippet: analyze_layout(snippet.PaliGemmaProcessor, _PLACEHOLDER),
        PromptUpdateSpec(
            mode="insert",
            target="start",
            source=Source(
                SNIPPET_FILE,
                8,
                'text = [f"{IMAGE_TOKEN * self.image_seq_length * len(images)}{self.tokenizer.bos_token}{prompt}\\n" for prompt in text]',
            ),
            trailing_tokens=("bos_token",),
            prompt_suffix="\n",
            suffix_source=Source(
                SNIPPET_FILE,
                8,
                'text = [f"{IMAGE_TOKEN * self.image_seq_length * len(images)}{self.tokenizer.bos_token}{prompt}\\n" for prompt in text]',
            ),
            add_special_tokens=False,
            special_tokens_source=Source(
                SNIPPET_FILE, 5, "tokenizer.add_bos_token = False"
            ),
        ),
    ),
    valid(
        "chameleon_appends_the_separator_to_each_prompt",
        """
        class ChameleonProcessor:
            def __call__(self, images=None, text=None, return_for_text_completion=False, **kwargs):
                if not return_for_text_completion:
                    text = [f"{sample}{self.tokenizer.sep_token}" for sample in text]
                return super().__call__(images=images, text=text, **kwargs)
        """,
        lambda snippet: analyze_layout(snippet.ChameleonProcessor, _PLACEHOLDER),
        PromptUpdateSpec(
            mode="replace",
            target="placeholder",
            source=_PLACEHOLDER,
            suffix_tokens=("sep_token",),
            suffix_source=Source(
                SNIPPET_FILE,
                4,
                'text = [f"{sample}{self.tokenizer.sep_token}" for sample in text]',
            ),
        ),
    ),
    invalid(
        "layout_that_only_checks_the_prompt_inserts_nothing",
        """
        class LlavaProcessor:
            def prepare_inputs_layout(self, images=None, text=None, **kwargs):
                if not any(f"{self.image_token}" in sample for sample in text):
                    raise ValueError("write the image token into the prompt")
                return images, text, None, None
        """,
        lambda snippet: analyze_layout(snippet.LlavaProcessor, _PLACEHOLDER),
        expected=PromptUpdateSpec(
            mode="replace", target="placeholder", source=_PLACEHOLDER
        ),
    ),
]
