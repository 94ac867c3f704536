"""LLaVA processing for vLLM 0.33 that finds its placeholder by a token text, as vLLM's MiniCPM-V 4.6 port does.

A test fixture: ``llava_handwritten.py`` (a correct port) whose prompt
update targets the ids of a fixed text, ``"<|image_pad|>"``, rather than the
tokenizer's own image token. A checkpoint whose tokenizer writes its
placeholder that way is served; a synthetic snapshot names that token
``<image>``, so vLLM finds no placeholder (nor HF in the port's dummy text): ``mmport verify`` must say it
cannot judge the port on mmport's own invented tokenizer, and that the port
fails on a tokenizer that is a checkpoint's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from vllm.multimodal.processing import PromptReplacement

_spec = importlib.util.spec_from_file_location(
    "llava_handwritten_base", Path(__file__).with_name("llava_handwritten.py")
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

# The placeholder text this port assumes every checkpoint's tokenizer holds as one token.
IMAGE_PATTERN = "<|image_pad|>"


class LlavaPatternProcessingInfo(_base.LlavaProcessingInfo):
    """The correct port's counts and limits."""


class LlavaPatternDummyInputsBuilder(_base.LlavaDummyInputsBuilder):
    """The correct port's dummy images, in a text written with the fixed placeholder."""

    def get_dummy_text(self, mm_counts):
        return IMAGE_PATTERN * mm_counts.get("image", 0)


class LlavaPatternMultiModalProcessor(_base.LlavaMultiModalProcessor):
    """The correct port's replacement, found by the ids of a fixed text."""

    def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
        (update,) = super()._get_prompt_updates(
            mm_items, hf_processor_mm_kwargs, out_mm_kwargs
        )
        pattern = self.info.get_tokenizer().encode(
            IMAGE_PATTERN, add_special_tokens=False
        )
        return [
            PromptReplacement(
                modality="image", target=pattern, replacement=update.replacement
            )
        ]
