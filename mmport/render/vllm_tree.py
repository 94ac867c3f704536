"""``mmport scaffold REF --vllm-tree DIR``: the port written into a vLLM source tree, ready for a pull request.

Beside the files, a vLLM model pull request registers the architecture in
``vllm/model_executor/models/registry.py`` (``_MULTIMODAL_MODELS``) and, in a
source checkout, names an example checkpoint for vLLM's tests
(``tests/models/registry.py``, ``_MULTIMODAL_EXAMPLE_MODELS``). Both are
dict literals kept in alphabetical order; each edit is a libcst transform that
inserts the entry after the last key that sorts before it (or replaces the
value of an existing key), so a second run changes nothing. What the tree
does not hold (a wheel ships no ``tests/``) is reported, not invented.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from mmport.errors import OutputExistsError, VllmTreeError
from mmport.render.lint import LINE_LENGTH

__all__ = ["TreeEdit", "check_tree", "register_entry", "write_into_tree"]

MODELS_DIR = Path("vllm/model_executor/models")
REGISTRY = MODELS_DIR / "registry.py"
TESTS_REGISTRY = Path("tests/models/registry.py")
PROCESSING_TESTS = Path("tests/models/multimodal/processing")
MULTIMODAL_TABLE = "_MULTIMODAL_MODELS"
EXAMPLES_TABLE = "_MULTIMODAL_EXAMPLE_MODELS"


@dataclass(frozen=True)
class TreeEdit:
    """One file the tree run wrote or edited, or left as it was (and why)."""

    path: Path
    action: str  # "wrote", "edited", "unchanged", "skipped"
    detail: str = ""


def _key(element: cst.BaseDictElement) -> str | None:
    if isinstance(element, cst.DictElement) and isinstance(
        element.key, cst.SimpleString
    ):
        return str(element.key.evaluated_value)
    return None


_Comma = cst.Comma | cst.MaybeSentinel


def _whitespace(comma: _Comma) -> cst.ParenthesizedWhitespace | None:
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.whitespace_after
    return None


def _comment_lines(element: cst.BaseDictElement) -> bool:
    """Whether whole comment lines (a section heading) follow ``element``."""
    found = _whitespace(element.comma)
    return bool(found and any(line.comment for line in found.empty_lines))


def _without_comment_lines(comma: _Comma) -> _Comma:
    found = _whitespace(comma)
    if found is None:
        return comma
    assert isinstance(comma, cst.Comma)
    return comma.with_changes(whitespace_after=found.with_changes(empty_lines=[]))


def _without_trailing_comment(comma: _Comma) -> _Comma:
    found = _whitespace(comma)
    if found is None:
        return comma
    assert isinstance(comma, cst.Comma)
    first = found.first_line.with_changes(
        comment=None, whitespace=cst.SimpleWhitespace("")
    )
    return comma.with_changes(whitespace_after=found.with_changes(first_line=first))


def _indented_as(comma: _Comma, other: _Comma) -> _Comma:
    """``comma`` leading to a line indented as ``other`` leads to its next line."""
    found, model = _whitespace(comma), _whitespace(other)
    if found is None or model is None:
        return comma
    assert isinstance(comma, cst.Comma)
    return comma.with_changes(
        whitespace_after=found.with_changes(
            indent=model.indent, last_line=model.last_line
        )
    )


def _plain(comma: _Comma) -> _Comma:
    """A comma leading to the next entry's line, with no comment on either side."""
    return _without_comment_lines(_without_trailing_comment(comma))


class _DictEntry(cst.CSTTransformer):
    """Insert (or replace the value of) one key of a module-level dict literal named ``table``."""

    def __init__(self, table: str, key: str, value: str) -> None:
        self.table, self.key, self.value = table, key, value
        self.found = False

    def leave_Assign(
        self, original_node: cst.Assign, updated_node: cst.Assign
    ) -> cst.Assign:
        target = updated_node.targets[0].target
        if not (
            isinstance(target, cst.Name)
            and target.value == self.table
            and isinstance(updated_node.value, cst.Dict)
        ):
            return updated_node
        self.found = True
        return updated_node.with_changes(value=self._edited(updated_node.value))

    def _value(self, indent: str) -> cst.BaseExpression:
        one_line = f"{indent}{self.key!r}: {self.value},".replace("'", '"')
        if len(one_line) <= LINE_LENGTH or not self.value.startswith("("):
            return cst.parse_expression(self.value)
        # As ruff formats a tuple too long for one line: one item per line.
        items = cst.parse_expression(self.value)
        assert isinstance(items, cst.Tuple)
        inner = indent + "    "
        text = (
            "(\n"
            + "".join(
                f"{inner}{cst.Module([]).code_for_node(e.value)},\n"
                for e in items.elements
            )
            + f"{indent})"
        )
        return cst.parse_expression(text)

    def _edited(self, table: cst.Dict) -> cst.Dict:
        elements = list(table.elements)
        keys = [_key(e) for e in elements]
        indent = " " * 4
        value = self._value(indent)
        if self.key in keys:
            at = keys.index(self.key)
            old = elements[at]
            assert isinstance(old, cst.DictElement)
            if old.value.deep_equals(value):
                return table
            elements[at] = old.with_changes(value=value)
            return table.with_changes(elements=elements)
        # vLLM's tables open with their main section (``# [Decoder-only]``); later
        # sections start after a comment line. A new architecture joins the first.
        section_end = next(
            (i for i in range(1, len(elements)) if _comment_lines(elements[i - 1])),
            len(elements),
        )
        before = [
            i
            for i, k in enumerate(keys[:section_end])
            if k is not None and k < self.key
        ]
        at = before[-1] + 1 if before else 0
        if at == 0:
            # The first entry: its lead-in (the section comment) is the table's brace's.
            entry_comma = _plain(elements[0].comma)
        else:
            # Between two entries: the new one takes what led to the next (its comment
            # lines), and its predecessor keeps only its own line's comment.
            previous = elements[at - 1]
            entry_comma = _without_trailing_comment(previous.comma)
            lead = _without_comment_lines(previous.comma)
            if at == len(elements) and len(elements) > 1:
                # After the last entry: the predecessor's comma led to the closing
                # brace; it now leads to an entry's line, as the others' commas do.
                lead = (
                    _indented_as(lead, elements[at - 2].comma)
                    if _whitespace(lead)
                    else _plain(elements[at - 2].comma)
                )
            elements[at - 1] = previous.with_changes(comma=lead)
        entry = cst.DictElement(
            key=cst.SimpleString(f'"{self.key}"'), value=value, comma=entry_comma
        )
        elements.insert(at, entry)
        return table.with_changes(elements=elements)


def register_entry(source: str, table: str, key: str, value: str) -> str:
    """``source`` with ``key: value`` in the dict literal ``table``, in alphabetical place."""
    module = cst.parse_module(source)
    transform = _DictEntry(table, key, value)
    edited = module.visit(transform)
    if not transform.found:
        raise VllmTreeError(f"no dict literal named {table} in the file")
    return edited.code


def _edited_registry(
    path: Path, table: str, key: str, value: str
) -> tuple[str, TreeEdit]:
    """The registry file's new text (not yet written) and what the edit is."""
    before = path.read_text()
    try:
        after = register_entry(before, table, key, value)
    except VllmTreeError as exc:
        raise VllmTreeError(f"{path}: {exc}") from None
    if after == before:
        return after, TreeEdit(path, "unchanged", f"{table} already lists {key}")
    return after, TreeEdit(path, "edited", f"{table}: {key}")


def check_tree(tree: Path) -> None:
    """Refuse a directory that is no vLLM source tree (before any slow work)."""
    if not (tree / REGISTRY).is_file():
        raise VllmTreeError(f"'{tree}' is not a vLLM source tree: it has no {REGISTRY}")


def write_into_tree(
    files: list,
    tree: Path,
    *,
    module: str,
    architecture: str,
    example: str,
    force: bool = False,
) -> list[TreeEdit]:
    """Write the rendered port's ``files`` into the vLLM tree ``tree`` and register it.

    The model and processing modules go to ``vllm/model_executor/models/``;
    the parity test, where the tree has vLLM's tests, to
    ``tests/models/multimodal/processing/``. A module vLLM already has is
    never overwritten without ``force``. ``example`` is the checkpoint named
    for vLLM's tests.
    """
    from mmport.render import write_files

    check_tree(tree)
    models = [f for f in files if not f.name.startswith("test_")]
    tests = [f for f in files if f.name.startswith("test_")]
    has_tests = (tree / "tests").is_dir()
    _refuse_overwrite(tree, models, tests if has_tests else [], force)
    # Every registry edit is worked out before anything is written: a registry
    # mmport cannot edit leaves the tree as it was.
    registries = _registry_edits(tree, module, architecture, example)
    edits = [
        TreeEdit(path, "wrote")
        for path in write_files(models, tree / MODELS_DIR, force=True)
    ]
    if has_tests:
        edits += [
            TreeEdit(path, "wrote")
            for path in write_files(tests, tree / PROCESSING_TESTS, force=True)
        ]
    else:
        edits.append(
            TreeEdit(
                tree / "tests", "skipped", "the tree has no tests/ (a wheel ships none)"
            )
        )
    for text, edit in registries:
        if edit.action == "edited":
            edit.path.write_text(text)
        edits.append(edit)
    if not (tree / TESTS_REGISTRY).is_file():
        edits.append(
            TreeEdit(
                tree / TESTS_REGISTRY,
                "skipped",
                "the tree has no tests registry (a wheel ships none)",
            )
        )
    return edits


def _refuse_overwrite(tree: Path, models: list, tests: list, force: bool) -> None:
    """Refuse, without ``force``, to write over a module or parity test the tree already has."""
    taken = [(tree / MODELS_DIR, f) for f in models]
    taken += [(tree / PROCESSING_TESTS, f) for f in tests]
    existing = [
        where / f.name for where, f in taken if f.conflicts_with(where / f.name)
    ]
    if existing and not force:
        names = ", ".join(str(p.relative_to(tree)) for p in existing)
        raise OutputExistsError(
            f"the vLLM tree already has {names}; pass --force to overwrite"
        )


def _registry_edits(
    tree: Path, module: str, architecture: str, example: str
) -> list[tuple[str, TreeEdit]]:
    """The model registry's edited text, and (where the tree has one) the tests registry's, each with its edit."""
    registries = [
        _edited_registry(
            tree / REGISTRY,
            MULTIMODAL_TABLE,
            architecture,
            f'("{module}", "{architecture}")',
        )
    ]
    if (tree / TESTS_REGISTRY).is_file():
        registries.append(
            _edited_registry(
                tree / TESTS_REGISTRY,
                EXAMPLES_TABLE,
                architecture,
                f'_HfExamplesInfo("{example}")',
            )
        )
    return registries
