"""Which encoder paths the generated model class gets from HF's modeling code, and how its weights are named."""

from __future__ import annotations

from mmport.analyzers import analyze
from mmport.sources import resolve


def test_a_feature_method_needing_more_than_the_items_fields_is_no_path() -> None:
    """InstructBLIP's get_image_features requires the prompt's Q-Former tokens: vLLM hands
    the encoder an item's fields only, so no path is derived, and the reason names them."""
    import inspect

    import transformers

    spec = analyze(resolve("instructblip"))
    method = getattr(transformers, spec.architecture).get_image_features
    required = {
        name
        for name, p in inspect.signature(method).parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    } - {"self"}
    fields = {f.key for m in spec.modalities for f in m.fields}
    unmet = required - fields
    assert unmet  # the case under test
    assert spec.encoder is None
    assert all(name in spec.encoder_reason for name in unmet)


def test_a_text_model_held_as_a_whole_causal_lm_keeps_its_weight_names() -> None:
    """BLIP-2 builds its text model with AutoModelForCausalLM under a local name: its
    weights already carry vLLM's CausalLM names, so nothing renames them."""
    import torch
    import transformers

    from mmport.hf.tiny import tiny_twin

    snapshot = resolve("blip-2")
    spec = analyze(snapshot)
    encoder = spec.encoder
    assert encoder is not None and encoder.language_with_head
    with torch.device("meta"):
        hf = getattr(transformers, spec.architecture)._from_config(
            tiny_twin(snapshot.load_config())
        )
    text = [k for k in hf.state_dict() if k.startswith(f"{encoder.language_attr}.")]
    assert any(k.startswith(f"{encoder.language_attr}.model.") for k in text)
    assert all(old != new for old, new in encoder.weight_renames)
    assert not any(
        old.startswith(encoder.language_attr) for old, _ in encoder.weight_renames
    )


def test_a_text_config_with_a_head_size_per_layer_is_not_put_on_the_backend() -> None:
    """vLLM reads one head size for the whole text model; Embedding Gemma 2's text config
    gives its full-attention layers their own (per_layer_config), which transformers
    then refuses to answer globally: the class says so instead of failing in vLLM."""
    snapshot = resolve("embedding_gemma2")
    overrides = (
        snapshot.load_config().get_text_config().to_dict().get("per_layer_config") or {}
    )
    assert any("head_dim" in values for values in overrides.values())  # the case
    language = analyze(snapshot).language
    assert not language.architecture
    assert (
        "head_dim" in language.unbuildable
        and "per_layer_config" in language.unbuildable
    )
