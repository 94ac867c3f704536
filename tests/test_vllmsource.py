"""What vLLM ships, read from its source: the registries found, and the class generated for a family whose config vLLM substitutes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mmport.analyzers import analyze
from mmport.analyzers.vllmsource import (
    CONFIG_REGISTRY,
    MODEL_REGISTRY,
    own_config_class,
    registry_files,
    shipped_architectures,
    substituted_model_types,
)
from mmport.render import render_port
from mmport.sources import resolve


def test_a_registry_that_does_not_parse_or_lists_nothing_gives_nothing(
    tmp_path: Path,
) -> None:
    """What a table holds is in the module's EXAMPLES; a file that is no registry gives nothing."""
    broken = tmp_path / "broken.py"
    broken.write_text("_CONFIG_REGISTRY = (")
    assert substituted_model_types(broken) == frozenset()
    empty = tmp_path / "empty.py"
    empty.write_text("")
    assert shipped_architectures(empty) is None


def _vllm_tree(root: Path, files: dict[str, str]) -> Path:
    """A vLLM source tree under ``root`` holding ``files``; its model registry's path."""
    for name, text in files.items():
        path = root / "vllm" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "vllm" / MODEL_REGISTRY


def test_a_class_written_for_vllms_own_config_is_found_in_its_module_or_package(
    tmp_path: Path,
) -> None:
    registry = _vllm_tree(
        tmp_path,
        {
            str(CONFIG_REGISTRY): '_CONFIG_REGISTRY = dict(acme="AcmeModelConfig")\n',
            str(MODEL_REGISTRY): (
                "_TEXT_GENERATION_MODELS = {\n"
                '    "AcmeForCausalLM": ("vllm.models.acme", "AcmeForCausalLM"),\n'
                '    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),\n'
                '    "FooForCausalLM": ("foo", "FooForCausalLM"),\n'
                "}\n"
            ),
            "models/acme/configs.py": "class AcmeModelConfig: ...\n",
            "models/acme/__init__.py": "",
            "model_executor/models/llama.py": "from transformers import LlamaConfig\n",
            "model_executor/models/foo.py": "from x import AcmeModelConfig\n",
        },
    )
    assert own_config_class("AcmeForCausalLM", registry) == "AcmeModelConfig"
    assert own_config_class("FooForCausalLM", registry) == "AcmeModelConfig"
    assert own_config_class("LlamaForCausalLM", registry) == ""
    assert own_config_class("UnlistedForCausalLM", registry) == ""


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
    # A substituted config keeps HF's feature paths (mmport.analyzers.vllmclass), so no plan.
    guarded = _model_file(
        dataclasses.replace(spec, vllm_substitutes_config=True, vllm_model=None)
    )
    assert f"from {spec.config_module} import {spec.config_class}" in guarded
    assert f"if not isinstance(config, {spec.config_class}):" in guarded
    assert f"config = {spec.config_class}.from_pretrained(" in guarded
    compile(guarded, "llava.py", "exec")
