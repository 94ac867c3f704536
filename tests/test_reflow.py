"""Comments, docstrings and strings rewrapped at vLLM's line length, code and values unchanged."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from mmport.render.reflow import reflow

SOURCE = '''
"""A module docstring long enough to run past the line length of eighty-eight characters."""


def describe(processor, ratio, rows):
    """A one-line docstring long enough to run past the line length of eighty-eight chars."""
    # A comment alone on its line, long enough to run past the line length of eighty-eight.
    total = ratio + rows  # a trailing comment, long enough to push its line past eighty-eight
    if ratio > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {ratio / 2:.1f} and {{literal}}"
        )
    text = f"{processor.boi_token}{processor.image_token * rows}{processor.eoi_token}{total}"
    return text


INTRO = "You are given {frame_count} frames from a {duration} [H:MM:SS] video, one after another.\\n"
URL = ["https://huggingface.co/docs/transformers/main/internal/image_processing_utils#anchor"]
'''


def _run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "port.py", "exec"), namespace)
    return namespace


def test_values_are_unchanged_and_lines_fit() -> None:
    wrapped = reflow(SOURCE, 88)
    processor = SimpleNamespace(boi_token="<b>", image_token="I", eoi_token="</b>")
    before, after = _run(SOURCE), _run(wrapped)
    assert after["describe"](processor, 3, 2) == before["describe"](processor, 3, 2)
    for name in ("INTRO", "URL", "__doc__"):
        assert after[name] == before[name] or name == "__doc__"
    try:
        after["describe"](processor, 300, 2)
    except ValueError as exc:
        assert (
            str(exc)
            == "absolute aspect ratio must be smaller than 200, got 150.0 and {literal}"
        )
    # The same statements: only comments, docstring layout and literal splits differ.
    assert len(ast.parse(wrapped).body) == len(ast.parse(SOURCE).body)
    for line in wrapped.splitlines():
        assert len(line) <= 88 or line.endswith("# noqa: E501"), line


def test_short_text_is_left_alone() -> None:
    source = 'def f():\n    """Short."""\n    return "short"  # short\n'
    assert reflow(source, 88) == source


def test_a_split_literal_without_placeholders_is_no_f_string() -> None:
    wrapped = reflow(SOURCE, 88)
    # The piece holding only the escaped braces becomes a plain literal of the same text.
    assert '\n            "{literal}"\n' in wrapped
    assert 'f"{literal}"' not in wrapped and "{{literal}}" not in wrapped


def test_an_ambiguous_comprehension_variable_is_renamed_where_it_is_bound() -> None:
    from mmport.render.reflow import unambiguous

    source = "lengths = [3, 5]\ntokens = [(l - 1) // 2 for l in lengths]\nl = 7\n"
    renamed = unambiguous(source)
    assert "for l in" not in renamed and renamed.endswith("l = 7\n")
    assert _run(renamed)["tokens"] == _run(source)["tokens"]
