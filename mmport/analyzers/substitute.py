"""Rewrite a hook's reads of per-item HF outputs into the item's original size.

With the facts of :mod:`mmport.analyzers.itemreads`, a hook statement such as::

    image_size = image_inputs["image_sizes"][image_idx]
    n = image_inputs["image_grid_thw"][image_idx].prod() // merge_length

becomes, in the port (where ``image_height``/``image_width`` are the item's
size)::

    image_size = (image_height, image_width)
    n = get_number_of_image_patches(configured.image_processor, image_height, image_width) // merge_length

HF runs the hook on the processor as it was built (the hook's ``self``, the
port's ``processor``): a request reaches the hook only through its ``**kwargs``
and through what the sub-processor computed under it. So the rewritten reads,
which recompute that preprocessing, take ``configured`` instead: the copy of
the processor whose sub-processors hold the request's settings
(``get_configured_processor``). Under Kimi-K2.5's ``merge_size=1`` the grid
is the request's, the hook's ``self.image_processor.merge_size`` HF's own.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.itemreads import PATCHES_FUNCTION, ItemRead, analyze_item_reads
from mmport.analyzers.resized import (
    COUNT_FUNCTION,
    RESIZED_FUNCTION,
    RESIZED_KEY,
    TokenApi,
    analyze_token_api,
)
from mmport.analyzers.transplant import Transplanter
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten, string_value
from mmport.spec import Source

__all__ = [
    "CONFIGURED",
    "PREPROCESS_FUNCTION",
    "ItemReadRewriter",
    "carry_read_helpers",
    "is_dead_list_guard",
    "item_reads",
]

SIZE = cst.Tuple(
    [cst.Element(cst.Name("image_height")), cst.Element(cst.Name("image_width"))]
)
# The port's name for the processor whose sub-processors hold a request's settings.
CONFIGURED = "configured"
# The port's function running HF's image processor on a blank image of the item's size.
PREPROCESS_FUNCTION = "preprocess_blank_image"


def _patches_call(kwargs: str | None = None) -> cst.Call:
    image_processor = cst.Attribute(cst.Name(CONFIGURED), cst.Name("image_processor"))
    args = [
        cst.Arg(image_processor),
        cst.Arg(cst.Name("image_height")),
        cst.Arg(cst.Name("image_width")),
    ]
    # HF's own callers pass the merged image kwargs, so settings a processor overrides
    # apply; with none to forward, an empty dict (some versions call .get on it)
    # leaves the image processor's own settings.
    images_kwargs = cst.Name(kwargs) if kwargs else cst.Dict([])
    return cst.Call(cst.Name(PATCHES_FUNCTION), [*args, cst.Arg(images_kwargs)])


def _switched_read(read: ItemRead, kwargs: str) -> cst.BaseExpression:
    """``read``'s constant while its switch is off, else the entry HF's preprocessing gives the item.

    ``num_crops = image_inputs["num_crops"][image_idx]`` becomes::

        num_crops = (
            preprocess_blank_image(processor.image_processor, image_height, image_width, kwargs)["num_crops"][0]
            if kwargs.get("do_pan_and_scan", getattr(processor.image_processor, "do_pan_and_scan", None))
            else 0
        )

    HF's ``_process_images`` calls its image processor with the hook's
    ``**kwargs`` (the merged image kwargs), which also decide the switch; an
    image of the item's size gives the entry its own pixels would.
    """
    setting = json.dumps(read.setting)
    processed = f"{PREPROCESS_FUNCTION}(processor.image_processor, image_height, image_width, {kwargs})"
    switched = (
        f"{kwargs}.get({setting}, getattr(processor.image_processor, {setting}, None))"
    )
    return cst.parse_expression(
        f"({processed}[{json.dumps(read.key)}][0] if {switched} else {read.value})"
    )


def _token_count_keys(image_processor_cls: type[Any] | None) -> list[str]:
    """Outputs named as a per-item token count (``num_soft_tokens_per_image``, ``num_img_tokens``)."""
    names = getattr(image_processor_cls, "model_input_names", None) or []
    return [n for n in names if re.fullmatch(r"num_\w*(tokens?|toks?)(_per_image)?", n)]


def item_reads(
    processor_cls: type[Any], image_processor_cls: type[Any] | None
) -> tuple[dict[str, ItemRead], TokenApi]:
    """What the per-item outputs follow from: the image processor's own code, else the processor's token API.

    ``image_sizes`` the image processor returns after resizing is the resize
    ``_get_num_multimodal_tokens`` recomputes; an output named as a token count
    is the count that method appends for the item (:mod:`mmport.analyzers.resized`).
    """
    reads = (
        analyze_item_reads(image_processor_cls)
        if image_processor_cls is not None
        else {}
    )
    api = analyze_token_api(processor_cls)
    derived: dict[str, ItemRead] = {}
    if api.resized is not None and RESIZED_KEY not in reads:
        derived[RESIZED_KEY] = api.resized.read
    if api.count is not None:
        for key in _token_count_keys(image_processor_cls):
            derived[key] = dataclasses.replace(api.count.read, key=key)
    for key, entry in api.entries.items():
        if key not in reads:
            derived[key] = entry.read
    return derived | reads, api


def carry_read_helpers(
    transplant: Transplanter,
    used: dict[str, ItemRead],
    image_processor_cls: type[Any] | None,
    api: TokenApi,
) -> None:
    """Transplant the functions the rewritten reads call."""
    kinds = {read.kind for read in used.values()}
    if kinds - {"size", "constant", "resized", "tokens", "entry"}:
        transplant.method(
            _given(image_processor_cls, PATCHES_FUNCTION),
            PATCHES_FUNCTION,
            "image_processor",
        )
    if any(
        read.kind == "resized" and read.value == PATCHES_FUNCTION
        for read in used.values()
    ):
        _carry_patches_resize(transplant, _given(image_processor_cls, PATCHES_FUNCTION))
        kinds.discard("resized")
    found_by_kind = [("resized", api.resized), ("tokens", api.count)]
    found_by_kind += [
        ("entry", api.entries[r.key]) for r in used.values() if r.kind == "entry"
    ]
    for kind, found in found_by_kind:
        if kind in kinds and found is not None:
            for method in found.calls:
                transplant.method(
                    _given(image_processor_cls, method), method, "image_processor"
                )
            transplant.add(found.function, found.namespace)


def _given(image_processor_cls: type[Any] | None, method: str) -> type[Any]:
    """The image processor class whose ``method`` the reads call; mmport must have been given it."""
    if image_processor_cls is None:
        raise AnalysisError(
            f"the item reads call the image processor's {method}, but no image processor class was given"
        )
    return image_processor_cls


class _ReturnSize(cst.CSTTransformer):
    """The function renamed, its last ``return`` replaced by ``return height, width``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        body = list(updated_node.body.body)
        body[-1] = cst.SimpleStatementLine(
            [
                cst.Return(
                    cst.Tuple(
                        [
                            cst.Element(cst.Name("height")),
                            cst.Element(cst.Name("width")),
                        ],
                        lpar=[],
                        rpar=[],
                    )
                )
            ]
        )
        returns = cst.Annotation(cst.parse_expression("tuple[int, int]"))
        return updated_node.with_changes(
            name=cst.Name(self.name),
            returns=returns,
            body=updated_node.body.with_changes(body=body),
        )


def _carry_patches_resize(
    transplant: Transplanter, image_processor_cls: type[Any]
) -> None:
    """``resized_image_size(image_processor, height, width, images_kwargs)``: the patch function up to its resize.

    ``get_number_of_image_patches`` resizes ``height`` and ``width`` before it
    counts; the sizes the image processor returns are that resize, so the port
    keeps the function's lines and returns the size instead of the count.
    """
    had_patches = PATCHES_FUNCTION in transplant.helpers
    transplant.method(image_processor_cls, PATCHES_FUNCTION, "image_processor")
    patches = (
        transplant.helpers[PATCHES_FUNCTION]
        if had_patches
        else transplant.helpers.pop(PATCHES_FUNCTION)
    )
    code = (
        cst.parse_module(patches.code).visit(_ReturnSize(RESIZED_FUNCTION)).code.strip()
    )
    owner = next(k for k in image_processor_cls.__mro__ if PATCHES_FUNCTION in vars(k))
    helper = dataclasses.replace(
        patches,
        name=RESIZED_FUNCTION,
        code=code,
        owner=f"{patches.owner}, up to its resize",
    )
    transplant.add(helper, vars(inspect.getmodule(owner)))


def _flattened(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``inputs["key"]`` for ``[x for xs in inputs["key"] for x in xs]``.

    HF flattens the per-sample nesting of an output before indexing it by
    item; one item's entry is the same either way.
    """
    if not (isinstance(node, cst.ListComp) and isinstance(node.elt, cst.Name)):
        return None
    outer, inner = node.for_in, node.for_in.inner_for_in
    if inner is None or inner.inner_for_in is not None or outer.ifs or inner.ifs:
        return None
    if not (
        isinstance(outer.target, cst.Name)
        and isinstance(inner.target, cst.Name)
        and isinstance(inner.iter, cst.Name)
    ):
        return None
    if inner.iter.value == outer.target.value and inner.target.value == node.elt.value:
        return outer.iter
    return None


class ItemReadRewriter(cst.CSTTransformer):
    """Replace ``inputs["key"][idx]`` reads that :class:`ItemRead` facts explain.

    ``used`` lists the facts applied; a read no fact explains is left alone
    (the caller then refuses the statement as reading the processed item).
    """

    def __init__(
        self,
        inputs: str,
        index: str,
        reads: dict[str, ItemRead],
        kwargs: str | None = None,
    ) -> None:
        self.inputs = inputs
        self.index = index
        self.reads = reads
        self.kwargs = kwargs  # the hook's ``**kwargs`` when the port keeps them (merged image kwargs)
        self.used: dict[str, ItemRead] = {}
        self.aliases: dict[str, ItemRead] = {}  # ``rows = [flattened inputs["rows"]]``

    def _key_read(self, node: cst.BaseExpression) -> ItemRead | None:
        """The fact for ``inputs["key"]`` (or its flattening), if ``node`` is one."""
        node = _flattened(node) or node
        if not (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Name)
            and node.value.value == self.inputs
        ):
            return None
        key = node.slice[0].slice
        value = string_value(key.value) if isinstance(key, cst.Index) else None
        return self.reads.get(value) if value is not None else None

    def _read(self, node: cst.BaseExpression) -> ItemRead | None:
        """The fact for ``inputs["key"][index]``, if ``node`` is such a read."""
        if not isinstance(node, cst.Subscript):
            return None
        outer = node.slice[0].slice
        if not (
            isinstance(outer, cst.Index)
            and isinstance(outer.value, cst.Name)
            and outer.value.value == self.index
        ):
            return None
        if isinstance(node.value, cst.Name) and node.value.value in self.aliases:
            return self.aliases[node.value.value]
        return self._key_read(node.value)

    def leave_Assign(
        self, original_node: cst.Assign, updated_node: cst.Assign
    ) -> cst.Assign:
        target = original_node.targets[0].target
        read = (
            self._key_read(original_node.value)
            if len(original_node.targets) == 1
            else None
        )
        if (
            read is not None
            and isinstance(target, cst.Name)
            and read.kind in ("item", "count", "part", "tokens", "constant")
        ):
            self.aliases[target.value] = read
        if isinstance(original_node.value, cst.Subscript) and isinstance(
            updated_node.value, cst.BinaryOperation
        ):
            # A whole right-hand side needs no parentheses of its own.
            return updated_node.with_changes(
                value=updated_node.value.with_changes(lpar=(), rpar=())
            )
        return updated_node

    def leave_SimpleStatementLine(self, original_node, updated_node):
        """Drop ``name = [flattened inputs["key"]]`` once its reads are rewritten."""
        node = original_node.body[0]
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.targets[0].target, cst.Name)
            and node.targets[0].target.value in self.aliases
            and len(original_node.body) == 1
        ):
            return cst.RemovalSentinel.REMOVE
        return updated_node

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.BaseExpression
    ) -> cst.BaseExpression:
        read = self._read(original_node)
        if read is not None and read.kind == "size":
            self.used[read.key] = read
            return SIZE
        if read is not None and read.kind == "grid":
            # One frame per image: the entry is (1, grid_h, grid_w).
            self.used[read.key] = read
            return cst.Tuple(
                [cst.Element(cst.Integer("1")), cst.StarredElement(_patches_call())]
            )
        if read is not None and read.kind == "item":
            self.used[read.key] = read
            return cst.Subscript(
                _patches_call(self.kwargs),
                [cst.SubscriptElement(cst.Index(cst.Integer(str(read.position))))],
            )
        if read is not None and read.kind in ("resized", "tokens", "entry"):
            # The size after HF's resize, the item's token count, or the entry HF's
            # token API hands the hook, recomputed from the original size (mmport.analyzers.resized).
            self.used[read.key] = read
            return self._recomputed(read)
        if read is not None and read.kind in ("count", "part"):
            self.used[read.key] = read
            if read.kind == "part":
                offset = cst.Integer(str(read.offset))
                return cst.BinaryOperation(
                    _patches_call(self.kwargs),
                    cst.Subtract(),
                    offset,
                    lpar=[cst.LeftParen()],
                    rpar=[cst.RightParen()],
                )
            return _patches_call(self.kwargs)
        if read is not None and read.kind == "constant":
            self.used[read.key] = read
            # Without the hook's kwargs the switch cannot be seen: the callers refuse such a hook.
            return (
                _switched_read(read, self.kwargs)
                if self.kwargs
                else cst.Integer(read.value)
            )
        return updated_node

    def _recomputed(self, read: ItemRead) -> cst.Call:
        """The port's call that recomputes ``read`` (resized, tokens, entry) from the item's original size."""
        args = [
            cst.Arg(cst.Name(n)) for n in (CONFIGURED, "image_height", "image_width")
        ]
        if read.value == PATCHES_FUNCTION:
            # The image processor's own resize (carry_read_helpers).
            args[0] = cst.Arg(
                cst.Attribute(cst.Name(CONFIGURED), cst.Name("image_processor"))
            )
        kwargs = cst.Name(self.kwargs) if self.kwargs else cst.Dict([])
        function = {
            "resized": RESIZED_FUNCTION,
            "tokens": COUNT_FUNCTION,
            "entry": read.value,
        }[read.kind]
        return cst.Call(cst.Name(function), [*args, cst.Arg(kwargs)])

    def leave_Call(
        self, original_node: cst.Call, updated_node: cst.Call
    ) -> cst.BaseExpression:
        func = original_node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "prod"
            and not original_node.args
        ):
            read = self._read(func.value)
            if read is not None and read.kind == "patches":
                self.used[read.key] = read
                return _patches_call()
        return updated_node


def is_dead_list_guard(stmt: cst.CSTNode, tuples: set[str]) -> bool:
    """``if not isinstance(name, (list, tuple)): ...`` where ``name`` now holds a tuple.

    HF converts a tensor entry to a list there; once the read is the item's
    ``(height, width)`` the branch can never run, so the port leaves it out.
    """
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    test = stmt.test
    if not (
        isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    ):
        return False
    call = test.expression
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Name)
        and call.func.value == "isinstance"
    ):
        return False
    subject, kinds = (
        call.args[0].value,
        call.args[1].value if len(call.args) > 1 else None,
    )
    kind_names = (
        {el.value.value for el in kinds.elements if isinstance(el.value, cst.Name)}
        if isinstance(kinds, cst.Tuple)
        else set()
    )
    return (
        isinstance(subject, cst.Name)
        and subject.value in tuples
        and "tuple" in kind_names
    )


def _rewrite_example(code: str, reads: dict[str, ItemRead]) -> str:
    """One hook statement with ``image_inputs[key][image_idx]`` reads rewritten (the examples' runner)."""
    rewriter = ItemReadRewriter("image_inputs", "image_idx", reads)
    return (
        cst.Module([])
        .code_for_node(rewritten(cst.parse_statement(code), rewriter))
        .strip()
    )


_GRID = ItemRead("image_grid_thw", "patches", Source(SNIPPET_FILE, 1))
_SIZES = ItemRead("image_sizes", "size", Source(SNIPPET_FILE, 1))

EXAMPLES = [
    valid(
        "qwen2_vl_grid_product_becomes_the_patch_count",
        "",
        lambda snippet: _rewrite_example(
            'n = image_inputs["image_grid_thw"][image_idx].prod() // merge_length',
            {"image_grid_thw": _GRID},
        ),
        "n = get_number_of_image_patches(configured.image_processor, image_height, image_width, {}) // merge_length",
    ),
    valid(
        "llava_next_original_size_becomes_the_items_size",
        "",
        lambda snippet: _rewrite_example(
            'image_size = image_inputs["image_sizes"][image_idx]',
            {"image_sizes": _SIZES},
        ),
        "image_size = (image_height, image_width)",
    ),
    valid(
        "tensor_to_list_guard_is_dead_once_the_size_is_a_tuple",
        "",
        lambda snippet: is_dead_list_guard(
            cst.parse_statement(
                "if not isinstance(image_size, (list, tuple)):\n    image_size = image_size.tolist()\n"
            ),
            {"image_size"},
        ),
        True,
    ),
    invalid(
        "a_read_no_fact_explains_stays_for_the_caller_to_refuse",
        "",
        lambda snippet: _rewrite_example(
            'rows = image_inputs["rows"][image_idx]', {"image_sizes": _SIZES}
        ),
        expected='rows = image_inputs["rows"][image_idx]',
    ),
    invalid(
        "a_guard_on_a_name_that_is_no_tuple_stays",
        "",
        lambda snippet: is_dead_list_guard(
            cst.parse_statement(
                "if not isinstance(grid, (list, tuple)):\n    grid = grid.tolist()\n"
            ),
            {"image_size"},
        ),
        expected=False,
    ),
]
