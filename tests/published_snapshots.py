"""Snapshot directories built from published checkpoint files (tests/data/published, see its PROVENANCE.md).

``published_snapshot("internvl2_1b", directory, sentinel)`` copies the
checkpoint's files into ``directory`` and appends to each of its Python
modules a line that records, in ``sentinel``, that the module ran: a test
can then show that nothing of the snapshot ran. The model card's tiling code
(``dynamic_preprocess`` in README.md) is read back with :func:`card_functions`.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

__all__ = ["CHECKPOINTS", "PUBLISHED", "card_functions", "published_snapshot"]

PUBLISHED = Path(__file__).parent / "data" / "published"
# The two InternVL2 chat checkpoints, on different language models (Qwen2, InternLM2).
CHECKPOINTS = ("internvl2_1b", "internvl2_2b")


def published_snapshot(name: str, directory: Path, sentinel: Path) -> Path:
    """``directory`` holding checkpoint ``name``'s published files, each module marked to record when it runs."""
    shutil.copytree(PUBLISHED / name, directory)
    for module in directory.glob("*.py"):
        marker = f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')  # records that this module ran\n"
        module.write_text(module.read_text() + "\n" + marker)
    return directory


def card_functions(readme: Path, names: tuple[str, ...]) -> dict:
    """The model card's top-level functions ``names`` (and those they need), run from its Python code blocks.

    Only function definitions are taken: a card's blocks also load a model
    and import packages (decord) that tests neither have nor need.
    """
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    namespace: dict = {}
    for block in blocks:
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue
        wanted = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in names
        ]
        exec(compile(ast.Module(wanted, []), str(readme), "exec"), namespace)
        if all(name in namespace for name in names):
            return {name: namespace[name] for name in names}
    raise AssertionError(f"{readme} defines none of {names} in one Python block")
