"""The item's size after the image processor's resize, as HF's own token API computes it.

Some image processors return the *resized* size of each image
(``image_sizes = [image.shape[-2:] for image in resized_images]``), and the
replacement hook lays out rows and columns from it. The processor's
``_get_num_multimodal_tokens(image_sizes)``, the method HF keeps so that
serving engines can count tokens from original sizes, recomputes that resize
for each ``(height, width)``::

    images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]
    size = images_kwargs.get("size", None) or self.image_processor.size
    for height, width in image_sizes:
        resized_height, resized_width = get_resize_output_image_size(
            np.zeros((height, width, 3)), size=(size["longest_edge"], size["longest_edge"]), patch_size=...
        )

The first two-name assignment of the loop that reads the loop's ``height``
and ``width`` is that resize. The port gets it as a function of the
original size (the loop-invariant statements it needs come with it), and a
hook's read of ``image_inputs["image_sizes"][idx]`` becomes a call to it.
verify then checks the resize against the image processor on every probe.
"""

from __future__ import annotations

import inspect

import libcst as cst

from mmport.analyzers.itemreads import ItemRead
from mmport.analyzers.sourcefile import find_method
from mmport.spec import HelperFunction

__all__ = ["RESIZED_FUNCTION", "RESIZED_KEY", "ResizedSize", "analyze_resized_size"]

# The processor's API for counting from original sizes, and its argument.
TOKENS_API = "_get_num_multimodal_tokens"
RESIZED_KEY = "image_sizes"
RESIZED_FUNCTION = "resized_image_size"


class ResizedSize:
    """The resize as port code: an :class:`ItemRead` of kind ``"resized"``, the function computing it,
    and the HF module globals its free names resolve in."""

    def __init__(self, read: ItemRead, function: HelperFunction, namespace: dict) -> None:
        self.read = read
        self.function = function
        self.namespace = namespace


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in _collect(node, cst.Name)}


def _collect(node: cst.CSTNode, kind: type) -> list:
    found: list = []

    class _Visitor(cst.CSTVisitor):
        def on_visit(self, visited: cst.CSTNode) -> bool:
            if isinstance(visited, kind):
                found.append(visited)
            return True

    node.visit(_Visitor())
    return found


def _assign(stmt: cst.CSTNode) -> cst.Assign | None:
    node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    return node if isinstance(node, cst.Assign) and len(node.targets) == 1 else None


def _targets(stmt: cst.CSTNode) -> set[str]:
    return {name for a in _collect(stmt, cst.AssignTarget) for name in _names(a.target)}


def _pair(target: cst.BaseExpression) -> tuple[str, str] | None:
    """``(a, b)`` for the target ``a, b``."""
    if isinstance(target, cst.Tuple) and len(target.elements) == 2:
        names = [el.value.value for el in target.elements if isinstance(el.value, cst.Name)]
        return (names[0], names[1]) if len(names) == 2 else None
    return None


def _size_loop(body: list[cst.BaseStatement]) -> tuple[int, cst.For, tuple[str, str]] | None:
    """The ``for height, width in image_sizes:`` statement of a block, with its index."""
    for index, stmt in enumerate(body):
        if isinstance(stmt, cst.For) and isinstance(stmt.iter, cst.Name) and stmt.iter.value == RESIZED_KEY:
            loop_vars = _pair(stmt.target)
            if loop_vars is not None:
                return index, stmt, loop_vars
    return None


def _is_merge_kwargs(stmt: cst.CSTNode) -> bool:
    """``images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]``: the merged image kwargs."""
    assign = _assign(stmt)
    return assign is not None and any(
        isinstance(c.func, cst.Attribute) and c.func.attr.value == "_merge_kwargs" for c in _collect(assign.value, cst.Call)
    )


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.names.get(original_node.value, original_node.value))


def analyze_resized_size(processor_cls: type) -> ResizedSize | None:
    """The resize ``_get_num_multimodal_tokens`` computes, or ``None`` when it has none to find."""
    found = find_method(processor_cls, TOKENS_API, models_only=True)
    if found is None:
        return None
    parsed, func = found
    blocks = [func.body.body, *(s.body.body for s in func.body.body if isinstance(s, cst.If))]
    for block in blocks:
        located = _size_loop(list(block))
        if located is None:
            continue
        index, loop, (height, width) = located
        resize = next(
            (s for s in loop.body.body if (a := _assign(s)) and _pair(a.targets[0].target) and {height, width} & _names(a.value)),
            None,
        )
        if resize is None:
            return None
        owner = next(k for k in processor_cls.__mro__ if TOKENS_API in vars(k))
        value = _assign(resize).value.visit(_Rename({height: "height", width: "width", "self": "processor"}))
        return ResizedSize(
            ItemRead(RESIZED_KEY, "resized", parsed.source(resize)),
            HelperFunction(RESIZED_FUNCTION, _function_code(parsed, list(block)[:index], value), parsed.source(resize)),
            vars(inspect.getmodule(owner)),
        )
    return None


def _function_code(parsed, before: list[cst.BaseStatement], value: cst.BaseExpression) -> str:
    """``def resized_image_size(processor, height, width, images_kwargs)``: the loop-invariant slice, then the resize."""
    kwargs_name = "images_kwargs"
    needed, kept = _names(value), []
    for stmt in reversed(before):
        if _is_merge_kwargs(stmt):
            kwargs_name = next(iter(_targets(stmt)))  # HF passes the merged image kwargs to the hook already
            continue
        if _targets(stmt) & needed:
            kept.insert(0, stmt)
            needed |= _names(stmt)
    rename = _Rename({"self": "processor"})
    statements = [stmt.visit(rename) for stmt in kept]
    if statements:  # HF's blank line before the first kept statement has no place here
        statements[0] = statements[0].with_changes(leading_lines=())
    header = f"def {RESIZED_FUNCTION}(processor, height: int, width: int, {kwargs_name}: dict) -> tuple[int, int]:\n    pass\n"
    funcdef = cst.parse_statement(header)
    body = [*statements, cst.SimpleStatementLine([cst.Return(value)])]
    return cst.Module([]).code_for_node(funcdef.with_changes(body=funcdef.body.with_changes(body=body))).strip()
