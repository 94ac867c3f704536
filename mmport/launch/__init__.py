"""The ``mmport`` command's entry point: help pages without typer, everything else through :mod:`mmport.cli`.

Importing typer (with the click it carries) takes longer than the interpreter's
own start, and a help page is the same text on every run. So the pages typer
prints for ``mmport``, ``mmport --help`` and ``mmport COMMAND --help`` are
rendered from :data:`mmport.cli.app` into :mod:`mmport.launch.pages`, once per
change of the CLI, and printed from there when the command line is exactly one
of them. tests/test_startup.py renders them again from the app and fails when
they differ (``python3 -m pytest tests/test_startup.py --update-golden``
rewrites the module).

typer wraps help to the terminal: ``min(columns, 80) - 2`` characters, at
least 50 (click's ``HelpFormatter``). The pages are rendered at 78, so they
serve terminals of 80 columns or more and output that is not a terminal (80
columns are assumed then); a narrower terminal goes through typer::

    mmport verify --help        # pages.PAGES["mmport", "verify", "--help"]
    COLUMNS=60 mmport --help    # typer, wrapped at 58
    mmport --debug --help       # not a page: typer
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

from mmport.launch import pages

__all__ = ["help_page", "main", "program_name", "terminal_columns"]

# click's HelpFormatter wraps at max(min(columns, _MAX_WIDTH) - 2, _MIN_WIDTH).
_MAX_WIDTH, _MIN_WIDTH = 80, 50
# What shutil.get_terminal_size assumes when stdout is no terminal and COLUMNS is unset.
_FALLBACK_COLUMNS = 80


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, the width click wraps help to, without importing shutil."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        stdout = sys.__stdout__  # None when Python runs without one
        return os.get_terminal_size(stdout.fileno()).columns or _FALLBACK_COLUMNS  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_COLUMNS


def program_name(path: str | None = None, main_module: ModuleType | None = None) -> str:
    """The name typer's usage line gives the program: ``mmport`` for the console script, ``python -m mmport`` for ``-m``.

    click's rule (``_detect_program_name``): a ``__main__`` without a package ran
    a file, named by its base name; one with a package ran ``python -m`` on it.
    """
    main_module = main_module or sys.modules["__main__"]
    path = path or sys.argv[0]
    package = getattr(main_module, "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = package if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"


def help_page(
    args: Sequence[str], program: str, columns: int, environ: Mapping[str, str]
) -> str | None:
    """What typer prints for ``program ARGS`` on a terminal ``columns`` wide; None where only typer can say.

    A shell asking for completions (``_MMPORT_COMPLETE``) is typer's to answer too.
    """
    if max(min(columns, _MAX_WIDTH) - 2, _MIN_WIDTH) != pages.WIDTH:
        return None
    if f"_{program}_COMPLETE".replace("-", "_").upper() in environ:
        return None
    return pages.PAGES.get((program, *args))


def main() -> None:
    """Console-script entry point: a help page from :mod:`mmport.launch.pages`, or the typer app."""
    page = help_page(sys.argv[1:], program_name(), terminal_columns(), os.environ)
    if page is None:
        from mmport.cli import main as run_app

        run_app()
    else:
        _print(page)


def _print(page: str) -> None:
    """Write ``page`` to stdout; a reader gone (``mmport --help | head -1``) ends it with exit 1, quietly, as click does."""
    try:
        sys.stdout.write(page)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would flush stdout again at exit and complain: point it at devnull first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
