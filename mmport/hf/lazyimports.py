"""Packages remote code imports only inside a function, and loading such code without them.

transformers reads every import of a remote module before running it
(``dynamic_module_utils.check_imports``) and refuses the module when a
package is missing, even one imported in a function body that runs only on a
branch the processor never takes. Molmo-7B-D's torch-resize revision does
that in ``image_preprocessing_molmo.py``::

    def resize_and_pad(image, desired_output_size, resize_method="torch-bilinear", ...):
        ...
        if resize_method == "tensorflow":
            import tensorflow as tf

so transformers asks for TensorFlow although the processor resizes with
torch. An import in a function body runs when that function does, not when
the module loads: :func:`function_only_imports` finds such packages, and
:func:`accept_lazy_imports` has transformers' check skip them when they are
missing. Should the branch run after all, its ``ImportError`` names the
line (``mmport.sources.requirements.raised_at``). Module-level imports are
checked exactly as transformers checks them.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

__all__ = ["accept_lazy_imports", "function_only_imports", "is_installed"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def is_installed(package: str) -> bool:
    """Can ``package`` (a top-level name) be imported here? Nothing is imported."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _imports(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
    """``(top-level package, inside a function body)`` for every absolute import under ``node``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.split(".")[0], in_function
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module.split(".")[0], in_function
    inside = in_function or isinstance(node, _FUNCTIONS)
    for child in ast.iter_child_nodes(node):
        yield from _imports(child, inside)


def function_only_imports(path: Path) -> set[str]:
    """Top-level packages the module at ``path`` imports only inside function bodies.

    A module that does not parse has none (running it says why).
    """
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return set()
    at_load: set[str] = set()
    lazy: set[str] = set()
    for package, in_function in _imports(tree, False):
        (lazy if in_function else at_load).add(package)
    return lazy - at_load


def accept_lazy_imports() -> None:
    """Have transformers' remote-code import check skip missing packages imported only inside functions.

    Called once the user consents to run the code (``--trust-remote-code``);
    installed once per process, so the processor vLLM loads later in the same
    process passes the same check.
    """
    from transformers import dynamic_module_utils

    original = dynamic_module_utils.get_imports
    if getattr(original, "_mmport_lazy", False):
        return

    def get_imports(filename):  # transformers' own signature
        skipped = {p for p in function_only_imports(filename) if not is_installed(p)}
        return [p for p in original(filename) if p not in skipped]

    get_imports._mmport_lazy = True  # type: ignore[attr-defined]  # a marker on our wrapper
    dynamic_module_utils.get_imports = get_imports
