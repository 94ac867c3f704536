"""What the target vLLM ships, read statically from its source: nothing is imported, the files are parsed.

- **Config classes of its own** (``vllm/transformers_utils/config.py``,
  ``_CONFIG_REGISTRY``): model_types vLLM reads with a config class it ships,
  for checkpoints whose published config predates transformers' class or
  differs from it. A model class generated for such a family is handed
  vLLM's config, while the HF modules it builds need HF's: the generated
  class then reads the checkpoint's config with HF's class (the model
  template).
- **Architectures** (``vllm/model_executor/models/registry.py``, its
  ``_..._MODELS`` tables): a language model named by an architecture vLLM does
  not ship would land on whichever Transformers backend class vLLM picks, so
  :mod:`mmport.analyzers.language` chooses the backend class itself.

The files are found in this interpreter's vLLM, else in the serve
environment's (``MMPORT_SERVE_PYTHON``). With neither, no model_type counts as
substituted and every architecture as shipped: the port is then what it
would be without this knowledge.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

from mmport.analyzers.examples import valid
from mmport.sources.serve_env import serve_python

__all__ = [
    "CONFIG_REGISTRY",
    "EXAMPLES",
    "MODEL_REGISTRY",
    "registry_files",
    "shipped_architectures",
    "substituted_model_types",
]

CONFIG_REGISTRY = Path("transformers_utils/config.py")
MODEL_REGISTRY = Path("model_executor/models/registry.py")
# The module-level tables of each registry file, by name.
_TABLES = {
    CONFIG_REGISTRY: re.compile(r"_CONFIG_REGISTRY"),
    MODEL_REGISTRY: re.compile(r"_[A-Z_]+_MODELS"),
}


def registry_files(relative: Path) -> list[Path]:
    """``relative`` (under the ``vllm`` package) where it exists: this interpreter's vLLM first, then the serve environment's."""
    found = []
    spec = importlib.util.find_spec("vllm")  # locates the package without running it
    if spec is not None and spec.submodule_search_locations:
        found += [Path(p) / relative for p in spec.submodule_search_locations]
    python = serve_python()
    if python is not None:
        found += sorted(
            python.parents[1].glob(f"lib/python*/site-packages/vllm/{relative}")
        )
    return [path for path in found if path.is_file()]


@functools.cache
def substituted_model_types(source: Path | None = None) -> frozenset[str]:
    """The keys of vLLM's ``_CONFIG_REGISTRY`` in ``source`` (default: the first found)."""
    return _table_keys(source, CONFIG_REGISTRY)


@functools.cache
def shipped_architectures(source: Path | None = None) -> frozenset[str] | None:
    """Every architecture vLLM's model registry in ``source`` lists (default: the first found); None when none is found."""
    keys = _table_keys(source, MODEL_REGISTRY)
    return keys or None


def _table_keys(source: Path | None, relative: Path) -> frozenset[str]:
    """The keys of the tables of the registry file ``relative`` names, read from ``source``."""
    if source is None:
        files = registry_files(relative)
        if not files:
            return frozenset()
        source = files[0]
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return frozenset()
    keys: set[str] = set()
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and _TABLES[relative].fullmatch(target.id):
            keys.update(_keys(value))
    return frozenset(keys)


def _keys(value: ast.expr | None) -> list[str]:
    """The keys a table literal names: ``Dict(a="A", **{"b-c": "B"})`` or ``{"a": "A"}``."""
    if isinstance(value, ast.Call):
        keys = [kw.arg for kw in value.keywords if kw.arg]
        for kw in value.keywords:
            if kw.arg is None:
                keys += _keys(kw.value)
        return keys
    if isinstance(value, ast.Dict):
        return [
            k.value
            for k in value.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        ]
    return []


def _keys_of(snippet: Any, relative: Path) -> list[str]:
    """An example's table keys, read from the snippet's own file (uncached: every example has its own)."""
    return sorted(_table_keys(Path(snippet.__file__), relative))


EXAMPLES = [
    valid(
        "the_config_registry_names_model_types_by_keyword_and_unpacked_dict",
        """
        def LazyConfigDict(**classes):
            return classes

        _CONFIG_REGISTRY = LazyConfigDict(
            chatglm="ChatGLMConfig",
            qwen3_asr="Qwen3ASRConfig",
            **{"unlimited-ocr": "UnlimitedOCRConfig"},
        )
        _OTHER = LazyConfigDict(llava="NotAConfig")
        """,
        lambda snippet: _keys_of(snippet, CONFIG_REGISTRY),
        ["chatglm", "qwen3_asr", "unlimited-ocr"],
    ),
    valid(
        "the_model_registry_lists_every_models_table",
        """
        _TEXT_GENERATION_MODELS = {"LlamaForCausalLM": ("llama", "LlamaForCausalLM")}
        _MULTIMODAL_MODELS = {"LlavaForConditionalGeneration": ("llava", "Llava")}
        _VLLM_MODELS = {**_TEXT_GENERATION_MODELS}
        OTHER = {"NotAModel": 1}
        """,
        lambda snippet: _keys_of(snippet, MODEL_REGISTRY),
        ["LlamaForCausalLM", "LlavaForConditionalGeneration"],
    ),
]
