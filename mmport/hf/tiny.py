"""Tiny twins of model configs: same geometry and token layout, small widths.

A twin keeps everything that decides *how many* embeddings an item gets and
*where* they go (image and patch sizes, merge and pooling factors, token ids,
vocabulary, feature-layer choices) and shrinks everything that only decides
*how much compute* they cost (widths, MLP sizes, head, layer and expert counts).

Every width in every sub-config becomes one value, so widths that HF code
couples (a vision tower's output feeding a projector feeding the language
model) stay consistent without knowing which ones are coupled. Head sizes
that rotary settings may depend on (a vision tower's ``head_dim`` given
explicitly and equal to width / heads, or a language model's implied head
size under rope settings, which Qwen2-VL's ``mrope_section`` splits) are
kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

__all__ = ["tiny_twin", "twin_dict"]

# How many layers a twin keeps, at least (two so "the layer before last" exists).
MIN_LAYERS = 2
HEADS = 2
MIN_WIDTH = 64
# Real widths are multiples of 32, and vLLM's CPU kernels rely on it (its MoE experts
# need hidden and MLP widths divisible by 32); a twin's width is one too.
WIDTH_ALIGNMENT = 32

_WIDTH_SUFFIXES = (
    "hidden_size",
    "embed_dim",
    "d_model",
    "projection_dim",
    "_output_dim",
    "_input_dim",
)
# MLP widths: ``intermediate_size``, and a Whisper-style audio encoder's ``encoder_ffn_dim``.
_INTERMEDIATE_SUFFIXES = ("intermediate_size", "_ffn_dim")
_LAYER_KEYS = (
    "num_hidden_layers",
    "num_layers",
    "depth",
    "encoder_layers",
    "decoder_layers",
)
_HEAD_KEYS = (
    "num_attention_heads",
    "num_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
)
_ROPE_KEYS = ("rope_parameters", "rope_scaling")
# Mixture-of-experts: how many experts a layer has (compute only: a twin keeps EXPERTS),
# how many route each token (at most as many), and the groups they are routed in (one).
EXPERTS = 4
_EXPERT_KEYS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_num_experts",
)
_ROUTED_KEYS = ("num_experts_per_tok", "moe_topk", "moe_k")
_EXPERT_GROUP_KEYS = ("n_group", "topk_group")
# Lists naming each layer's kind; the twin keeps one layer of every kind.
_PER_LAYER_LISTS = ("layer_types",)
# Where a twin layer records which old layer it is, until its per-layer values follow.
_KEPT_LAYERS = "_mmport_kept_layers"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layers(config: dict) -> Iterator[dict]:
    """``config`` and every nested sub-config dict (those with a model_type)."""
    yield config
    for value in config.values():
        if isinstance(value, dict) and "model_type" in value:
            yield from _layers(value)


def _width_key(key: str) -> bool:
    return (
        any(key == s or key.endswith(s) for s in _WIDTH_SUFFIXES) and key != "head_dim"
    )


# Keys naming a size a config may tie to its layer's width.
_COUPLED_SUFFIXES = ("_dim", "_input_size", "_output_size")


def _coupled_dim(key: str, value: int, old_widths: set[int]) -> bool:
    """A ``*_dim`` (or ``*_input_size``) equal to a width in the config, which the config
    may require to stay equal to it (a WavTokenizer's ``codebook_dim`` must equal its
    ``hidden_size`` when it has no projections; Dots 3's vision ``adapter_out_dim`` the
    text model's)."""
    return key.endswith(_COUPLED_SUFFIXES) and key != "head_dim" and value in old_widths


def _intermediate(value: int, old_width: int | None, width: int) -> int:
    """An MLP width in the twin: twice the twin's width, unless it is a whole fraction of
    its layer's width, which a config may require (an audio adaptor's must be the text
    width / 4): then the same fraction of the twin's."""
    if old_width and 0 < value < old_width and old_width % value == 0:
        parts = old_width // value
        if width % parts == 0:
            return width // parts
    return 2 * width


def _width(layer: dict) -> int | None:
    # A vision tower's ``embed_dim`` is its attention width when both are set
    # (its ``hidden_size`` is then the output it projects to).
    for key in ("embed_dim", "hidden_size", "d_model"):
        if _is_int(layer.get(key)):
            return layer[key]
    return None


def _heads(layer: dict) -> tuple[str, int] | None:
    for key in _HEAD_KEYS:
        if _is_int(layer.get(key)) and layer[key] > 0:
            return key, layer[key]
    return None


def _kept_head_dim(layer: dict) -> int | None:
    """The head size a twin must keep: explicit, or implied under rope settings."""
    heads, width = _heads(layer), _width(layer)
    if _is_int(layer.get("head_dim")):
        # A vision tower's (it has a patch size) head_dim equal to width /
        # heads: its code may use either (Pixtral's attention splits by width
        # / heads, its rotary by head_dim), so the twin keeps them equal.
        # Language models read head_dim itself: widths are free, it stays.
        if (
            "patch_size" in layer
            and heads
            and width
            and width // heads[1] == layer["head_dim"]
        ):
            return layer["head_dim"]
        return None
    if heads and width and _rope_sections(layer) and width % heads[1] == 0:
        # A width the heads do not divide (a synthetic default: 2048 over 28 heads)
        # implies no head size a real checkpoint has; the twin's heads divide its own.
        return width // heads[1]
    return None


def _rope_sections(layer: dict) -> bool:
    """True when rope may split a language model's head into fixed sections.

    Multimodal rope (Qwen2-VL's ``mrope_section``) splits the head into
    sections that the config may carry or the modeling code may default, so a
    language model with rope settings keeps its head size. Vision towers
    derive their rotary sizes from the width.
    """
    return "vocab_size" in layer and any(
        isinstance(layer.get(key), dict) for key in _ROPE_KEYS
    )


def _feature_layer_depth(config: dict) -> int:
    """Layers needed so every selected feature layer (``-2``, ``[-2, -5, 6]``) exists.

    A negative index ``-k`` needs ``k`` layers; a positive one ``k``, ``k + 1``.
    """
    depth = MIN_LAYERS
    for layer in _layers(config):
        for key, value in layer.items():
            if "feature_layer" in key or key.endswith("select_layer"):
                for index in value if isinstance(value, list) else [value]:
                    if _is_int(index):
                        depth = max(depth, index + 1 if index >= 0 else -index)
    return depth


def _common_width(kept_head_dims: list[int]) -> int:
    """The one width of a twin: a multiple of every kept head size and of WIDTH_ALIGNMENT,
    with HEADS heads at least."""
    if not kept_head_dims:
        return MIN_WIDTH
    width = math.lcm(*kept_head_dims, WIDTH_ALIGNMENT)
    while width // max(kept_head_dims) < HEADS:
        width *= 2
    return width


def twin_dict(config: dict) -> dict:
    """The tiny twin of a config dict (``PretrainedConfig.to_dict()``)."""
    import copy

    twin = copy.deepcopy(config)
    layers = list(_layers(twin))
    width = _common_width([hd for hd in map(_kept_head_dim, layers) if hd])
    depth = _feature_layer_depth(twin)
    old_widths = {w for w in map(_width, layers) if w}
    for layer in layers:
        kept_head_dim = _kept_head_dim(layer)
        heads = _heads(layer)
        old_width = _width(layer)
        for key, value in list(layer.items()):
            if not _is_int(value):
                continue
            if _width_key(key) or _coupled_dim(key, value, old_widths):
                layer[key] = width
            elif key.endswith(_INTERMEDIATE_SUFFIXES):
                layer[key] = _intermediate(value, old_width, width)
            elif key in _LAYER_KEYS:
                layer[f"_mmport_old_{key}"] = value
                layer[key] = min(value, depth)
        if heads:
            _, count = heads
            new = width // kept_head_dim if kept_head_dim else HEADS
            # Every head count of the layer: an encoder-decoder audio tower names two.
            for key in _HEAD_KEYS:
                if _is_int(layer.get(key)) and layer[key] > 0:
                    layer[key] = new
            kv = layer.get("num_key_value_heads")
            if _is_int(kv):
                layer["num_key_value_heads"] = new if kv == count else 1
        _fewer_experts(layer)
        for key in _PER_LAYER_LISTS:
            if isinstance(layer.get(key), list):
                _keep_every_layer_type(layer, key)
        _fit_per_layer_values(layer, width)
    return twin


def _fewer_experts(layer: dict) -> None:
    """A mixture-of-experts layer keeps EXPERTS experts (a twin with 128 full ones needs tens of GB)."""
    counts = [key for key in _EXPERT_KEYS if _is_int(layer.get(key)) and layer[key] > 0]
    if not counts:
        return
    experts = min(EXPERTS, *(layer[key] for key in counts))
    for key in counts:
        layer[key] = experts
    for key in _ROUTED_KEYS:
        if _is_int(layer.get(key)):
            layer[key] = min(layer[key], experts)
    for key in _EXPERT_GROUP_KEYS:
        if _is_int(layer.get(key)):
            layer[key] = 1


def _keep_every_layer_type(layer: dict, key: str) -> None:
    """Cut a per-layer type list (``layer_types``) to the twin's layers, one of each type kept.

    Rebuilt by the config for fewer layers, Qwen3.5's pattern (three linear
    attention layers, then one full) gives two linear layers and no full
    one, whose cache HF's generate cannot measure; Gemma 3's gives no global
    layer. The twin keeps its first layers' types with every other type in
    place of the last ones, and more layers where there are more types.
    """
    types = layer[key]
    count_key = next((k for k in _LAYER_KEYS if _is_int(layer.get(k))), None)
    if count_key is None or not types:
        del layer[key]
        return
    distinct = list(dict.fromkeys(types))
    count = max(min(layer[count_key], len(types)), len(distinct))
    indices = list(range(count))
    missing = [t for t in distinct if t not in types[:count]]
    if missing:
        indices = indices[: count - len(missing)] + [types.index(t) for t in missing]
    layer[key] = [types[i] for i in indices]
    layer[count_key] = count
    # Which old layer each twin layer is: per-layer values follow it (_fit_per_layer_values).
    layer[_KEPT_LAYERS] = indices


def _layer_counts(layer: dict) -> tuple[int, int] | None:
    """(old, new) layer count of a config layer whose count the twin shrank, if it did."""
    for key in _LAYER_KEYS:
        old, new = layer.get(f"_mmport_old_{key}"), layer.get(key)
        if isinstance(old, int) and isinstance(new, int) and new < old:
            return old, new
    return None


def _fit_per_layer_values(layer: dict, width: int) -> None:
    """Values given per layer (a list as long as the old layer count, a dict keyed by
    layer index) cut to the twin's layers; per-layer MLP widths shrunk like the rest."""
    counts = _layer_counts(layer)
    kept = layer.pop(_KEPT_LAYERS, None)
    for key in [k for k in layer if k.startswith("_mmport_old_")]:
        del layer[key]
    if counts is None:
        return
    old, new = counts
    kept = kept or list(range(new))
    for key, value in list(layer.items()):
        if isinstance(value, list) and len(value) == old:
            values = [value[i] for i in kept]
            if key.endswith(_INTERMEDIATE_SUFFIXES) and all(map(_is_int, values)):
                values = [2 * width] * new
            layer[key] = values
        elif (
            isinstance(value, dict)
            and "layer" in key
            and value
            and all(str(k).lstrip("-").isdigit() for k in value)
        ):
            layer[key] = _per_layer_entries(value, kept)


def _per_layer_entries(value: dict, kept: list[int]) -> dict:
    """A dict keyed by layer index (``{"02": {...}}``, Dots 3's ``per_layer_config``)
    re-keyed to the twin's layers: twin layer ``i`` takes old layer ``kept[i]``'s entry,
    its key written as the old one was (an int, or a string of the same width)."""
    by_index = {int(k): (k, v) for k, v in value.items()}
    entries = {}
    for new, old in enumerate(kept):
        if old in by_index:
            key, entry = by_index[old]
            entries[str(new).zfill(len(key)) if isinstance(key, str) else new] = entry
    return entries


def tiny_twin(config: Any) -> Any:
    """A config of the same class as ``config``, shrunk by :func:`twin_dict`."""
    return type(config).from_dict(twin_dict(config.to_dict()))
