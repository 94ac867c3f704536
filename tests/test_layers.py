"""The layer rule of docs/architecture.md, checked on every import mmport makes.

What each part may import is a set of import-linter contracts in pyproject.toml
(``[tool.importlinter]``); :func:`test_mmport_keeps_its_contracts` runs them as
``lint-imports`` does, and a copy of mmport with one import added shows they
catch it. import-linter compares modules, not the names imported from them, so
one rule stays here: nothing imports another part's ``_private`` module or
name, read with the stdlib ``ast`` from every module (module level and inside
functions alike; relative imports resolved).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import mmport

ROOT = Path(mmport.__file__).parent
REPO = ROOT.parent

# `lint-imports`, run by this interpreter (its script may not be on PATH).
LINT_IMPORTS = [
    sys.executable,
    "-c",
    "from importlinter.cli import lint_imports_command; lint_imports_command()",
]


def lint_imports(repo: Path) -> subprocess.CompletedProcess[str]:
    """Run the contracts of ``repo``'s pyproject.toml on the ``mmport`` inside ``repo``."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run(
        [*LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_mmport_keeps_its_contracts() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo / "mmport", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", repo)
    return repo


def test_a_verify_module_importing_analyzers_breaks_the_contracts(tmp_path) -> None:
    repo = _copy(tmp_path)
    with (repo / "mmport" / "verify" / "checks.py").open("a") as module:
        module.write(
            "\n\ndef _reference():\n    import mmport.analyzers  # deferred, and still a dependency\n"
        )
    result = lint_imports(repo)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts")[1]
    assert "verify never imports analyzers or spec" in broken
    assert "verify may import" in broken
    assert "mmport.verify.checks -> mmport.analyzers" in broken


def test_a_new_part_needs_a_place_in_the_layers(tmp_path) -> None:
    repo = _copy(tmp_path)
    (repo / "mmport" / "newpart.py").write_text("import json\n")
    result = lint_imports(repo)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "mmport.newpart" in result.stdout.split("Broken contracts")[1]


# ---- private modules and names, which import-linter does not see ----


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(
    node: ast.AST, module: str, is_package: bool
) -> Iterator[tuple[str, str | None]]:
    """``(module, name)`` for each import statement ``node`` makes (``name`` None for ``import x``)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            # A relative import: resolve against the importing module's package.
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[: len(package) - node.level + 1]
            base = ".".join(anchor + ([node.module] if node.module else []))
        for alias in node.names:
            yield base, alias.name


def _part(dotted: str, root: Path) -> tuple[str, list[str]] | None:
    """The top-level part of mmport that ``dotted`` lies in, and its path below mmport; None outside mmport."""
    head, *rest = dotted.split(".")
    if head != root.name:
        return None
    return (rest[0] if rest else ""), rest


def _resolved(target: str, name: str | None, root: Path) -> str:
    """``from mmport import verify`` imports the part ``verify``; ``from mmport import __version__`` the root."""
    if (
        target == root.name
        and name
        and ((root / name).is_dir() or (root / f"{name}.py").exists())
    ):
        return f"{target}.{name}"
    return target


def private_imports(root: Path = ROOT) -> list[str]:
    """Every import under ``root`` (a package directory) of another part's private module or name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        _, below = _part(module, root)
        own = below[0] if below else ""
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            for target, name in _imported(node, module, path.name == "__init__.py"):
                dotted = _resolved(target, name, root)
                located = _part(dotted, root)
                if located is None:
                    continue
                other, rest = located
                if other not in ("", own) and (
                    any(map(_private, rest)) or (name is not None and _private(name))
                ):
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    found.append(
                        f"{where}: {own} imports {dotted}{'.' + name if name else ''}, private to {other}"
                    )
    return list(
        dict.fromkeys(found)
    )  # one line per statement and module, however many names it imports


def test_no_part_imports_another_parts_private_module_or_name() -> None:
    assert private_imports() == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "mmport"
    for relpath, code in {"__init__.py": "", **files}.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code))
    return root


def test_private_imports_are_caught(tmp_path) -> None:
    root = _package(
        tmp_path,
        {
            "hf/__init__.py": "",
            "hf/quiet.py": "def _helper(): ...\n",
            "sources/__init__.py": "",
            "sources/_quiet.py": "",
            "sources/snapshot.py": "from ._quiet import q\n",  # its own private module: fine
            "analyzers/__init__.py": """
                from mmport.sources._quiet import q
                from mmport.hf.quiet import _helper

                def later():
                    from ..sources import _quiet  # deferred and relative, and still private to sources
            """,
        },
    )
    found = private_imports(root)
    assert any(
        "mmport/analyzers/__init__.py:2" in f and "private to sources" in f
        for f in found
    )
    assert any(
        "mmport/analyzers/__init__.py:3" in f and "private to hf" in f for f in found
    )
    assert any(
        "mmport/analyzers/__init__.py:6" in f and "private to sources" in f
        for f in found
    )
    assert len(found) == 3
