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

Where the loop hands the hook a one-item inputs dict of its own making::

    image_grid, num_crops = self.image_processor.get_image_grid_and_crops(*image_size, images_kwargs)
    image_string = self.replace_image_token({"image_grids": [image_grid]}, image_idx=0)

HF states there what the hook's ``image_inputs["image_grids"][idx]`` is for
an image of that size: the port gets the lines computing ``image_grid`` as
``image_grids_of_image(processor, height, width, images_kwargs)``, the image
processor methods they call transplanted beside it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.itemreads import ItemRead
from mmport.analyzers.sourcefile import ParsedClass, bound_names, find_method, names_in
from mmport.hf.syntax import find_all, rewritten, statements, string_value
from mmport.spec import HelperFunction

__all__ = [
    "COUNT_FUNCTION",
    "RESIZED_FUNCTION",
    "RESIZED_KEY",
    "ResizedSize",
    "TokenApi",
    "analyze_token_api",
]

# The processor's API for counting from original sizes, its argument, and the list it fills.
TOKENS_API = "_get_num_multimodal_tokens"
RESIZED_KEY = "image_sizes"
TOKENS_LIST = "num_image_tokens"
RESIZED_FUNCTION = "resized_image_size"
COUNT_FUNCTION = "image_token_count"
HOOK = "replace_image_token"


def _entry_function(key: str) -> str:
    """The port function computing one image's entry of the output ``key``."""
    return f"{key}_of_image"


@dataclass(frozen=True)
class TokenApi:
    """What ``_get_num_multimodal_tokens`` gives a port: the resize, the item's image token count,
    and the entries of the one-item inputs it hands the hook (by output key)."""

    resized: ResizedSize | None
    count: ResizedSize | None
    entries: Mapping[str, ResizedSize] = field(default_factory=dict)


class ResizedSize:
    """One value of the token API as port code: an :class:`ItemRead`, the function computing it,
    the HF module globals its free names resolve in, and the image processor methods it calls."""

    def __init__(
        self,
        read: ItemRead,
        function: HelperFunction,
        namespace: dict,
        calls: tuple[str, ...] = (),
    ) -> None:
        self.read = read
        self.function = function
        self.namespace = namespace
        self.calls = calls


def _assign(stmt: cst.CSTNode) -> cst.Assign | None:
    node = (
        stmt.body[0]
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        else None
    )
    return node if isinstance(node, cst.Assign) and len(node.targets) == 1 else None


def _pair(target: cst.BaseExpression) -> tuple[str, str] | None:
    """``(a, b)`` for the target ``a, b``."""
    if isinstance(target, cst.Tuple) and len(target.elements) == 2:
        names = [
            el.value.value for el in target.elements if isinstance(el.value, cst.Name)
        ]
        return (names[0], names[1]) if len(names) == 2 else None
    return None


def _size_loop(
    body: list[cst.BaseStatement],
) -> tuple[int, cst.For, cst.CSTTransformer] | None:
    """The ``for height, width in image_sizes:`` (or ``for image_size in ...``) statement, its index,
    and the rewrite that names the loop's size ``height`` and ``width``."""
    for index, stmt in enumerate(body):
        if (
            isinstance(stmt, cst.For)
            and isinstance(stmt.iter, cst.Name)
            and stmt.iter.value == RESIZED_KEY
        ):
            loop_vars = _pair(stmt.target)
            if loop_vars is not None:
                return (
                    index,
                    stmt,
                    _Rename(
                        {
                            loop_vars[0]: "height",
                            loop_vars[1]: "width",
                            "self": "processor",
                        }
                    ),
                )
            if isinstance(stmt.target, cst.Name):
                return index, stmt, _SizeIndex(stmt.target.value)
    return None


class _SizeIndex(cst.CSTTransformer):
    """``image_size[0]`` → ``height``, ``image_size[1]`` → ``width``; ``self`` → ``processor``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        index = original_node.slice[0].slice
        if (
            isinstance(original_node.value, cst.Name)
            and original_node.value.value == self.name
            and isinstance(index, cst.Index)
            and isinstance(index.value, cst.Integer)
            and index.value.value in ("0", "1")
        ):
            return cst.Name("height" if index.value.value == "0" else "width")
        return updated_node

    def leave_Arg(
        self, original_node: cst.Arg, updated_node: cst.Arg
    ) -> cst.Arg | cst.FlattenSentinel[cst.Arg]:
        """``f(*image_size)`` → ``f(height, width)``."""
        if (
            original_node.star == "*"
            and isinstance(original_node.value, cst.Name)
            and original_node.value.value == self.name
        ):
            return cst.FlattenSentinel(
                [
                    cst.Arg(cst.Name("height")),
                    updated_node.with_changes(star="", value=cst.Name("width")),
                ]
            )
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return (
            updated_node.with_changes(value="processor")
            if original_node.value == "self"
            else updated_node
        )


class _ImageProcessorCalls(cst.CSTTransformer):
    """``processor.image_processor.m(args)`` → ``m(processor.image_processor, args)``, collecting ``m``.

    The method is then transplanted, so that the port shows the computation
    rather than calling into the HF image processor.
    """

    def __init__(self) -> None:
        self.called: list[str] = []

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        owner = m.Attribute(value=m.Name("processor"), attr=m.Name("image_processor"))
        if isinstance(original_node.func, cst.Attribute) and m.matches(
            original_node.func, m.Attribute(value=owner)
        ):
            self.called.append(original_node.func.attr.value)
            return updated_node.with_changes(
                func=cst.Name(original_node.func.attr.value),
                args=(cst.Arg(original_node.func.value), *updated_node.args),
            )
        return updated_node


def _is_merge_kwargs(stmt: cst.CSTNode) -> bool:
    """``images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]`` (or through ``merged["images_kwargs"]``)."""
    assign = _assign(stmt)
    return assign is not None and any(
        string_value(s) == "images_kwargs"
        for s in m.findall(assign.value, m.SimpleString())
    )


def _standardized_kwargs(
    stmt: cst.BaseStatement, name: str
) -> cst.BaseStatement | None:
    """A merge statement that passes the merged kwargs through a call, reading ``name`` instead; None when it only merges.

    ``images_kwargs = self.image_processor._merge_and_standardize_kwargs(
    **self._merge_kwargs(**kwargs)["images_kwargs"])`` becomes
    ``images_kwargs = self.image_processor._merge_and_standardize_kwargs(**images_kwargs)``.
    """
    assign = _assign(stmt)
    if assign is None or m.matches(assign.value, m.Subscript()):
        return None
    found = [
        node
        for node in m.findall(assign.value, m.Subscript())
        if isinstance(node, cst.Subscript)
        and any(
            string_value(s) == "images_kwargs"
            for s in m.findall(node.slice[0], m.SimpleString())
        )
    ]
    if not found:
        return None
    replaced = stmt.deep_replace(found[0], cst.Name(name))
    assert isinstance(replaced, cst.BaseStatement)  # a name for an expression in it
    return replaced


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(
            value=self.names.get(original_node.value, original_node.value)
        )


def _appended_count(loop: cst.For) -> tuple[int, cst.BaseExpression] | None:
    """``num_image_tokens.append(expr)`` in the loop body: its index and ``expr``."""
    for index, stmt in enumerate(statements(loop.body)):
        node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
        call = node.value if isinstance(node, cst.Expr) else None
        if (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "append"
            and isinstance(call.func.value, cst.Name)
            and call.func.value.value == TOKENS_LIST
            and call.args
        ):
            return index, call.args[0].value
    return None


def _hook_entries(loop: cst.For) -> dict[str, tuple[int, str]]:
    """``self.replace_image_token({"key": [name]}, image_idx=0)`` in the loop body: key → (index, name)."""
    entries = {}
    one_item = m.Dict(
        [m.DictElement(key=m.SimpleString(), value=m.List([m.Element(m.Name())]))]
    )
    for index, stmt in enumerate(statements(loop.body)):
        for call in find_all(
            stmt,
            m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name(HOOK))),
            cst.Call,
        ):
            entry = (
                _one_item_entry(call.args[0].value)
                if call.args and m.matches(call.args[0].value, one_item)
                else None
            )
            if entry is not None:
                entries[entry[0]] = (index, entry[1])
    return entries


def _one_item_entry(node: cst.BaseExpression) -> tuple[str, str] | None:
    """``("key", "name")`` for ``{"key": [name]}``."""
    element = node.elements[0] if isinstance(node, cst.Dict) else None
    if not (
        isinstance(element, cst.DictElement) and isinstance(element.value, cst.List)
    ):
        return None
    key, item = string_value(element.key), element.value.elements[0].value
    return (key, item.value) if key is not None and isinstance(item, cst.Name) else None


def analyze_token_api(processor_cls: type[Any]) -> TokenApi:
    """The resize and the per-item image token count ``_get_num_multimodal_tokens`` computes."""
    found = find_method(processor_cls, TOKENS_API, models_only=True)
    if found is None:
        return TokenApi(None, None)
    parsed, func = found
    owner = next(k for k in processor_cls.__mro__ if TOKENS_API in vars(k))
    top = statements(func.body)
    for position, stmt in enumerate(top):
        block = statements(stmt.body) if isinstance(stmt, cst.If) else [stmt]
        located = _size_loop(block)
        if located is None:
            continue
        index, loop, rename = located
        sized = _SizeLoop(
            parsed,
            top[:position] + block[:index],
            loop,
            rename,
            vars(inspect.getmodule(owner)),
            f"{owner.__name__}.{TOKENS_API}, for one image",  # shown beside the HF line
        )
        return TokenApi(sized.resized(), sized.count(), sized.entries())
    return TokenApi(None, None)


@dataclass(frozen=True)
class _SizeLoop:
    """``_get_num_multimodal_tokens``'s loop over the image sizes, and what the port's functions are cut from.

    ``before`` are the lines ahead of the loop; ``rename`` names the loop's
    size ``height`` and ``width``; ``origin`` is shown beside each HF line.
    """

    parsed: ParsedClass
    before: list[cst.BaseStatement]
    loop: cst.For
    rename: cst.CSTTransformer
    namespace: dict[str, Any]
    origin: str

    def resized(self) -> ResizedSize | None:
        """The size one image is resized to, where the loop assigns a pair computed from its height and width."""
        sized = (
            (s, a)
            for s in statements(self.loop.body)
            if (a := _assign(s)) and _pair(a.targets[0].target)
        )
        resize, assign = next(
            (
                (s, a)
                for s, a in sized
                if {"height", "width"} & names_in(rewritten(a.value, self.rename))
            ),
            (None, None),
        )
        if resize is None or assign is None:
            return None
        value = rewritten(assign.value, self.rename)
        calls = _ImageProcessorCalls()
        code = _function_code(
            self.before,
            [],
            value,
            self.rename,
            RESIZED_FUNCTION,
            "tuple[int, int]",
            calls,
        )
        source = self.parsed.source(resize)
        return ResizedSize(
            ItemRead(RESIZED_KEY, "resized", source),
            HelperFunction(RESIZED_FUNCTION, code, source, self.origin),
            self.namespace,
            tuple(calls.called),
        )

    def count(self) -> ResizedSize | None:
        """The image's token count, where the loop appends one."""
        appended = _appended_count(self.loop)
        if appended is None:
            return None
        at, value = appended
        body = statements(self.loop.body)
        calls = _ImageProcessorCalls()
        code = _function_code(
            self.before,
            body[:at],
            rewritten(value, self.rename),
            self.rename,
            COUNT_FUNCTION,
            "int",
            calls,
        )
        source = self.parsed.source(body[at])
        return ResizedSize(
            ItemRead("", "tokens", source),
            HelperFunction(COUNT_FUNCTION, code, source, self.origin),
            self.namespace,
            tuple(calls.called),
        )

    def entries(self) -> dict[str, ResizedSize]:
        """Each entry the loop computes for the hook, as a port function of the image's size."""
        body = statements(self.loop.body)
        entries = {}
        for key, (at, name) in _hook_entries(self.loop).items():
            calls = _ImageProcessorCalls()
            function = _entry_function(key)
            code = _function_code(
                self.before,
                body[:at],
                cst.Name(name),
                self.rename,
                function,
                None,
                calls,
            )
            source = self.parsed.source(body[at])
            entries[key] = ResizedSize(
                ItemRead(key, "entry", source, value=function),
                HelperFunction(function, code, source, self.origin),
                self.namespace,
                tuple(calls.called),
            )
        return entries


def _function_code(
    before: list[cst.BaseStatement],
    loop_body: list[cst.BaseStatement],
    value: cst.BaseExpression,
    rename: cst.CSTTransformer,
    name: str,
    returns: str | None,
    calls: cst.CSTTransformer | None = None,
) -> str:
    """``def name(processor, height, width, images_kwargs)``: the slice of HF lines ``value`` needs, then ``value``.

    ``calls``, where given, rewrites the kept lines further (image processor method calls).
    """
    kwargs_name = "images_kwargs"
    needed = names_in(value)
    kept: list[cst.BaseStatement] = []
    for stmt in reversed([rewritten(s, rename) for s in (*before, *loop_body)]):
        if _is_merge_kwargs(stmt):
            # HF's merged image kwargs are what the port passes in: the
            # parameter takes the name HF binds them to.
            kwargs_name = next(iter(bound_names(stmt)))
            standardized = _standardized_kwargs(stmt, kwargs_name)
            if standardized is None:
                needed.discard(kwargs_name)
                continue
            # Merged, then completed from the image processor's own settings
            # (``_merge_and_standardize_kwargs``): that call stays, on the parameter.
            stmt = standardized
        if bound_names(stmt) & needed:
            kept.insert(0, stmt)
            needed |= names_in(stmt)
    if kept:  # HF's blank line before the first kept statement has no place here
        kept[0] = kept[0].with_changes(leading_lines=())
    if calls is not None:
        kept = [rewritten(stmt, calls) for stmt in kept]
    annotation = f" -> {returns}" if returns else ""
    header = f"def {name}(processor, height: int, width: int, {kwargs_name}: dict){annotation}:\n    pass\n"
    funcdef = cst.parse_statement(header)
    assert isinstance(funcdef, cst.FunctionDef)  # the header is a def
    body = [*kept, cst.SimpleStatementLine([cst.Return(value)])]
    return (
        cst.Module([])
        .code_for_node(funcdef.with_changes(body=funcdef.body.with_changes(body=body)))
        .strip()
    )


# Idefics3-style: the image processor returns sizes after its resize; the token API recomputes that resize.
_IDEFICS3 = """
class Idefics3Processor:
    def _get_num_multimodal_tokens(self, image_sizes=None, **kwargs):
        vision_data = {}
        if image_sizes is not None:
            images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]
            size = images_kwargs.get("size", None) or self.image_processor.size
            num_image_tokens = []
            for height, width in image_sizes:
                resized_height, resized_width = get_resize_output_image_size(
                    np.zeros((height, width, 3)), resolution_max_side=size["longest_edge"]
                )
                num_image_tokens.append(resized_height * resized_width)
            vision_data["num_image_tokens"] = num_image_tokens
        return vision_data
"""


# transformers 5.25's LightOnOCR: the merged kwargs are completed from the image
# processor's settings before the resize reads them.
_STANDARDIZED = _IDEFICS3.replace(
    'images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]',
    "images_kwargs = self.image_processor._merge_and_standardize_kwargs("
    '**self._merge_kwargs(**kwargs)["images_kwargs"])',
).replace(
    'size = images_kwargs.get("size", None) or self.image_processor.size',
    'size = images_kwargs["size"]',
)


def _resize_function_lines(api: TokenApi) -> list[str]:
    """The port function's first two lines of body, stripped."""
    assert api.resized is not None
    return [line.strip() for line in api.resized.function.code.splitlines()[1:3]]


def _resize_facts(api: TokenApi) -> tuple | None:
    """The resize a token API gives (its read and the port function's name); None without one."""
    if api.resized is None:
        return None
    read = api.resized.read
    return read.key, read.kind, read.source.line, api.resized.function.name


EXAMPLES = [
    valid(
        "idefics3_token_api_recomputes_the_resize",
        _IDEFICS3,
        lambda snippet: _resize_facts(analyze_token_api(snippet.Idefics3Processor)),
        ("image_sizes", "resized", 9, "resized_image_size"),
    ),
    valid(
        "kwargs_completed_by_the_image_processor_keep_that_call",
        _STANDARDIZED,
        lambda snippet: _resize_function_lines(
            analyze_token_api(snippet.Idefics3Processor)
        ),
        [
            "images_kwargs = _merge_and_standardize_kwargs("
            "processor.image_processor, **images_kwargs)",
            'size = images_kwargs["size"]',
        ],
    ),
    invalid(
        "no_token_api_no_resize",
        """
        class LlavaProcessor:
            def replace_image_token(self, image_inputs, image_idx, **kwargs):
                return self.image_token * self.image_seq_length
        """,
        lambda snippet: analyze_token_api(snippet.LlavaProcessor),
        expected=TokenApi(None, None),
    ),
]
