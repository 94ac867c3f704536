"""vLLM's own lint on a rendered file: its safe fixes applied, what remains reported.

vLLM's pyproject selects pycodestyle, Pyflakes, pyupgrade, bugbear,
simplify, isort and logging-format rules at line length 88, with ``vllm``
first-party for isort; the wheel does not ship that file, so the selection is
kept here. The render step applies ruff's safe fixes under it (import order,
``dict.get(k, None)``) and reports each finding left as ``name:line: CODE
message``.
"""

from __future__ import annotations

import subprocess

from mmport.errors import RenderError

__all__ = [
    "LINE_LENGTH",
    "VLLM_IGNORED",
    "VLLM_RULES",
    "findings",
    "fix",
    "format_code",
]

LINE_LENGTH = 88
# vLLM's [tool.ruff.lint] selection and the ignores it keeps for its model files.
VLLM_RULES = ("E", "F", "UP", "B", "SIM", "I", "G")
VLLM_IGNORED = ("F405", "F403", "E731", "B905", "B007", "UP032")
# No user config read, at vLLM's line length: what ``ruff format`` takes.
_LAYOUT = ["--isolated", f"--line-length={LINE_LENGTH}"]
_SETTINGS = [
    *_LAYOUT,
    "--target-version=py310",
    f"--select={','.join(VLLM_RULES)}",
    f"--ignore={','.join(VLLM_IGNORED)}",
    "--config=lint.isort.known-first-party=['vllm']",
]


def _ruff(
    arguments: list[str], text: str, name: str, settings: list[str] = _SETTINGS
) -> subprocess.CompletedProcess:
    """Run ruff on ``text`` as file ``name`` (stdin), vLLM's settings given.

    ``ruff format`` must succeed; ``ruff check`` exits 1 on findings, which it reports.
    """
    from ruff.__main__ import find_ruff_bin

    try:
        return subprocess.run(
            [find_ruff_bin(), *arguments, *settings, f"--stdin-filename={name}", "-"],
            input=text,
            capture_output=True,
            text=True,
            check=arguments[0] == "format",
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise RenderError(
            f"ruff could not {arguments[0]} the rendered {name}: {exc}"
        ) from None


def format_code(text: str, name: str) -> str:
    """``text`` as ``ruff format`` lays it out at vLLM's line length."""
    return _ruff(["format"], text, name, _LAYOUT).stdout


def fix(text: str, name: str) -> str:
    """``text`` with ruff's safe fixes under vLLM's rules.

    Collapsing nested ``if``s (SIM102) counts as safe here: ruff marks it
    unsafe for the comments it may move, and HF's nested checks, copied,
    carry none that would be lost.
    """
    fixed = _ruff(
        ["check", "--fix", "--no-cache", "--quiet"],
        text,
        name,
        [*_SETTINGS, "--config=lint.extend-safe-fixes=['SIM102']"],
    )
    return fixed.stdout or text


def findings(text: str, name: str) -> tuple[str, ...]:
    """vLLM's lint findings in ``text``, each ``name:line:col: CODE message``."""
    left = _ruff(
        ["check", "--no-cache", "--output-format=concise", "--quiet"], text, name
    )
    return tuple(line for line in left.stdout.splitlines() if line.startswith(name))
