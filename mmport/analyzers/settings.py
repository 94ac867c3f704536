"""The processor call kwargs that change a modality's count or layout.

vLLM's users pass ``mm_processor_kwargs``; HF takes them per call, typed by
the processor's ``ProcessingKwargs`` (``images_kwargs: Qwen2VLImageProcessorKwargs``)
and the sub-processor's ``valid_kwargs``. A kwarg changes the count when the
code the port runs for the count reads it: as an attribute of the
processor or sub-processor (``image_processor.max_image_tiles``), or as a key of
the merged kwargs (``images_kwargs["min_pixels"]``). A sub-processor's own
``_standardize_kwargs`` may fold one kwarg into another before it is read
(Qwen2-VL's ``max_pixels`` into ``size``): those count too. Counts HF
computes itself at run time follow every setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, snippet_line, valid
from mmport.analyzers.sourcefile import find_method, parse_class
from mmport.hf.code import is_hf_code
from mmport.hf.kwargs import typed_kwarg_classes
from mmport.spec import CountRule, SettingSpec, Source

__all__ = [
    "count_settings",
    "typed_kwargs",
    "unfollowed_switches",
    "unread_geometry_factors",
]


def typed_kwargs(
    processor: Any, sub_processor: Any, modality: str
) -> dict[str, Source | None]:
    """Each typed call kwarg of ``modality``'s scope, with where its annotation is declared."""
    declared = typed_kwarg_classes(processor, sub_processor, modality)
    # The nearest class whose HF source shows the annotation (a class built at run time shows none).
    return {
        name: next(
            (s for k in classes if (s := _declared_at(k, name)) is not None), None
        )
        for name, classes in declared.items()
    }


def _declared_at(klass: type, name: str) -> Source | None:
    parsed = parse_class(klass) if is_hf_code(klass.__module__) else None
    if parsed is None:
        return None
    for statement in parsed.classdef.body.body:
        for node in getattr(statement, "body", ()):
            if (
                isinstance(node, cst.AnnAssign)
                and isinstance(node.target, cst.Name)
                and node.target.value == name
            ):
                return parsed.source(statement)
    return None


class _Reads(cst.CSTVisitor):
    """Attribute names and string keys the code reads."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.names.add(node.attr.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = node.evaluated_value
        if isinstance(value, str) and value.isidentifier():
            self.names.add(value)


def _reads(code: str) -> set[str]:
    visitor = _Reads()
    try:
        cst.parse_module(code).visit(visitor)
    except cst.ParserSyntaxError:
        cst.parse_expression(code).visit(visitor)
    return visitor.names


def _count_code(count: CountRule, geometry_expr: str) -> list[tuple[str, Source]]:
    """Each piece of code the port runs for the count, with its provenance."""
    pieces = (
        [("\n".join(count.statements) + "\n" + count.result, count.source)]
        if count.result
        else []
    )
    pieces += [(helper.code, helper.source) for helper in count.helpers]
    if count.replacement is not None:
        pieces.append((count.replacement.code, count.replacement.source))
    if count.outputs is not None:
        pieces += [
            (h.code, h.source)
            for h in (
                count.outputs.hook,
                count.outputs.completion,
                *count.outputs.helpers,
            )
            if h
        ]
    if geometry_expr:
        pieces.append((geometry_expr, count.source))
    return pieces


def _folded_into(sub_processor: Any, read: set[str]) -> dict[str, str]:
    """Kwargs the sub-processor's own ``_standardize_kwargs`` writes into a name the count reads: kwarg → that name."""
    found = (
        find_method(type(sub_processor), "_standardize_kwargs", models_only=True)
        if sub_processor is not None
        else None
    )
    if found is None:
        return {}
    _, func = found
    params = {p.name.value for p in func.params.params} | {
        p.name.value for p in func.params.kwonly_params
    }
    folded: dict[str, str] = {}

    class Writes(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                base = (
                    target.target.value
                    if isinstance(target.target, cst.Subscript)
                    else target.target
                )
                if isinstance(base, cst.Name) and base.value in read:
                    for name in _reads_names(node.value) & params:
                        folded.setdefault(name, base.value)

    func.visit(Writes())
    return folded


def _reads_names(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            names.add(name.value)

    node.visit(Names())
    return names


def count_settings(
    processor: Any,
    sub_processor: Any,
    modality: str,
    count: CountRule,
    geometry_expr: str = "",
) -> tuple[SettingSpec, ...]:
    """The typed call kwargs of ``modality`` that the count's code reads, each with where it is read and declared.

    A count delegated to HF follows every setting; it lists none here.
    """
    if count.strategy == "delegated":
        return ()
    typed = typed_kwargs(processor, sub_processor, modality)
    settings: dict[str, SettingSpec] = {}
    pieces = _count_code(count, geometry_expr)
    read_anywhere: set[str] = set()
    for code, source in pieces:
        names = _reads(code)
        read_anywhere |= names
        for name in sorted(names & typed.keys()):
            settings.setdefault(
                name, SettingSpec(name, _line_of(code, name, source), typed[name])
            )
    for name, into in sorted(_folded_into(sub_processor, read_anywhere).items()):
        if name in typed and name not in settings:
            read_at = settings[into].read_at if into in settings else count.source
            settings[name] = SettingSpec(name, read_at, typed[name], folded_into=into)
    return tuple(settings.values())


def _line_of(code: str, name: str, source: Source) -> Source:
    """``source`` moved to the first line of ``code`` that mentions ``name``."""
    for offset, line in enumerate(code.splitlines()):
        if name in line:
            return Source(source.file, source.line + offset, line.strip())
    return source


# Calls that change an item's geometry: what a preprocessing switch guarding one can change the count by.
GEOMETRY_CALLS = ("resize", "crop", "pad", "split", "patch", "tile")


def _guarded_geometry(node: cst.If, calls: tuple[str, ...] = GEOMETRY_CALLS) -> bool:
    """True when the branch calls something that resizes, crops, pads or splits (any of ``calls``)."""
    called: list[str] = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            func = call.func
            name = (
                func.attr.value
                if isinstance(func, cst.Attribute)
                else func.value
                if isinstance(func, cst.Name)
                else ""
            )
            called.append(name)

    node.body.visit(Calls())
    return any(word in name for name in called for word in calls)


def unfollowed_switches(
    sub_processor: Any,
    modality: str,
    processor: Any,
    followed: set[str],
    calls: tuple[str, ...] = GEOMETRY_CALLS,
) -> tuple[SettingSpec, ...]:
    """Preprocessing switches (``do_resize``) HF's ``_preprocess`` reads to make any of ``calls``, but the port does not follow.

    A request that flips one gets items HF lays out differently from what the
    port counts (or, with ``calls`` that split an item into tiles, holds in one
    row); the port refuses such requests rather than get them wrong.
    """
    found = (
        find_method(type(sub_processor), "_preprocess")
        if sub_processor is not None
        else None
    )
    if found is None:
        return ()
    parsed, func = found
    typed = typed_kwargs(processor, sub_processor, modality)
    switches: dict[str, SettingSpec] = {}

    class Ifs(cst.CSTVisitor):
        def visit_If(self, node: cst.If) -> None:
            test = (
                node.test.expression
                if isinstance(node.test, cst.UnaryOperation)
                else node.test
            )
            while isinstance(test, cst.BooleanOperation) and isinstance(
                test.operator, cst.And
            ):
                test = test.left  # ``if crop_to_patches and max_patches > 1:``
            name = test.value if isinstance(test, cst.Name) else ""
            switch = name.startswith("do_") or isinstance(
                getattr(sub_processor, name, None), bool
            )
            if (
                switch
                and name in typed
                and name not in followed
                and _guarded_geometry(node, calls)
            ):
                switches.setdefault(
                    name, SettingSpec(name, parsed.source(node), typed[name])
                )

    func.visit(Ifs())
    return tuple(switches.values())


def _called_name(call: cst.Call) -> str:
    func = call.func
    return (
        func.attr.value
        if isinstance(func, cst.Attribute)
        else func.value
        if isinstance(func, cst.Name)
        else ""
    )


class _GeometryFactors(cst.CSTVisitor):
    """Names multiplied, divided or added into an argument of a geometry call, with the call.

    ``self.resize(images, factor=patch_size * merge_size * patch_expand_factor)``
    gives each of the three names that call.
    """

    def __init__(self, calls: tuple[str, ...]) -> None:
        self.calls = calls
        self.found: dict[str, cst.Call] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not any(word in _called_name(node) for word in self.calls):
            return
        for arg in node.args:
            for operation in _operations(arg.value):
                for name in _reads_names(operation):
                    self.found.setdefault(name, node)


def _operations(node: cst.BaseExpression) -> list[cst.BinaryOperation]:
    found: list[cst.BinaryOperation] = []

    class Operations(cst.CSTVisitor):
        def visit_BinaryOperation(self, operation: cst.BinaryOperation) -> bool:
            found.append(operation)
            return False  # the outermost operation holds every name of the expression

    node.visit(Operations())
    return found


def unread_geometry_factors(
    sub_processor: Any,
    modality: str,
    processor: Any,
    followed: set[str],
    calls: tuple[str, ...] = GEOMETRY_CALLS,
) -> tuple[SettingSpec, ...]:
    """Typed kwargs HF's ``_preprocess`` computes a geometry call's argument from, which the count does not read.

    A derived count reads what HF's token API reads; the preprocessing it
    stands for may size the item by more. GLM-5-Next resizes by
    ``factor=patch_size * merge_size * patch_expand_factor``
    (image_processing_glm5_next.py:250) while its
    ``get_number_of_image_patches`` counts by ``patch_size * merge_size``:
    under ``patch_expand_factor=2`` HF's grid is not the token API's. The port
    counts an item under such a request by HF's own processing of an item of
    its size.
    """
    found = (
        find_method(type(sub_processor), "_preprocess")
        if sub_processor is not None
        else None
    )
    if found is None:
        return ()
    parsed, func = found
    typed = typed_kwargs(processor, sub_processor, modality)
    visitor = _GeometryFactors(calls)
    func.visit(visitor)
    return tuple(
        SettingSpec(name, parsed.source(call), typed[name])
        for name, call in visitor.found.items()
        if name in typed and name not in followed
    )


# Qwen2-VL-style typed kwargs: the processor's images_kwargs annotation and its image processor's valid_kwargs.
_QWEN2_VL = """
from typing import TypedDict


class Qwen2VLImageProcessorKwargs(TypedDict, total=False):
    min_pixels: int
    max_pixels: int
    patch_size: int
    merge_size: int
    do_resize: bool
    return_tensors: str


class Qwen2VLProcessorKwargs(TypedDict, total=False):
    images_kwargs: Qwen2VLImageProcessorKwargs


class Qwen2VLImageProcessor:
    valid_kwargs = Qwen2VLImageProcessorKwargs
    do_resize = True

    def _preprocess(self, images, do_resize, patch_size, merge_size, **kwargs):
        if do_resize:
            images = [self.resize(image, factor=patch_size * merge_size) for image in images]
        return images


class Qwen2VLProcessor:
    valid_processor_kwargs = Qwen2VLProcessorKwargs

    def __init__(self):
        self.image_processor = Qwen2VLImageProcessor()

    def replace_image_token(self, image_inputs, image_idx, **kwargs):
        merge_length = self.image_processor.merge_size**2
        num_image_tokens = image_inputs["image_grid_thw"][image_idx].prod() // merge_length
        return self.image_token * num_image_tokens
"""

_HOOK = snippet_line(_QWEN2_VL, "def replace_image_token")
# The count a port runs for the hook above, as mmport.analyzers.count derives it.
_COUNT = CountRule(
    ("merge_length = processor.image_processor.merge_size**2",),
    "get_number_of_image_patches(configured.image_processor, image_height, image_width, {}) // merge_length",
    False,
    "derived",
    _HOOK,
)


def _declared(name: str) -> Source:
    return snippet_line(_QWEN2_VL, f"    {name}: ")


def _qwen2_vl(snippet: Any, ask: Callable[..., Any], *args: Any) -> Any:
    """``ask(processor, image_processor, "image", *args)`` on the snippet's processor."""
    processor = snippet.Qwen2VLProcessor()
    return ask(processor, processor.image_processor, "image", *args)


EXAMPLES = [
    valid(
        "qwen2_vl_typed_image_kwargs_with_their_declarations",
        _QWEN2_VL,
        lambda snippet: _qwen2_vl(snippet, typed_kwargs),
        {
            name: _declared(name)
            for name in (
                "min_pixels",
                "max_pixels",
                "patch_size",
                "merge_size",
                "do_resize",
            )
        },
    ),
    valid(
        "qwen2_vl_count_reads_merge_size",
        _QWEN2_VL,
        lambda snippet: _qwen2_vl(snippet, count_settings, _COUNT),
        (
            SettingSpec(
                "merge_size",
                Source(
                    SNIPPET_FILE,
                    _HOOK.line,
                    "merge_length = processor.image_processor.merge_size**2",
                ),
                _declared("merge_size"),
            ),
        ),
    ),
    valid(
        "do_resize_guards_a_resize_the_count_does_not_follow",
        _QWEN2_VL,
        lambda snippet: unfollowed_switches(
            snippet.Qwen2VLProcessor().image_processor,
            "image",
            snippet.Qwen2VLProcessor(),
            {"merge_size"},
        ),
        (
            SettingSpec(
                "do_resize",
                snippet_line(_QWEN2_VL, "if do_resize:"),
                _declared("do_resize"),
            ),
        ),
    ),
    invalid(
        "a_followed_switch_is_not_refused",
        _QWEN2_VL,
        lambda snippet: unfollowed_switches(
            snippet.Qwen2VLProcessor().image_processor,
            "image",
            snippet.Qwen2VLProcessor(),
            {"do_resize"},
        ),
        expected=(),
    ),
    invalid(
        "a_delegated_count_follows_every_setting_itself",
        _QWEN2_VL,
        lambda snippet: _qwen2_vl(
            snippet,
            count_settings,
            dataclasses.replace(_COUNT, strategy="delegated"),
        ),
        expected=(),
    ),
]
