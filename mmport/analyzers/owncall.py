"""Processors that expand a modality's placeholders in their own ``__call__``.

A transformers 5.x processor leaves expansion to ``ProcessorMixin.__call__``,
which calls ``self._process_<modality>(items, **kwargs)``, which calls the
model's ``replace_<modality>_token`` hook once per item; a port that cannot
derive the count asks ``_process_<modality>`` for one item's replacement.
An older-style processor defines its own ``__call__`` instead, and then
either

- defines no hook at all: CSM counts each audio inside ``__call__``::

      encoded_length_kwargs = audio_kwargs.pop("encoded_length_kwargs", {})
      num_audio_tokens_list = [self._get_encoded_length(audio_array.shape[-1], **encoded_length_kwargs) ...]

  (the base ``_process_audio`` would hand ``encoded_length_kwargs`` to the
  feature extractor, and the base hook raises ``NotImplementedError``); or
- overrides ``_process_<modality>`` with a signature the base call cannot
  drive: NemotronH-Omni's ``_process_audio(self, audio, audio_kwargs)``
  takes the scope as one positional dict (no ``**kwargs``) and returns the
  per-item counts its ``__call__`` hands the hook.

Either way only HF's own ``__call__`` gives an item's replacement: the port
runs it on the placeholder alone (``CountRule.via_call``), a visible
delegation whose reason :func:`own_call_reason` words. A ``__call__`` that
inserts one block of tokens per prompt (BLIP-2, InstructBLIP-Video) is read
by :mod:`mmport.analyzers.callblock` before this is asked.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.sourcefile import find_method

__all__ = ["own_call_reason", "process_method"]


def process_method(modality: str) -> str:
    """The name of HF's per-modality processing method: ``_process_images``, ``_process_videos``, ``_process_audio``."""
    return "_process_audio" if modality == "audio" else f"_process_{modality}s"


def own_call_reason(processor_cls: type[Any], modality: str) -> str | None:
    """Why only HF's own ``__call__`` can expand ``modality``'s placeholder, or None where the base call can.

    None when the model code defines no ``__call__`` (the base one drives
    ``_process_<modality>``), or defines the hook and a ``_process_<modality>``
    that takes ``**kwargs`` (or none of its own).
    """
    name = processor_cls.__name__
    if find_method(processor_cls, "__call__", models_only=True) is None:
        return None
    if (
        find_method(processor_cls, f"replace_{modality}_token", models_only=True)
        is None
    ):
        return f"{name} expands placeholders in its own __call__ (no replace_{modality}_token)"
    process = process_method(modality)
    found = find_method(processor_cls, process, models_only=True)
    if found is None or isinstance(found[1].params.star_kwarg, cst.Param):
        return None
    params = cst.Module(body=[]).code_for_node(found[1].params)
    return f"{name} expands placeholders in its own __call__, and its {process}({params}) takes no **kwargs: the base call cannot drive it"


# CSM: its own __call__ counts each audio; no replace_audio_token hook.
_CSM = """
class CsmProcessor:
    audio_token = "<|AUDIO|>"

    def __call__(self, text=None, audio=None, output_labels=False, **kwargs):
        audio_kwargs = kwargs.get("audio_kwargs", {})
        encoded_length_kwargs = audio_kwargs.pop("encoded_length_kwargs", {})
        num_audio_tokens_list = [
            self._get_encoded_length(audio_array.shape[-1], **encoded_length_kwargs) for audio_array in audio
        ]
        return num_audio_tokens_list
"""

EXAMPLES = [
    valid(
        "process_method_of_audio_is_singular",
        "",
        lambda snippet: (process_method("audio"), process_method("video")),
        ("_process_audio", "_process_videos"),
    ),
    valid(
        "csm_counts_in_its_own_call_without_a_hook",
        _CSM,
        lambda snippet: own_call_reason(snippet.CsmProcessor, "audio"),
        "CsmProcessor expands placeholders in its own __call__ (no replace_audio_token)",
    ),
    valid(
        "nemotron_h_omni_process_audio_takes_no_kwargs",
        """
        class NemotronHOmniProcessor:
            def __call__(self, text=None, images=None, audio=None, **kwargs):
                audio_inputs, counts = self._process_audio(audio, kwargs["audio_kwargs"])
                return audio_inputs

            def _process_audio(self, audio, audio_kwargs):
                return self.feature_extractor(audio, **audio_kwargs), []

            def replace_audio_token(self, audio_inputs, audio_idx, **kwargs):
                return self.audio_token * audio_inputs["num_tokens"][audio_idx]
        """,
        lambda snippet: own_call_reason(snippet.NemotronHOmniProcessor, "audio"),
        "NemotronHOmniProcessor expands placeholders in its own __call__, and its"
        " _process_audio(self, audio, audio_kwargs) takes no **kwargs: the base call"
        " cannot drive it",
    ),
    invalid(
        "a_5x_processor_leaves_the_call_to_processor_mixin",
        """
        class LlavaProcessor:
            def replace_image_token(self, image_inputs, image_idx, **kwargs):
                return self.image_token * self.image_seq_length
        """,
        lambda snippet: own_call_reason(snippet.LlavaProcessor, "image"),
    ),
    invalid(
        "own_call_with_a_hook_and_a_drivable_process_method",
        """
        class Qwen2AudioProcessor:
            def __call__(self, text=None, audio=None, **kwargs):
                return self._process_audio(audio, **kwargs)

            def _process_audio(self, audio, **kwargs):
                return self.feature_extractor(audio, **kwargs)

            def replace_audio_token(self, audio_inputs, audio_idx, **kwargs):
                return self.audio_token * audio_inputs["num_audio_tokens"][audio_idx]
        """,
        lambda snippet: own_call_reason(snippet.Qwen2AudioProcessor, "audio"),
    ),
]
