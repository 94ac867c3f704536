"""What a processor's own entry point (not ``__call__``) does to the prompt, read from its source.

Molmo's processor is called as ``processor.process(text=..., images=...)``
(:mod:`mmport.hf.entry`). That method writes the prompt itself::

    def get_tokens_input(self, prompt, message_format, always_start_with_space):
        if message_format == "none" or message_format is None:
            pass
        elif message_format == "role":
            prompt = "User: " + prompt + " Assistant:"
        ...
        if always_start_with_space:
            prompt = " " + prompt
        tokens = self.tokenizer.encode(prompt, add_special_tokens=False)

    def process(self, text=None, images=None, **kwargs: Unpack[MolmoProcessorKwargs]):
        ...
        tokens = self.get_tokens_input(
            text,
            output_kwargs["text_kwargs"]["message_format"],
            output_kwargs["text_kwargs"]["always_start_with_space"],
        )
        ...
            image_idx = [-1]*len(images)
        ...
        out = self.image_processor.multimodal_preprocess(images=images, image_idx=image_idx, tokens=..., ...)
        bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
        decoder_input_tokens = np.pad(out["input_ids"], [[1, 0]], constant_values=bos)

:func:`read_entry_point` reads, without running anything:

- the entry method (``process``);
- the text it puts around every prompt, items or not, under the defaults of
  its kwargs class (``_defaults["text_kwargs"]``): the helper's parameters
  are bound to those defaults and its ``if``/``elif`` branches followed, so
  ``message_format="role"`` and ``always_start_with_space=True`` give
  ``" User: "`` before and ``" Assistant:"`` after;
- the token it prepends to the tokens after the items are in
  (``np.pad(..., [[1, 0]], constant_values=bos)``), a tokenizer attribute
  tried in order (``bos_token``, then ``eos_token``);
- where the items go: the index list it hands on (``[-1]*len(images)``;
  ``-1`` is the start of the prompt's tokens).

The facts carry their lines; the port reproduces the prompt in
``_postprocess_prompt`` and inserts the items after the prepended token.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from mmport.analyzers.examples import SNIPPET_FILE, invalid, snippet_line, valid
from mmport.analyzers.promptformat import prompt_format
from mmport.hf.entry import base_methods
from mmport.hf.syntax import find_all
from mmport.spec import EntryPointSpec, Source

__all__ = ["EntryReader", "read_entry_point"]

# The parameters a method must take to be a processor's entry point (mmport.hf.entry).
ENTRY_PARAMETERS = frozenset({"text", "images"})


class EntryReader:
    """One parsed module, read for a processor class's entry point."""

    def __init__(self, path: Path, relpath: str) -> None:
        self.relpath = relpath
        wrapper = MetadataWrapper(cst.parse_module(Path(path).read_text()))
        self.module = wrapper.module
        self.positions = wrapper.resolve(PositionProvider)
        self.lines = self.module.code.splitlines()
        self.classes = {
            s.name.value: s for s in self.module.body if isinstance(s, cst.ClassDef)
        }

    def source(self, node: cst.CSTNode) -> Source:
        """Provenance of ``node`` in this module."""
        line = self.positions[node].start.line
        return Source(self.relpath, line, self.lines[line - 1].strip())

    def methods(self, class_name: str) -> dict[str, cst.FunctionDef]:
        """The methods ``class_name``'s body defines."""
        klass = self.classes.get(class_name)
        body = klass.body.body if klass is not None else ()
        return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}

    def entry_method(self, class_name: str) -> cst.FunctionDef | None:
        """The public method taking ``text`` and ``images`` when the class defines no ``__call__``."""
        methods = self.methods(class_name)
        if "__call__" in methods:
            return None
        hooks = base_methods()  # overrides the base __call__ runs are not entry points
        found = [
            f
            for name, f in methods.items()
            if not name.startswith("_")
            and name not in hooks
            and _param_names(f) >= ENTRY_PARAMETERS
        ]
        return found[0] if len(found) == 1 else None

    def kwargs_defaults(self, func: cst.FunctionDef) -> dict:
        """``_defaults`` of the kwargs class ``func``'s ``**kwargs: Unpack[...]`` names (a literal)."""
        star = func.params.star_kwarg
        names = (
            [n.value for n in find_all(star.annotation, m.Name(), cst.Name)]
            if star is not None and star.annotation is not None
            else []
        )
        for name in names:
            for stmt in _class_statements(self.classes.get(name)):
                if isinstance(stmt, cst.Assign) and m.matches(
                    stmt, m.Assign(targets=[m.AssignTarget(target=m.Name("_defaults"))])
                ):
                    try:
                        return ast.literal_eval(self.module.code_for_node(stmt.value))
                    except (ValueError, SyntaxError):
                        return {}
        return {}


def _param_names(func: cst.FunctionDef) -> set[str]:
    return {p.name.value for p in (*func.params.params, *func.params.kwonly_params)}


def _class_statements(klass: cst.ClassDef | None) -> list[cst.BaseSmallStatement]:
    if klass is None:
        return []
    return [
        small
        for stmt in klass.body.body
        if isinstance(stmt, cst.SimpleStatementLine)
        for small in stmt.body
    ]


def _prepended(
    reader: EntryReader, entry: cst.FunctionDef
) -> tuple[tuple[str, ...], Source] | None:
    """Tokenizer attributes of the token padded onto the front of ``input_ids``, tried in order."""
    assigned = {
        a.targets[0].target.value: a.value
        for a in find_all(
            entry.body, m.Assign(targets=[m.AssignTarget(m.Name())]), cst.Assign
        )
        if isinstance(a.targets[0].target, cst.Name)
    }
    for call in find_all(
        entry.body, m.Call(func=m.Attribute(attr=m.Name("pad"))), cst.Call
    ):
        width = call.args[1].value if len(call.args) > 1 else None
        fill = next(
            (
                a.value
                for a in call.args
                if a.keyword and a.keyword.value == "constant_values"
            ),
            None,
        )
        if (
            width is None
            or fill is None
            or cst.Module([]).code_for_node(width).replace(" ", "") != "[[1,0]]"
        ):
            continue
        value = assigned.get(fill.value) if isinstance(fill, cst.Name) else fill
        attrs = _tokenizer_ids(value)
        if attrs:
            return attrs, reader.source(call)
    return None


def _tokenizer_ids(value: cst.BaseExpression | None) -> tuple[str, ...]:
    """``self.tokenizer.bos_token_id or self.tokenizer.eos_token_id`` → ``("bos_token", "eos_token")``."""
    operands: list[cst.BaseExpression] = []
    while isinstance(value, cst.BooleanOperation) and isinstance(
        value.operator, cst.Or
    ):
        operands.insert(0, value.right)
        value = value.left
    if value is not None:
        operands.insert(0, value)
    pattern = m.Attribute(
        value=m.Attribute(value=m.Name("self"), attr=m.Name("tokenizer"))
    )
    attrs = [
        o.attr.value.removesuffix("_id")  # type: ignore[attr-defined]  # matched an Attribute
        for o in operands
        if m.matches(o, pattern)
    ]
    return tuple(attrs) if len(attrs) == len(operands) else ()


def _items_index(
    reader: EntryReader, entry: cst.FunctionDef
) -> tuple[int, Source] | None:
    """``image_idx = [-1]*len(images)``: the one index every image goes in at."""
    pattern = m.BinaryOperation(
        left=m.List(elements=[m.Element()]),
        operator=m.Multiply(),
        right=m.Call(func=m.Name("len")),
    )
    for assign in find_all(entry.body, m.Assign(value=pattern), cst.Assign):
        element = assign.value.left.elements[0].value  # type: ignore[attr-defined]  # matched above
        try:
            index = ast.literal_eval(cst.Module([]).code_for_node(element))
        except (ValueError, SyntaxError):
            continue
        if isinstance(index, int):
            return index, reader.source(assign)
    return None


def read_entry_point(
    path: Path, relpath: str, class_name: str
) -> EntryPointSpec | None:
    """The entry point of processor ``class_name`` (defined in the module at ``path``) and what it does to the prompt.

    None when the class defines ``__call__`` or no single entry method.
    """
    reader = EntryReader(path, relpath)
    entry = reader.entry_method(class_name)
    if entry is None:
        return None
    methods = {
        name: f for klass in reader.classes for name, f in reader.methods(klass).items()
    }
    found = prompt_format(entry, methods, reader.kwargs_defaults(entry))
    prompt = (
        (found[0], found[1], tuple(reader.source(n) for n in found[2]))
        if found
        else None
    )
    prepended = _prepended(reader, entry)
    index = _items_index(reader, entry)
    return EntryPointSpec(
        method=entry.name.value,
        source=reader.source(entry),
        before=prompt[0] if prompt else "",
        after=prompt[1] if prompt else "",
        format_sources=prompt[2] if prompt else (),
        format_read=prompt is not None,
        prepended=prepended[0] if prepended else (),
        prepended_source=prepended[1] if prepended else None,
        items_index=index[0] if index else None,
        items_source=index[1] if index else None,
    )


def entry_facts(
    path: Path, relpath: str, class_name: str
) -> list[tuple[str, str, Source | None]]:
    """``(fact, value, source)`` rows for ``inspect``: the entry point and what it does to the prompt."""
    entry = read_entry_point(path, relpath, class_name)
    if entry is None:
        return []
    rows: list[tuple[str, str, Source | None]] = [
        (
            "processor entry point",
            f"{entry.method}(text=..., images=...), not __call__",
            entry.source,
        )
    ]
    if entry.format_read:
        rows.append(
            (
                "prompt format (every prompt, items or not)",
                repr(entry.before + "{text}" + entry.after),
                entry.format_sources[-1] if entry.format_sources else None,
            )
        )
    else:
        rows.append(
            (
                "prompt format",
                "not followed: its helper does more than concatenate",
                entry.source,
            )
        )
    if entry.prepended:
        rows.append(
            (
                "token put first, after the items are in",
                ", else ".join(entry.prepended),
                entry.prepended_source,
            )
        )
    if entry.items_index is not None:
        where = "the start" if entry.items_index == -1 else f"index {entry.items_index}"
        rows.append(
            (
                "images inserted at",
                f"{where} of the prompt's tokens, every image",
                entry.items_source,
            )
        )
    return rows


# Molmo's processor, cut down to what the reader reads (preprocessing_molmo.py).
_MOLMO = """
import numpy as np
from typing import Unpack


class MolmoProcessorKwargs:
    _defaults = {
        "text_kwargs": {"message_format": "role", "always_start_with_space": True},
    }


class MolmoProcessor:
    def get_tokens_input(self, prompt, message_format, always_start_with_space):
        if message_format == "none" or message_format is None:
            pass
        elif message_format == "role":
            prompt = "User: " + prompt + " Assistant:"
        else:
            raise NotImplementedError(f"Message format {message_format} not implemented")
        if always_start_with_space:
            prompt = " " + prompt
        tokens = self.tokenizer.encode(prompt, add_special_tokens=False)
        return tokens

    def process(self, text=None, images=None, **kwargs: Unpack[MolmoProcessorKwargs]):
        output_kwargs = self._merge_kwargs(MolmoProcessorKwargs, **kwargs)
        tokens = self.get_tokens_input(
            text,
            output_kwargs["text_kwargs"]["message_format"],
            output_kwargs["text_kwargs"]["always_start_with_space"],
        )
        image_idx = [-1] * len(images)
        out = self.image_processor.multimodal_preprocess(
            images=images, image_idx=image_idx, tokens=np.asarray(tokens).astype(np.int32)
        )
        bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
        out["input_ids"] = np.pad(out["input_ids"], [[1, 0]], constant_values=bos)
        return out
"""


def _read_snippet(snippet: object, class_name: str) -> EntryPointSpec | None:
    """:func:`read_entry_point` on a loaded snippet's file."""
    return read_entry_point(Path(str(snippet.__file__)), SNIPPET_FILE, class_name)  # type: ignore[attr-defined]  # a module


def _summary(entry: EntryPointSpec | None) -> tuple | None:
    """What an entry point's reading found, without its lines."""
    if entry is None:
        return None
    return (
        entry.method,
        entry.format_read,
        entry.before,
        entry.after,
        entry.prepended,
        entry.items_index,
    )


EXAMPLES = [
    valid(
        "molmo_process_wraps_the_prompt_and_pads_bos_in_front",
        _MOLMO,
        lambda snippet: _read_snippet(snippet, "MolmoProcessor"),
        EntryPointSpec(
            method="process",
            source=snippet_line(_MOLMO, "def process("),
            before=" User: ",
            after=" Assistant:",
            format_sources=(
                snippet_line(_MOLMO, "tokens = self.get_tokens_input("),
                snippet_line(_MOLMO, 'prompt = "User: "'),
                snippet_line(_MOLMO, 'prompt = " " + prompt'),
            ),
            format_read=True,
            prepended=("bos_token", "eos_token"),
            prepended_source=snippet_line(_MOLMO, "np.pad("),
            items_index=-1,
            items_source=snippet_line(_MOLMO, "image_idx = [-1]"),
        ),
    ),
    valid(
        "a_helper_calling_on_the_prompt_is_not_followed",
        """
        class MolmoProcessorKwargs:
            _defaults = {"text_kwargs": {"message_format": "role"}}


        class MolmoProcessor:
            def get_tokens_input(self, prompt, message_format):
                prompt = prompt.strip()
                return self.tokenizer.encode(prompt, add_special_tokens=False)

            def process(self, text=None, images=None, **kwargs: "Unpack[MolmoProcessorKwargs]"):
                output_kwargs = self._merge_kwargs(MolmoProcessorKwargs, **kwargs)
                tokens = self.get_tokens_input(text, output_kwargs["text_kwargs"]["message_format"])
                return self.image_processor.multimodal_preprocess(images=images, tokens=tokens)
        """,
        lambda snippet: _summary(_read_snippet(snippet, "MolmoProcessor")),
        ("process", False, "", "", (), None),
    ),
    invalid(
        "llava_defines_call_so_has_no_entry_point_of_its_own",
        """
        class LlavaProcessor:
            def __call__(self, images=None, text=None, **kwargs):
                return self.tokenizer(text, **kwargs)

            def process(self, text=None, images=None, **kwargs):
                return self(images=images, text=text, **kwargs)
        """,
        lambda snippet: _read_snippet(snippet, "LlavaProcessor"),
    ),
    invalid(
        "two_public_methods_taking_text_and_images_are_ambiguous",
        """
        class TwoEntriesProcessor:
            def process(self, text=None, images=None, **kwargs):
                return self.image_processor(images)

            def process_batch(self, text=None, images=None, **kwargs):
                return [self.process(t, i) for t, i in zip(text, images)]
        """,
        lambda snippet: _read_snippet(snippet, "TwoEntriesProcessor"),
    ),
]
