"""Items HF processes differently in a prompt holding more of them (DeepSeek-VL2).

DeepSeek-VL2 tiles an image only when its prompt holds at most two
(``cropping=len(images) <= 2``, processing_deepseek_vl_v2.py:430). vLLM's
processor cache keeps each item as processed alone and its encoder cache keys
embeddings by the item's hash: a port must process prompts of more without
that cache and hash their items apart from themselves alone, as vLLM's own
deepseek_vl2.py does. This is a property of HF's processor, known and stated,
not a port's failure; the port is judged on how it holds it.

:func:`alone_up_to` finds the number by running HF: an item alone, then
beside 1, 2, ... copies of itself, each copy's share of HF's answer compared
with the item's alone. In a probe of more, an item's reference is its share
of HF's answer for as many copies of it (:func:`among_copies`), and the cache
check asks that the port's hash of the item differ from its hash alone
(:func:`mmport.verify.checks.check_company_hash`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmport.verify.probes import MAX_PROBE_ITEMS, SIZES, Item

if TYPE_CHECKING:
    from mmport.verify.reference import HFOutput, HFReference

__all__ = ["COPIES_PROBED", "alone_up_to", "among_copies", "company_note"]

# The most copies of an item a prompt is probed with: one past the most a probe carries.
COPIES_PROBED = MAX_PROBE_ITEMS + 1


def _probe_item(hf: HFReference, modality: str) -> Item:
    """The item the number is probed with: for images the largest probe size (a small one may
    fit one tile however the prompt is cut), else the reference's ordinary item."""
    if modality == "image":
        return Item("image", max(SIZES, key=lambda size: size[0] * size[1]))
    return hf.example(modality)


def alone_up_to(hf: HFReference, modality: str) -> int | None:
    """The most items of ``modality`` a prompt holds with HF processing each as alone; None if no count probed changes it."""
    item = _probe_item(hf, modality)
    alone = among_copies(hf, item, 1)
    for copies in range(2, COPIES_PROBED + 1):
        if not _same(among_copies(hf, item, copies), alone):
            return copies - 1
    return None


def among_copies(
    hf: HFReference, item: Item, copies: int, setting: Any = None
) -> HFOutput:
    """HF's answer for one item in a prompt of ``copies`` copies of it, as that copy's share.

    Its ids are the prompt's own (HF's for the empty prompt) around the
    copy's share of the items' tokens; its outputs are each output's first
    rows, a ``copies``-th of them (a row count they do not divide is a
    value the items share, kept whole).
    """
    from mmport.verify.reference import HFOutput

    placeholder = hf.modalities[item.modality].placeholder or ""
    out = hf.run(placeholder * copies, [item] * copies, setting)
    bare = hf.run("", [], setting).input_ids
    ids = out.input_ids
    start = 0
    while start < min(len(ids), len(bare)) and ids[start] == bare[start]:
        start += 1
    end = len(ids) - (len(bare) - start)
    share = ids[start:end][: (end - start) // copies]
    mm = {key: _first_share(value, copies) for key, value in out.mm.items()}
    return HFOutput([*ids[:start], *share, *ids[end:]], mm, mm, placeholder)


def _first_share(value: Any, copies: int) -> Any:
    rows = value.shape[0] if value.dim() else 0
    return value[: rows // copies] if rows and rows % copies == 0 else value


def _same(one: HFOutput, other: HFOutput) -> bool:
    import torch

    return (
        one.input_ids == other.input_ids
        and one.mm.keys() == other.mm.keys()
        and all(
            one.mm[k].shape == other.mm[k].shape and torch.equal(one.mm[k], other.mm[k])
            for k in one.mm
        )
    )


def company_note(modality: str, limit: int) -> str:
    """What verify says of a modality whose items HF processes as alone only in prompts of at most ``limit``."""
    return (
        f"HF processes {_with_article(modality)} as it does alone only in a prompt of at most {limit} "
        f"{modality}s (observed on copies of one); in a probe of more, each is compared with "
        "its share of HF's answer for as many copies of it, and the port must hash it apart "
        "from itself alone (vLLM's caches serve items by hash)"
    )


def _with_article(modality: str) -> str:
    return f"an {modality}" if modality[0] in "aeiou" else f"a {modality}"
