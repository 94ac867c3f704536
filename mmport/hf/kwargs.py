"""The typed call kwargs of a processor's modality scope, as HF declares them.

HF types a processor's call kwargs per scope (``images_kwargs:
Qwen2VLImageProcessorKwargs`` on the processor's ``ProcessingKwargs``) and a
sub-processor's own in its ``valid_kwargs``. Which of them a port's count
reads is the analyzers' question; which exist is HF's answer, read here.
"""

from __future__ import annotations

import typing
from typing import Any

from mmport.errors import FOREIGN_ERRORS

__all__ = ["NOT_SETTINGS", "SCOPES", "typed_kwarg_classes"]

SCOPES = {"image": "images_kwargs", "video": "videos_kwargs", "audio": "audio_kwargs"}
# Kwargs that say how to return or place tensors, or how HF pads a batch to one
# length (vLLM processes and caches each item alone): never what an item is.
NOT_SETTINGS = frozenset(
    {
        "return_tensors",
        "device",
        "input_data_format",
        "data_format",
        "return_metadata",
        "sampling_rate",
        "padding",
        "pad_to_multiple_of",
        "max_length",
        "truncation",
        "return_attention_mask",
    }
)


def typed_kwarg_classes(
    processor: Any, sub_processor: Any, modality: str
) -> dict[str, tuple[type, ...]]:
    """Each typed call kwarg of ``modality``'s scope, with the classes that annotate it, nearest first.

    The processor's kwargs class for the scope (and its bases) comes first,
    then the sub-processor's ``valid_kwargs``; :data:`NOT_SETTINGS` are left out.
    """
    classes = []
    try:
        scope = typing.get_type_hints(processor.valid_processor_kwargs).get(
            SCOPES[modality]
        )
        classes += list(getattr(scope, "__mro__", ()))
    except FOREIGN_ERRORS:
        pass  # an annotation that does not resolve: the sub-processor's own kwargs remain
    classes += list(
        getattr(getattr(sub_processor, "valid_kwargs", None), "__mro__", ())
    )
    found: dict[str, tuple[type, ...]] = {}
    for klass in classes:
        for name in getattr(klass, "__annotations__", {}):
            if name not in NOT_SETTINGS:
                found[name] = (*found.get(name, ()), klass)
    return found
