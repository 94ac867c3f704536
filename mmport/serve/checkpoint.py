"""A servable tiny twin checkpoint of a snapshot, in the layouts users meet.

The twin is :func:`mmport.hf.tiny.twin_dict` of the snapshot's config
with one more constraint: vLLM's CPU paged attention serves only some head
sizes (64, 128, ...), so the language model's head size is set to 64 when the
twin's is not one of them. Weights are a seeded random init, saved with HF's
``save_pretrained`` beside the snapshot's processor and tokenizer files.

Two layouts (:mod:`mmport.hf.weights`): ``saved``, what this transformers'
``save_pretrained`` writes, and ``hub``, the names real hub repos of the family
carry.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mmport.hf.weights import hub_names, renamings

__all__ = [
    "SERVABLE_HEAD_DIMS",
    "Layout",
    "TwinCheckpoint",
    "build_checkpoint",
    "copy_processing_files",
    "hub_names",
    "servable_text",
    "servable_twin",
    "snapshot_checkpoint",
]

# Head sizes vLLM's CPU attention kernels take (shared/recipes/vllm-cpu-serve-env.sh).
SERVABLE_HEAD_DIMS = (64, 128)
_HEAD_DIM = 64
# Room for the longest serve prompt: Idefics3 tiles an image into 17 crops,
# about 2,400 tokens, past its Llama default of 2,048 positions.
_MIN_POSITIONS = 8192
_WEIGHTS = "model.safetensors"


class Layout(StrEnum):
    """The weight-name layout a checkpoint is written in."""

    SAVED = "saved"
    HUB = "hub"


@dataclass(frozen=True)
class TwinCheckpoint:
    """A checkpoint directory and what it holds."""

    path: Path
    architecture: str
    layout: Layout
    num_parameters: int


def _rope_types(rope: Any) -> set[str]:
    """Every ``rope_type`` in a rope-parameters dict, per-layer-type dicts included (Gemma 3)."""
    if not isinstance(rope, dict):
        return set()
    found = {rope["rope_type"]} if "rope_type" in rope else set()
    return found.union(*(_rope_types(value) for value in rope.values()))


def servable_text(twin: dict) -> None:
    """Give the twin's language model a head size the CPU attention serves, and room for the probes.

    vLLM refuses a prompt longer than ``max_position_embeddings``; under plain
    RoPE (``rope_type`` default) that value changes no number HF computes, so
    it is raised to ``_MIN_POSITIONS`` there and left alone otherwise.
    """
    text = twin.get("text_config") or twin
    heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text["hidden_size"] // heads if heads else None)
    if head_dim not in SERVABLE_HEAD_DIMS:
        text["head_dim"] = _HEAD_DIM
    positions = text.get("max_position_embeddings")
    if (
        isinstance(positions, int)
        and positions < _MIN_POSITIONS
        and _rope_types(text.get("rope_parameters")) <= {"default"}
    ):
        text["max_position_embeddings"] = _MIN_POSITIONS


def servable_twin(config: Any) -> Any:
    """The tiny twin of ``config`` (:func:`mmport.hf.tiny.twin_dict`) with a text model
    vLLM's CPU build serves (:func:`servable_text`), of ``config``'s class.

    Where the servable head size breaks a rule the config class ties it to others by
    (an MLA model's rope and nope parts), the twin keeps its own.
    """
    import copy

    from mmport.errors import FOREIGN_ERRORS
    from mmport.hf.tiny import twin_dict

    twin = twin_dict(config.to_dict())
    servable = copy.deepcopy(twin)
    servable_text(servable)
    try:
        return type(config).from_dict(servable)
    except FOREIGN_ERRORS:
        return type(config).from_dict(twin)


def _write_modeling_defaults(model: Any) -> None:
    """Write into the config the M-RoPE sections HF's modeling defaults when the config has none.

    vLLM turns M-RoPE on from the config (``mrope_section`` in the text config's
    ``rope_parameters``); HF's Qwen2-VL rotary module falls back to its own
    default (``config.rope_parameters.get("mrope_section", [16, 24, 24])``).
    The value written is the one HF's built module holds, so both sides agree.
    """
    text = model.config.get_text_config()
    rope = getattr(text, "rope_parameters", None)
    if not isinstance(rope, dict):
        return
    for module in model.modules():
        if isinstance(getattr(module, "mrope_section", None), (list, tuple)):
            rope.setdefault("mrope_section", list(module.mrope_section))
            if "mrope_interleaved" not in rope and _interleaves(module):
                rope["mrope_interleaved"] = True
            return


def _interleaves(rotary: Any) -> bool:
    """Whether HF's M-RoPE module interleaves the sections (t h w t h w ...), measured.

    Qwen3-VL's code interleaves where Qwen2-VL's puts each section in one
    block; its config says nothing, and vLLM reads ``mrope_interleaved``.
    One position with only the temporal part set: the rotary slots it turns
    are the temporal section's. In one block they are the first ones.
    """
    import torch

    sections = list(rotary.mrope_section)
    positions = torch.zeros(3, 1, 1, dtype=torch.long)
    positions[0] = 1
    probe = torch.zeros(1, 1, 1, dtype=torch.float32)
    try:
        cos, _ = rotary(probe, positions)
    except (TypeError, ValueError, RuntimeError, IndexError):
        return False
    half = cos.reshape(-1)[: cos.shape[-1] // 2]
    turned = [i for i, value in enumerate(half.tolist()) if value != 1.0]
    return bool(turned) and turned != list(range(sections[0]))[: len(turned)]


def _rekey_to_hub(model: Any, path: Path) -> None:
    """Rewrite the saved weights under their hub names: saved name → runtime name → hub name."""
    from safetensors.torch import load_file, save_file
    from transformers.core_model_loading import rename_source_key

    saved = load_file(path / _WEIGHTS)
    loading = renamings(model, legacy=True)
    runtime = {name: rename_source_key(name, loading, [])[0] for name in saved}
    hub = hub_names(model, list(runtime.values()))
    rekeyed = {
        hub[runtime[name]]: tensor.contiguous() for name, tensor in saved.items()
    }
    save_file(rekeyed, str(path / _WEIGHTS), metadata={"format": "pt"})


def copy_processing_files(snapshot: Any, directory: Path) -> None:
    """Copy the snapshot's processor and tokenizer files (all but its config and weights) into ``directory``."""
    for source in Path(snapshot.path).iterdir():
        if (
            source.is_file()
            and source.name != "config.json"
            and not source.name.endswith((".safetensors", ".bin"))
        ):
            shutil.copy(source, directory / source.name)


def build_checkpoint(
    snapshot: Any,
    directory: Path,
    *,
    layout: Layout = Layout.SAVED,
    seed: int = 0,
    config: Any = None,
) -> TwinCheckpoint:
    """Write a servable tiny twin of ``snapshot`` to ``directory`` (see the module
    docstring), or HF's model on ``config`` where one is given (random weights)."""
    from mmport.runtime.device import seeded
    from mmport.runtime.hf_model import model_class

    if config is None:
        config = servable_twin(snapshot.load_config())
    cls = model_class(config)
    with seeded(seed):
        model = cls._from_config(config).eval()
    _write_modeling_defaults(model)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    copy_processing_files(snapshot, directory)
    if layout is Layout.HUB:
        _rekey_to_hub(model, directory)
    return TwinCheckpoint(
        directory, cls.__name__, layout, sum(p.numel() for p in model.parameters())
    )


def snapshot_checkpoint(snapshot: Any) -> TwinCheckpoint:
    """The snapshot's own checkpoint (``--weights``), served as it is; exit 2 when it holds no weights."""
    from mmport.runtime.hf_model import model_class, require_weights

    require_weights(snapshot)
    return TwinCheckpoint(
        Path(snapshot.path),
        model_class(snapshot.load_config()).__name__,
        Layout.SAVED,
        0,
    )
