"""Tokens the tokenizer merges across an item's edges, once HF has expanded the text.

HF tokenizes the prompt *after* expanding each placeholder; vLLM splices each
item's tokens into the prompt's ids. Where an item's text begins or ends with
ordinary text, the two differ on a real tokenizer. Gemma 3 writes ``"\\n\\n"``
around each image, and its vocabulary holds ``"\\n\\n\\n\\n"``::

    HF:     ... <end_of_image> "\\n\\n\\n\\n" <start_of_image> ...     (two images side by side)
    splice: ... <end_of_image> "\\n\\n" "\\n\\n" <start_of_image> ...

The analysis asks HF for one item beside another, and beside newlines and
spaces, and compares HF's ids with the splice of the item's own tokens into
the prompt's. Where they differ, the port must merge the tokens on each side
of every item's edges after replacement, as vLLM's own Gemma 3 port does, or
split them where the pre-tokenizer would (a GPT-2 pre-tokenizer splits
``"\\n\\n"`` before a word): :func:`~mmport.edgetokens.retokenize_edges`
is that rule, and the analysis keeps the port's step only where it explains
HF's ids.
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.examples import VOCAB_TOKENIZER, invalid, snippet_line, valid
from mmport.edgetokens import retokenize_edges
from mmport.errors import FOREIGN_ERRORS
from mmport.hf.processor import text_boundaries
from mmport.spec import EdgeMerges, Source

__all__ = ["analyze_edge_merges"]

# Text beside an item in a prompt whose tokens may merge with the item's edges.
NEIGHBOURS = ("\n", "\n\n", " ", "  ")


def _variants(modality: str) -> list[Any]:
    """The items edges are observed on: the first probe item and, for images, a
    1×1 image, whose layout may drop the wrapper a larger image ends with
    (Granite-Docling: its one tile's row ends in a newline)."""
    from mmport.hf.processor import probe_media
    from mmport.media import make_image

    first = probe_media(modality, 0)
    return [first, make_image(1, 1, 0)] if modality == "image" else [first]


def _tokens(
    processor: Any, text: str, modality: str, count: int, item: Any
) -> list[int]:
    from mmport.hf.processor import call_processor, media_kwargs

    return call_processor(
        processor, text, **media_kwargs(processor, modality, [item] * count)
    )["input_ids"][0].tolist()


def _splice(
    tokenizer: Any, text: str, placeholder_id: int, item: list[int]
) -> tuple[list[int], list[int]]:
    """The prompt's ids with the item's ids at each placeholder, as vLLM writes them; and the item edges."""
    spliced, edges = [], []
    for token in tokenizer(text)["input_ids"]:
        if token != placeholder_id:
            spliced.append(token)
            continue
        edges.append(len(spliced))
        spliced.extend(item)
        edges.append(len(spliced))
    return spliced, edges


def _item_ids(
    processor: Any, placeholder: str, placeholder_id: int, modality: str, item: Any
) -> list[int]:
    """HF's ids for one item alone, less what the tokenizer writes around the placeholder (a BOS)."""
    bare = processor.tokenizer(placeholder)["input_ids"]
    at = bare.index(placeholder_id)
    expanded = _tokens(processor, placeholder, modality, 1, item)
    return expanded[at : len(expanded) - (len(bare) - at - 1)]


def _contexts(placeholder: str) -> list[tuple[str, int]]:
    """Prompts that put an item beside another and beside whitespace, with their item counts."""
    around = [(f"{n}{placeholder}{n}", 1) for n in NEIGHBOURS]
    # Words beside the item: a pre-tokenizer splits a whitespace run before a word.
    words = [(f"hi{placeholder}hi", 1), (f"hi {placeholder} hi", 1)]
    return [(placeholder * 2, 2), (f"{placeholder}\n{placeholder}", 2), *around, *words]


def analyze_edge_merges(
    processor: Any, modality: str, placeholder: str, placeholder_id: int, source: Source
) -> EdgeMerges | None:
    """The merges HF's ids show across ``modality``'s item edges, if any (``source``: where the item's text is written).

    None where splicing gives HF's ids in every context, or HF refuses the
    contexts (the port is judged by verify either way).
    """
    tokenizer = processor.tokenizer
    special = text_boundaries(tokenizer)

    def retokenize(window: list[int]) -> list[int]:
        text = tokenizer.decode(window, clean_up_tokenization_spaces=False)
        return tokenizer.encode(text, add_special_tokens=False)

    seen: list[str] = []
    try:
        for variant in _variants(modality):
            item = _item_ids(processor, placeholder, placeholder_id, modality, variant)
            for text, count in _contexts(placeholder):
                expected = _tokens(processor, text, modality, count, variant)
                spliced, edges = _splice(tokenizer, text, placeholder_id, item)
                shown = text.replace(placeholder, "<item>")
                if (
                    shown not in seen
                    and spliced != expected
                    and retokenize_edges(
                        spliced, edges, special | {placeholder_id}, retokenize
                    )[0]
                    == expected
                ):
                    seen.append(shown)
    except FOREIGN_ERRORS:  # HF refuses these prompts (wrapped or counted placeholders): nothing to learn here
        if not seen:
            return None
    return EdgeMerges(tuple(seen), source) if seen else None


# Gemma 3: "\n\n" on each side of an image, and "\n\n\n\n" in the vocabulary.
_GEMMA3 = (
    VOCAB_TOKENIZER
    + """
class Gemma3Processor:
    def __init__(self, newlines="\\n\\n"):
        self.tokenizer = VocabTokenizer(
            ["\\n", "\\n\\n", "\\n\\n\\n\\n", *"abcdefghijklmnopqrstuvwxyz", " "],
            ["<start_of_image>", "<image_soft_token>", "<end_of_image>"],
        )
        self.boi_token = "<start_of_image>"
        self.image_token = "<image_soft_token>"
        self.full_image_sequence = f"{newlines}{self.boi_token}{self.image_token * 4}<end_of_image>{newlines}"

    def __call__(self, images=None, text=None, return_tensors=None, **kwargs):
        text = [prompt.replace(self.boi_token, self.full_image_sequence) for prompt in text]
        input_ids = [self.tokenizer(prompt)["input_ids"] for prompt in text]
        return {"input_ids": torch.tensor(input_ids), "pixel_values": torch.zeros(len(flat(images)), 3, 4, 4)}
"""
)

# Where the item's text is written: the source the caller hands the analysis, kept in the fact.
_WRITTEN = snippet_line(_GEMMA3, "self.full_image_sequence =")

EXAMPLES = [
    valid(
        "gemma3_newlines_merge_across_item_edges",
        _GEMMA3,
        lambda snippet: analyze_edge_merges(
            snippet.Gemma3Processor(), "image", "<start_of_image>", 0, _WRITTEN
        ),
        EdgeMerges(
            ("<item><item>", "<item>\n<item>", "\n<item>\n", "\n\n<item>\n\n"),
            _WRITTEN,
        ),
    ),
    invalid(
        "items_edged_by_special_tokens_merge_with_nothing",
        _GEMMA3,
        lambda snippet: analyze_edge_merges(
            snippet.Gemma3Processor(newlines=""),
            "image",
            "<start_of_image>",
            0,
            _WRITTEN,
        ),
    ),
]
