"""The arguments of ``BaseMultiModalProcessor.apply`` (``ProcessorInputs``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..parse import MultiModalDataItems

__all__ = ["ProcessorInputs"]


def _item_bytes(item: Any) -> bytes:
    """A byte string that identifies an item's content."""
    if isinstance(item, Image.Image):
        return f"{item.mode}{item.size}".encode() + item.tobytes()
    if isinstance(item, torch.Tensor):
        item = item.detach().cpu().numpy()
    if isinstance(item, np.ndarray):
        return (
            f"{item.dtype}{item.shape}".encode() + np.ascontiguousarray(item).tobytes()
        )
    if isinstance(item, (list, tuple)):
        return b"[" + b",".join(_item_bytes(x) for x in item) + b"]"
    return repr(item).encode()


@dataclass
class ProcessorInputs:
    """A tokenized prompt, its parsed multi-modal items and the processor kwargs.

    ``cache`` is accepted for signature compatibility; the bundled runtime
    always processes every item (it has no processor cache).
    """

    prompt: list[int]
    mm_data_items: MultiModalDataItems
    mm_uuid_items: Mapping[str, Any] | None = None
    hf_processor_mm_kwargs: Mapping[str, object] = field(default_factory=dict)
    media_io_kwargs: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    cache: Any = None

    def get_mm_hashes(
        self, model_id: str, hash_algorithm: str = "sha256"
    ) -> dict[str, list[str]]:
        """One content hash per item (a caller-given UUID wins when there are no kwargs).

        The hashes identify items within one run; they are not vLLM's values.
        """
        uuids = self.mm_uuid_items or {}
        kwargs = repr(sorted(self.hf_processor_mm_kwargs.items())).encode()
        hashes: dict[str, list[str]] = {}
        for modality, items in self.mm_data_items.items():
            given = uuids.get(modality) or [None] * len(items)
            hashes[modality] = [
                uid
                if uid is not None and not self.hf_processor_mm_kwargs
                else hashlib.sha256(
                    model_id.encode() + modality.encode() + kwargs + _item_bytes(item)
                ).hexdigest()
                for uid, item in zip(given, items.get_all(), strict=True)
            ]
        return hashes
