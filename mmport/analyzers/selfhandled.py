"""The image side of a processor that handles images itself (DeepSeek-VL2).

DeepSeek-VL2's processor holds a tokenizer and nothing else
(``attributes = ["tokenizer"]``): ``tokenize_with_images`` pads, tiles and
normalizes each image and writes its tokens in place of ``<image>``, all
inline, called from a ``__call__`` of its own that takes the prompt as
``prompt``. No hook holds the count, so the port delegates it to that
``__call__`` at run time, visibly (the reason names it). What running it
shows is read here, with the user's consent:

- what it takes for a sample without images (``None``, else ``[]``);
- how it tokenizes a prompt's text: DeepSeek-VL2's ``encode`` takes the
  text's tokens without special tokens and puts the tokenizer's BOS first
  itself, so the port tokenizes without special tokens and puts it there too
  (whether or not the tokenizer would add it);
- whether an item's tokens and outputs stay those it has alone as the
  prompt holds more items. DeepSeek-VL2 tiles an image only when the prompt
  holds at most two (``cropping=len(images) <= 2``): one image probed alone,
  then beside 1, 2, 3 copies of itself, keeps its tokens up to two and
  loses its tiles at three, so ``alone_up_to`` is 2.

The outputs' layout is observed as for any processor
(:func:`mmport.analyzers.fields.observe_fields`): mmport's call of HF
normalizes this processor's collated batch (:mod:`mmport.hf.entry`).
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import find_method
from mmport.errors import FOREIGN_ERRORS, AnalysisError
from mmport.hf.entry import own_call_text
from mmport.hf.processor import call_processor, mm_outputs, probe_media
from mmport.spec import SelfHandledSpec, Source, TextPrefix

__all__ = [
    "ITEMS_PROBED",
    "analyze_self_handled",
    "item_tokens_among_copies",
    "observed_text_prefix",
]

# The most items a prompt is probed with for an item's tokens to change with their number.
ITEMS_PROBED = 4
# The text a prompt's own tokenization is observed on, and the tokenizer's special
# tokens HF may put before it.
PROBE_TEXT = "Describe it."
SPECIAL_TOKENS = ("bos_token", "eos_token", "cls_token")


def analyze_self_handled(processor: Any, placeholder: str) -> SelfHandledSpec:
    """How the port calls ``processor``'s own ``__call__``, and up to how many items an item is as alone."""
    processor_cls = type(processor)
    text = own_call_text(processor_cls)
    found = find_method(processor_cls, "__call__", models_only=True)
    if text is None or found is None:
        raise AnalysisError(
            f"{processor_cls.__name__}: no __call__ of its own taking a prompt and images"
        )
    source = found[0].source(found[1])
    return SelfHandledSpec(
        text_parameter=text,
        no_images=_no_images(processor, text),
        source=source,
        alone_up_to=_alone_up_to(processor, placeholder),
        items_source=source,
    )


def _no_images(processor: Any, text: str) -> str:
    """What the ``__call__`` takes for a sample without images: ``None``, else the empty list."""
    try:
        processor(**{text: ""}, images=None)
    except TypeError:  # it measures or iterates the list (DeepSeek-VL2's len(images))
        return "[]"
    return "None"


def item_tokens_among_copies(
    processor: Any, placeholder: str, item: Any, copies: int
) -> tuple[list[int], dict[str, tuple[int, ...]]]:
    """One item's tokens and its outputs' shapes in a prompt of ``copies`` copies of it.

    The prompt's ids are the tokens of the empty prompt around the items'
    (the BOS HF puts first), and the items' tokens, all alike, share them
    equally; so do the outputs' rows.
    """
    bare = call_processor(processor, "", [])["input_ids"][0].tolist()
    out = call_processor(processor, placeholder * copies, [item] * copies)
    ids = out["input_ids"][0].tolist()
    start = 0
    while start < min(len(bare), len(ids)) and ids[start] == bare[start]:
        start += 1
    expanded = ids[start : len(ids) - (len(bare) - start)]
    each = len(expanded) // copies
    shapes = {
        key: (value.shape[0] // copies, *value.shape[1:])
        for key, value in mm_outputs(processor, out).items()
    }
    return expanded[:each], shapes


def _alone_up_to(processor: Any, placeholder: str) -> int | None:
    """The most items a prompt holds with an item's tokens and outputs those it has alone; None if never changed."""
    # The larger probe image: a small one may fit one tile however the prompt is cut.
    item = probe_media("image", 1)
    try:
        alone = item_tokens_among_copies(processor, placeholder, item, 1)
        for copies in range(2, ITEMS_PROBED + 1):
            if item_tokens_among_copies(processor, placeholder, item, copies) != alone:
                return copies - 1
    except FOREIGN_ERRORS as exc:
        raise AnalysisError(
            f"{type(processor).__name__}.__call__ refuses a prompt of copies of one image: {exc}"
        ) from exc
    return None


def observed_text_prefix(processor: Any, source: Source) -> TextPrefix | None:
    """The special token HF puts before a prompt's text, tokenized without special tokens; None for none.

    HF's ids for a prompt without images are the text's tokens (no special
    tokens), after at most one of the tokenizer's named special tokens:
    DeepSeek-VL2 gives ``[bos_token_id, *text]``. Anything else is refused.
    """
    tokenizer = processor.tokenizer
    text = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    ids = call_processor(processor, PROBE_TEXT, [])["input_ids"][0].tolist()
    if ids == text:
        return None
    named = [
        attr
        for attr in SPECIAL_TOKENS
        if ids[:1] == [getattr(tokenizer, f"{attr}_id", None)]
    ]
    if ids[1:] != text or not named:
        raise AnalysisError(
            f"{type(processor).__name__}.__call__ ({source}) gives {PROBE_TEXT!r} the ids {ids}, "
            f"not its tokens {text} after at most one special token"
        )
    return TextPrefix((named[0],), source)


# DeepSeek-VL2's __call__, cut to what the rule reads: it takes len(images).
_DEEPSEEK_VL2 = """
class DeepseekVLV2Processor:
    def __call__(self, *, prompt=None, conversations=None, images=None, **kwargs):
        return {"input_ids": [[0] * (1 + len(images))]}
"""

EXAMPLES = [
    valid(
        "deepseek_vl2_takes_the_empty_list_without_images",
        _DEEPSEEK_VL2,
        lambda snippet: _no_images(snippet.DeepseekVLV2Processor(), "prompt"),
        "[]",
    ),
    valid(
        "a_call_that_takes_none_without_images",
        """
        class AcmeProcessor:
            def __call__(self, *, prompt=None, images=None):
                return {"input_ids": [[0] * (1 + len(images or []))]}
        """,
        lambda snippet: _no_images(snippet.AcmeProcessor(), "prompt"),
        "None",
    ),
    invalid(
        "a_processor_without_a_call_of_its_own_is_not_ported_here",
        """
        class LlavaProcessor:
            def replace_image_token(self, image_inputs, image_idx, **kwargs):
                return self.image_token * self.image_seq_length
        """,
        lambda snippet: analyze_self_handled(snippet.LlavaProcessor(), "<image>"),
        refusal=AnalysisError,
        match="no __call__ of its own taking a prompt and images",
    ),
]
