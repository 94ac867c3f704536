"""Field layouts observed from the HF processor itself.

How an output tensor splits into items is a property of the HF processor's
behaviour, so it is read from that behaviour: the processor runs on two items
of different sizes, alone and together, and each output key is classified:

- ``batched``: together it has one row per item, and row *i* equals item *i* alone;
- ``flat_from_sizes``: together it is the items' rows concatenated; the sizes
  come from a batched integer key (``image_grid_thw.prod(-1)`` and the like);
- ``shared``: the same value whatever the items.

Keys the processor drops (``unused_input_names``) never appear here.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from mmport.errors import AnalysisError
from mmport.spec import FieldSpec, Source

__all__ = ["call_processor", "mm_outputs", "observe_fields", "per_item_fields", "refuses_images_alone", "token_id_of"]

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

# Candidate size expressions over a batched integer key K, tried in order.
SIZE_EXPRESSIONS = ("{k}.prod(-1)", "{k}", "{k}.sum(-1)")


def call_processor(
    processor: Any,
    prompt: str | None,
    images: list,
    *,
    videos: list = (),
    audios: list = (),
    sampling_rate: int | None = None,
    **settings: Any,
) -> Any:
    """HF on one prompt and its items, as verify and the analyzers both call it.

    The images are nested in one list, which processors read as one sample
    (flat, where a processor refuses nesting); transformers' advisory
    logging is silenced. A processor that writes its own prompt (ColPali)
    gets the images alone, each its own sample, or else the text alone (see
    :mod:`mmport.analyzers.ownprompt`).

    ``videos`` are ``(frames, metadata)`` pairs as vLLM's loader gives them:
    HF is told not to sample frames (vLLM has) and gets the same metadata,
    unless its ``__call__`` takes videos under another parameter and hands
    its video processor nothing beside them (see :mod:`mmport.analyzers.callparams`).
    ``audios`` are waveforms at ``sampling_rate``, which HF is told.
    Without a ``prompt`` (``None``) HF gets the items alone, as vLLM calls it.
    ``settings`` are processor call kwargs a request carries (``max_pixels``...).
    """
    from mmport.analyzers.ownprompt import writes_own_prompt
    from mmport.sources._quiet import quiet_transformers

    media: dict[str, Any] = dict(settings)
    if videos:
        media.update(_video_arguments(processor, videos))
    if audios:
        media["audio"] = list(audios)
        if sampling_rate is not None:
            media["sampling_rate"] = sampling_rate
    if images and "images" in media:
        raise ValueError(f"{type(processor).__name__} takes images and videos under one parameter, `images`")
    with quiet_transformers():
        if prompt is None:
            return processor(**({"images": list(images)} if images else {}), **media, return_tensors="pt")
        if writes_own_prompt(processor):
            return processor(**({"images": images} if images else {"text": [prompt]}), **settings, return_tensors="pt")
        nested = {"images": [images] if images else None} if "images" not in media else {}
        try:
            return processor(text=[prompt], **nested, **media, return_tensors="pt")
        except ValueError:
            if len(images) < 1:
                raise
            # Some processors (GOT-OCR2) read a nested list as pages of one document
            # and refuse it; a flat list is then their one sample's images.
            return processor(text=[prompt], images=list(images), **media, return_tensors="pt")


def _video_arguments(processor: Any, videos: list) -> dict[str, Any]:
    """HF's call arguments for ``(frames, metadata)`` videos, under the parameter its ``__call__`` takes them by."""
    from mmport.analyzers.callparams import USUAL_PARAMETERS, call_parameter

    parameter = call_parameter(type(processor), "video")
    arguments: dict[str, Any] = {parameter.name if parameter else USUAL_PARAMETERS["video"]: [frames for frames, _ in videos]}
    if parameter is None or parameter.forwards_settings:
        arguments["video_metadata"] = [{k: v for k, v in meta.items() if k != "do_sample_frames"} for _, meta in videos]
        arguments["do_sample_frames"] = False
    return arguments


def token_id_of(processor: Any, token_attr: str = "image_token") -> int:
    """The id of the token ``processor.<token_attr>`` names.

    Most processors also set ``<token_attr>_id``; BLIP-2's keep only the token
    (an ``AddedToken``), so its text is looked up in the tokenizer.
    """
    if hasattr(processor, f"{token_attr}_id"):
        return getattr(processor, f"{token_attr}_id")
    return processor.tokenizer.convert_tokens_to_ids(str(getattr(processor, token_attr)))


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
        return make_video(frames, width, height, index), video_metadata(frames, width, height, 2.0)
    return make_audio(AUDIO_PROBE_SAMPLES[index], index)


def media_kwargs(processor: Any, modality: str, items: list) -> dict[str, Any]:
    """``call_processor``'s keyword arguments for ``items`` of ``modality``."""
    if modality == "image":
        return {"images": items}
    if modality == "video":
        return {"images": [], "videos": items}
    rate = next((getattr(getattr(processor, a, None), "sampling_rate", None) for a in ("feature_extractor", "audio_processor")), None)
    return {"images": [], "audios": items, "sampling_rate": rate}


def _run(processor: Any, items: list, placeholder: str | None, modality: str = "image", **settings: Any) -> dict[str, Any]:
    prompt = (placeholder or "") * len(items)
    return mm_outputs(processor, call_processor(processor, prompt, **media_kwargs(processor, modality, items), **settings))


def _text_only_keys(processor: Any) -> frozenset[str]:
    """Keys HF returns for a prompt without items (a second tokenizer's ids, say).

    InstructBLIP tokenizes the prompt for its Q-Former too; those ids belong
    to the prompt, not to any item, so no field config can carry them.
    """
    import torch

    if processor not in _TEXT_ONLY_KEYS:
        try:
            out = call_processor(processor, "text", [])
            keys = {k for k, v in out.items() if isinstance(v, torch.Tensor) and v.numel() > 0}
        except Exception:  # HF refuses text alone: no key is text-only
            keys = set()
        _TEXT_ONLY_KEYS[processor] = frozenset(keys)
    return _TEXT_ONLY_KEYS[processor]


def mm_outputs(processor: Any, out: Any) -> dict[str, Any]:
    """The multimodal tensors of a processor output: not text-side keys.

    Text-side keys are the tokenizer's inputs, anything shaped like
    ``input_ids`` (token type ids, labels, mm token types) and anything HF
    also returns for text alone.
    """
    import torch

    text_keys = set(processor.tokenizer.model_input_names) | {"labels"} | _text_only_keys(processor)
    shape = out["input_ids"].shape if "input_ids" in out else None
    return {
        k: v
        for k, v in out.items()
        if k not in text_keys and isinstance(v, torch.Tensor) and v.shape != shape
    }


def _size_expression(together: dict[str, Any], rows: list[int]) -> str | None:
    import torch

    for key, value in together.items():
        if value.dtype.is_floating_point or value.dim() == 0 or value.shape[0] != len(rows):
            continue
        # A request without images has no such key: fall back to an empty one.
        empty = f"torch.empty({(0, *value.shape[1:])}, dtype=torch.{str(value.dtype).removeprefix('torch.')})"
        for pattern in SIZE_EXPRESSIONS:
            expr = pattern.format(k=f'hf_inputs.get("{key}", {empty})')
            sizes = eval(expr, {"torch": torch}, {"hf_inputs": together})  # from SIZE_EXPRESSIONS only
            if isinstance(sizes, torch.Tensor) and sizes.dim() == 1 and sizes.tolist() == rows:
                return expr
    return None


def _concatenates(value: Any, singles: list) -> bool:
    import torch

    if value.dim() == 0 or value.shape[0] != sum(s.shape[0] for s in singles):
        return False
    return all(s.shape[1:] == value.shape[1:] for s in singles) and torch.equal(value, torch.cat(singles))


def observe_fields(
    processor: Any,
    placeholder: str | None,
    sources: dict[str, Source],
    modality: str = "image",
    switches: Mapping[str, object] | None = None,
) -> tuple[FieldSpec, ...]:
    """Classify each HF output key by running the processor on items of ``modality`` (see module doc).

    The layout must hold under each of ``switches`` too (a request's setting, as
    ``{"do_pan_and_scan": True}``): Gemma 3 gives an image one row of pixels by
    default and one per crop as well under pan-and-scan, which no batched field
    holds. A layout that changes under a switch is refused with the reason;
    a switch under which HF refuses the probe items has nothing to split.
    """
    fields = _classify(processor, placeholder, sources, modality)
    for name, value in (switches or {}).items():
        try:
            switched = _classify(processor, placeholder, sources, modality, {name: value})
        except AnalysisError as exc:
            raise AnalysisError(f"under {name}={value!r}, {exc}") from exc
        except (ValueError, TypeError, RuntimeError):  # HF refuses the probe items under the switch: nothing to split
            continue
        if _layouts(switched) != _layouts(fields):
            raise AnalysisError(f"HF's outputs split into items as {_layouts(fields)} by default, as {_layouts(switched)} under {name}={value!r}")
    return fields


def _layouts(fields: tuple[FieldSpec, ...]) -> dict[str, str]:
    return {f.key: f"{f.layout}({f.sizes})" if f.sizes else f.layout for f in fields}


def _classify(
    processor: Any, placeholder: str | None, sources: dict[str, Source], modality: str, settings: Mapping[str, object] | None = None
) -> tuple[FieldSpec, ...]:
    """Each output key's layout, observed on two items alone and together under ``settings``."""
    import torch

    settings = settings or {}
    images = [probe_media(modality, i) for i in range(2)]
    alone = [_run(processor, [image], placeholder, modality, **settings) for image in images]
    together = _run(processor, images, placeholder, modality, **settings)
    fields = []
    batched_key = next((k for k, v in together.items() if v.dim() > 0 and v.shape[0] == len(images)), None)
    for key, value in together.items():
        source = sources.get(key, Source("(observed from the HF processor)", 0))
        # An item that HF gives no rows of this key (a small image has no local tiles) leaves it out.
        singles = [a[key] if key in a else value.new_empty((0, *value.shape[1:])) for a in alone]
        if all(torch.equal(value, s) for s in singles) and batched_key not in (None, key):
            fields.append(FieldSpec(key, "shared", source, f'len(hf_inputs["{batched_key}"])'))
        elif value.shape[0] == len(images) and all(s.shape[0] == 1 and torch.equal(value[i], s[0]) for i, s in enumerate(singles)):
            fields.append(FieldSpec(key, "batched", source))
        elif _concatenates(value, singles):
            size_expr = _size_expression(together, [s.shape[0] for s in singles])
            if size_expr is None:
                raise AnalysisError(f"'{key}' concatenates items, but no output gives each item's size")
            fields.append(FieldSpec(key, "flat_from_sizes", source, size_expr))
        else:
            raise AnalysisError(f"'{key}' splits into items in a way mmport does not recognise")
    return tuple(fields)


def per_item_fields(
    processor: Any,
    placeholder: str | None,
    sources: dict[str, Source],
    modality: str = "image",
    switches: Mapping[str, object] | None = None,
) -> tuple[FieldSpec, ...]:
    """One ``batched`` field per output key, for ports that process items one by one.

    A key whose output for one item does not always lead with a batch axis of
    one (an item's audio windows or image patches), by default or under one
    of ``switches`` (Gemma 3's crops under ``do_pan_and_scan``), is marked
    ``rows``: the port keeps each item's output whole. Keys HF returns only
    under a switch are fields too.
    """
    # Every probe size: some keys appear only for large items (local tiles).
    alone = [_run(processor, [probe_media(modality, i)], placeholder, modality) for i in range(2)]
    for name, value in (switches or {}).items():
        try:
            alone += [_run(processor, [probe_media(modality, i)], placeholder, modality, **{name: value}) for i in range(2)]
        except (ValueError, TypeError, RuntimeError):  # HF refuses the probe items under the switch: nothing more to keep
            continue
    keys = dict.fromkeys(key for out in alone for key in out)
    fields = []
    for key in keys:
        leads = [out[key].dim() > 0 and out[key].shape[0] == 1 for out in alone if key in out]
        fields.append(FieldSpec(key, "batched", sources.get(key, Source("(observed from the HF processor)", 0)), rows=not all(leads)))
    return tuple(fields)


def refuses_images_alone(processor: Any, modality: str = "image") -> bool:
    """True when the HF processor will not process items of ``modality`` without any text.

    vLLM calls the HF processor on the multimodal data alone; such a processor
    needs the placeholders as text (``_get_hf_mm_text``).
    """
    try:
        call_processor(processor, None, **media_kwargs(processor, modality, [probe_media(modality, 0)]))
    except Exception:
        return True
    return False
