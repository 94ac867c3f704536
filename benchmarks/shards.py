"""Shard benchmark: a 30-port manifest run whole, then as ``--mmport-shard 1/2`` and ``2/2``, wall times side by side.

    python benchmarks/shards.py                  # 30 ports, 2 workers, 2 probes, 1 setting
    python benchmarks/shards.py --workers 1 --probes 4 --copies 2
    python benchmarks/shards.py --mixed --probes 8 --settings 3   # 30 families, the plugin's defaults

Ten quick families (docs/coverage.md) are scaffolded and copied as
``benchmarks/manifest.py`` does; with ``--mixed``, thirty families of all
three modalities, one port each (``manifest.MIXED``). Each run is pytest over the manifest with
mmport's plugin in a fresh interpreter, as the matrix workflow of docs/ci.md
runs it (``-n WORKERS --dist loadscope``). The whole run records each port's
seconds (``--mmport-store-durations``), so the two shards that follow, each
on as many workers, are balanced by that file. The JUnit file of each run
says which ports it verified: the benchmark checks that the shards together
ran every port exactly once, each with all its checks, and prints each run's
wall time and its ports' seconds (pytest's times, summed from the JUnit file).
The three runs alternate ``--rounds`` times, and each wall time is the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from importlib.metadata import entry_points
from pathlib import Path
from xml.etree import ElementTree as ET

from manifest import FAMILIES, MIXED, scaffold, write_manifest

ROOT = Path(__file__).resolve().parents[1]
SHARDS = 2


def plugin_args() -> list[str]:
    """``-p mmport.pytest_plugin`` where the pytest11 entry point is not installed (a checkout on PYTHONPATH)."""
    installed = any(
        ep.value == "mmport.pytest_plugin" for ep in entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "mmport.pytest_plugin"]


def run(project: Path, junit: Path, args: argparse.Namespace, *extra: str) -> float:
    """One pytest run over the project's manifest; its wall time (a failing port stops the benchmark)."""
    command = [sys.executable, "-m", "pytest", "pyproject.toml", *plugin_args()]
    command += [f"--mmport-probes={args.probes}", f"--mmport-settings={args.settings}"]
    if args.workers > 1:
        command += [f"-n={args.workers}", "--dist=loadscope"]
    command += ["-q", f"--junitxml={junit}", *extra]
    # The interpreter must import this checkout's mmport, whatever is installed.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    started = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[3:])} failed (exit {done.returncode}): {done.stdout.strip()[-600:]}"
        )
    return wall


def ports_run(junit: Path) -> tuple[Counter[str], dict[str, float]]:
    """From a pytest JUnit file: how many checks each port ran, and the port's seconds."""
    checks: Counter[str] = Counter()
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        port = case.get("classname", "").removeprefix("pyproject.toml.")
        checks[port] += 1
        seconds[port] = seconds.get(port, 0.0) + float(case.get("time", 0))
    return checks, seconds


def figures(wall: float, junit: Path) -> dict:
    """A run's figures: its ports, wall time and the sum of its ports' seconds."""
    checks, seconds = ports_run(junit)
    return {
        "ports": len(checks),
        "wall_s": round(wall, 1),
        "ports_s": round(sum(seconds.values()), 1),
    }


def exactly_once(
    labels: list[str], whole: Counter[str], shards: list[Counter[str]]
) -> bool:
    """Whether the shards together ran every port of the manifest once: all its checks, in one shard.

    A port run in both shards would count its checks twice, one in neither not at all.
    """
    together: Counter[str] = sum(shards, Counter())
    return set(whole) == set(labels) and together == whole


def measure(project: Path, labels: list[str], args: argparse.Namespace) -> dict:
    """``--rounds`` rounds of the whole run then each shard; the median wall times the docs quote.

    The first whole run records the durations that balance every round's shards.
    """
    whole_junit = project / "whole.xml"
    whole_walls: list[float] = []
    shard_walls: list[list[float]] = [[] for _ in range(SHARDS)]
    for round_ in range(args.rounds):
        store = ["--mmport-store-durations"] if round_ == 0 else []
        whole_walls.append(run(project, whole_junit, args, *store))
        for index in range(1, SHARDS + 1):
            junit = project / f"shard-{index}.xml"
            shard_walls[index - 1].append(
                run(project, junit, args, f"--mmport-shard={index}/{SHARDS}")
            )
    whole = figures(statistics.median(whole_walls), whole_junit)
    whole_counts, _ = ports_run(whole_junit)
    recorded = json.loads((project / ".mmport_durations.json").read_text())
    shards, counts = [], []
    for index, walls in enumerate(shard_walls, start=1):
        junit = project / f"shard-{index}.xml"
        shard = figures(statistics.median(walls), junit)
        ran, _ = ports_run(junit)
        shard["recorded_s"] = round(sum(recorded[port] for port in ran), 1)
        shard["wall_vs_whole"] = round(statistics.median(walls) / whole["wall_s"], 2)
        shard["walls_s"] = [round(wall, 1) for wall in walls]
        shards.append({"shard": f"{index}/{SHARDS}", **shard})
        counts.append(ran)
    return {
        "families": "mixed" if args.mixed else "quick",
        "workers": args.workers,
        "probes": args.probes,
        "settings": args.settings,
        "rounds": args.rounds,
        "whole": {
            **whole,
            "recorded_s": round(sum(recorded.values()), 1),
            "walls_s": [round(wall, 1) for wall in whole_walls],
        },
        "shards": shards,
        "every_port_exactly_once": exactly_once(labels, whole_counts, counts),
        "load_average": [round(load, 1) for load in os.getloadavg()],
    }


def main() -> None:
    """Scaffold, run whole and sharded, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--copies",
        type=int,
        default=3,
        help="copies of each family (default 3: 30 ports)",
    )
    parser.add_argument("--probes", type=int, default=2)
    parser.add_argument(
        "--settings", type=int, default=1, help="request settings per modality"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="whole run and shards, alternating, this many times; medians (default 3)",
    )
    parser.add_argument(
        "--mixed",
        action="store_true",
        help="thirty families of all modalities, one port each, instead of copies of the quick ten",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="mmport-shards-") as tmp:
        project = Path(tmp)
        families, copies = (MIXED, 1) if args.mixed else (FAMILIES, args.copies)
        entries = scaffold(families, copies, project)
        write_manifest(project, entries)
        result = measure(project, [port for _, port in entries], args)
    print(json.dumps(result, indent=2))
    if not result["every_port_exactly_once"]:
        raise SystemExit("the shards did not run every port exactly once")


if __name__ == "__main__":
    main()
