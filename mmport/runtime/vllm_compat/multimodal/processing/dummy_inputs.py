"""The dummy-inputs builder base class (``BaseDummyInputsBuilder``).

vLLM profiles memory with the *worst case*: a port's builder returns the
text and the data that, once processed, give the most placeholder tokens.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from PIL import Image

from ...config.multimodal import (
    AudioDummyOptions,
    ImageDummyOptions,
    MultiModalDummyOptions,
    VideoDummyOptions,
)
from .context import BaseProcessingInfo

__all__ = ["BaseDummyInputsBuilder"]

logger = logging.getLogger(__name__)

_I = TypeVar("_I", bound=BaseProcessingInfo)


def _capped(name: str, model_max: int, override: int | None) -> int:
    """``min(model_max, override)``; an override above the model's maximum is ignored, loudly."""
    if not override:
        return model_max
    if override > model_max:
        logger.warning(
            "%s override (%d) exceeds model's maximum (%d), will be ignored",
            name,
            override,
            model_max,
        )
    return min(model_max, override)


class BaseDummyInputsBuilder(ABC, Generic[_I]):
    """Builds the profiling inputs of a model: the text and the worst-case data."""

    def __init__(self, info: _I) -> None:
        self.info = info

    @abstractmethod
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        """A prompt holding the placeholders for ``mm_counts`` items."""

    @abstractmethod
    def get_dummy_mm_data(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: MultiModalDummyOptions,
    ) -> Mapping[str, Any]:
        """The data that, processed, gives the most placeholder tokens.

        ``mm_options`` may cap sizes per modality (``mm_options.get("image")``).
        """

    def _get_dummy_images(
        self,
        *,
        width: int,
        height: int,
        num_images: int,
        overrides: ImageDummyOptions | None = None,
    ) -> list[Image.Image]:
        """``num_images`` white RGB images of the given size (capped by ``overrides``)."""
        if num_images == 0:
            return []
        if overrides:
            width = _capped("image.width", width, overrides.width)
            height = _capped("image.height", height, overrides.height)
        return [Image.new("RGB", (width, height), color=255)] * num_images

    def _get_dummy_videos(
        self,
        *,
        width: int,
        height: int,
        num_frames: int,
        num_videos: int,
        overrides: VideoDummyOptions | None = None,
    ) -> list[np.ndarray]:
        """``num_videos`` white videos, ``(frames, height, width, 3)`` uint8 arrays."""
        if num_videos == 0:
            return []
        if overrides:
            num_frames = _capped("video.num_frames", num_frames, overrides.num_frames)
            width = _capped("video.width", width, overrides.width)
            height = _capped("video.height", height, overrides.height)
        return [
            np.full((num_frames, height, width, 3), 255, dtype=np.uint8)
        ] * num_videos

    def _get_dummy_audios(
        self,
        *,
        length: int,
        num_audios: int,
        overrides: AudioDummyOptions | None = None,
    ) -> list[np.ndarray]:
        """``num_audios`` silent waveforms of ``length`` samples."""
        if num_audios == 0:
            return []
        if overrides:
            length = _capped("audio.length", length, overrides.length)
        return [np.zeros((length,))] * num_audios
