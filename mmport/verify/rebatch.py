"""Put a port's per-item kwargs back into the layout the HF model takes.

vLLM keeps each item's slice of every field (what the port's field config
cut out) and the model class re-batches them. To feed the *HF* model, the
slices are combined the one way whose shape is HF's own output for the same
items: stacked (one row per item), concatenated (rows of all items),
concatenated under a batch axis of one (a prompt's crops, as Idefics3 lays
them out), or taken once (a shared value). A port that cut its items wrongly
yields slices that fit no such layout, or fit it with other values; either
way the tensor and the items involved are named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Rebatched", "rebatch"]


@dataclass(frozen=True)
class Rebatched:
    """One key's combined value and the part of it each item contributed."""

    value: Any
    segments: tuple[
        Any, ...
    ]  # index into ``value`` per item (a row, a row range, or everything)


def _layouts(values: Sequence[Any]) -> list[Rebatched]:
    import torch

    rows = [v.shape[0] if v.dim() else 1 for v in values]
    starts = [sum(rows[:i]) for i in range(len(rows))]
    flat = tuple(slice(s, s + n) for s, n in zip(starts, rows, strict=True))
    layouts = (
        [Rebatched(torch.stack(list(values)), tuple(range(len(values))))]
        if _same_shape(values)
        else []
    )
    if all(v.dim() for v in values) and _same_shape(
        [v[0] for v in values if v.shape[0]] or values[:1]
    ):
        cat = torch.cat(list(values))
        layouts += [
            Rebatched(cat, flat),
            Rebatched(cat.unsqueeze(0), tuple((0, s) for s in flat)),
        ]
    if all(v.shape == values[0].shape and torch.equal(v, values[0]) for v in values):
        layouts.append(Rebatched(values[0], (slice(None),) * len(values)))
    return layouts


def _same_shape(values: Sequence[Any]) -> bool:
    return all(v.shape == values[0].shape for v in values)


def rebatch(values: Sequence[Any], like: Any) -> Rebatched | None:
    """Combine per-item tensors ``values`` into ``like``'s shape, or None if no layout fits."""
    import torch

    if not values or not all(isinstance(v, torch.Tensor) for v in values):
        return None
    for layout in _layouts(values):
        if layout.value.shape == like.shape:
            return layout
    return None
