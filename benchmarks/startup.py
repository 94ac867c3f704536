"""Start-up benchmark: the wall time of ``mmport --help``, and what it imports.

    python benchmarks/startup.py                # print the section
    python benchmarks/startup.py --write        # also rewrite its section of docs/performance.md
    python benchmarks/startup.py --root DIR     # measure another checkout (an older commit, for a before/after)

The checkout is installed into throwaway virtual environments, the ways of
:data:`INSTALLS`: editable (``-e``, a developer's install) or regular (what
``pip install`` gives a user); running the ``.pth`` files of this interpreter's
site-packages (``--system-site-packages``, as every Python on this machine
does) or in a venv of its own that sees the same packages on a plain path
without running those files. Each console script is timed as a fresh process,
as a shell starts it, next to its interpreter doing nothing (``python -c
pass``): the difference is mmport's. The runs of all commands are
interleaved, so a change in the machine's load hits each alike. Figures are
medians: measurements, not test thresholds.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from docsections import write_section

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Start-up"
# Modules the pages of `mmport --help` must not reach (tests/test_startup.py asserts the same).
HEAVY = ("torch", "transformers", "typer", "click", "rich")
# A checkout's own build outputs, left out when it is copied to install from.
BUILD_LEFTOVERS = shutil.ignore_patterns(
    ".git", "__pycache__", "build", "dist", "*.egg-info", ".*cache"
)


@dataclass(frozen=True)
class Install:
    """One way to install the checkout, and what the tables call it."""

    label: str
    editable: bool
    machine_site: bool  # run this interpreter's site-packages' .pth files (--system-site-packages)
    pip_options: tuple[str, ...] = ()


INSTALLS = (
    Install("pip install -e", editable=True, machine_site=True),
    Install("pip install", editable=False, machine_site=True),
    Install("pip install -e, own venv", editable=True, machine_site=False),
    Install(
        "pip install -e (strict mode), own venv",
        editable=True,
        machine_site=False,
        pip_options=("--config-settings", "editable_mode=strict"),
    ),
    Install("pip install, own venv", editable=False, machine_site=False),
)
# The install the other commands and the import profile's middle columns use.
REGULAR = INSTALLS[1]
PROFILED = (INSTALLS[0], INSTALLS[1], INSTALLS[2], INSTALLS[4])


@dataclass(frozen=True)
class Command:
    """One command line to time, and what the tables call it."""

    label: str
    argv: list[str]
    cwd: Path | None = None


def _run_once(command: Command) -> float:
    """Seconds one run of ``command`` takes, from fork to exit; its output is discarded."""
    started = time.perf_counter()
    subprocess.run(
        command.argv,
        cwd=command.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - started


def time_interleaved(commands: list[Command], runs: int) -> dict[str, list[float]]:
    """Each command ``runs`` times, round-robin after one warm-up run each: label -> seconds per run."""
    for command in commands:
        _run_once(command)  # fills the OS's file cache, as any second start finds it
    times: dict[str, list[float]] = {command.label: [] for command in commands}
    for _ in range(runs):
        for command in commands:
            times[command.label].append(_run_once(command))
    return times


def _plain_path_to_packages(venv: Path) -> None:
    """Put this interpreter's packages on ``venv``'s path as a plain directory: importable, their ``.pth`` files not run."""
    python = str(venv / "bin" / "python")
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run(
        [python, "-c", query], capture_output=True, text=True, check=True
    ).stdout.strip()
    (Path(purelib) / "_startup_bench_packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )


def install(root: Path, way: Install, venv: Path) -> Path:
    """``root`` installed ``way`` into a fresh venv at ``venv``; the venv's ``bin`` directory.

    A regular or strict install builds from a copy, so the checkout gets no ``build/`` directory.
    """
    options = ["--system-site-packages"] if way.machine_site else []
    subprocess.run(
        [sys.executable, "-m", "venv", *options, "--without-pip", str(venv)], check=True
    )
    if not way.machine_site:
        _plain_path_to_packages(venv)
    source = root
    if not way.editable or way.pip_options:
        source = venv.parent / f"{venv.name}-source"
        shutil.copytree(root, source, ignore=BUILD_LEFTOVERS)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        *way.pip_options,
    ]
    subprocess.run(
        [*pip, *(["-e"] if way.editable else []), str(source)],
        check=True,
        capture_output=True,
    )
    return venv / "bin"


def commands(root: Path, bins: dict[Install, Path]) -> list[Command]:
    """Every install's ``mmport --help`` and ``python -c pass``; a few other command lines of the regular install."""
    regular = bins[REGULAR]
    return [
        *[
            Command(f"help {way.label}", [str(b / "mmport"), "--help"])
            for way, b in bins.items()
        ],
        *[
            Command(f"pass {way.label}", [str(b / "python"), "-c", "pass"])
            for way, b in bins.items()
        ],
        Command(
            "`mmport verify --help`", [str(regular / "mmport"), "verify", "--help"]
        ),
        Command(
            "`python -m mmport --help` in the checkout (this interpreter)",
            [sys.executable, "-m", "mmport", "--help"],
            root,
        ),
        Command(
            "`mmport --version` (through typer, as every command)",
            [str(regular / "mmport"), "--version"],
        ),
    ]


def _import_lines(argv: list[str]) -> list[tuple[int, str, float]]:
    """``python -X importtime`` of ``argv``: (depth, module, cumulative ms) per import, in the order printed."""
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for line in done.stderr.splitlines():
        parts = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)", line)
        if parts:
            cumulative, indent, name = parts.groups()
            found.append(((len(indent) - 1) // 2, name, int(cumulative) / 1000))
    return found


def _named(lines: list[tuple[int, str, float]]) -> dict[str, float]:
    """Top-level imports by name, and those one level below as ``parent > child`` (importtime prints children first)."""
    named: dict[str, float] = {}
    children: list[tuple[str, float]] = []
    for depth, name, ms in lines:
        if depth == 0:
            named[name] = ms
            named.update({f"{name} > {child}": value for child, value in children})
            children = []
        elif depth == 1:
            children.append((name, ms))
    return named


def import_profile(argv: list[str], runs: int) -> tuple[dict[str, float], set[str]]:
    """Median cumulative ms of each top import of ``argv`` over ``runs``, and the heavy packages it imported."""
    per_run = [_import_lines(argv) for _ in range(runs)]
    named = [_named(lines) for lines in per_run]
    medians = {
        name: statistics.median(n.get(name, 0.0) for n in named) for name in named[0]
    }
    imported = {name.split(".")[0] for _, name, _ in per_run[0]}
    return medians, {package for package in HEAVY if package in imported}


def install_table(times: dict[str, list[float]]) -> list[str]:
    """One row per install: its ``mmport --help``, its interpreter alone, and the difference."""
    lines = [
        "| install | `mmport --help` median (s) | fastest (s) | `python -c pass` median (s) | the script adds (s) |",
        "|---|---|---|---|---|",
    ]
    for way in INSTALLS:
        help_, alone = times[f"help {way.label}"], times[f"pass {way.label}"]
        part = statistics.median(help_) - statistics.median(alone)
        lines.append(
            f"| {way.label} | {statistics.median(help_):.3f} | {min(help_):.3f} | {statistics.median(alone):.3f} | {part:+.3f} |"
        )
    return lines


def command_table(times: dict[str, list[float]]) -> list[str]:
    """The other command lines timed, with the regular install unless said otherwise."""
    lines = [
        f"| command ({REGULAR.label}, unless said) | median (s) | fastest (s) |",
        "|---|---|---|",
    ]
    for label, seconds in times.items():
        if not label.startswith(("help ", "pass ")):
            lines.append(
                f"| {label} | {statistics.median(seconds):.3f} | {min(seconds):.3f} |"
            )
    return lines


def profile_table(profiles: dict[str, dict[str, float]], top: int) -> list[str]:
    """The ``top`` costliest imports of any profile, one column per profile, in ms."""
    worst: dict[str, float] = {}
    for profile in profiles.values():
        for name, ms in profile.items():
            worst[name] = max(worst.get(name, 0.0), ms)
    names = sorted(worst, key=worst.__getitem__, reverse=True)[:top]
    lines = [
        f"| import | {' | '.join(f'{label} (ms)' for label in profiles)} |",
        f"|---|{'---|' * len(profiles)}",
    ]
    for name in names:
        cells = " | ".join(
            f"{profile[name]:.1f}" if name in profile else "-"
            for profile in profiles.values()
        )
        lines.append(f"| `{name}` | {cells} |")
    return lines


@dataclass(frozen=True)
class Measured:
    """What one run of the benchmark found."""

    times: dict[str, list[float]]
    profiles: dict[str, dict[str, float]]
    heavy: set[str]
    load: tuple[float, float]
    runs: int


def section(m: Measured) -> list[str]:
    """The Start-up section of docs/performance.md."""
    flags = (
        " `PYTHONDONTWRITEBYTECODE` is set: no bytecode is cached for an editable install's modules."
        if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else ""
    )
    return [
        HEADING,
        "",
        f"Measured by `python benchmarks/startup.py --write` on {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load average {m.load[0]:.1f} at the start and {m.load[1]:.1f} at the end (the machine is "
        f"shared); median and fastest of {m.runs} runs of each command, interleaved.{flags}",
        "",
        *install_table(m.times),
        "",
        *command_table(m.times),
        "",
        "*Installs*: each in a throwaway venv. The first two run the `.pth` files of this machine's",
        "site-packages (`--system-site-packages`), as every Python here does: the `site > ...` rows",
        "below, among them the finder of the editable install of mmport that this machine's Python",
        "has (a `pip install -e` puts one there). An *own venv* sees the same packages on a plain path",
        "without running their `.pth` files: a Python start with nothing but the one install. A strict",
        "editable install links the package's files instead of installing a finder (files added later",
        "need a reinstall). *The script adds*: its median less its interpreter's alone.",
        "",
        f"What `mmport --help` imports (`python -X importtime`, cumulative, median of 5 runs; a child of a top-level "
        f"import as `parent > child`). Of {', '.join(HEAVY)} it imports: {', '.join(sorted(m.heavy)) or 'none'}.",
        "",
        *profile_table(m.profiles, top=12),
        "",
        "`mmport`, `mmport --help` and `mmport COMMAND --help` print pages that typer rendered from",
        "the app (`mmport/launch/pages.py`, kept current by `tests/test_startup.py`) without importing",
        "typer, on terminals of 80 columns or more and when piped; narrower terminals, and every other",
        "command line, go through typer. pip's console script imports `re` itself.",
        "",
    ]


def measure(root: Path, runs: int) -> Measured:
    """Install ``root`` every way of :data:`INSTALLS`, time every command and profile the imports."""
    started_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mmport-startup-") as tmp:
        bins = {
            way: install(root, way, Path(tmp) / f"venv{i}")
            for i, way in enumerate(INSTALLS)
        }
        times = time_interleaved(commands(root, bins), runs)
        profiles, heavy = {}, set()
        for way in PROFILED:
            profiles[way.label], found = import_profile(
                [str(bins[way] / "python"), str(bins[way] / "mmport"), "--help"], runs=5
            )
            heavy |= found
    return Measured(times, profiles, heavy, (started_load, os.getloadavg()[0]), runs)


def main() -> None:
    """Measure; print the section, and with ``--write`` put it into docs/performance.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write",
        action="store_true",
        help="rewrite the Start-up section of docs/performance.md",
    )
    parser.add_argument(
        "--runs", type=int, default=40, help="runs of each command (default 40)"
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout to install and measure (default: this one)",
    )
    args = parser.parse_args()
    text = "\n".join(section(measure(args.root.resolve(), args.runs)))
    print(text)
    if args.write:
        write_section(HEADING, text)


if __name__ == "__main__":
    main()
