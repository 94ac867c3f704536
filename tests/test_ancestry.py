"""The modular-ancestry reader: which older model a transformers model's text model derives from."""

from __future__ import annotations

from pathlib import Path

import transformers
from transformers import Gemma4TextConfig, LlamaConfig

from mmport.sources.ancestry import (
    ancestor_model_types,
    derivation,
    text_model_ancestry,
)

MODELS = Path(transformers.__file__).parent


def test_gemma4_text_model_derives_from_gemma3s() -> None:
    # models/gemma4/modular_gemma4.py:
    #     from ..gemma3.modeling_gemma3 import (..., Gemma3TextModel, ...)
    #     class Gemma4TextModel(Gemma3TextModel):
    # Gemma 4 declares its text config in full, so its text model is the one that says.
    assert derivation("gemma4", "Gemma4TextConfig") is None
    chain = text_model_ancestry(Gemma4TextConfig())
    first = chain[0]
    assert (first.name, first.base, first.ancestor) == (
        "Gemma4TextModel",
        "Gemma3TextModel",
        "gemma3",
    )
    assert "gemma3" in ancestor_model_types(
        first
    ) and "gemma3_text" in ancestor_model_types(first)
    # Provenance: the line of the modular file that derives it.
    assert first.source.file == "models/gemma4/modular_gemma4.py"
    line = (MODELS / first.source.file).read_text().splitlines()[first.source.line - 1]
    assert (
        line.strip() == first.source.code == "class Gemma4TextModel(Gemma3TextModel):"
    )
    # The chain goes on through each ancestor's own modular file, nearest first.
    assert [step.ancestor for step in chain[1:3]] == ["gemma2", "gemma"]


def test_a_model_without_a_modular_file_has_no_ancestry() -> None:
    assert not (MODELS / "models" / "llama" / "modular_llama.py").exists()
    assert text_model_ancestry(LlamaConfig()) == ()
