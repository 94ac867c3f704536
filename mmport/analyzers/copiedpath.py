"""HF's feature method copied as the class's own, its tower block replaced by vLLM's call.

Where a feature path does more after the tower than modules run one after
another (LLaVA-NeXT cuts the tiles of each image apart, unpads them and adds
a newline row per line of patches through a helper method), no table of
vLLM steps stands for it. The class then holds HF's method as its own,
copied, but for the statements that call the tower and select its output::

    image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
    if isinstance(vision_feature_layer, int):
        selected_image_feature = image_outputs.hidden_states[vision_feature_layer]
    else:
        ...
    if vision_feature_select_strategy == "default":
        selected_image_feature = selected_image_feature[:, 1:]

which :class:`~mmport.analyzers.nativepath.PathWalk` reads as vLLM's tower
with its layer selection and strategy, and which become one line::

    selected_image_feature = self._image_pixels_to_features(pixel_values)

The rest is copied as HF wrote it: statements before the tower (the tiles per
image from ``image_sizes``), the projector's call, the helper methods it
calls (copied as methods of the class) and the functions they call
(transplanted, :class:`~mmport.analyzers.transplant.Transplanter`). HF's
output object becomes its ``pooler_output``; a parameter HF fills from the
config is read from ``self.config`` at the top. Refuses, naming the line,
where the tower's output is read other than by the selection, where the
selection comes after a statement that reads the selected features, or
where the method takes a parameter no item field gives.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.nativepath import (
    OUTPUT_FIELDS,
    ConfigValue,
    HiddenStates,
    LayerPool,
    PathValue,
    PathWalk,
    Refused,
    TowerOutput,
    node_code,
    path_parameters,
)
from mmport.analyzers.sourcefile import ParsedClass, find_method, self_call
from mmport.analyzers.transplant import Transplanter
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten, statements
from mmport.spec import (
    CopiedCode,
    CopiedMethod,
    Source,
    VllmEncoder,
    VllmFeaturePath,
)

__all__ = [
    "EXAMPLES",
    "copied_feature_path",
    "copied_methods",
    "is_docstring",
    "with_helpers",
]

# The output attribute HF's feature methods put their features into.
_OUTPUT = "pooler_output"
# What the selection of the tower's output binds: consumed by vLLM's tower call.
_SELECTION = (TowerOutput, HiddenStates, LayerPool)


class _StatementNames(cst.CSTVisitor):
    """The names a statement reads (attribute bases included), the ``self.<m>(`` it
    calls, and the attributes of ``self`` it reads."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.calls: set[str] = set()
        self.attrs: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node_code(node.value) == "self":
            self.attrs.add(node.attr.value)

    def visit_Call(self, node: cst.Call) -> None:
        if self_call(node):
            self.calls.add(self_call(node))


def _read(stmt: cst.CSTNode) -> _StatementNames:
    names = _StatementNames()
    stmt.visit(names)
    return names


class _TowerCalls(cst.CSTVisitor):
    """The calls of the tower ``self.<tower>(...)`` under a node."""

    def __init__(self, tower: str) -> None:
        self.tower = tower
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self_call(node) == self.tower:
            self.found.append(node)


class _FieldReads(cst.CSTTransformer):
    """``<tower output>.<field>`` read (not written) → ``<field>``, for HF's whole fields."""

    def __init__(self, towers: set[str]) -> None:
        self.towers = towers
        self.found: dict[str, cst.Attribute] = {}
        self._targets = 0

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets += 1

    def leave_AssignTarget(
        self, original_node: cst.AssignTarget, updated_node: cst.AssignTarget
    ) -> cst.AssignTarget:
        self._targets -= 1
        return updated_node

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if (
            not self._targets
            and node_code(original_node.value) in self.towers
            and original_node.attr.value in OUTPUT_FIELDS
        ):
            self.found[original_node.attr.value] = original_node
            return cst.Name(original_node.attr.value)
        return updated_node


class _Output(cst.CSTTransformer):
    """``<out>.pooler_output = x`` → ``pooler_output = x``; ``return <out>`` → ``return pooler_output``."""

    def __init__(self, outputs: set[str]) -> None:
        self.outputs = outputs

    def leave_AssignTarget(
        self, original_node: cst.AssignTarget, updated_node: cst.AssignTarget
    ) -> cst.AssignTarget:
        target = updated_node.target
        if (
            isinstance(target, cst.Attribute)
            and node_code(target.value) in self.outputs
            and target.attr.value == _OUTPUT
        ):
            return updated_node.with_changes(target=cst.Name(_OUTPUT))
        return updated_node

    def leave_Return(
        self, original_node: cst.Return, updated_node: cst.Return
    ) -> cst.Return:
        if (
            updated_node.value is not None
            and node_code(updated_node.value) in self.outputs
        ):
            return updated_node.with_changes(value=cst.Name(_OUTPUT))
        return updated_node


class _Copy:
    """The method's statements, the tower block replaced (see the module docstring)."""

    def __init__(self, walk: PathWalk, parsed: ParsedClass, pixels_method: str):
        self.walk = walk
        self.parsed = parsed
        self.pixels_method = pixels_method
        self.body: list[cst.BaseStatement] = []
        self.consumed: list[Source] = []
        self.flushed: HiddenStates | None = None

    def _line(self, stmt: cst.BaseStatement) -> Source:
        """HF's line of ``stmt`` (a simple line's first statement: its own line)."""
        if isinstance(stmt, cst.SimpleStatementLine):
            return self.parsed.source(stmt.body[0])
        return self.parsed.source(stmt)

    def _selection_names(self) -> set[str]:
        return {k for k, v in self.walk.env.items() if isinstance(v, _SELECTION)}

    def statement(self, stmt: cst.BaseStatement) -> None:
        """Copy ``stmt``, or consume it into the tower block."""
        read = _read(stmt)
        unset = {k for k, v in self.walk.env.items() if v is None}
        touches = self.walk.tower in read.calls or bool(
            read.names & (self._selection_names() | unset)
        )
        if self.walk.tower in read.calls:
            self._tower_input(stmt)
        if touches and self._consume(stmt, bool(read.names & unset)):
            return
        original, stmt = stmt, self._fields_read(stmt)
        read = _read(stmt)
        self._flush()
        towers = {k for k, v in self.walk.env.items() if isinstance(v, TowerOutput)}
        if read.names & towers and not self._is_output(stmt, towers):
            raise Refused(
                f"the tower's output is read past its selection ({self._line(original)})"
            )
        self.body.append(stmt)
        for name in _bound(stmt):
            self.walk.env[name] = name  # a local of the copied code from here on

    def _fields_read(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """A copied statement's reads of a field of the tower's output
        (``vision_outputs.pooler_output``) become a local of the field's name, which
        vLLM's tower call binds (Qwen2-VL splits its tower's output per image in the
        statement that writes HF's output)."""
        towers = {k for k, v in self.walk.env.items() if isinstance(v, TowerOutput)}
        fields = _FieldReads(towers)
        stmt = rewritten(stmt, fields)
        for field, node in fields.found.items():
            self.walk.selection.append(self.parsed.source(node))
            self.walk.env[field] = HiddenStates("", field=field)
        return stmt

    def _tower_input(self, stmt: cst.BaseStatement) -> None:
        """The tower's input may be a local the copied code made of a field
        (LLaVA-NeXT-Video's frames, reshaped to a batch of images)."""
        calls = _TowerCalls(self.walk.tower)
        stmt.visit(calls)
        found = calls.found
        first = found[0].args[0] if found and found[0].args else None
        if (
            first is not None
            and first.keyword is None
            and isinstance(first.value, cst.Name)
            and isinstance(self.walk.env.get(first.value.value), str)
        ):
            self.walk.tower_input = first.value.value

    def _consume(self, stmt: cst.BaseStatement, on_unset: bool) -> bool:
        """Run ``stmt`` on the walker; keep it out of the copy if it only selects, or
        only handles keywords the port leaves unset (``on_unset``: HF's ``kwargs``)."""
        before = dict(self.walk.env)
        try:
            self.walk.block([stmt])
        except Refused:
            self.walk.env = before
            return False
        bound = {k: v for k, v in self.walk.env.items() if before.get(k, ...) != v}
        if (
            self.walk.result is not None
            or not (bound or on_unset)
            or not all(v is None or isinstance(v, _SELECTION) for v in bound.values())
        ):
            self.walk.env, self.walk.result = before, None
            return False
        if self.flushed is not None:
            raise Refused(
                f"the tower's output is selected after its features are read "
                f"({self._line(stmt)})"
            )
        self.consumed.append(self._line(stmt))
        return True

    def _flush(self) -> None:
        """The selected features bound once, by vLLM's tower, before the first copied reader."""
        hidden = {k: v for k, v in self.walk.env.items() if isinstance(v, HiddenStates)}
        if self.flushed is not None or not hidden:
            return
        values = set(hidden.values())
        if len(values) != 1:
            raise Refused("the tower's output is selected in two ways")
        self.flushed = values.pop()
        arguments = [
            self.walk.tower_input,
            *(f"{k}={v}" for k, v in self.walk.tower_keywords.items()),
        ]
        for name in sorted(hidden):
            self.body.append(
                cst.parse_statement(
                    f"{name} = self.{self.pixels_method}({', '.join(arguments)})\n"
                )
            )
            self.walk.env[name] = name

    @staticmethod
    def _is_output(stmt: cst.BaseStatement, towers: set[str]) -> bool:
        """``<out>.pooler_output = ...`` or ``return <out>``."""
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return False
        small = stmt.body[0]
        if isinstance(small, cst.Return):
            return small.value is not None and node_code(small.value) in towers
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            return (
                isinstance(target, cst.Attribute)
                and node_code(target.value) in towers
                and target.attr.value == _OUTPUT
                and not (_read(small.value).names & towers)
            )
        return False


def _bound(stmt: cst.BaseStatement) -> set[str]:
    """Names a statement binds at the method's top level."""
    names: set[str] = set()

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            node.target.visit(_Collect())

        def visit_For(self, node: cst.For) -> None:
            node.target.visit(_Collect())

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            return False

        def visit_Subscript(self, node: cst.Subscript) -> bool:
            return False

    stmt.visit(_Targets())
    return names


def _signature(
    node: cst.FunctionDef, name: str, fields: Sequence[str], prelude: Sequence[str]
) -> str:
    """``def name(self, <fields>):`` and the config reads HF's defaults stood for."""
    lines = [f"def {name}(self, {', '.join(fields)}):"]
    lines += [f"    {line}" for line in prelude]
    return "\n".join(lines)


def copied_feature_path(
    cls: type[Any],
    method: str,
    modality: str,
    tower: str,
    fields: Sequence[str],
    modules: Sequence[str],
    config: Any,
    encoder: VllmEncoder | None = None,
) -> tuple[VllmFeaturePath, CopiedMethod]:
    """HF's ``cls.<method>`` as the class's own method (see the module docstring).

    ``fields`` are the item's fields (the tower's input first); ``modules``
    the class's other modules the code may read; ``encoder`` vLLM's module
    for the tower: the keywords of HF's call it takes with HF's meaning are
    handed on, and the copied code may read the tower's attributes it has
    (or provides, rewritten to vLLM's). HF's methods it calls are copied too.
    """
    found = find_method(cls, method)
    if found is None:
        raise AnalysisError(f"{cls.__name__}.{method} is not in transformers' sources")
    parsed, node = found
    tower_input, *others = fields
    env = path_parameters(node, tower_input, config, others)
    walk = PathWalk(parsed, tower, tower_input, modules, env)
    walk.handed_on = frozenset(encoder.keywords if encoder else ())
    pixels = f"_{modality}_pixels_to_features"
    copy = _Copy(walk, parsed, pixels)
    try:
        for stmt in statements(node.body):
            if is_docstring(stmt):
                continue
            copy.statement(stmt)
    except Refused as exc:
        raise AnalysisError(f"{cls.__name__}.{method}: {exc}") from None
    if copy.flushed is None or walk.tower_line is None:
        raise AnalysisError(f"{cls.__name__}.{method} selects no output of the tower")
    path, copied = _assembled(cls, method, modality, node, parsed, copy, env, fields)
    if encoder is not None:
        copied = _tower_attributes(copied, tower, encoder)
    return path, copied


def _tower_attributes(
    copied: CopiedMethod, tower: str, encoder: VllmEncoder
) -> CopiedMethod:
    """The copied code's reads of the tower's attributes, as vLLM's module answers them:
    its own, or one the class computes from vLLM's (Pixtral's ``patch_size``, in its
    config); any other refuses."""
    provided = {name: code for name, _, code in encoder.provides}
    code = copied.code
    for attr in sorted(set(re.findall(rf"self\.{tower}\.(\w+)", code))):
        if attr in provided:
            vllms = provided[attr].removeprefix("self.")
            code = re.sub(rf"self\.{tower}\.{attr}\b", f"self.{tower}.{vllms}", code)
        elif attr not in encoder.attributes:
            raise AnalysisError(
                f"HF's feature method reads the tower's `{attr}`, which vLLM's "
                f"{encoder.name} has not"
            )
    return dataclasses.replace(copied, code=code)


def is_docstring(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` is a docstring (a string alone on its line)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString)
    )


def _assembled(
    cls: type[Any],
    method: str,
    modality: str,
    node: cst.FunctionDef,
    parsed: ParsedClass,
    copy: _Copy,
    env: dict[str, PathValue],
    fields: Sequence[str],
) -> tuple[VllmFeaturePath, CopiedMethod]:
    """The copied method's code, its helpers, and the path's tower facts."""
    towers = {k for k, v in env.items() if isinstance(v, TowerOutput)}
    body = rewritten(
        cst.IndentedBlock(body=copy.body), _Output(towers | _tower_names(copy))
    )
    code = cst.Module([]).code_for_node(body)
    read = _read(body).names
    prelude = [
        f"{name} = self.{value.code}"
        for name, value in env.items()
        if isinstance(value, ConfigValue) and name in read
    ]
    name = f"_{modality}_features"
    text = _signature(node, name, fields, prelude) + code
    hidden = copy.flushed
    assert hidden is not None
    path = VllmFeaturePath(
        modality=modality,
        method=method,
        source=parsed.source(node),
        tower=copy.walk.tower,
        tower_input=fields[0],
        layers=hidden.layers,
        strategy=hidden.strategy,
        steps=(),
        tower_line=copy.walk.tower_line,  # type: ignore[arg-type]
        selection_lines=tuple(dict.fromkeys(copy.walk.selection)),
        tower_keywords=tuple(copy.walk.tower_keywords),
        tower_output=hidden.field,
    )
    return path, with_helpers(cls, name, text, fields, parsed.source(node))


def _tower_names(copy: _Copy) -> set[str]:
    return {k for k, v in copy.walk.env.items() if isinstance(v, TowerOutput)}


def with_helpers(
    cls: type[Any],
    name: str,
    text: str,
    fields: Sequence[str],
    source: Source,
    *,
    import_shared: bool = False,
) -> CopiedMethod:
    """The method, the HF methods it calls (copied) and the functions they call
    (transplanted; ``import_shared``: transformers' shared utilities imported)."""
    transplanter = Transplanter(import_shared=import_shared)
    namespace = vars(sys.modules[cls.__module__])
    methods = _copy_methods(cls, _read(cst.parse_module(text)).calls, transplanter)
    transplanter.resolve(text, namespace, f"{cls.__name__}.{name}")
    reads = _read(cst.parse_module(text)).attrs
    for copied in methods.values():
        reads |= _read(cst.parse_module(copied.code)).attrs
    return CopiedMethod(
        name=name,
        params=tuple(fields),
        code=text,
        source=source,
        methods=tuple(methods.values()),
        helpers=tuple(transplanter.helpers.values()),
        import_lines=tuple(sorted(transplanter.imports)),
        reads=tuple(sorted(reads - set(methods))),
    )


def _copy_methods(
    cls: type[Any], calls: set[str], transplanter: Transplanter
) -> dict[str, CopiedCode]:
    """HF's methods of ``cls`` named in ``calls``, and those they call in turn, copied
    as the class's own (without docstrings or HF's decorators); their free names go to
    ``transplanter``."""
    namespace = vars(sys.modules[cls.__module__])
    methods: dict[str, CopiedCode] = {}
    pending = sorted(calls)
    while pending:
        called = pending.pop()
        if called in methods:
            continue
        found = find_method(cls, called, models_only=True)
        if found is None:
            continue  # a module of the class, or nn.Module's own
        owner, funcdef = found
        static = isinstance(inspect.getattr_static(cls, called), staticmethod)
        kept = [cst.Decorator(cst.Name("staticmethod"))] if static else []
        clean = funcdef.with_changes(decorators=kept, leading_lines=())
        body = funcdef.body
        if body.body and is_docstring(body.body[0]):  # type: ignore[arg-type]
            clean = clean.with_changes(body=body.with_changes(body=list(body.body)[1:]))
        helper_code = cst.Module([]).code_for_node(clean)
        methods[called] = CopiedCode(called, owner.source(funcdef), helper_code)
        pending += sorted(_read(clean).calls - set(methods))
        transplanter.resolve(helper_code, namespace, f"{cls.__name__}.{called}")
    return methods


def copied_methods(cls: type[Any], names: Sequence[str]) -> CopiedMethod:
    """HF's methods ``names`` of ``cls`` (M-RoPE's ``get_rope_index``), copied as the
    class's own with what they call, as :func:`copied_feature_path` copies a path's."""
    transplanter = Transplanter()
    methods = _copy_methods(cls, set(names), transplanter)
    missing = [name for name in names if name not in methods]
    if missing:
        raise AnalysisError(f"{cls.__name__}.{missing[0]} is not in HF's sources")
    reads: set[str] = set()
    for copied in methods.values():
        reads |= _read(cst.parse_module(copied.code)).attrs
    first = methods[names[0]]
    return CopiedMethod(
        name=names[0],
        params=(),
        code="",
        source=first.source,
        methods=tuple(methods.values()),
        helpers=tuple(transplanter.helpers.values()),
        import_lines=tuple(sorted(transplanter.imports)),
        reads=tuple(sorted(reads - set(methods))),
    )


_LLAVA_NEXT = """
import torch


def merge_with_config_defaults(func):
    return func


def tiles(size):
    return int(size[0]) // 2


class LlavaNextModel:
    @merge_with_config_defaults
    def get_image_features(self, pixel_values, image_sizes, vision_feature_layer=None, **kwargs):
        counts = [tiles(size) for size in image_sizes]
        image_outputs = self.vision_tower(pixel_values, return_dict=True, **kwargs)
        selected = image_outputs.hidden_states[vision_feature_layer]
        features = self.multi_modal_projector(selected)
        image_outputs.pooler_output = self.pack(torch.split(features, counts))
        return image_outputs

    def pack(self, features):
        return [f.flatten(0, 1) for f in features]
"""

_CONFIG = type("Config", (), {"vision_feature_layer": -2})()


def _copied(snippet: Any) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    path, method = copied_feature_path(
        snippet.LlavaNextModel,
        "get_image_features",
        "image",
        "vision_tower",
        ("pixel_values", "image_sizes"),
        ("multi_modal_projector",),
        _CONFIG,
    )
    lines = tuple(line.strip() for line in method.code.splitlines())
    helpers = tuple(h.name for h in method.helpers) + tuple(
        m.name for m in method.methods
    )
    return path.layers, lines[1], lines[-2:], helpers


EXAMPLES = [
    valid(
        "llava_next_keeps_its_tiles_and_helper_and_calls_vllms_tower",
        _LLAVA_NEXT,
        _copied,
        (
            "config.vision_feature_layer",
            "counts = [tiles(size) for size in image_sizes]",
            (
                "pooler_output = self.pack(torch.split(features, counts))",
                "return pooler_output",
            ),
            ("tiles", "pack"),
        ),
    ),
    invalid(
        "a_tower_output_read_past_its_selection_refuses",
        """
        class LlavaNextModel:
            def get_image_features(self, pixel_values, image_sizes, **kwargs):
                image_outputs = self.vision_tower(pixel_values)
                selected = image_outputs.last_hidden_state
                features = self.multi_modal_projector(selected)
                return features * image_outputs.attentions[0]
        """,
        _copied,
        refusal=AnalysisError,
        match=r"the tower's output is read past its selection \(example.py:6",
    ),
]
