"""HF idioms rewritten as vLLM's lint wants them, before formatting.

A port carries HF's own lines (helpers, hooks); some of them break rules
vLLM's ruff configuration enforces, and ruff cannot fix them itself. Each
rewrite here keeps what the code does:

- a comprehension's ambiguous loop variable (``for l in lengths``, E741)
  is renamed inside the comprehension, the only place that binds it;
- ``warnings.warn(...)`` without ``stacklevel`` (B028) gets
  ``stacklevel=2``: the warning points at the caller, as vLLM's own do;
- a logging call given an f-string (G004) gets a ``%``-format and its
  values as arguments, so the message is built only when it is logged
  (a format spec ``%`` formatting spells the same way travels along);
- an ``if`` whose whole body is another ``if`` (SIM102, neither with an
  ``else``) becomes one ``if ... and ...``, the inner one's comments moved
  to the top of the body they introduce.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

__all__ = ["tidy"]

# pycodestyle's ambiguous names (E741): `l`, `O` and `I` read as digits in some fonts.
_AMBIGUOUS = {"l": "length", "O": "o_", "I": "i_"}
_LOGGING_METHODS = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warning_once",
        "info_once",
        "error",
        "exception",
        "critical",
    }
)
_CONVERSIONS = {None: "%s", "s": "%s", "r": "%r"}
# A call ``_is_logging_call`` looks at: the text holds none, nothing to rewrite.
_LOGGING_CALL = re.compile(
    rf"\w*log\w*\.(?:{'|'.join(sorted(_LOGGING_METHODS))})\(", re.IGNORECASE
)
# Format specs that mean the same after ``%`` as after ``:`` in an f-string (``.1f``,
# ``05d``, ``+.3e``); ``-`` (left-justify in %-format, a sign flag in f-strings),
# alignment, grouping and ``%`` (percentage) do not.
_PERCENT_SPEC = re.compile(r"[#0 +]*\d*(\.\d+)?[doxXeEfFgG]")


def tidy(text: str) -> str:
    """``text`` with the rewrites this module describes (unchanged when none applies)."""
    if not (
        any(re.search(rf"\bfor {name} in\b", text) for name in _AMBIGUOUS)
        or "warn(" in text
        or _LOGGING_CALL.search(text)
        or re.search(r"^( *)(?:el)?if .*:\n(\1 +#.*\n)*\1 +if ", text, re.M)
    ):
        return text
    return cst.parse_module(text).visit(_Tidy()).code


class _Tidy(cst.CSTTransformer):
    def leave_ListComp(self, original, updated):
        return _renamed(updated)

    def leave_SetComp(self, original, updated):
        return _renamed(updated)

    def leave_GeneratorExp(self, original, updated):
        return _renamed(updated)

    def leave_DictComp(self, original, updated):
        return _renamed(updated)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        return _collapsed(updated)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if (
            _is_warnings_warn(updated.func)
            and not any(
                arg.keyword is not None and arg.keyword.value == "stacklevel"
                for arg in updated.args
            )
            and 1 <= len(updated.args) <= 2
            and all(a.star == "" for a in updated.args)
        ):
            return updated.with_changes(
                args=(
                    *_with_comma(updated.args),
                    cst.Arg(
                        cst.Integer("2"),
                        keyword=cst.Name("stacklevel"),
                        equal=cst.AssignEqual(
                            whitespace_before=cst.SimpleWhitespace(""),
                            whitespace_after=cst.SimpleWhitespace(""),
                        ),
                    ),
                )
            )
        if _is_logging_call(updated.func) and updated.args:
            message = updated.args[0].value
            lazy = _percent_format(message) if updated.args[0].keyword is None else None
            if lazy is not None:
                template, values = lazy
                rest = tuple(updated.args[1:])
                return updated.with_changes(
                    args=(
                        cst.Arg(cst.SimpleString(template)),
                        *(cst.Arg(v) for v in values),
                        *rest,
                    )
                )
        return updated


def _with_comma(args):
    """``args`` with a comma after the last, so another can follow."""
    *head, last = args
    return (
        *head,
        last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
    )


def _is_warnings_warn(func: cst.BaseExpression) -> bool:
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "warnings"
        and func.attr.value == "warn"
    )


def _is_logging_call(func: cst.BaseExpression) -> bool:
    """``logger.warning(...)``, ``logging.info(...)``: a receiver named for logging."""
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and "log" in func.value.value.lower()
        and func.attr.value in _LOGGING_METHODS
    )


def _percent_format(
    message: cst.BaseExpression,
) -> tuple[str, list[cst.BaseExpression]] | None:
    """An f-string (or adjacent ones) as a ``%``-format and its values; None if a format spec or no value stops it."""
    parts = _adjacent(message)
    text, values = "", []
    for part in parts:
        if isinstance(part, cst.SimpleString) and part.prefix.lower() in ("", "r"):
            text += str(part.evaluated_value).replace("%", "%%")
        elif isinstance(part, cst.FormattedString) and "f" in part.prefix.lower():
            raw = "r" if "r" in part.prefix.lower() else ""
            for piece in part.parts:
                if isinstance(piece, cst.FormattedStringText):
                    literal = piece.value.replace("{{", "{").replace("}}", "}")
                    value = ast.literal_eval(f"{raw}{part.end}{literal}{part.end}")
                    text += value.replace("%", "%%")
                elif (
                    isinstance(piece, cst.FormattedStringExpression)
                    and piece.conversion in _CONVERSIONS
                    and piece.equal is None
                    and (spec := _percent_spec(piece)) is not None
                ):
                    text += spec or _CONVERSIONS[piece.conversion]
                    values.append(piece.expression)
                else:
                    return None
        else:
            return None
    if not values:
        return None
    return repr(text), values


def _adjacent(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The literals of an implicit concatenation (``"a" f"{b}" "c"``), left to right."""
    if isinstance(node, cst.ConcatenatedString):
        return [*_adjacent(node.left), *_adjacent(node.right)]
    return [node]


def _percent_spec(piece: cst.FormattedStringExpression) -> str | None:
    """``%<spec>`` for a piece's format spec, ``""`` when it has none, None when ``%`` cannot say it."""
    if piece.format_spec is None:
        return ""
    spec = piece.format_spec
    if (
        piece.conversion is None
        and len(spec) == 1
        and isinstance(spec[0], cst.FormattedStringText)
        and _PERCENT_SPEC.fullmatch(spec[0].value)
    ):
        return "%" + spec[0].value
    return None


def _collapsed(node: cst.If) -> cst.If:
    """``if a:`` holding only ``if b:`` (no ``else`` on either) as ``if a and b:``."""
    body = node.body
    if node.orelse is not None or not isinstance(body, cst.IndentedBlock):
        return node
    if len(body.body) != 1 or not isinstance(body.body[0], cst.If):
        return node
    inner = body.body[0]
    if inner.orelse is not None or not isinstance(inner.body, cst.IndentedBlock):
        return node
    if body.header.comment is not None and inner.body.header.comment is not None:
        return node  # two line comments for one line: leave them where HF wrote them
    statements = list(inner.body.body)
    first = statements[0]
    if not isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return node
    statements[0] = first.with_changes(
        leading_lines=(*inner.leading_lines, *first.leading_lines)
    )
    header = inner.body.header if inner.body.header.comment else body.header
    test = cst.BooleanOperation(
        left=_operand(node.test), operator=cst.And(), right=_operand(inner.test)
    )
    return node.with_changes(
        test=test,
        body=inner.body.with_changes(body=statements, header=header),
    )


def _operand(test: cst.BaseExpression) -> cst.BaseExpression:
    """``test`` parenthesized where ``and`` would bind it differently."""
    loose = isinstance(test, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or (
        isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or)
    )
    if loose and not test.lpar:
        return test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return test


def _renamed(node):
    """A comprehension whose loop variable is ambiguous, renamed unless the new name is read there already."""
    target = node.for_in.target
    if not isinstance(target, cst.Name) or target.value not in _AMBIGUOUS:
        return node
    new = _AMBIGUOUS[target.value]
    code = cst.Module([]).code_for_node(node)
    if re.search(rf"\b{new}\b", code):
        return node
    return node.visit(_Names(target.value, new))


class _Names(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original, updated):
        return (
            updated.with_changes(value=self.new)
            if updated.value == self.old
            else updated
        )
