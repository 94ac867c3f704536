"""Multi-modal support of vLLM 0.33 (``vllm.multimodal``): the global registry."""

from .inputs import BatchedTensorInputs, MultiModalKwargsItems, NestedTensors
from .registry import MultiModalRegistry

MULTIMODAL_REGISTRY = MultiModalRegistry()
"""The registry that model classes register their processing classes with."""

__all__ = [
    "MULTIMODAL_REGISTRY",
    "BatchedTensorInputs",
    "MultiModalKwargsItems",
    "MultiModalRegistry",
    "NestedTensors",
]
