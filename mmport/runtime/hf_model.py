"""The HF model that ``verify --model`` checks a port against.

The model class is the one the snapshot's config names (``architectures``),
built from the config with seeded random weights, or loaded with the
snapshot's own weights (``--weights``), or built from a tiny twin of the
config (``--tiny``, :mod:`mmport.hf.tiny`). Two entry points matter to
verify: the per-item features of each modality the model exposes an encoder
for (``get_image_features``, ``get_video_features``, ``get_audio_features``)
and the logits of a full forward.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmport.errors import BadReferenceError, DeviceError
from mmport.runtime.device import Placement, free_memory_bytes, placement, seeded

__all__ = ["HFModel", "ModelOptions", "load_model", "model_class"]

# Keep this much of the free memory for activations and the processor.
_MEMORY_HEADROOM = 0.8


@dataclass(frozen=True)
class ModelOptions:
    """How ``verify --model`` builds and places the HF model."""

    device: str = "auto"
    dtype: str = "auto"
    tiny: bool = False
    weights: bool = False

    def placement(self) -> Placement:
        """Check the options and resolve device and dtype, before any slow work."""
        if self.weights and self.tiny:
            raise DeviceError(
                "--weights and --tiny exclude each other: a tiny twin has no checkpoint weights"
            )
        return placement(self.device, self.dtype)


def model_class(config: Any) -> type[Any]:
    """The HF model class the config names (``architectures``), else the image-text-to-text class for it."""
    import transformers

    for name in getattr(config, "architectures", None) or []:
        if hasattr(transformers, name):
            return getattr(transformers, name)
    from transformers import AutoModelForImageTextToText

    try:
        return AutoModelForImageTextToText._model_mapping[type(config)]  # type: ignore[return-value]  # transformers types the lazy mapping's values as (slow, fast) pairs; model mappings hold one class
    except KeyError:
        raise BadReferenceError(
            f"{type(config).__name__} names no model class transformers has ({config.architectures}); "
            "set `architectures` in config.json"
        ) from None


def _has_weights(path: Path) -> bool:
    return any(path.glob("*.safetensors")) or any(path.glob("*.bin"))


def require_weights(snapshot: Any) -> None:
    """Refuse (exit 2) ``--weights`` for a snapshot that holds no weight files."""
    if not _has_weights(Path(snapshot.path)):
        raise BadReferenceError(
            f"snapshot '{snapshot.ref}' holds no weights (*.safetensors, *.bin) at {snapshot.path}"
        )


def _check_fits(cls: type[Any], config: Any, target: Placement) -> None:
    """Refuse (exit 2) a model whose parameters alone exceed the free memory."""
    import torch

    with torch.device("meta"):
        skeleton = cls._from_config(config)
    needed = sum(p.numel() for p in skeleton.parameters()) * target.dtype.itemsize
    available = free_memory_bytes(target)
    if needed > _MEMORY_HEADROOM * available:
        raise DeviceError(
            f"{cls.__name__} needs {needed / 2**30:.1f} GiB in {target.dtype_name} but {target.device} has "
            f"{available / 2**30:.1f} GiB free; pass --tiny for a tiny twin of the config"
        )


def load_model(
    snapshot: Any, target: Placement, *, tiny: bool, weights: bool, seed: int
) -> HFModel:
    """Build the HF model of ``snapshot`` on ``target`` (see the module docstring)."""
    from mmport.hf.tiny import tiny_twin

    config = snapshot.load_config()
    if weights:
        require_weights(snapshot)
    if tiny:
        config = tiny_twin(config)
    cls = model_class(config)
    if weights:
        model = cls.from_pretrained(snapshot.path, dtype=target.dtype)
    else:
        _check_fits(cls, config, target)
        with seeded(seed):
            model = cls._from_config(config, dtype=target.dtype)
    return HFModel(model.to(target.device).eval(), target)


def _feature_method(model: Any, modality: str) -> Any:
    """``get_<modality>_features`` of ``model``, else of the first module inside it
    that has one; None where none does."""
    name = f"get_{modality}_features"
    for module in model.modules():
        if callable(getattr(module, name, None)):
            return getattr(module, name)
    return None


class HFModel:
    """An HF multimodal model with the two calls verify needs."""

    def __init__(self, model: Any, target: Placement) -> None:
        self.model = model
        self.target = target
        self.name = type(model).__name__
        self.num_parameters = sum(p.numel() for p in model.parameters())
        # Per modality whose encoder the model exposes (itself, or the inner model it
        # holds: DeepSeek-VL's checkpoint class has none of its own), the method.
        self._feature_methods = {
            modality: method
            for modality in ("image", "video", "audio")
            if (method := _feature_method(model, modality)) is not None
        }
        # ... and the parameters that method takes.
        self._feature_params = {
            modality: set(inspect.signature(method).parameters)
            for modality, method in self._feature_methods.items()
        }
        self._keeps_logits = (
            "logits_to_keep" in inspect.signature(model.forward).parameters
        )

    def _on_device(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        moved = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                value = value.to(self.target.device)
                if value.is_floating_point():
                    value = value.to(self.target.dtype)
            moved[key] = value
        return moved

    def features_source(self, modality: str) -> str:
        """The method the features come from (``LlavaModel.get_image_features``)."""
        method = self._feature_methods[modality]
        return f"{type(method.__self__).__name__}.{method.__name__}"

    def has_features(self, modality: str) -> bool:
        """Whether the model exposes ``modality``'s encoder (``get_<modality>_features``)."""
        return modality in self._feature_params

    def features(self, modality: str, mm_kwargs: Mapping[str, Any]) -> list[Any]:
        """``modality``'s encoder output for ``mm_kwargs``, one 2-D tensor of feature vectors per chunk."""
        import torch

        params = self._feature_params[modality]
        kwargs = {
            k: v for k, v in mm_kwargs.items() if "kwargs" in params or k in params
        }
        with torch.inference_mode():
            out = self._feature_methods[modality](**self._on_device(kwargs))
        features = getattr(out, "pooler_output", out)
        chunks = list(features) if isinstance(features, (list, tuple)) else [features]
        return [c.reshape(-1, c.shape[-1]).float().cpu() for c in chunks]

    def logits(
        self, inputs: Mapping[str, Any], positions: list[int] | None = None
    ) -> Any:
        """Logits of one forward pass on ``inputs`` (a processor-style batch of one).

        ``positions`` restricts the vocabulary projection to those positions
        (HF's ``logits_to_keep``): a prompt of thousands of image tokens times a
        vocabulary of 100k+ would not fit in memory otherwise.
        """
        import torch

        kwargs = dict(self._on_device(inputs))
        if positions is not None and self._keeps_logits:
            kwargs["logits_to_keep"] = torch.tensor(
                positions, device=self.target.device
            )
        with torch.inference_mode():
            logits = self.model(**kwargs).logits.float().cpu()
        if positions is not None and not self._keeps_logits:
            logits = logits[:, positions]
        return logits
