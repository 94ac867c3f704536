"""LLaVA processing for vLLM 0.33 that looks up a vocabulary entry by its text, as vLLM's Gemma 3 port does.

A test fixture: ``llava_handwritten.py`` (a correct port) whose prompt
updates first read ``tokenizer.get_vocab()["<0x0A>"]``, the byte token real
LLaVA-1.5 checkpoints (a Llama SentencePiece tokenizer) spell a newline with.
A synthetic snapshot's byte-level tokenizer has no such entry, so the lookup
raises ``KeyError('<0x0A>')``: ``mmport verify`` must say it cannot judge
the port on that snapshot, not that the port fails.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "llava_handwritten_base", Path(__file__).with_name("llava_handwritten.py")
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

# The text real checkpoints of the family hold as one vocabulary entry.
NEWLINE_BYTE_TOKEN = "<0x0A>"


class LlavaLackingProcessingInfo(_base.LlavaProcessingInfo):
    """The correct port's counts and limits."""


class LlavaLackingDummyInputsBuilder(_base.LlavaDummyInputsBuilder):
    """The correct port's dummy inputs."""


class LlavaLackingMultiModalProcessor(_base.LlavaMultiModalProcessor):
    """The correct port's processing, after a vocabulary lookup by text."""

    def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
        vocab = self.info.get_tokenizer().get_vocab()
        self.newline_id = vocab[
            NEWLINE_BYTE_TOKEN
        ]  # raises where the snapshot lacks the entry
        return super()._get_prompt_updates(
            mm_items, hf_processor_mm_kwargs, out_mm_kwargs
        )
