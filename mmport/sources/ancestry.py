"""Which older model a transformers model derives from, read from its modular file.

transformers writes a new model as a diff over older ones, in
``models/<family>/modular_<family>.py``; the generated ``modeling_`` and
``configuration_`` files flatten that away. Gemma 4's modular file says::

    from ..gemma3.modeling_gemma3 import (
        ...
        Gemma3TextModel,
        ...
    )
    class Gemma4TextModel(Gemma3TextModel):  # models/gemma4/modular_gemma4.py:1280 (5.24; :1312 in 5.20)

so Gemma 4's text model is Gemma 3's, from the folder ``gemma3``: one
:class:`Derivation`. The chain goes on through the ancestor's own modular
file (``Gemma3TextModel(Gemma2Model)``...) until a class is not derived, is
derived from a model of its own folder, or its folder has no modular file;
:data:`MAX_DEPTH` bounds it. A model with no modular file (Llama) has none.

The reader looks for the text config's class, then the text model's (Gemma 4
declares its config in full, so only its model says where it comes from).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

__all__ = [
    "MAX_DEPTH",
    "Derivation",
    "ancestor_model_types",
    "derivation",
    "modular_ancestry",
    "registered_model_types",
    "text_model_ancestry",
]

# Real chains are short (gemma4 → gemma3 → gemma2 → gemma); a longer one is a cycle.
MAX_DEPTH = 8


@dataclass(frozen=True)
class Derivation:
    """``name`` in one family's modular file derives from ``base``, defined in the folder ``ancestor``."""

    name: str
    base: str
    ancestor: str
    source: Where

    def __str__(self) -> str:
        return f"{self.name}({self.base}) from {self.ancestor}, {self.source}"


@dataclass(frozen=True)
class Where:
    """A line of transformers' source: ``models/gemma4/modular_gemma4.py:1280`` and its code.

    Its own small type, not :class:`mmport.spec.Source`: sources sit below the
    PortSpec, which verify must never reach (docs/architecture.md).
    """

    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class _ModularVisitor(cst.CSTVisitor):
    """Collects the module's classes with their first base, and the names imported from sibling models."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.first_bases: dict[
            str, tuple[str, int]
        ] = {}  # class → (its first base, the class's line)
        self.imported: dict[
            str, tuple[str, str]
        ] = {}  # local name → (model folder, name there)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if node.bases and isinstance(node.bases[0].value, cst.Name):
            line = self.get_metadata(PositionProvider, node.name).start.line
            self.first_bases[node.name.value] = (node.bases[0].value.value, line)
        return False  # nested classes derive nothing a model does

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # imports inside functions are not the model's ancestry

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        # ``from ..gemma3.modeling_gemma3 import Gemma3TextModel``: two dots, a sibling model's module.
        if (
            len(node.relative) != 2
            or not isinstance(node.module, cst.Attribute)
            or isinstance(node.names, cst.ImportStar)
        ):
            return
        folder = node.module.value
        if not isinstance(folder, cst.Name):
            return
        for alias in node.names:
            if isinstance(alias.name, cst.Name):
                local = alias.asname.name if alias.asname is not None else alias.name
                self.imported[cst.ensure_type(local, cst.Name).value] = (
                    folder.value,
                    alias.name.value,
                )


@dataclass(frozen=True)
class _Modular:
    """What one modular file says: each class's first base and line, each imported name's origin."""

    relpath: str
    first_bases: dict[str, tuple[str, int]]
    imported: dict[str, tuple[str, str]]
    lines: tuple[str, ...]


def _modular_path(folder: str) -> Path:
    import transformers

    return (
        Path(transformers.__file__).parent / "models" / folder / f"modular_{folder}.py"
    )


@cache
def _read_modular(folder: str) -> _Modular | None:
    """The facts of ``folder``'s modular file, or None when the model has none (cached per folder)."""
    path = _modular_path(folder)
    if not path.is_file():
        return None
    code = path.read_text()
    visitor = _ModularVisitor()
    MetadataWrapper(cst.parse_module(code)).visit(visitor)
    relpath = f"models/{folder}/{path.name}"
    return _Modular(
        relpath, visitor.first_bases, visitor.imported, tuple(code.splitlines())
    )


def derivation(folder: str, name: str) -> Derivation | None:
    """What class ``name`` of ``folder``'s modular file derives from, when it is another model's class."""
    modular = _read_modular(folder)
    if modular is None or name not in modular.first_bases:
        return None
    base, line = modular.first_bases[name]
    if (
        base not in modular.imported
    ):  # defined here, or from a module outside the models
        return None
    ancestor, base_there = modular.imported[base]
    return Derivation(
        name,
        base_there,
        ancestor,
        Where(modular.relpath, line, modular.lines[line - 1].strip()),
    )


def modular_ancestry(
    folder: str, name: str, depth: int = MAX_DEPTH
) -> tuple[Derivation, ...]:
    """The chain of derivations from class ``name`` of ``folder`` up, nearest first, at most ``depth`` long.

    A config class its modular file does not derive stands for its model's
    class: ``Gemma4TextConfig`` for ``Gemma4TextModel``.
    """
    chain: list[Derivation] = []
    step = _derive(folder, name)
    while step is not None and len(chain) < depth:
        chain.append(step)
        step = _derive(step.ancestor, step.base)
    return tuple(chain)


def _derive(folder: str, name: str) -> Derivation | None:
    candidates = (name, *_model_classes(name)) if name.endswith("Config") else (name,)
    # Lazily: the model classes' names reach torch, read them only when the config derives nothing.
    return next(
        filter(None, (derivation(folder, candidate) for candidate in candidates)), None
    )


def _model_classes(config_name: str) -> Iterator[str]:
    """The base model classes of the model_types ``config_name`` is registered under."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    for model_type in registered_model_types(config_name):
        yield from _as_tuple(MODEL_MAPPING_NAMES.get(model_type, ()))


def _as_tuple(names: str | Sequence[str]) -> tuple[str, ...]:
    """A model mapping's value: one class name, or several."""
    return (names,) if isinstance(names, str) else tuple(names)


def registered_model_types(class_name: str) -> list[str]:
    """The model_types transformers registers config (or base model) class ``class_name`` under."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if class_name.endswith("Config"):
        return [
            model_type
            for model_type, name in CONFIG_MAPPING_NAMES.items()
            if name == class_name
        ]
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return [
        model_type
        for model_type, names in MODEL_MAPPING_NAMES.items()
        if class_name in _as_tuple(names)
    ]


def text_model_ancestry(text_config: Any) -> tuple[Derivation, ...]:
    """The ancestry of a text config's class (or its text model's) in its model's modular file."""
    parts = type(text_config).__module__.split(".")
    if parts[:2] != ["transformers", "models"] or len(parts) < 4:
        return ()  # a snapshot's own code, or a config outside transformers' models
    return modular_ancestry(parts[2], type(text_config).__name__)


def ancestor_model_types(step: Derivation) -> list[str]:
    """The model_types an ancestor goes by: its folder's name, then those its base class is registered under there.

    ``LlamaModel`` is also the base model of ``exaone`` and ``internlm3``;
    only the model_types whose code is the ancestor's folder count.
    """
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    own = [
        t
        for t in registered_model_types(step.base)
        if model_type_to_module_name(t) == step.ancestor
    ]
    return list(dict.fromkeys([step.ancestor, *own]))
