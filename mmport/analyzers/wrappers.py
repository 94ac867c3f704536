"""Placeholders the HF processor accepts only inside wrapper tokens, as a port fact.

What HF demands (``<image_start><image><image_end>`` per image, checked in
``validate_inputs``) is read by :func:`mmport.hf.wrappers.wrapper_call`, which
every HF call of mmport's needs; the port learns it here, with the line of
HF's source that demands it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import find_method
from mmport.hf.wrappers import wrapper_call
from mmport.spec import Source

__all__ = ["PlaceholderWrappers", "analyze_placeholder_wrappers"]


@dataclass(frozen=True)
class PlaceholderWrappers:
    """The processor attributes naming the tokens before and after the placeholder."""

    before: str
    after: str
    source: Source


def analyze_placeholder_wrappers(
    processor_cls: type[Any], token_attr: str = "image_token"
) -> PlaceholderWrappers | None:
    """The wrapper tokens ``validate_inputs`` demands around ``token_attr``, if any."""
    found = find_method(processor_cls, "validate_inputs", models_only=True)
    if found is None:
        return None
    parsed, func = found
    call = wrapper_call(func, token_attr)
    if call is None:
        return None
    before, after, node = call
    return PlaceholderWrappers(before, after, parsed.source(node))


# HunYuanVL's validate_inputs: every image token must sit between its start and end tokens.
_HUNYUAN_VL = """
import re

class HunYuanVLProcessor:
    image_token = "<image>"
    image_start_token = "<img_start>"
    image_end_token = "<img_end>"

    def validate_inputs(self, images=None, text=None, **kwargs):
        if text is not None:
            for prompt in text:
                for match in re.finditer(re.escape(self.image_token), prompt):
                    if not self._has_wrappers(
                        prompt, match.start(), self.image_start_token, self.image_token, self.image_end_token
                    ):
                        raise ValueError("format prompts with the chat template")
"""

EXAMPLES = [
    valid(
        "hunyuan_vl_demands_start_and_end_tokens",
        _HUNYUAN_VL,
        lambda snippet: analyze_placeholder_wrappers(snippet.HunYuanVLProcessor),
        PlaceholderWrappers(
            "image_start_token",
            "image_end_token",
            Source(SNIPPET_FILE, 12, "if not self._has_wrappers("),
        ),
    ),
    invalid(
        "wrappers_of_another_token_are_not_the_images",
        _HUNYUAN_VL,
        lambda snippet: analyze_placeholder_wrappers(
            snippet.HunYuanVLProcessor, "video_token"
        ),
    ),
    invalid(
        "llava_validates_nothing_around_its_placeholder",
        """
        class LlavaProcessor:
            image_token = "<image>"

            def replace_image_token(self, image_inputs, image_idx, **kwargs):
                return self.image_token * self.image_seq_length
        """,
        lambda snippet: analyze_placeholder_wrappers(snippet.LlavaProcessor),
    ),
]
