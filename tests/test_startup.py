"""``mmport --help`` without typer: the pages mmport.launch prints are the ones typer prints.

mmport.launch serves ``mmport``, ``mmport --help`` and ``mmport COMMAND --help``
from mmport/launch/pages.py, rendered from the typer app. These tests render
every page again with typer, at several terminal widths and under both program
names, and compare; ``python3 -m pytest tests/test_startup.py --update-golden``
rewrites the pages. How long a start takes is benchmarks/startup.py's to
measure, not a test's.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from unittest import mock

import pytest
import typer

import mmport
from mmport import launch
from mmport.cli import app
from mmport.launch import pages

REPO = Path(mmport.__file__).resolve().parents[1]
PAGES_FILE = REPO / "mmport" / "launch" / "pages.py"
REGENERATE = "python3 -m pytest tests/test_startup.py --update-golden"
# The program names typer's usage line takes: the console script, and `python3 -m mmport`.
PROGRAMS = ("mmport", "python -m mmport")
# Terminal widths at which the pages serve (typer wraps at 78 from 80 columns on) and narrower ones.
WIDE, NARROW = (80, 81, 200), (50, 60, 79)
HEAVY = ("torch", "transformers", "typer", "click", "rich", "mmport.cli")

# The console script pip writes for [project.scripts] mmport = "mmport.launch:main".
CONSOLE_SCRIPT = """\
import re
import sys
from mmport.launch import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def page_args() -> list[tuple[str, ...]]:
    """Every command line served from the pages: bare, ``--help``, and ``COMMAND --help`` for each command of the app."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return [(), ("--help",), *[(name, "--help") for name in sorted(commands)]]


def typer_prints(program: str, args: tuple[str, ...], columns: int) -> str:
    """What the typer app prints on stdout for ``program ARGS`` on a terminal ``columns`` wide."""
    out = io.StringIO()
    # COLUMNS is what click's HelpFormatter reads (through shutil) to wrap help.
    with (
        mock.patch.dict(os.environ, COLUMNS=str(columns)),
        contextlib.redirect_stdout(out),
    ):
        code = app(list(args), prog_name=program, standalone_mode=False)
    assert code == 0, f"{program} {' '.join(args)} is not a help page: exit {code}"
    return out.getvalue()


def pages_module(rendered: dict[tuple[str, ...], str]) -> str:
    """The text of mmport/launch/pages.py holding ``rendered``, one source line per line of a page."""
    lines = [
        '"""The help pages of ``mmport``, as its typer app prints them on a terminal 80 columns wide or wider.',
        "",
        f"Generated from mmport.cli's app by ``{REGENERATE}``;",
        "do not edit: tests/test_startup.py fails when the app's help and these pages differ.",
        '"""',
        "",
        "# The width typer wrapped the pages to (click: min(columns, 80) - 2).",
        "WIDTH = 78",
        "",
        "# (program name, *arguments) -> what `program arguments` prints.",
        "PAGES: dict[tuple[str, ...], str] = {",
    ]
    for key, text in rendered.items():
        parts = [json.dumps(part) for part in key]
        lines.append(f"    ({', '.join(parts)}{',' if len(parts) == 1 else ''}): (")
        lines += [
            f"        {json.dumps(line, ensure_ascii=False)}"
            for line in text.splitlines(keepends=True)
        ]
        lines.append("    ),")
    return "\n".join([*lines, "}", ""])


def render_pages() -> dict[tuple[str, ...], str]:
    """Every page, rendered by typer at 80 columns."""
    return {
        (program, *args): typer_prints(program, args, 80)
        for program in PROGRAMS
        for args in page_args()
    }


def test_pages_are_what_typer_prints(request) -> None:
    expected = pages_module(render_pages())
    if request.config.getoption("--update-golden"):
        PAGES_FILE.write_text(expected)
        importlib.reload(pages)
    diff = "".join(
        difflib.unified_diff(
            PAGES_FILE.read_text().splitlines(True),
            expected.splitlines(True),
            "pages.py",
            "typer",
        )
    )
    assert not diff, f"mmport/launch/pages.py is stale; run `{REGENERATE}`:\n{diff}"


@pytest.mark.parametrize("columns", WIDE + NARROW)
@pytest.mark.parametrize("program", PROGRAMS)
def test_a_page_is_served_only_where_typer_prints_it_alike(
    program: str, columns: int
) -> None:
    for args in page_args():
        served = launch.help_page(args, program, columns, {})
        if columns in WIDE:
            assert served == typer_prints(program, args, columns), (
                program,
                args,
                columns,
            )
        else:
            assert served is None, (
                f"typer wraps at {columns - 2} on a terminal {columns} wide; the pages at 78"
            )


@pytest.mark.parametrize(
    "program, args, environ",
    [
        ("mmport", ("--debug", "--help"), {}),
        ("mmport", ("--help", "verify"), {}),
        ("mmport", ("inspect",), {}),
        ("mmport", ("--version",), {}),
        ("mmport", ("verify", "--help", "llava"), {}),
        ("mmport", ("-h",), {}),
        (
            "mmport-dev",
            ("--help",),
            {},
        ),  # a renamed script: typer names it in its usage line
        ("mmport", ("--help",), {"_MMPORT_COMPLETE": "bash_complete"}),
        (
            "python -m mmport",
            ("--help",),
            {"_PYTHON _M MMPORT_COMPLETE": "bash_complete"},
        ),
    ],
)
def test_every_other_command_line_goes_to_typer(
    program: str, args: tuple[str, ...], environ: dict[str, str]
) -> None:
    assert launch.help_page(args, program, 80, environ) is None


def test_program_name_follows_click() -> None:
    from typer._click.utils import _detect_program_name

    cases = [
        (
            "/venv/bin/mmport",
            types.SimpleNamespace(__package__=None),
        ),  # the console script
        ("/venv/bin/mmport", types.SimpleNamespace(__package__="")),
        ("/venv/bin/mmport", types.SimpleNamespace()),
        (
            "/src/mmport/__main__.py",
            types.SimpleNamespace(__package__="mmport"),
        ),  # python -m mmport
        (
            "/src/mmport/launch/__init__.py",
            types.SimpleNamespace(__package__="mmport.launch"),
        ),
    ]
    for path, main_module in cases:
        assert launch.program_name(path, main_module) == _detect_program_name(
            path, main_module
        )  # type: ignore[arg-type]


@pytest.mark.parametrize("columns", [None, "120", "0", "-3", "wide"])
def test_terminal_columns_follows_shutil(columns: str | None, monkeypatch) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert launch.terminal_columns() == shutil.get_terminal_size().columns


def test_the_console_script_starts_in_launch() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mmport": "mmport.launch:main"}


def _imports(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reported importing."""
    return set(re.findall(r"^import time:.*\|\s+(\S+)$", stderr, flags=re.MULTILINE))


def _run(argv: list[str], columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("args", [(), ("--help",), ("verify", "--help")])
def test_python_m_mmport_help_imports_neither_typer_nor_torch(
    args: tuple[str, ...],
) -> None:
    done = _run([sys.executable, "-X", "importtime", "-m", "mmport", *args])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == typer_prints("python -m mmport", args, 200)
    imported = _imports(done.stderr)
    assert "mmport.launch.pages" in imported
    assert not [m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY]


def test_console_script_help_imports_neither_typer_nor_torch(tmp_path) -> None:
    script = tmp_path / "mmport"
    script.write_text(CONSOLE_SCRIPT)
    done = _run([sys.executable, "-X", "importtime", str(script), "scaffold", "--help"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == typer_prints("mmport", ("scaffold", "--help"), 200)
    assert not [
        m for m in _imports(done.stderr) if m.split(".")[0] in HEAVY or m in HEAVY
    ]


def test_a_narrow_terminal_gets_typer_s_own_wrapping() -> None:
    done = _run([sys.executable, "-m", "mmport", "verify", "--help"], columns=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == typer_prints("python -m mmport", ("verify", "--help"), 60)
    assert max(map(len, done.stdout.splitlines())) <= 58


def test_a_usage_error_is_still_one_line_and_exit_2() -> None:
    done = _run([sys.executable, "-m", "mmport", "--no-such-option"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert (
        len(done.stderr.strip().splitlines()) == 1 and "--no-such-option" in done.stderr
    )


@pytest.mark.parametrize("columns", [200, 60])  # the page, and typer
def test_a_reader_gone_ends_it_quietly_with_exit_1(columns: int) -> None:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "mmport", "verify", "--help"]
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # type: ignore[union-attr]
    stderr = process.stderr.read()  # type: ignore[union-attr]
    assert (process.wait(timeout=300), stderr) == (1, b"")
