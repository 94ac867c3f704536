"""Tower geometry of published checkpoints, for timing encoders at their real size.

The tiny twins ``benchmarks/serve.py`` serves hide the encoder's cost: their
towers are a few layers of width 64. With ``--towers published`` a family's
tower takes the geometry of a published checkpoint (from its ``config.json``;
random weights) while its language model stays the servable tiny twin, so the
engine's time goes to the encoder as it would on the real model.
"""

from __future__ import annotations

from typing import Any

# model_type: (the published checkpoint, the sub-config holding its tower, its geometry).
PUBLISHED_TOWERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llava": (
        "llava-hf/llava-1.5-7b-hf (CLIP ViT-L/14, 336 px)",
        "vision_config",
        {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "image_size": 336,
            "patch_size": 14,
        },
    ),
    "paligemma": (
        "google/paligemma-3b-pt-224 (SigLIP so400m/14, 224 px)",
        "vision_config",
        {
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "image_size": 224,
            "patch_size": 14,
        },
    ),
    "qwen2_5_vl": (
        "Qwen/Qwen2.5-VL-7B-Instruct (its 32-block ViT)",
        "vision_config",
        {
            "depth": 32,
            "hidden_size": 1280,
            "intermediate_size": 3420,
            "num_heads": 16,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "temporal_patch_size": 2,
        },
    ),
}


def published_tower_config(model_type: str, config: Any) -> Any:
    """``config``'s servable tiny twin with the tower of ``model_type``'s published
    checkpoint (its other sub-configs and the language model stay tiny)."""
    from mmport.serve.checkpoint import servable_twin

    _, key, geometry = PUBLISHED_TOWERS[model_type]
    twin = servable_twin(config).to_dict()
    twin[key] = {**twin[key], **geometry}
    return type(config).from_dict(twin)
