"""The project's own code held to the standard it holds generated ports to: ruff finds nothing in mmport/.

The rules are pyproject.toml's ``[tool.ruff.lint]``; ruff is a dependency of
mmport (it formats generated ports), so the check runs wherever mmport does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing_in_mmport() -> None:
    ruff = pytest.importorskip("ruff.__main__", reason="ruff is not installed").find_ruff_bin()
    result = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", "mmport"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
