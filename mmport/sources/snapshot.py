"""The resolved form of a model reference: a directory plus what it holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["Snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """A model snapshot on local disk: config, processor and tokenizer files.

    ``origin`` says how the reference was resolved: ``"local"`` (a directory the
    user named), ``"hub"`` (downloaded or cached with huggingface_hub) or
    ``"synthetic"`` (built offline from the installed transformers' defaults).
    Heavy objects (config, processor) are loaded lazily and cached.
    """

    ref: str
    path: Path
    origin: str
    model_type: str
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def config_dict(self) -> dict[str, Any]:
        """The raw ``config.json`` as a dict (no transformers import)."""
        return json.loads((self.path / "config.json").read_text())

    def load_config(self) -> Any:
        """The model's ``PretrainedConfig``, loaded with ``AutoConfig``."""
        if "config" not in self._cache:
            from transformers import AutoConfig

            self._cache["config"] = AutoConfig.from_pretrained(self.path)
        return self._cache["config"]

    def load_processor(self) -> Any:
        """The HF processor (``AutoProcessor``) of this snapshot, built once."""
        if "processor" not in self._cache:
            from mmport.sources._quiet import quiet_transformers
            from transformers import AutoProcessor

            with quiet_transformers():
                self._cache["processor"] = AutoProcessor.from_pretrained(self.path)
        return self._cache["processor"]

    def model_image_token_id(self) -> int | None:
        """The token the model fills with image features (``config.image_token_id``), if the config names one.

        HF models place features where ``input_ids == config.image_token_id``
        (``get_placeholder_mask``); a processor's placeholder may be another token.
        """
        value = getattr(self.load_config(), "image_token_id", None)
        return value if isinstance(value, int) else None
