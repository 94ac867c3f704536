"""The encoder modules vLLM ships for HF's towers, and which of them a port builds.

vLLM 0.33 has its own implementation of several towers HF models share
(CLIP's and SigLIP's vision models, Whisper's encoder, Qwen2-VL's vision
transformer, Pixtral's, Idefics3's), with tensor-parallel layers and
quantization. The equivalence is by the tower's config (its model_type),
read from the checkpoint's config.

A generated class runs HF's feature paths, which read HF's outputs of the
tower. Where vLLM's module gives, for the inputs HF's path hands it, a tensor
equal to the one field of HF's output the path reads (``answers``: SigLIP's
``last_hidden_state``), the port builds vLLM's module and answers HF's call
with that field (:mod:`mmport.analyzers.towercalls` checks the path reads no
other). Where it does not (CLIP's ``hidden_states[layer]``, which vLLM's
module gives only by layer selection), the class builds HF's module and names
vLLM's at that line, so a contributor knows what to swap in.

The table is the targeted release's: ``tests/test_vllm_encoders.py`` (the
``vllm`` stage) checks each class is defined in the real vLLM, and the
``serve`` stage serves the ports that build one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from mmport.analyzers.examples import valid
from mmport.analyzers.language import config_argument, sub_config
from mmport.spec import VllmEncoder

__all__ = [
    "EXAMPLES",
    "VLLM_ENCODERS",
    "VllmEncoder",
    "vllm_encoder",
    "vllm_equivalent",
]

_MODELS = "vllm.model_executor.models"


# A tower's config model_type -> vLLM's module for it (vLLM 0.33).
VLLM_ENCODERS: dict[str, VllmEncoder] = {
    # Its plain call is the last layer post-layernormed, which no field of HF's
    # output holds (HF norms the pooled token alone); every layer's output, the
    # embeddings' first, is HF's hidden_states, the last of them its last_hidden_state.
    "clip_vision_model": VllmEncoder(
        f"{_MODELS}.clip.CLIPVisionModel",
        weights_under="vision_model.",
        layered=("hidden_states", "last_hidden_state"),
        layer_count="self.vision_model.config.num_hidden_layers",
    ),
    # Its plain call is HF's last_hidden_state: every layer, then post_layernorm;
    # the attention-pooling head is left off (use_head=False), as no path reads it.
    # Every layer's output is HF's hidden_states, which HF does not post-layernorm.
    "siglip_vision_model": VllmEncoder(
        f"{_MODELS}.siglip.SiglipVisionModel",
        answers="last_hidden_state",
        keywords=("interpolate_pos_encoding",),
        weights_under="vision_model.",
        layered=("hidden_states",),
        layer_count="self.vision_model.config.num_hidden_layers",
    ),
    "whisper": VllmEncoder(
        f"{_MODELS}.whisper.WhisperEncoder",
        unlike="it is built from the model's whole VllmConfig, whose hf_config it reads "
        "as Whisper's, not from the tower's config",
    ),
    # Its plain call is HF's pooler_output: the patches merged; its norms' epsilon
    # defaults to the 1e-6 HF's blocks are built with.
    "qwen2_vl_vision": VllmEncoder(
        f"{_MODELS}.qwen2_vl.Qwen2VisionTransformer",
        answers="pooler_output",
        first="hidden_states",
        keywords=("grid_thw",),
        attributes=("dtype", "device", "spatial_merge_size"),
    ),
    # As Qwen2-VL's, but its call takes the grid as a list of lists (HF's is a tensor).
    "qwen2_5_vl_vision": VllmEncoder(
        f"{_MODELS}.qwen2_5_vl.Qwen2_5_VisionTransformer",
        answers="pooler_output",
        first="hidden_states",
        keywords=("grid_thw",),
        attributes=("dtype", "device", "spatial_merge_size"),
        converts=(("grid_thw", "grid_thw.tolist()"),),
    ),
    # Its call takes a list of unpadded images and returns each one's features, the
    # last layer's (Pixtral has no post-layernorm): HF's last_hidden_state once
    # joined; every layer's output, the embeddings' first, is HF's hidden_states.
    "pixtral": VllmEncoder(
        f"{_MODELS}.pixtral.PixtralHFVisionModel",
        answers="last_hidden_state",
        keywords=("image_sizes",),
        layered=("hidden_states", "last_hidden_state"),
        layer_count="self.config.num_hidden_layers",
        unpads_by="image_sizes",
        provides=(("patch_size", "int", "self.config.patch_size"),),
    ),
    # Its plain call is HF's last_hidden_state (post_layernorm included) when built
    # to mask padded patches in attention as HF does (vLLM's own Idefics3 is not).
    "idefics3_vision": VllmEncoder(
        f"{_MODELS}.idefics2_vision_model.Idefics2VisionTransformer",
        answers="last_hidden_state",
        keywords=("patch_attention_mask",),
        builds_with=(("apply_encoder_attention_mask", "True"),),
        attributes=(),  # it has no dtype or device of its own
    ),
}


def vllm_equivalent(code: str, config: Any, root: Sequence[str] = ()) -> str:
    """vLLM's module for the tower ``code`` builds (``AutoModel.from_config(config.
    vision_config)``) from ``config`` (at ``root``, the sub-config the port's class
    reads), or "" where vLLM ships none or the line builds from no sub-config."""
    encoder = vllm_encoder(code, config, root)
    return encoder.path if encoder else ""


def vllm_encoder(
    code: str, config: Any, root: Sequence[str] = ()
) -> VllmEncoder | None:
    """The :class:`VllmEncoder` for the tower ``code`` builds (see :func:`vllm_equivalent`)."""
    if config is None:
        return None
    try:
        call = cst.parse_expression(code)
    except cst.ParserSyntaxError:
        return None
    path = config_argument(call)
    if not path:  # no sub-config: the line builds no tower of its own config
        return None
    try:
        tower_config = sub_config(config, [*root, *path])
    except AttributeError:
        return None
    return VLLM_ENCODERS.get(getattr(tower_config, "model_type", ""))


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
