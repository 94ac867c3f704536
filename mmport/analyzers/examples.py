"""Worked examples kept beside each analyzer, as Fixit keeps them beside each lint rule.

Every analyzer module ends with an ``EXAMPLES`` list: HF-style source
snippets, each with the fact the rule must derive from it (:func:`valid`)
or must refuse to derive (:func:`invalid`)::

    EXAMPLES = [
        valid(
            "paligemma_repeats_a_fixed_sequence_length",
            '''
            class PaliGemmaProcessor:
                def replace_image_token(self, image_inputs, image_idx, **kwargs):
                    return self.image_seq_length * self.image_token
            ''',
            lambda snippet: analyze_replacement(snippet.PaliGemmaProcessor).count.result,
            "processor.image_seq_length",
        ),
        invalid(
            "gemma3_returns_more_than_token_times_count",
            '''
            class Gemma3Processor:
                def replace_image_token(self, image_inputs, image_idx, **kwargs):
                    return self.full_image_sequence
            ''',
            lambda snippet: analyze_replacement(snippet.Gemma3Processor),
            refusal=AnalysisError,
            match="does not return `token \\* count`",
        ),
    ]

``tests/test_analyzer_examples.py`` collects every module's list and runs
each example: :func:`load` writes the snippet to a file and imports it as
a snapshot's own code is imported (under
:data:`~mmport.hf.code.REMOTE_CODE_PACKAGE`), so the analyzers read it with
``inspect`` and libcst as they read HF's modules, every class of it counts
as model code, and the facts' provenance names ``example.py`` and the
snippet's own line numbers.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mmport.hf.code import REMOTE_CODE_PACKAGE
from mmport.spec import Source

__all__ = [
    "EXAMPLES",
    "SNIPPET_FILE",
    "VOCAB_TOKENIZER",
    "Example",
    "invalid",
    "load",
    "snippet_line",
    "valid",
]

# The file name every snippet is loaded from: the ``file`` of the facts' sources.
SNIPPET_FILE = "example.py"

# The tokenizer the examples of rules observed on a live processor (limits, fields, edge
# merges) give their processors: snippet source, prepended to theirs. It answers as an HF
# tokenizer does where mmport asks (ids, special ids, decode); tokenizing by longest match
# over its vocabulary, it merges what its vocabulary holds ("\n\n" + "\n\n" is "\n\n\n\n"), as BPE does.
VOCAB_TOKENIZER = """
import torch


class VocabTokenizer:
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab, special):
        self.vocab = [*special, *vocab]
        self.ids = {token: i for i, token in enumerate(self.vocab)}
        self.all_special_ids = list(range(len(special)))
        self.added_tokens_decoder = {}
        self.init_kwargs = {}

    def encode(self, text, add_special_tokens=True):
        ids, at = [], 0
        while at < len(text):
            token = max((t for t in self.vocab if text.startswith(t, at)), key=len)
            ids.append(self.ids[token])
            at += len(token)
        return ids

    def __call__(self, text, add_special_tokens=True, **kwargs):
        return {"input_ids": self.encode(text)}

    def decode(self, ids, **kwargs):
        return "".join(self.vocab[i] for i in ids)

    def convert_tokens_to_ids(self, token):
        return self.ids[token]


def flat(images):
    # HF's processors take one sample's images nested in a list.
    return [image for sample in images or [] for image in (sample if isinstance(sample, list) else [sample])]
"""

# Each loaded snippet is a module of its own (classes of one name must not collide in inspect).
_SERIAL = itertools.count()


@dataclass(frozen=True)
class Example:
    """One worked example of a rule: a source snippet, how the rule is asked, and its answer.

    ``run`` takes the loaded snippet (a module) and returns the fact, or
    raises ``refusal`` where the rule refuses with an error. A VALID example
    expects ``expected``; an INVALID one expects ``expected`` too, which is the
    rule's "nothing found" (``None`` unless told), or the refusal.
    """

    name: str
    code: str
    run: Callable[[ModuleType], Any]
    expected: Any = None
    is_valid: bool = True
    refusal: type[Exception] | None = None
    match: str = ""


def valid(
    name: str, code: str, run: Callable[[ModuleType], Any], expected: Any
) -> Example:
    """An example the rule recognises: ``run(snippet)`` must equal ``expected``."""
    return Example(name, code, run, expected)


def invalid(
    name: str,
    code: str,
    run: Callable[[ModuleType], Any],
    *,
    expected: Any = None,
    refusal: type[Exception] | None = None,
    match: str = "",
) -> Example:
    """An example the rule must reject: ``run(snippet)`` answers ``expected`` (nothing), or raises ``refusal`` matching ``match``."""
    return Example(name, code, run, expected, False, refusal, match)


def load(code: str, directory: Path) -> ModuleType:
    """Import ``code`` (dedented) from ``directory`` as a snapshot's own module, so the analyzers can read its classes.

    The file lies under a ``transformers_modules`` folder, as HF's copies of a
    snapshot's code do, so provenance shows it by its name
    (:data:`SNIPPET_FILE`); the module is registered in ``sys.modules``, where
    ``inspect`` looks a class's source up.
    """
    folder = directory / f"snippet{next(_SERIAL)}" / REMOTE_CODE_PACKAGE
    folder.mkdir(parents=True)
    path = folder / SNIPPET_FILE
    path.write_text(textwrap.dedent(code).lstrip("\n"))
    name = f"{REMOTE_CODE_PACKAGE}.mmport_example_{folder.parent.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a snippet from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def snippet_line(code: str, text: str) -> Source:
    """The source of the first line of snippet ``code`` that holds ``text``, numbered as :func:`load` writes it."""
    lines = textwrap.dedent(code).lstrip("\n").splitlines()
    number = next(i for i, line in enumerate(lines, 1) if text in line)
    return Source(SNIPPET_FILE, number, lines[number - 1].strip())


# This module's own example: what load gives the analyzers, a class whose source inspect finds.
EXAMPLES = [
    valid(
        "snippet_loaded_as_a_snapshots_own_module",
        """
        class LlavaProcessor:
            image_token = "<image>"
        """,
        lambda snippet: (
            snippet.LlavaProcessor.__module__.startswith(REMOTE_CODE_PACKAGE + "."),
            Path(str(snippet.__file__)).name,
            snippet.LlavaProcessor.image_token,
        ),
        (True, SNIPPET_FILE, "<image>"),
    ),
]
