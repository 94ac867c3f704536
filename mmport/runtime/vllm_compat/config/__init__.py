"""Configuration types of vLLM 0.33 (``vllm.config``) that processing touches."""

from .model import ModelConfig
from .multimodal import MultiModalConfig

__all__ = ["ModelConfig", "MultiModalConfig"]
