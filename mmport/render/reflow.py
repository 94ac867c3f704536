"""Comments and docstrings wrapped at vLLM's line length, as a contributor writes them.

``ruff format`` lays out code but leaves comments and docstrings as they
are; rendered from templates (and from HF's source lines they cite), many
run past 88 columns, which vLLM's own lint (E501) refuses. This pass
rewraps them after formatting, by tokens, so code is never touched:

- a comment alone on its line becomes as many comment lines as it needs,
  at the same indentation; a comment after code moves above that line;
- a docstring's lines (a string that is a statement of its own) are wrapped
  at their own indentation; a one-line docstring becomes a summary with its
  continuation below, closing quotes on the last line;
- a long one-line string literal becomes adjacent literals, one per line,
  split after a space or a placeholder (``{...}`` of an f-string, never
  inside one); inside brackets in place, elsewhere in parentheses of its
  own. A piece with no placeholder loses its ``f``.

Words longer than the line (a URL, a long path) stay whole.
"""

from __future__ import annotations

import io
import textwrap
import tokenize
from collections import Counter
from collections.abc import Sequence

__all__ = ["reflow"]


def reflow(text: str, width: int) -> str:
    """``text`` with every comment and docstring line longer than ``width`` rewrapped."""
    lines = text.splitlines(keepends=True)
    edits: dict[int, list[str]] = {}  # 0-based line → its replacement lines
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depths = _depths(tokens)
    strings_on = Counter(t.start[0] for t in tokens if t.type == tokenize.STRING)
    merged: set[int] = set()  # comment lines joined to the paragraph above them
    for index, token in enumerate(tokens):
        row = token.start[0] - 1
        if row in merged:
            continue
        if token.type == tokenize.COMMENT and len(lines[row].rstrip("\n")) > width:
            continued = _continuation_rows(lines, row)
            merged.update(continued)
            for r in continued:
                edits[r] = []
            following = [lines[r] for r in continued]
            edits[row] = _comment_lines(lines[row], token, width, following)
        elif (
            token.type == tokenize.STRING
            and strings_on[token.start[0]] == 1
            and _splittable(tokens, index, lines, width)
        ):
            edits[row] = _split_string(lines[row], token, width, depths[index])
        elif token.type == tokenize.STRING and _is_docstring(tokens, index):
            first, last = token.start[0] - 1, token.end[0] - 1
            if any(len(lines[r].rstrip("\n")) > width for r in range(first, last + 1)):
                edits[first] = _docstring_lines(lines, token, width)
                for r in range(first + 1, last + 1):
                    edits[r] = []
    out: list[str] = []
    for row, line in enumerate(lines):
        out.extend(edits.get(row, [line]))
    return _excused("".join(out), width)


def _excused(text: str, width: int) -> str:
    """``text`` with ``# noqa: E501`` on each line still too long (a word longer than the line).

    Not on a line inside a multi-line string, where a comment cannot go.
    """
    lines = text.splitlines(keepends=True)
    inside = {
        row
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.STRING
        for row in range(token.start[0] - 1, token.end[0] - 1)
    }
    for row, line in enumerate(lines):
        body = line.rstrip("\n")
        if len(body) > width and row not in inside and "noqa" not in body:
            lines[row] = f"{body}  # noqa: E501\n"
    return "".join(lines)


def _continuation_rows(lines: list[str], row: int) -> list[int]:
    """The comment lines after a comment alone on ``row`` that continue its sentence.

    A line alone, at the same indentation, starting in lower case or with an
    opening bracket, goes on with the text above it: rewrapped as one
    paragraph, the long line's tail joins it instead of standing as a short
    line of its own. A line starting a sentence (a citation, ``HF: ...``) stays.
    """
    indent = _comment_indent(lines[row])
    if indent is None:
        return []
    rows = []
    for r in range(row + 1, len(lines)):
        if _comment_indent(lines[r]) != indent or not _continues(
            lines[r].strip().lstrip("#").strip()
        ):
            break
        rows.append(r)
    return rows


def _continues(text: str) -> bool:
    """Whether a line's ``text`` goes on with the sentence above it (lower case, a bracket)."""
    return bool(text) and (text[0].islower() or text[0] in "([`")


def _comment_indent(line: str) -> str | None:
    """The indentation of a line holding only a comment, or None for any other line."""
    stripped = line.lstrip()
    return line[: len(line) - len(stripped)] if stripped.startswith("#") else None


def _comment_lines(
    line: str,
    token: tokenize.TokenInfo,
    width: int,
    following: Sequence[str] = (),
) -> list[str]:
    """The comment ``token`` on ``line``, with the ``following`` comment lines that
    continue it, as wrapped comment lines (above the code it followed)."""
    code = line[: token.start[1]].rstrip()
    indent = line[: len(line) - len(line.lstrip())]
    body = " ".join(
        [token.string.lstrip("#").strip()]
        + [text.strip().lstrip("#").strip() for text in following]
    )
    wrapped = _wrap(body, width - len(indent) - 2) or [""]
    comments = [f"{indent}# {chunk}\n" for chunk in wrapped]
    return [*comments, f"{code}\n"] if code else comments


def _is_docstring(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether the string token at ``index`` is a statement of its own (a docstring)."""
    token = tokens[index]
    if not token.string.lstrip("rbuRBU").startswith(('"""', "'''")):
        return False
    before = next(
        (tokens[i] for i in range(index - 1, -1, -1) if tokens[i].type not in _LAYOUT),
        None,
    )
    after = tokens[index + 1] if index + 1 < len(tokens) else None
    starts = before is None or before.type in (
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
    )
    return starts and (
        after is None or after.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
    )


# Tokens that carry no statement: what may stand between a statement's end and a docstring.
_LAYOUT = (tokenize.NL, tokenize.COMMENT, tokenize.ENCODING)


def _depths(tokens: list[tokenize.TokenInfo]) -> list[int]:
    """How many brackets are open at each token."""
    depths, depth = [], 0
    for token in tokens:
        depths.append(depth)
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
    return depths


def _splittable(
    tokens: list[tokenize.TokenInfo], index: int, lines: list[str], width: int
) -> bool:
    """Whether the token at ``index`` is a long one-line, single-quoted string on a long line.

    The caller has made sure it is the line's only string.
    """
    token = tokens[index]
    body = token.string.lstrip("rbfuRBFU")
    return (
        token.start[0] == token.end[0]
        and len(lines[token.start[0] - 1].rstrip("\n")) > width
        and not body.startswith(('"""', "'''"))
        and not _is_docstring(tokens, index)
    )


def _segments(body: str, formatted: bool) -> list[str]:
    """``body`` cut after each space and, in an f-string, after each placeholder."""
    segments, start, depth, i = [], 0, 0, 0
    while i < len(body):
        pair = body[i : i + 2]
        if formatted and depth == 0 and pair in ("{{", "}}"):
            i += 2
            continue
        char = body[i]
        if char == "\\":
            i += 2
            continue
        if formatted and char == "{":
            depth += 1
        elif formatted and char == "}":
            depth -= 1
        i += 1
        if depth == 0 and (char == " " or (formatted and char == "}")):
            segments.append(body[start:i])
            start = i
    segments.append(body[start:])
    return [s for s in segments if s]


def _piece(prefix: str, quote: str, text: str) -> str:
    """One literal of a split string: an f-string only where it has a placeholder."""
    if "f" in prefix.lower() and "{" not in text.replace("{{", ""):
        prefix = prefix.replace("f", "").replace("F", "")
        text = text.replace("{{", "{").replace("}}", "}")
    return f"{prefix}{quote}{text}{quote}"


def _split_string(
    line: str, token: tokenize.TokenInfo, width: int, depth: int
) -> list[str]:
    """``line`` with its string ``token`` as adjacent literals of at most ``width``."""
    indent = line[: len(line) - len(line.lstrip())]
    before, after = line[: token.start[1]], line[token.end[1] :].rstrip("\n")
    alone = not before.strip()
    inner = indent if alone and depth else indent + "    "
    prefix = token.string[: len(token.string) - len(token.string.lstrip("rbfuRBFU"))]
    quote = token.string[len(prefix)]
    body = token.string[len(prefix) + 1 : -1]
    room = width - len(inner) - len(prefix) - 2
    pieces: list[str] = []
    for segment in _segments(body, "f" in prefix.lower()):
        if pieces and len(pieces[-1]) + len(segment) <= room:
            pieces[-1] += segment
        else:
            pieces.append(segment)
    literals = [f"{inner}{_piece(prefix, quote, p)}" for p in pieces]
    if len(literals) < 2:
        return [line]
    if alone and depth:
        return [f"{line}\n" for line in literals[:-1]] + [literals[-1] + after + "\n"]
    return [f"{before}(\n", *(f"{line}\n" for line in literals), f"{indent}){after}\n"]


def _wrap(text: str, width: int) -> list[str]:
    """``text``'s words in lines of at most ``width`` (a longer word stays whole)."""
    return textwrap.wrap(
        text, width=max(width, 20), break_long_words=False, break_on_hyphens=False
    )


def _docstring_lines(
    lines: list[str], token: tokenize.TokenInfo, width: int
) -> list[str]:
    """The docstring ``token`` as lines, each at most ``width`` where its words allow."""
    indent = lines[token.start[0] - 1][: token.start[1]]
    suffix = lines[token.end[0] - 1][token.end[1] :]
    opening = token.string[: len(token.string) - len(token.string.lstrip("rbuRBU")) + 3]
    closing = token.string[-3:]
    body_lines = token.string[len(opening) : -3].split("\n")
    out: list[str] = []
    number = 0
    while number < len(body_lines):
        raw = body_lines[number]
        lead = indent + opening if number == 0 else ""
        tail = closing if number == len(body_lines) - 1 else ""
        # A doctest line is code: kept as written, however long.
        if (
            len(lead) + len(raw) + len(tail) <= width
            or not raw.strip()
            or raw.lstrip().startswith((">>>", "..."))
        ):
            out.append(f"{lead}{raw}{tail}")
            number += 1
            continue
        own = indent if number == 0 else raw[: len(raw) - len(raw.lstrip())]
        # The lines that go on with this one's sentence, at its indentation, are
        # rewrapped with it: its tail joins them instead of standing alone.
        text = raw.strip()
        number += 1
        while number < len(body_lines):
            following = body_lines[number]
            if following[: len(own)] != own or not _continues(following[len(own) :]):
                break
            text = f"{text} {following.strip()}"
            tail = closing if number == len(body_lines) - 1 else ""
            number += 1
        # The closing quotes stay on the last line: its words leave them room.
        first, *_ = _wrap(text, width - len(lead or own) - len(tail))
        rest = _wrap(text[len(first) :].strip(), width - len(own) - len(tail))
        out.append(f"{lead or own}{first}")
        out.extend(f"{own}{chunk}" for chunk in rest)
        if tail:
            out[-1:] = (
                [out[-1] + tail]
                if len(out[-1]) + len(tail) <= width
                else [out[-1], own + tail]
            )
    return [f"{line}\n" for line in out[:-1]] + [out[-1] + suffix]
