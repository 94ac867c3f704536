"""What an image processor's per-item outputs say about the item's original size.

A replacement hook that counts from ``image_inputs["image_sizes"][image_idx]``
or ``image_inputs["image_grid_thw"][image_idx]`` reads values the image
processor computed from the image. Two shapes can be recomputed from the
original ``(height, width)`` alone, and this module finds them in the image
processor's source:

- **original size**: inside ``for image in images:``, the processor keeps
  ``image_sizes.append(get_image_size(image, ...))`` and returns it as
  ``BatchFeature(data={"image_sizes": image_sizes})``: the item's entry is
  its ``(height, width)`` before any resize.
- **patch grid**: the method building ``BatchFeature(data={"image_grid_thw":
  ...})`` records one frame per image as ``[1, grid_h, grid_w]``, and the
  image processor's ``get_number_of_image_patches(height, width)`` computes
  that grid from the original size (returning ``grid_h * grid_w`` or the
  pair). The entry's ``.prod()`` is then that function's product, and its
  rows are ``(1, *pair)``.
- **patch tuple**: ``get_number_of_image_patches`` returns named counts
  (``return num_patches, num_rows, num_cols``) and the processor outputs one
  of them under its name (``encoding["rows"] = rows``): the item's entry is
  that element of the function's result.
- **patch count**: ``get_number_of_image_patches`` returns one named count
  (``return num_patches``) and the processor outputs it under that name
  (``data={"num_patches": num_patches}``): the item's entry is the result.
  Where the count starts from a constant (``num_patches = 1  # global view``)
  and only grows by ``+=``, an output named as a part of it
  (``num_local_patches``) is the result less that constant.
- **constant unless a setting**: ``if do_pan_and_scan: ... else: num_crops =
  [0 for _ in images]``: while the setting is off, the entry is that constant.
- **processed size**: ``image_sizes = [image.shape[-2:] for image in
  processed_images]`` is the size after the resize, which a patch function
  that resizes its ``height, width`` before counting recomputes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method, parse_class
from mmport.hf.code import transformers_classes
from mmport.hf.syntax import string_value
from mmport.spec import Source

__all__ = ["PATCHES_FUNCTION", "ItemRead", "analyze_item_reads"]

# The image processor method HF keeps for vLLM: patches of one image from its size.
PATCHES_FUNCTION = "get_number_of_image_patches"


@dataclass(frozen=True)
class ItemRead:
    """How one per-item output key follows from the original size.

    ``kind`` is ``"size"`` (the entry is ``(height, width)``), ``"patches"``
    (the entry's product is ``get_number_of_image_patches``), ``"grid"`` (the
    entry is ``(1, *get_number_of_image_patches(...))``), ``"item"`` (the
    entry is ``get_number_of_image_patches(...)[position]``) or
    ``"count"`` (the entry is ``get_number_of_image_patches(...)``), ``"part"``
    (``get_number_of_image_patches(...) - offset``) or
    ``"constant"`` (the entry is ``value`` while ``setting`` is off).
    :mod:`mmport.analyzers.resized` adds the kinds HF's token API explains
    (``"resized"``, ``"tokens"``, ``"entry"``: the port function named ``value``).
    """

    key: str
    kind: str
    source: Source
    position: int = -1  # "item": the element of the function's result
    value: str = (
        ""  # "constant": the literal every item gets ...; "entry": the port function
    )
    setting: str = ""  # ... while this image processor setting is off
    offset: int = 0  # "part": subtracted from the function's count (its starting value)


class _OutputKeys(cst.CSTVisitor):
    """Per method: ``BatchFeature(data={"key": name})`` pairs and facts around them."""

    def __init__(self) -> None:
        self.loops: list[str] = []
        self.keys: dict[str, str] = {}  # key → variable
        self.sizes: dict[
            str, cst.CSTNode
        ] = {}  # variable → its append(get_image_size(loop var)) call
        self.grids: list[cst.List] = []  # [1, a, b] literals
        self.assigns: list[
            tuple[set[str], set[str], cst.BaseExpression]
        ] = []  # (targets, reads, value)
        self.constants: dict[
            str, tuple[str, str, cst.CSTNode]
        ] = {}  # variable → (literal, setting, node)
        self.dicts: dict[
            str, dict[str, str]
        ] = {}  # variable → its ``{"key": name}`` literal
        self.processed_sizes: set[str] = (
            set()
        )  # ``[image.shape[-2:] for image in processed]``

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.test, cst.Name) and isinstance(node.orelse, cst.Else):
            for stmt in node.orelse.body.body:
                constant = _constant_list(stmt)
                if constant is not None:
                    self.constants[constant[0]] = (constant[1], node.test.value, stmt)

    def visit_For(self, node: cst.For) -> None:
        is_images = isinstance(node.iter, cst.Name) and node.iter.value == "images"
        self.loops.append(
            node.target.value if is_images and isinstance(node.target, cst.Name) else ""
        )

    def leave_For(self, original_node: cst.For) -> None:
        self.loops.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value == "BatchFeature":
            for arg in node.args:
                if arg.keyword is None or arg.keyword.value == "data":
                    # ``data={...}``, or ``data=data`` after ``data = {...}``
                    named = arg.value.value if isinstance(arg.value, cst.Name) else ""
                    self.keys.update(
                        _named_entries(arg.value) or self.dicts.get(named, {})
                    )
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "append"
            and isinstance(func.value, cst.Name)
        ):
            inner = node.args[0].value if node.args else None
            if _is_size_of(inner, {loop for loop in self.loops if loop}):
                self.sizes[func.value.value] = node

    def visit_Assign(self, node: cst.Assign) -> None:
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and _named_entries(node.value)
        ):
            self.dicts[node.targets[0].target.value] = _named_entries(node.value)
        targets = {_base(t.target) for t in node.targets} - {""}
        if _is_shapes_of_images(node.value):
            self.processed_sizes |= targets
        self.assigns.append((targets, _direct_reads(node.value), node.value))
        # ``encoding["rows"] = rows``: an output key set outside the BatchFeature call.
        target = node.targets[0].target
        if isinstance(target, cst.Subscript) and isinstance(node.value, cst.Name):
            key = target.slice[0].slice
            value = string_value(key.value) if isinstance(key, cst.Index) else None
            if value is not None:
                self.keys.setdefault(value, node.value.value)

    def visit_List(self, node: cst.List) -> None:
        values = [el.value for el in node.elements]
        if (
            len(values) == 3
            and isinstance(values[0], cst.Integer)
            and values[0].value == "1"
            and all(isinstance(v, cst.Name) for v in values[1:])
        ):
            self.grids.append(node)


def _named_entries(value: cst.BaseExpression) -> dict[str, str]:
    """``{"key": name, ...}`` → ``{"key": "name"}`` (entries of other shapes left out)."""
    if not isinstance(value, cst.Dict):
        return {}
    return {
        key: el.value.value
        for el in value.elements
        if isinstance(el, cst.DictElement)
        and (key := string_value(el.key)) is not None
        and isinstance(el.value, cst.Name)
    }


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.lists: list[cst.List] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_List(self, node: cst.List) -> None:
        self.lists.append(node)


def _names(node: cst.CSTNode) -> set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


def _base(target: cst.BaseExpression) -> str:
    """``x`` for targets ``x`` and ``x[...]``."""
    while isinstance(target, cst.Subscript):
        target = target.value
    return target.value if isinstance(target, cst.Name) else ""


def _direct_reads(value: cst.BaseExpression) -> set[str]:
    """Names a value passes on whole: itself, or a call's positional arguments.

    ``torch.tensor(grids)`` carries ``grids``; ``torch.tensor([m] * grid.size(0))``
    only borrows ``grid``'s length and carries nothing of it.
    """
    if isinstance(value, cst.Name):
        return {value.value}
    if isinstance(value, cst.Call):
        return {
            a.value.value
            for a in value.args
            if a.keyword is None and isinstance(a.value, cst.Name)
        }
    return set()


def _flows_from(visitor: _OutputKeys, literal: cst.List) -> set[str]:
    """Variables whose value is built, through assignments, from ``literal``."""
    tainted: set[str] = set()
    for targets, reads, value in visitor.assigns:
        inner = _Names()
        value.visit(inner)
        if any(node is literal for node in inner.lists) or reads & tainted:
            tainted |= targets
    return tainted


def _constant_list(stmt: cst.CSTNode) -> tuple[str, str] | None:
    """``(name, "0")`` for ``name = [0 for _ in xs]``."""
    node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    if not (
        isinstance(node, cst.Assign) and isinstance(node.targets[0].target, cst.Name)
    ):
        return None
    value = node.value
    if (
        isinstance(value, cst.ListComp)
        and isinstance(value.elt, cst.Integer)
        and value.for_in.inner_for_in is None
    ):
        return node.targets[0].target.value, value.elt.value
    return None


def _is_shapes_of_images(value: cst.BaseExpression) -> bool:
    """``[image.shape[-2:] for image in xs]`` (or ``list(image.shape[-2:])``): the sizes of processed images."""
    if not (
        isinstance(value, cst.ListComp) and isinstance(value.for_in.target, cst.Name)
    ):
        return False
    image = value.for_in.target.value
    shape = m.Attribute(value=m.Name(image), attr=m.Name("shape"))
    last_two = m.Subscript(
        value=shape,
        slice=[
            m.SubscriptElement(
                m.Slice(lower=m.UnaryOperation(m.Minus(), m.Integer("2")), upper=None)
            )
        ],
    )
    return bool(m.findall(value.elt, last_two))


def _is_size_of(expr: cst.BaseExpression | None, loop_vars: set[str]) -> bool:
    """``get_image_size(<image loop variable>, ...)``."""
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value == "get_image_size"
        and bool(expr.args)
        and isinstance(expr.args[0].value, cst.Name)
        and expr.args[0].value.value in loop_vars
    )


class _Patches(NamedTuple):
    """What ``get_number_of_image_patches`` returns: ``kind`` is ``"product"`` (``names``
    multiplied), ``"pair"``, ``"tuple"`` (named counts) or ``"count"`` (one named count,
    which starts from ``base``: ``num_patches = 1  # global view``, then ``+=``);
    ``resize`` is where it resizes its ``height`` and ``width`` before counting."""

    kind: str  # or "other", for a function known only by its resize
    names: tuple[str, ...]
    source: Source
    base: int = 0
    base_source: Source | None = None
    resize: Source | None = (
        None  # ``height, width = smart_resize(height, width, ...)`` before counting
    )


def _count_base(
    func: cst.FunctionDef, name: str
) -> tuple[cst.SimpleStatementLine, int] | None:
    """``name = <int>`` among ``func``'s top-level statements, where every later write to ``name`` is ``+=``: the line and the int."""
    base: cst.Assign | None = None
    for stmt in m.findall(func.body, m.Assign() | m.AugAssign()):
        targets = (
            [t.target for t in stmt.targets]
            if isinstance(stmt, cst.Assign)
            else [cst.ensure_type(stmt, cst.AugAssign).target]
        )
        if not any(m.matches(t, m.Name(name)) for t in targets):
            continue
        if (
            isinstance(stmt, cst.AugAssign)
            and isinstance(stmt.operator, cst.AddAssign)
            and base is not None
        ):
            continue
        if (
            base is None
            and isinstance(stmt, cst.Assign)
            and isinstance(stmt.value, cst.Integer)
        ):
            base = stmt
            continue
        return None
    if base is None:
        return None
    line = next(
        (
            line
            for line in func.body.body
            if isinstance(line, cst.SimpleStatementLine) and line.body[0] is base
        ),
        None,
    )
    return (
        (line, int(cst.ensure_type(base.value, cst.Integer).value))
        if line is not None
        else None
    )


def _patches_return(image_processor_cls: type[Any]) -> _Patches | None:
    """How ``get_number_of_image_patches`` of ``image_processor_cls`` returns its count, if it has one."""
    found = find_method(image_processor_cls, PATCHES_FUNCTION)
    if found is None:
        return None
    parsed, func = found
    params = [p.name.value for p in func.params.params]
    if params[1:3] != ["height", "width"]:
        return None
    patches = _return_shape(parsed, func)
    size_pair = m.Tuple([m.Element(m.Name("height")), m.Element(m.Name("width"))])
    resize = next(
        iter(m.findall(func.body, m.Assign(targets=[m.AssignTarget(size_pair)]))), None
    )
    if resize is not None:
        patches = (patches or _Patches("other", (), parsed.source(func)))._replace(
            resize=parsed.source(resize)
        )
    return patches


def _return_shape(parsed: ParsedClass, func: cst.FunctionDef) -> _Patches | None:
    last = func.body.body[-1]
    ret = last.body[0] if isinstance(last, cst.SimpleStatementLine) else None
    if not isinstance(ret, cst.Return):
        return None
    value = ret.value
    if (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, cst.Multiply)
        and isinstance(value.left, cst.Name)
        and isinstance(value.right, cst.Name)
    ):
        return _Patches(
            "product", (value.left.value, value.right.value), parsed.source(func)
        )
    if isinstance(value, cst.Tuple) and len(value.elements) == 2:
        return _Patches("pair", (), parsed.source(func))
    if isinstance(value, cst.Tuple) and any(
        isinstance(el.value, cst.Name) for el in value.elements
    ):
        names = tuple(
            el.value.value if isinstance(el.value, cst.Name) else ""
            for el in value.elements
        )
        return _Patches("tuple", names, parsed.source(ret))
    if isinstance(value, cst.Name):
        base = _count_base(func, value.value)
        if base is not None:
            return _Patches(
                "count",
                (value.value,),
                parsed.source(ret),
                base[1],
                parsed.source(base[0]),
            )
        return _Patches("count", (value.value,), parsed.source(ret))
    return None


def _part_of_count(key: str, count: str) -> bool:
    """``num_local_patches`` names a part of ``num_patches``: the same count, qualified."""
    stem = count.removeprefix("num_")
    return (
        count.startswith("num_")
        and key.startswith("num_")
        and key.endswith(f"_{stem}")
        and key != count
    )


def _method_reads(
    parsed: ParsedClass, func: cst.FunctionDef, patches: _Patches | None
) -> list[ItemRead]:
    """Each output key ``func`` fills that one item's size explains, read as :class:`ItemRead`."""
    visitor = _OutputKeys()
    func.visit(visitor)
    reads = (
        (_patches_read(visitor, patches, key, variable) if patches else None)
        or _local_read(parsed, visitor, patches, key, variable)
        for key, variable in visitor.keys.items()
    )
    return [read for read in reads if read is not None]


def _patches_read(
    visitor: _OutputKeys, patches: _Patches, key: str, variable: str
) -> ItemRead | None:
    """The key as part of what ``get_number_of_image_patches`` returns: one of its counts, the count,
    the count less its starting value, or the processed size it counts from."""
    if patches.kind == "tuple":
        # The function names its counts as the processor names its outputs (``num_rows`` → "rows").
        position = next(
            (i for i, n in enumerate(patches.names) if n in (key, f"num_{key}")), -1
        )
        if position >= 0:
            return ItemRead(key, "item", patches.source, position=position)
    if patches.kind == "count" and patches.names[0] in (key, f"num_{key}"):
        return ItemRead(key, "count", patches.source)
    if (
        patches.kind == "count"
        and patches.base
        and patches.base_source is not None  # set with base
        and _part_of_count(key, patches.names[0])
    ):
        # ``num_patches = 1  # global view`` then ``num_patches += ...``: the output
        # counts the added part, the function's count less its starting value.
        return ItemRead(key, "part", patches.base_source, offset=patches.base)
    if patches.resize is not None and variable in visitor.processed_sizes:
        # The sizes of the processed images are the size the function counts from, after its resize.
        return ItemRead(key, "resized", patches.resize, value=PATCHES_FUNCTION)
    return None


def _local_read(
    parsed: ParsedClass,
    visitor: _OutputKeys,
    patches: _Patches | None,
    key: str,
    variable: str,
) -> ItemRead | None:
    """The key as the method computes it: a constant (under a switch), the item's size, or its patch grid."""
    if variable in visitor.constants:
        value, setting, node = visitor.constants[variable]
        return ItemRead(
            key, "constant", parsed.source(node), value=value, setting=setting
        )
    if variable in visitor.sizes:
        return ItemRead(key, "size", parsed.source(visitor.sizes[variable]))
    if (
        visitor.grids
        and patches is not None
        and variable in _flows_from(visitor, visitor.grids[0])
    ):
        grid = visitor.grids[0]
        names = tuple(
            cst.ensure_type(el.value, cst.Name).value for el in grid.elements[1:]
        )  # visit_List keeps only such grids
        if patches.kind == "pair" or set(patches.names) == set(names):
            kind = "grid" if patches.kind == "pair" else "patches"
            return ItemRead(key, kind, parsed.source(grid))
    return None


def analyze_item_reads(image_processor_cls: type[Any]) -> dict[str, ItemRead]:
    """Output keys of ``image_processor_cls`` that follow from the original size."""
    patches = _patches_return(image_processor_cls)
    reads: dict[str, ItemRead] = {}
    for klass in transformers_classes(image_processor_cls):
        parsed = parse_class(klass)
        if parsed is None:
            continue
        lines = parsed.lines
        for func in parsed.methods().values():
            # Only methods that build a BatchFeature name outputs; a text test
            # skips the rest, whose visits cost most of the analysis.
            where = parsed.positions[func]
            if "BatchFeature" not in "\n".join(
                lines[where.start.line - 1 : where.end.line]
            ):
                continue
            for read in _method_reads(parsed, func, patches):
                reads.setdefault(read.key, read)
    return reads


EXAMPLES = [
    valid(
        "llava_next_keeps_each_images_original_size",
        """
        class LlavaNextImageProcessor:
            def _preprocess(self, images, **kwargs):
                image_sizes = []
                for image in images:
                    image_sizes.append(get_image_size(image, channel_dim="channels_first"))
                return BatchFeature(data={"pixel_values": images, "image_sizes": image_sizes})
        """,
        lambda snippet: analyze_item_reads(snippet.LlavaNextImageProcessor),
        {
            "image_sizes": ItemRead(
                "image_sizes",
                "size",
                Source(
                    SNIPPET_FILE,
                    5,
                    'image_sizes.append(get_image_size(image, channel_dim="channels_first"))',
                ),
            )
        },
    ),
    valid(
        "qwen2_vl_grid_is_the_patch_count_from_the_original_size",
        """
        class Qwen2VLImageProcessor:
            def get_number_of_image_patches(self, height, width, images_kwargs=None):
                grid_h, grid_w = height // self.patch_size, width // self.patch_size
                return grid_h * grid_w

            def _preprocess(self, images, grid_h, grid_w, **kwargs):
                image_grid_thw = [[1, grid_h, grid_w]] * len(images)
                return BatchFeature(data={"pixel_values": images, "image_grid_thw": image_grid_thw})
        """,
        lambda snippet: analyze_item_reads(snippet.Qwen2VLImageProcessor),
        {
            "image_grid_thw": ItemRead(
                "image_grid_thw",
                "patches",
                Source(
                    SNIPPET_FILE,
                    7,
                    "image_grid_thw = [[1, grid_h, grid_w]] * len(images)",
                ),
            )
        },
    ),
    invalid(
        "sizes_after_the_resize_are_not_the_original",
        """
        class Idefics3ImageProcessor:
            def _preprocess(self, images, **kwargs):
                resized = [self.resize(image) for image in images]
                image_sizes = [image.shape[-2:] for image in resized]
                return BatchFeature(data={"pixel_values": resized, "image_sizes": image_sizes})
        """,
        lambda snippet: analyze_item_reads(snippet.Idefics3ImageProcessor),
        expected={},
    ),
]
