"""The modalities a processor handles, and the sub-processor of each.

A processor handles a modality when it holds a sub-processor for it (and,
but for images, names a placeholder token); it may still refuse every
ordinary item of it with a checkpoint's defaults, which only calling it
shows. A processor holding no sub-processor at all may handle images itself
(DeepSeek-VL2's pads, crops and normalizes them in its own code): it does when
its entry point takes ``images`` (:func:`handles_images_itself`).
"""

from __future__ import annotations

import collections
from typing import Any

from mmport.errors import FOREIGN_ERRORS, AnalysisError, one_line

__all__ = [
    "SUB_PROCESSORS",
    "handled_modalities",
    "handles_images_itself",
    "most_written",
    "refused_modalities",
    "sub_processor",
]

# The processor attributes holding each modality's sub-processor, in the order HF looks them up.
SUB_PROCESSORS = {
    "image": ("image_processor",),
    "video": ("video_processor",),
    "audio": ("audio_processor", "feature_extractor"),
}


def handled_modalities(processor: Any) -> list[str]:
    """The modalities ``processor`` takes: a sub-processor for it and (but for images) a placeholder token."""
    from mmport.media import MODALITIES

    attributes = set(processor.get_attributes())
    if handles_images_itself(processor):
        return ["image"]
    found = []
    for modality in MODALITIES:
        has_sub = any(
            getattr(processor, a, None) is not None
            for a in SUB_PROCESSORS[modality]
            if a in attributes
        )
        if has_sub and (
            modality == "image"
            or getattr(processor, f"{modality}_token", None) is not None
        ):
            found.append(modality)
    return found


def handles_images_itself(processor: Any) -> bool:
    """Whether ``processor`` holds no media sub-processor and its own ``__call__`` takes ``images``.

    DeepSeek-VL2's (``attributes = ["tokenizer"]``) tiles and normalizes
    images in ``tokenize_with_images``: mmport probes them through its entry
    point (:func:`mmport.hf.entry.own_call_text`), never through a sub-processor.
    """
    from mmport.hf.entry import own_call_text

    attributes = processor.get_attributes()
    holds_sub = any(a in attributes for subs in SUB_PROCESSORS.values() for a in subs)
    return not holds_sub and own_call_text(type(processor)) is not None


def refused_modalities(processor: Any) -> dict[str, str]:
    """Modalities HF names but refuses even one ordinary item of, with HF's reason.

    With a checkpoint's defaults some processors cannot take a video at all
    (a hook reading metadata the video processor does not return); such a
    side is not ported, and ``inspect`` says why.
    """
    from mmport.hf.processor import probe_media, run_items
    from mmport.hf.wrappers import wrapped_placeholder

    refused = {}
    for modality in handled_modalities(processor):
        if modality == "image":
            continue
        try:
            run_items(
                processor,
                [probe_media(modality, 0)],
                wrapped_placeholder(processor, f"{modality}_token"),
                modality,
            )
        except FOREIGN_ERRORS as exc:
            refused[modality] = (
                f"HF refuses an ordinary {modality} with its placeholder ({one_line(exc)})"
            )
    return refused


def sub_processor(processor: Any, modality: str) -> tuple[str, Any]:
    """``(attribute, object)`` of the sub-processor that handles ``modality``."""
    for attribute in SUB_PROCESSORS[modality]:
        value = getattr(processor, attribute, None)
        if value is not None:
            return attribute, value
    raise AnalysisError(f"{type(processor).__name__} has no {modality} processor")


def most_written(
    ids: list[int], bare: set[int], named: set[int] | frozenset[int]
) -> int | None:
    """The id written most for an item (not in the bare prompt), preferring ids the config names.

    A video's expansion holds timestamps and frame markers beside its
    embedding tokens; the embedding token is one the model's config names.
    """
    counts = collections.Counter(i for i in ids if i not in bare)
    preferred = [(n, i) for i, n in counts.items() if i in named]
    if preferred:
        return max(preferred)[1]
    return counts.most_common(1)[0][0] if counts else None
