"""HF's projector module, read as a chain of layers a port writes with vLLM's.

Most connectors between a tower and the language model are a few layers
run one after another:

    class LlavaMultiModalProjector(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.linear_1 = nn.Linear(config.vision_config.hidden_size, config.text_config.hidden_size, bias=True)
            self.act = ACT2FN[config.projector_hidden_act]
            self.linear_2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size, bias=True)

        def forward(self, image_features):
            hidden_states = self.linear_1(image_features)
            hidden_states = self.act(hidden_states)
            hidden_states = self.linear_2(hidden_states)
            return hidden_states

A port builds the same layers under the same names (so the checkpoint's
weights load by name) from vLLM's: two linear layers with only an
element-wise activation between them shard as vLLM's own projectors shard
them, the first by its output (``ColumnParallelLinear``) and the second by
its input (``RowParallelLinear``), so no rank gathers between them; any other
linear layer is whole on every rank (``ReplicatedLinear``); an activation
from HF's table becomes vLLM's (``get_act_fn``); a LayerNorm stays as built.
A constructor's local lines (``num_feature_layers = ...``) are kept. Any
other layer or line refuses, naming it, and the port keeps HF's module.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Sequence
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method, self_call
from mmport.errors import AnalysisError
from mmport.spec import ProjectorLayer, Source, VllmProjector
from mmport.spec.native import ProjectorLayerKind

__all__ = ["EXAMPLES", "vllm_projector"]

# Element-wise activations torch builds as modules, which a port keeps as built.
_TORCH_ACTIVATIONS = frozenset({"GELU", "ReLU", "SiLU", "Tanh", "Sigmoid", "Identity"})
# HF's table of activations by name, which vLLM's get_act_fn reads by the same names.
_ACTIVATION_TABLE = "ACT2FN"
_LAYER_CLASSES = frozenset({"Linear", "LayerNorm", *_TORCH_ACTIVATIONS})


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


class _FreeNames(cst.CSTVisitor):
    """The names an expression reads (not attributes of them, not keyword names)."""

    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)


def _free_names(nodes: Sequence[cst.CSTNode]) -> set[str]:
    visitor = _FreeNames()
    for node in nodes:
        node.visit(visitor)
    return visitor.found


def _read(value: cst.BaseExpression) -> list[cst.CSTNode]:
    """What a line reads beside the layer class it builds: its arguments, or the whole local line."""
    if (
        isinstance(value, cst.Call)
        and _code(value.func).rsplit(".", 1)[-1] in _LAYER_CLASSES
    ):
        return list(value.args)
    if isinstance(value, cst.Subscript) and _code(value.value) == _ACTIVATION_TABLE:
        return list(value.slice)
    return [value]


class _Calls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        self.found = True


def _is_state(
    target: cst.BaseAssignTargetExpression, value: cst.BaseExpression
) -> bool:
    """``self.<name> = <value>`` that builds nothing (``self.config = config``)."""
    calls = _Calls()
    value.visit(calls)
    is_self = isinstance(target, cst.Attribute) and _code(target.value) == "self"
    return is_self and not calls.found and not isinstance(value, cst.Subscript)


def _is_super_init(node: cst.BaseSmallStatement) -> bool:
    return isinstance(node, cst.Expr) and _code(node.value).startswith("super(")


def _layer(
    parsed: ParsedClass, attr: str, value: cst.BaseExpression
) -> tuple[str, tuple[str, ...], Source]:
    """(kind, arguments) of one ``self.<attr> = ...`` line: "linear", "act" or "norm"."""
    source = parsed.source(value)
    if isinstance(value, cst.Subscript) and _code(value.value) == _ACTIVATION_TABLE:
        return "act", (_code(value.slice[0].slice.value),), source  # type: ignore[attr-defined]
    if isinstance(value, cst.Call):
        name = _code(value.func).rsplit(".", 1)[-1]
        if name == "Linear":
            positional = [_code(a.value) for a in value.args if a.keyword is None]
            keywords = {
                a.keyword.value: _code(a.value) for a in value.args if a.keyword
            }
            if len(positional) == 2 and set(keywords) <= {"bias"}:
                return (
                    "linear",
                    (*positional, f"bias={keywords.get('bias', 'True')}"),
                    source,
                )
        if name == "LayerNorm":
            return "norm", (_code(value),), source
        if name in _TORCH_ACTIVATIONS and not value.args:
            return "elementwise", (_code(value),), source
    raise AnalysisError(
        f"`self.{attr} = {_code(value)}` is no layer vLLM builds ({source})"
    )


def _constructor(
    parsed: ParsedClass, init: cst.FunctionDef, parameter: str
) -> tuple[list[str], dict[str, tuple[str, tuple[str, ...], Source]]]:
    """The local lines and the layers of HF's ``__init__``."""
    setup: list[str] = []
    layers: dict[str, tuple[str, tuple[str, ...], Source]] = {}
    known = {parameter, *dir(builtins)}
    for stmt in init.body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            raise AnalysisError(
                f"a constructor line that is no layer ({parsed.source(stmt)})"
            )
        for node in stmt.body:
            if _is_super_init(node) or (
                isinstance(node, cst.Expr) and isinstance(node.value, cst.SimpleString)
            ):
                continue
            if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
                raise AnalysisError(
                    f"a constructor line that is no layer ({parsed.source(stmt)})"
                )
            target = node.targets[0].target
            if _is_state(target, node.value):
                continue  # a value kept for later reads, which a chain's forward has none of
            if isinstance(target, cst.Attribute) and _code(target.value) == "self":
                layers[target.attr.value] = _layer(
                    parsed, target.attr.value, node.value
                )
            elif not isinstance(target, cst.Name):
                raise AnalysisError(
                    f"a constructor line that is no layer ({parsed.source(stmt)})"
                )
            unknown = _free_names(_read(node.value)) - known
            if unknown:
                raise AnalysisError(
                    f"the constructor reads {', '.join(sorted(unknown))} ({parsed.source(stmt)})"
                )
            if isinstance(target, cst.Name):
                setup.append(_code(stmt.with_changes(leading_lines=())))
                known.add(target.value)
    return setup, layers


def _chain(parsed: ParsedClass, forward: cst.FunctionDef) -> list[str]:
    """The layers ``forward`` runs one after another on its one input."""
    params = [p.name.value for p in forward.params.params if p.name.value != "self"]
    if len(params) != 1:
        raise AnalysisError(f"{forward.name.value} takes {len(params)} inputs, not one")
    current, order = params[0], list[str]()
    for stmt in forward.body.body:
        nodes = stmt.body if isinstance(stmt, cst.SimpleStatementLine) else [stmt]
        for node in nodes:
            value = getattr(node, "value", None)
            if (
                isinstance(node, cst.Return)
                and value is not None
                and _code(value) == current
            ):
                return order
            if not (
                isinstance(value, cst.Call)
                and self_call(value)
                and len(value.args) == 1
                and _code(value.args[0].value) == current
            ):
                raise AnalysisError(
                    f"a forward line that is no layer's call ({parsed.source(node)})"
                )
            order.append(self_call(value))
            if isinstance(node, cst.Return):
                return order
            if not (
                isinstance(node, cst.Assign)
                and isinstance(node.targets[0].target, cst.Name)
            ):
                raise AnalysisError(
                    f"a forward line that is no layer's call ({parsed.source(node)})"
                )
            current = node.targets[0].target.value
    raise AnalysisError(f"{forward.name.value} returns no layer's output")


# How the port builds each kind of HF layer: linear layers as sharded (:func:`_sharded`).
_KINDS: dict[str, ProjectorLayerKind] = {
    "act": "act",
    "elementwise": "module",
    "norm": "module",
}


def _sharded(
    order: Sequence[str], kinds: dict[str, str]
) -> dict[str, ProjectorLayerKind]:
    """Each linear layer's sharding: column then row across an element-wise activation."""
    sharding: dict[str, ProjectorLayerKind] = {}
    linears = [i for i, attr in enumerate(order) if kinds[attr] == "linear"]
    for first, second in itertools.pairwise(linears):
        between = {kinds[attr] for attr in order[first + 1 : second]}
        if order[first] not in sharding and between <= {"act", "elementwise"}:
            sharding[order[first]], sharding[order[second]] = "column", "row"
    return {
        attr: sharding.get(attr, "replicated")
        for attr in order
        if kinds[attr] == "linear"
    }


def vllm_projector(cls: type[Any], attr: str, argument: str) -> VllmProjector:
    """HF's projector class ``cls``, built at ``attr`` from ``argument``, as vLLM's layers.

    Raises :class:`AnalysisError` naming the line that is no layer of a chain.
    """
    init = find_method(cls, "__init__")
    forward = find_method(cls, "forward")
    if init is None or forward is None:
        raise AnalysisError(
            f"{cls.__name__} has no constructor and forward in its sources"
        )
    parsed, init_node = init
    params = [p.name.value for p in init_node.params.params if p.name.value != "self"]
    if len(params) != 1:
        raise AnalysisError(
            f"{cls.__name__} is built from {len(params)} arguments, not one"
        )
    setup, layers = _constructor(parsed, init_node, params[0])
    order = _chain(forward[0], forward[1])
    if sorted(order) != sorted(layers):
        raise AnalysisError(
            f"{cls.__name__}.forward does not run each of its layers once ({forward[0].source(forward[1])})"
        )
    kinds = {name: kind for name, (kind, _, _) in layers.items()}
    sharding = _sharded(order, kinds)
    return VllmProjector(
        attr=attr,
        hf_class=cls.__name__,
        source=parsed.source(parsed.classdef),
        parameter=params[0],
        argument=argument,
        setup=tuple(setup),
        layers=tuple(
            ProjectorLayer(
                name, _KINDS.get(kinds[name]) or sharding[name], *layers[name][1:]
            )
            for name in order
        ),
        forward_source=forward[0].source(forward[1]),
    )


def _kinds(snippet: Any, name: str) -> list[tuple[str, str]]:
    projector = vllm_projector(
        getattr(snippet, name), "multi_modal_projector", "config"
    )
    return [(layer.attr, layer.kind) for layer in projector.layers]


EXAMPLES = [
    valid(
        "two_linears_across_an_activation_shard_column_then_row",
        """
        from torch import nn

        ACT2FN = {}


        class LlavaMultiModalProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                num_feature_layers = 1 if isinstance(config.vision_feature_layer, int) else len(config.vision_feature_layer)
                self.linear_1 = nn.Linear(config.vision_config.hidden_size * num_feature_layers, config.text_config.hidden_size, bias=config.multimodal_projector_bias)
                self.act = ACT2FN[config.projector_hidden_act]
                self.linear_2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size, bias=config.multimodal_projector_bias)

            def forward(self, image_features):
                hidden_states = self.linear_1(image_features)
                hidden_states = self.act(hidden_states)
                hidden_states = self.linear_2(hidden_states)
                return hidden_states
        """,
        lambda snippet: _kinds(snippet, "LlavaMultiModalProjector"),
        [("linear_1", "column"), ("act", "act"), ("linear_2", "row")],
    ),
    valid(
        "a_norm_first_and_one_linear_alone_is_replicated",
        """
        from torch import nn


        class PaliGemmaMultiModalProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.norm = nn.LayerNorm(config.vision_config.hidden_size, eps=1e-5)
                self.linear = nn.Linear(config.vision_config.hidden_size, config.vision_config.projection_dim, bias=True)

            def forward(self, image_features):
                hidden_states = self.norm(image_features)
                return self.linear(hidden_states)
        """,
        lambda snippet: _kinds(snippet, "PaliGemmaMultiModalProjector"),
        [("norm", "module"), ("linear", "replicated")],
    ),
    valid(
        "deepseek_vl_keeps_its_config_and_shards_across_a_torch_activation",
        """
        from torch import nn


        class DeepseekVLAligner(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                in_features = config.vision_config.hidden_size
                self.linear1 = nn.Linear(in_features, config.text_config.hidden_size)
                self.activation = nn.GELU()
                self.linear2 = nn.Linear(config.text_config.hidden_size, config.text_config.hidden_size)

            def forward(self, vision_encodings):
                x = self.linear1(vision_encodings)
                x = self.activation(x)
                return self.linear2(x)
        """,
        lambda snippet: _kinds(snippet, "DeepseekVLAligner"),
        [("linear1", "column"), ("activation", "module"), ("linear2", "row")],
    ),
    invalid(
        "a_pooling_reshape_in_forward_is_no_chain",
        """
        from torch import nn


        class Gemma3MultiModalProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.linear = nn.Linear(config.vision_config.hidden_size, config.text_config.hidden_size)

            def forward(self, vision_outputs):
                pooled = vision_outputs.reshape(1, -1)
                return self.linear(pooled)
        """,
        lambda snippet: _kinds(snippet, "Gemma3MultiModalProjector"),
        refusal=AnalysisError,
        match=r"a forward line that is no layer's call \(example.py:10",
    ),
    invalid(
        "a_weight_parameter_is_no_layer",
        """
        import torch
        from torch import nn


        class Gemma3MultiModalProjector(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.weight = nn.Parameter(torch.zeros(config.vision_config.hidden_size))

            def forward(self, vision_outputs):
                return self.weight(vision_outputs)
        """,
        lambda snippet: _kinds(snippet, "Gemma3MultiModalProjector"),
        refusal=AnalysisError,
        match=r"is no layer vLLM builds",
    ),
]
