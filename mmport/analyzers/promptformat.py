"""The text a processor's prompt helper puts around every prompt, under its kwargs' defaults.

An entry point of its own (:mod:`mmport.analyzers.entrypoint`) often
tokenizes the prompt through a helper whose parameters the entry point takes
from its merged kwargs::

    tokens = self.get_tokens_input(
        text,
        output_kwargs["text_kwargs"]["message_format"],
        output_kwargs["text_kwargs"]["always_start_with_space"],
    )

:func:`prompt_format` binds the helper's parameters to the defaults of the
kwargs class (``_defaults["text_kwargs"]``), follows its ``if``/``elif``
branches on them and reads the concatenations around the prompt parameter.
Molmo's ``message_format="role"`` and ``always_start_with_space=True`` give
``" User: "`` before and ``" Assistant:"`` after. Anything else the helper
does (a call on the prompt, a ``raise`` on the default branch, a loop) makes
the reading give up rather than guess.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from mmport.analyzers.examples import invalid, valid
from mmport.hf.syntax import find_all, string_value

__all__ = ["prompt_format"]


class _Unknown(Exception):
    """The prompt helper does something the reader does not follow."""


@dataclass
class _Prompt:
    """The prompt as the helper builds it: text before and after the user's."""

    before: str = ""
    after: str = ""


def _self_call(node: cst.BaseExpression) -> str | None:
    """``self.<name>(...)`` → ``name``."""
    if m.matches(node, m.Call(func=m.Attribute(value=m.Name("self")))):
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        return node.func.attr.value
    return None


def _default_of(arg: cst.BaseExpression, defaults: dict) -> object:
    """``output_kwargs["text_kwargs"]["message_format"]`` → ``defaults["text_kwargs"]["message_format"]``."""
    keys = []
    while isinstance(arg, cst.Subscript):
        keys.append(string_value(arg.slice[0].slice.value))  # type: ignore[attr-defined]  # an Index slice
        arg = arg.value
    value: object = defaults
    for key in reversed(keys):
        if not isinstance(value, dict) or key not in value:
            raise _Unknown(f"no default for {keys}")
        value = value[key]
    return value


def _prompt_call(
    entry: cst.FunctionDef, methods: dict[str, cst.FunctionDef]
) -> tuple[cst.Call, cst.FunctionDef] | None:
    """The call of the helper that tokenizes the ``text`` parameter, and the helper."""
    for call in find_all(entry.body, m.Call(), cst.Call):
        name = _self_call(call)
        if (
            name in methods
            and call.args
            and m.matches(call.args[0].value, m.Name("text"))
        ):
            return call, methods[name]
    return None


class _Evaluator:
    """Follows a prompt helper's statements with its parameters bound to values."""

    def __init__(self, prompt_param: str, bound: dict[str, object]) -> None:
        self.prompt_param = prompt_param
        self.bound = bound
        self.prompt = _Prompt()
        self.lines: list[cst.CSTNode] = []

    def run(self, body: cst.BaseSuite) -> bool:
        """Follow ``body``; True once the prompt is tokenized (a ``return`` or the encode)."""
        for stmt in body.body if isinstance(body, cst.IndentedBlock) else ():
            if isinstance(stmt, cst.If):
                branch = self._branch(stmt)
                if branch is not None and self.run(branch):
                    return True
            elif isinstance(stmt, cst.SimpleStatementLine):
                if self._simple(stmt):
                    return True
            else:
                raise _Unknown(type(stmt).__name__)
        return False

    def _branch(self, node: cst.If) -> cst.BaseSuite | None:
        if self._test(node.test):
            return node.body
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            return self._branch(orelse)
        return orelse.body if isinstance(orelse, cst.Else) else None

    def _test(self, test: cst.BaseExpression) -> bool:
        if isinstance(test, cst.BooleanOperation):
            left, right = self._test(test.left), self._test(test.right)
            return (
                left or right if isinstance(test.operator, cst.Or) else left and right
            )
        if isinstance(test, cst.Name) and test.value in self.bound:
            return bool(self.bound[test.value])
        if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name):
            value = self.bound.get(test.left.value, _Unknown)
            (target,) = test.comparisons
            other = (
                None
                if m.matches(target.comparator, m.Name("None"))
                else string_value(target.comparator)
            )
            if value is not _Unknown and isinstance(
                target.operator, (cst.Equal, cst.Is)
            ):
                return value == other
        raise _Unknown(cst.Module([]).code_for_node(test))

    def _simple(self, stmt: cst.SimpleStatementLine) -> bool:
        for small in stmt.body:
            if isinstance(small, cst.Pass):
                continue
            if isinstance(small, cst.Raise):
                raise _Unknown("the default format raises")
            if m.matches(
                small, m.Assign(targets=[m.AssignTarget(m.Name(self.prompt_param))])
            ):
                self._concatenation(small.value)  # type: ignore[attr-defined]  # an Assign
                self.lines.append(small)
                continue
            if find_all(small, m.Attribute(attr=m.Name("encode")), cst.Attribute):
                return True
            raise _Unknown(cst.Module([]).code_for_node(small))
        return False

    def _concatenation(self, value: cst.BaseExpression) -> None:
        """``"a" + prompt + "b"`` → text before and after the prompt."""
        parts: list[cst.BaseExpression] = []
        while isinstance(value, cst.BinaryOperation) and isinstance(
            value.operator, cst.Add
        ):
            parts.insert(0, value.right)
            value = value.left
        parts.insert(0, value)
        names = [
            i for i, p in enumerate(parts) if m.matches(p, m.Name(self.prompt_param))
        ]
        texts = [string_value(p) for p in parts]
        if len(names) != 1 or any(
            t is None for i, t in enumerate(texts) if i != names[0]
        ):
            raise _Unknown(cst.Module([]).code_for_node(value))
        at = names[0]
        self.prompt.before = "".join(texts[:at]) + self.prompt.before  # type: ignore[arg-type]  # checked above
        self.prompt.after += "".join(texts[at + 1 :])  # type: ignore[arg-type]  # checked above


def prompt_format(
    entry: cst.FunctionDef, methods: dict[str, cst.FunctionDef], defaults: dict
) -> tuple[str, str, tuple[cst.CSTNode, ...]] | None:
    """Text ``entry`` puts before and after every prompt under its kwargs' ``defaults``, and the nodes adding it.

    ``methods`` are the methods of the module's classes (the helper is one of
    them). None when the helper does more than put text around the prompt.
    """
    found = _prompt_call(entry, methods)
    if found is None:
        return None
    call, helper = found
    params = [p.name.value for p in helper.params.params if p.name.value != "self"]
    try:
        bound = {
            name: _default_of(arg.value, defaults)
            for name, arg in zip(params[1:], call.args[1:], strict=False)
        }
        evaluator = _Evaluator(params[0], bound)
        evaluator.run(helper.body)
    except _Unknown:
        return None
    return evaluator.prompt.before, evaluator.prompt.after, (call, *evaluator.lines)


def _format(
    processor_cls: type, entry: str, defaults: dict
) -> tuple[str, str, int] | None:
    """:func:`prompt_format` of ``processor_cls.<entry>``: the text before, after, and how many nodes add it."""
    module = cst.parse_module(textwrap.dedent(inspect.getsource(processor_cls)))
    (klass,) = [s for s in module.body if isinstance(s, cst.ClassDef)]
    methods = {
        s.name.value: s for s in klass.body.body if isinstance(s, cst.FunctionDef)
    }
    found = prompt_format(methods[entry], methods, defaults)
    return (found[0], found[1], len(found[2])) if found else None


# Molmo's prompt helper and the call of it in its entry point (preprocessing_molmo.py).
_MOLMO = """
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

    def process(self, text=None, images=None, **kwargs):
        output_kwargs = self._merge_kwargs(MolmoProcessorKwargs, **kwargs)
        tokens = self.get_tokens_input(
            text,
            output_kwargs["text_kwargs"]["message_format"],
            output_kwargs["text_kwargs"]["always_start_with_space"],
        )
        return self.image_processor.multimodal_preprocess(images=images, tokens=tokens)
"""

_MOLMO_DEFAULTS = {
    "text_kwargs": {"message_format": "role", "always_start_with_space": True}
}

EXAMPLES = [
    valid(
        "molmo_role_format_with_a_leading_space",
        _MOLMO,
        lambda snippet: _format(snippet.MolmoProcessor, "process", _MOLMO_DEFAULTS),
        (
            " User: ",
            " Assistant:",
            3,
        ),  # the call, then the two assignments to the prompt
    ),
    valid(
        "molmo_without_a_format_leaves_the_prompt_alone",
        _MOLMO,
        lambda snippet: _format(
            snippet.MolmoProcessor,
            "process",
            {
                "text_kwargs": {
                    "message_format": "none",
                    "always_start_with_space": False,
                }
            },
        ),
        ("", "", 1),
    ),
    invalid(
        "an_unknown_default_format_raises",
        _MOLMO,
        lambda snippet: _format(
            snippet.MolmoProcessor,
            "process",
            {
                "text_kwargs": {
                    "message_format": "chatml",
                    "always_start_with_space": True,
                }
            },
        ),
    ),
    invalid(
        "a_kwarg_without_a_default_is_not_guessed",
        _MOLMO,
        lambda snippet: _format(
            snippet.MolmoProcessor,
            "process",
            {"text_kwargs": {"message_format": "role"}},
        ),
    ),
    invalid(
        "a_helper_that_strips_the_prompt_is_not_followed",
        """
        class MolmoProcessor:
            def get_tokens_input(self, prompt):
                prompt = prompt.strip()
                return self.tokenizer.encode(prompt, add_special_tokens=False)

            def process(self, text=None, images=None, **kwargs):
                tokens = self.get_tokens_input(text)
                return self.image_processor.multimodal_preprocess(images=images, tokens=tokens)
        """,
        lambda snippet: _format(snippet.MolmoProcessor, "process", {}),
    ),
    invalid(
        "an_entry_point_that_tokenizes_text_itself_has_no_helper",
        """
        class MolmoProcessor:
            def process(self, text=None, images=None, **kwargs):
                tokens = self.tokenizer.encode(text, add_special_tokens=False)
                return self.image_processor.multimodal_preprocess(images=images, tokens=tokens)
        """,
        lambda snippet: _format(snippet.MolmoProcessor, "process", {}),
    ),
]
