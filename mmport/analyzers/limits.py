"""How many items of a modality one prompt may carry, observed from the HF processor.

A processor that inserts one block per *prompt* (BLIP-2: ``num_query_tokens``
image tokens, InstructBLIP-Video: ``num_query_tokens * 4`` video tokens,
however many items come with it) gives the model as many embedding
positions for two items as for one, so a port must allow only one: vLLM
inserts one block per item, and HF's model would find features for two
items in positions for one. Processors that expand per item give more
positions for more items.
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.examples import VOCAB_TOKENIZER, invalid, valid
from mmport.hf.processor import call_processor, media_kwargs, probe_media, token_id_of
from mmport.media import make_image

__all__ = ["observe_limit"]


def _positions(processor: Any, modality: str, count: int) -> int:
    # Items HF can batch: images of one size, videos of one shape.
    items = (
        [make_image(32, 32, i) for i in range(count)]
        if modality == "image"
        else [probe_media(modality, 0)] * count
    )
    out = call_processor(processor, "", **media_kwargs(processor, modality, items))
    return (
        out["input_ids"][0].tolist().count(token_id_of(processor, f"{modality}_token"))
    )


def observe_limit(processor: Any, modality: str = "image") -> int | None:
    """1 when a second item adds no embedding positions, else no limit (``None``)."""
    one = _positions(processor, modality, 1)
    return 1 if one > 0 and _positions(processor, modality, 2) == one else None


# BLIP-2: one block of num_query_tokens image tokens per prompt, however many images come.
_BLIP2 = (
    VOCAB_TOKENIZER
    + """
class Blip2Processor:
    def __init__(self, per_image=False):
        self.tokenizer = VocabTokenizer([*"abcdefghijklmnopqrstuvwxyz", " "], ["<image>"])
        self.image_token = "<image>"
        self.image_token_id = 0
        self.num_query_tokens = 4
        self.per_image = per_image

    def __call__(self, images=None, text=None, return_tensors=None, **kwargs):
        images = flat(images)
        blocks = len(images) if self.per_image else 1
        input_ids = []
        for prompt in text:
            ids = self.tokenizer(prompt)["input_ids"]
            if images:
                ids = [self.image_token_id] * self.num_query_tokens * blocks + ids
            input_ids.append(ids)
        return {"input_ids": torch.tensor(input_ids), "pixel_values": torch.zeros(len(images), 3, 4, 4)}
"""
)

EXAMPLES = [
    valid(
        "blip2_inserts_one_block_per_prompt",
        _BLIP2,
        lambda snippet: observe_limit(snippet.Blip2Processor()),
        1,
    ),
    invalid(
        "a_block_per_image_gives_two_images_room",
        _BLIP2,
        lambda snippet: observe_limit(snippet.Blip2Processor(per_image=True)),
    ),
]
