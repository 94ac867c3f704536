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
from mmport.render import render_port
from mmport.sources import resolve

# Families whose HF feature path is a CLIP or SigLIP tower, its layers, and a projector.
WRITTEN_AS_VLLM_CODE = ["llava", "paligemma"]


def _model_file(spec) -> str:
    return next(f.text for f in render_port(spec) if f.name == f"{spec.module_name}.py")


@pytest.mark.parametrize("family", WRITTEN_AS_VLLM_CODE)
def test_the_class_calls_vllms_modules_and_no_hf_method(family) -> None:
    spec = analyze(resolve(family))
    assert spec.vllm_model is not None, spec.vllm_model_reason
    text = _model_file(spec)
    hf_model = spec.encoder.hf_class
    for hf_only in (
        "transformers.models.",
        "conversion_mapping",
        "core_model_loading",
        f"= {hf_model}.",
        "get_image_features",
    ):
        assert hf_only not in text, hf_only
    tower = spec.vllm_model.towers[0]
    assert f"self.{tower.attr} = {tower.class_name}(" in text
    assert "class " + spec.class_prefix + "ImagePixelInputs(TensorSchema)" in text
    assert "def _parse_and_validate_image_input(" in text
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
    assert any(n.startswith(f"{tower.attr}.vision_model.") for n in names[Layout.SAVED])


def test_a_path_vllm_code_cannot_write_keeps_hfs_methods_and_says_why() -> None:
    """Gemma 3's tower is called with a keyword and its projector pools: the class runs
    HF's feature method on the modules it builds, and inspect's reason names the line."""
    spec = analyze(resolve("gemma3"))
    assert spec.vllm_model is None
    assert "modeling_gemma3.py:" in spec.vllm_model_reason
    assert f"get_image_features = {spec.encoder.hf_class}.get_image_features" in (
        _model_file(spec)
    )
