"""How much generated processing modules repeat each other.

Scaffolds each family into its own directory and, for every pair of the
processing modules, finds the longest run of lines the two share, read as a
reviewer's duplicate check reads them: blank lines, comments, docstring-free
punctuation and import lines are passed over and white space is folded.
Two runs are counted: identical lines, and lines of the same shape (names,
strings and numbers replaced), which is what the class skeletons every vLLM
port shares look like.

    python benchmarks/port_overlap.py                      # the ten families
    python benchmarks/port_overlap.py llava qwen2_vl --top 5
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmport.analyzers import analyze
from mmport.render import render_port
from mmport.sources import resolve

FAMILIES = (
    "llava",
    "paligemma",
    "gemma3",
    "mistral3",
    "idefics3",
    "qwen2_vl",
    "llava_next_video",
    "llava_onevision",
    "qwen2_audio",
    "glmasr",
)
_SKIPPED = re.compile(r"^(#|from \S+ import|import |[\])}(\[{,:]+$)")
_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_LITERAL = re.compile(r"\"[^\"]*\"|'[^']*'|\b\d+(\.\d+)?\b")


def code_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, folded text)`` of the lines a duplicate check compares."""
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


def main() -> int:
    """Scaffold the families and print each pair's longest shared runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=FAMILIES)
    parser.add_argument("--top", type=int, default=8, help="pairs to print")
    args = parser.parse_args()
    if len(args.families) < 2:
        parser.error("give two families or more")
    modules: dict[str, list[tuple[int, str]]] = {}
    with tempfile.TemporaryDirectory():
        for family in args.families:
            files = render_port(analyze(resolve(family)))
            (processing,) = [f for f in files if f.name.endswith("_processing.py")]
            modules[family] = code_lines(processing.text)
    rows = []
    for x, y in itertools.combinations(modules, 2):
        same = longest_run([t for _, t in modules[x]], [t for _, t in modules[y]])
        alike = longest_run(
            [shape(t) for _, t in modules[x]], [shape(t) for _, t in modules[y]]
        )
        rows.append((same, alike, x, y))
    total = sum(len(lines) for lines in modules.values())
    print(f"{len(modules)} processing modules, {total} compared lines")
    print("identical run | same-shape run | pair (identical run's first lines)")
    for same, alike, x, y in sorted(rows, key=lambda r: (-r[0][0], -r[1][0]))[
        : args.top
    ]:
        at_x = modules[x][same[1]][0] if same[0] else 0
        at_y = modules[y][same[2]][0] if same[0] else 0
        print(f"{same[0]:>13} | {alike[0]:>14} | {x}:{at_x} ~ {y}:{at_y}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
