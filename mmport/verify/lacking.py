"""Read off an exception whether it was raised because the *snapshot* lacks something.

A synthetic or trimmed snapshot can lack what every real checkpoint of its
family carries: a vocabulary entry (Gemma 3's tokenizer has ``"\\n\\n\\n"`` as
one token; the synthetic one does not) or a config attribute. A port that
looks such a thing up raises, and that says nothing about its parity: the
verdict is *cannot judge*, not *fail* (DESIGN §4). :func:`snapshot_lacks`
decides from the exception's type, value and traceback, never from its
message text:

- ``KeyError(key)`` with a string key the snapshot's vocabulary lacks, raised
  where the subscripted mapping *is* the vocabulary: a local (or attribute)
  whose keys are the vocabulary's, or a ``*.get_vocab()`` call, read off the
  raising instruction's source position::

      vocab = tokenizer.get_vocab()
      vocab["\\n\\n\\n"]          # -> Lacking("vocabulary", "\\n\\n\\n")

- ``AttributeError`` whose ``obj`` (Python 3.10+) is a transformers config,
  or is None read from a config's attribute (a sub-config the snapshot leaves
  None)::

      config.boi_token_index                # -> Lacking("config", "Gemma3Config.boi_token_index")
      config.vision_config.patch_size       # vision_config None -> Lacking("config", "LlavaConfig.vision_config")

- a TypeError or ValueError raised by a call handed a config attribute
  the snapshot leaves None::

      Fraction(config.downsample_rate)      # -> Lacking("config", "Granite4VisionConfig.downsample_rate")

- any exception raised through a function that calls
  ``convert_tokens_to_ids("<text>")`` with a literal text the vocabulary
  lacks (HF then returns the unk id or None, and the port trips later)::

      image_id = tokenizer.convert_tokens_to_ids("<start_of_image>")
      [image_id] * n + ...                  # -> Lacking("vocabulary", "<start_of_image>")

- only on a tokenizer mmport invented (a synthetic snapshot, whose names for
  the tokenizer's own tokens are mmport's, not the checkpoint's): an exception
  raised while vLLM applies prompt updates (a frame holding them), where an
  update's target is one token's text, ``<...>`` without spaces, that the
  vocabulary lacks (as text, or as the ids the port encoded it to)::

      image_pattern = "<|image_pad|>"       # MiniCPM-V 4.6's checkpoints hold it
      PromptReplacement("image", target=encode(image_pattern), ...)
      # vLLM: no placeholder found           -> Lacking("vocabulary", "<|image_pad|>")

  On a real tokenizer such a port fails: the checkpoint really lacks it.

Causes and contexts are followed, so a wrapped error is read too.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import CodeType, FrameType, TracebackType
from typing import Any

from mmport.verify.report import Lacking

__all__ = [
    "SnapshotFacts",
    "snapshot_lacks",
    "unheld_token_texts",
    "unset_config_reads",
]

# The tokenizer call a port names a token text with (HF's own name for it).
TEXT_LOOKUP = "convert_tokens_to_ids"
# The text of one special token as checkpoints write them: `<image>`, `<|image_pad|>`.
TOKEN_SHAPED = re.compile(r"<[^\s<>]+>")


@dataclass(frozen=True)
class SnapshotFacts:
    """What the snapshot holds: its tokenizer's vocabulary (added tokens included) and its config."""

    vocabulary: Mapping[str, int]
    config: Any = None  # a transformers PretrainedConfig, when known
    # The tokenizer is mmport's own invention (a synthetic snapshot): its names for
    # special tokens need not be the checkpoint's. ``decode`` turns ids into text.
    invented: bool = False
    decode: Callable[[list[int]], str] | None = None

    @classmethod
    def of(
        cls, tokenizer: Any, config: Any = None, *, invented: bool = False
    ) -> SnapshotFacts:
        """The facts of a real HF tokenizer (``get_vocab()``) and config."""
        if tokenizer is None:
            return cls({}, config, invented)
        return cls(tokenizer.get_vocab(), config, invented, tokenizer.decode)

    def lacks_text(self, text: object) -> bool:
        """True for a string the vocabulary has no entry for: ``convert_tokens_to_ids`` gives it the unk id or None."""
        return isinstance(text, str) and text not in self.vocabulary


def snapshot_lacks(exc: BaseException, facts: SnapshotFacts) -> Lacking | None:
    """What the snapshot lacks that made ``exc`` happen, or None when ``exc`` is no such error.

    >>> facts = SnapshotFacts({"a": 0})
    >>> vocab = dict(facts.vocabulary)
    >>> try:
    ...     vocab["\\n\\n\\n"]
    ... except KeyError as exc:
    ...     snapshot_lacks(exc, facts)
    Lacking(kind='vocabulary', name='\\n\\n\\n')
    >>> try:
    ...     {"pixel_values": 1}["image_sizes"]
    ... except KeyError as exc:
    ...     print(snapshot_lacks(exc, facts))
    None
    """
    for link in _chain(exc):
        found = (
            _missing_key(link, facts)
            or _missing_attribute(link, facts)
            or _unknown_text(link, facts)
            or _none_config_argument(link)
            or _unheld_target(link, facts)
        )
        if found is not None:
            return found
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or during, each once."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _innermost(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _raising_node(tb: TracebackType) -> ast.AST | None:
    """The expression the raising instruction evaluated, parsed from its source position (Python 3.11+)."""
    code = tb.tb_frame.f_code
    positions = list(code.co_positions()) if hasattr(code, "co_positions") else []
    index = tb.tb_lasti // 2  # one position per 2-byte code unit
    if index >= len(positions):
        return None
    line, end_line, column, end_column = positions[index]
    if line is None or end_line is None or column is None or end_column is None:
        return None
    lines = _source_lines(code.co_filename, line, end_line)
    if not any(lines):
        return None
    lines[-1] = lines[-1][:end_column]
    lines[0] = lines[0][column:]
    try:
        return ast.parse("\n".join(lines).strip(), mode="eval").body
    except SyntaxError:
        return None


def _source_lines(filename: str, first: int, last: int) -> list[str]:
    """Lines ``first`` to ``last`` of a source file (empty strings where it cannot be read)."""
    import linecache

    return [
        linecache.getline(filename, number).rstrip("\n")
        for number in range(first, last + 1)
    ]


def _resolve(node: ast.AST, frame: FrameType) -> tuple[bool, Any]:
    """The value of a name or attribute chain (``vocab``, ``self.info.vocab``) in ``frame``: (found, value).

    Only names and attribute reads are followed; nothing is called.
    """
    if isinstance(node, ast.Name):
        scopes = (frame.f_locals, frame.f_globals)
        return next(
            ((True, scope[node.id]) for scope in scopes if node.id in scope),
            (False, None),
        )
    if isinstance(node, ast.Attribute):
        found, owner = _resolve(node.value, frame)
        if found and hasattr(owner, node.attr):
            return True, getattr(owner, node.attr)
    return False, None


def _missing_key(exc: BaseException, facts: SnapshotFacts) -> Lacking | None:
    """A vocabulary looked up by a text it lacks: ``vocab[text]`` or ``tokenizer.get_vocab()[text]``."""
    if (
        type(exc) is not KeyError
        or len(exc.args) != 1
        or not facts.lacks_text(exc.args[0])
    ):
        return None
    tb = _innermost(exc.__traceback__)
    node = _raising_node(tb) if tb is not None else None
    if tb is None or not isinstance(node, ast.Subscript):
        return None
    container = node.value
    if (
        isinstance(container, ast.Call)
        and isinstance(container.func, ast.Attribute)
        and container.func.attr == "get_vocab"
    ):
        return Lacking("vocabulary", exc.args[0])
    found, value = _resolve(container, tb.tb_frame)
    if found and isinstance(value, Mapping) and _is_vocabulary(value, facts):
        return Lacking("vocabulary", exc.args[0])
    return None


def _is_vocabulary(mapping: Mapping, facts: SnapshotFacts) -> bool:
    """True when ``mapping`` has exactly the snapshot vocabulary's texts (a copy of ``get_vocab()``)."""
    return (
        len(mapping) == len(facts.vocabulary)
        and mapping.keys() == facts.vocabulary.keys()
    )


def _is_config(value: object) -> bool:
    from transformers import PretrainedConfig

    return isinstance(value, PretrainedConfig)


def _missing_attribute(exc: BaseException, facts: SnapshotFacts) -> Lacking | None:
    """A config attribute the snapshot does not set, or a None it leaves where a sub-config belongs."""
    if not isinstance(exc, AttributeError) or getattr(exc, "name", None) is None:
        return None
    if _is_config(exc.obj):
        return Lacking("config", f"{type(exc.obj).__name__}.{exc.name}")
    if exc.obj is not None:
        return None
    tb = _innermost(exc.__traceback__)
    node = _raising_node(tb) if tb is not None else None
    # ``<owner>.<attr>.<name>`` where ``<owner>.<attr>`` gave the None.
    if tb is None or not (
        isinstance(node, ast.Attribute)
        and node.attr == exc.name
        and isinstance(node.value, ast.Attribute)
    ):
        return None
    attr = node.value.attr
    found, owner = _resolve(node.value.value, tb.tb_frame)
    if not found:
        # ``self.get_hf_config().vision_config``: nothing is called; the snapshot's own config says.
        owner = facts.config
    if _is_config(owner) and getattr(owner, attr, ...) is None:
        return Lacking("config", f"{type(owner).__name__}.{attr}")
    return None


def _none_config_argument(exc: BaseException) -> Lacking | None:
    """A config attribute left None, handed to the call that raised: ``Fraction(config.downsample_rate)``.

    Real checkpoints set such attributes (Granite 4 Vision's ``downsample_rate``,
    ``"4/8"``); transformers' defaults leave them None, and the call that
    takes one raises a TypeError or ValueError somewhere below the call.
    """
    if not isinstance(exc, TypeError | ValueError):
        return None
    tb = exc.__traceback__
    while tb is not None:
        node = _raising_node(tb)
        arguments = (
            [*node.args, *(k.value for k in node.keywords)]
            if isinstance(node, ast.Call)
            else []
        )
        for argument in arguments:
            if not isinstance(argument, ast.Attribute):
                continue
            found, owner = _resolve(argument.value, tb.tb_frame)
            if (
                found
                and _is_config(owner)
                and getattr(owner, argument.attr, ...) is None
            ):
                return Lacking("config", f"{type(owner).__name__}.{argument.attr}")
        tb = tb.tb_next
    return None


def _unknown_text(exc: BaseException, facts: SnapshotFacts) -> Lacking | None:
    """A literal token text some raising frame looks up with ``convert_tokens_to_ids`` and the vocabulary lacks."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if TEXT_LOOKUP in code.co_names:
            text = next(
                (t for t in _looked_up_texts(code) if facts.lacks_text(t)), None
            )
            if text is not None:
                return Lacking("vocabulary", text)
        tb = tb.tb_next
    return None


def _unheld_target(exc: BaseException, facts: SnapshotFacts) -> Lacking | None:
    """A prompt update, held by a raising frame, whose target is a token text the invented vocabulary lacks."""
    if not facts.invented:
        return None
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            for target in _update_targets(value):
                text = _target_text(target, facts)
                if text and TOKEN_SHAPED.fullmatch(text) and facts.lacks_text(text):
                    return Lacking("vocabulary", text)
        tb = tb.tb_next
    return None


def unheld_token_texts(text: str, facts: SnapshotFacts) -> list[str]:
    """Token-shaped texts in a port's own prompt text (its dummy text) that an invented vocabulary lacks.

    HF's processor finds no placeholder in ``"<|image_pad|>"`` when the
    synthetic tokenizer names its image token ``<image>``: the snapshot, not
    the port, is what cannot tell. Empty for a checkpoint's own tokenizer.

    >>> facts = SnapshotFacts({"<image>": 5}, invented=True)
    >>> unheld_token_texts("<|image_pad|><image> two", facts)
    ['<|image_pad|>']
    """
    if not facts.invented:
        return []
    return [
        found
        for found in dict.fromkeys(TOKEN_SHAPED.findall(text))
        if facts.lacks_text(found)
    ]


def _update_targets(value: object, depth: int = 3) -> Iterator[object]:
    """The ``target`` of every prompt update in ``value`` (an update, or mappings and sequences of them)."""
    if hasattr(value, "target") and hasattr(value, "modality"):
        yield value.target
    elif depth and isinstance(value, Mapping):
        for inner in value.values():
            yield from _update_targets(inner, depth - 1)
    elif depth and isinstance(value, list | tuple):
        for inner in value:
            yield from _update_targets(inner, depth - 1)


def _target_text(target: object, facts: SnapshotFacts) -> str | None:
    """A target's text: itself, or the ids it holds decoded (a port encodes its pattern)."""
    if isinstance(target, str):
        return target
    if (
        facts.decode is not None
        and isinstance(target, list | tuple)
        and target
        and all(isinstance(i, int) for i in target)
    ):
        return facts.decode(list(target))
    return None


def _looked_up_texts(code) -> list[str]:
    """Every string literal a function passes to ``convert_tokens_to_ids``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return []
    texts = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == TEXT_LOOKUP
        ):
            texts += [
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            ]
    return texts


def unset_config_reads(call: Callable[[], Any]) -> list[Lacking]:
    """Config attributes ``call`` asks for by name and finds unset (absent or None): ``getattr(config, "x", None)``, ``hasattr(config, "x")``.

    A port may switch a modality on only where the checkpoint's config sets
    an attribute transformers' defaults leave out (vLLM's Inkling reads
    ``getattr(config.vision_config, "decoder_dmodel", None)``); nothing
    raises, the modality is just off. Every Python function ``call`` runs is
    read for such lookups, resolved in its frame as it returns.
    """
    frames: list[FrameType] = []

    def on_call(frame: FrameType, event: str, arg: Any):
        return on_event

    def on_event(frame: FrameType, event: str, arg: Any):
        if event == "return":
            frames.append(frame)
        return on_event

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        call()
    finally:
        sys.settrace(previous)
    found: dict[str, Lacking] = {}
    for frame in frames:
        for owner_node, name in _named_lookups(frame.f_code):
            known, owner = _resolve(owner_node, frame)
            if known and _is_config(owner) and getattr(owner, name, None) is None:
                lacking = Lacking("config", f"{type(owner).__name__}.{name}")
                found.setdefault(lacking.name, lacking)
    return list(found.values())


def _named_lookups(code: CodeType) -> list[tuple[ast.AST, str]]:
    """``getattr(X, "name", ...)`` and ``hasattr(X, "name")`` in a function's source: (X, name)."""
    if code not in _LOOKUPS:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
        except (OSError, TypeError, SyntaxError):
            tree = None
        _LOOKUPS[code] = [
            (node.args[0], node.args[1].value)
            for node in (ast.walk(tree) if tree is not None else ())
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ]
    return _LOOKUPS[code]


_LOOKUPS: dict[CodeType, list[tuple[ast.AST, str]]] = {}
