"""Normalising raw multi-modal data into items (``vllm.multimodal.parse``).

``MultiModalDataParser.parse_mm_data({"image": img})`` and
``parse_mm_data({"image": [img1, img2]})`` both give a
:class:`MultiModalDataItems` whose ``"image"`` entry is a list-like
:class:`ImageProcessorItems`. A 3-D tensor (or list of 2-D tensors) is read
as precomputed embeddings instead (:class:`ImageEmbeddingItems`); a port
whose parser declares ``embedding_fields`` also takes a dict of tensors (the
embeddings with what sizes their placeholder) as :class:`DictEmbeddingItems`.
"""

from __future__ import annotations

import contextlib
from collections import UserDict
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any, Generic, Literal, NamedTuple, TypeAlias, TypeVar

import numpy as np
import torch
from PIL import Image, ImageOps

__all__ = [
    "AudioEmbeddingItems",
    "AudioProcessorItems",
    "AudioResampler",
    "DictEmbeddingItems",
    "EmbeddingFieldRole",
    "EmbeddingItems",
    "ImageEmbeddingItems",
    "ImageProcessorItems",
    "ImageSize",
    "ModalityDataItems",
    "MultiModalDataItems",
    "MultiModalDataParser",
    "ProcessorBatchItems",
    "VideoEmbeddingItems",
    "VideoProcessorItems",
]

_T = TypeVar("_T")
_I = TypeVar("_I")
_D = TypeVar("_D", bound="ModalityDataItems[Any, Any]")

# What a field of a precomputed-embedding input carries: the embedding tensor
# itself ("values"), or a key that sizes the item's placeholder ("metadata").
EmbeddingFieldRole: TypeAlias = Literal["values", "metadata"]


class ImageSize(NamedTuple):
    """An image's size in pixels."""

    width: int
    height: int


class ModalityDataItems(Generic[_T, _I]):
    """The items of one modality; indexable and sized like a list."""

    def __init__(self, data: _T, modality: str) -> None:
        self.data = data
        self.modality = modality

    def __repr__(self) -> str:
        return f"{type(self).__name__}(modality={self.modality!r}, len={len(self)})"

    def __len__(self) -> int:
        return self.get_count()

    def __getitem__(self, index: int) -> _I:
        return self.get(index)

    def get_count(self) -> int:
        """The number of items."""
        raise NotImplementedError

    def get(self, index: int) -> _I:
        """Item ``index``."""
        raise NotImplementedError

    def get_all(self) -> list[_I]:
        """Every item, in order."""
        return [self.get(i) for i in range(self.get_count())]

    def get_processor_data(self) -> Mapping[str, object]:
        """What to hand the HF processor (e.g. ``{"images": [...]}``)."""
        raise NotImplementedError

    def get_passthrough_data(self) -> Mapping[str, object]:
        """What bypasses the HF processor and goes to the model as-is."""
        raise NotImplementedError


class ProcessorBatchItems(ModalityDataItems[Sequence[_T], _T]):
    """Raw items the HF processor takes as a list under ``"<modality>s"``."""

    def get_count(self) -> int:
        return len(self.data)

    def get(self, index: int) -> _T:
        return self.data[index]

    def get_processor_data(self) -> Mapping[str, object]:
        return {f"{self.modality}s": self.get_all()}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return {}


class EmbeddingItems(
    ModalityDataItems[torch.Tensor | list[torch.Tensor], torch.Tensor]
):
    """Precomputed embeddings: a ``(items, tokens, hidden)`` tensor or 2-D tensors."""

    def __init__(self, data: torch.Tensor | list[torch.Tensor], modality: str) -> None:
        super().__init__(data, modality)
        tensors = [data] if isinstance(data, torch.Tensor) else data
        allowed = (2, 3) if isinstance(data, torch.Tensor) else (2,)
        for index, tensor in enumerate(tensors):
            if tensor.ndim not in allowed:
                raise ValueError(
                    f"{modality.capitalize()} embedding [{index}] must be 2D (seq_len, hidden_size), "
                    f"got {tensor.ndim}D tensor with shape {tuple(tensor.shape)}"
                )

    def get_count(self) -> int:
        return len(self.data)

    def get(self, index: int) -> torch.Tensor:
        return self.data[index]

    def get_processor_data(self) -> Mapping[str, object]:
        return {}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return {f"{self.modality}_embeds": self.data}

    def get_feature_size(self, item_idx: int) -> int:
        """The number of embedding vectors of item ``item_idx``."""
        return len(self.get(item_idx))


class DictEmbeddingItems(
    ModalityDataItems[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]]
):
    """Items given as a dict of tensors: embeddings with the fields that size their placeholders.

    ``fields_factory`` gives the field config that splits ``data`` into items
    (as it splits HF's outputs); every key in ``required_fields`` must be
    there, and every declared key must have a config.
    """

    def __init__(
        self,
        data: Mapping[str, torch.Tensor],
        modality: str,
        required_fields: Set[str],
        fields_factory: Callable[[Mapping[str, torch.Tensor]], Mapping[str, Any]],
        optional_fields: Set[str] = frozenset(),
    ) -> None:
        from mmport.runtime.vllm_compat.multimodal.inputs import MultiModalKwargsItems

        super().__init__(data, modality)
        if not required_fields:
            raise ValueError(
                f"Cannot parse {modality!r} embeddings: every declared field is optional "
                f"({sorted(optional_fields)}), so nothing is left to size the placeholder range."
            )
        missing = set(required_fields) - data.keys()
        if missing:
            raise ValueError(
                f"The data should contain the fields: {set(required_fields)}, "
                f"but only found the following keys: {set(data.keys())}"
            )
        fields_config = fields_factory(data)
        declared = set(required_fields) | set(optional_fields)
        if declared - fields_config.keys():
            raise ValueError(
                f"declared_fields={declared} should be a subset of fields={set(fields_config)}"
            )
        self.fields_config = fields_config
        self.required_fields = set(required_fields)
        self._kwargs = MultiModalKwargsItems.from_hf_inputs(dict(data), fields_config)

    def get_count(self) -> int:
        return len(self._kwargs[self.modality])

    def get(self, index: int) -> Mapping[str, torch.Tensor]:
        return self._kwargs[self.modality][index].get_data()

    def get_processor_data(self) -> Mapping[str, object]:
        return {}

    def get_passthrough_data(self) -> Mapping[str, object]:
        return self.data


def _size_of(image: Any) -> ImageSize:
    """Width and height of a PIL image, an HWC array or a CHW array/tensor."""
    if isinstance(image, Image.Image):
        return ImageSize(*image.size)
    if image.ndim == 3 and image.shape[-1] in (1, 3, 4):
        return ImageSize(width=image.shape[1], height=image.shape[0])
    _, height, width = image.shape
    return ImageSize(width=width, height=height)


class ImageProcessorItems(ProcessorBatchItems[Any]):
    """Images (PIL, numpy or torch) for the HF image processor."""

    def __init__(self, data: Sequence[Any]) -> None:
        super().__init__(data, "image")

    def get_image_size(self, item_idx: int) -> ImageSize:
        """Width and height of image ``item_idx``."""
        image = self.get(item_idx)
        if image is None:
            raise ValueError(f"Cannot get size of cached image at {item_idx}")
        return _size_of(image)


class ImageEmbeddingItems(EmbeddingItems):
    """Precomputed image embeddings."""

    def __init__(
        self,
        data: torch.Tensor | list[torch.Tensor],
        expected_hidden_size: int | None = None,
    ) -> None:
        super().__init__(data, "image")


class VideoProcessorItems(ProcessorBatchItems[Any]):
    """Videos (frame arrays, or ``(frames, metadata)`` where the model needs metadata)."""

    def __init__(self, data: Sequence[Any], metadata: Any = None) -> None:
        super().__init__(data, "video")
        self.metadata = metadata

    def _frames(self, item_idx: int) -> Any:
        video = self.get(item_idx)
        if video is None:
            raise ValueError(f"Cannot get length of cached video at {item_idx}")
        return video[0] if isinstance(video, tuple) else video

    def get_num_frames(self, item_idx: int) -> int:
        """The number of frames of video ``item_idx``."""
        return len(self._frames(item_idx))

    def get_frame_size(self, item_idx: int) -> ImageSize:
        """Width and height of the first frame of video ``item_idx``."""
        frames = self._frames(item_idx)
        if len(frames) == 0:
            raise ValueError(f"Cannot get size of empty video at {item_idx}")
        return _size_of(frames[0])


class VideoEmbeddingItems(EmbeddingItems):
    """Precomputed video embeddings."""

    def __init__(
        self,
        data: torch.Tensor | list[torch.Tensor],
        expected_hidden_size: int | None = None,
    ) -> None:
        super().__init__(data, "video")


class AudioProcessorItems(ProcessorBatchItems[Any]):
    """Audio waveforms for the HF feature extractor."""

    def __init__(self, data: Sequence[Any]) -> None:
        super().__init__(data, "audio")

    def get_audio_length(self, item_idx: int) -> int:
        """The number of samples of audio ``item_idx``."""
        return len(self.get(item_idx))


class AudioEmbeddingItems(EmbeddingItems):
    """Precomputed audio embeddings."""

    def __init__(
        self,
        data: torch.Tensor | list[torch.Tensor],
        expected_hidden_size: int | None = None,
    ) -> None:
        super().__init__(data, "audio")


class AudioResampler:
    """Brings audio to the model's rate; the identity when the rates agree, as in vLLM.

    Other rates are resampled with SciPy's polyphase filter where SciPy is
    installed (vLLM's default is torchaudio, so samples may differ slightly).
    """

    def __init__(
        self, target_sr: float | None = None, method: str = "torchaudio"
    ) -> None:
        self.target_sr = target_sr
        self.method = method

    def resample(self, audio: np.ndarray, *, orig_sr: float) -> np.ndarray:
        """``audio`` at ``target_sr``; a ``RuntimeError`` when the port set none (vLLM's message)."""
        if self.target_sr is None:
            raise RuntimeError(
                "Audio resampling is not supported when `target_sr` is not provided"
            )
        if abs(float(orig_sr) - float(self.target_sr)) <= 1e-6:
            return audio
        from fractions import Fraction

        from scipy.signal import resample_poly

        ratio = Fraction(int(self.target_sr), int(orig_sr))
        return resample_poly(audio, ratio.numerator, ratio.denominator).astype(
            audio.dtype
        )


class MultiModalDataItems(UserDict[str, ModalityDataItems[Any, Any]]):
    """Parsed data keyed by modality; each entry is list-like."""

    def select(self, modalities: set[str]) -> MultiModalDataItems:
        """A copy holding only ``modalities``."""
        return MultiModalDataItems({m: self[m] for m in modalities})

    def get_count(self, modality: str, *, strict: bool = True) -> int:
        """Item count of ``modality`` (0 for an absent one when not ``strict``)."""
        if modality not in self:
            if strict:
                raise KeyError(
                    f"Modality {modality!r} not found. Available modalities: {set(self)}"
                )
            return 0
        return self[modality].get_count()

    def get_all_counts(self) -> Mapping[str, int]:
        """Item count of every modality present."""
        return {m: items.get_count() for m, items in self.items()}

    def get_items(self, modality: str, typ: type[_D] | tuple[type[_D], ...]) -> _D:
        """The items of ``modality``, checked to be of type ``typ``."""
        if modality not in self:
            raise KeyError(
                f"Modality {modality!r} not found. Available modalities: {set(self)}"
            )
        items = self[modality]
        if not isinstance(items, typ):
            raise TypeError(
                f"Invalid type of data items for {modality=}. Expected type: {typ}, but found type: {type(items)}"
            )
        return items


def _normalize_image(image: Image.Image) -> Image.Image:
    """Apply EXIF orientation, then flatten to RGB on white (as vLLM does before HF sees it)."""
    with contextlib.suppress(Exception):
        image = ImageOps.exif_transpose(image)
    has_alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in getattr(
        image, "info", {}
    )
    if has_alpha:
        rgba = image if image.mode == "RGBA" else image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.split()[3])
        return flat
    return image if image.mode == "RGB" else image.convert("RGB")


def _as_item_list(data: Any, single_ndim: int) -> list[Any]:
    """A single array-like item (``ndim == single_ndim``) as a one-item list, else a list."""
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return [data] if data.ndim == single_ndim else list(data)
    return list(data)


class MultiModalDataParser:
    """Turns a ``MultiModalDataDict`` into :class:`MultiModalDataItems`.

    ``target_sr`` makes audio given as ``(waveform, rate)`` arrive at the
    model's rate; ``video_needs_metadata`` keeps each video's metadata
    beside its frames, as ``(frames, metadata)`` items. Subclass and extend
    :meth:`_get_subparsers` to support more modalities.
    """

    # Per modality, the fields of a dict of precomputed embeddings and their roles;
    # a modality absent here can only be given as raw media or plain embeddings.
    embedding_fields: Mapping[str, Mapping[str, EmbeddingFieldRole]] = {}

    @classmethod
    def placeholder_metadata_fields(cls, modality: str) -> set[str]:
        """The keys that size ``modality``'s placeholder range."""
        return {
            field
            for field, role in cls.embedding_fields.get(modality, {}).items()
            if role == "metadata"
        }

    def embedding_field_sets(self, modality: str) -> tuple[set[str], set[str]]:
        """``modality``'s (required, optional) embedding fields; the values are optional
        where embeddings may arrive out of band (``allow_missing_mm_embeddings``)."""
        metadata = self.placeholder_metadata_fields(modality)
        values = set(self.embedding_fields.get(modality, {})) - metadata
        if self.allow_missing_mm_embeddings:
            return metadata, values
        return metadata | values, set()

    def __init__(
        self,
        *,
        target_sr: float | None = None,
        target_channels: int | None = None,
        audio_resample_method: str = "torchaudio",
        video_needs_metadata: bool = False,
        expected_hidden_size: int | None = None,
        allow_missing_mm_embeddings: bool = False,
        **_options: Any,
    ) -> None:
        self.allow_missing_mm_embeddings = allow_missing_mm_embeddings
        self.audio_resampler = AudioResampler(
            target_sr=target_sr, method=audio_resample_method
        )
        self.target_channels = target_channels
        self.video_needs_metadata = video_needs_metadata
        self.expected_hidden_size = expected_hidden_size

    @classmethod
    def is_embeddings(cls, data: object) -> bool:
        """Whether ``data`` is precomputed embeddings rather than raw media."""
        if isinstance(data, torch.Tensor):
            return data.ndim == 3
        if (
            isinstance(data, list)
            and data
            and all(isinstance(x, torch.Tensor) for x in data)
        ):
            return data[0].ndim == 2
        return False

    def _parse_image_data(self, data: Any) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return None
        if self.is_embeddings(data):
            return ImageEmbeddingItems(data, self.expected_hidden_size)
        items = (
            [data]
            if isinstance(data, Image.Image)
            else _as_item_list(data, single_ndim=3)
        )
        return ImageProcessorItems(
            [_normalize_image(x) if isinstance(x, Image.Image) else x for x in items]
        )

    def _parse_video_data(self, data: Any) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return None
        if self.is_embeddings(data):
            return VideoEmbeddingItems(data, self.expected_hidden_size)
        one_video = (
            (
                isinstance(data, list)
                and data
                and all(isinstance(x, Image.Image) for x in data)
            )
            or (
                isinstance(data, list)
                and data
                and all(getattr(x, "ndim", 0) == 3 for x in data)
            )
            or (isinstance(data, tuple) and len(data) == 2)
            or (isinstance(data, (np.ndarray, torch.Tensor)) and data.ndim == 4)
        )
        videos: list[Any] = []
        metadata: list[Any] = []
        for item in [data] if one_video else _as_item_list(data, single_ndim=4):
            frames, meta = item if isinstance(item, tuple) else (item, None)
            # Frame lists become one array per video, as vLLM stacks them.
            frames = np.array(frames) if isinstance(frames, list) else frames
            if self.video_needs_metadata:
                if meta is None:
                    raise ValueError(
                        "Video metadata is required but not found in mm input. "
                        "Please check your video input in `multi_modal_data`"
                    )
                videos.append((frames, meta))
            else:
                videos.append(frames)
            metadata.append(meta)
        return VideoProcessorItems(videos, metadata=metadata)

    def _parse_audio_data(self, data: Any) -> ModalityDataItems[Any, Any] | None:
        if data is None:
            return None
        if self.is_embeddings(data):
            return AudioEmbeddingItems(data, self.expected_hidden_size)
        one_audio = (
            isinstance(data, tuple)
            or (
                isinstance(data, list)
                and data
                and all(isinstance(x, float) for x in data)
            )
            or (isinstance(data, (np.ndarray, torch.Tensor)) and data.ndim == 1)
        )
        audios = []
        for item in [data] if one_audio else _as_item_list(data, single_ndim=1):
            audio, rate = item if isinstance(item, tuple) else (item, None)
            audio = (
                audio.numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio)
            )
            audios.append(
                audio
                if rate is None
                else self.audio_resampler.resample(audio, orig_sr=rate)
            )
        return AudioProcessorItems(audios)

    def _get_subparsers(
        self,
    ) -> Mapping[str, Callable[[Any], ModalityDataItems[Any, Any] | None]]:
        return {
            "image": self._parse_image_data,
            "video": self._parse_video_data,
            "audio": self._parse_audio_data,
        }

    def parse_mm_data(self, mm_data: Mapping[str, Any]) -> MultiModalDataItems:
        """Parse every modality of ``mm_data``; an unknown modality is a ``ValueError``."""
        subparsers = self._get_subparsers()
        items = MultiModalDataItems()
        for modality, data in mm_data.items():
            if modality not in subparsers:
                raise ValueError(f"Unsupported modality: {modality}")
            parsed = subparsers[modality](data)
            if parsed is not None:
                items[modality] = parsed
        return items
