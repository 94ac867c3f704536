"""Generated model classes built in vLLM: every modality's encoder, no class that breaks at construction.

vLLM builds the class once per engine start, from the checkpoint's config.
These tests build the generated classes of an image, an image+video, a
video-with-resampler and an audio family, of a text model HF holds whole, of
an audio path HF writes inline, a video HF hands on as images, and of a family
with no derived encoder, under a real ``VllmConfig`` in the serve environment
(one process for all), and check that each modality's tower is what vLLM marked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import construct_job

from mmport.analyzers import analyze
from mmport.serve import serve_python
from mmport.serve.construct import ConstructJob, construct_ports
from mmport.sources import resolve

pytestmark = [
    pytest.mark.serve,
    pytest.mark.skipif(
        serve_python() is None, reason="no serve environment (MMPORT_SERVE_PYTHON)"
    ),
    # One worker builds the module's classes once (`.ci/run`: -n 2 --dist loadgroup).
    pytest.mark.xdist_group("construct"),
]

# An image, an image+video, a video-with-resampler and an audio family with HF's
# methods; an image family whose text model HF holds whole, as a CausalLM (blip-2);
# an audio path HF writes inline in forward (qwen2_audio), a video HF hands on as
# images (internvl), a model HF builds through an auto class from a sub-config
# (colpali: PaliGemma's, inside a retrieval class), and a family with no derived
# encoder (phi4_multimodal); a tower vLLM's module takes as a list of unpadded images
# (lighton_ocr: Pixtral's).
FAMILIES = (
    "llava",
    "blip-2",
    "qwen2_vl",
    "llava_next_video",
    "glmasr",
    "qwen2_audio",
    "internvl",
    "colpali",
    "phi4_multimodal",
    "lighton_ocr",
)
# Text models with no CausalLM of their own (mmport.analyzers.language).
BACKEND_FAMILIES = ("glm4v", "step3p7", "glm5_next")
# Single configs, their own text config, naming the port's own class (a language model
# vLLM would build as that class again, without end).
SINGLE_CONFIG_FAMILIES = ("phi4_multimodal", "pixtral")
# Families vLLM reads with a config class of its own (mmport.analyzers.vllmsource): the class
# reads HF's for HF's modules.
SUBSTITUTED_CONFIG_FAMILIES = ("qwen3_asr", "cosmos3_edge")
# A text config named after no family vLLM ships, which HF's modular file derives from
# one that it does (mmport.analyzers.language.modular_lineage).
MODULAR_LINEAGE_FAMILIES = ("granite4_vision",)
# Text models vLLM's loader would not build as transformers hands them over: a text
# config nested in an inner model's config, whose tie flag only that config holds
# (colqwen2); a text model class whose config_class, in the serve environment's older
# transformers, is the multimodal config (paddleocr_vl); a mixture of experts on the
# Transformers backend, whose CPU kernels need widths divisible by 32 (glm4v_moe).
HANDED_OVER_FAMILIES = ("colqwen2", "paddleocr_vl", "glm4v_moe")
# A class HF keeps inside a thinker built from a sub-config, beside a talker the port does
# not build (qwen2_5_omni); a family the serve environment's older transformers lacks,
# built with the transformers the port was generated under (mistral_large4).
NESTED_FAMILIES = ("qwen2_5_omni",)
# A text model vLLM's CPU build cannot build at all (Hunyuan V4's sparse MLA attention has
# no CPU backend): the environment's limit, not the port's fault.
UNBUILDABLE_HERE_FAMILIES = ("hy_v4_vl",)
# The job name of that family's class, broken before its text model is built.
BROKEN_BEFORE_TEXT = "hy_v4_vl_broken"
NEWER_FAMILIES = ("mistral_large4",)


def _job(
    model_type: str, root: Path, edit=None, name: str = ""
) -> tuple[ConstructJob, object]:
    """The job building ``model_type``'s generated class (its model file changed by ``edit``),
    named ``name`` (default: the model_type), and the port's spec."""
    return construct_job(name or model_type, root, model_type, edit)


def _after_config(*lines: str):
    """An edit of the model file putting ``lines`` in the class's ``__init__``, right after
    it keeps its config."""
    kept = "        self.config = config\n"

    def edit(text: str) -> str:
        return text.replace(
            kept, kept + "".join(f"        {line}\n" for line in lines), 1
        )

    return edit


@pytest.fixture(scope="module")
def constructed(tmp_path_factory):
    """Every family's job, spec and outcome, all built in one serve-environment process."""
    root = tmp_path_factory.mktemp("construct")
    jobs = {
        m: _job(m, root)
        for m in dict.fromkeys(
            [
                *FAMILIES,
                *BACKEND_FAMILIES,
                *SINGLE_CONFIG_FAMILIES,
                *SUBSTITUTED_CONFIG_FAMILIES,
                *MODULAR_LINEAGE_FAMILIES,
                *HANDED_OVER_FAMILIES,
                *NESTED_FAMILIES,
                *UNBUILDABLE_HERE_FAMILIES,
                *NEWER_FAMILIES,
            ]
        )
    }
    # A port failing before its text model, another way, where that text model cannot
    # be built here (built in the same process: an engine process starts slowly).
    jobs[BROKEN_BEFORE_TEXT] = _job(
        "hy_v4_vl", root, _after_config("config.not_a_setting"), BROKEN_BEFORE_TEXT
    )
    built = construct_ports([job for job, _ in jobs.values()])
    return {m: (job, spec, built[m]) for m, (job, spec) in jobs.items()}


def test_generated_classes_construct_with_a_tower_per_modality(constructed) -> None:
    import transformers

    from mmport.analyzers.language import sub_config

    jobs = [constructed[m][0] for m in FAMILIES]
    specs = [constructed[m][1] for m in FAMILIES]
    built = {m: constructed[m][2] for m in FAMILIES}
    for job, spec in zip(jobs, specs, strict=True):
        outcome = built[job.name]
        assert outcome.ok, (job.name, outcome.error, outcome.port_frame)
        encoder = spec.encoder
        if encoder is None:  # Phi-4-multimodal: no encoder derived, none built
            assert outcome.towers == ()
            continue
        # Every module HF's feature paths read is a tower vLLM knows of (a bare
        # parameter, LLaVA-NeXT's image_newline, is no module).
        modules = {m.attr for m in encoder.modules if "Parameter(" not in m.code}
        assert set(outcome.towers) == modules, job.name
        # The towers the port builds as vLLM's own modules are vLLM's classes there,
        # and the others are not.
        native = {m.attr for m in encoder.native_towers}
        assert set(outcome.vllm_towers) == native, job.name
        handled = {m.modality for m in spec.modalities}
        assert set(encoder.tower_modalities) | {m for m, _ in encoder.missing} == (
            handled
        )
    assert built["qwen2_vl"].parameters > 0
    # ColPali's SigLIP tower, Qwen2-VL's vision transformer, LLaVA's CLIP tower
    # (read by hidden layer) and LightOnOCR's Pixtral are vLLM's own modules;
    # BLIP-2's, which vLLM has no module of its own for, stays HF's.
    assert all(
        built[m].vllm_towers for m in ("colpali", "qwen2_vl", "llava", "lighton_ocr")
    )
    assert not built["blip-2"].vllm_towers
    assert analyze(resolve("qwen2_vl")).encoder.tower_modalities == ("image", "video")
    assert analyze(resolve("glmasr")).encoder.tower_modalities == ("audio",)
    assert constructed["qwen2_audio"][1].encoder.path("audio").inline is not None
    assert constructed["internvl"][1].encoder.path("video").through == "image"
    # ColPali's holder is built from a sub-config: the one of its own config class.
    holder = constructed["colpali"][1].encoder
    built_from = sub_config(resolve("colpali").load_config(), holder.config_path)
    assert holder.config_path
    assert isinstance(built_from, getattr(transformers, holder.hf_class).config_class)
    assert constructed["phi4_multimodal"][1].encoder is None


def test_a_class_that_breaks_at_construction_is_reported_where_it_breaks(
    tmp_path,
) -> None:
    # The bug this check exists for: a class reading a sub-config its config lacks.
    read_a_missing_sub_config = _after_config("config.vision_config.hidden_size")
    job, _ = _job("qwen2_audio", tmp_path, read_a_missing_sub_config)
    outcome = construct_ports([job])["qwen2_audio"]
    assert not outcome.ok
    # vLLM's own Qwen2-Audio class builds from the same twin: the port is at fault.
    assert not outcome.environment
    assert "vision_config" in outcome.error
    assert outcome.port_frame.startswith("qwen2_audio.py:")


def test_a_text_model_this_vllm_cannot_build_alone_judges_no_port(constructed) -> None:
    job, spec, outcome = constructed["hy_v4_vl"]
    assert job.language is not None and job.language[0] == spec.language.architecture
    assert not outcome.ok and not outcome.error
    assert f"vLLM's {spec.language.architecture} fails here alone too" in (
        outcome.environment
    )


def test_a_port_error_before_its_text_model_stays_the_ports(constructed) -> None:
    """The text model cannot be built here, but the class fails earlier, another way: its fault."""
    outcome = constructed[BROKEN_BEFORE_TEXT][2]
    assert not outcome.environment
    assert "not_a_setting" in outcome.error


def test_a_class_that_ends_the_process_fails_alone(tmp_path) -> None:
    """A class that takes the process down (as one using all memory is killed) fails; the next still builds."""

    end_the_process = _after_config("import os", "os._exit(9)")
    killer, _ = _job("qwen2_audio", tmp_path, end_the_process)
    fine, _ = _job("llava", tmp_path)
    built = construct_ports([killer, fine])
    assert "ended while building it: the engine exited 9" in built["qwen2_audio"].error
    assert built["llava"].ok, built["llava"].error


def test_text_models_with_no_causal_lm_build_on_the_transformers_backend(
    constructed,
) -> None:
    # glm4v_text: AutoModel maps it; step3p7's text model: only HF's model names its class,
    # which the generated class registers; glm5_next has linear attention, which the
    # backend cannot run: its class says so instead of failing inside vLLM.
    jobs = {m: constructed[m][:2] for m in BACKEND_FAMILIES}
    built = {m: constructed[m][2] for m in BACKEND_FAMILIES}
    for name in ("glm4v", "step3p7"):
        spec = jobs[name][1]
        assert spec.language.transformers_backend, spec.language
        assert built[name].ok, (name, built[name].error, built[name].port_frame)
    assert jobs["step3p7"][1].language.registers is not None
    glm5 = built["glm5_next"]
    unbuildable = jobs["glm5_next"][1].language.unbuildable
    assert unbuildable and not jobs["glm5_next"][1].language.architecture
    assert glm5.error.startswith("NotImplementedError: mmport found no architecture")
    assert "linear_attention" in glm5.error


def test_a_config_naming_the_ports_own_class_is_not_built_as_it_again(
    constructed,
) -> None:
    # Phi-4-multimodal's config names Phi4MultimodalForCausalLM, the port's own class and
    # the CausalLM transformers maps its model_type to: the backend builds its text
    # model. Pixtral's is a vision model's (no vocabulary): its class says so.
    phi4_spec, phi4 = constructed["phi4_multimodal"][1:]
    assert (
        phi4_spec.architecture in resolve("phi4_multimodal").load_config().architectures
    )
    assert phi4_spec.language.transformers_backend, phi4_spec.language
    assert phi4.ok, (phi4.error, phi4.port_frame)
    pixtral = constructed["pixtral"][2]
    assert pixtral.error.startswith("NotImplementedError: mmport found no architecture")
    assert "no vocab_size" in pixtral.error


def test_a_class_handed_vllms_own_config_builds_hfs_modules_from_hfs(
    constructed,
) -> None:
    for model_type in SUBSTITUTED_CONFIG_FAMILIES:
        _, spec, outcome = constructed[model_type]
        if not spec.vllm_substitutes_config:
            pytest.skip(f"this vLLM reads {model_type} with transformers' config class")
        assert outcome.ok, (model_type, outcome.error, outcome.port_frame)
        assert outcome.towers, model_type


def test_a_text_config_takes_the_causal_lm_of_the_family_its_modular_file_names(
    constructed,
) -> None:
    from mmport.analyzers.language import modular_lineage

    for model_type in MODULAR_LINEAGE_FAMILIES:
        _, spec, outcome = constructed[model_type]
        text_config = resolve(model_type).load_config().get_text_config()
        family, _ = modular_lineage(type(text_config))
        assert "modular file" in spec.language.reason, spec.language
        assert family in spec.language.reason
        assert outcome.ok, (model_type, outcome.error, outcome.port_frame)


def test_text_models_build_from_the_config_vllm_hands_over(constructed) -> None:
    for model_type in HANDED_OVER_FAMILIES:
        outcome = constructed[model_type][2]
        assert outcome.ok, (model_type, outcome.error, outcome.port_frame)
    config = resolve("colqwen2").load_config()
    assert not hasattr(config, "tie_word_embeddings")
    assert constructed["colqwen2"][1].language.tie_word_embeddings.startswith("config.")
    assert constructed["paddleocr_vl"][1].language.registers is not None
    assert constructed["glm4v_moe"][1].language.architecture.startswith(
        "TransformersMoE"
    )


def test_a_class_kept_inside_a_thinker_builds_from_its_sub_config(constructed) -> None:
    _, spec, outcome = constructed["qwen2_5_omni"]
    assert spec.encoder.config_path and spec.encoder.unbuilt_parts
    assert outcome.ok, (outcome.error, outcome.port_frame)
    # Only the modules HF's feature paths read are towers: no second language model.
    assert set(outcome.towers) == {m.attr for m in spec.encoder.modules}


def _environment_has(module: str) -> bool:
    import subprocess

    probe = subprocess.run(
        [str(serve_python()), "-c", f"import {module}"], capture_output=True
    )
    return probe.returncode == 0


def test_a_family_the_environment_lacks_is_built_with_the_ports_transformers(
    constructed,
) -> None:
    import transformers

    for model_type in NEWER_FAMILIES:
        outcome = constructed[model_type][2]
        assert outcome.ok, (model_type, outcome.environment, outcome.error)
        module = f"transformers.models.{resolve(model_type).model_type}"
        # The environment's own transformers where it has the family; else this one.
        expected = "" if _environment_has(module) else transformers.__version__
        assert outcome.transformers == expected, model_type
