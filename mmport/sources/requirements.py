"""Packages the code a user asks mmport to run imports, and what to say when one is missing.

Code a snapshot ships (``auto_map``) or a processor kept outside it
(``--processor-code``) may import more than transformers: ``import einops``,
``from timm.layers import ...``. Two ways it shows, both one line:

- transformers' ``check_imports`` reads a remote module's imports before it runs
  any of it and raises an ``ImportError`` listing the packages it cannot find;
  :func:`missing_packages` finds the same imports, with their lines, by reading
  the modules with ``ast`` (nothing is imported, so ``inspect`` can report
  them too);
- an import the check skips (in a sibling module, or code run later) fails
  while the code runs: :func:`raised_at` finds the code's own frame and
  :func:`unimportable` says what it lacks.

A missing top-level package is advice to install it; a name missing from an
installed package (transformers, or another) is advice to install the release
the code was written for. Worked example: ``processing_x.py`` line 3 reads
``import einops`` and einops is not installed::

    missing_packages(snapshot_dir, ["processing_x.py"])
    == [MissingPackage("einops", "processing_x.py", 3, "import einops")]
    not_installed(that, "the snapshot's ")
    == "the snapshot's processing_x.py:3 needs the package `einops`, which is not installed (pip install einops)"
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mmport.errors import one_line
from mmport.hf.code import REMOTE_CODE_PACKAGE
from mmport.hf.lazyimports import function_only_imports

__all__ = [
    "MissingPackage",
    "missing_packages",
    "not_installed",
    "raised_at",
    "unimportable",
]


@dataclass(frozen=True)
class MissingPackage:
    """A top-level package some code imports that is not installed here, and the import's file, line and code."""

    package: str
    file: str
    line: int
    code: str
    # Imported only inside function bodies: needed only when that code runs
    # (mmport loads the module without it, see mmport.hf.lazyimports).
    lazy: bool = False

    @property
    def where(self) -> str:
        """``processing_x.py:3``."""
        return f"{self.file}:{self.line}"


def missing_packages(root: Path, files: Iterable[str]) -> list[MissingPackage]:
    """Packages ``files`` (paths under ``root``) and the modules of ``root`` they import need but lack.

    Imports follow transformers' ``check_imports`` rule: those inside a ``try``
    or under ``if is_<package>_available()`` are optional, so not required.
    A package a module imports only inside functions is ``lazy``.
    Nothing is imported; one entry per package, at its first import.
    """
    found: dict[str, MissingPackage] = {}
    queue, seen = list(files), set()
    while queue:
        name = queue.pop(0)
        if name in seen or not (root / name).is_file():
            continue
        seen.add(name)
        lines, tree = _parse(root / name)
        lazy = function_only_imports(root / name)
        for node in _required_imports(tree):
            queue += _local_modules(root, name, node)
            for top in _top_names(node):
                if (
                    top not in found
                    and not _is_local(root, top)
                    and importlib.util.find_spec(top) is None
                ):
                    found[top] = MissingPackage(
                        top,
                        name,
                        node.lineno,
                        lines[node.lineno - 1].strip(),
                        lazy=top in lazy,
                    )
    return list(found.values())


def _parse(path: Path) -> tuple[list[str], ast.Module]:
    """A module's lines and tree; one that does not parse has no imports to report (running it says why)."""
    text = path.read_text(errors="replace")
    try:
        return text.splitlines(), ast.parse(text)
    except SyntaxError:
        return [], ast.Module(body=[], type_ignores=[])


def _required_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports transformers requires of a module (``dynamic_module_utils.get_imports``' walk)."""
    if isinstance(node, ast.Try) or (
        isinstance(node, ast.If) and _checks_availability(node.test)
    ):
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    for child in ast.iter_child_nodes(node):
        yield from _required_imports(child)


def _checks_availability(test: ast.expr) -> bool:
    """Does an ``if`` test call one of transformers' ``is_<package>_available`` checks?"""
    from transformers.utils import import_utils

    names = (
        getattr(call.func, "id", "")
        for call in ast.walk(test)
        if isinstance(call, ast.Call)
    )
    return any(
        name
        and (
            hasattr(import_utils, name)
            or re.fullmatch(r"is_flash_attn\w*available", name)
        )
        for name in names
    )


def _top_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The top-level packages an absolute import needs (none for a relative one)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    return [node.module.split(".")[0]] if node.level == 0 and node.module else []


def _local_modules(
    root: Path, importer: str, node: ast.Import | ast.ImportFrom
) -> list[str]:
    """The files under ``root`` an import reads: ``from .helpers import x``, ``from . import helpers``,
    or an absolute import of a sibling (``import helpers``) or of ``root``'s own package."""
    if isinstance(node, ast.ImportFrom) and node.level:
        base = Path(importer).parent
        for _ in range(node.level - 1):
            base = base.parent
        dotted = (
            [f"{node.module}"] if node.module else [alias.name for alias in node.names]
        )
    else:
        base = Path()
        dotted = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
        # ``from pkg.models import x`` where ``root`` is the package ``pkg``: the path below it.
        dotted = [
            name.split(".", 1)[1] if name.startswith(root.name + ".") else name
            for name in dotted
        ]
    paths = [base / (name.replace(".", "/") + ".py") for name in dotted if name]
    return [str(path) for path in paths if (root / path).is_file()]


def _is_local(root: Path, top: str) -> bool:
    """Is ``top`` a module of ``root`` itself (a sibling file, a subpackage, or the package ``root`` is)?"""
    return top == root.name or (root / f"{top}.py").is_file() or (root / top).is_dir()


def not_installed(missing: list[MissingPackage], owner: str) -> str:
    """One line for packages ``owner``'s code (``"the snapshot's "``) imports that are not installed.

    The pip name given is the import name: the two differ for some packages
    (``cv2``), and no table of such names is kept here.
    """
    install = "pip install " + " ".join(m.package for m in missing)
    if len(missing) == 1:
        only = missing[0]
        return f"{owner}{only.where} needs the package `{only.package}`, which is not installed ({install})"
    listed = ", ".join(f"`{m.package}` ({m.where})" for m in missing)
    return f"{owner}code needs packages that are not installed: {listed} ({install})"


def raised_at(
    exc: BaseException, owns: Callable[[Path], bool]
) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback in a file ``owns`` accepts, if any."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if owns(Path(frame.filename))
    ]
    return frames[-1] if frames else None


def unimportable(exc: ImportError, where: str) -> str:
    """What an import at ``where`` (``"the snapshot's processing_x.py:7"``) lacks, and what to do about it.

    A top-level package that is not installed: install it. A name an installed
    package lacks (transformers, or another): the release the code was written for.
    """
    top = (exc.name or "").split(".")[0]
    if top and importlib.util.find_spec(top) is None:
        return f"{where} needs the package `{top}`, which is not installed (pip install {top})"
    # Python says which name in its message only: "cannot import name 'X' from 'Y'".
    name = re.search(r"cannot import name '([^']+)'", str(exc))
    missing = (
        f"no `{name[1]}` in `{exc.name}`"
        if name
        else f"no module `{exc.name}`"
        if exc.name
        else one_line(exc)
    )
    # A snapshot's sibling modules import under HF's package for remote code: transformers decides those.
    package = (
        "transformers" if top in ("", "transformers", REMOTE_CODE_PACKAGE) else top
    )
    version = _version(package)
    under = f"{package} {version}" if version else f"the installed {package}"
    return f"{where} does not import under {under}: {missing}; install the {package} release the code was written for, or update its code"


def _version(package: str) -> str | None:
    """The installed version of the distribution named ``package``, if one goes by that name."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
