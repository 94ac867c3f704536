"""Shared fixtures: one synthetic-snapshot cache, in-process scaffold, verify and CLI.

Most tests call the library (and the CLI through typer's in-process runner):
a subprocess pays a torch + transformers import (seconds) per call, so only a
handful of tests take that path, to prove the installed command behaves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Pinned before mmport's console exists, so tables lay out the same everywhere.
os.environ["COLUMNS"] = "200"


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite tests/golden from the current templates, and mmport/launch/pages.py from the CLI.",
    )


def pytest_configure(config) -> None:
    """Share synthetic snapshots across test runs through pytest's cache directory.

    The cache key hashes every module that builds or measures a snapshot
    (mmport.sources.fingerprint), so a changed builder never serves a stale one.
    Without pytest's cache (``-p no:cacheprovider``) a private directory is used.
    """
    if os.environ.get("MMPORT_CACHE"):
        return
    cache = getattr(config, "cache", None)
    directory = (
        cache.mkdir("mmport-snapshots")
        if cache is not None
        else tempfile.mkdtemp(prefix="mmport-test-cache-")
    )
    os.environ["MMPORT_CACHE"] = str(directory)


def run_cli(
    *args: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m mmport ARGS`` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "mmport", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=900,
    )


def invoke(*args: str) -> subprocess.CompletedProcess:
    """Run the ``mmport`` CLI in this process; the same result shape as :func:`run_cli`."""
    from typer.testing import CliRunner

    from mmport.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # an unexpected error: show its traceback in the test
    return subprocess.CompletedProcess(
        args, result.exit_code, result.stdout, result.stderr
    )


def scaffold_port(ref: str, out: Path) -> Path:
    """Analyse ``ref`` and render its port into ``out``; the processing module's path."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.sources import resolve

    spec = analyze(resolve(ref))
    write_files(render_port(spec), out, force=True)
    return out / f"{spec.module_name}_processing.py"


def verify_report(
    ref: str, port: Path, *, probes: int = 6, **options
) -> tuple[int, dict]:
    """``mmport verify`` in this process: (exit code as the CLI gives it, the JSON report as a dict).

    One drawn request setting per modality unless told otherwise, as the
    coverage benchmark draws: tests/test_settings.py judges the full set.
    """
    from mmport.errors import verdict_exit_code
    from mmport.verify import verify_port

    options.setdefault("settings_per_modality", 1)
    report = verify_port(ref, port, probes=probes, **options)
    return verdict_exit_code(report.verdict), json.loads(report.to_json())


def failed_checks(report: dict) -> set[str]:
    """The names of the checks a JSON report says failed."""
    return {
        name for name, check in report["checks"].items() if check["status"] == "fail"
    }


def with_support(port_dir: Path, directory: Path) -> Path:
    """``directory`` holding a copy of the support module the ports of ``port_dir`` import
    (a port's edited copy imports it from beside itself, as the original does)."""
    from mmport.render import SUPPORT_MODULE

    if (port_dir / SUPPORT_MODULE).is_file():
        shutil.copy(port_dir / SUPPORT_MODULE, directory / SUPPORT_MODULE)
    return directory


def mutated_port(
    port_dir: Path, model_type: str, old: str, new: str, tmp_path: Path
) -> Path:
    """The generated port of ``model_type`` with ``old`` replaced by ``new`` (which must occur).

    Where ``old`` is not there as written, runs of white space in it match any
    run (the formatter re-indents a line when the code around it changes);
    ``new`` then stands for each whole match.
    """
    name = f"{re.sub(r'[^0-9A-Za-z_]', '_', model_type)}_processing.py"  # blip-2 renders blip_2_processing.py
    source = (port_dir / name).read_text()
    wrong = tmp_path / name
    with_support(port_dir, tmp_path)
    if old in source:
        wrong.write_text(source.replace(old, new))
        return wrong
    pattern = r"\s+".join(re.escape(part) for part in re.split(r"\s+", old))
    assert re.search(pattern, source), f"{old!r} is not in the generated port"
    wrong.write_text(re.sub(pattern, lambda _: new, source))
    return wrong


@pytest.fixture(scope="session")
def scaffolded(tmp_path_factory):
    """Scaffold a reference once per session; returns the output directory."""
    cache: dict[str, Path] = {}

    def make(ref: str) -> Path:
        if ref not in cache:
            out = tmp_path_factory.mktemp(f"port-{Path(ref).name}")
            scaffold_port(ref, out)
            cache[ref] = out
        return cache[ref]

    return make


def construct_job(
    name: str, root: Path, ref: str = "", edit=None, language: bool = True
):
    """The job building the generated class of ``ref`` (default: ``name`` as a
    model_type; its model file changed by ``edit``) for ``construct_ports``, and the
    port's spec; with ``language``, a tiny config of its text model's own family too."""
    from mmport.analyzers import analyze
    from mmport.render import render_port, write_files
    from mmport.serve.construct import (
        ConstructJob,
        language_control_dir,
        twin_config_dir,
    )
    from mmport.sources import resolve

    snapshot = resolve(ref or name)
    spec = analyze(snapshot)
    port_dir = root / name
    write_files(render_port(spec), port_dir)
    if edit is not None:
        model_file = port_dir / f"{spec.module_name}.py"
        model_file.write_text(edit(model_file.read_text()))
    config_dir = twin_config_dir(snapshot, root / f"{name}.config")
    control = (
        language_control_dir(
            snapshot.load_config(), spec.language, root / f"{name}.text"
        )
        if language
        else None
    )
    job = ConstructJob(
        name, port_dir, spec.module_name, spec.architecture, config_dir, control
    )
    return job, spec
