"""How many images one prompt may carry, observed from the HF processor.

A processor that inserts one block per *prompt* (BLIP-2: ``num_query_tokens``
image tokens, however many images come with it) gives the model as many
embedding positions for two images as for one, so a port must allow only one.
Processors that expand per item give more positions for more items.
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.fields import call_processor, token_id_of

__all__ = ["observe_limit"]


def _positions(processor: Any, count: int) -> int:
    from mmport.verify.probes import make_image

    out = call_processor(processor, "", [make_image(32, 32, i) for i in range(count)])
    return out["input_ids"][0].tolist().count(token_id_of(processor))


def observe_limit(processor: Any) -> int | None:
    """1 when a second image adds no embedding positions, else no limit (``None``)."""
    one = _positions(processor, 1)
    return 1 if one > 0 and _positions(processor, 2) == one else None
