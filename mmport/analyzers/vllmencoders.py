"""The encoder modules vLLM ships for HF's towers, which a port could build instead.

vLLM 0.33 has its own implementation of several towers HF models share
(CLIP's and SigLIP's vision models, Whisper's encoder, Qwen2-VL's vision
transformer, Pixtral's, Idefics3's), with tensor-parallel layers and
quantization. A generated class runs HF's feature paths, which read HF's
outputs of the tower (``hidden_states[layer]``, ``last_hidden_state``), so it
builds HF's module; where vLLM has an equivalent, the class says which, at the
line that builds the tower, so a contributor knows what to swap in once the
port is proven. The equivalence is by the tower's config (its model_type),
read from the checkpoint's config.

The table is the targeted release's: ``tests/test_vllm_encoders.py`` (the
``vllm`` stage) checks each class is defined in the real vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from mmport.analyzers.examples import valid
from mmport.analyzers.language import config_argument, sub_config

__all__ = ["EXAMPLES", "VLLM_ENCODERS", "vllm_equivalent"]

_MODELS = "vllm.model_executor.models"

# A tower's config model_type -> vLLM's module for it (vLLM 0.33).
VLLM_ENCODERS: dict[str, str] = {
    "clip_vision_model": f"{_MODELS}.clip.CLIPVisionModel",
    "siglip_vision_model": f"{_MODELS}.siglip.SiglipVisionModel",
    "whisper": f"{_MODELS}.whisper.WhisperEncoder",
    "qwen2_vl_vision": f"{_MODELS}.qwen2_vl.Qwen2VisionTransformer",
    "qwen2_5_vl_vision": f"{_MODELS}.qwen2_5_vl.Qwen2_5_VisionTransformer",
    "pixtral": f"{_MODELS}.pixtral.PixtralHFVisionModel",
    "idefics3_vision": f"{_MODELS}.idefics2_vision_model.Idefics2VisionTransformer",
}


def vllm_equivalent(code: str, config: Any, root: Sequence[str] = ()) -> str:
    """vLLM's module for the tower ``code`` builds (``AutoModel.from_config(config.
    vision_config)``) from ``config`` (at ``root``, the sub-config the port's class
    reads), or "" where vLLM ships none or the line builds from no sub-config."""
    if config is None:
        return ""
    try:
        call = cst.parse_expression(code)
    except cst.ParserSyntaxError:
        return ""
    path = config_argument(call)
    if not path:  # no sub-config: the line builds no tower of its own config
        return ""
    try:
        tower_config = sub_config(config, [*root, *path])
    except AttributeError:
        return ""
    return VLLM_ENCODERS.get(getattr(tower_config, "model_type", ""), "")


class _Config:
    def __init__(self, **subs: Any) -> None:
        self.__dict__.update(subs)


EXAMPLES = [
    valid(
        "a_siglip_tower_has_vllms_siglip_vision_model",
        "",
        lambda _: (
            vllm_equivalent(
                "AutoModel.from_config(config.vision_config)",
                _Config(vision_config=_Config(model_type="siglip_vision_model")),
            ),
            vllm_equivalent(
                "Projector(config)",
                _Config(vision_config=_Config(model_type="siglip_vision_model")),
            ),
            vllm_equivalent(
                "AutoModel.from_config(config.vision_config)",
                _Config(vlm=_Config(vision_config=_Config(model_type="pixtral"))),
                ("vlm",),
            ),
        ),
        (
            f"{_MODELS}.siglip.SiglipVisionModel",
            "",
            f"{_MODELS}.pixtral.PixtralHFVisionModel",
        ),
    ),
]
