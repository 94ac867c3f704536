"""Derive processor settings a checkpoint would carry, from the model config.

Some processors default a value they need to ``None`` (LLaVA's ``patch_size``
and ``vision_feature_select_strategy``) or read an attribute the image
processor only has when a checkpoint sets it (PaliGemma's
``image_processor.image_seq_length``). Real snapshots carry these in their
processor config; a synthetic snapshot takes them from the model config by
one rule: the same name, looked up in the top-level config and then in each
sub-config, or else a name in the same :data:`CONCEPT_ALIASES` row.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst

__all__ = ["CONCEPT_ALIASES", "lookup_config", "none_default_params", "image_processor_reads"]

# Names that checkpoints use for one concept. Policy, not per-model answers:
# a lookup of any name in a row also tries the other names of that row.
CONCEPT_ALIASES: tuple[tuple[str, ...], ...] = (
    ("image_seq_length", "num_image_tokens", "mm_tokens_per_image", "image_seq_len"),
)

# Constructor parameters that are sub-processors or plumbing, never settings.
_NOT_SETTINGS = {"image_processor", "tokenizer", "video_processor", "feature_extractor", "chat_template"}


def _config_layers(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The top-level config first, then each nested sub-config dict."""
    yield config
    for value in config.values():
        if isinstance(value, Mapping) and "model_type" in value:
            yield value


def lookup_config(config: Mapping[str, Any], name: str) -> Any | None:
    """Find ``name`` (or an alias of it) in a config dict; ``None`` if absent."""
    names = next((row for row in CONCEPT_ALIASES if name in row), (name,))
    for candidate in (name, *[n for n in names if n != name]):
        for layer in _config_layers(config):
            if layer.get(candidate) is not None:
                return layer[candidate]
    return None


def none_default_params(processor_cls: type) -> list[str]:
    """Constructor parameters of ``processor_cls`` whose default is ``None``."""
    params = inspect.signature(processor_cls.__init__).parameters.values()
    return [
        p.name
        for p in params
        if p.default is None and p.name not in _NOT_SETTINGS and p.kind is p.POSITIONAL_OR_KEYWORD
    ]


class _ImageProcessorReads(cst.CSTVisitor):
    """Collect ``image_processor.<name>`` reads inside a class's ``__init__``."""

    def __init__(self, class_name: str) -> None:
        self.class_name = class_name
        self.names: list[str] = []
        self._depth = 0

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return node.name.value == self.class_name

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__init__"

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == "image_processor":
            self.names.append(node.attr.value)

    def visit_Call(self, node: cst.Call) -> None:
        # hasattr(image_processor, "name") guards count as reads of "name".
        func = node.func
        if isinstance(func, cst.Name) and func.value in {"hasattr", "getattr"} and len(node.args) >= 2:
            target, attr = node.args[0].value, node.args[1].value
            if isinstance(target, cst.Name) and target.value == "image_processor":
                if isinstance(attr, cst.SimpleString):
                    self.names.append(attr.evaluated_value)


def image_processor_reads(processor_cls: type) -> list[str]:
    """Attributes the processor's constructor reads off its image processor."""
    source = inspect.getsource(inspect.getmodule(processor_cls))
    visitor = _ImageProcessorReads(processor_cls.__name__)
    cst.parse_module(source).visit(visitor)
    return list(dict.fromkeys(visitor.names))
