"""Snapshots whose own code has a model and a tokenizer but no processor class (InternVL2's chat checkpoints).

``auto_map`` names the config and the model (``AutoConfig``, ``AutoModel``)
and perhaps a tokenizer, and no config names a processor class: the model
card tiles the images and the model's ``chat()`` writes them into the prompt.
``AutoProcessor`` finds at most the tokenizer there, so such a snapshot has
no HF processor to check a port against. Telling it apart needs only the
JSON configs: nothing of the snapshot runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmport.errors import RemoteCodeConsentError
from mmport.sources.remote import CONFIG_FILES, auto_references, consent_error

__all__ = ["PROCESSOR_AUTOS", "names_no_processor", "processorless_error"]

# The auto classes that give a checkpoint a processor (or an image/video/audio side) of its own.
PROCESSOR_AUTOS = (
    "AutoProcessor",
    "AutoImageProcessor",
    "AutoVideoProcessor",
    "AutoFeatureExtractor",
)
# What the snapshot is missing, as the one line says it.
_WHAT = "its image processing (no processor class: its model's own chat() writes images into the prompt)"


def names_no_processor(directory: Path) -> bool:
    """True when the snapshot ships code for a model but neither ships nor names a processor class."""
    references = auto_references(directory)
    if not any(auto.startswith("AutoModel") for auto, _, _ in references):
        return False
    if any(auto in PROCESSOR_AUTOS for auto, _, _ in references):
        return False
    return not any(_names_processor_class(directory / name) for name in CONFIG_FILES)


def _names_processor_class(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("processor_class"), str)


def processorless_error(directory: Path) -> RemoteCodeConsentError:
    """The one line for such a snapshot without ``--trust-remote-code``: its model's code is the reference."""
    return consent_error(directory, _WHAT)
