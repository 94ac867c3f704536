"""Multi-modal settings of vLLM 0.33 (``vllm.config.multimodal``).

Two things a processing port sees: the *dummy options* handed to
``get_dummy_mm_data`` (per-modality caps on dummy sizes, ``--limit-mm-per-prompt``
style), and the multi-modal config behind ``ctx.get_mm_config()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "AudioDummyOptions",
    "BaseDummyOptions",
    "ImageDummyOptions",
    "MultiModalConfig",
    "MultiModalDummyOptions",
    "VideoDummyOptions",
]

# vLLM lets every modality have up to this many items unless told otherwise.
DEFAULT_LIMIT_PER_PROMPT = 999


@dataclass(frozen=True)
class BaseDummyOptions:
    """Options for one modality's dummy data: at most ``count`` items."""

    count: int = DEFAULT_LIMIT_PER_PROMPT

    def __post_init__(self) -> None:
        # vLLM validates these with pydantic: counts >= 0, sizes > 0.
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "count" and value is not None and value <= 0:
                raise ValueError(f"{f.name} must be > 0, got {value}")


@dataclass(frozen=True)
class ImageDummyOptions(BaseDummyOptions):
    """Caps on dummy image size; a builder uses ``min(model max, cap)``."""

    width: int | None = None
    height: int | None = None


@dataclass(frozen=True)
class VideoDummyOptions(BaseDummyOptions):
    """Caps on dummy video frame count and frame size."""

    num_frames: int | None = None
    width: int | None = None
    height: int | None = None


@dataclass(frozen=True)
class AudioDummyOptions(BaseDummyOptions):
    """Cap on dummy audio length (in samples)."""

    length: int | None = None


class MultiModalDummyOptions(dict[str, BaseDummyOptions]):
    """Dummy options keyed by modality; ``.get("image")`` is ``None`` when unset."""


def _merge_nested(
    base: Mapping[str, Any], override: Mapping[str, Any]
) -> dict[str, Any]:
    """``base`` updated by ``override``, merging nested mappings key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge_nested(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass
class MultiModalConfig:
    """The multi-modal part of a model config, as the processing path reads it."""

    limit_per_prompt: MultiModalDummyOptions = field(
        default_factory=MultiModalDummyOptions
    )
    mm_processor_kwargs: dict[str, object] | None = None
    enable_mm_embeds: bool = False
    language_model_only: bool = False
    allow_missing_mm_embeddings: bool = False
    # How items are hashed for vLLM's caches (vLLM's default; see multimodal/hasher.py).
    mm_hasher_algorithm: str = "blake3"

    def get_limit_per_prompt(self, modality: str) -> int:
        """How many items of ``modality`` one prompt may carry."""
        if self.language_model_only:
            return 0
        options = self.limit_per_prompt.get(modality)
        return DEFAULT_LIMIT_PER_PROMPT if options is None else options.count

    def merge_mm_processor_kwargs(
        self, inference_kwargs: Mapping[str, object]
    ) -> dict[str, object]:
        """Configured processor kwargs overridden by request-time ones (nested-aware)."""
        return _merge_nested(self.mm_processor_kwargs or {}, inference_kwargs)
