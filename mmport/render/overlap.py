"""How much two generated modules repeat each other, read as a duplicate check reads.

Blank lines, comments, import lines and lines of bare punctuation are passed
over and white space is folded; what is left is compared as a run of
identical lines, or as lines of the same shape (names, strings and numbers
replaced), which is what every port's class skeleton shares with another's.
``benchmarks/port_overlap.py`` reports it over scaffolded families;
``tests/test_golden.py`` holds the golden ports to it.
"""

from __future__ import annotations

import re

__all__ = ["code_lines", "longest_run", "shape"]

_SKIPPED = re.compile(r"^(#|from \S+ import|import |[\])}(\[{,:]+$)")
_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_LITERAL = re.compile(r"\"[^\"]*\"|'[^']*'|\b\d+(\.\d+)?\b")


def code_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, folded text)`` of the lines of ``text`` a duplicate check compares."""
    lines, in_import = [], False
    for number, raw in enumerate(text.splitlines(), 1):
        line = " ".join(raw.split())
        if in_import:
            in_import = not line.startswith(")")
            continue
        if line.startswith("from ") and line.endswith("("):
            in_import = True
            continue
        if line and not _SKIPPED.match(line):
            lines.append((number, line))
    return lines


def shape(line: str) -> str:
    """``line`` with its literals and names replaced: what a skeleton shares."""
    return _NAME.sub("n", _LITERAL.sub("s", line))


def longest_run(a: list[str], b: list[str]) -> tuple[int, int, int]:
    """``(length, start in a, start in b)`` of the longest run of equal items."""
    best = (0, 0, 0)
    previous = [0] * (len(b) + 1)
    for i, x in enumerate(a, 1):
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                current[j] = previous[j - 1] + 1
                if current[j] > best[0]:
                    best = (current[j], i - current[j], j - current[j])
        previous = current
    return best
