"""vLLM's own config classes: which model_types vLLM substitutes, and what the generated class does about it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mmport.analyzers import analyze
from mmport.analyzers.vllmsource import (
    CONFIG_REGISTRY,
    MODEL_REGISTRY,
    registry_files,
    shipped_architectures,
    substituted_model_types,
)
from mmport.render import render_port
from mmport.sources import resolve

REGISTRY = """\
from vllm.utils import LazyConfigDict

_CONFIG_REGISTRY: dict[str, type] = LazyConfigDict(
    chatglm="ChatGLMConfig",
    qwen3_asr="Qwen3ASRConfig",
    **{"unlimited-ocr": "UnlimitedOCRConfig"},
)
_OTHER = LazyConfigDict(llava="NotAConfig")
"""


def test_the_registry_keys_are_read_without_importing(tmp_path: Path) -> None:
    source = tmp_path / "config.py"
    source.write_text(REGISTRY)
    assert substituted_model_types(source) == {"chatglm", "qwen3_asr", "unlimited-ocr"}
    broken = tmp_path / "broken.py"
    broken.write_text("_CONFIG_REGISTRY = (")
    assert substituted_model_types(broken) == frozenset()


def test_the_architectures_of_every_table_are_read(tmp_path: Path) -> None:
    source = tmp_path / "registry.py"
    source.write_text(
        "_TEXT_GENERATION_MODELS = {'LlamaForCausalLM': ('llama', 'LlamaForCausalLM')}\n"
        "_MULTIMODAL_MODELS = {'LlavaForConditionalGeneration': ('llava', 'X')}\n"
        "_VLLM_MODELS = {**_TEXT_GENERATION_MODELS}\n"
        "OTHER = {'NotAModel': 1}\n"
    )
    assert shipped_architectures(source) == {
        "LlamaForCausalLM",
        "LlavaForConditionalGeneration",
    }
    empty = tmp_path / "empty.py"
    empty.write_text("")
    assert shipped_architectures(empty) is None


def test_every_registry_found_names_model_types_and_architectures() -> None:
    """Where a vLLM is found (here or in the serve environment), its registries parse to keys."""
    for source in registry_files(CONFIG_REGISTRY):
        assert substituted_model_types(source), source
    for source in registry_files(MODEL_REGISTRY):
        assert "LlamaForCausalLM" in (shipped_architectures(source) or ()), source


def _model_file(spec) -> str:
    return next(f.text for f in render_port(spec) if f.name == f"{spec.module_name}.py")


def test_a_substituted_config_is_read_again_with_hfs_class() -> None:
    spec = analyze(resolve("llava"))
    assert spec.config_module.startswith("transformers.models.llava")
    plain = _model_file(dataclasses.replace(spec, vllm_substitutes_config=False))
    assert spec.config_class not in plain  # no branch nor import a family does not use
    guarded = _model_file(dataclasses.replace(spec, vllm_substitutes_config=True))
    assert f"from {spec.config_module} import {spec.config_class}" in guarded
    assert f"if not isinstance(config, {spec.config_class}):" in guarded
    assert f"config = {spec.config_class}.from_pretrained(" in guarded
    compile(guarded, "llava.py", "exec")
