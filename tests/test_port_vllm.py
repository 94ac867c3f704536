"""``verify REF --port vllm``: the processor vLLM itself registers, through the same checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke


def test_port_vllm_needs_a_real_vllm():
    result = invoke("verify", "llava", "--port", "vllm", "--backend", "bundled")
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stderr.strip()
    assert "--port vllm" in said and len(said.splitlines()) == 1


@pytest.mark.vllm
def test_vllms_own_llava_port_runs_through_every_processing_check():
    from mmport.verify import verify_port

    report = verify_port(
        "llava", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0
    )
    assert report.backend.startswith("vllm")
    for name in ("tokens", "placeholders", "fields", "cache", "dummy", "limits"):
        assert report.checks[name].runs > 0, (
            f"{name} compared nothing against vLLM's own port"
        )


@pytest.mark.vllm
def test_an_architecture_vllm_does_not_register_is_one_line():
    from mmport.errors import PortLoadError
    from mmport.runtime.backends import select_backend
    from mmport.sources import resolve

    snapshot = resolve("fuyu")
    architectures = snapshot.config_dict.get("architectures") or []
    from vllm import ModelRegistry

    if set(architectures) & set(ModelRegistry.get_supported_archs()):
        pytest.skip(f"this vLLM registers {architectures}")
    with pytest.raises(PortLoadError, match="registers no model for"):
        select_backend("vllm").load_registered(snapshot.path)


@pytest.mark.vllm
def test_vllms_qwen2_vl_dummy_video_length_is_its_profile_not_a_failure():
    # vLLM's Qwen2-VL profiles at most 14 frames per video on purpose; HF would give a
    # 28-frame video more positions. Its frames are the largest HF counts, so dummy passes, noted.
    from mmport.verify import verify_port

    report = verify_port(
        "qwen2_vl", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0
    )
    dummy = report.checks["dummy"]
    assert dummy.runs and not dummy.failures, dummy.failures
    assert "profiles videos of" in dummy.summary
    # vLLM's parser takes one item's embeddings beside its grid as one tensor, not a list:
    # offered both, the port's images and videos given as embeddings are compared with HF.
    embeds = report.checks["embeds"]
    assert embeds.runs and not embeds.failures, (embeds.summary, embeds.failures)
    assert "image" not in embeds.summary and "video" not in embeds.summary, (
        embeds.summary
    )


@pytest.mark.vllm
def test_vllms_internvl_video_ids_under_embeddings_are_noted_not_failed():
    # HF repeats the image context token for video frames; vLLM's port writes <video> there,
    # at positions it fills with embeddings (the model never reads those ids).
    from mmport.verify import verify_port

    report = verify_port(
        "internvl", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0
    )
    tokens = report.checks["tokens"]
    assert not [f for f in tokens.failures if f.probe == "probe2"], tokens.failures
    assert "vLLM overwrites them" in tokens.summary


@pytest.mark.vllm
def test_vllms_glm4v_port_agrees_on_the_tags_hf_writes_per_video_frame():
    # The synthetic vocabulary holds <|begin_of_image|> at the config's image_start_token_id,
    # as GLM-4.1V's checkpoints do; vLLM's port writes that id where HF writes the text.
    from mmport.verify import verify_port

    report = verify_port(
        "glm4v", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0
    )
    assert report.checks["tokens"].runs and not report.checks["tokens"].failures, (
        report.checks["tokens"].failures
    )


@pytest.mark.vllm
def test_a_reference_taking_one_audio_per_prompt_caps_the_probes_not_the_verdict():
    # Under vLLM's transformers, GLM-ASR's processor takes one audio per text; probes with
    # more would all be rejected. They carry one audio each, and the limits check alone
    # judges the port's "any number".
    from mmport.verify import verify_port

    report = verify_port(
        "glmasr", Path("vllm"), probes=5, backend="vllm", settings_per_modality=0
    )
    session_capped = "probes carry one audio each" in report.checks["tokens"].summary
    if not session_capped:
        pytest.skip("this transformers takes several audios per GLM-ASR prompt")
    assert not report.checks["tokens"].failures, report.checks["tokens"].failures
    assert report.checks["tokens"].runs >= 5
    assert any("HF rejects" in f.message for f in report.checks["limits"].failures)


@pytest.mark.vllm
def test_vllms_qwen3_asr_port_is_judged_as_its_model_reads_it():
    # Three rules of vLLM's contract at once: the port hands the model only the unmasked
    # feature frames under its own name; it profiles 30 s of audio where probes reach further;
    # and it takes several audios per prompt (one HF call each) where HF takes one per text.
    from mmport.verify import verify_port

    report = verify_port(
        "qwen3_asr", Path("vllm"), probes=5, backend="vllm", settings_per_modality=0
    )
    for name in ("tokens", "fields", "dummy", "limits"):
        check = report.checks[name]
        assert check.runs and not check.failures, (name, check.failures)
    assert "the port profiles audio of" in report.checks["dummy"].summary
    assert "not compared beyond HF's limit" in report.checks["limits"].summary


@pytest.mark.vllm
def test_a_port_tokenizing_without_special_tokens_is_compared_with_hf_asked_the_same():
    # vLLM's Muse Glimmer port declares add_special_tokens=False (its chat template writes
    # the BOS); the synthetic snapshot has no template to deny it, so HF is asked the same.
    from mmport.verify import verify_port

    report = verify_port(
        "muse_glimmer", Path("vllm"), probes=4, backend="vllm", settings_per_modality=0
    )
    tokens = report.checks["tokens"]
    assert "HF was asked with add_special_tokens=False" in tokens.summary
    text_only = [f for f in tokens.failures if f.probe == "probe0"]
    assert not text_only, text_only


@pytest.mark.vllm
def test_a_port_switching_off_every_modality_by_an_unset_config_attribute_cannot_be_judged():
    # vLLM's Inkling enables images and audio only where the checkpoint's config sets
    # decoder_dmodel; transformers' defaults leave it unset, so nothing can be compared.
    from mmport.verify import verify_port

    report = verify_port(
        "inkling_mm_model",
        Path("vllm"),
        probes=2,
        backend="vllm",
        settings_per_modality=0,
    )
    assert report.verdict == "cannot_judge", report.verdict
    unjudged = report.checks["placeholders"].unjudged
    assert unjudged and "decoder_dmodel" in unjudged[0].lacking.name
