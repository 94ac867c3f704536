"""A model config for the bundled runtime, built from a local snapshot directory.

vLLM's ``ModelConfig`` does far more (weights, parallelism, quantization). The
processing path reads only a handful of its attributes; this class holds
exactly those, derived from the snapshot the way vLLM derives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .multimodal import MultiModalConfig

__all__ = ["ModelConfig"]

# Config keys that bound the context length, as vLLM reads them (the
# smallest present wins), and the length vLLM assumes when none is present.
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_DEFAULT_MAX_LEN = 2048


def _derive_max_model_len(hf_config: Any) -> int:
    """The context length: the smallest length key present in the text config.

    (vLLM also stretches it by RoPE scaling factors; synthetic and probe
    snapshots carry none, and only prompts longer than this are affected.)
    """
    text_config = (
        hf_config.get_text_config()
        if hasattr(hf_config, "get_text_config")
        else hf_config
    )
    found = [getattr(text_config, key, None) for key in _MAX_LEN_KEYS]
    lengths = [int(v) for v in found if isinstance(v, (int, float)) and v > 0]
    return min(lengths) if lengths else _DEFAULT_MAX_LEN


@dataclass
class ModelConfig:
    """What the processing path needs to know about a model.

    Build one with :meth:`from_directory`; the constructor takes the loaded
    pieces so tests can assemble a config by hand.
    """

    model: str
    hf_config: Any
    tokenizer: str = ""
    dtype: Any = None
    max_model_len: int = _DEFAULT_MAX_LEN
    multimodal_config: MultiModalConfig | None = field(default_factory=MultiModalConfig)
    encoder_config: dict[str, Any] | None = None
    trust_remote_code: bool = False
    skip_tokenizer_init: bool = False
    revision: str | None = None

    @classmethod
    def from_directory(
        cls,
        path: str | Path,
        *,
        dtype: str = "float32",
        trust_remote_code: bool = False,
    ) -> ModelConfig:
        """Load ``config.json`` (via ``AutoConfig``) and derive the context length."""
        import torch

        directory = Path(path)
        hf_config = _load_hf_config(directory, trust_remote_code)
        return cls(
            trust_remote_code=trust_remote_code,
            model=str(directory),
            tokenizer=str(directory),
            hf_config=hf_config,
            dtype=getattr(torch, dtype),
            max_model_len=_derive_max_model_len(hf_config),
        )

    @property
    def hf_text_config(self) -> Any:
        """The language model's sub-config (the config itself for text-only models)."""
        getter = getattr(self.hf_config, "get_text_config", None)
        return getter() if getter is not None else self.hf_config

    @property
    def is_multimodal_model(self) -> bool:
        """Whether the model takes multi-modal inputs (always, for a port)."""
        return self.multimodal_config is not None

    def get_hidden_size(self) -> int:
        """The language model's hidden size."""
        return int(getattr(self.hf_text_config, "hidden_size", 0))

    def get_inputs_embeds_size(self) -> int:
        """The size of input embeddings: the hidden size, unless the text config projects it (as vLLM reads it)."""
        for name in ("word_embed_proj_dim", "projection_dim", "projection_size"):
            value = getattr(self.hf_text_config, name, None)
            if value is not None:
                return int(value)
        return self.get_hidden_size()

    def get_multimodal_config(self) -> MultiModalConfig:
        """The multi-modal config; a ``ValueError`` for a text-only model."""
        if self.multimodal_config is None:
            raise ValueError("The model is not multimodal.")
        return self.multimodal_config


def _load_hf_config(directory: Path, trust_remote_code: bool) -> Any:
    """The snapshot's config: ``AutoConfig``'s, or its plain values for a model type
    transformers does not define and the snapshot names no code for (vLLM brings its own
    config classes for some, DeepSeek-VL2's ``deepseek_vl_v2``; the processing path reads values)."""
    import json

    from transformers import CONFIG_MAPPING, AutoConfig, PretrainedConfig

    values = json.loads((directory / "config.json").read_text())
    if "auto_map" not in values and values.get("model_type") not in CONFIG_MAPPING:
        return PretrainedConfig.from_dict(values)
    return AutoConfig.from_pretrained(directory, trust_remote_code=trust_remote_code)
