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


def test_a_mask_over_an_items_frames_is_a_field_though_shaped_like_the_prompt() -> None:
    """Fun-ASR-Nano gives one prompt token per audio frame, so its ``input_features_mask``
    is shaped like ``input_ids``; it is shaped as ``input_features``' leading axes too,
    so it is the item's field (its feature method needs it). PaliGemma's
    ``token_type_ids``, also shaped like the prompt, leads no media tensor: no field."""
    from mmport.hf.processor import call_processor
    from mmport.media import make_audio

    snapshot = resolve("fun_asr_nano")
    processor = snapshot.load_processor()
    spec = analyze(snapshot)
    audio = spec.modalities[0]
    rate = processor.feature_extractor.sampling_rate
    out = call_processor(
        processor,
        audio.placeholder,
        [],
        audios=[make_audio(rate, 1)],
        sampling_rate=rate,
    )
    prompt_shape = out["input_ids"].shape
    leading = {
        k
        for k, v in out.items()
        if k not in processor.tokenizer.model_input_names
        and v.shape == prompt_shape
        and any(
            m.dim() > v.dim() and m.shape[: v.dim()] == v.shape for m in out.values()
        )
    }
    assert leading  # the case: a mask shaped like the prompt and like the frames
    assert leading <= {f.key for f in audio.fields}
    assert spec.encoder is not None and spec.encoder.path("audio") is not None
    paligemma = analyze(resolve("paligemma"))
    assert "token_type_ids" not in {f.key for f in paligemma.modalities[0].fields}


def test_modalities_refused_for_the_same_side_inputs_share_one_reason() -> None:
    # Qwen3-VL hands its text model the same side inputs from image and video
    # features, at one line: the reason says it once, naming both.
    spec = analyze(resolve("qwen3_vl"))
    assert spec.encoder is None
    clauses = spec.encoder_reason.split("; ")
    assert len(clauses) == 1, spec.encoder_reason
    assert "image and video features" in spec.encoder_reason
