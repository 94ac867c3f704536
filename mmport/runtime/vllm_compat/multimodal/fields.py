"""How one HF output tensor splits into per-item data and batches back again.

A port's ``_get_mm_fields_config`` maps each HF output key to a
:class:`MultiModalFieldConfig`. Splitting (``build_elems``) turns the batched
HF tensor into one element per item; batching (``reduce_data``) is its
inverse, applied when the engine hands several items to the model at once.

Worked example, three images whose patches were flattened into one tensor::

    pixel_values.shape == (9, D), num_patches == [3, 4, 2]
    flat_from_sizes("image", num_patches)  ->  items of shape (3, D), (4, D), (2, D)
    batched("image") on image_sizes (3, 2)  ->  items of shape (2,), (2,), (2,)
    shared("image", 3) on a (D,) tensor     ->  the same (D,) tensor, three times
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any, TypeAlias

import torch

__all__ = [
    "BaseMultiModalField",
    "MultiModalBatchedField",
    "MultiModalFieldConfig",
    "MultiModalFieldElem",
    "MultiModalFlatField",
    "MultiModalSharedField",
    "NestedTensors",
    "nested_tensors_equal",
]

NestedTensors: TypeAlias = list[Any] | torch.Tensor | tuple[torch.Tensor, ...]
"""A tensor, or a (nested) list of tensors when item shapes differ."""


def nested_tensors_equal(a: Any, b: Any, check_dtype: bool = True) -> bool:
    """Deep equality for tensors and lists/tuples of them (same type, shape, values)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and (not check_dtype or a.dtype == b.dtype)
            and torch.equal(a, b)
        )
    for container in (list, tuple):
        if isinstance(a, container) or isinstance(b, container):
            return (
                isinstance(a, container)
                and isinstance(b, container)
                and len(a) == len(b)
                and all(
                    nested_tensors_equal(x, y, check_dtype)
                    for x, y in zip(a, b, strict=True)
                )
            )
    return a == b


@dataclass
class MultiModalFieldElem:
    """One item's value for one keyword argument, plus the field that made it."""

    data: Any
    field: BaseMultiModalField

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiModalFieldElem):
            return False
        if self.data is None or other.data is None:
            same_data = self.data is None and other.data is None
        else:
            same_data = nested_tensors_equal(self.data, other.data)
        return same_data and type(self.field) is type(other.field)


def _all_tensors(batch: Sequence[Any]) -> bool:
    return len(batch) > 0 and all(isinstance(x, torch.Tensor) for x in batch)


@dataclass(frozen=True, kw_only=True)
class BaseMultiModalField(ABC):
    """A rule for splitting a keyword argument into items and batching it back."""

    keep_on_cpu: bool = False

    @abstractmethod
    def build_elems(
        self, modality: str, key: str, data: Any
    ) -> Sequence[MultiModalFieldElem]:
        """Split the HF output ``data`` for ``key`` into one element per item."""

    @abstractmethod
    def _reduce_data(self, batch: list[Any]) -> Any:
        """Combine per-item data into what the model receives."""

    def reduce_data(self, elems: list[MultiModalFieldElem], **_ignored: Any) -> Any:
        """Batch elements of this field (CPU only; device and pinning are ignored)."""
        kinds = {type(elem.field) for elem in elems}
        if len(kinds) > 1:
            raise ValueError(
                f"Cannot merge different field_types={sorted(k.__name__ for k in kinds)}"
            )
        return self._reduce_data([elem.data for elem in elems])


@dataclass(frozen=True, kw_only=True)
class MultiModalBatchedField(BaseMultiModalField):
    """Item ``i`` is ``data[i]``; batching stacks items along a new first dim."""

    def build_elems(
        self, modality: str, key: str, data: Any
    ) -> Sequence[MultiModalFieldElem]:
        return [MultiModalFieldElem(item, self) for item in data]

    def _reduce_data(self, batch: list[Any]) -> Any:
        if _all_tensors(batch) and all(t.shape == batch[0].shape for t in batch):
            return torch.stack(batch)
        # Items of different shapes reach the model as a plain list.
        return batch


@dataclass(frozen=True, kw_only=True)
class MultiModalFlatField(BaseMultiModalField):
    """Item ``i`` is ``data[slices[i]]``; batching concatenates along ``dim``."""

    slices: Sequence[slice] | Sequence[Sequence[slice]]
    dim: int = 0

    def build_elems(
        self, modality: str, key: str, data: Any
    ) -> Sequence[MultiModalFieldElem]:
        if not all(isinstance(s, slice) for s in self.slices) and not isinstance(
            data, torch.Tensor
        ):
            # vLLM fails this case with an AssertionError; keep the same type.
            raise AssertionError(
                f"field {key!r}: tuple slices need a torch.Tensor, got {type(data).__name__}"
            )
        return [MultiModalFieldElem(data[s], self) for s in self.slices]

    def _reduce_data(self, batch: list[Any]) -> Any:
        if not _all_tensors(batch):
            if self.dim != 0:
                raise ValueError("a nested list can only be concatenated along dim 0")
            return [part for item in batch for part in item]
        if len(batch) == 1:
            return batch[0]
        dim = self.dim % batch[0].ndim
        outer = [(t.shape[:dim], t.shape[dim + 1 :]) for t in batch]
        if all(shape == outer[0] for shape in outer):
            return torch.cat(batch, dim=dim)
        return _concat_padded(batch, dim)


def _concat_padded(batch: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Concatenate along ``dim`` when the other dims differ: zero-pad each to the largest."""
    sizes = [max(t.shape[d] for t in batch) for d in range(batch[0].ndim)]
    sizes[dim] = sum(t.shape[dim] for t in batch)
    out = batch[0].new_zeros(sizes)
    offset = 0
    for tensor in batch:
        region = [slice(0, n) for n in tensor.shape]
        region[dim] = slice(offset, offset + tensor.shape[dim])
        out[tuple(region)] = tensor
        offset += tensor.shape[dim]
    return out


@dataclass(frozen=True, kw_only=True)
class MultiModalSharedField(BaseMultiModalField):
    """Every one of ``batch_size`` items gets the whole of ``data``."""

    batch_size: int

    def build_elems(
        self, modality: str, key: str, data: Any
    ) -> Sequence[MultiModalFieldElem]:
        return [MultiModalFieldElem(data, self)] * self.batch_size

    def _reduce_data(self, batch: list[Any]) -> Any:
        return batch[0]


@dataclass(frozen=True)
class MultiModalFieldConfig:
    """Which modality a keyword argument belongs to and how it splits into items."""

    field: BaseMultiModalField
    modality: str

    @staticmethod
    def batched(modality: str, *, keep_on_cpu: bool = False) -> MultiModalFieldConfig:
        """Item ``i`` is row ``i`` of the data (``data[i]``)."""
        return MultiModalFieldConfig(
            MultiModalBatchedField(keep_on_cpu=keep_on_cpu), modality
        )

    @staticmethod
    def flat(
        modality: str,
        slices: Sequence[slice] | Sequence[Sequence[slice]],
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """Item ``i`` is ``data[slices[i]]`` (a tuple of slices indexes along ``dim`` > 0)."""
        field = MultiModalFlatField(slices=slices, dim=dim, keep_on_cpu=keep_on_cpu)
        return MultiModalFieldConfig(field, modality)

    @staticmethod
    def flat_from_sizes(
        modality: str,
        size_per_item: torch.Tensor,
        dim: int = 0,
        *,
        keep_on_cpu: bool = False,
    ) -> MultiModalFieldConfig:
        """Consecutive runs of ``size_per_item[i]`` entries along ``dim`` form item ``i``."""
        if size_per_item.ndim != 1:
            raise ValueError(
                f"size_per_item should be a 1-D tensor, but found shape: {size_per_item.shape}"
            )
        bounds = [0, *accumulate(int(n) for n in size_per_item)]
        lead = (slice(None),) * dim
        slices = [(*lead, slice(start, end)) for start, end in pairwise(bounds)]
        return MultiModalFieldConfig.flat(
            modality, slices, dim=dim, keep_on_cpu=keep_on_cpu
        )

    @staticmethod
    def shared(
        modality: str, batch_size: int, *, keep_on_cpu: bool = False
    ) -> MultiModalFieldConfig:
        """All ``batch_size`` items share the whole data."""
        field = MultiModalSharedField(batch_size=batch_size, keep_on_cpu=keep_on_cpu)
        return MultiModalFieldConfig(field, modality)

    def build_elems(self, key: str, batch: Any) -> Sequence[MultiModalFieldElem]:
        """Split ``batch`` (the HF output for ``key``) into per-item elements."""
        return self.field.build_elems(self.modality, key, batch)
