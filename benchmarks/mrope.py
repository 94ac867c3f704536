"""Which M-RoPE families serve: every family of the installed transformers with HF rotary positions of its own.

    python benchmarks/mrope.py                 # every such family, print the table
    python benchmarks/mrope.py qwen3_vl glm4v  # only these

A family is M-RoPE when a modeling module of the installed transformers
defines ``get_rope_index`` (what the generated class calls for its
positions, mmport.analyzers.modeling). Each is scaffolded on its synthetic
snapshot and served by ``verify --serve``'s machinery on one tiny twin (hub
layout, no control run): the row says pass, or the first reason it does not
serve (scaffold, twin, HF generate or the engine), each cut to one line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mrope_families() -> list[str]:
    """model_types whose transformers modeling module defines ``get_rope_index``."""
    import transformers

    models = Path(transformers.__file__).parent / "models"
    return sorted(
        module.parent.name
        for module in models.glob("*/modeling_*.py")
        if "def get_rope_index(" in module.read_text(encoding="utf-8")
    )


def serve_family(model_type: str, timeout_s: int) -> tuple[str, str, float]:
    """(verdict, reason or summary, seconds) of one family served on its hub-layout twin."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.serve import ServeOptions, check_serve
    from mmport.serve.checkpoint import Layout
    from mmport.sources import resolve
    from mmport.verify.report import CheckResult

    started = time.perf_counter()
    try:
        snapshot = resolve(model_type)
        spec = analyze(snapshot)
    except Exception as exc:  # a family that cannot be ported is a row, not a stop
        return "no port", f"{type(exc).__name__}: {exc}", time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix=f"mmport-mrope-{model_type}-") as tmp:
        write_files(render_port(spec), Path(tmp), force=True)
        result = CheckResult("serve")
        options = ServeOptions(
            layouts=(Layout.HUB,), control=False, timeout_s=timeout_s
        )
        check_serve(
            snapshot,
            Path(tmp) / f"{spec.module_name}_processing.py",
            result,
            options=options,
        )
    seconds = time.perf_counter() - started
    if result.skipped:
        return "skipped", result.skipped, seconds
    if result.failures:
        return "fail", result.failures[0].describe(), seconds
    return "pass", result.summary, seconds


def main() -> None:
    """Serve the families named (default: every M-RoPE family) and print one row each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*")
    parser.add_argument(
        "--timeout", type=int, default=600, help="seconds per engine run"
    )
    args = parser.parse_args()
    families = args.families or mrope_families()
    print(f"{len(families)} families, {os.cpu_count()} cores", file=sys.stderr)
    print("| model_type | served | seconds | first reason, or what was compared |")
    print("|---|---|---|---|")
    for family in families:
        verdict, said, seconds = serve_family(family, args.timeout)
        said = " ".join(said.split())[:400].replace("|", "\\|")
        print(f"| {family} | {verdict} | {seconds:.0f} | {said} |", flush=True)


if __name__ == "__main__":
    main()
