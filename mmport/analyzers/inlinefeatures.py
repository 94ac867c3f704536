"""An encoder path HF writes inline in a model's ``forward``, as a method of its own.

Most 5.x models compute a modality's features in ``get_<modality>_features``,
which a generated class runs as its own. Some (Qwen2-Audio) compute them
inside ``forward``, between reading the item's inputs and placing the features
at the modality's token positions (``inputs_embeds.masked_scatter(mask,
audio_features)``). This module finds that placement and takes, walking back
from it along the statements that run before it, every line the placed
features depend on: a backward slice, which becomes the body of a
``get_<modality>_features`` method with each line's HF source.

Reads of a tensor for its dtype or device alone are not dependencies: where
HF reads the text embeddings only for them (to build a mask of their dtype),
the slice reads the item's first input instead, which vLLM hands over in the
model's dtype on its device. Moves of an input to a device (``x = x.to(...)``)
are left out: vLLM places the inputs itself. A line the features depend on
that HF runs under a loop, or assigns under a branch the slice does not
follow, is refused with the reason (:class:`InlineRefusal`), as is a slice
that needs anything but the item's own inputs.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import ParsedClass, find_method
from mmport.errors import AnalysisError
from mmport.spec import InlineFeatures


class InlineRefusal(AnalysisError):
    """``forward`` places the features, but its lines to them cannot be sliced out."""


# Attributes whose read says nothing about a tensor's (or module's) values.
DTYPE_DEVICE = frozenset({"dtype", "device"})


class _Reads(cst.CSTVisitor):
    """Names a statement reads for their values, and those it reads only for ``.dtype``/``.device``."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.dtype_device: set[str] = set()
        self.self_attrs: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if isinstance(node.value, cst.Name):
            if node.attr.value in DTYPE_DEVICE:
                self.dtype_device.add(node.value.value)
                return False
            if node.value.value == "self":
                self.self_attrs.append(node.attr.value)
        node.value.visit(self)
        return False  # the attribute's own name is no variable

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False  # a keyword is no variable

    def visit_Name(self, node: cst.Name) -> None:
        self.values.add(node.value)


def _reads(*nodes: cst.CSTNode) -> _Reads:
    reads = _Reads()
    for node in nodes:
        node.visit(reads)
    return reads


def _target_names(target: cst.BaseExpression) -> tuple[set[str], set[str]]:
    """(names a target defines, names it changes in place: ``x[i] = ...``)."""
    if isinstance(target, cst.Name):
        return {target.value}, set()
    if isinstance(target, (cst.Tuple, cst.List)):
        defined: set[str] = set()
        changed: set[str] = set()
        for element in target.elements:
            d, c = _target_names(element.value)
            defined |= d
            changed |= c
        return defined, changed
    if isinstance(target, (cst.Subscript, cst.Attribute)) and isinstance(
        target.value, cst.Name
    ):
        return set(), {target.value.value}
    return set(), set()


def _assignment(
    small: cst.BaseSmallStatement,
) -> tuple[set[str], set[str], tuple[cst.CSTNode, ...] | None]:
    """(defined, changed, what it reads) of an assignment; None for any other statement.

    What it reads: the value, and of a target changed in place (``x[i] = v``)
    the target itself; an augmented assignment reads its target too.
    """
    if isinstance(small, cst.Assign):
        defined: set[str] = set()
        changed: set[str] = set()
        for target in small.targets:
            d, c = _target_names(target.target)
            defined |= d
            changed |= c
        in_place = tuple(
            t.target
            for t in small.targets
            if isinstance(t.target, (cst.Subscript, cst.Attribute))
        )
        return defined, changed, (small.value, *in_place)
    if isinstance(small, cst.AugAssign):
        d, c = _target_names(small.target)
        return set(), d | c, (small.target, small.value)
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        d, c = _target_names(small.target)
        return d, c, (small.value,)
    return set(), set(), None


def _is_move(small: cst.BaseSmallStatement) -> bool:
    """``x = x.to(...)``: the same tensor on another device (or in another dtype)."""
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return False
    target, value = small.targets[0].target, small.value
    return (
        isinstance(target, cst.Name)
        and isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "to"
        and isinstance(value.func.value, cst.Name)
        and value.func.value.value == target.value
    )


def _statements(suite: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """A suite's statements; a one-line suite (``if x: y = 1``) holds none that nest."""
    return suite.body if isinstance(suite, cst.IndentedBlock) else ()


def _suites(statement: cst.BaseStatement) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statement lists nested directly in a compound statement."""
    for attr in ("body", "orelse", "finalbody"):
        child = getattr(statement, attr, None)
        if isinstance(child, cst.BaseSuite):
            yield _statements(child)
        elif isinstance(child, (cst.Else, cst.Finally)):
            yield _statements(child.body)
        elif isinstance(child, cst.If):  # elif
            yield (child,)
    for handler in getattr(statement, "handlers", ()):
        yield _statements(handler.body)


# One level of the way down to a statement: (a statement list, the index of the
# statement on the way, that statement).
_Level = tuple[Sequence[cst.BaseStatement], int, cst.BaseStatement]


def _path_to(
    statements: Sequence[cst.BaseStatement], target: cst.CSTNode
) -> list[_Level] | None:
    """The statement lists from ``statements`` down to ``target``: (list, index, statement there)."""
    for index, statement in enumerate(statements):
        if statement is target:
            return [(statements, index, statement)]
        if isinstance(statement, cst.SimpleStatementLine):
            continue
        for suite in _suites(statement):
            below = _path_to(suite, target)
            if below is not None:
                return [(statements, index, statement), *below]
    return None


class _Placements(cst.CSTVisitor):
    """``x = x.masked_scatter(mask, features)`` lines whose features name ``modality``."""

    def __init__(self, modality: str) -> None:
        self.modality = modality
        self.found: list[tuple[cst.SimpleStatementLine, str]] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for small in node.body:
            value = getattr(small, "value", None)
            if (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "masked_scatter"
                and len(value.args) == 2
                and isinstance(value.args[1].value, cst.Name)
                and self.modality in value.args[1].value.value
            ):
                self.found.append((node, value.args[1].value.value))


def inline_features(
    model_cls: type[Any], modality: str, item_inputs: Sequence[str]
) -> InlineFeatures:
    """The lines of ``model_cls.forward`` that compute the ``modality`` features it places.

    ``item_inputs`` are the names of the item's fields (what the generated
    class can pass); the slice may read nothing else from ``forward``'s
    parameters.
    """
    found = find_method(model_cls, "forward", models_only=True)
    if found is None:
        raise AnalysisError(
            f"{model_cls.__name__}.forward is not in transformers' sources"
        )
    parsed, forward = found
    placements = _Placements(modality)
    forward.body.visit(placements)
    if not placements.found:
        raise AnalysisError(
            f"{model_cls.__name__}.forward places no {modality} features at their "
            "tokens by masked_scatter"
        )
    if len(placements.found) > 1:
        raise InlineRefusal(
            f"{model_cls.__name__}.forward places {modality} features in "
            f"{len(placements.found)} places"
        )
    placement, result = placements.found[0]
    path = _path_to(_statements(forward.body), placement)
    assert path is not None, "the visitor found the placement in this body"
    for _, _, statement in path[:-1]:
        if isinstance(statement, (cst.For, cst.While)):
            raise InlineRefusal(
                f"{model_cls.__name__}.forward places {modality} features inside a loop"
            )
    return _sliced(model_cls, parsed, forward, path, result, tuple(item_inputs))


@dataclass
class _Slice:
    """The lines the placed features depend on, walked back from the placement."""

    picked: list[tuple[cst.SimpleStatementLine, cst.SimpleStatementLine]] = field(
        default_factory=list
    )  # (HF's line, the one statement of it kept)
    needed: set[str] = field(default_factory=set)  # read, set by no kept line
    dtype_device: set[str] = field(default_factory=set)  # read for those alone
    self_reads: list[str] = field(default_factory=list)


def _backward_slice(model_cls: type[Any], path: list[_Level], result: str) -> _Slice:
    """Every statement that runs before the placement and that ``result`` depends on."""
    found = _Slice(needed={result})
    for statements, index, _ in reversed(path):
        for statement in reversed(statements[:index]):
            if not isinstance(statement, cst.SimpleStatementLine):
                _refuse_branch_assignments(model_cls, statement, found.needed)
                continue
            for small in reversed(statement.body):
                defined, changed, value = _assignment(small)
                if value is None or not (defined | changed) & found.needed:
                    continue
                if _is_move(small):
                    continue
                kept = statement.with_changes(body=(small,), leading_lines=())
                found.picked.insert(0, (statement, kept))
                found.needed -= defined
                reads = _reads(*value)
                found.needed |= reads.values - {"self"}
                found.dtype_device |= reads.dtype_device
                found.self_reads[:0] = reads.self_attrs
    return found


def _sliced(
    model_cls: type[Any],
    parsed: ParsedClass,
    forward: cst.FunctionDef,
    path: list[_Level],
    result: str,
    item_inputs: tuple[str, ...],
) -> InlineFeatures:
    found = _backward_slice(model_cls, path, result)
    name = model_cls.__name__
    read_inputs = found.needed & {p.name.value for p in forward.params.params}
    stray = sorted(read_inputs - set(item_inputs))
    if stray:
        raise InlineRefusal(
            f"{name}.forward computes its features from {', '.join(stray)}, "
            "which an item does not carry"
        )
    params = tuple(input_ for input_ in item_inputs if input_ in read_inputs)
    if not params:
        raise InlineRefusal(
            f"{name}.forward computes its features from none of the item's inputs"
        )
    namespace = vars(inspect.getmodule(model_cls))
    known = set(namespace) | set(vars(builtins))
    free = found.needed - set(params) - {"self"}
    unknown = sorted(free - known)
    if unknown:
        raise InlineRefusal(
            f"{name}.forward computes its features from {', '.join(unknown)}, "
            "which the lines before it do not set"
        )
    defined = {n for _, line in found.picked for n in _assignment(line.body[0])[0]}
    # The text embeddings (or any tensor the slice does not compute) read for
    # dtype and device alone: the item's first input has both.
    stand_ins = found.dtype_device - defined - set(params) - known
    # A line is cited where it does not follow the one kept before it in HF's code.
    previous = {
        id(statements[i]): statements[i - 1]
        for statements, _, _ in path
        for i in range(1, len(statements))
    }
    lines = tuple(
        (
            _code(_with_stand_in(line, stand_ins, params[0])),
            parsed.source(statement),
            index == 0 or previous.get(id(statement)) is not found.picked[index - 1][0],
        )
        for index, (statement, line) in enumerate(found.picked)
    )
    return InlineFeatures(
        params=params,
        lines=lines,
        result=result,
        self_reads=tuple(dict.fromkeys(found.self_reads)),
        free_names=tuple(sorted(free & set(namespace))),
        source=parsed.source(forward),
    )


def _refuse_branch_assignments(
    model_cls: type[Any], statement: cst.BaseStatement, needed: set[str]
) -> None:
    """A compound statement before the placement may not set what the features need (moves aside)."""

    class _Assigned(cst.CSTVisitor):
        def __init__(self) -> None:
            self.names: set[str] = set()

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            self._assigned(node.body)

        def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
            self._assigned(node.body)  # if x: y = 1

        def _assigned(self, body: Sequence[cst.BaseSmallStatement]) -> None:
            for small in body:
                defined, changed, value = _assignment(small)
                if value is not None and not _is_move(small):
                    self.names |= defined | changed

    assigned = _Assigned()
    statement.visit(assigned)
    clash = sorted(assigned.names & needed)
    if clash:
        raise InlineRefusal(
            f"{model_cls.__name__}.forward sets {', '.join(clash)} under a branch "
            "before it places the features"
        )


class _StandIn(cst.CSTTransformer):
    def __init__(self, names: set[str], stand_in: str) -> None:
        self.names = names
        self.stand_in = stand_in

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.Attribute:
        value = original_node.value
        if (
            isinstance(value, cst.Name)
            and value.value in self.names
            and original_node.attr.value in DTYPE_DEVICE
        ):
            return updated_node.with_changes(value=cst.Name(self.stand_in))
        return updated_node


def _with_stand_in(
    line: cst.SimpleStatementLine, names: set[str], stand_in: str
) -> cst.SimpleStatementLine:
    if not names:
        return line
    return cst.ensure_type(
        line.visit(_StandIn(names, stand_in)), cst.SimpleStatementLine
    )


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


# Qwen2-Audio's shape: the features computed inside forward, a device move before,
# a mask of the text embeddings' dtype, and a legacy branch beside the placement.
_INLINE = """
import torch


class AudioModel:
    def forward(self, input_ids=None, input_features=None, feature_mask=None, inputs_embeds=None):
        if input_features is not None:
            input_features = input_features.to(self.device)
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
            if input_features is not None:
                lengths = feature_mask.sum(-1)
                mask = torch.ones(lengths.shape, dtype=inputs_embeds.dtype)
                mask[lengths > 9] = 0
                outputs = self.audio_tower(input_features, mask)
                audio_features = self.projector(outputs)
                legacy = input_ids.shape[1] == 1
                if legacy:
                    inputs_embeds = self.merge(audio_features, inputs_embeds)
                else:
                    n_tokens = (input_ids == 7).sum()
                    audio_features = audio_features[: lengths.max()]
                    special = (input_ids == 7).unsqueeze(-1)
                    inputs_embeds = inputs_embeds.masked_scatter(special, audio_features)
        return self.language_model(inputs_embeds=inputs_embeds)
"""


def _facts(found: InlineFeatures) -> tuple:
    """The parts of an :class:`InlineFeatures` a snippet fixes."""
    return (
        found.params,
        found.result,
        tuple((code, cited) for code, _, cited in found.lines),
        found.self_reads,
        found.free_names,
    )


def _refused(name: str, old: str, new: str, match: str) -> object:
    """An example refused with ``match``: the snippet with ``old`` written as ``new``."""
    assert old in _INLINE
    return invalid(
        name,
        _INLINE.replace(old, new),
        lambda snippet: inline_features(
            snippet.AudioModel, "audio", ("input_features", "feature_mask")
        ),
        refusal=AnalysisError,
        match=match,
    )


EXAMPLES = [
    valid(
        "features_computed_inside_forward_become_their_own_method",
        _INLINE,
        lambda snippet: _facts(
            inline_features(
                snippet.AudioModel, "audio", ("input_features", "feature_mask")
            )
        ),
        (
            ("input_features", "feature_mask"),
            "audio_features",
            (
                ("lengths = feature_mask.sum(-1)", True),
                # The text embeddings are read for their dtype alone: the input stands in.
                ("mask = torch.ones(lengths.shape, dtype=input_features.dtype)", False),
                # Changed in place: kept, and what it indexes by is read.
                ("mask[lengths > 9] = 0", False),
                ("outputs = self.audio_tower(input_features, mask)", False),
                ("audio_features = self.projector(outputs)", False),
                ("audio_features = audio_features[: lengths.max()]", True),
            ),
            ("audio_tower", "projector"),
            ("torch",),
        ),
    ),
    _refused(
        "features_placed_inside_a_loop",
        "            if input_features is not None:\n                lengths",
        "            for _ in range(1):\n                lengths",
        "inside a loop",
    ),
    _refused(
        "features_that_read_the_prompt",
        "audio_features[: lengths.max()]",
        "audio_features[: input_ids.shape[1]]",
        "from input_ids, which an item does not carry",
    ),
    _refused(
        "an_input_set_under_a_branch_before_the_features",
        "input_features = input_features.to(self.device)",
        "input_features = input_features * 2",
        "sets input_features under a branch",
    ),
    _refused(
        "no_features_placed_at_their_tokens",
        "inputs_embeds.masked_scatter(special, audio_features)",
        "inputs_embeds",
        "places no audio features at their tokens",
    ),
]
