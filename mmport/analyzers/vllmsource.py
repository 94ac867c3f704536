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
    "own_config_class",
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
    return frozenset(_table_items(source, relative))


def _table_items(source: Path | None, relative: Path) -> dict[str, ast.expr]:
    """Each key of the tables of the registry file ``relative`` names, with its value's
    expression, read from ``source`` (default: the first found)."""
    if source is None:
        files = registry_files(relative)
        if not files:
            return {}
        source = files[0]
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    items: dict[str, ast.expr] = {}
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and _TABLES[relative].fullmatch(target.id):
            items.update(_items(value))
    return items


def _items(value: ast.expr | None) -> dict[str, ast.expr]:
    """The entries a table literal holds: ``Dict(a="A", **{"b-c": "B"})`` or ``{"a": "A"}``."""
    if isinstance(value, ast.Call):
        items = {kw.arg: kw.value for kw in value.keywords if kw.arg}
        for kw in value.keywords:
            if kw.arg is None:
                items.update(_items(kw.value))
        return items
    if isinstance(value, ast.Dict):
        return {
            k.value: v
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
    return {}


@functools.cache
def own_config_class(architecture: str, source: Path | None = None) -> str:
    """The config class of vLLM's own that vLLM's ``architecture`` is written for, or "".

    vLLM reads some families with a config class it ships
    (``_CONFIG_REGISTRY``); its model class for such a family reads that
    class's attributes, which HF's config of a family derived from it need
    not have (vLLM's Inkling reads ``padded_vocab_size``, which no HF Inkling
    config sets). Found when the module or package the model registry names
    for ``architecture`` mentions one of those classes. ``source``: the model
    registry file (default: the first found); the config registry is read
    beside it.
    """
    registry = source or next(iter(registry_files(MODEL_REGISTRY)), None)
    if registry is None:
        return ""
    entry = _table_items(registry, MODEL_REGISTRY).get(architecture)
    package_root = registry.parents[len(MODEL_REGISTRY.parts) - 1]
    config_classes = {
        value.value
        for value in _table_items(
            package_root / CONFIG_REGISTRY, CONFIG_REGISTRY
        ).values()
        if isinstance(value, ast.Constant) and isinstance(value.value, str)
    }
    for path in _module_files(entry, package_root, registry.parent):
        try:
            names = set(re.findall(r"\b[A-Z]\w*Config\b", path.read_text()))
        except (OSError, UnicodeDecodeError):
            continue
        if found := sorted(names & config_classes):
            return found[0]
    return ""


def _module_files(
    entry: ast.expr | None, package_root: Path, models: Path
) -> list[Path]:
    """The source files of the module a model registry entry (``("llama", "LlamaForCausalLM")``
    or ``("vllm.models.inkling", ...)``) names: a module's file, or every file of a package."""
    if not (
        isinstance(entry, ast.Tuple)
        and entry.elts
        and isinstance(entry.elts[0], ast.Constant)
        and isinstance(entry.elts[0].value, str)
    ):
        return []
    module = entry.elts[0].value
    parts = module.split(".")
    base = (
        package_root.joinpath(*parts[1:])
        if parts[0] == "vllm"
        else models.joinpath(*parts)
    )
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    file = base.with_suffix(".py")
    return [file] if file.is_file() else []


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
