"""A model that writes its images into the prompt itself, read from its ``chat()`` without running it.

Some remote-code checkpoints ship a model and a tokenizer but no processor
class (InternVL2's chat checkpoints: ``auto_map`` names ``AutoConfig`` and
``AutoModel`` only). Their model card tiles each image, and the model's own
``chat()`` expands each ``<image>`` of the prompt before tokenizing it::

    def chat(self, tokenizer, pixel_values, question, generation_config, ...,
             num_patches_list=None, IMG_START_TOKEN='<img>', IMG_END_TOKEN='</img>',
             IMG_CONTEXT_TOKEN='<IMG_CONTEXT>', verbose=False):
        ...
        for num_patches in num_patches_list:
            image_tokens = IMG_START_TOKEN + IMG_CONTEXT_TOKEN * self.num_image_token * num_patches + IMG_END_TOKEN
            query = query.replace('<image>', image_tokens, 1)

is read as: the placeholder ``<image>``; per item, ``<img>``, then
``<IMG_CONTEXT>`` × ``self.num_image_token`` × ``num_patches`` (the loop
variable: one value per item, its tile count), then ``</img>``. Each name a
segment multiplies by is followed to its value where the files settle it:
``self.num_image_token`` to the ``__init__`` assignment
``int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))``,
evaluated on ``config.json`` (256 for 448 px, 14 px patches, ratio 0.5).
The tiling itself is what the config says the model card's
``dynamic_preprocess`` runs with (:class:`ChatTiling`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, snippet_line, valid
from mmport.analyzers.staticread import StaticModule, code_of, walk
from mmport.sources.processorless import names_no_processor
from mmport.sources.remote import auto_references
from mmport.spec import Source

__all__ = [
    "TILING_KEYS",
    "ChatPromptRule",
    "ChatTiling",
    "Factor",
    "Segment",
    "read_chat_prompt",
    "read_chat_tiling",
]

# The auto classes that name the model, whose methods may build the prompt.
_MODEL_AUTOS = ("AutoModel", "AutoModelForCausalLM", "AutoModelForImageTextToText")
# The prompt-building methods read first (InternVL's chat() before batch_chat()).
_PREFERRED = ("chat", "batch_chat")
# config.json keys that settle the tiling the model card's dynamic_preprocess runs with.
TILING_KEYS = (
    "force_image_size",
    "dynamic_image_size",
    "min_dynamic_patch",
    "max_dynamic_patch",
    "use_thumbnail",
)


@dataclass(frozen=True)
class Segment:
    """One part of an item's text: ``text`` written once, or times the product of ``times`` (code of each factor)."""

    text: str
    times: tuple[str, ...] = ()


@dataclass(frozen=True)
class Factor:
    """A name an item's text is multiplied by, and the ``__init__`` code that sets it."""

    code: str  # ``self.num_image_token``
    rule: str  # the expression assigned to it
    value: int | None  # its value on config.json; None where the files do not settle it
    source: Source | None
    statements: tuple[str, ...] = ()  # the local assignments it reads, then its own


@dataclass(frozen=True)
class ChatPromptRule:
    """How the model's own prompt code writes one item in place of its placeholder."""

    model_class: str
    method: str
    placeholder: str
    segments: tuple[Segment, ...]
    # The loop variable that takes one value per item (InternVL's tile count ``num_patches``).
    item_factor: str
    # The other factors (``self.num_image_token``), each with what sets it.
    factors: tuple[Factor, ...]
    source: Source  # the line writing the item's text
    replace_source: Source  # the line replacing the placeholder with it


@dataclass(frozen=True)
class ChatTiling:
    """The tiling settings ``config.json`` holds (``TILING_KEYS``), and where the model card's tiling code is."""

    settings: tuple[tuple[str, Any, Source], ...]
    code: (
        Source | None
    )  # ``def dynamic_preprocess`` in the model card (README.md), if it carries one

    def get(self, key: str, default: Any = None) -> Any:
        """The value config.json sets for ``key``, else ``default``."""
        return next((v for k, v, _ in self.settings if k == key), default)


def read_chat_prompt(directory: Path) -> ChatPromptRule | None:
    """The prompt rule of a snapshot whose code has a model but no processor class, or None.

    None also when the model defines no method writing items into a prompt
    by string replacement: such a checkpoint is not of this kind.
    """
    if not names_no_processor(directory):
        return None
    for auto, module_file, class_name in auto_references(directory):
        if auto not in _MODEL_AUTOS:
            continue
        parsed = _read_module(directory, module_file)
        classdef = parsed.classes.get(class_name) if parsed else None
        if parsed is not None and classdef is not None:
            rule = _rule_in_class(parsed, classdef, _config_json(directory))
            if rule is not None:
                return rule
    return None


def _read_module(directory: Path, name: str) -> StaticModule | None:
    """The parsed module, or None when it is absent or does not parse (the static report names those)."""
    try:
        return StaticModule(directory, name)
    except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
        return None


def read_chat_tiling(directory: Path) -> ChatTiling:
    """The tiling settings of ``config.json`` with their lines, and the model card's ``dynamic_preprocess``."""
    text = (directory / "config.json").read_text()
    data = json.loads(text)
    lines = text.splitlines()
    settings = tuple(
        (key, data[key], _json_source("config.json", lines, key))
        for key in TILING_KEYS
        if key in data
    )
    return ChatTiling(settings, _card_code(directory / "README.md"))


def _rule_in_class(
    parsed: StaticModule, classdef: cst.ClassDef, config: dict[str, Any]
) -> ChatPromptRule | None:
    """The first of the class's methods (``chat`` first) that replaces a placeholder per item."""
    methods = {
        s.name.value: s for s in classdef.body.body if isinstance(s, cst.FunctionDef)
    }
    order = [m for m in _PREFERRED if m in methods] + sorted(
        m for m in methods if m not in _PREFERRED
    )
    for name in order:
        found = _replacement_loop(methods[name])
        if found is None:
            continue
        loop, assign, replace, placeholder = found
        segments = _segments(assign.value, _string_defaults(methods[name]))
        if segments is None:
            continue
        item_factor = code_of(loop.target)
        factors = tuple(
            _factor(parsed, methods.get("__init__"), code, config)
            for code in dict.fromkeys(f for s in segments for f in s.times)
            if code != item_factor
        )
        return ChatPromptRule(
            classdef.name.value,
            name,
            placeholder,
            segments,
            item_factor,
            factors,
            parsed.source(assign),
            parsed.source(replace),
        )
    return None


def _replacement_loop(
    method: cst.FunctionDef,
) -> tuple[cst.For, cst.Assign, cst.Call, str] | None:
    """``for x in items: t = <text>; q = q.replace('<placeholder>', t, 1)``: the loop, the assignment, the call."""
    for loop in walk(method.body):
        if not isinstance(loop, cst.For):
            continue
        assigned: dict[str, cst.Assign] = {}
        for node in walk(loop.body):
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                target = node.targets[0].target
                if isinstance(target, cst.Name):
                    assigned[target.value] = node
            call = _placeholder_replace(node)
            if call is not None and call[1] in assigned:
                return loop, assigned[call[1]], call[0], call[2]
    return None


def _placeholder_replace(node: cst.CSTNode) -> tuple[cst.Call, str, str] | None:
    """``<q>.replace('<literal>', <name>, ...)``: the call, the name and the literal."""
    if not (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "replace"
        and len(node.args) >= 2
        and isinstance(node.args[0].value, cst.SimpleString)
        and isinstance(node.args[1].value, cst.Name)
    ):
        return None
    literal = node.args[0].value.evaluated_value
    if not isinstance(literal, str):
        return None
    return node, node.args[1].value.value, literal


def _string_defaults(method: cst.FunctionDef) -> dict[str, str]:
    """The method's parameters with a string default (``IMG_START_TOKEN='<img>'``)."""
    defaults = {}
    for param in (*method.params.params, *method.params.kwonly_params):
        if isinstance(param.default, cst.SimpleString):
            value = param.default.evaluated_value
            if isinstance(value, str):
                defaults[param.name.value] = value
    return defaults


def _segments(
    node: cst.BaseExpression, strings: dict[str, str]
) -> tuple[Segment, ...] | None:
    """``A + B * n * m + C`` as segments, each term's one string resolved; None when a term has no string."""
    segments = []
    for term in _operands(node, cst.Add):
        texts, times = [], []
        for factor in _operands(term, cst.Multiply):
            text = _string_of(factor, strings)
            if text is None:
                times.append(code_of(factor))
            else:
                texts.append(text)
        if len(texts) != 1:
            return None
        segments.append(Segment(texts[0], tuple(times)))
    return tuple(segments)


def _operands(node: cst.BaseExpression, operator: type) -> Iterator[cst.BaseExpression]:
    """The operands of a left-nested chain of one binary operator (``a + b + c``)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, operator):
        yield from _operands(node.left, operator)
        yield from _operands(node.right, operator)
    else:
        yield node


def _string_of(node: cst.BaseExpression, strings: dict[str, str]) -> str | None:
    """The text a string literal, or a parameter with a string default, stands for."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.Name):
        return strings.get(node.value)
    return None


def _factor(
    parsed: StaticModule,
    init: cst.FunctionDef | None,
    code: str,
    config: dict[str, Any],
) -> Factor:
    """A ``self.<attr>`` factor: the ``__init__`` statements that set it, and its value on ``config``."""
    attr = code.removeprefix("self.")
    if init is None or attr == code:
        return Factor(code, "", None, None)
    scope: dict[str, cst.Assign] = {}
    for node in walk(init.body):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0].target
        if isinstance(target, cst.Name):
            scope[target.value] = node
        elif code_of(target) == code:
            values = {name: assign.value for name, assign in scope.items()}
            value = _evaluate(node.value, values, config)
            number = int(value) if isinstance(value, (int, float)) else None
            needed = _needed(node.value, scope)
            return Factor(
                code,
                code_of(node.value),
                number,
                parsed.source(node),
                (*(code_of(a) for a in needed), code_of(node)),
            )
    return Factor(code, "", None, None)


def _needed(node: cst.CSTNode, scope: dict[str, cst.Assign]) -> list[cst.Assign]:
    """The local assignments ``node`` reads, and those they read, in source order."""
    found: dict[str, cst.Assign] = {}
    pending = [n.value for n in walk(node) if isinstance(n, cst.Name)]
    while pending:
        name = pending.pop()
        if name in scope and name not in found:
            found[name] = scope[name]
            pending += [
                n.value for n in walk(scope[name].value) if isinstance(n, cst.Name)
            ]
    order = list(scope.values())
    return sorted(found.values(), key=order.index)


def _evaluate(
    node: cst.BaseExpression, scope: dict[str, cst.BaseExpression], config: Any
) -> Any:
    """The value of an ``__init__`` expression over ``config.json`` (``config.x.y`` read as keys); None if unsettled.

    Local names are followed to their assignments; ``a or b``, ``int(x)`` and
    arithmetic are evaluated; anything else is not settled statically.
    """
    evaluate = lambda n: _evaluate(n, scope, config)  # noqa: E731
    if isinstance(node, (cst.Integer, cst.Float)):
        return node.evaluated_value
    if isinstance(node, cst.Name):
        if node.value == "config":
            return config
        return evaluate(scope[node.value]) if node.value in scope else None
    if isinstance(node, cst.Attribute):
        owner = evaluate(node.value)
        return owner.get(node.attr.value) if isinstance(owner, dict) else None
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
        return evaluate(node.left) or evaluate(node.right)
    if (
        isinstance(node, cst.Call)
        and code_of(node.func) == "int"
        and len(node.args) == 1
    ):
        value = evaluate(node.args[0].value)
        return int(value) if isinstance(value, (int, float)) else None
    if isinstance(node, cst.BinaryOperation):
        return _arithmetic(node.operator, evaluate(node.left), evaluate(node.right))
    return None


# The arithmetic a count rule uses, by libcst operator.
_OPERATORS = {
    cst.Add: lambda a, b: a + b,
    cst.Subtract: lambda a, b: a - b,
    cst.Multiply: lambda a, b: a * b,
    cst.Divide: lambda a, b: a / b,
    cst.FloorDivide: lambda a, b: a // b,
    cst.Power: lambda a, b: a**b,
}


def _arithmetic(operator: cst.BaseBinaryOp, left: Any, right: Any) -> Any:
    """``left <op> right`` for numbers; None when either side is unsettled or the operator is not arithmetic."""
    apply = _OPERATORS.get(type(operator))
    numbers = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)
    )
    return apply(left, right) if apply is not None and numbers else None


def _config_json(directory: Path) -> dict[str, Any]:
    """config.json as a dict (an unreadable one settles nothing)."""
    try:
        data = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _json_source(name: str, lines: list[str], key: str) -> Source:
    """The line of a top-level ``key`` in a JSON file."""
    line = next(
        (i for i, text in enumerate(lines, 1) if text.lstrip().startswith(f'"{key}"')),
        0,
    )
    return Source(name, line, lines[line - 1].strip() if line else "")


def _card_code(readme: Path) -> Source | None:
    """``def dynamic_preprocess`` in the model card, where it carries the tiling code."""
    try:
        lines = readme.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return next(
        (
            Source(readme.name, i, text.strip())
            for i, text in enumerate(lines, 1)
            if text.startswith("def dynamic_preprocess(")
        ),
        None,
    )


# InternVL2's remote model, cut to what the rule reads: __init__ sets num_image_token, chat() expands <image>.
_INTERNVL_CHAT = """
class InternVLChatConfig:
    model_type = "internvl_chat"


class InternVLChatModel:
    def __init__(self, config, vision_model=None, language_model=None, use_flash_attn=True):
        image_size = config.force_image_size or config.vision_config.image_size
        patch_size = config.vision_config.patch_size
        self.patch_size = patch_size
        self.num_image_token = int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))

    def chat(self, tokenizer, pixel_values, question, generation_config, history=None,
             num_patches_list=None, IMG_START_TOKEN='<img>', IMG_END_TOKEN='</img>',
             IMG_CONTEXT_TOKEN='<IMG_CONTEXT>', verbose=False):
        if num_patches_list is None:
            num_patches_list = [pixel_values.shape[0]] if pixel_values is not None else []
        query = '<image>\\n' + question if '<image>' not in question else question
        for num_patches in num_patches_list:
            image_tokens = IMG_START_TOKEN + IMG_CONTEXT_TOKEN * self.num_image_token * num_patches + IMG_END_TOKEN
            query = query.replace('<image>', image_tokens, 1)
        return query
"""

# InternVL2-1B's config.json, cut to what the rule reads (auto_map names no processor).
_INTERNVL_CONFIG = """{
  "architectures": ["InternVLChatModel"],
  "auto_map": {
    "AutoConfig": "example.InternVLChatConfig",
    "AutoModel": "example.InternVLChatModel"
  },
  "downsample_ratio": 0.5,
  "dynamic_image_size": true,
  "force_image_size": 448,
  "max_dynamic_patch": 12,
  "min_dynamic_patch": 1,
  "model_type": "internvl_chat",
  "use_thumbnail": true,
  "vision_config": {"image_size": 448, "patch_size": 14}
}
"""


def _snapshot_of(snippet: ModuleType, config: str = _INTERNVL_CONFIG) -> Path:
    """The snippet's folder made a snapshot: its file, and ``config`` as config.json."""
    directory = Path(str(snippet.__file__)).parent
    (directory / "config.json").write_text(config)
    return directory


def _config_line(line: int) -> Source:
    """Line ``line`` of ``_INTERNVL_CONFIG``, as config.json."""
    return Source("config.json", line, _INTERNVL_CONFIG.splitlines()[line - 1].strip())


EXAMPLES = [
    valid(
        "internvl2_chat_expands_image_into_context_tokens_per_tile",
        _INTERNVL_CHAT,
        lambda snippet: read_chat_prompt(_snapshot_of(snippet)),
        ChatPromptRule(
            model_class="InternVLChatModel",
            method="chat",
            placeholder="<image>",
            segments=(
                Segment("<img>"),
                Segment("<IMG_CONTEXT>", ("self.num_image_token", "num_patches")),
                Segment("</img>"),
            ),
            item_factor="num_patches",
            factors=(
                Factor(
                    "self.num_image_token",
                    "int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))",
                    256,  # (448 // 14) ** 2 * 0.5 ** 2
                    snippet_line(_INTERNVL_CHAT, "self.num_image_token = int("),
                    (
                        "image_size = config.force_image_size or config.vision_config.image_size",
                        "patch_size = config.vision_config.patch_size",
                        "self.num_image_token = int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))",
                    ),
                ),
            ),
            source=snippet_line(_INTERNVL_CHAT, "image_tokens = IMG_START_TOKEN"),
            replace_source=snippet_line(_INTERNVL_CHAT, "query.replace('<image>'"),
        ),
    ),
    valid(
        "internvl2_config_json_settles_the_tiling",
        "",
        lambda snippet: read_chat_tiling(_snapshot_of(snippet)).settings,
        (
            ("force_image_size", 448, _config_line(9)),
            ("dynamic_image_size", True, _config_line(8)),
            ("min_dynamic_patch", 1, _config_line(11)),
            ("max_dynamic_patch", 12, _config_line(10)),
            ("use_thumbnail", True, _config_line(13)),
        ),
    ),
    invalid(
        "chat_through_a_chat_template_replaces_no_placeholder",
        """
        class InternVLChatModel:
            def chat(self, tokenizer, pixel_values, question, generation_config):
                messages = [{"role": "user", "content": question}]
                query = tokenizer.apply_chat_template(messages, tokenize=False)
                return query
        """,
        lambda snippet: read_chat_prompt(_snapshot_of(snippet)),
    ),
    invalid(
        "a_snapshot_naming_a_processor_is_not_a_chat_checkpoint",
        _INTERNVL_CHAT,
        lambda snippet: read_chat_prompt(
            _snapshot_of(
                snippet,
                _INTERNVL_CONFIG.replace(
                    '"AutoModel":',
                    '"AutoProcessor": "example.InternVLProcessor",\n    "AutoModel":',
                ),
            )
        ),
    ),
]
