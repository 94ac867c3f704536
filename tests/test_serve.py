"""``verify --serve``: the generated port served in a real vLLM engine gives HF's greedy tokens.

Tests marked ``serve`` need the CPU engine environment
(``MMPORT_SERVE_PYTHON``, default /opt/mmport-vllm-serve-venv/bin/python;
built by shared/recipes/vllm-cpu-serve-env.sh) and run in CI's serve stage
(``-m serve``). The rest runs in the fast lane.
"""

from __future__ import annotations

import json
import os

import pytest
import snapshots
from conftest import run_cli, scaffold_port

from mmport.analyzers import analyze
from mmport.serve import Layout, ServeOptions, check_serve, serve_python
from mmport.sources import resolve
from mmport.verify.report import CheckResult

needs_engine = pytest.mark.skipif(
    serve_python() is None, reason="no serve environment (MMPORT_SERVE_PYTHON)"
)
# One layout, no control: the shortest run that still serves the whole port.
QUICK = ServeOptions(layouts=(Layout.SAVED,), control=False)


def _serve(ref: str, port, options: ServeOptions = QUICK) -> CheckResult:
    result = CheckResult("serve")
    check_serve(resolve(ref), port, result, options=options)
    return result


def test_hub_names_come_from_transformers_renaming_table() -> None:
    """Undoing transformers' renamings gives names its loader maps back onto the model's own."""
    import torch
    from transformers import LlavaForConditionalGeneration
    from transformers.conversion_mapping import (
        WeightRenaming,
        get_model_conversion_mapping,
    )
    from transformers.core_model_loading import rename_source_key

    from mmport.hf.tiny import tiny_twin
    from mmport.serve.checkpoint import hub_names

    with torch.device("meta"):
        model = LlavaForConditionalGeneration._from_config(
            tiny_twin(resolve("llava").load_config())
        )
    names = list(model.state_dict())
    hub = hub_names(model, names)
    loading = [
        w for w in get_model_conversion_mapping(model) if isinstance(w, WeightRenaming)
    ]
    assert all(rename_source_key(hub[name], loading, [])[0] == name for name in names)
    assert sum(hub[name] != name for name in names) == len(names), (
        "the hub layout renames every LLaVA weight"
    )


def test_serve_check_skips_without_the_engine_environment(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("MMPORT_SERVE_PYTHON", str(tmp_path / "absent" / "python"))
    port = scaffold_port("llava", tmp_path / "port")
    result = _serve("llava", port)
    assert result.status == "skip" and "MMPORT_SERVE_PYTHON" in result.skipped


@pytest.mark.serve
@needs_engine
def test_llava_port_serves_hf_tokens_in_both_layouts(tmp_path) -> None:
    """The CLI end to end: both layouts, with vLLM's own class as the control."""
    port = scaffold_port("llava", tmp_path / "port")
    report = tmp_path / "report.json"
    done = run_cli(
        "verify",
        "llava",
        "--port",
        str(port),
        "--probes",
        "2",
        "--settings",
        "0",
        "--serve",
        "--json",
        str(report),
    )
    serve = json.loads(report.read_text())["checks"]["serve"]
    assert done.returncode == 0 and serve["status"] == "pass", done.stdout + done.stderr
    assert serve["runs"] == 2 and "hub layout: 2 prompts" in serve["summary"]


@pytest.mark.serve
@needs_engine
def test_a_wrong_weight_mapping_fails_naming_the_weight(tmp_path) -> None:
    """The saved layout's tower names go one name deeper (vision_tower.embeddings. ->
    vision_tower.vision_model.embeddings.); a table sending them elsewhere fails."""
    port = scaffold_port("llava", tmp_path / "port")
    model = port.with_name("llava.py")
    mapped = '"vision_tower.embeddings.": "vision_tower.vision_model.embeddings.",'
    assert mapped in model.read_text()
    model.write_text(
        model.read_text().replace(
            mapped, '"vision_tower.embeddings.": "vision_tower.patch.embeddings.",'
        )
    )
    result = _serve("llava", port)
    assert result.status == "fail"
    assert (
        "did not serve" in result.failures[0].message
        and "'vision_tower.patch" in result.failures[0].message
    )


@pytest.mark.serve
@needs_engine
def test_vllms_own_tower_answering_another_layer_fails(tmp_path) -> None:
    """PaliGemma's tower is vLLM's SiglipVisionModel, called through its own API:
    served, it must give HF's numbers (the port as generated does:
    SERVED_FAMILIES), so one that selects an earlier layer fails."""
    port = scaffold_port("paligemma", tmp_path / "port")
    model = port.with_name("paligemma.py")
    call = "return self.vision_tower(pixel_values)"
    assert call in model.read_text() and "= SiglipVisionModel(" in model.read_text()
    model.write_text(
        model.read_text().replace(
            call, "return self.vision_tower(pixel_values, select_layers=[-2])"
        )
    )
    result = _serve("paligemma", port)
    assert result.status == "fail", result.summary


@pytest.mark.serve
@needs_engine
def test_embeddings_a_percent_off_fail_on_the_items_features(tmp_path) -> None:
    """A class whose embeddings are 1% off HF's features: each item's embeddings, as
    the engine's embed_multimodal returned them, are compared with HF's
    get_image_features, whatever the greedy tokens do."""
    port = scaffold_port("llava", tmp_path / "port")
    model = port.with_name("llava.py")
    call = "return self._process_image_input(image_input)"
    assert call in model.read_text()
    model.write_text(
        model.read_text().replace(
            call, "return [f * 1.01 for f in self._process_image_input(image_input)]"
        )
    )
    result = _serve("llava", port)
    assert result.status == "fail", result.summary
    assert any(
        "embeddings differ from HF's features" in f.message for f in result.failures
    )


@pytest.mark.serve
@needs_engine
def test_a_wrong_placeholder_count_fails_on_the_prompt_ids(tmp_path) -> None:
    """One placeholder token too many: the engine runs, but its prompt is not HF's."""
    port = scaffold_port("llava", tmp_path / "port")
    source = port.read_text()
    counted = "def get_num_image_tokens("
    assert counted in source
    # Wrap the count: every image gets one embedding more than HF gives it.
    port.write_text(
        source
        + "\n\n_hf_count = LlavaProcessingInfo.get_num_image_tokens\n"
        + "LlavaProcessingInfo.get_num_image_tokens = lambda self, *a, **k: _hf_count(self, *a, **k) + 1\n"
    )
    result = _serve("llava", port)
    assert result.status == "fail", result.summary
    assert any(
        "prompt ids differ" in f.message or "did not serve" in f.message
        for f in result.failures
    )


def test_mrope_family_gets_hf_rope_index_and_a_language_architecture() -> None:
    """Qwen2-VL's text config names no architecture; its class gets one from transformers' CausalLM table."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    qwen_spec = analyze(resolve("qwen2_vl"))
    qwen = qwen_spec.encoder
    text_type = resolve("qwen2_vl").load_config().get_text_config().model_type
    assert text_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert qwen_spec.language.architecture in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
    assert qwen.rope_index_source is not None and "modeling_qwen2_vl.py" in str(
        qwen.rope_index_source
    )
    llava = analyze(resolve("llava"))
    assert llava.encoder.rope_index_source is None and llava.language.architecture == ""


@pytest.mark.serve
@needs_engine
def test_qwen2_vl_port_serves_hf_tokens_with_mrope_in_the_saved_layout(
    tmp_path,
) -> None:
    # The hub layout of an M-RoPE family is served by qwen2_5_vl's case below.
    port = scaffold_port("qwen2_vl", tmp_path / "port")
    result = _serve("qwen2_vl", port, QUICK)
    assert result.status == "pass", "\n".join(f.describe() for f in result.failures)
    assert result.runs == 1 and result.metrics["saved_max_logprob_gap"] <= 1e-3


# Families whose generated port serves a tiny twin in the hub layout with HF's
# tokens. Where the family's default config cannot run its own processor's
# outputs (docs/model-check.md), a local snapshot with the real checkpoints'
# geometry stands in. Where the control (vLLM's own class) runs, it must give
# HF's tokens too: on Gemma 3 it can since synthetic tokenizers hold whitespace
# runs as tokens (vLLM 0.32's Gemma 3 processor looks up "\n\n\n" in the
# vocabulary). Controls (None) are not run for the rest, to keep the CI stage
# inside its budget: each is one more engine start. benchmarks/serve.py serves
# vLLM's own class of every image family here beside the generated one, and
# docs/vllm.md has each control's outcome (vLLM 0.32's own LLaVA-NeXT-Video
# takes no images; its own LLaVA-OneVision hands 3-D video embeddings to its
# engine, which refuses them). Video and audio families serve two prompts per
# modality, each item as vLLM's loaders hand it on.
SERVED_FAMILIES = {
    "llava_next": (None, True),
    "paligemma": (None, None),
    "qwen2_5_vl": (None, True),
    "gemma3": (snapshots.gemma3_896_snapshot, True),
    "idefics3": (snapshots.idefics3_364_snapshot, None),
    "mistral3": (snapshots.mistral3_small31_snapshot, None),
    # vLLM's own Pixtral tower in both ways the class calls it: every layer's output
    # (mistral3 above) and its plain call, each image cut from HF's padded batch.
    "lighton_ocr": (None, None),
    "llava_next_video": (None, None),
    "llava_onevision": (None, None),
    "glmasr": (None, None),
    "audioflamingo3": (None, None),
    # Families vLLM 0.33 does not ship, written as vLLM code: Aya Vision's projector is
    # HF's code copied onto vLLM's layers (it pixel-shuffles); DeepSeek-VL's and
    # VipLLaVA's towers are vLLM's SigLIP and CLIP through their own API.
    "aya_vision": (snapshots.aya_vision_364_snapshot, None),
    "deepseek_vl": (snapshots.deepseek_vl_384_snapshot, None),
    "vipllava": (snapshots.vipllava_default_snapshot, None),
    # HF's audio encoder kept as a module (vLLM ships none, as vLLM's own port keeps
    # it), the lines of HF's forward that compute the features copied.
    "qwen2_audio": (None, True),
}


@pytest.mark.serve
@needs_engine
@pytest.mark.parametrize("family", sorted(SERVED_FAMILIES))
def test_port_serves_hf_tokens_on_the_hub_layout(family, tmp_path) -> None:
    build, control_serves = SERVED_FAMILIES[family]
    ref = str(build(tmp_path / "snapshot")) if build else family
    port = scaffold_port(ref, tmp_path / "port")
    control = control_serves is not None
    result = _serve(ref, port, ServeOptions(layouts=(Layout.HUB,), control=control))
    assert result.status == "pass", "\n".join(f.describe() for f in result.failures)
    modalities = analyze(resolve(ref)).modalities
    assert result.runs == 1 and f"{2 * len(modalities)} prompts" in result.summary
    spec = analyze(resolve(ref))
    if spec.encoder is not None and all(p.inline is None for p in spec.encoder.paths):
        # Every item's embeddings were compared with HF's get_<modality>_features.
        assert f"{2 * len(modalities)} items' embeddings" in result.summary
    assert (
        not control
        or ("vLLM's own" in result.summary and "gives HF's tokens" in result.summary)
        == control_serves
    ), result.summary


@pytest.mark.serve
@needs_engine
def test_gemma3_is_compared_with_hf_attending_causally_on_the_cpu_engine(
    tmp_path,
) -> None:
    """vLLM's CPU attention has no bidirectional image attention: HF must attend causally too, and
    the logprobs then agree; against HF's own bidirectional attention they would not."""
    from mmport.serve.checkpoint import build_checkpoint
    from mmport.serve.reference import hf_generate, make_serve_probes
    from mmport.verify.reference import HFReference

    snapshot = resolve(str(snapshots.gemma3_896_snapshot(tmp_path / "snapshot")))
    checkpoint = build_checkpoint(snapshot, tmp_path / "twin")
    probes = make_serve_probes(
        {"image": HFReference(snapshot).placeholders()["image"]}, tmp_path, 0
    )
    assert len(probes) == 2
    both_ways = hf_generate(checkpoint.path, probes, 1)
    causal = hf_generate(checkpoint.path, probes, 1, causal=True)
    assert any(
        abs(a.first_logprob - b.first_logprob) > 1e-3 for a, b in zip(both_ways, causal)
    )
    port = scaffold_port(snapshot.ref, tmp_path / "port")
    result = _serve(snapshot.ref, port)
    assert result.status == "pass" and "attending causally" in result.summary, (
        result.summary
    )


@pytest.mark.serve
@needs_engine
def test_weights_serves_the_snapshots_own_checkpoint(tmp_path) -> None:
    """--serve --weights: the snapshot is a checkpoint; it is served as it is, no twin."""
    from mmport.serve.checkpoint import build_checkpoint

    checkpoint = build_checkpoint(resolve("llava"), tmp_path / "checkpoint", seed=7)
    port = scaffold_port(str(checkpoint.path), tmp_path / "port")
    report = tmp_path / "report.json"
    args = (
        "verify",
        str(checkpoint.path),
        "--port",
        str(port),
        "--probes",
        "2",
        "--settings",
        "0",
    )
    done = run_cli(*args, "--serve", "--weights", "--json", str(report))
    serve = json.loads(report.read_text())["checks"]["serve"]
    assert done.returncode == 0 and serve["status"] == "pass", done.stdout + done.stderr
    assert serve["runs"] == 1 and "snapshot weights: 2 prompts" in serve["summary"]


@pytest.mark.serve
@needs_engine
def test_a_class_dropping_a_rope_index_input_fails_on_videos(tmp_path) -> None:
    # Qwen2.5-VL's get_rope_index scales a video's temporal positions by
    # `second_per_grid_ts` (temporal_patch_size / fps); the probes' 3 fps makes it
    # other than 1, so a class that leaves it out gives other positions than HF.
    port = scaffold_port("qwen2_5_vl", tmp_path / "port")
    model = port.with_name("qwen2_5_vl.py")
    text = model.read_text()
    fields = text[text.index("_ROPE_FIELDS") :]
    fields = fields[: fields.index("}")]
    assert '"second_per_grid_ts",' in fields  # the video's rope inputs, and no other
    model.write_text(
        text.replace(fields, fields.replace('"second_per_grid_ts",', ""), 1)
    )
    result = _serve("qwen2_5_vl", port)
    assert result.status == "fail"
    assert all(f.probe.startswith("serve-video") for f in result.failures)


# family: (layout, whether vLLM's own class runs as control, what the summary says).
TWO_RANKS = {
    # The saved layout, which vLLM 0.32's own LLaVA class cannot load: HF's tokens
    # on two ranks prove the generated class reached the spawned ranks (as a
    # vLLM plugin) and ran there, its language model sharded by vLLM's layers.
    "llava": (Layout.SAVED, True, "vLLM's own LlavaForConditionalGeneration fails"),
    # PaliGemma's class is written as vLLM code: vLLM's SigLIP tower and the projector's
    # replicated linear layer on both ranks, beside vLLM's Gemma.
    "paligemma": (Layout.HUB, False, "2 prompts"),
    # Qwen2-VL: vLLM's Qwen2 and vLLM's own vision transformer (the port builds it
    # in place of HF's tower) sharded over both ranks, and M-RoPE positions
    # computed per rank from HF's get_rope_index; HF's tokens on images and videos
    # alike.
    "qwen2_vl": (Layout.HUB, False, "4 prompts"),
}


@pytest.mark.serve
@needs_engine
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two ranks need two cores")
@pytest.mark.parametrize("family", sorted(TWO_RANKS))
def test_the_generated_class_serves_on_two_tensor_parallel_ranks(
    family, tmp_path
) -> None:
    layout, control, said = TWO_RANKS[family]
    port = scaffold_port(family, tmp_path / "port")
    options = ServeOptions(layouts=(layout,), control=control, tensor_parallel=2)
    result = _serve(family, port, options)
    assert result.status == "pass", "\n".join(f.describe() for f in result.failures)
    assert "2 tensor-parallel ranks" in result.summary and said in result.summary, (
        result.summary
    )


def test_serve_ranks_without_serve_is_one_line_and_exit_2(tmp_path) -> None:
    port = scaffold_port("llava", tmp_path / "port")
    done = run_cli("verify", "llava", "--port", str(port), "--serve-ranks", "2")
    assert done.returncode == 2 and "add --serve" in done.stderr


class _Rotary:
    """An M-RoPE module as HF writes them: ``mrope_section``, and ``(cos, sin)`` from positions."""

    def __init__(self, sections: list[int], interleaved: bool) -> None:
        self.mrope_section, self.interleaved = sections, interleaved

    def __call__(self, x, position_ids):
        import torch

        half = sum(self.mrope_section)
        freqs = position_ids[..., None].float() * torch.linspace(1.0, 0.1, half)
        if (
            self.interleaved
        ):  # slot i belongs to axis i % 3 within 3 × the smaller sections
            axis = [
                i % 3 if i < 3 * min(self.mrope_section[1:]) else 0 for i in range(half)
            ]
        else:  # one block per axis
            axis = [a for a, size in enumerate(self.mrope_section) for _ in range(size)]
        chosen = torch.stack([freqs[a, ..., i] for i, a in enumerate(axis)], dim=-1)
        both = torch.cat((chosen, chosen), dim=-1)
        return both.cos(), both.sin()


@pytest.mark.parametrize("interleaved", [True, False])
def test_interleaved_sections_are_measured_on_the_rotary_module(interleaved) -> None:
    from mmport.serve.checkpoint import _interleaves

    assert _interleaves(_Rotary([24, 20, 20], interleaved)) is interleaved
