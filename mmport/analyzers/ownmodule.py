"""HF's module class, copied into the port as a class of its own on vLLM's layers.

A connector that is more than a chain of layers has no vLLM module to stand
for it, yet its code is plain torch. Gemma 3's pools the tower's patches to a
grid, normalizes them with a norm class of its own and multiplies by a weight::

    class Gemma3MultiModalProjector(nn.Module):
        def __init__(self, config: Gemma3Config):
            super().__init__()
            self.mm_input_projection_weight = nn.Parameter(torch.zeros(...))
            self.mm_soft_emb_norm = Gemma3RMSNorm(config.vision_config.hidden_size, ...)
            self.avg_pool = nn.AvgPool2d(kernel_size=self.kernel_size, stride=self.kernel_size)

        def forward(self, vision_outputs): ...

The port gets the class, as written, under HF's attribute names (so the
checkpoint's weights load by name), with the parts vLLM builds put in:

- ``nn.Linear(...)`` becomes ``ReplicatedLinear(..., quant_config=quant_config,
  prefix=...)`` (quantizable; whole on every rank, since nothing says how its
  neighbours shard), and each call of it takes the output of vLLM's
  ``(output, bias)`` pair; the constructor gains vLLM's ``quant_config`` and
  ``prefix`` parameters;
- ``ACT2FN[...]`` becomes vLLM's ``get_act_fn(...)``;
- a class its code names that is defined beside it in HF's modeling module
  (``Gemma3RMSNorm``, Idefics3's ``Idefics3SimpleMLP``) is copied too, before
  it, in the same way; where it builds linear layers, the line that builds it
  (``self.<attr> = Class(...)``) hands on the quantization and the prefix. A
  linear layer built anywhere else (in a list) has no prefix and refuses;
- transformers' kernel-hub decorators go (they swap the forward for a
  downloaded kernel where one is installed; the code is the reference);
- an annotation naming HF's types becomes ``PretrainedConfig`` for a config
  class and goes otherwise.

Every other name the code reads must be a module (imported as HF imports it)
or a builtin; anything else refuses, naming it, and the class keeps the path
it has.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.nativepath import node_code
from mmport.analyzers.sourcefile import parse_class
from mmport.analyzers.transplant import free_names
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten
from mmport.spec import CopiedCode, OwnModule

__all__ = ["EXAMPLES", "own_module"]

_LINEAR = "ReplicatedLinear"
_LINEAR_NAMES = frozenset({"nn.Linear", "torch.nn.Linear", "Linear"})
_ACTIVATION_TABLE = "ACT2FN"
# Names the rewritten code reads, and the import each takes.
_VLLM_NAMES = {
    _LINEAR: "from vllm.model_executor.layers.linear import ReplicatedLinear",
    "get_act_fn": "from vllm.model_executor.layers.activation import get_act_fn",
    "QuantizationConfig": (
        "from vllm.model_executor.layers.quantization import QuantizationConfig"
    ),
    "PretrainedConfig": "from transformers import PretrainedConfig",
}
# What a copied class's constructor says when it takes vLLM's quantization.
_QUANTIZED = "quant_config: QuantizationConfig"
# transformers' decorators that change where a forward runs, never what it computes.
_KERNEL_DECORATORS = frozenset({"use_kernel_forward_from_hub", "use_kernelized_func"})


@dataclass
class _Copy:
    """What one class's rewrite found: the linear layers it builds, the HF classes it names."""

    namespace: dict[str, Any]
    # Copied module classes that take vLLM's quant_config (they build linear layers).
    quantized_classes: set[str] = field(default_factory=set)
    linears: set[str] = field(default_factory=set)
    # Whether the class builds a linear layer, itself or through a class it builds.
    quantizes: bool = False
    refusals: list[str] = field(default_factory=list)
    # The calls of quantized classes at ``self.<attr> = Class(...)``, which get a prefix.
    prefixed: set[int] = field(default_factory=set)


class _OnVllmLayers(cst.CSTTransformer):
    """One HF class rewritten onto vLLM's layers (see the module docstring)."""

    def __init__(self, copy: _Copy) -> None:
        self.copy = copy

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.ClassDef:
        return updated_node.with_changes(decorators=self._decorators(updated_node))

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        updated_node = updated_node.with_changes(
            decorators=self._decorators(updated_node)
        )
        if updated_node.returns is not None and self._foreign(updated_node.returns):
            updated_node = updated_node.with_changes(returns=None)
        if updated_node.name.value != "__init__" or not self.copy.quantizes:
            return updated_node
        extra = [
            cst.Param(
                cst.Name("quant_config"),
                cst.Annotation(cst.parse_expression("QuantizationConfig | None")),
                default=cst.Name("None"),
            ),
            cst.Param(
                cst.Name("prefix"),
                cst.Annotation(cst.Name("str")),
                default=cst.SimpleString('""'),
            ),
        ]
        params = updated_node.params
        return updated_node.with_changes(
            params=params.with_changes(params=[*params.params, *extra])
        )

    def leave_Param(
        self, original_node: cst.Param, updated_node: cst.Param
    ) -> cst.Param:
        annotation = updated_node.annotation
        if annotation is None or not self._foreign(annotation):
            return updated_node
        value = self.copy.namespace.get(node_code(annotation.annotation))
        if isinstance(value, type) and _is_config_class(value):
            return updated_node.with_changes(
                annotation=cst.Annotation(cst.Name("PretrainedConfig"))
            )
        return updated_node.with_changes(annotation=None)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._built_at(node) and isinstance(node.value, cst.Call):
            self.copy.prefixed.add(id(node.value))

    def leave_Call(
        self, original_node: cst.Call, updated_node: cst.Call
    ) -> cst.BaseExpression:
        name = node_code(updated_node.func)
        quantized = name in _LINEAR_NAMES or name in self.copy.quantized_classes
        if quantized and id(original_node) not in self.copy.prefixed:
            self.copy.refusals.append(
                f"`{node_code(original_node)}` builds linear layers where no prefix names them"
            )
        return updated_node

    @staticmethod
    def _built_at(node: cst.Assign) -> str:
        """``attr`` of ``self.<attr> = Class(...)`` ("" for any other line)."""
        target = node.targets[0].target
        if (
            len(node.targets) == 1
            and isinstance(target, cst.Attribute)
            and node_code(target.value) == "self"
            and isinstance(node.value, cst.Call)
        ):
            return target.attr.value
        return ""

    def leave_Assign(
        self, original_node: cst.Assign, updated_node: cst.Assign
    ) -> cst.Assign:
        attr = self._built_at(original_node)
        value = updated_node.value
        if not attr or not isinstance(value, cst.Call):
            return updated_node
        name = node_code(value.func)
        if name not in _LINEAR_NAMES and name not in self.copy.quantized_classes:
            return updated_node
        self.copy.quantizes = True
        if name in _LINEAR_NAMES:
            self.copy.linears.add(attr)
            value = value.with_changes(func=cst.Name(_LINEAR))
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [*value.args[:-1], value.args[-1].with_changes(comma=comma)]
        args += [
            _keyword("quant_config", cst.Name("quant_config"), comma),
            _keyword("prefix", cst.parse_expression(f'f"{{prefix}}.{attr}"')),
        ]
        return updated_node.with_changes(value=value.with_changes(args=args))

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        if node_code(updated_node.value) != _ACTIVATION_TABLE:
            return updated_node
        index = updated_node.slice[0].slice
        if not isinstance(index, cst.Index):
            return updated_node
        return cst.Call(cst.Name("get_act_fn"), [cst.Arg(index.value)])

    def _decorators(self, node: cst.ClassDef | cst.FunctionDef) -> list[cst.Decorator]:
        kept = []
        for decorator in node.decorators:
            head = decorator.decorator
            name = node_code(head.func if isinstance(head, cst.Call) else head)
            if name in _KERNEL_DECORATORS:
                continue
            kept.append(decorator)
        return kept

    def _foreign(self, annotation: cst.Annotation) -> bool:
        """Whether the annotation names anything but builtins and torch."""
        names = {n.value for n in _names(annotation) if not hasattr(builtins, n.value)}
        return any(
            not isinstance(self.copy.namespace.get(name), types.ModuleType)
            for name in names
        )


def _keyword(
    name: str, value: cst.BaseExpression, comma: cst.Comma | None = None
) -> cst.Arg:
    """``name=value`` as code writes it, no spaces around the sign."""
    tight = cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""),
        whitespace_after=cst.SimpleWhitespace(""),
    )
    return cst.Arg(
        value,
        keyword=cst.Name(name),
        equal=tight,
        comma=comma or cst.MaybeSentinel.DEFAULT,
    )


class _LinearCalls(cst.CSTTransformer):
    """``self.<linear>(x)`` → ``self.<linear>(x)[0]``: vLLM's layers return (output, bias)."""

    def __init__(self, linears: set[str]) -> None:
        self.linears = linears

    def leave_Call(
        self, original_node: cst.Call, updated_node: cst.Call
    ) -> cst.BaseExpression:
        func = updated_node.func
        if (
            isinstance(func, cst.Attribute)
            and node_code(func.value) == "self"
            and func.attr.value in self.linears
        ):
            return cst.Subscript(
                updated_node, [cst.SubscriptElement(cst.Index(cst.Integer("0")))]
            )
        return updated_node


def _names(node: cst.CSTNode) -> Iterator[cst.Name]:
    found: list[cst.Name] = []

    class _Visitor(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name)

    node.visit(_Visitor())
    return iter(found)


def _is_config_class(value: type) -> bool:
    from transformers import PretrainedConfig

    return issubclass(value, PretrainedConfig)


def _import_line(name: str, module: types.ModuleType) -> str:
    """The line that binds ``name`` to ``module`` as HF's module binds it."""
    dotted = module.__name__
    if dotted == name:
        return f"import {name}"
    parent, _, last = dotted.rpartition(".")
    if last == name:
        return f"from {parent} import {name}"
    return f"import {dotted} as {name}"


def _module_classes(cls: type, code: str, namespace: dict[str, Any]) -> list[type]:
    """The module classes defined beside ``cls`` that ``code`` names."""
    from torch import nn

    return [
        value
        for name in sorted(free_names(code) - {cls.__name__})
        if isinstance(value := namespace.get(name), type)
        and value.__module__ == cls.__module__
        and issubclass(value, nn.Module)
    ]


def _copied(cls: type, seen: dict[str, CopiedCode], imports: dict[str, None]) -> None:
    """``cls`` rewritten into ``seen`` (by name, the classes it builds first)."""
    from torch import nn

    parsed = parse_class(cls)
    if parsed is None:
        raise AnalysisError(f"{cls.__name__} has no source to copy")
    if cls.__bases__ != (nn.Module,):
        raise AnalysisError(
            f"{cls.__name__} derives from {', '.join(b.__name__ for b in cls.__bases__)}, "
            "not torch's Module alone"
        )
    copy = _Copy(vars(sys.modules[cls.__module__]))
    built = _module_classes(
        cls, cst.Module([]).code_for_node(parsed.classdef), copy.namespace
    )
    for child in built:
        if child.__name__ not in seen:
            _copied(child, seen, imports)
        if _QUANTIZED in seen[child.__name__].code:
            copy.quantized_classes.add(child.__name__)
    node = rewritten(parsed.classdef, _OnVllmLayers(copy))
    if copy.refusals:
        raise AnalysisError(f"{cls.__name__} is not copied: {copy.refusals[0]}")
    node = rewritten(node, _LinearCalls(copy.linears))
    code = cst.Module([]).code_for_node(node)
    names = {c.__name__ for c in built}
    for name in sorted(free_names(code) - names - {cls.__name__}):
        value = copy.namespace.get(name)
        if name in _VLLM_NAMES:
            imports[_VLLM_NAMES[name]] = None
        elif isinstance(value, types.ModuleType):
            imports[_import_line(name, value)] = None
        else:
            raise AnalysisError(
                f"{cls.__name__} reads `{name}`, which is neither torch nor a module "
                f"class of {cls.__module__}"
            )
    seen[cls.__name__] = CopiedCode(cls.__name__, parsed.source(parsed.classdef), code)


def own_module(cls: type[Any], attr: str, argument: str) -> OwnModule:
    """HF's module class ``cls``, built at ``attr`` from ``argument``, copied onto vLLM's layers.

    Raises :class:`AnalysisError` naming what the copy cannot carry.
    """
    seen: dict[str, CopiedCode] = {}
    imports: dict[str, None] = {}
    _copied(cls, seen, imports)
    top = seen[cls.__name__]
    return OwnModule(
        attr=attr,
        hf_class=cls.__name__,
        source=top.source,
        argument=argument,
        classes=tuple(seen.values()),
        import_lines=tuple(imports),
        quantized=_QUANTIZED in top.code,
    )


def _copy_of(snippet: Any, name: str) -> str:
    module = own_module(getattr(snippet, name), "proj", "config")
    return "\n\n".join(c.code for c in module.classes)


EXAMPLES = [
    valid(
        "a_pooling_projector_is_copied_with_its_norm_class_and_linear_on_vllm",
        """
        import torch
        from torch import nn

        ACT2FN = {}


        class TinyRMSNorm(nn.Module):
            def __init__(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.zeros(dim))

            def forward(self, x):
                return x * (1.0 + self.weight)


        class TinyProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.norm = TinyRMSNorm(config.hidden_size)
                self.act = ACT2FN[config.act]
                self.proj = nn.Linear(config.hidden_size, config.out_size, bias=False)

            def forward(self, x):
                pooled = x.mean(1, keepdim=True)
                return self.proj(self.act(self.norm(pooled)))
        """,
        lambda snippet: [
            line.strip()
            for line in _copy_of(snippet, "TinyProjector").splitlines()
            if "self.proj" in line or "self.act =" in line or "class " in line
        ],
        [
            "class TinyRMSNorm(nn.Module):",
            "class TinyProjector(nn.Module):",
            "self.act = get_act_fn(config.act)",
            "self.proj = ReplicatedLinear(config.hidden_size, config.out_size, "
            'bias=False, quant_config=quant_config, prefix=f"{prefix}.proj")',
            "return self.proj(self.act(self.norm(pooled)))[0]",
        ],
    ),
    invalid(
        "a_class_reading_an_hf_helper_function_refuses",
        """
        from torch import nn


        def pixel_shuffle(x, factor):
            return x


        class ShuffleProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.factor = config.factor

            def forward(self, x):
                return pixel_shuffle(x, self.factor)
        """,
        lambda snippet: own_module(snippet.ShuffleProjector, "proj", "config"),
        refusal=AnalysisError,
        match="reads `pixel_shuffle`",
    ),
    valid(
        "a_class_it_builds_with_a_linear_layer_gets_the_quantization_and_a_prefix",
        """
        from torch import nn


        class Block(nn.Module):
            def __init__(self, size):
                super().__init__()
                self.fc = nn.Linear(size, size)

            def forward(self, x):
                return self.fc(x)


        class Projector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.block = Block(config.hidden_size)

            def forward(self, x):
                return self.block(x)
        """,
        lambda snippet: [
            line.strip()
            for line in _copy_of(snippet, "Projector").splitlines()
            if "= Block(" in line or "self.fc =" in line or "def __init__" in line
        ],
        [
            "def __init__(self, size, quant_config: QuantizationConfig | None = None, "
            'prefix: str = ""):',
            "self.fc = ReplicatedLinear(size, size, quant_config=quant_config, "
            'prefix=f"{prefix}.fc")',
            "def __init__(self, config, quant_config: QuantizationConfig | None = None, "
            'prefix: str = ""):',
            "self.block = Block(config.hidden_size, quant_config=quant_config, "
            'prefix=f"{prefix}.block")',
        ],
    ),
    invalid(
        "linear_layers_built_in_a_list_have_no_prefix_to_quantize_by",
        """
        from torch import nn


        class Projector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

            def forward(self, x):
                return self.layers[1](self.layers[0](x))
        """,
        lambda snippet: own_module(snippet.Projector, "proj", "config"),
        refusal=AnalysisError,
        match="builds linear layers where no prefix names them",
    ),
]
