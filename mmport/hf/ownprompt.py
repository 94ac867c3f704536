"""Processors that write the whole prompt themselves (ColPali-style retrievers).

ColPali's and ColQwen2's processors take text *or* images, never both
(``processing_colpali.py``: ``"Only one of text or images can be processed
at a time"``). Given images, ``prepare_inputs_layout`` writes one prompt per
image, each image its own sample::

    f"{self.image_token}{self.tokenizer.bos_token}{self.visual_prompt_prefix}\\n"

Given text, ``__call__`` wraps each sample in a query prompt
(``f"{bos}{self.query_prefix}{sample}{suffix}\\n"``). vLLM serves these models
as pooling models, where a request is a prompt plus its data: the request
that matches HF's image path is the prompt HF writes for one image, carrying
that image; the one that matches its text path is the query prompt HF writes.
Both prompts are read from HF as it runs (the text its ``prepare_inputs_layout``
hands on to expansion and tokenization), never rebuilt by mmport.
"""

from __future__ import annotations

import weakref
from typing import Any

from mmport.errors import FOREIGN_ERRORS, AnalysisError

__all__ = ["run_recording_prompt", "writes_own_prompt"]

# Per processor object, whether it writes its own prompt (two HF calls each).
_WRITES_OWN_PROMPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def writes_own_prompt(processor: Any) -> bool:
    """True when HF refuses text beside images but writes a prompt for images alone.

    Processors that merely need a placeholder in the text accept it beside
    the image; processors that take images alone without writing a prompt
    return no ``input_ids`` for them.
    """
    if processor not in _WRITES_OWN_PROMPT:
        _WRITES_OWN_PROMPT[processor] = _refuses_text_with_images(
            processor
        ) and _prompts_images_alone(processor)
    return _WRITES_OWN_PROMPT[processor]


def _probe_image() -> Any:
    from mmport.media import make_image

    return make_image(32, 32, 0)


def _refuses_text_with_images(processor: Any) -> bool:
    from mmport.hf.quiet import quiet_transformers

    text = str(getattr(processor, "image_token", ""))
    try:
        with quiet_transformers():
            processor(text=[text], images=[[_probe_image()]], return_tensors="pt")
    except FOREIGN_ERRORS:  # HF's refusal is the answer
        return True
    return False


def _prompts_images_alone(processor: Any) -> bool:
    from mmport.hf.quiet import quiet_transformers

    try:
        with quiet_transformers():
            out = processor(images=[_probe_image()], return_tensors="pt")
    except FOREIGN_ERRORS:  # HF refuses images alone: it writes no prompt for them
        return False
    return "input_ids" in out


def run_recording_prompt(
    processor: Any, text: str | None, images: list, **settings: Any
) -> tuple[str, Any]:
    """HF's output for one text *or* one image, and the prompt HF wrote for it, under a request's ``settings``.

    The prompt is the first sample's text as HF's ``prepare_inputs_layout``
    returns it: the items not yet expanded, which is what a vLLM request
    carries. The bound method is wrapped on this instance for this one call;
    HF's code runs unchanged.
    """
    from mmport.hf.quiet import quiet_transformers

    seen: list[Any] = []
    layout = processor.prepare_inputs_layout

    def recording_layout(*args: Any, **kwargs: Any) -> Any:
        result = layout(*args, **kwargs)
        # A copy: HF expands the items in this very list afterwards.
        seen.append(None if result[1] is None else list(result[1]))
        return result

    inputs = {"images": images} if images else {"text": [text or ""]}
    processor.prepare_inputs_layout = recording_layout
    try:
        with quiet_transformers():
            out = processor(**inputs, **settings, return_tensors="pt")
    finally:
        del processor.prepare_inputs_layout
    if not seen or not seen[-1]:
        raise AnalysisError(
            f"{type(processor).__name__} writes its prompt outside prepare_inputs_layout; mmport cannot read it"
        )
    return seen[-1][0], out
