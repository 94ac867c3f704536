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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmport.analyzers.examples import VOCAB_TOKENIZER, invalid, valid
from mmport.errors import FOREIGN_ERRORS, AnalysisError
from mmport.hf.processor import call_processor, media_kwargs, probe_media
from mmport.hf.processor import (
    run_items as _run,
)  # the name this module's rules were written with
from mmport.spec import FieldSpec, FieldsStrategy, Source

__all__ = [
    "FieldLayout",
    "observe_fields",
    "per_item_fields",
    "refuses_images_alone",
]

# How HF refuses probe items under a flipped switch: a value or type it rejects,
# a tensor it cannot build, or its own code path the switch leaves broken
# (transformers 5.20's MiniCPM-V 4.6 preprocessing reads an unset local, an
# UnboundLocalError, when do_resize is off).
HF_REFUSALS = (ValueError, TypeError, RuntimeError, NameError)


@dataclass(frozen=True)
class FieldLayout:
    """How a port splits HF's outputs into items, and (``per_item``) why not as observed across items."""

    fields: tuple[FieldSpec, ...]
    strategy: FieldsStrategy = "derived"
    reason: str = ""


# Candidate size expressions over a batched integer key K, tried in order. The last:
# a grid's tiles and one view of the whole item beside them (DeepSeek-VL2's
# ``images_spatial_crop`` [w, h] gives w * h tiles, after its global view).
SIZE_EXPRESSIONS = ("{k}.prod(-1)", "{k}", "{k}.sum(-1)", "{k}.prod(-1) + 1")


def _size_expression(together: dict[str, Any], rows: list[int]) -> str | None:
    import torch

    for key, value in together.items():
        if (
            value.dtype.is_floating_point
            or value.dim() == 0
            or value.shape[0] != len(rows)
        ):
            continue
        # A request without images has no such key: fall back to an empty one.
        empty = f"torch.empty({(0, *value.shape[1:])}, dtype=torch.{str(value.dtype).removeprefix('torch.')})"
        for pattern in SIZE_EXPRESSIONS:
            expr = pattern.format(k=f'hf_inputs.get("{key}", {empty})')
            sizes = eval(
                expr, {"torch": torch}, {"hf_inputs": together}
            )  # from SIZE_EXPRESSIONS only
            if (
                isinstance(sizes, torch.Tensor)
                and sizes.dim() == 1
                and sizes.tolist() == rows
            ):
                return expr
    return None


def _concatenates(value: Any, singles: list) -> bool:
    import torch

    if value.dim() == 0 or value.shape[0] != sum(s.shape[0] for s in singles):
        return False
    return all(s.shape[1:] == value.shape[1:] for s in singles) and torch.equal(
        value, torch.cat(singles)
    )


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
            switched = _classify(
                processor, placeholder, sources, modality, {name: value}
            )
        except AnalysisError as exc:
            raise AnalysisError(f"under {name}={value!r}, {exc}") from exc
        except (
            HF_REFUSALS
        ):  # HF refuses the probe items under the switch: nothing to split
            continue
        if _layouts(switched) != _layouts(fields):
            raise AnalysisError(
                f"HF's outputs split into items as {_layouts(fields)} by default, as {_layouts(switched)} under {name}={value!r}"
            )
    return fields


def _layouts(fields: tuple[FieldSpec, ...]) -> dict[str, str]:
    return {f.key: f"{f.layout}({f.sizes})" if f.sizes else f.layout for f in fields}


def _classify(
    processor: Any,
    placeholder: str | None,
    sources: dict[str, Source],
    modality: str,
    settings: Mapping[str, object] | None = None,
) -> tuple[FieldSpec, ...]:
    """Each output key's layout, observed on two items alone and together under ``settings``."""
    import torch

    settings = settings or {}
    images = [probe_media(modality, i) for i in range(2)]
    alone = [
        _run(processor, [image], placeholder, modality, **settings) for image in images
    ]
    together = _run(processor, images, placeholder, modality, **settings)
    fields = []
    batched_key = next(
        (k for k, v in together.items() if v.dim() > 0 and v.shape[0] == len(images)),
        None,
    )
    for key, value in together.items():
        source = sources.get(key, Source("(observed from the HF processor)", 0))
        # An item that HF gives no rows of this key (a small image has no local tiles) leaves it out.
        singles = [
            a[key] if key in a else value.new_empty((0, *value.shape[1:]))
            for a in alone
        ]
        if all(torch.equal(value, s) for s in singles) and batched_key not in (
            None,
            key,
        ):
            fields.append(
                FieldSpec(key, "shared", source, f'len(hf_inputs["{batched_key}"])')
            )
        elif value.shape[0] == len(images) and all(
            s.shape[0] == 1 and torch.equal(value[i], s[0])
            for i, s in enumerate(singles)
        ):
            fields.append(FieldSpec(key, "batched", source))
        elif _concatenates(value, singles):
            size_expr = _size_expression(together, [s.shape[0] for s in singles])
            if size_expr is None:
                raise AnalysisError(
                    f"'{key}' concatenates items, but no output gives each item's size"
                )
            fields.append(FieldSpec(key, "flat_from_sizes", source, size_expr))
        else:
            raise AnalysisError(
                f"'{key}' splits into items in a way mmport does not recognise"
            )
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
    alone = [
        _run(processor, [probe_media(modality, i)], placeholder, modality)
        for i in range(2)
    ]
    for name, value in (switches or {}).items():
        try:
            alone += [
                _run(
                    processor,
                    [probe_media(modality, i)],
                    placeholder,
                    modality,
                    **{name: value},
                )
                for i in range(2)
            ]
        except (
            HF_REFUSALS
        ):  # HF refuses the probe items under the switch: nothing more to keep
            continue
    keys = dict.fromkeys(key for out in alone for key in out)
    fields = []
    for key in keys:
        leads = [
            out[key].dim() > 0 and out[key].shape[0] == 1 for out in alone if key in out
        ]
        fields.append(
            FieldSpec(
                key,
                "batched",
                sources.get(key, Source("(observed from the HF processor)", 0)),
                rows=not all(leads),
            )
        )
    return tuple(fields)


def refuses_images_alone(processor: Any, modality: str = "image") -> bool:
    """True when the HF processor will not process items of ``modality`` without any text.

    vLLM calls the HF processor on the multimodal data alone; such a processor
    needs the placeholders as text (``_get_hf_mm_text``).
    """
    try:
        call_processor(
            processor,
            None,
            **media_kwargs(processor, modality, [probe_media(modality, 0)]),
        )
    except FOREIGN_ERRORS:  # HF's refusal is the answer
        return True
    return False


# Qwen2-VL-style: each image's patches concatenated, its (t, h, w) grid one row per image.
_QWEN2_VL = (
    VOCAB_TOKENIZER
    + """
class Qwen2VLProcessor:
    def __init__(self, counts_images=False, needs_text=False):
        self.tokenizer = VocabTokenizer([*"abcdefghijklmnopqrstuvwxyz", " "], ["<|image_pad|>"])
        self.image_token = "<|image_pad|>"
        self.image_token_id = 0
        self.patch_size = 16
        self.counts_images = counts_images
        self.needs_text = needs_text

    def __call__(self, images=None, text=None, return_tensors=None, **kwargs):
        if text is None and self.needs_text:
            raise ValueError("images need a prompt with their placeholders")
        images = flat(images)
        out = {"input_ids": torch.tensor([self.tokenizer(prompt)["input_ids"] for prompt in text or [""]])}
        if not images:
            return out
        grids = [[1, image.height // self.patch_size, image.width // self.patch_size] for image in images]
        out["pixel_values"] = torch.cat(
            [torch.full((t * h * w, 4), float(image.width)) for image, (t, h, w) in zip(images, grids)]
        )
        out["image_grid_thw"] = torch.tensor(grids)
        if self.counts_images:
            out["num_images"] = torch.tensor([len(images)])
        return out
"""
)

_OBSERVED = Source("(observed from the HF processor)", 0)

EXAMPLES = [
    valid(
        "qwen2_vl_patches_split_by_the_grid",
        _QWEN2_VL,
        lambda snippet: observe_fields(snippet.Qwen2VLProcessor(), "<|image_pad|>", {}),
        (
            FieldSpec(
                "pixel_values",
                "flat_from_sizes",
                _OBSERVED,
                'hf_inputs.get("image_grid_thw", torch.empty((0, 3), dtype=torch.int64)).prod(-1)',
            ),
            FieldSpec("image_grid_thw", "batched", _OBSERVED),
        ),
    ),
    valid(
        "qwen2_vl_item_by_item_keeps_an_images_patch_rows",
        _QWEN2_VL,
        lambda snippet: per_item_fields(
            snippet.Qwen2VLProcessor(), "<|image_pad|>", {}
        ),
        (
            FieldSpec("pixel_values", "batched", _OBSERVED, rows=True),
            FieldSpec("image_grid_thw", "batched", _OBSERVED),
        ),
    ),
    valid(
        "a_processor_that_needs_the_placeholders_as_text",
        _QWEN2_VL,
        lambda snippet: refuses_images_alone(snippet.Qwen2VLProcessor(needs_text=True)),
        True,
    ),
    invalid(
        "qwen2_vl_takes_images_alone",
        _QWEN2_VL,
        lambda snippet: refuses_images_alone(snippet.Qwen2VLProcessor()),
        expected=False,
    ),
    invalid(
        "a_count_of_the_prompts_images_splits_into_no_items",
        _QWEN2_VL,
        lambda snippet: observe_fields(
            snippet.Qwen2VLProcessor(counts_images=True), "<|image_pad|>", {}
        ),
        refusal=AnalysisError,
        match="'num_images' splits into items in a way mmport does not recognise",
    ),
]
