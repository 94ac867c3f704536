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


def test_per_layer_settings_follow_the_layer_each_twin_layer_keeps() -> None:
    """A per-layer dict keyed by the old index follows the kept layers: Dots 3 overrides
    its sliding layers (from index 2 on) by index, and the twin's sliding layer is one
    of them, so it keeps that layer's settings (its config class checks they agree)."""
    from mmport.hf.tiny import tiny_twin

    config = resolve("dots3_note").load_config()
    original, twin = config.get_text_config(), tiny_twin(config).get_text_config()
    kinds = set(original.layer_types)
    assert set(twin.layer_types) == kinds
    nope = {k: original.per_layer_config[k].qk_nope_head_dim for k in kinds}
    assert len(set(nope.values())) > 1  # the case under test: an override by index
    for kind in kinds:
        assert twin.per_layer_config[kind].qk_nope_head_dim == nope[kind], kind


def test_a_dim_equal_to_another_configs_width_follows_it() -> None:
    """Dots 3's vision ``adapter_out_dim`` equals the text model's width, which its config
    class requires: it becomes the twin's one width too, as ``*_input_size`` does."""
    config = {
        "model_type": "x",
        "vision_config": {
            "model_type": "v",
            "hidden_size": 1536,
            "adapter_out_dim": 4096,
        },
        "audio_config": {
            "model_type": "a",
            "d_model": 1280,
            "adapter_input_size": 1280,
        },
        "text_config": {"model_type": "t", "hidden_size": 4096},
    }
    twin = twin_dict(config)
    width = twin["text_config"]["hidden_size"]
    assert twin["vision_config"]["adapter_out_dim"] == width < 4096
    assert twin["audio_config"]["adapter_input_size"] == width


def test_a_twins_width_is_a_multiple_of_32() -> None:
    """Kept head sizes of 42 (GLM-4.1V's text model under rope) give a width vLLM's CPU
    MoE kernels take: real widths are multiples of 32, and the twin's is."""
    from mmport.hf.tiny import WIDTH_ALIGNMENT, tiny_twin

    config = resolve("glm4v_moe").load_config()
    twin = tiny_twin(config).get_text_config()
    original = config.get_text_config()
    assert original.hidden_size // original.num_attention_heads % WIDTH_ALIGNMENT
    assert twin.hidden_size % WIDTH_ALIGNMENT == 0
    assert twin.hidden_size < original.hidden_size
