"""What HF's feature method does, step by step, so that a port writes it as vLLM code.

vLLM's own ports do not call HF's ``get_image_features``: they call vLLM's
tower through its own API (``select_layers``, ``feature_select_strategy``)
and then their projector. This rule reads HF's method and says, for each
statement, which of those steps it is:

    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
    if isinstance(vision_feature_layer, int):
        selected = image_outputs.hidden_states[vision_feature_layer]
        if vision_feature_select_strategy == "default":
            selected = selected[:, 1:]
    else:
        pool = [image_outputs.hidden_states[i] for i in vision_feature_layer]
        if vision_feature_select_strategy == "default":
            pool = [hs[:, 1:] for hs in pool]
        selected = torch.cat(pool, dim=-1)
    image_features = self.multi_modal_projector(selected)

is the tower on ``pixel_values``; the hidden states of the layer or layers
``config.vision_feature_layer`` names, side by side; the CLS token dropped
when ``config.vision_feature_select_strategy`` is "default"; then
``multi_modal_projector``. A parameter HF leaves None and fills from the
config (``@merge_with_config_defaults``) is read from the config; a branch on
a parameter the port leaves None (``if image_sizes is not None:``) never
runs. The method is walked as a small interpreter over these values; any
statement it cannot name as one of the steps refuses, with the line, and the
port keeps the path it has (HF's method run on the class's modules).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method, self_call
from mmport.errors import AnalysisError
from mmport.spec import Source, VllmFeaturePath

__all__ = [
    "EXAMPLES",
    "OUTPUT_FIELDS",
    "ConfigValue",
    "Features",
    "HiddenStates",
    "LayerPool",
    "PathValue",
    "PathWalk",
    "Refused",
    "TowerOutput",
    "native_feature_path",
    "node_code",
    "path_parameters",
    "read_names",
]

# Keywords of a tower call that change nothing the path reads (HF's output is an object
# either way; every layer's output is kept when asked for by the layer selection).
_INERT_KEYWORDS = frozenset({"return_dict", "output_hidden_states"})
# The decorator that fills a parameter left None from the config attribute of its name.
_CONFIG_DEFAULTS = "merge_with_config_defaults"
# The fields of HF's tower output a path may read whole (a vLLM module answers one).
OUTPUT_FIELDS = ("last_hidden_state", "pooler_output")
# HF's slice that drops the CLS token, and the strategy value it stands for in vLLM.
_DROP_CLS = "[:, 1:]"
_DEFAULT_STRATEGY = '"default"'


class Refused(Exception):
    """A statement the rule cannot name as a step (the reason, with the line)."""


@dataclass(frozen=True)
class TowerOutput:
    """The tower's output object."""


@dataclass(frozen=True)
class HiddenStates:
    """Hidden states of the tower: ``layers`` (code; "" for the last layer's output),
    several side by side (``several``), the CLS token dropped under ``strategy``."""

    layers: str
    several: bool = False
    strategy: str = ""
    # The field of HF's output read, where no layer is chosen (``pooler_output``: the
    # merged patches Qwen2-VL's tower gives).
    field: str = "last_hidden_state"


@dataclass(frozen=True)
class LayerPool:
    """A list of hidden states, one per layer of ``layers``."""

    layers: str
    strategy: str = ""


@dataclass(frozen=True)
class Features:
    """Hidden states after HF's modules ``steps``, in order."""

    hidden: HiddenStates
    steps: tuple[str, ...] = ()
    # HF's last reshape of the features into (items, rows, <this>): code on the class.
    regroup: str = ""


@dataclass(frozen=True)
class ConfigValue:
    """A parameter HF fills from the config: its code on the generated class's config."""

    code: str


PathValue = TowerOutput | HiddenStates | LayerPool | Features | ConfigValue | str | None


def node_code(node: cst.CSTNode) -> str:
    """A node's code as HF wrote it, without surrounding whitespace."""
    return cst.Module([]).code_for_node(node).strip()


class PathWalk:
    """The interpreter over one feature method's statements (see the module docstring)."""

    def __init__(
        self,
        parsed: ParsedClass,
        tower: str,
        tower_input: str,
        modules: Sequence[str],
        env: dict[str, PathValue],
    ) -> None:
        self.parsed = parsed
        self.tower = tower
        self.tower_input = tower_input
        self.modules = modules
        self.env = env
        self.result: PathValue = None
        self.output: PathValue = None  # what HF writes into the output's pooler_output
        self.tower_line: Source | None = None
        self.selection: list[Source] = []
        self.steps: list[Source] = []
        # Keywords of the tower call handed on to vLLM's module, which takes them with
        # HF's meaning (Idefics3's ``patch_attention_mask``): allowed, then found.
        self.handed_on: frozenset[str] = frozenset()
        self.tower_keywords: dict[str, str] = {}

    def refuse(self, node: cst.CSTNode, why: str) -> Refused:
        """A refusal naming ``node``'s line."""
        return Refused(f"{why} ({self.parsed.source(node)})")

    # Statements.
    def block(self, body: Sequence[cst.BaseStatement | cst.BaseSmallStatement]) -> None:
        """Run ``body``, statement by statement."""
        for stmt in body:
            if self.result is not None:
                break
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self.small(small)
            elif isinstance(stmt, cst.BaseSmallStatement):
                self.small(stmt)
            elif isinstance(stmt, cst.If):
                self.branch(stmt)
            else:
                raise self.refuse(stmt, "a statement that is no step of a feature path")

    def small(self, node: cst.BaseSmallStatement) -> None:
        """One simple statement: an assignment, a return, a docstring."""
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.SimpleString):
            return
        if isinstance(node, cst.Return) and node.value is not None:
            value = self.expr(node.value)
            self.result = self.output if isinstance(value, TowerOutput) else value
            return
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Name):
                self.env[target.value] = self.expr(node.value)
                return
            if self._keyword_into_unset(target):
                return
            if (
                isinstance(target, cst.Attribute)
                and isinstance(self.expr(target.value), TowerOutput)
                and target.attr.value == "pooler_output"
            ):
                self.output = self.expr(node.value)
                return
        raise self.refuse(node, "a statement that is no step of a feature path")

    def _keyword_into_unset(self, target: cst.BaseAssignTargetExpression) -> bool:
        """``kwargs["output_hidden_states"] = True``: a keyword that changes nothing the
        path reads, put into keywords the port leaves unset (transformers 5.20's LLaVA)."""
        if not (
            isinstance(target, cst.Subscript)
            and isinstance(target.value, cst.Name)
            and self.env.get(target.value.value, "") is None
            and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index)
            and isinstance(target.slice[0].slice.value, cst.SimpleString)
        ):
            return False
        key = target.slice[0].slice.value.evaluated_value
        if key not in _INERT_KEYWORDS:
            raise self.refuse(target, f"the tower handed `{key!r}`")
        return True

    def branch(self, node: cst.If) -> None:
        """An ``if``: on a parameter the port leaves None, on the layers' kind, or on the strategy."""
        test = node.test
        if self._unset_test(test):
            if node.orelse is not None:
                self._orelse(node.orelse)
            return
        kind = self._isinstance_int(test)
        if kind is not None:
            self._layer_kinds(node, kind)
            return
        strategy = self._strategy_test(test)
        if strategy is not None and node.orelse is None:
            self._strategy(node, strategy)
            return
        raise self.refuse(node, "a branch that is no step of a feature path")

    def _orelse(self, orelse: cst.If | cst.Else) -> None:
        if isinstance(orelse, cst.Else):
            self.block(orelse.body.body)
        else:
            self.branch(orelse)

    def _unset_test(self, test: cst.BaseExpression) -> bool:
        """``x is not None`` on a name the port leaves None."""
        return (
            isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.IsNot)
            and node_code(test.comparisons[0].comparator) == "None"
            and self.env.get(test.left.value, "") is None
        )

    def _isinstance_int(self, test: cst.BaseExpression) -> ConfigValue | None:
        """The config value tested by ``isinstance(layers, int)``."""
        if (
            isinstance(test, cst.Call)
            and node_code(test.func) == "isinstance"
            and len(test.args) == 2
            and node_code(test.args[1].value) == "int"
            and isinstance(test.args[0].value, cst.Name)
        ):
            value = self.env.get(test.args[0].value.value)
            return value if isinstance(value, ConfigValue) else None
        return None

    def _strategy_test(self, test: cst.BaseExpression) -> ConfigValue | None:
        """The config value tested by ``strategy == "default"``."""
        if (
            isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)
            and node_code(test.comparisons[0].comparator) == _DEFAULT_STRATEGY
        ):
            value = self.env.get(test.left.value)
            return value if isinstance(value, ConfigValue) else None
        return None

    def _fork(
        self, body: Sequence[cst.BaseStatement | cst.BaseSmallStatement]
    ) -> dict[str, PathValue]:
        """The names ``body`` binds differently, run on a copy of the state."""
        walk = PathWalk(
            self.parsed, self.tower, self.tower_input, self.modules, dict(self.env)
        )
        walk.block(body)
        if walk.result is not None or walk.output is not None:
            raise Refused("a feature path that returns from inside a branch")
        self.selection += walk.selection
        self.steps += walk.steps
        self.tower_line = self.tower_line or walk.tower_line
        return {k: v for k, v in walk.env.items() if self.env.get(k, ...) != v}

    def _layer_kinds(self, node: cst.If, layers: ConfigValue) -> None:
        """One layer (an int) or several (a list), which vLLM's ``select_layers`` takes alike."""
        if not isinstance(node.orelse, cst.Else):
            raise self.refuse(node, "a branch on one layer with no branch on several")
        one = self._fork(node.body.body)
        several = self._fork(node.orelse.body.body)
        merged = {}
        for name in one.keys() | several.keys():
            a, b = one.get(name), several.get(name)
            alike = (
                isinstance(a, HiddenStates)
                and isinstance(b, HiddenStates)
                and a.strategy == b.strategy
            )
            if alike and a.layers == b.layers == layers.code:  # type: ignore[union-attr]
                merged[name] = HiddenStates(layers.code, True, a.strategy)  # type: ignore[union-attr]
                continue
            if isinstance(a, LayerPool) or isinstance(b, LayerPool):
                continue  # a local of one branch only
            raise self.refuse(
                node, "branches on the layers' kind that select unlike features"
            )
        self.env.update(merged)

    def _strategy(self, node: cst.If, strategy: ConfigValue) -> None:
        """The CLS token dropped when the strategy is "default": vLLM's ``feature_select_strategy``."""
        changed = self._fork(node.body.body)
        for name, value in changed.items():
            before = self.env.get(name)
            if isinstance(value, (HiddenStates, LayerPool)) and isinstance(
                before, type(value)
            ):
                cropped = dataclasses.replace(before, strategy=_DEFAULT_STRATEGY)
                if value == cropped:
                    self.env[name] = dataclasses.replace(before, strategy=strategy.code)
                    continue
            raise self.refuse(
                node, "a branch on the strategy that does more than drop the CLS token"
            )

    # Expressions.
    def expr(self, node: cst.BaseExpression) -> PathValue:
        """The value of ``node``; one that reads nothing but values the port leaves
        unset is unset too (``{k: v for k, v in kwargs.items() if v is not None}``)."""
        read = read_names(node)
        if read and all(self.env.get(name, "") is None for name in read):
            return None
        if isinstance(node, cst.Name):
            if node.value not in self.env:
                raise self.refuse(node, f"`{node.value}` is not a value of the path")
            return self.env[node.value]
        if isinstance(node, cst.Integer) or (
            isinstance(node, cst.UnaryOperation)
            and isinstance(node.expression, cst.Integer)
        ):
            return ConfigValue(node_code(node))
        if isinstance(node, cst.Call):
            return self.call(node)
        if (
            isinstance(node, cst.Attribute)
            and node.attr.value in OUTPUT_FIELDS
            and isinstance(self.expr(node.value), TowerOutput)
        ):
            self.selection.append(self.parsed.source(node))
            return HiddenStates("", field=node.attr.value)
        if isinstance(node, cst.Subscript):
            return self.subscript(node)
        if isinstance(node, cst.ListComp):
            return self.pool(node)
        raise self.refuse(node, f"`{node_code(node)}` is no step of a feature path")

    def subscript(self, node: cst.Subscript) -> PathValue:
        """A layer's hidden states (``out.hidden_states[layer]``), or the CLS token dropped."""
        index = node_code(node)[len(node_code(node.value)) :]
        if (
            isinstance(node.value, cst.Attribute)
            and node.value.attr.value == "hidden_states"
            and isinstance(self.expr(node.value.value), TowerOutput)
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
        ):
            layer = self.expr(node.slice[0].slice.value)
            if isinstance(layer, ConfigValue):
                self.selection.append(self.parsed.source(node))
                return HiddenStates(layer.code)
        value = self.expr(node.value)
        if (
            index == _DROP_CLS
            and isinstance(value, HiddenStates)
            and not value.strategy
        ):
            return dataclasses.replace(value, strategy=_DEFAULT_STRATEGY)
        raise self.refuse(node, f"`{node_code(node)}` is no step of a feature path")

    def pool(self, node: cst.ListComp) -> LayerPool:
        """``[<hidden states of layer i> for i in layers]``, or a pool with the CLS token dropped."""
        if len(node.for_in.ifs) or node.for_in.inner_for_in is not None:
            raise self.refuse(node, "a comprehension that is no list of layers")
        if not isinstance(node.for_in.target, cst.Name):
            raise self.refuse(node, "a comprehension that is no list of layers")
        name = node.for_in.target.value
        over = self.expr(node.for_in.iter)
        if isinstance(over, ConfigValue):
            saved = dict(self.env)
            self.env[name] = over
            element = self.expr(node.elt)
            self.env = saved
            if isinstance(element, HiddenStates) and element.layers == over.code:
                return LayerPool(over.code, element.strategy)
        if isinstance(over, LayerPool):
            saved = dict(self.env)
            self.env[name] = HiddenStates(over.layers, strategy=over.strategy)
            element = self.expr(node.elt)
            self.env = saved
            if isinstance(element, HiddenStates) and element.layers == over.layers:
                return LayerPool(over.layers, element.strategy)
        raise self.refuse(node, "a comprehension that is no list of layers")

    def call(self, node: cst.Call) -> PathValue:
        """The tower, a module of the class, ``torch.cat`` of a pool, or ``list`` of the items."""
        attr = self_call(node)
        if attr == self.tower:
            return self.tower_call(node)
        if attr in self.modules and len(node.args) == 1 and not node.args[0].keyword:
            value = self.expr(node.args[0].value)
            if isinstance(value, HiddenStates):
                value = Features(value)
            if isinstance(value, Features):
                self.steps.append(self.parsed.source(node))
                return Features(value.hidden, (*value.steps, attr))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "reshape":
            return self.regroup(node, node.func.value)
        func = node_code(node.func)
        if func == "torch.cat" and node.args:
            pool = self.expr(node.args[0].value)
            dims = [node_code(a.value) for a in node.args[1:]]
            if isinstance(pool, LayerPool) and dims == ["-1"]:
                return HiddenStates(pool.layers, True, pool.strategy)
        if func == "list" and len(node.args) == 1:
            value = self.expr(node.args[0].value)
            if isinstance(value, (HiddenStates, Features)):
                return value  # one tensor per item: the batch's first axis
        raise self.refuse(node, f"`{node_code(node)}` is no step of a feature path")

    def regroup(self, node: cst.Call, reshaped: cst.BaseExpression) -> Features:
        """``features.reshape(<features>.shape[0], -1, self.config...)``: rows kept per item,
        each of the width the config names (Aya Vision's pooler output)."""
        value = self.expr(reshaped)
        if isinstance(value, HiddenStates):
            value = Features(value)
        args = [node_code(a.value) for a in node.args if not a.keyword and not a.star]
        if isinstance(value, Features) and not value.regroup and len(args) == 3:
            batch, rows, width = node.args[0].value, args[1], node.args[2].value
            per_item = (
                isinstance(batch, cst.Subscript)
                and isinstance(batch.value, cst.Attribute)
                and batch.value.attr.value == "shape"
                and node_code(batch)[len(node_code(batch.value)) :] == "[0]"
                and isinstance(self.expr(batch.value.value), (HiddenStates, Features))
            )
            width_code = node_code(width)
            configured = width_code.startswith("self.config.") and not (
                read_names(width) - {"self"}
            )
            if per_item and rows == "-1" and (configured or width_code.isdigit()):
                self.steps.append(self.parsed.source(node))
                return dataclasses.replace(value, regroup=width_code)
        raise self.refuse(node, f"`{node_code(node)}` is no step of a feature path")

    def tower_call(self, node: cst.Call) -> TowerOutput:
        """``self.<tower>(<input>, ...)`` with keywords that change nothing read."""
        if not node.args:
            raise self.refuse(node, "the tower called on nothing")
        first = next(
            (a for a in node.args if a.keyword and a.keyword.value == self.tower_input),
            node.args[0],
        )
        keyword_ok = first.keyword is None or first.keyword.value == self.tower_input
        if first.star or not keyword_ok or node_code(first.value) != self.tower_input:
            raise self.refuse(
                node, f"the tower called on another input than `{self.tower_input}`"
            )
        for arg in (a for a in node.args if a is not first):
            handed_on = (
                arg.star == "**" and self.env.get(node_code(arg.value), "") is None
            )
            inert = arg.keyword is not None and arg.keyword.value in _INERT_KEYWORDS
            if arg.keyword is not None and arg.keyword.value in self.handed_on:
                self.tower_keywords[arg.keyword.value] = node_code(arg.value)
            elif not (handed_on or inert):
                raise self.refuse(node, f"the tower called with `{node_code(arg)}`")
        self.tower_line = self.parsed.source(node)
        return TowerOutput()


class _Names(cst.CSTVisitor):
    """Every name under a node (a comprehension's targets)."""

    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)


class _ReadNames(_Names):
    """The names an expression reads, less those its comprehensions bind."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> None:
        targets = _Names()
        node.target.visit(targets)
        self.bound |= targets.found


def read_names(node: cst.BaseExpression) -> set[str]:
    visitor = _ReadNames()
    node.visit(visitor)
    return visitor.found - visitor.bound - set(dir(builtins))


def path_parameters(
    method: cst.FunctionDef,
    tower_input: str,
    config: Any,
    fields: Sequence[str] = (),
) -> dict[str, PathValue]:
    """Each parameter's value as the port calls the method: the tower's input or
    another of the item's ``fields`` (its own name), a config attribute HF fills a
    None default from, or None (left unset)."""
    decorators = {
        node_code(d.decorator).split("(")[0].rsplit(".", 1)[-1]
        for d in method.decorators
    }
    fills = _CONFIG_DEFAULTS in decorators
    env: dict[str, PathValue] = {}
    params = method.params
    for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
        name = param.name.value
        if name == "self":
            continue
        if name == tower_input or name in fields:
            env[name] = name
        elif param.default is not None and node_code(param.default) == "None":
            env[name] = (
                ConfigValue(f"config.{name}")
                if fills and hasattr(config, name)
                else None
            )
        elif param.default is not None:
            env[name] = ConfigValue(node_code(param.default))
        else:
            raise AnalysisError(
                f"{method.name.value} takes `{name}`, which no item gives"
            )
    if isinstance(params.star_kwarg, cst.Param):
        env[params.star_kwarg.name.value] = None  # HF's TransformersKwargs: none handed
    return env


def native_feature_path(
    cls: type[Any],
    method: str,
    modality: str,
    tower: str,
    tower_input: str,
    modules: Sequence[str],
    config: Any,
) -> VllmFeaturePath:
    """HF's ``cls.<method>`` as the steps a vLLM port writes (see the module docstring).

    ``tower`` is the attribute holding the tower, called on ``tower_input``;
    ``modules`` the other modules the path may run on its features; ``config``
    the config the class is built from, whose attributes fill parameters HF
    leaves None. Raises :class:`AnalysisError` naming the line it cannot read.
    """
    found = find_method(cls, method)
    if found is None:
        raise AnalysisError(f"{cls.__name__}.{method} is not in transformers' sources")
    parsed, node = found
    walk = PathWalk(
        parsed, tower, tower_input, modules, path_parameters(node, tower_input, config)
    )
    try:
        walk.block(node.body.body)
    except Refused as exc:
        raise AnalysisError(f"{cls.__name__}.{method}: {exc}") from None
    result = walk.result
    if isinstance(result, HiddenStates):
        result = Features(result)
    if not isinstance(result, Features) or walk.tower_line is None:
        raise AnalysisError(f"{cls.__name__}.{method} returns no features of the tower")
    hidden = result.hidden
    return VllmFeaturePath(
        modality=modality,
        method=method,
        source=parsed.source(node),
        tower=tower,
        tower_input=tower_input,
        layers=hidden.layers,
        strategy=hidden.strategy,
        steps=result.steps,
        regroup=result.regroup,
        tower_output=hidden.field,
        tower_line=walk.tower_line,
        selection_lines=tuple(dict.fromkeys(walk.selection)),
        step_lines=tuple(dict.fromkeys(walk.steps)),
    )


def _summary(path: VllmFeaturePath) -> tuple[str, str, tuple[str, ...]]:
    return path.layers, path.strategy, path.steps


_LLAVA = """
import torch


def merge_with_config_defaults(func):
    return func


class LlavaModel:
    @merge_with_config_defaults
    def get_image_features(self, pixel_values, vision_feature_layer=None,
                           vision_feature_select_strategy=None, image_sizes=None, **kwargs):
        if image_sizes is not None:
            kwargs["image_sizes"] = image_sizes
        image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
        if isinstance(vision_feature_layer, int):
            selected = image_outputs.hidden_states[vision_feature_layer]
            if vision_feature_select_strategy == "default":
                selected = selected[:, 1:]
        else:
            hs_pool = [image_outputs.hidden_states[i] for i in vision_feature_layer]
            if vision_feature_select_strategy == "default":
                hs_pool = [hs[:, 1:] for hs in hs_pool]
            selected = torch.cat(hs_pool, dim=-1)
        image_features = self.multi_modal_projector(selected)
        if image_sizes is not None:
            image_features = torch.split(image_features, image_sizes)
        else:
            image_features = list(image_features)
        image_outputs.pooler_output = image_features
        return image_outputs
"""

_CONFIG = type(
    "Config",
    (),
    {"vision_feature_layer": -2, "vision_feature_select_strategy": "default"},
)()


def _path(snippet: Any, cls: str) -> VllmFeaturePath:
    return native_feature_path(
        getattr(snippet, cls),
        "get_image_features",
        "image",
        "vision_tower",
        "pixel_values",
        ("multi_modal_projector",),
        _CONFIG,
    )


def _llava(snippet: Any, cls: str = "LlavaModel") -> tuple[str, str, tuple[str, ...]]:
    return _summary(_path(snippet, cls))


EXAMPLES = [
    valid(
        "llava_selects_configured_layers_and_strategy_then_projects",
        _LLAVA,
        _llava,
        (
            "config.vision_feature_layer",
            "config.vision_feature_select_strategy",
            ("multi_modal_projector",),
        ),
    ),
    valid(
        "llava_of_transformers_5_20_puts_inert_keywords_into_unset_kwargs",
        """
        def merge_with_config_defaults(func):
            return func


        class LlavaModel:
            @merge_with_config_defaults
            def get_image_features(self, pixel_values, vision_feature_layer=None, **kwargs):
                kwargs = {k: v for k, v in kwargs.items() if v is not None}
                kwargs["output_hidden_states"] = True  # Ignore arg on purpose
                image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
                selected = image_outputs.hidden_states[vision_feature_layer]
                return self.multi_modal_projector(selected)
        """,
        _llava,
        ("config.vision_feature_layer", "", ("multi_modal_projector",)),
    ),
    invalid(
        "a_keyword_put_into_the_towers_kwargs_that_changes_what_it_gives",
        """
        class LlavaModel:
            def get_image_features(self, pixel_values, **kwargs):
                kwargs["interpolate_pos_encoding"] = True
                image_outputs = self.vision_tower(pixel_values, **kwargs)
                return self.multi_modal_projector(image_outputs.last_hidden_state)
        """,
        _llava,
        refusal=AnalysisError,
        match="the tower handed `'interpolate_pos_encoding'`",
    ),
    valid(
        "vipllava_always_drops_cls_from_each_layer",
        """
        import torch


        def merge_with_config_defaults(func):
            return func


        class VipLlavaModel:
            @merge_with_config_defaults
            def get_image_features(self, pixel_values, vision_feature_layer=None, **kwargs):
                image_outputs = self.vision_tower(pixel_values, **kwargs)
                if isinstance(vision_feature_layer, int):
                    image_features = image_outputs.hidden_states[vision_feature_layer][:, 1:]
                else:
                    image_features = [image_outputs.hidden_states[index][:, 1:] for index in vision_feature_layer]
                    image_features = torch.cat(image_features, dim=-1)
                image_features = self.multi_modal_projector(image_features)
                image_outputs.pooler_output = image_features
                return image_outputs
        """,
        lambda snippet: _llava(snippet, "VipLlavaModel"),
        ("config.vision_feature_layer", '"default"', ("multi_modal_projector",)),
    ),
    valid(
        "paligemma_projects_the_last_hidden_state",
        """
        class PaliGemmaModel:
            def get_image_features(self, pixel_values, **kwargs):
                image_outputs = self.vision_tower(pixel_values, **kwargs)
                selected_image_feature = image_outputs.last_hidden_state
                image_features = self.multi_modal_projector(selected_image_feature)
                image_outputs.pooler_output = image_features
                return image_outputs
        """,
        lambda snippet: _llava(snippet, "PaliGemmaModel"),
        ("", "", ("multi_modal_projector",)),
    ),
    valid(
        "aya_vision_regroups_the_projected_rows_per_item_to_the_text_width",
        """
        class AyaVisionModel:
            def get_image_features(self, pixel_values, **kwargs):
                image_outputs = self.vision_tower(pixel_values=pixel_values, return_dict=True)
                selected = image_outputs.last_hidden_state
                pooled = self.multi_modal_projector(selected)
                image_outputs.pooler_output = pooled.reshape(
                    selected.shape[0], -1, self.config.text_config.hidden_size
                )
                return image_outputs
        """,
        lambda snippet: _path(snippet, "AyaVisionModel").regroup,
        "self.config.text_config.hidden_size",
    ),
    invalid(
        "a_reshape_reading_a_local_width_is_no_step",
        """
        class AyaVisionModel:
            def get_image_features(self, pixel_values, **kwargs):
                image_outputs = self.vision_tower(pixel_values)
                selected = image_outputs.last_hidden_state
                width = 7
                return self.multi_modal_projector(selected).reshape(selected.shape[0], -1, width)
        """,
        lambda snippet: _llava(snippet, "AyaVisionModel"),
        refusal=AnalysisError,
        match=r"is no step of a feature path \(example.py:6",
    ),
    invalid(
        "a_tower_read_for_its_patch_size_is_no_step",
        """
        class LlavaNextModel:
            def get_image_features(self, pixel_values, **kwargs):
                image_outputs = self.vision_tower(pixel_values, **kwargs)
                features = self.multi_modal_projector(image_outputs.last_hidden_state)
                return features.reshape(-1, self.vision_tower.patch_size)
        """,
        lambda snippet: _llava(snippet, "LlavaNextModel"),
        refusal=AnalysisError,
        match=r"is no step of a feature path \(example.py:5",
    ),
    invalid(
        "a_tower_called_with_a_keyword_the_port_cannot_give",
        """
        class AyaVisionModel:
            def get_image_features(self, pixel_values, **kwargs):
                image_outputs = self.vision_tower(pixel_values, interpolate=True)
                return self.multi_modal_projector(image_outputs.last_hidden_state)
        """,
        lambda snippet: _llava(snippet, "AyaVisionModel"),
        refusal=AnalysisError,
        match="the tower called with `interpolate=True",
    ),
]
