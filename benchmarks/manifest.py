"""Manifest benchmark: one ``mmport verify --manifest`` over 20 generated ports, wall time against the ports' own.

    python benchmarks/manifest.py                # 20 ports, 2 workers, print the figures
    python benchmarks/manifest.py --workers 4 --copies 3
    python benchmarks/manifest.py gemma3 mistral3 pixtral   # other families (each copied --copies times)

Ten quick families (docs/coverage.md) are scaffolded once each and copied
``--copies`` times into a temporary project whose pyproject.toml lists every
copy; the run is the installed CLI in a fresh interpreter, as CI runs it (a
pytest session of mmport's plugin, the ports on ``--workers`` pytest-xdist
workers). A port's own verify time is its report's ``seconds`` (verify_port
alone, without the interpreter start or the torch import), so the ratio

    wall / (sum of the ports' own seconds / workers)

charges the run with everything it adds: starting pytest and its workers,
importing torch and transformers in each, handing out ports and the idle
tail. The target is at most 1.3. ``benchmarks/shards.py`` splits the same
ports into two ``--mmport-shard`` runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Quick, passing families of docs/coverage.md (about 1-3 s each there).
FAMILIES = (
    "llava",
    "paligemma",
    "vipllava",
    "blip-2",
    "instructblip",
    "colpali",
    "colqwen2",
    "deepseek_vl",
    "janus",
    "granite4_vision",
)

# Thirty passing families of docs/coverage.md across the three modalities, one port each:
# a manifest like a project's own, where ports take seconds, not the quick ten's fraction of one.
MIXED = (
    "aya_vision",
    "blip-2",
    "cohere2_vision",
    "deepseek_vl",
    "gemma3",
    "got_ocr2",
    "idefics3",
    "instructblip",
    "janus",
    "lighton_ocr",
    "llava",
    "llava_next",
    "mistral3",
    "ovis2",
    "paligemma",
    "glm4v",
    "instructblipvideo",
    "internvl",
    "llava_next_video",
    "llava_onevision",
    "qwen2_5_vl",
    "qwen2_vl",
    "qwen3_vl",
    "video_llava",
    "audioflamingo3",
    "glmasr",
    "granite_speech",
    "musicflamingo",
    "qwen2_audio",
    "vibevoice",
)


def scaffold(
    families: tuple[str, ...], copies: int, project: Path
) -> list[tuple[str, str]]:
    """Scaffold each family once, copy it ``copies`` times under ``project``; (ref, port path) pairs."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.sources import resolve

    entries = []
    for family in families:
        spec = analyze(resolve(family))
        first = project / "ports" / f"{family}-0"
        write_files(render_port(spec), first, force=True)
        for copy in range(copies):
            target = project / "ports" / f"{family}-{copy}"
            if copy:
                shutil.copytree(first, target)
            entries.append(
                (family, f"ports/{family}-{copy}/{spec.module_name}_processing.py")
            )
    return entries


def write_manifest(project: Path, entries: list[tuple[str, str]]) -> Path:
    """``project/pyproject.toml`` listing every (ref, port)."""
    lines = (
        ["[tool.mmport]", "ports = ["]
        + [f'    {{ ref = "{ref}", port = "{port}" }},' for ref, port in entries]
        + ["]"]
    )
    path = project / "pyproject.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(manifest: Path, workers: int, probes: int) -> dict:
    """Run the manifest once; the figures the docs quote."""
    reports = manifest.parent / "reports.json"
    junit = manifest.parent / "junit.xml"
    command = [
        sys.executable,
        "-m",
        "mmport",
        "verify",
        "--manifest",
        str(manifest),
        "--workers",
        str(workers),
    ]
    command += ["--probes", str(probes), "--json", str(reports), "--junit", str(junit)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"the manifest run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}"
        )
    own = [report["seconds"] for report in json.loads(reports.read_text())]
    ideal = sum(own) / workers
    return {
        "ports": len(own),
        "workers": workers,
        "probes": probes,
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "sum_own_s": round(sum(own), 1),
        "ideal_s": round(ideal, 1),
        "ratio": round(wall / ideal, 2),
    }


def main() -> None:
    """Scaffold, run, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--copies",
        type=int,
        default=2,
        help="copies of each family (default 2: 20 ports of the ten)",
    )
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument(
        "families",
        nargs="*",
        help=f"model_types to scaffold (default: {' '.join(FAMILIES)})",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mmport-manifest-") as tmp:
        manifest = write_manifest(
            Path(tmp),
            scaffold(tuple(args.families) or FAMILIES, args.copies, Path(tmp)),
        )
        print(json.dumps(measure(manifest, args.workers, args.probes), indent=2))


if __name__ == "__main__":
    main()
