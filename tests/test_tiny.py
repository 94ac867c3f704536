"""Tiny twins keep what decides token counts and shrink the rest; re-batching layouts."""

from __future__ import annotations

import pytest
import torch

from mmport.hf.tiny import twin_dict
from mmport.sources import resolve
from mmport.verify.rebatch import rebatch

GEOMETRY = (
    "image_size",
    "patch_size",
    "spatial_merge_size",
    "vocab_size",
    "image_token_id",
    "image_token_index",
)


def _walk(config: dict, prefix: str = ""):
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            yield from _walk(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("model_type", ["llava", "qwen2_vl", "gemma3"])
def test_twin_keeps_geometry_and_tokens_and_shrinks_widths(model_type) -> None:
    original = resolve(model_type).load_config().to_dict()
    twin = dict(_walk(twin_dict(original)))
    flat = dict(_walk(original))
    for key, value in flat.items():
        if key.rsplit(".", 1)[-1] in GEOMETRY:
            assert twin[key] == value, key
    widths = {
        twin[k] for k in twin if k.rsplit(".", 1)[-1] in ("hidden_size", "embed_dim")
    }
    assert len(widths) == 1 and widths.pop() < min(
        v for k, v in flat.items() if k.endswith("hidden_size")
    )
    layers = [
        twin[k] for k in twin if k.rsplit(".", 1)[-1] in ("num_hidden_layers", "depth")
    ]
    assert layers and max(layers) <= 2


def test_twin_keeps_enough_layers_for_selected_features() -> None:
    config = {
        "model_type": "x",
        "vision_feature_layer": [-2, -5, 6],
        "vision_config": {"model_type": "v", "num_hidden_layers": 24},
    }
    # Layer 6 exists in hidden_states (embeddings first) with 6 layers, and among the
    # layers themselves (Molmo2's validator reads it so) with 7: the twin keeps 7.
    assert twin_dict(config)["vision_config"]["num_hidden_layers"] == 7


def test_rebatch_picks_the_layout_with_hf_shape() -> None:
    a, b = torch.randn(3, 4), torch.randn(5, 4)
    flat = rebatch([a, b], torch.empty(8, 4))
    assert torch.equal(flat.value[flat.segments[1]], b)
    crops = rebatch([a, b], torch.empty(1, 8, 4))
    assert crops.value.shape == (1, 8, 4)
    stacked = rebatch([a, a.clone() + 1], torch.empty(2, 3, 4))
    assert torch.equal(stacked.value[stacked.segments[1]], a + 1)
    assert rebatch([a, b], torch.empty(2, 3, 4)) is None


@pytest.mark.parametrize("model_type", ["gemma4", "gemma3n"])
def test_values_given_per_layer_follow_the_twins_layer_count(model_type) -> None:
    # Gemma 4 overrides some layers by index (`per_layer_config`), Gemma 3n gives
    # an MLP width per layer: a twin with fewer layers must cut both, or its
    # config class refuses it.
    config = resolve(model_type).load_config()
    twin = type(config).from_dict(twin_dict(config.to_dict()))
    text, original = twin.get_text_config(), config.get_text_config()
    assert text.num_hidden_layers < original.num_hidden_layers
    for key, value in text.to_dict().items():
        if isinstance(value, list) and key.endswith("intermediate_size"):
            assert len(value) == text.num_hidden_layers
        if isinstance(value, dict) and "layer" in key:
            assert all(int(k) < text.num_hidden_layers for k in value), key


@pytest.mark.parametrize("model_type", ["qwen3_5", "gemma3"])
def test_twin_keeps_one_layer_of_every_kind(model_type) -> None:
    """A config naming each layer's kind keeps every kind in its twin, and the twin builds."""
    from mmport.hf.tiny import tiny_twin

    config = resolve(model_type).load_config()
    kinds = set(config.get_text_config().layer_types)
    assert len(kinds) > 1, kinds  # the case under test: more than one kind
    twin = tiny_twin(config).get_text_config()
    assert set(twin.layer_types) == kinds
    assert len(twin.layer_types) == twin.num_hidden_layers
    assert twin.num_hidden_layers < config.get_text_config().num_hidden_layers


@pytest.mark.parametrize("model_type", ["glm4v_moe", "qwen3_vl_moe"])
def test_a_mixture_of_experts_twin_keeps_few_experts_and_builds(model_type) -> None:
    """Experts only cost compute: the twin keeps few, routes each token to no more, and its config class takes it."""
    from mmport.hf.tiny import EXPERTS, tiny_twin

    config = resolve(model_type).load_config()
    original, twin = config.get_text_config(), tiny_twin(config).get_text_config()
    counts = [
        key
        for key in ("num_experts", "num_local_experts", "n_routed_experts")
        if isinstance(getattr(original, key, None), int)
    ]
    assert counts and all(getattr(original, key) > EXPERTS for key in counts)
    assert all(getattr(twin, key) == EXPERTS for key in counts)
    assert twin.num_experts_per_tok <= EXPERTS


def test_a_dim_equal_to_its_layers_width_follows_it() -> None:
    """A ``*_dim`` equal to the layer's width (WavTokenizer's codebook_dim) shrinks with it; others stay."""
    config = {
        "model_type": "x",
        "audio_config": {
            "model_type": "a",
            "hidden_size": 512,
            "codebook_dim": 512,
            "patch_dim": 16,
            "head_dim": 512,
        },
    }
    audio = twin_dict(config)["audio_config"]
    assert audio["codebook_dim"] == audio["hidden_size"] < 512
    assert audio["patch_dim"] == 16 and audio["head_dim"] == 512


def test_an_mlp_width_that_is_a_fraction_of_its_layers_width_stays_that_fraction() -> (
    None
):
    """Fun-ASR-Nano's adaptor requires intermediate_size == text hidden_size // 4; MLP
    widths wider than their layer still become twice the twin's width."""
    config = {
        "model_type": "x",
        "adaptor_config": {
            "model_type": "a",
            "hidden_size": 1024,
            "intermediate_size": 256,
        },
        "text_config": {
            "model_type": "t",
            "hidden_size": 1024,
            "intermediate_size": 3072,
        },
    }
    twin = twin_dict(config)
    adaptor, text = twin["adaptor_config"], twin["text_config"]
    assert (
        adaptor["intermediate_size"] * 4
        == adaptor["hidden_size"]
        == text["hidden_size"]
    )
    assert text["intermediate_size"] == 2 * text["hidden_size"]
