"""Processed multi-modal inputs of vLLM 0.33 (``vllm.multimodal.inputs``).

* :class:`PlaceholderRange` — where one item's placeholder tokens sit in the
  prompt, and which of them receive an embedding (``is_embed``).
* :class:`MultiModalKwargsItem` — one item's keyword arguments for the model.
* :class:`MultiModalKwargsItems` — those items grouped by modality, built from
  the HF processor output by :meth:`MultiModalKwargsItems.from_hf_inputs`.
"""

from __future__ import annotations

from collections import UserDict, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import torch

from .fields import (
    BaseMultiModalField,
    MultiModalBatchedField,
    MultiModalFieldConfig,
    MultiModalFieldElem,
    MultiModalFlatField,
    MultiModalSharedField,
    NestedTensors,
    nested_tensors_equal,
)

__all__ = [
    "BaseMultiModalField",
    "BatchedTensorInputs",
    "MultiModalBatchedField",
    "MultiModalFieldConfig",
    "MultiModalFieldElem",
    "MultiModalFlatField",
    "MultiModalKwargsItem",
    "MultiModalKwargsItems",
    "MultiModalKwargsOptionalItems",
    "MultiModalSharedField",
    "NestedTensors",
    "PlaceholderRange",
    "nested_tensors_equal",
]

BatchedTensorInputs = dict[str, NestedTensors]
"""Keyword arguments for the model, several items batched per key."""


@dataclass(frozen=True)
class PlaceholderRange:
    """The ``length`` prompt positions from ``offset`` that belong to one item.

    ``is_embed`` (a bool tensor of shape ``(length,)``) marks the positions that
    receive an embedding from the encoder; ``None`` means all of them. For
    ``offset=2, length=5, is_embed=[F, T, F, T, T]`` the item has 3 embeddings.
    """

    offset: int
    length: int
    is_embed: torch.Tensor | None = None

    @cached_property
    def embeds_cumsum(self) -> list[int] | None:
        """Running count of embedding positions, or ``None`` when all positions are."""
        return None if self.is_embed is None else self.is_embed.cumsum(dim=0).tolist()

    def get_num_embeds(self) -> int:
        """How many embeddings the encoder must produce for this item."""
        if self.embeds_cumsum is None:
            return self.length
        return self.embeds_cumsum[-1] if self.embeds_cumsum else 0

    def get_embeds_indices_in_range(
        self, start_idx: int, end_idx: int
    ) -> tuple[int, int]:
        """The embedding indices covered by placeholder positions ``[start_idx, end_idx)``."""
        if self.embeds_cumsum is None:
            return start_idx, end_idx
        start = self.embeds_cumsum[start_idx - 1] if start_idx > 0 else 0
        end = self.embeds_cumsum[end_idx - 1] if end_idx > 0 else 0
        return start, end

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlaceholderRange):
            return False
        if (self.offset, self.length) != (other.offset, other.length):
            return False
        if self.is_embed is None or other.is_embed is None:
            return self.is_embed is None and other.is_embed is None
        return nested_tensors_equal(self.is_embed, other.is_embed)

    def __hash__(self) -> int:
        return hash((self.offset, self.length))


class MultiModalKwargsItem(UserDict[str, MultiModalFieldElem]):
    """One item's keyword arguments: key -> :class:`MultiModalFieldElem`."""

    def get_data(self) -> dict[str, NestedTensors]:
        """The raw per-item values, without their field rules."""
        return {key: elem.data for key, elem in self.items()}


_I = TypeVar("_I", MultiModalKwargsItem, MultiModalKwargsItem | None)


def _can_batch(left: MultiModalKwargsItem, right: MultiModalKwargsItem) -> bool:
    """Whether two items can share one model call (same keys, rules and shared data)."""
    if left.keys() != right.keys():
        return False
    for key, elem in left.items():
        other = right[key]
        if type(elem.field) is not type(other.field):
            return False
        if isinstance(elem.field, MultiModalSharedField) and not nested_tensors_equal(
            elem.data, other.data
        ):
            return False
    return True


def _batch(items: Sequence[MultiModalKwargsItem]) -> BatchedTensorInputs:
    elems: dict[str, list[MultiModalFieldElem]] = defaultdict(list)
    for item in items:
        for key, elem in item.items():
            elems[key].append(elem)
    return {key: group[0].field.reduce_data(group) for key, group in elems.items()}


class MultiModalKwargsItems(UserDict[str, Sequence[_I]]):
    """Per-item keyword arguments grouped by modality: ``{"image": [item0, item1]}``.

    Unlike the HF processor's batched output, each item stands alone, so that
    items can be cached and re-batched independently.
    """

    @staticmethod
    def from_hf_inputs(
        hf_inputs: Mapping[str, Any], config_by_key: Mapping[str, MultiModalFieldConfig]
    ) -> MultiModalKwargsItems:
        """Split HF processor output into items; keys without a config are dropped.

        Every key of a modality must yield the same number of items.
        """
        elems_by_key: dict[str, Sequence[MultiModalFieldElem]] = {}
        keys_by_modality: dict[str, list[str]] = defaultdict(list)
        for key, config in config_by_key.items():
            batch = hf_inputs.get(key)
            if batch is None:
                continue
            elems = config.build_elems(key, batch)
            if len(elems) > 0:
                elems_by_key[key] = elems
                keys_by_modality[config.modality].append(key)

        items_by_modality: dict[str, list[MultiModalKwargsItem]] = {}
        for modality, keys in keys_by_modality.items():
            batch_sizes = {key: len(elems_by_key[key]) for key in keys}
            if len(set(batch_sizes.values())) > 1:
                raise ValueError(
                    f"Cannot merge different batch sizes for {modality=}! Found: {batch_sizes=}"
                )
            count = next(iter(batch_sizes.values()))
            items_by_modality[modality] = [
                MultiModalKwargsItem({key: elems_by_key[key][i] for key in keys})
                for i in range(count)
            ]
        return MultiModalKwargsItems(items_by_modality)

    def __getitem__(self, modality: str) -> Sequence[_I]:
        if modality not in self.data:
            raise KeyError(
                f"Modality {modality!r} not found. Available modalities: {set(self.data)}"
            )
        return self.data[modality]

    def require_data(self) -> MultiModalKwargsItems:
        """Self, after checking that no item is missing (``None``)."""
        for modality, items in self.items():
            for index, item in enumerate(items):
                if item is None:
                    raise RuntimeError(f"Found empty mm_items[{modality}][{index}]")
        return self

    def get_data(self, **_ignored: Any) -> BatchedTensorInputs:
        """Keyword arguments for one model call holding every item (CPU only)."""
        out: BatchedTensorInputs = {}
        group_counts: dict[str, int] = {}
        for modality, items in self.require_data().items():
            if not items:
                continue
            groups = _split_batchable(items)
            group_counts[modality] = len(groups)
            out.update(_batch(groups[0]))
        if any(count != 1 for count in group_counts.values()):
            raise RuntimeError(
                f"Some modalities cannot be merged into a single batch ({group_counts=})"
            )
        return out


def _split_batchable(
    items: Sequence[MultiModalKwargsItem],
) -> list[list[MultiModalKwargsItem]]:
    """Runs of consecutive items that can be batched together."""
    groups: list[list[MultiModalKwargsItem]] = [[items[0]]]
    for item in items[1:]:
        if _can_batch(groups[-1][-1], item):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


MultiModalKwargsOptionalItems = MultiModalKwargsItems
"""Items by modality where a cached item may be ``None``."""
