"""The project's own code held to the standard it holds generated ports to: ruff and mypy find nothing in mmport/.

The rules are pyproject.toml's ``[tool.ruff.lint]`` and ``[tool.mypy]``; ruff is a
dependency of mmport (it formats generated ports), so its check runs wherever
mmport does; mypy's runs where mypy is installed (the test extra).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing_in_mmport() -> None:
    ruff = pytest.importorskip(
        "ruff.__main__", reason="ruff is not installed"
    ).find_ruff_bin()
    result = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", "mmport"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted() -> None:
    # Formatted once in its own commit; a change that leaves a file unformatted fails here.
    ruff = pytest.importorskip(
        "ruff.__main__", reason="ruff is not installed"
    ).find_ruff_bin()
    result = subprocess.run(
        [ruff, "format", "--check", "--no-cache", "mmport", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing_in_mmport(monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is not installed")
    # From the repository root, so mypy reads pyproject.toml's [tool.mypy] (files = ["mmport"]).
    monkeypatch.chdir(REPO)
    stdout, stderr, status = api.run([])
    assert status == 0, stdout + stderr
