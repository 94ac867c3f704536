"""How much generated processing modules repeat each other.

Renders each family's port and, for every pair of the processing modules,
finds the longest run of lines the two share, read as a duplicate check reads
them (``mmport.render.overlap``): identical lines, and lines of the same shape
(names, strings and numbers replaced), which is what the class skeletons every
vLLM port shares look like.

    python benchmarks/port_overlap.py                      # the ten families
    python benchmarks/port_overlap.py llava qwen2_vl --top 5
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmport.analyzers import analyze
from mmport.render import render_port
from mmport.render.overlap import code_lines, longest_run, shape
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


def main() -> int:
    """Scaffold the families and print each pair's longest shared runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=FAMILIES)
    parser.add_argument("--top", type=int, default=8, help="pairs to print")
    args = parser.parse_args()
    if len(args.families) < 2:
        parser.error("give two families or more")
    modules: dict[str, list[tuple[int, str]]] = {}
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
