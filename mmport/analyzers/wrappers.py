"""Placeholders the HF processor accepts only inside wrapper tokens, as a port fact.

What HF demands (``<image_start><image><image_end>`` per image, checked in
``validate_inputs``) is read by :func:`mmport.hf.wrappers.wrapper_call`, which
every HF call of mmport's needs; the port learns it here, with the line of
HF's source that demands it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
