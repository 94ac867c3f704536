"""The text a chat prompt gives one item: the layout vLLM hands a port.

A request reaches a port as the model's chat template writes it, not as HF's
internals name the placeholder. Qwen2-VL's template writes an image as
``<|vision_start|><|image_pad|><|vision_end|>``, GLM-4V's a video as
``<|begin_of_video|><|video|><|end_of_video|>``; the processor replaces only
the middle token. Probes carry the same layout, so a port is judged on the
prompts it will really see: tokens that merge across a bare placeholder's
edges (``"  <|video_pad|>"``) cannot merge across a chat prompt's special
tokens, and a port whose prompt update targets the whole layout (vLLM's
GLM-4V) finds it.

Two sources say what the layout is, in this order:

1. the checkpoint's own chat template (:func:`template_layouts`): one user
   message with one item, rendered, and the placeholder with the special
   tokens written right beside it;
2. the model class vLLM registers for the architecture: its
   ``get_placeholder_str``, which vLLM writes into chat prompts for models
   whose template takes text (the backend reads it; synthetic snapshots
   carry no template).

A layout counts only where it holds the placeholder HF expands
(:func:`usable_layout`); else the bare (or ``validate_inputs``-wrapped)
placeholder stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mmport.errors import FOREIGN_ERRORS

__all__ = ["template_layouts", "template_writes", "usable_layout"]

# The text beside the item in the rendered message; never a token, so it bounds the layout.
_TEXT = "mmport probe text"


def _chat_template(processor: Any) -> str | None:
    """The processor's chat template, else its tokenizer's (a checkpoint keeps it in either)."""
    for owner in (processor, getattr(processor, "tokenizer", None)):
        template = getattr(owner, "chat_template", None)
        if isinstance(template, str) and template:
            return template
        if isinstance(template, Mapping) and isinstance(template.get("default"), str):
            return template["default"]
    return None


def _special_texts(processor: Any) -> list[str]:
    """Texts of the tokenizer's added and special tokens, longest first (a run is matched greedily)."""
    tokenizer = getattr(processor, "tokenizer", None)
    added = getattr(tokenizer, "added_tokens_encoder", None) or {}
    return sorted((t for t in added if t.strip()), key=len, reverse=True)


def _grow(rendered: str, start: int, end: int, specials: list[str]) -> tuple[int, int]:
    """Widen ``rendered[start:end]`` over special tokens written right beside it, on both sides."""
    grown = True
    while grown:
        grown = False
        for text in specials:
            if rendered.startswith(text, end):
                end, grown = end + len(text), True
                break
            if start >= len(text) and rendered.startswith(text, start - len(text)):
                start, grown = start - len(text), True
                break
    return start, end


def _layout_in(rendered: str, token: str, specials: list[str]) -> str | None:
    """The placeholder ``token`` and the special tokens around it in one rendered message."""
    at = rendered.find(token)
    if at < 0:
        return None
    # A run of the token itself (a template writing one per frame) is one item's layout.
    end = at
    while rendered.startswith(token, end):
        end += len(token)
    others = [
        text
        for text in specials
        if text != token and not _is_role_marker(text, rendered)
    ]
    start, end = _grow(rendered, at, end, others)
    return rendered[start:end]


def _is_role_marker(text: str, rendered: str) -> bool:
    """Turn markup (``<|im_start|>``, ``<start_of_turn>``) opens the rendered message: never part of an item."""
    return rendered.lstrip().startswith(text)


def template_layouts(processor: Any, tokens: Mapping[str, str]) -> dict[str, str]:
    """Modality → the text the checkpoint's chat template gives one item of it.

    ``tokens`` maps each modality to its placeholder text. Modalities the
    template does not render (or renders without that placeholder) are left
    out; a processor without a template gives nothing.
    """
    template = _chat_template(processor)
    if template is None or not hasattr(processor, "apply_chat_template"):
        return {}
    specials = _special_texts(processor)
    layouts: dict[str, str] = {}
    for modality, token in tokens.items():
        message = [
            {
                "role": "user",
                "content": [{"type": modality}, {"type": "text", "text": _TEXT}],
            }
        ]
        try:
            rendered = processor.apply_chat_template(
                message, chat_template=template, tokenize=False
            )
        except FOREIGN_ERRORS:
            # a template that takes another message form: it says nothing here
            continue
        layout = _layout_in(
            rendered if isinstance(rendered, str) else str(rendered), token, specials
        )
        if layout:
            layouts[modality] = layout
    return layouts


def template_writes(processor: Any, texts: list[str]) -> bool | None:
    """Does the checkpoint's chat template write every one of ``texts`` into a one-message chat? None: no template to ask."""
    template = _chat_template(processor)
    if template is None or not hasattr(processor, "apply_chat_template"):
        return None
    message = [{"role": "user", "content": [{"type": "text", "text": _TEXT}]}]
    try:
        rendered = processor.apply_chat_template(
            message, chat_template=template, tokenize=False, add_generation_prompt=True
        )
    except FOREIGN_ERRORS:
        # a template that takes another message form: it says nothing here
        return None
    rendered = rendered if isinstance(rendered, str) else str(rendered)
    return all(text in rendered for text in texts)


def usable_layout(layout: str | None, placeholder: str | None) -> str | None:
    """``layout`` where it holds the placeholder HF expands and adds text around it; else None."""
    if (
        not layout
        or not placeholder
        or placeholder not in layout
        or layout == placeholder
    ):
        return None
    return layout
