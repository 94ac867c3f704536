"""Shared fixtures: one synthetic-snapshot cache per test session."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Synthetic snapshots are built once per session, in a private cache.
os.environ.setdefault("MMPORT_CACHE", tempfile.mkdtemp(prefix="mmport-test-cache-"))


def pytest_addoption(parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite tests/golden from the current templates.")


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m mmport ARGS`` as a user would; capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "mmport", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
        timeout=900,
    )


@pytest.fixture(scope="session")
def scaffolded(tmp_path_factory):
    """Scaffold a model_type once per session; returns the output directory."""
    cache: dict[str, Path] = {}

    def make(ref: str) -> Path:
        if ref not in cache:
            out = tmp_path_factory.mktemp(f"port-{Path(ref).name}")
            result = run_cli("scaffold", ref, "-o", str(out), "--force")
            assert result.returncode == 0, result.stderr
            cache[ref] = out
        return cache[ref]

    return make
