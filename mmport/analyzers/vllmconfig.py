"""The model_types vLLM reads with a config class of its own, read statically from vLLM's source.

vLLM's ``vllm/transformers_utils/config.py`` maps some model_types to config
classes it ships (``_CONFIG_REGISTRY``), for checkpoints whose published
config predates transformers' own class or differs from it. A model class
generated for such a family is handed vLLM's config, while the HF modules it
builds need HF's: the generated class then reads the checkpoint's config with
HF's class (see the model template). Nothing is imported: the file is parsed.
It is found in this interpreter's vLLM, else in the serve environment's
(``MMPORT_SERVE_PYTHON``); with neither, no model_type counts as substituted.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

__all__ = ["REGISTRY_FILE", "registry_files", "substituted_model_types"]

REGISTRY_FILE = Path("transformers_utils/config.py")
_REGISTRY_NAME = "_CONFIG_REGISTRY"


def registry_files() -> list[Path]:
    """vLLM's config registry files that exist: this interpreter's vLLM first, then the serve environment's."""
    found = []
    spec = importlib.util.find_spec("vllm")  # locates the package without running it
    if spec is not None and spec.submodule_search_locations:
        found += [Path(p) / REGISTRY_FILE for p in spec.submodule_search_locations]
    from mmport.serve import serve_python

    python = serve_python()
    if python is not None:
        found += sorted(
            python.parents[1].glob(f"lib/python*/site-packages/vllm/{REGISTRY_FILE}")
        )
    return [path for path in found if path.is_file()]


@functools.cache
def substituted_model_types(source: Path | None = None) -> frozenset[str]:
    """The keys of vLLM's ``_CONFIG_REGISTRY`` in ``source`` (default: the first of :func:`registry_files`)."""
    if source is None:
        files = registry_files()
        if not files:
            return frozenset()
        source = files[0]
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return frozenset()
    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign)
            else getattr(node, "target", None)
        )
        if isinstance(target, ast.Name) and target.id == _REGISTRY_NAME:
            return frozenset(_keys(node.value))
    return frozenset()


def _keys(value: ast.expr | None) -> list[str]:
    """The keys a registry literal names: ``Dict(a="A", **{"b-c": "B"})`` or ``{"a": "A"}``."""
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
