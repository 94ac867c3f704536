"""Derive the per-item token count from the HF processor's replacement hook.

In transformers 5.x, ``replace_<modality>_token(self, image_inputs, image_idx)``
returns the string that replaces one placeholder. The common shape is::

    pixel_values = image_inputs["pixel_values"][image_idx]
    height, width = get_image_size(to_numpy_array(pixel_values))
    num_image_tokens = (height // self.patch_size) * (width // self.patch_size)
    if self.vision_feature_select_strategy == "default":
        num_image_tokens -= 1
    return self.image_token * num_image_tokens

From it we keep the statements that compute the count (``self`` renamed to
``processor``), note whether they read the processed ``height``/``width``,
and learn which processor attribute holds the repeated token. As in HF, the
statements read the processor as it was built and the hook's ``**kwargs``
(the request's merged image kwargs: ``kwargs.get("merge_size") or
self.image_processor.merge_size``); only the reads of the processed item,
rewritten to the item's size, see the request's settings through
``configured`` (:mod:`mmport.analyzers.substitute`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import libcst as cst

from mmport.analyzers.examples import SNIPPET_FILE, invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, bound_names, find_method, names_in
from mmport.analyzers.substitute import (
    SIZE,
    ItemReadRewriter,
    carry_read_helpers,
    is_dead_list_guard,
    item_reads,
)
from mmport.analyzers.transplant import Transplanter
from mmport.errors import AnalysisError
from mmport.hf.syntax import rewritten
from mmport.spec import CountRule, PromptUpdateSpec, Source

__all__ = [
    "CountOutcome",
    "CountStep",
    "HookShape",
    "ReplacementFacts",
    "analyze_replacement",
    "hook_shape",
    "port_code",
]

GEOMETRY_NAMES = frozenset({"height", "width"})


@dataclass(frozen=True)
class ReplacementFacts:
    """What the replacement hook says: the count and the repeated token attribute."""

    count: CountRule
    token_attr: str


class CountStep(StrEnum):
    """The steps of a count's fallback chain, in the order a port tries them."""

    # Read statically: the hook's ``token * count``, HF's own ``__call__`` block, or the hook run on an item's outputs.
    DERIVED = "derived"
    # The whole hook carried into the port (it returns more than ``token * count``).
    TRANSPLANTED = "transplanted"
    # HF counts each item at run time; the reason says why no step before could.
    DELEGATED = "delegated"


@dataclass(frozen=True)
class CountOutcome:
    """What one step of the chain found: the facts, or (``facts`` None) why it found none.

    ``update`` is the prompt update a block HF's own ``__call__`` inserts
    fixes along with the count (:mod:`mmport.analyzers.callblock`).
    """

    step: CountStep
    facts: ReplacementFacts | None = None
    reason: str = ""
    update: PromptUpdateSpec | None = None


class HookShape(StrEnum):
    """What the model's ``replace_<modality>_token`` returns, which names the step that ports it."""

    # No hook in the model's code: HF's own ``__call__`` may insert a block of tokens.
    ABSENT = "absent"
    # ``self.<name>_token * count``: the count is derived (:func:`analyze_replacement`).
    REPEATED = "repeated"
    # More than that: the whole hook is transplanted (:mod:`mmport.analyzers.replacement`).
    WHOLE = "whole"


def hook_shape(processor_cls: type[Any], modality: str = "image") -> HookShape:
    """The shape of ``processor_cls``'s replacement hook (see :class:`HookShape`).

    The hook is the one :func:`analyze_replacement` reads; it counts only when
    the model's code (not ProcessorMixin, whose hook only raises) defines one.
    """
    hook = f"replace_{modality}_token"
    if find_method(processor_cls, hook, models_only=True) is None:
        return HookShape.ABSENT
    found = find_method(processor_cls, hook)
    assert found is not None, "the model's code defines it"
    return HookShape.WHOLE if _returned_repeat(found[1]) is None else HookShape.REPEATED


def _returned_repeat(
    func: cst.FunctionDef,
) -> tuple[str, cst.BaseExpression] | None:
    """``(attr, count)`` when the hook's last statement returns ``self.<attr> * count``."""
    last = func.body.body[-1]
    ret = last.body[0] if isinstance(last, cst.SimpleStatementLine) else None
    return (
        _repeated_token(ret.value)
        if isinstance(ret, cst.Return) and ret.value
        else None
    )


def _repeated_token(expr: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """Split ``self.<name>_token * count`` (either order) into ``(attr, count)``."""
    if not (
        isinstance(expr, cst.BinaryOperation)
        and isinstance(expr.operator, cst.Multiply)
    ):
        return None
    for token, count in ((expr.left, expr.right), (expr.right, expr.left)):
        if (
            isinstance(token, cst.Attribute)
            and isinstance(token.value, cst.Name)
            and token.value.value == "self"
            and token.attr.value.endswith("_token")
        ):
            return token.attr.value, count
    return None


def _bound_tuple(stmt: cst.CSTNode) -> str | None:
    """``name`` for ``name = (image_height, image_width)``."""
    node = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else None
    if (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
    ):
        return node.targets[0].target.value if node.value.deep_equals(SIZE) else None
    return None


class _SelfToProcessor(cst.CSTTransformer):
    """Rename ``self`` to ``processor`` so HF lines run inside a port."""

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return (
            updated_node.with_changes(value="processor")
            if original_node.value == "self"
            else updated_node
        )


def port_code(parsed: ParsedClass, node: cst.CSTNode) -> str:
    """``node``'s code as a port runs it: ``self`` becomes ``processor``."""
    return parsed.module.code_for_node(rewritten(node, _SelfToProcessor())).strip()


def _rewrite(
    node: cst.CSTNode, rewrites: Sequence[cst.CSTTransformer]
) -> cst.CSTNode | cst.RemovalSentinel:
    """``node`` through each rewrite in turn; the sentinel where one removes it (an alias line)."""
    for rewrite in rewrites:
        visited = node.visit(rewrite)
        if isinstance(visited, cst.RemovalSentinel):
            return visited
        assert isinstance(visited, cst.CSTNode), (
            "the rewrites replace a node, never flatten it"
        )
        node = visited
    return node


def _rewrite_expression(
    node: cst.BaseExpression, rewrites: Sequence[cst.CSTTransformer]
) -> cst.BaseExpression:
    for rewrite in rewrites:
        node = rewritten(node, rewrite)
    return node


def _check_free_names(
    transplant: Transplanter,
    statements: list[str],
    result: str,
    namespace: dict,
    hook: str,
    kwargs: str,
) -> None:
    """Every name the count reads is a parameter, a local, or carried into the port."""
    body = "".join(f"    {line}\n" for code in statements for line in code.splitlines())
    params = ", ".join(
        [
            "processor",
            "configured",
            "image_height",
            "image_width",
            "height",
            "width",
            *filter(None, [kwargs]),
        ]
    )
    code = f"def _count({params}):\n{body}    return {result}\n"
    transplant.resolve(code, namespace, hook)


def _count_statements(
    body: Sequence[cst.CSTNode],
    rewrites: list,
    transplant: Transplanter,
    processor_cls: type[Any],
    inputs_param: str,
) -> tuple[list[str], set[str], bool]:
    """The hook's statements before its return, as the count's code: (statements, names holding the item, reads its geometry).

    Statements that read the processed item are dropped (they may only learn
    its height and width: the names they bind are tainted); dead list guards
    go too; the rest are transplanted from ``self`` to ``processor``.
    """
    statements: list[str] = []
    uses_geometry, tuples = False, set[str]()
    tainted = {inputs_param}  # names that hold the processed item
    for stmt in (_rewrite(s, rewrites) for s in body):
        if isinstance(
            stmt, cst.RemovalSentinel
        ):  # an alias of an output the rewrite now reads directly
            continue
        if is_dead_list_guard(stmt, tuples):
            continue
        if names_in(stmt) & (tainted - GEOMETRY_NAMES):
            # Reads the processed item: allowed only to learn its height and width.
            tainted |= bound_names(stmt)
            uses_geometry |= bool(bound_names(stmt) & GEOMETRY_NAMES)
            continue
        if (bound := _bound_tuple(stmt)) is not None:
            tuples.add(bound)
        statements.append(transplant.code(stmt, processor_cls, "processor"))
    return statements, tainted, uses_geometry


def _names_read(
    statements: list[str], result: str, tainted: set[str], hook: str
) -> set[str]:
    """Every name the count's code reads; refused where one holds more of the item than its height and width."""
    read: set[str] = set()
    for code in (*statements, result):
        read |= names_in(cst.parse_module(code))
    leaked = read & (tainted - GEOMETRY_NAMES)
    if leaked:
        raise AnalysisError(
            f"{hook} counts from {sorted(leaked)}, not only the item's height and width"
        )
    return read


def _refuse_switched_reads(reads: ItemReadRewriter, hook: str) -> None:
    """Refuse a count that reads an output HF computes only under a switch: the count cannot see the
    switch; the whole hook can (:mod:`mmport.analyzers.replacement`)."""
    switched = [r for r in reads.used.values() if r.kind == "constant"]
    if switched:
        raise AnalysisError(
            f"{hook} reads {switched[0].key!r}, which HF computes only while {switched[0].setting} is on"
        )


def analyze_replacement(
    processor_cls: type[Any],
    modality: str = "image",
    image_processor_cls: type[Any] | None = None,
) -> ReplacementFacts:
    """Read ``replace_<modality>_token`` of ``processor_cls`` (or a base class).

    With ``image_processor_cls``, reads of its per-item outputs that follow
    from the item's original size (:mod:`mmport.analyzers.itemreads`) become
    reads of that size; helpers the count calls are transplanted with it.
    """
    hook = f"replace_{modality}_token"
    found = find_method(processor_cls, hook)
    if found is None:
        raise AnalysisError(
            f"{processor_cls.__name__} defines no {hook}; its expansion cannot be derived statically"
        )
    parsed, func = found
    inputs_param, index_param = (p.name.value for p in func.params.params[1:3])
    body = list(func.body.body)
    split = _returned_repeat(func)
    if split is None:
        raise AnalysisError(
            f"{hook} of {processor_cls.__name__} does not return `token * count`"
        )
    token_attr, count_expr = split
    known, api = item_reads(processor_cls, image_processor_cls)
    reads = ItemReadRewriter(inputs_param, index_param, known)
    transplant = Transplanter(import_shared=True)
    namespace = vars(
        inspect.getmodule(next(k for k in processor_cls.__mro__ if hook in vars(k)))
    )
    star = func.params.star_kwarg.name.value if func.params.star_kwarg else ""
    rewrites = [reads]
    statements, tainted, uses_geometry = _count_statements(
        body[:-1], rewrites, transplant, processor_cls, inputs_param
    )
    result = transplant.code(
        _rewrite_expression(count_expr, rewrites), processor_cls, "processor"
    )
    read = _names_read(statements, result, tainted, hook)
    kwargs_name = star if star in read else ""
    _refuse_switched_reads(reads, hook)
    carry_read_helpers(transplant, reads.used, image_processor_cls, api)
    _check_free_names(transplant, statements, result, namespace, hook, kwargs_name)
    rule = CountRule(
        statements=tuple(statements),
        result=result,
        uses_geometry=uses_geometry,
        strategy="derived",
        source=parsed.source(func),
        size_dependent=bool(reads.used),
        helpers=tuple(transplant.helpers.values()),
        imports=tuple(sorted(transplant.imports)),
        support_names=tuple(sorted(transplant.support)),
        item_reads=tuple((r.key, r.kind, r.source) for r in reads.used.values()),
        kwargs_name=kwargs_name,
    )
    return ReplacementFacts(rule, token_attr)


# LLaVA's hook: the patch grid of the processed item, less the CLS under the "default" strategy.
_LLAVA = """
class LlavaProcessor:
    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
        pixel_values = image_inputs["pixel_values"][image_idx]
        height, width = get_image_size(to_numpy_array(pixel_values))
        num_image_tokens = (height // self.patch_size) * (width // self.patch_size) + self.num_additional_image_tokens
        if self.vision_feature_select_strategy == "default":
            num_image_tokens -= 1
        return self.image_token * num_image_tokens
"""

EXAMPLES = [
    valid(
        "llava_counts_the_patch_grid_of_the_processed_size",
        _LLAVA,
        lambda snippet: analyze_replacement(snippet.LlavaProcessor),
        ReplacementFacts(
            CountRule(
                statements=(
                    "num_image_tokens = (height // processor.patch_size) * (width // processor.patch_size) + processor.num_additional_image_tokens",
                    'if processor.vision_feature_select_strategy == "default":\n    num_image_tokens -= 1',
                ),
                result="num_image_tokens",
                uses_geometry=True,
                strategy="derived",
                source=Source(
                    SNIPPET_FILE,
                    2,
                    "def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:",
                ),
            ),
            "image_token",
        ),
    ),
    valid(
        "paligemma_repeats_a_fixed_sequence_length",
        """
        class PaliGemmaProcessor:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                return self.image_seq_length * self.image_token
        """,
        lambda snippet: (
            analyze_replacement(snippet.PaliGemmaProcessor).count.result,
            analyze_replacement(snippet.PaliGemmaProcessor).count.uses_geometry,
        ),
        ("processor.image_seq_length", False),
    ),
    invalid(
        "idefics3_counts_from_the_tile_rows",
        """
        class Idefics3Processor:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                rows = image_inputs["rows"][image_idx]
                return self.image_token * rows
        """,
        lambda snippet: analyze_replacement(snippet.Idefics3Processor),
        refusal=AnalysisError,
        match="counts from",
    ),
    invalid(
        "gemma3_returns_more_than_token_times_count",
        """
        class Gemma3Processor:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                return self.full_image_sequence
        """,
        lambda snippet: analyze_replacement(snippet.Gemma3Processor),
        refusal=AnalysisError,
        match="does not return `token \\* count`",
    ),
    valid(
        "llava_hook_repeats_its_token",
        _LLAVA,
        lambda snippet: hook_shape(snippet.LlavaProcessor),
        HookShape.REPEATED,
    ),
    valid(
        "gemma3_hook_returns_a_whole_sequence",
        """
        class Gemma3Processor:
            def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
                return self.full_image_sequence
        """,
        lambda snippet: hook_shape(snippet.Gemma3Processor),
        HookShape.WHOLE,
    ),
    invalid(
        "blip2_has_no_hook_of_its_own",
        """
        class Blip2Processor:
            def __call__(self, images=None, text=None, **kwargs):
                return self.tokenizer(self.image_token.content * self.num_query_tokens + text)
        """,
        lambda snippet: hook_shape(snippet.Blip2Processor),
        expected=HookShape.ABSENT,
    ),
]
