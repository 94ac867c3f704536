"""Text a processor's own ``__call__`` puts before each item, numbered by the item.

The 5.x hook builds each replacement alone, so it cannot know an item's place
in the prompt. MiniCPM-V overrides ``__call__`` to tag every image with its
index once the hook's replacements are built::

    merged_kwargs = self._merge_kwargs(...)
    use_image_id = merged_kwargs["images_kwargs"].pop("use_image_id", merged_kwargs["use_image_id"])
    use_image_id = use_image_id if use_image_id is not None else self.default_use_image_id
    ...
    if images_replacements and use_image_id:
        images_replacements = self._prepend_local_ids(text, images_replacements, self.image_token)

    def _prepend_local_ids(self, text, replacements, token):
        ...
        for sample in text:
            for local_idx in range(sample.count(token)):
                prefix = f"{self.image_id_start_token}{local_idx}{self.image_id_end_token}"
                new_replacements.append(prefix + replacements[global_idx])

which means: while ``use_image_id`` holds, the replacement of a prompt's
``item_idx``-th image starts with
``f"{processor.image_id_start_token}{item_idx}{processor.image_id_end_token}"``.
The loop counter over ``range(...)`` is the item's index; vLLM processes one
prompt per request, so that index is vLLM's ``item_idx``. A vLLM replacement
may depend on ``item_idx``, so the port emits the prefix per item. The lines
that set the switch are kept (``self`` renamed) so the port honours the same
kwarg and default.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method, is_self_attr
from mmport.analyzers.transplant import free_names
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten
from mmport.spec import ItemPrefix, Source

__all__ = ["analyze_item_prefix"]

# What the port calls the item's index; the prefix's loop counter becomes it.
ITEM_INDEX = "item_idx"


class _Rename(cst.CSTTransformer):
    """Rename variables (never attribute names): ``self`` → ``processor``, the counter → ``item_idx``."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(
            value=self.names.get(original_node.value, original_node.value)
        )

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)


def _code(parsed: ParsedClass, node: cst.CSTNode, names: dict[str, str]) -> str:
    return parsed.module.code_for_node(rewritten(node, _Rename(names))).strip()


class _PrefixCall(cst.CSTVisitor):
    """``X = self.<method>(..., X, ..., self.<token>)`` inside an ``if`` body, in ``__call__``.

    Also collects, in source order, the simple statements up to that call: the
    lines that set the guard's switch are among them.
    """

    def __init__(self, token_attr: str) -> None:
        self.token_attr = token_attr
        self.guards: list[cst.If] = []
        self.found: tuple[cst.If, cst.Assign, str, int] | None = None
        self.statements: list[cst.SimpleStatementLine] = []

    def visit_If_body(self, node: cst.If) -> None:
        self.guards.append(node)

    def leave_If_body(self, node: cst.If) -> None:
        self.guards.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if self.found is None:
            self.statements.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        call, target = node.value, node.targets[0].target
        if (
            self.found is not None
            or not self.guards
            or not isinstance(call, cst.Call)
            or not isinstance(target, cst.Name)
        ):
            return
        if not (
            isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
            and call.func.value.value == "self"
        ):
            return
        args = [arg.value for arg in call.args]
        items = [
            i
            for i, a in enumerate(args)
            if isinstance(a, cst.Name) and a.value == target.value
        ]
        tokens = [i for i, a in enumerate(args) if is_self_attr(a, self.token_attr)]
        if items and tokens and all(arg.keyword is None for arg in call.args):
            self.found = (self.guards[-1], node, call.func.attr.value, items[0])


class _Prepends(cst.CSTVisitor):
    """In the helper: ``prefix + replacements[...]``, ``prefix = f"..."`` and ``for counter in range(...)``."""

    def __init__(self, replacements: str) -> None:
        self.replacements = replacements
        self.joins: list[cst.BinaryOperation] = []
        self.fstrings: dict[str, cst.FormattedString] = {}
        self.counters: set[str] = set()

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Add) and any(
            _indexes(side, self.replacements) for side in (node.left, node.right)
        ):
            self.joins.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if isinstance(target, cst.Name) and isinstance(node.value, cst.FormattedString):
            self.fstrings[target.value] = node.value

    def visit_For(self, node: cst.For) -> None:
        if (
            isinstance(node.target, cst.Name)
            and isinstance(node.iter, cst.Call)
            and isinstance(node.iter.func, cst.Name)
            and node.iter.func.value == "range"
        ):
            self.counters.add(node.target.value)


def _indexes(expr: cst.BaseExpression, name: str) -> bool:
    """``name[...]``: one item's replacement."""
    return (
        isinstance(expr, cst.Subscript)
        and isinstance(expr.value, cst.Name)
        and expr.value.value == name
    )


def _reads(node: cst.CSTNode) -> set[str]:
    """The variables an expression reads, ``self`` aside."""
    return free_names(cst.Module([]).code_for_node(node)) - {"self"}


def _skips_token(processor_cls: type[Any], method: str, token_attr: str) -> bool:
    """True when ``method`` hands replacements back untouched for ``token_attr``.

    MiniCPM-V 4.7 numbers images but not videos::

        def _prepend_local_ids(self, text, replacements, token):
            if token == self.video_token:
                return replacements
    """
    import libcst.matchers as m

    found = find_method(processor_cls, method)
    if found is None:
        return False
    params = [p.name.value for p in found[1].params.params[1:]]
    same_token = m.Comparison(
        left=m.OneOf(*(m.Name(p) for p in params)),
        comparisons=[
            m.ComparisonTarget(
                operator=m.Equal(),
                comparator=m.Attribute(value=m.Name("self"), attr=m.Name(token_attr)),
            )
        ],
    )
    returns_input = m.IndentedBlock(
        body=[
            m.SimpleStatementLine(
                body=[m.Return(value=m.OneOf(*(m.Name(p) for p in params)))]
            )
        ]
    )
    return bool(params) and bool(
        m.findall(found[1].body, m.If(test=same_token, body=returns_input))
    )


def _prefix_text(
    processor_cls: type[Any], method: str, position: int
) -> tuple[ParsedClass, cst.FormattedString, str]:
    """The f-string ``method`` prepends to each replacement, and the counter it reads."""
    found = find_method(processor_cls, method)
    if found is None:
        raise AnalysisError(f"{processor_cls.__name__}.{method} has no source to read")
    parsed, func = found
    params = [p.name.value for p in func.params.params[1:]]
    visitor = _Prepends(params[position])
    func.visit(visitor)
    if len(visitor.joins) != 1 or _indexes(visitor.joins[0].left, visitor.replacements):
        raise AnalysisError(
            f"{processor_cls.__name__}.{method} does not put one prefix before each replacement"
        )
    prefix = visitor.joins[0].left
    if isinstance(prefix, cst.Name):
        prefix = visitor.fstrings.get(prefix.value, prefix)
    if not isinstance(prefix, cst.FormattedString):
        raise AnalysisError(
            f"{processor_cls.__name__}.{method} prepends something other than an f-string"
        )
    counters = _reads(prefix)
    if len(counters) != 1 or not counters <= visitor.counters:
        raise AnalysisError(
            f"the prefix of {processor_cls.__name__}.{method} reads {sorted(counters)}, not one item counter"
        )
    return parsed, prefix, counters.pop()


def _without(test: cst.BaseExpression, name: str) -> cst.BaseExpression | None:
    """``test`` without the ``and`` operand that only checks ``name`` (the replacements) is non-empty."""
    if isinstance(test, cst.Name) and test.value == name:
        return None
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _without(test.left, name), _without(test.right, name)
        if left is None or right is None:
            return left or right
        return test.with_changes(left=left, right=right)
    return test


def _assigned_name(
    stmt: cst.SimpleStatementLine,
) -> tuple[str, cst.BaseExpression] | None:
    node = stmt.body[0]
    if (
        len(stmt.body) == 1
        and isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
    ):
        return node.targets[0].target.value, node.value
    return None


def _is_merge(value: cst.BaseExpression) -> bool:
    """``self._merge_kwargs(...)``: the processor's merged kwargs."""
    return isinstance(value, cst.Call) and is_self_attr(value.func, "_merge_kwargs")


def _setup(
    calls: _PrefixCall, body: cst.BaseSuite, reads: set[str]
) -> tuple[list[cst.SimpleStatementLine], str]:
    """The lines before the guard that compute ``reads`` (a backward slice), and the merged kwargs' name.

    Only plain ``name = value`` lines of the method's own body qualify; the
    slice must end at ``self`` and the merged kwargs, which the port rebuilds.
    """
    needed, merged = set(reads), ""
    kept: list[cst.SimpleStatementLine] = []
    top = set(map(id, body.body))
    for stmt in reversed(calls.statements):
        bound = _assigned_name(stmt)
        if bound is None or bound[0] not in needed:
            continue
        if id(stmt) not in top:
            raise AnalysisError(
                f"the switch of the item prefix, {bound[0]!r}, is set inside a branch"
            )
        if _is_merge(bound[1]):
            merged = bound[0]
            needed.discard(merged)
        else:
            kept.insert(0, stmt)
            needed = (needed - {bound[0]}) | _reads(bound[1])
    if needed:
        raise AnalysisError(
            f"the switch of the item prefix reads {sorted(needed)}, which mmport cannot rebuild"
        )
    return kept, merged


def analyze_item_prefix(processor_cls: type[Any], token_attr: str) -> ItemPrefix | None:
    """The per-item prefix the processor's own ``__call__`` adds (see module doc), or None."""
    found = find_method(processor_cls, "__call__", models_only=True)
    if found is None:
        return None
    parsed, func = found
    calls = _PrefixCall(token_attr)
    func.visit(calls)
    if calls.found is None:
        return None
    guard, assign, method, position = calls.found
    if _skips_token(processor_cls, method, token_attr):
        return None
    helper, fstring, counter = _prefix_text(processor_cls, method, position)
    condition = _without(
        guard.test, cst.ensure_type(assign.targets[0].target, cst.Name).value
    )  # _PrefixCall finds only such assigns
    setup, merged = _setup(
        calls, func.body, _reads(condition) if condition is not None else set()
    )
    rename = {"self": "processor"}
    return ItemPrefix(
        text=_code(helper, fstring, {**rename, counter: ITEM_INDEX}),
        source=helper.source(fstring),
        condition=_code(parsed, condition, rename) if condition is not None else "",
        condition_source=parsed.source(guard) if condition is not None else None,
        # The port cites the HF line; HF's comments above it stay behind.
        setup=tuple(
            _code(parsed, stmt.with_changes(leading_lines=()), rename) for stmt in setup
        ),
        setup_source=parsed.source(setup[0]) if setup else None,
        kwargs_name=merged,
    )


# MiniCPM-V: every image's replacement is tagged with its index in the prompt while use_image_id holds.
_MINICPM_V = """
class MiniCPMVProcessor:
    def __call__(self, images=None, text=None, **kwargs):
        merged_kwargs = self._merge_kwargs(MiniCPMVProcessorKwargs, **kwargs)
        use_image_id = merged_kwargs["images_kwargs"].pop("use_image_id", merged_kwargs["use_image_id"])
        use_image_id = use_image_id if use_image_id is not None else self.default_use_image_id
        processed_images, images_replacements = self._process_images(images, **merged_kwargs["images_kwargs"])
        if text is not None:
            if images_replacements and use_image_id:
                images_replacements = self._prepend_local_ids(text, images_replacements, self.image_token)
        return images_replacements

    def _prepend_local_ids(self, text, replacements, token):
        new_replacements = []
        global_idx = 0
        for sample in text:
            n_tokens = sample.count(token)
            for local_idx in range(n_tokens):
                prefix = f"{self.image_id_start_token}{local_idx}{self.image_id_end_token}"
                new_replacements.append(prefix + replacements[global_idx])
                global_idx += 1
        return new_replacements
"""

EXAMPLES = [
    valid(
        "minicpm_v_tags_each_image_with_its_index",
        _MINICPM_V,
        lambda snippet: analyze_item_prefix(snippet.MiniCPMVProcessor, "image_token"),
        ItemPrefix(
            text='f"{processor.image_id_start_token}{item_idx}{processor.image_id_end_token}"',
            source=Source(
                SNIPPET_FILE,
                18,
                'prefix = f"{self.image_id_start_token}{local_idx}{self.image_id_end_token}"',
            ),
            condition="use_image_id",
            condition_source=Source(
                SNIPPET_FILE, 8, "if images_replacements and use_image_id:"
            ),
            setup=(
                'use_image_id = merged_kwargs["images_kwargs"].pop("use_image_id", merged_kwargs["use_image_id"])',
                "use_image_id = use_image_id if use_image_id is not None else processor.default_use_image_id",
            ),
            setup_source=Source(
                SNIPPET_FILE,
                4,
                'use_image_id = merged_kwargs["images_kwargs"].pop("use_image_id", merged_kwargs["use_image_id"])',
            ),
            kwargs_name="merged_kwargs",
        ),
    ),
    invalid(
        "minicpm_v_tags_no_video_token",
        _MINICPM_V,
        lambda snippet: analyze_item_prefix(snippet.MiniCPMVProcessor, "video_token"),
    ),
    invalid(
        "a_tag_after_the_replacement_is_no_prefix",
        _MINICPM_V.replace(
            "prefix + replacements[global_idx]", "replacements[global_idx] + prefix"
        ),
        lambda snippet: analyze_item_prefix(snippet.MiniCPMVProcessor, "image_token"),
        refusal=AnalysisError,
        match="prefix before",
    ),
]
