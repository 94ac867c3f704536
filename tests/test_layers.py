"""The layer rule of docs/architecture.md, checked on every import mmport makes.

Each top-level part of ``mmport`` (a package such as ``verify/`` or a module
such as ``media.py``) may import only the parts its row of :data:`ALLOWED`
names, besides itself and the root package (``__version__``). Imports are
read with the stdlib ``ast`` from every module, at module level and inside
functions alike: a deferred import is still a dependency. Nothing may import
another part's ``_private`` module or name.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import mmport

ROOT = Path(mmport.__file__).parent

# What each part may import (itself and the root package aside). Lower parts first.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    # The rule a port follows at item edges: the analysis runs it, render copies its source.
    "edgetokens": frozenset(),
    "media": frozenset({"errors"}),
    "spec": frozenset({"media", "errors"}),
    "hf": frozenset({"media", "errors"}),
    "runtime": frozenset({"hf", "media", "errors"}),
    "pool": frozenset({"errors"}),
    "sources": frozenset({"hf", "media", "errors", "spec"}),
    "analyzers": frozenset({"hf", "sources", "media", "spec", "errors", "edgetokens"}),
    "render": frozenset({"spec", "errors", "edgetokens"}),
    "verify": frozenset({"hf", "sources", "runtime", "media", "errors", "serve"}),
    # serve/ is verify's engine check: it reports in verify's terms (Failure, HFReference).
    "serve": frozenset({"hf", "sources", "runtime", "media", "errors", "verify"}),
    "manifest": frozenset({"pool", "verify", "runtime", "sources", "hf", "media", "errors"}),
    "console": frozenset({"spec", "media", "errors"}),
    "cli": frozenset(
        {"analyzers", "console", "edgetokens", "errors", "hf", "manifest", "media", "pool", "render", "runtime", "serve", "sources", "spec", "verify"}
    ),
    "__main__": frozenset({"cli"}),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
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
    if target == root.name and name and ((root / name).is_dir() or (root / f"{name}.py").exists()):
        return f"{target}.{name}"
    return target


def violations(root: Path = ROOT) -> list[str]:
    """Every import under ``root`` (a package directory) that breaks :data:`ALLOWED` or reaches into a private module."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        _, below = _part(module, root)
        own = below[0] if below else ""
        if own and own not in ALLOWED:
            found.append(f"{path.relative_to(root.parent)}: '{own}' has no row in ALLOWED")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            for target, name in _imported(node, module, path.name == "__init__.py"):
                dotted = _resolved(target, name, root)
                located = _part(dotted, root)
                if located is None:
                    continue
                other, rest = located
                where = f"{path.relative_to(root.parent)}:{node.lineno}"
                if other not in ("", own) and other not in ALLOWED.get(own, ()):
                    found.append(f"{where}: {own} imports {dotted} ({other} is not below {own})")
                if other not in ("", own) and (any(map(_private, rest)) or (name is not None and _private(name))):
                    found.append(f"{where}: {own} imports {dotted}{'.' + name if name else ''}, private to {other}")
    return list(dict.fromkeys(found))  # one line per statement and module, however many names it imports


def test_mmport_keeps_its_layers() -> None:
    assert violations() == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "mmport"
    for relpath, code in {"__init__.py": "", **files}.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code))
    return root


def test_a_verify_module_importing_analyzers_is_caught(tmp_path) -> None:
    root = _package(
        tmp_path,
        {
            "verify/__init__.py": "",
            "verify/reference.py": """
                from mmport.hf.processor import call_processor

                def reference():
                    from mmport.analyzers import x  # deferred, and still a dependency
                    return x
            """,
            "analyzers/__init__.py": "x = 1",
            "hf/__init__.py": "",
            "hf/processor.py": "",
        },
    )
    found = violations(root)
    assert len(found) == 1
    assert "mmport/verify/reference.py:5: verify imports mmport.analyzers" in found[0]


def test_relative_and_private_imports_are_caught(tmp_path) -> None:
    root = _package(
        tmp_path,
        {
            "hf/__init__.py": "",
            "hf/quiet.py": "from ..sources import snapshot\n",
            "sources/__init__.py": "",
            "sources/_quiet.py": "",
            "sources/snapshot.py": "from ._quiet import q\n",  # its own private module: fine
            "analyzers/__init__.py": "from mmport.sources._quiet import q\nfrom mmport.hf.quiet import _helper\n",
        },
    )
    found = violations(root)
    assert any("mmport/hf/quiet.py:1: hf imports mmport.sources" in f for f in found)
    assert any("mmport/analyzers/__init__.py:1" in f and "private to sources" in f for f in found)
    assert any("mmport/analyzers/__init__.py:2" in f and "private to hf" in f for f in found)
    assert len(found) == 3


def test_a_new_part_needs_a_row(tmp_path) -> None:
    root = _package(tmp_path, {"newpart.py": "import json\n"})
    assert violations(root) == ["mmport/newpart.py: 'newpart' has no row in ALLOWED"]
