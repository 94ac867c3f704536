"""The model class written as vLLM code (mmport.analyzers.vllmclass): what it calls, and the names it loads by.

The serve stage proves such a class gives HF's tokens (tests/test_serve.py);
these fast tests hold what a reader sees in the file and check its weight
table against checkpoints transformers itself writes.
"""

from __future__ import annotations

import inspect

import pytest
import transformers

from mmport.analyzers import analyze
from mmport.console import vllm_code_rows
from mmport.render import render_port
from mmport.sources import resolve

# Families whose class is written as vLLM code: towers with layers chosen (llava),
# a pooling projector copied onto vLLM's layers (gemma3), HF's feature method copied
# around vLLM's tower (llava_next, idefics3), and M-RoPE positions from HF's
# get_rope_index copied (qwen2_vl).
WRITTEN_AS_VLLM_CODE = [
    "audioflamingo3",
    "gemma3",
    "glm4v",
    "idefics3",
    "llava",
    "llava_next",
    "paligemma",
    "qwen2_audio",
    "qwen2_vl",
]


def _model_file(spec) -> str:
    return next(f.text for f in render_port(spec) if f.name == f"{spec.module_name}.py")


@pytest.mark.parametrize("family", WRITTEN_AS_VLLM_CODE)
def test_the_class_calls_vllms_modules_and_no_hf_method(family) -> None:
    spec = analyze(resolve(family))
    assert spec.vllm_model is not None, spec.vllm_model_reason
    text = _model_file(spec)
    hf_model = spec.encoder.hf_class
    for hf_only in (
        ".modeling_",
        "conversion_mapping",
        "core_model_loading",
        f"= {hf_model}.",
        *(f"{path.method}(" for path in spec.encoder.paths),
    ):
        assert hf_only not in text, hf_only
    tower = spec.vllm_model.towers[0]
    assert f"self.{tower.attr} = {tower.class_name}(" in text
    # HF's module only where vLLM ships none, and the file says so where it builds it.
    imported = "transformers.models." in text
    assert imported == bool(tower.kept)
    comments = " ".join(
        line.strip().removeprefix("# ")
        for line in text.splitlines()
        if line.strip().startswith("#")
    )
    assert not tower.kept or tower.kept in comments
    for path in spec.vllm_model.paths:
        stem = path.schema_name(spec.class_prefix)
        assert f"class {stem}{path.input_noun}Inputs(TensorSchema)" in text
        assert f"def _parse_and_validate_{path.modality}_input(" in text
    assert "def get_mm_mapping(self)" in text


def test_llava_reads_the_layers_and_strategy_hf_fills_from_the_config() -> None:
    """HF's method takes the layer and the strategy as parameters it fills from the
    config when left None; the class reads those config attributes itself."""
    spec = analyze(resolve("llava"))
    method = getattr(transformers, spec.encoder.hf_class).get_image_features
    config = resolve("llava").load_config()
    filled = [
        name
        for name, p in inspect.signature(method).parameters.items()
        if p.default is None and hasattr(config, name)
    ]
    assert len(filled) == 2  # the layer(s) and the strategy: the case under test
    text = _model_file(spec)
    for name in filled:
        assert f"config.{name}" in text
    assert "select_layers=self.feature_layers" in text
    assert "require_post_norm=False" in text


def _mapped(mapper: tuple[tuple[str, str], ...], name: str) -> str:
    # vLLM's WeightsMapper: every prefix in turn, each replacing its first match.
    for prefix, new in mapper:
        if name.startswith(prefix):
            name = name.replace(prefix, new, 1)
    return name


@pytest.mark.parametrize("family", WRITTEN_AS_VLLM_CODE)
def test_saved_and_hub_checkpoints_load_into_the_same_names(family, tmp_path) -> None:
    """transformers' own save_pretrained (its saved layout) and the hub layout reach the
    same parameters through the class's prefix table, each under a module it builds."""
    from safetensors import safe_open

    from mmport.serve.checkpoint import Layout, build_checkpoint

    snapshot = resolve(family)
    spec = analyze(snapshot)
    plan = spec.vllm_model
    built = (
        *(f"{t.attr}." for t in plan.towers),
        *(f"{p.attr}." for p in plan.projectors),
        *(p.attr for p in plan.parameters),
        "language_model.model.",
        "language_model.lm_head.",
    )
    names = {}
    for layout in (Layout.SAVED, Layout.HUB):
        directory = tmp_path / layout
        build_checkpoint(snapshot, directory, layout=layout)
        with safe_open(directory / "model.safetensors", "pt") as weights:
            names[layout] = {_mapped(plan.mapper, key) for key in weights.keys()}  # noqa: SIM118
    assert names[Layout.SAVED] == names[Layout.HUB]
    strays = [n for n in names[Layout.SAVED] if not n.startswith(built)]
    assert not strays, strays
    tower = plan.towers[0]
    assert any(
        n.startswith(f"{tower.attr}.{tower.weights_under}") for n in names[Layout.SAVED]
    )


def test_a_path_vllm_code_cannot_write_keeps_hfs_methods_and_says_why() -> None:
    """Aria's path reads layers of a tower vLLM ships, but vLLM's module gives no
    chosen layers' hidden states: the class runs HF's feature method on the modules
    it builds, and inspect says why."""
    spec = analyze(resolve("aria"))
    assert spec.vllm_model is None
    assert "gives no chosen layers' hidden states" in spec.vllm_model_reason
    assert f"get_image_features = {spec.encoder.hf_class}.get_image_features" in (
        _model_file(spec)
    )


@pytest.mark.parametrize("family", ["glm4v", "qwen2_audio"])
def test_a_tower_vllm_has_no_module_for_is_hfs_kept_and_its_lines_copied(
    family,
) -> None:
    """GLM-4V's vision model and Qwen2-Audio's encoder have no vLLM module mmport
    knows: each is HF's class, built from its sub-config and called by HF's lines,
    which the class holds as its own method (GLM-4V's get_image_features; the lines
    of Qwen2-Audio's forward), and inspect says why."""
    spec = analyze(resolve(family))
    plan = spec.vllm_model
    assert plan is not None, spec.vllm_model_reason
    tower = plan.towers[0]
    module = next(m for m in spec.encoder.modules if m.attr == tower.attr)
    assert tower.kept and not module.vllm_equivalent
    text = _model_file(spec)
    assert f"self.{tower.attr} = {tower.class_name}(config{tower.config_attr})" in text
    for path in plan.paths:
        assert path.copied is not None
        assert f"    def {path.copied.name}(self, " in text
        assert f"self.{tower.attr}(" in path.copied.code  # HF's own call of its tower
    rows = [row for row in vllm_code_rows(spec) if "path as vLLM code" in row[0]]
    assert len(rows) == len(plan.paths) and all(tower.kept in row[1] for row in rows)


def test_a_path_of_more_than_modules_is_hfs_method_copied_around_vllms_tower() -> None:
    """LLaVA-NeXT's path cuts each image's tiles apart and packs them through a helper
    method: the class holds that code, copied, and calls vLLM's tower where HF called
    its own and selected the layers."""
    spec = analyze(resolve("llava_next"))
    path = spec.vllm_model.paths[0]
    copied = path.copied
    assert copied is not None
    text = _model_file(spec)
    assert copied.params == tuple(f.key for f in spec.modalities[0].fields)
    assert f"= self._image_pixels_to_features({path.tower_input})" in text
    assert "self.vision_tower(" not in copied.code  # vLLM's call stands for HF's
    borrowed = spec.encoder.borrowed_methods
    assert borrowed and {m.name for m in copied.methods} == set(borrowed)
    for method in borrowed:
        assert f"    def {method}(" in text
    assert "image_newline" in copied.reads
    assert "self.image_newline = nn.Parameter(" in text


def test_a_pooling_projector_is_hfs_code_copied_without_importing_it() -> None:
    """Gemma 3's projector pools and owns a norm class: the port holds both classes,
    copied, and imports nothing of HF's modeling module."""
    spec = analyze(resolve("gemma3"))
    projector = spec.vllm_model.projectors[0]
    assert projector.copied
    hf = getattr(transformers, spec.encoder.hf_class).__module__
    module = __import__(hf, fromlist=["_"])
    text = _model_file(spec)
    for copied in projector.classes:
        assert getattr(module, copied.name).__module__ == hf  # HF's own class
        assert f"class {copied.name}(nn.Module):" in text
    assert len(projector.classes) > 1  # the norm class it builds came along


def test_a_copied_hf_line_vllms_lint_flags_is_kept_as_hf_wrote_it() -> None:
    """LLaVA-OneVision's copied helper strips a prefix with ``.strip("anyres_max_")``
    (bugbear's B005): the line stays HF's, marked for that rule alone, and the file
    is clean by vLLM's lint."""
    spec = analyze(resolve("llava_onevision"))
    model = next(f for f in render_port(spec) if f.name == f"{spec.module_name}.py")
    assert not model.findings, model.findings
    copied = {
        line.strip()
        for code in spec.vllm_model.copied_code
        for line in code.splitlines()
    }
    marked = [line for line in model.text.splitlines() if "# noqa: " in line]
    assert marked
    for line in marked:
        assert line.split("  # noqa: ")[0].strip() in copied, line
