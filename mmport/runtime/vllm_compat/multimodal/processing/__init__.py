"""The processing contract of vLLM 0.33 (``vllm.multimodal.processing``).

A port subclasses :class:`BaseProcessingInfo`, :class:`BaseDummyInputsBuilder`
and :class:`BaseMultiModalProcessor`, and describes its placeholders with
:class:`PromptReplacement` / :class:`PromptInsertion`.
"""

from .context import BaseProcessingInfo, InputProcessingContext, TimingContext
from .dummy_inputs import BaseDummyInputsBuilder
from .inputs import ProcessorInputs
from .processor import BaseMultiModalProcessor, cached_encode
from .updates import (
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdate,
    PromptUpdateDetails,
)

__all__ = [
    "BaseDummyInputsBuilder",
    "BaseMultiModalProcessor",
    "BaseProcessingInfo",
    "InputProcessingContext",
    "ProcessorInputs",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptUpdate",
    "PromptUpdateDetails",
    "TimingContext",
    "cached_encode",
]
