"""Tokens HF takes in with a placeholder when the prompt writes them around it.

Cosmos 3 Edge's chat template writes a video as
``<|vision_start|><|video_pad|><|vision_end|>``, and its processor replaces that
whole run (or a bare ``<|video_pad|>``) with the video's text, which brings its
own ``<|vision_start|>`` and ``<|vision_end|>`` per frame. A port that replaces
only the bare token keeps the prompt's pair as well: two of each. The fact is
observed on HF itself: one item written bare and written inside each pair of
the processor's own special-token attributes; a pair counts when HF's ids for
the wrapped prompt hold no more of either token than its ids for the bare one.
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.examples import VOCAB_TOKENIZER, invalid, valid
from mmport.errors import FOREIGN_ERRORS
from mmport.hf.processor import call_processor, media_kwargs, probe_media

__all__ = ["consumed_wrappers"]


def _special_attributes(processor: Any, token_attr: str) -> dict[str, int]:
    """The processor's ``*_token`` attributes that hold one special token of its tokenizer, by id (``token_attr`` aside)."""
    tokenizer = processor.tokenizer
    special = set(getattr(tokenizer, "all_special_ids", [])) | set(
        getattr(tokenizer, "added_tokens_decoder", {})
    )
    found: dict[str, int] = {}
    for name, value in vars(processor).items():
        if (
            name == token_attr
            or not name.endswith("_token")
            or not isinstance(value, str)
        ):
            continue
        ids = tokenizer(value, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and ids[0] in special:
            found[name] = ids[0]
    return found


def consumed_wrappers(
    processor: Any, modality: str, token_attr: str
) -> tuple[str, str] | None:
    """The attributes (before, after) of a pair HF takes in with ``modality``'s placeholder, if any.

    None where HF keeps every wrapper the prompt writes (the usual case), or
    refuses the probes.
    """
    token = str(getattr(processor, token_attr))
    attributes = _special_attributes(processor, token_attr)
    starts = [a for a in attributes if "start" in a or "begin" in a]
    ends = [a for a in attributes if "end" in a]
    item = [probe_media(modality, 0)]
    try:
        bare = call_processor(
            processor, token, **media_kwargs(processor, modality, item)
        )["input_ids"][0].tolist()
    except FOREIGN_ERRORS:  # HF refuses the bare placeholder: nothing to learn here
        return None
    for before in starts:
        for after in ends:
            text = f"{getattr(processor, before)}{token}{getattr(processor, after)}"
            try:
                wrapped = call_processor(
                    processor, text, **media_kwargs(processor, modality, item)
                )["input_ids"][0]
            except FOREIGN_ERRORS:  # HF refuses this pair around the placeholder
                continue
            wrapped = wrapped.tolist()
            ids = (attributes[before], attributes[after])
            if all(wrapped.count(i) == bare.count(i) for i in ids) and len(
                wrapped
            ) == len(bare):
                return before, after
    return None


# Cosmos 3 Edge-style: the wrapped run or the bare placeholder becomes the item's text,
# which brings its own start and end tokens (per tile here).
_COSMOS = (
    VOCAB_TOKENIZER
    + """
class Cosmos3EdgeProcessor:
    def __init__(self, takes_wrappers=True):
        self.tokenizer = VocabTokenizer(
            [*"abcdefghijklmnopqrstuvwxyz", " "], ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
        )
        self.image_token = "<|image_pad|>"
        self.vision_start_token = "<|vision_start|>"
        self.vision_end_token = "<|vision_end|>"
        self.takes_wrappers = takes_wrappers

    def __call__(self, images=None, text=None, return_tensors=None, **kwargs):
        item = (self.vision_start_token + self.image_token * 2 + self.vision_end_token) * 2
        wrapped = self.vision_start_token + self.image_token + self.vision_end_token
        if self.takes_wrappers:
            text = [prompt.replace(wrapped, self.image_token) for prompt in text]
        text = [prompt.replace(self.image_token, item) for prompt in text]
        input_ids = [self.tokenizer(prompt)["input_ids"] for prompt in text]
        return {"input_ids": torch.tensor(input_ids), "pixel_values": torch.zeros(len(flat(images)), 3, 4, 4)}
"""
)

EXAMPLES = [
    valid(
        "cosmos3_edge_takes_in_the_prompts_vision_pair",
        _COSMOS,
        lambda snippet: consumed_wrappers(
            snippet.Cosmos3EdgeProcessor(), "image", "image_token"
        ),
        ("vision_start_token", "vision_end_token"),
    ),
    invalid(
        "qwen2_vl_keeps_the_prompts_pair",
        _COSMOS,
        lambda snippet: consumed_wrappers(
            snippet.Cosmos3EdgeProcessor(takes_wrappers=False), "image", "image_token"
        ),
    ),
]
