"""Settings a synthetic snapshot measures on the model instead of reading.

LLaVA-style processors count the vision tower's extra tokens (CLIP's CLS)
through a setting that defaults to 0 (``num_additional_image_tokens``); a
real checkpoint sets it to match its tower. A synthetic snapshot has no
checkpoint to copy, so it measures the tower: a tiny twin of the configured
vision model (same image and patch size, see :mod:`mmport.hf.tiny`)
runs on one blank image, and whatever it returns beyond one vector per patch
is the extra-token count.
"""

from __future__ import annotations

import inspect
from typing import Any

from mmport.errors import FOREIGN_ERRORS

__all__ = ["extra_token_params", "measure_extra_tokens"]

# Processor settings named for a tower's tokens beyond its patches.
_EXTRA_PREFIX, _EXTRA_SUFFIX = "num_additional_", "_tokens"


def extra_token_params(processor_cls: type[Any]) -> list[str]:
    """Constructor settings of ``processor_cls`` that count a tower's extra tokens."""
    params = inspect.signature(processor_cls.__init__).parameters.values()
    return [
        p.name
        for p in params
        if p.name.startswith(_EXTRA_PREFIX) and p.name.endswith(_EXTRA_SUFFIX)
    ]


def measure_extra_tokens(config: Any) -> int | None:
    """Vectors the vision tower of ``config`` returns beyond one per patch, or None."""
    vision = getattr(config, "vision_config", None)
    size, patch = (
        getattr(vision, "image_size", None),
        getattr(vision, "patch_size", None),
    )
    if not (isinstance(size, int) and isinstance(patch, int)):
        return None
    import torch
    from transformers import AutoModel

    from mmport.hf.tiny import tiny_twin

    try:
        tower = AutoModel.from_config(tiny_twin(vision)).eval()
        channels = getattr(vision, "num_channels", 3)
        with torch.no_grad():
            hidden = tower(
                pixel_values=torch.zeros(1, channels, size, size)
            ).last_hidden_state
    except FOREIGN_ERRORS:  # a tower that needs more than pixels: leave the default
        return None
    return int(hidden.shape[1]) - (size // patch) ** 2
