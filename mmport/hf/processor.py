"""mmport's call of the HF processor, the probe items, and reading what HF returns.

Every stage calls HF the one way :func:`call_processor` does: verify's
reference, the synthetic snapshot's checks, and the analyzers that observe
HF's behaviour. Only the call lives here, never a rule derived from its
answers (that is the analyzers'), so the reference and the port share
plumbing, not analysis.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from mmport.errors import FOREIGN_ERRORS

__all__ = [
    "AUDIO_PROBE_SAMPLES",
    "PROBE_SIZES",
    "VIDEO_PROBE_FRAMES",
    "VIDEO_PROBE_SIZES",
    "call_processor",
    "media_kwargs",
    "mm_outputs",
    "probe_media",
    "run_items",
    "text_boundaries",
    "token_id_of",
]

# Two (width, height) sizes far apart in area and aspect, so size-dependent
# layouts (tiles, patch grids) show different row counts; the second is large
# enough that tiling processors (LFM2-VL) split it into several tiles.
PROBE_SIZES = ((64, 48), (1600, 600))
# Likewise for videos (frame counts differ too: a processor that can only stack videos of
# one length is processed one video at a time) and audio (samples at 16 kHz: 1 s, and 35 s,
# past one 30 s window, which some processors cut long audio into).
VIDEO_PROBE_SIZES = ((64, 48), (640, 360))
VIDEO_PROBE_FRAMES = (4, 8)
AUDIO_PROBE_SAMPLES = (16_000, 560_000)

# Per processor object, the keys it returns for text alone (one HF call each).
_TEXT_ONLY_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def call_processor(
    processor: Any,
    prompt: str | None,
    images: list,
    *,
    videos: Sequence[Any] = (),
    audios: Sequence[Any] = (),
    sampling_rate: int | None = None,
    **settings: Any,
) -> Any:
    """HF on one prompt and its items, as verify and the analyzers both call it.

    The images are nested in one list, which processors read as one sample
    (flat, where a processor refuses nesting); transformers' advisory
    logging is silenced. A processor that writes its own prompt (ColPali)
    gets the images alone, each its own sample, or else the text alone (see
    :mod:`mmport.hf.ownprompt`).

    ``videos`` are ``(frames, metadata)`` pairs as vLLM's loader gives them:
    HF is told not to sample frames (vLLM has) and gets the same metadata,
    unless its ``__call__`` takes videos under another parameter and hands
    its video processor nothing beside them (see :mod:`mmport.hf.calls`).
    ``audios`` are waveforms at ``sampling_rate``, which HF is told.
    Without a ``prompt`` (``None``) HF gets the items alone, as vLLM calls it.
    ``settings`` are processor call kwargs a request carries (``max_pixels``...).
    A processor whose entry point is another method gets its one sample
    there (see :mod:`mmport.hf.entry`).
    """
    from mmport.hf.entry import call_entry, entry_point, own_call_text
    from mmport.hf.ownprompt import writes_own_prompt
    from mmport.hf.quiet import quiet_transformers

    # An older processor called by a method of its own (Molmo's ``process``), or by a
    # ``__call__`` of its own that takes the text under another name (DeepSeek-VL2's).
    entry = entry_point(type(processor)) or (
        "__call__" if own_call_text(type(processor)) else None
    )
    if entry is not None:
        with quiet_transformers():
            return call_entry(processor, entry, prompt, images, **settings)
    media: dict[str, Any] = dict(settings)
    if videos:
        media.update(_video_arguments(processor, videos))
    if audios:
        media["audio"] = list(audios)
        if sampling_rate is not None:
            media["sampling_rate"] = sampling_rate
    if images and "images" in media:
        raise ValueError(
            f"{type(processor).__name__} takes images and videos under one parameter, `images`"
        )
    with quiet_transformers():
        if prompt is None:
            return processor(
                **({"images": list(images)} if images else {}),
                **media,
                return_tensors="pt",
            )
        if writes_own_prompt(processor):
            return processor(
                **({"images": images} if images else {"text": [prompt]}),
                **settings,
                return_tensors="pt",
            )
        nested = (
            {"images": [images] if images else None} if "images" not in media else {}
        )
        try:
            return processor(text=[prompt], **nested, **media, return_tensors="pt")
        except ValueError:
            if len(images) < 1:
                raise
            # Some processors (GOT-OCR2) read a nested list as pages of one document
            # and refuse it; a flat list is then their one sample's images.
            return processor(
                text=[prompt], images=list(images), **media, return_tensors="pt"
            )


def _video_arguments(processor: Any, videos: Sequence[Any]) -> dict[str, Any]:
    """HF's call arguments for ``(frames, metadata)`` videos, under the parameter its ``__call__`` takes them by."""
    from mmport.hf.calls import items_call

    parameter, forwards = items_call(type(processor), "video")  # type: ignore[arg-type]  # a class is hashable; mypy misreads type[...] against Hashable
    arguments: dict[str, Any] = {parameter: [frames for frames, _ in videos]}
    if forwards:
        arguments["video_metadata"] = [
            {k: v for k, v in meta.items() if k != "do_sample_frames"}
            for _, meta in videos
        ]
        arguments["do_sample_frames"] = False
    return arguments


def token_id_of(processor: Any, token_attr: str = "image_token") -> int:
    """The id of the token ``processor.<token_attr>`` names.

    Most processors also set ``<token_attr>_id``; BLIP-2's keep only the token
    (an ``AddedToken``), so its text is looked up in the tokenizer. A processor
    called by a method of its own names no image token (Molmo's inserts its
    tokens itself): the id it writes most for one image (:mod:`mmport.hf.entry`).
    """
    from mmport.hf.entry import entry_point, most_written_image_id

    if hasattr(processor, f"{token_attr}_id"):
        return getattr(processor, f"{token_attr}_id")
    if not hasattr(processor, token_attr) and entry_point(type(processor)):
        return most_written_image_id(processor)
    return processor.tokenizer.convert_tokens_to_ids(
        str(getattr(processor, token_attr))
    )


def text_boundaries(tokenizer: Any) -> set[int]:
    """Ids no text run reaches across: special tokens, and added tokens (HF splits text at them first)."""
    return set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)


def probe_media(modality: str, index: int) -> Any:
    """Item ``index`` of the two items fields are observed on: far apart in size, so layouts show.

    Videos differ in frame count and size, audio in length.
    """
    from mmport.media import make_audio, make_image, make_video, video_metadata

    if modality == "image":
        return make_image(*PROBE_SIZES[index], index)
    if modality == "video":
        width, height = VIDEO_PROBE_SIZES[index]
        frames = VIDEO_PROBE_FRAMES[index]
        return make_video(frames, width, height, index), video_metadata(
            frames, width, height, 2.0
        )
    return make_audio(AUDIO_PROBE_SAMPLES[index], index)


def media_kwargs(processor: Any, modality: str, items: list) -> dict[str, Any]:
    """``call_processor``'s keyword arguments for ``items`` of ``modality``."""
    if modality == "image":
        return {"images": items}
    if modality == "video":
        return {"images": [], "videos": items}
    rate = next(
        (
            getattr(getattr(processor, a, None), "sampling_rate", None)
            for a in ("feature_extractor", "audio_processor")
        ),
        None,
    )
    return {"images": [], "audios": items, "sampling_rate": rate}


def run_items(
    processor: Any,
    items: list,
    placeholder: str | None,
    modality: str = "image",
    **settings: Any,
) -> dict[str, Any]:
    """HF's multimodal outputs for ``items`` of ``modality``, each with its ``placeholder`` in the prompt (under ``settings``)."""
    prompt = (placeholder or "") * len(items)
    return mm_outputs(
        processor,
        call_processor(
            processor, prompt, **media_kwargs(processor, modality, items), **settings
        ),
    )


def _text_only_keys(processor: Any) -> frozenset[str]:
    """Keys HF returns for a prompt without items (a second tokenizer's ids, say).

    InstructBLIP tokenizes the prompt for its Q-Former too; those ids belong
    to the prompt, not to any item, so no field config can carry them.
    """
    import torch

    if processor not in _TEXT_ONLY_KEYS:
        try:
            out = call_processor(processor, "text", [])
            keys = {
                k
                for k, v in out.items()
                if isinstance(v, torch.Tensor) and v.numel() > 0
            }
        except FOREIGN_ERRORS:  # HF refuses text alone: no key is text-only
            keys = set()
        _TEXT_ONLY_KEYS[processor] = frozenset(keys)
    return _TEXT_ONLY_KEYS[processor]


def mm_outputs(processor: Any, out: Any) -> dict[str, Any]:
    """The multimodal tensors of a processor output: not text-side keys.

    Text-side keys are the tokenizer's inputs, anything shaped like
    ``input_ids`` (token type ids, labels, mm token types) unless a media
    tensor has that shape as its leading axes (a mask over its frames), and
    anything HF also returns for text alone.
    """
    import torch

    text_keys = (
        set(processor.tokenizer.model_input_names)
        | {"labels"}
        | _text_only_keys(processor)
    )
    shape = out["input_ids"].shape if "input_ids" in out else None
    tensors = {
        k: v
        for k, v in out.items()
        if k not in text_keys and isinstance(v, torch.Tensor)
    }
    media = {k: v for k, v in tensors.items() if v.shape != shape}
    return {
        k: v
        for k, v in tensors.items()
        if k in media or _aligned_with_media(v, media.values())
    }


def _aligned_with_media(value: Any, media: Any) -> bool:
    """Whether ``value`` is shaped as the leading axes of a media tensor: a mask over its
    frames (Fun-ASR-Nano's ``input_features_mask``, as long as the prompt only when the
    audio has as many frames as the prompt has tokens), not a second view of the prompt."""
    return any(
        m.dim() > value.dim() and m.shape[: value.dim()] == value.shape for m in media
    )
