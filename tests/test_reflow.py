"""Comments, docstrings and strings rewrapped at vLLM's line length, code and values unchanged."""

from __future__ import annotations

import ast
import textwrap
import logging
import warnings
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
    from mmport.render.tidy import tidy

    source = "lengths = [3, 5]\ntokens = [(l - 1) // 2 for l in lengths]\nl = 7\n"
    renamed = tidy(source)
    assert "for l in" not in renamed and renamed.endswith("l = 7\n")
    assert _run(renamed)["tokens"] == _run(source)["tokens"]


HF_WARNINGS = """
import logging
import warnings

logger = logging.getLogger("tidy-probe")


def standardize(size, min_pixels=None, ratio=0.5):
    if min_pixels is not None:
        warnings.warn("`min_pixels` is deprecated", FutureWarning)
        logger.warning(f"size {size!r} at {ratio * 100:.1f}% of {min_pixels}, {{kept}}\\n" "as is")
    logger.info(f"{ratio:^8} stays an f-string: %-format cannot centre")
    if ratio > 0.25:
        # HF explains the inner condition here
        if min_pixels is None or ratio < 1:
            size = (size[0] * 2, size[1])
    return size
"""


def test_hf_warnings_and_log_calls_pass_vllms_lint_and_say_the_same(caplog) -> None:
    from mmport.render.lint import findings
    from mmport.render.tidy import tidy

    tidied = tidy(HF_WARNINGS)
    before = findings(HF_WARNINGS, "probe.py")
    after = findings(tidied, "probe.py")

    def rules(found: tuple[str, ...]) -> list[str]:
        return sorted(c.split()[1] for c in found if c.split()[1] != "E501")

    assert rules(before) == ["B028", "G004", "G004", "SIM102"]
    # Only the call whose format spec %-format cannot say is left as it is.
    assert rules(after) == ["G004"] and ":12:" in next(c for c in after if "G004" in c)

    assert "# HF explains the inner condition here" in tidied

    def said(code: str, *args, **kwargs) -> tuple:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tidy-probe"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                size = _run(code)["standardize"](*args, **kwargs)
        messages = [r.getMessage() for r in caplog.records]
        return size, messages, [str(w.message) for w in caught]

    for kwargs in (
        {"min_pixels": 9},
        {},
        {"ratio": 0.1},
        {"ratio": 2.0, "min_pixels": 1},
    ):
        assert said(tidied, (3, 4), **kwargs) == said(HF_WARNINGS, (3, 4), **kwargs)


def test_a_long_comment_rewraps_with_the_lines_that_continue_its_sentence() -> None:
    """The tail of a long comment line joins the line that continues it (lower case), not a
    short line of its own; a line starting a sentence of its own stays where it was."""
    source = (
        "def f():\n"
        "    # InstructBlipVideoForConditionalGeneration's own methods, run as this class's: they read the config and\n"
        "    # the modules built below, which this class keeps under HF's names.\n"
        "    # HF: models/instructblipvideo/modeling_instructblipvideo.py:1052\n"
        "    return 1\n"
    )
    wrapped = reflow(source, 88)
    comments = [
        line.strip() for line in wrapped.splitlines() if line.strip().startswith("#")
    ]
    words = lambda text: " ".join(  # noqa: E731
        line.lstrip("# ") for line in text.splitlines() if line.strip().startswith("#")
    ).split()
    assert words(wrapped) == words(source)
    assert all(len(line) <= 88 for line in wrapped.splitlines())
    assert comments[-1].startswith("# HF: ")
    # The paragraph takes as few lines as its words need: no short line left between.
    paragraph = " ".join(c.lstrip("# ") for c in comments[:-1])
    lines = [c.removeprefix("# ") for c in comments[:-1]]
    assert lines == textwrap.wrap(paragraph, 88 - len("    # "))


def test_a_long_docstring_line_rewraps_with_the_lines_that_continue_it() -> None:
    """As with comments: a long docstring line's tail joins the next line when that
    line goes on with its sentence; doctest lines stay as written."""
    source = (
        '"""Qwen2_5OmniForConditionalGeneration for vLLM: the image, video, audio encoders run HF\'s own\n'
        'modules and feature paths; the language model is vLLM\'s own implementation."""\n'
        "\n\n"
        "def f():\n"
        '    """Summary.\n\n'
        "        >>> some_function_with_a_long_name([7, 3, 3, 8], [2], {7, 8}, lambda w: (w, w, w, w))\n"
        "        ([7, 9, 8], [0, 1, 1, 2])\n"
        '    """\n'
    )
    wrapped = reflow(source, 88)
    module_doc = wrapped.split('"""')[1]
    assert module_doc.split() == source.split('"""')[1].split()
    assert module_doc.splitlines() == textwrap.wrap(" ".join(module_doc.split()), 85)
    doctest = [line for line in source.splitlines() if ">>>" in line]
    assert doctest[0] in wrapped.splitlines()
    assert "        ([7, 9, 8], [0, 1, 1, 2])" in wrapped.splitlines()
