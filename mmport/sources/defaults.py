"""Derive processor settings a checkpoint would carry, from the model config.

Some processors default a value they need to ``None`` (LLaVA's ``patch_size``
and ``vision_feature_select_strategy``) or read an attribute the image
processor only has when a checkpoint sets it (PaliGemma's
``image_processor.image_seq_length``). Real snapshots carry these in their
processor config; a synthetic snapshot takes them from the model config by
one rule: the same name, looked up in the top-level config and then in each
sub-config, or else a name in the same :data:`CONCEPT_ALIASES` row.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst

from mmport.hf.code import is_hf_code
from mmport.hf.syntax import string_value

__all__ = [
    "CONCEPT_ALIASES",
    "DERIVED_CONCEPTS",
    "image_processor_reads",
    "looked_up_ids",
    "lookup_config",
    "none_default_params",
    "token_literals",
    "tokenizer_self_added",
    "tokenizer_token_reads",
    "vocabulary_lookups",
]

# Names that checkpoints use for one concept. Policy, not per-model answers:
# a lookup of any name in a row also tries the other names of that row.
CONCEPT_ALIASES: tuple[tuple[str, ...], ...] = (
    ("image_seq_length", "num_image_tokens", "mm_tokens_per_image", "image_seq_len"),
)

# Tokens every synthetic tokenizer has anyway.
BASE_TOKEN_NAMES = frozenset({"bos_token", "eos_token", "pad_token", "unk_token"})

# Constructor parameters that are sub-processors or plumbing, never settings.
_NOT_SETTINGS = {
    "image_processor",
    "tokenizer",
    "video_processor",
    "feature_extractor",
    "chat_template",
}


def _config_layers(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The top-level config, then its sub-config dicts, level by level (breadth first).

    Wrappers nest a whole model config (ColPali's ``vlm_config`` is a
    PaliGemma config with its own ``vision_config``); a value on a shallower
    layer wins.
    """
    level = [config]
    while level:
        yield from level
        level = [
            v
            for layer in level
            for v in layer.values()
            if isinstance(v, Mapping) and "model_type" in v
        ]


def _patches_per_image(config: Mapping[str, Any]) -> int | None:
    """``(image_size // patch_size) ** 2`` of the first layer giving both as ints."""
    for layer in _config_layers(config):
        size, patch = layer.get("image_size"), layer.get("patch_size")
        if isinstance(size, int) and isinstance(patch, int) and patch > 0:
            return (size // patch) ** 2
    return None


# Concepts a config may leave implicit, and how they follow from what it holds:
# one image's tokens, when no name of that row is present, are the vision
# tower's patches (LLaVA-OneVision's ``num_image_tokens`` = 729 for 384 px, 14 px patches).
DERIVED_CONCEPTS = {CONCEPT_ALIASES[0]: _patches_per_image}


def lookup_config(config: Mapping[str, Any], name: str) -> Any | None:
    """Find ``name`` (or an alias of it) in a config dict; ``None`` if absent.

    A name of a :data:`DERIVED_CONCEPTS` row that no layer holds is derived.
    """
    names = next((row for row in CONCEPT_ALIASES if name in row), (name,))
    for candidate in (name, *[n for n in names if n != name]):
        for layer in _config_layers(config):
            if layer.get(candidate) is not None:
                return layer[candidate]
    derive = DERIVED_CONCEPTS.get(names)
    return derive(config) if derive is not None else None


def none_default_params(processor_cls: type[Any]) -> list[str]:
    """Constructor parameters of ``processor_cls`` whose default is ``None``."""
    params = inspect.signature(processor_cls.__init__).parameters.values()
    return [
        p.name
        for p in params
        if p.default is None
        and p.name not in _NOT_SETTINGS
        and p.kind is p.POSITIONAL_OR_KEYWORD
    ]


class _AddedTokens(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        if (
            isinstance(node.func, cst.Name)
            and node.func.value == "AddedToken"
            and node.args
        ):
            self.found.append(node.args[0].value)


def _added_token_args(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The text arguments of ``AddedToken(...)`` calls under ``node``, in source order."""
    visitor = _AddedTokens()
    node.visit(visitor)
    return visitor.found


def _text_of(expr: cst.BaseExpression, constants: Mapping[str, Any]) -> str | None:
    """A string literal's value, or a module constant's (``IMAGE_TOKEN``).

    ``AddedToken("<image>", ...).content`` (Idefics3) is the literal too.
    """
    if (
        isinstance(expr, cst.Attribute)
        and expr.attr.value == "content"
        and isinstance(expr.value, cst.Call)
    ):
        call = expr.value
        if (
            isinstance(call.func, cst.Name)
            and call.func.value == "AddedToken"
            and call.args
        ):
            return _text_of(call.args[0].value, constants)
    if isinstance(expr, cst.SimpleString):
        return string_value(expr)
    if isinstance(expr, cst.Name) and isinstance(constants.get(expr.value), str):
        return constants[expr.value]
    return None


class _AttributeReads(cst.CSTVisitor):
    """Collect ``<owner>.<name>`` reads (hasattr/getattr guards too) in ``__init__``s.

    A guard with a literal fallback gives that name's default text::

        self.image_token = "<|image_pad|>" if not hasattr(tokenizer, "image_token") else tokenizer.image_token
    """

    def __init__(self, owner: str, constants: Mapping[str, Any] | None = None) -> None:
        self.owner = owner
        self.constants = constants or {}
        self.names: list[str] = []
        self.defaults: dict[str, str] = {}
        self.self_added: dict[str, str] = {}

    def visit_If(self, node: cst.If) -> None:
        # `if not hasattr(tokenizer, "image_token"): ... tokenizer.add_tokens([AddedToken("<image>")])`:
        # the processor makes the token itself when the tokenizer does not name it.
        test = node.test
        if not (
            isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        ):
            return
        name = self._guarded_name(test.expression)
        body = cst.Module(body=[]).code_for_node(node.body)
        adds = (
            f"{self.owner}.add_tokens(" in body
            or f"{self.owner}.add_special_tokens(" in body
        )
        texts = [_text_of(arg, self.constants) for arg in _added_token_args(node.body)]
        if name and adds and texts and texts[0] is not None:
            self.self_added.setdefault(name, texts[0])

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__init__"

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == self.owner:
            self.names.append(node.attr.value)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        name = self._guarded_name(
            node.test.expression
            if isinstance(node.test, cst.UnaryOperation)
            else node.test
        )
        for branch in (node.body, node.orelse):
            text = string_value(branch)
            if name and text is not None:
                self.defaults.setdefault(name, text)

    def visit_Call(self, node: cst.Call) -> None:
        name = self._guarded_name(node)
        if name is None:
            return
        self.names.append(name)
        text = string_value(node.args[2].value) if len(node.args) == 3 else None
        if text is not None:
            self.defaults.setdefault(name, text)

    def _guarded_name(self, node: cst.BaseExpression) -> str | None:
        """``hasattr(owner, "name")`` / ``getattr(owner, "name", ...)`` → ``name``."""
        if not (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Name)
            and len(node.args) >= 2
        ):
            return None
        target, attr = node.args[0].value, node.args[1].value
        if (
            node.func.value in {"hasattr", "getattr"}
            and isinstance(target, cst.Name)
            and target.value == self.owner
        ):
            return string_value(attr)
        return None


def _constructor_reads(processor_cls: type[Any], owner: str) -> _AttributeReads:
    """What the constructors of ``processor_cls`` (and model bases) read off ``owner``."""
    visitor = _AttributeReads(owner, vars(inspect.getmodule(processor_cls)))
    for klass in processor_cls.__mro__:
        if is_hf_code(klass.__module__, models_only=True) and "__init__" in vars(klass):
            cst.parse_module(textwrap.dedent(inspect.getsource(klass))).visit(visitor)
    return visitor


def image_processor_reads(processor_cls: type[Any]) -> list[str]:
    """Attributes the processor's constructor reads off its image processor."""
    return list(
        dict.fromkeys(_constructor_reads(processor_cls, "image_processor").names)
    )


class _SelfTokenizerReads(cst.CSTVisitor):
    """Collect ``self.tokenizer.<name>`` reads anywhere in a class."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        inner = node.value
        if (
            isinstance(inner, cst.Attribute)
            and inner.attr.value == "tokenizer"
            and isinstance(inner.value, cst.Name)
            and inner.value.value == "self"
        ):
            self.names.append(node.attr.value)


def _method_reads(processor_cls: type[Any]) -> list[str]:
    """What the methods of ``processor_cls`` (and model bases) read off ``self.tokenizer``.

    Chameleon's ``__call__`` appends ``self.tokenizer.sep_token`` to every
    prompt: a tokenizer without that token would make it append ``"None"``.
    """
    visitor = _SelfTokenizerReads()
    for klass in processor_cls.__mro__:
        if is_hf_code(klass.__module__, models_only=True):
            cst.parse_module(textwrap.dedent(inspect.getsource(klass))).visit(visitor)
    return visitor.names


def tokenizer_token_reads(processor_cls: type[Any]) -> dict[str, str | None]:
    """Named special tokens (``boi_token``) the processor reads off its tokenizer.

    Maps each name to the literal text the constructor falls back to, if any.
    """
    reads = _constructor_reads(processor_cls, "tokenizer")
    tokens: dict[str, str | None] = {}
    for name in [*reads.names, *_method_reads(processor_cls)]:
        if name in reads.self_added:
            continue
        stem = name.removesuffix("_id")
        # add_bos_token and the like are switches, not tokens.
        if (
            stem.endswith("_token")
            and not stem.startswith("add_")
            and stem not in BASE_TOKEN_NAMES
        ):
            tokens.setdefault(stem, reads.defaults.get(stem))
    return tokens


def tokenizer_self_added(processor_cls: type[Any]) -> dict[str, str]:
    """Tokens the constructor adds to a tokenizer that does not name them.

    BLIP-2 does ``if not hasattr(tokenizer, "image_token"): tokenizer.add_tokens(...)``
    and, in ``__call__``, reads ``self.image_token.content``: its checkpoints
    hold ``<image>`` in the vocabulary without naming it, and only that path works.
    Maps each name to the token text the constructor adds.
    """
    return _constructor_reads(processor_cls, "tokenizer").self_added


class _TokenLiterals(cst.CSTVisitor):
    """``self.<name>_token = "<text>"`` in a constructor (or ``= self.NAME_TOKEN``)."""

    def __init__(self, constants: Mapping[str, Any]) -> None:
        self.constants = constants
        self.found: dict[str, str] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node.name.value == "__init__"

    def visit_Assign(self, node: cst.Assign) -> None:
        target, value = node.targets[0].target, node.value
        if not (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        ):
            return
        if (
            isinstance(value, cst.Attribute)
            and isinstance(value.value, cst.Name)
            and value.value.value == "self"
        ):
            value = cst.Name(
                value.attr.value
            )  # a class attribute: resolved like a constant
        text = _text_of(value, self.constants)
        if target.attr.value.endswith("_token") and text:
            self.found.setdefault(target.attr.value, text)


def token_literals(processor_cls: type[Any]) -> dict[str, str]:
    """Token texts the constructor sets outright, by attribute name.

    Qwen-style processors write ``self.image_token = "<|IMAGE_PAD|>"`` and
    look its id up in the tokenizer: a checkpoint's vocabulary holds that
    text as one special token, so a synthetic one must too.
    """
    found: dict[str, str] = {}
    for klass in processor_cls.__mro__:
        if is_hf_code(klass.__module__, models_only=True) and "__init__" in vars(klass):
            constants = {**vars(inspect.getmodule(klass)), **vars(klass)}
            visitor = _TokenLiterals(constants)
            cst.parse_module(textwrap.dedent(inspect.getsource(klass))).visit(visitor)
            for name, text in visitor.found.items():
                found.setdefault(name, text)
    return found


class _VocabularyLookups(cst.CSTVisitor):
    """Texts passed to ``<tokenizer>.convert_tokens_to_ids(...)`` anywhere in a class.

    ``convert_tokens_to_ids(self.VISION_START_TOKEN)`` (MiniMax-M3-VL) resolves
    the class constant; a list argument gives each of its texts.
    """

    def __init__(self, constants: Mapping[str, Any]) -> None:
        self.constants = constants
        self.found: list[str] = []
        # ``self.<attribute> = ...convert_tokens_to_ids(<one text>)``: the attribute each id is kept in.
        self.kept_in: dict[str, str] = {}
        self._target: str | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        is_self = (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        )
        self._target = (
            target.attr.value if is_self and isinstance(target, cst.Attribute) else None
        )

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._target = None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value == "convert_tokens_to_ids"
            and node.args
        ):
            return
        arg = node.args[0].value
        items = (
            [e.value for e in arg.elements]
            if isinstance(arg, (cst.List, cst.Tuple))
            else [arg]
        )
        for item in items:
            named = (
                isinstance(item, cst.Attribute)
                and isinstance(item.value, cst.Name)
                and item.value.value == "self"
            )
            text = _text_of(
                cst.Name(item.attr.value)
                if named and isinstance(item, cst.Attribute)
                else item,
                self.constants,
            )
            if text is not None:
                self.found.append(text)
                if self._target is not None and len(items) == 1:
                    self.kept_in.setdefault(self._target, text)


def _lookup_visitors(processor_cls: type[Any]) -> Iterator[_VocabularyLookups]:
    """One visitor per transformers class of the processor, having read that class's source."""
    for klass in processor_cls.__mro__:
        if is_hf_code(klass.__module__, models_only=True) and klass is not object:
            visitor = _VocabularyLookups(
                {**vars(inspect.getmodule(klass)), **vars(klass)}
            )
            cst.parse_module(textwrap.dedent(inspect.getsource(klass))).visit(visitor)
            yield visitor


def looked_up_ids(processor_cls: type[Any]) -> dict[str, str]:
    """Attribute → text for ids the processor keeps from a lookup by text (``video_start_id`` → ``<|begin_of_video|>``).

    A config names the same id (``video_start_token_id``); on a checkpoint the
    text sits at that id, so a synthetic vocabulary pins it there.
    """
    kept: dict[str, str] = {}
    for visitor in _lookup_visitors(processor_cls):
        for attribute, text in visitor.kept_in.items():
            kept.setdefault(attribute, text)
    return kept


def vocabulary_lookups(processor_cls: type[Any]) -> list[str]:
    """Token texts the processor looks up in its tokenizer's vocabulary by text.

    GLM-4V's constructor reads ``convert_tokens_to_ids("<|begin_of_video|>")``:
    on a checkpoint that text is one token (vLLM's own port indexes the
    vocabulary with it), so a synthetic vocabulary must hold it too. Looked up
    in every method of the processor's transformers classes, in source order.
    """
    return list(
        dict.fromkeys(
            text
            for visitor in _lookup_visitors(processor_cls)
            for text in visitor.found
        )
    )
