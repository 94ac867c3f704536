"""Settings a sub-processor leaves ``None`` that a sibling holds under another name.

NemotronH-Omni's video processor declares ``norm_mean = None`` and reads it
when called (``torch.tensor(self.norm_mean)``, video_processing_nemotron_h_omni.py:116):
its checkpoints set it. The image processor of the same checkpoint names that
setting in its constructor (image_processing_nemotron_h_omni.py:115)::

    if (norm_mean := kwargs.pop("norm_mean", None)) is not None:
        kwargs.setdefault("image_mean", norm_mean)

that is, a checkpoint's ``norm_mean`` *is* the image processor's
``image_mean``. A synthetic snapshot has no checkpoint, so the video processor
gets the value the image processor holds for that setting: the one its
checkpoint would carry for both. Only the code says which names agree; a
value is filled only where the sub-processor would otherwise fail on ``None``
and a sibling's constructor takes the very name.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Mapping
from typing import Any

import libcst as cst

from mmport.hf.code import is_hf_code
from mmport.hf.syntax import string_value

__all__ = ["call_time_reads", "constructor_aliases", "fill_from_siblings"]

_ABSENT = object()


class _SelfReads(cst.CSTVisitor):
    """``self.<name>`` reads in every method but ``__init__``."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value != "__init__"

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            self.names.append(node.attr.value)


def _kwarg_key(call: cst.BaseExpression, method: str) -> tuple[str, cst.Call] | None:
    """``kwargs.<method>("name", ...)`` → ``("name", call)``."""
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == method
    ):
        return None
    if not (
        isinstance(call.func.value, cst.Name)
        and call.func.value.value == "kwargs"
        and call.args
    ):
        return None
    key = string_value(call.args[0].value)
    return (key, call) if key is not None else None


class _KwargAliases(cst.CSTVisitor):
    """In ``__init__``: ``x = kwargs.pop("a")`` (or ``x := ...``), then ``kwargs.setdefault("b", x)`` or ``kwargs["b"] = x``."""

    def __init__(self) -> None:
        self.popped: dict[str, str] = {}  # local name -> the kwarg it holds
        self.aliases: dict[str, str] = {}  # the kwarg taken -> the setting it becomes

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__init__"

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)
            sub = target.target
            if (
                isinstance(sub, cst.Subscript)
                and isinstance(sub.value, cst.Name)
                and sub.value.value == "kwargs"
            ):
                index = sub.slice[0].slice if len(sub.slice) == 1 else None
                key = (
                    string_value(index.value) if isinstance(index, cst.Index) else None
                )
                if key is not None:
                    self._alias(key, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        found = _kwarg_key(node, "setdefault")
        if found is not None and len(node.args) == 2:
            self._alias(found[0], node.args[1].value)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        found = _kwarg_key(value, "pop")
        if isinstance(target, cst.Name) and found is not None:
            self.popped[target.value] = found[0]

    def _alias(self, setting: str, value: cst.BaseExpression) -> None:
        taken = self.popped.get(value.value) if isinstance(value, cst.Name) else None
        if taken is not None and taken != setting:
            self.aliases.setdefault(taken, setting)


def _model_classes(obj: Any) -> list[type]:
    """``obj``'s class and the classes of its MRO that are a model's code (not transformers' bases)."""
    return [
        k
        for k in type(obj).__mro__
        if k is type(obj) or is_hf_code(k.__module__, models_only=True)
    ]


def _visit(klass: type[Any], visitor: cst.CSTVisitor) -> None:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return
    cst.parse_module(source).visit(visitor)


def call_time_reads(obj: Any) -> set[str]:
    """What the methods of ``obj``'s model classes (``__init__`` aside) read off ``self``."""
    visitor = _SelfReads()
    for klass in _model_classes(obj):
        _visit(klass, visitor)
    return set(visitor.names)


def constructor_aliases(obj: Any) -> dict[str, str]:
    """Constructor kwargs of ``obj``'s model classes that become a setting of another name (``norm_mean`` → ``image_mean``)."""
    visitor = _KwargAliases()
    for klass in _model_classes(obj):
        if "__init__" in vars(klass):
            _visit(klass, visitor)
    return visitor.aliases


def fill_from_siblings(parts: Mapping[str, Any]) -> dict[str, list[str]]:
    """Give each sub-processor the settings it needs at call time and leaves ``None``,
    from a sibling whose constructor takes that name as another setting it holds.

    Returns, per attribute filled, ``"<name> from <sibling>.<setting>"`` lines.
    """
    aliases = {
        attribute: constructor_aliases(part)
        for attribute, part in parts.items()
        if part is not None
    }
    filled: dict[str, list[str]] = {}
    for attribute, part in parts.items():
        if part is None or "tokenizer" in attribute:
            continue
        for name in sorted(call_time_reads(part)):
            # A plain attribute left None (a property or method is no setting).
            if inspect.getattr_static(part, name, _ABSENT) is not None:
                continue
            for sibling, names in aliases.items():
                value = (
                    getattr(parts[sibling], names[name], None)
                    if sibling != attribute and name in names
                    else None
                )
                if value is not None:
                    setattr(part, name, value)
                    filled.setdefault(attribute, []).append(
                        f"{name} from {sibling}.{names[name]}"
                    )
                    break
    return filled
