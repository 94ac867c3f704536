"""The port of a checkpoint with no processor class, from what :mod:`mmport.analyzers.chatprompt` reads.

The port ships the custom HF processor the checkpoint lacks. Its tiling is
transformers' ``GotOcr2ImageProcessor`` with ``crop_to_patches`` (what HF's own
InternVL processor uses), set up with the config's settings: it tiles as the
model card's ``dynamic_preprocess`` does (tests/test_chat_checkpoints.py runs
the card's code over hundreds of sizes), adding the thumbnail whenever an
image takes more than one tile. A config that turns the thumbnail off or
leaves a setting out is refused: GotOcr2 could not follow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import transformers

from mmport import __version__
from mmport.analyzers.chatprompt import (
    _INTERNVL_CHAT,
    _INTERNVL_CONFIG,
    ChatPromptRule,
    ChatTiling,
    read_chat_prompt,
    read_chat_tiling,
)
from mmport.analyzers.examples import invalid, valid
from mmport.errors import AnalysisError
from mmport.sources import Snapshot
from mmport.sources.processorless import processorless_error
from mmport.spec import ChatPortSpec

__all__ = ["TILE_PROCESSOR", "analyze_chat"]

TILE_PROCESSOR = "GotOcr2ImageProcessor"
# config.json setting → the tile processor's kwarg it sets.
TILE_KWARGS = (
    ("dynamic_image_size", "crop_to_patches"),
    ("min_dynamic_patch", "min_patches"),
    ("max_dynamic_patch", "max_patches"),
    ("force_image_size", "size"),
)


def analyze_chat(snapshot: Snapshot) -> ChatPortSpec:
    """The port spec of ``snapshot``, whose model writes images into the prompt in ``chat()``."""
    if not snapshot.trust_remote_code:
        raise processorless_error(snapshot.path)
    rule = read_chat_prompt(snapshot.path)
    if rule is None:
        raise AnalysisError(
            f"{snapshot.path}: no processor class, and no method of its model writes items into a prompt "
            "by replacing a placeholder (as InternVL's chat() does); mmport cannot tell how a port should"
        )
    tiling = read_chat_tiling(snapshot.path)
    architecture = (snapshot.config_dict.get("architectures") or [rule.model_class])[0]
    return ChatPortSpec(
        model_type=snapshot.model_type,
        ref=snapshot.ref,
        architecture=architecture,
        class_prefix=architecture.removesuffix("Model"),
        transformers_version=transformers.__version__,
        mmport_version=__version__,
        placeholder=rule.placeholder,
        segments=tuple((s.text, s.times) for s in rule.segments),
        embed_text=_embedded(rule),
        item_factor=rule.item_factor,
        init_statements=tuple(st for f in rule.factors for st in f.statements),
        init_source=_one_factor(rule).source,
        item_source=rule.source,
        replace_source=rule.replace_source,
        tile_processor=TILE_PROCESSOR,
        tiling=_tile_settings(snapshot, tiling),
        card_source=tiling.code,
    )


def _embedded(rule: ChatPromptRule) -> str:
    """The one segment written per feature (times the item's count): where the features go."""
    repeated = [s.text for s in rule.segments if rule.item_factor in s.times]
    if len(repeated) != 1:
        raise AnalysisError(
            f"{rule.source}: {len(repeated)} parts of the item's text repeat with {rule.item_factor}; "
            "mmport ports one run of feature tokens per item"
        )
    return repeated[0]


def _one_factor(rule: ChatPromptRule):
    """The one factor besides the item's own count, set in ``__init__`` (``self.num_image_token``)."""
    if len(rule.factors) != 1 or rule.factors[0].source is None:
        raise AnalysisError(
            f"{rule.source}: the item's text is multiplied by {[f.code for f in rule.factors]}; "
            "mmport follows one factor that the model's __init__ sets"
        )
    return rule.factors[0]


def _tile_settings(snapshot: Snapshot, tiling: ChatTiling) -> tuple:
    """(config key, tile processor kwarg, value, source) per setting; what GotOcr2 cannot follow is refused."""
    if tiling.get("use_thumbnail") is not True:
        raise AnalysisError(
            f"{snapshot.path}: config.json sets use_thumbnail {json.dumps(tiling.get('use_thumbnail'))}; "
            f"{TILE_PROCESSOR} always adds the thumbnail, so mmport's port would not tile as the model card does"
        )
    settings = {key: (value, source) for key, value, source in tiling.settings}
    missing = [key for key, _ in TILE_KWARGS if key not in settings]
    if missing:
        raise AnalysisError(
            f"{snapshot.path}: config.json sets no {', '.join(missing)}; mmport reads the tiling from them"
        )
    return tuple(
        (key, kwarg, settings[key][0], settings[key][1]) for key, kwarg in TILE_KWARGS
    )


# The examples port InternVL2's chat() and config.json as chatprompt's examples read them
# (InternVL2-1B's shape): the snippet's folder, a trusted snapshot.
def _port_of(snippet: ModuleType, config: str = _INTERNVL_CONFIG) -> ChatPortSpec:
    """The port of the snippet's folder as a snapshot (trusted), with ``config`` as config.json."""
    directory = Path(str(snippet.__file__)).parent
    (directory / "config.json").write_text(config)
    return analyze_chat(
        Snapshot(
            "OpenGVLab/InternVL2-1B",
            directory,
            "local",
            "internvl_chat",
            trust_remote_code=True,
        )
    )


def _port_facts(snippet: ModuleType) -> tuple:
    """What the port takes from chat(), __init__ and config.json (sources left out)."""
    spec = _port_of(snippet)
    return (
        spec.architecture,
        spec.class_prefix,
        spec.placeholder,
        spec.segments,
        spec.embed_text,
        spec.item_factor,
        spec.init_statements,
        spec.tile_processor,
        tuple((key, kwarg, value) for key, kwarg, value, _ in spec.tiling),
    )


EXAMPLES = [
    valid(
        "internvl2_ports_chat_as_gotocr2_tiles_and_context_tokens",
        _INTERNVL_CHAT,
        _port_facts,
        (
            "InternVLChatModel",
            "InternVLChat",
            "<image>",
            (
                ("<img>", ()),
                ("<IMG_CONTEXT>", ("self.num_image_token", "num_patches")),
                ("</img>", ()),
            ),
            "<IMG_CONTEXT>",
            "num_patches",
            (
                "image_size = config.force_image_size or config.vision_config.image_size",
                "patch_size = config.vision_config.patch_size",
                "self.num_image_token = int((image_size // patch_size) ** 2 * (config.downsample_ratio ** 2))",
            ),
            "GotOcr2ImageProcessor",
            (
                ("dynamic_image_size", "crop_to_patches", True),
                ("min_dynamic_patch", "min_patches", 1),
                ("max_dynamic_patch", "max_patches", 12),
                ("force_image_size", "size", 448),
            ),
        ),
    ),
    invalid(
        "a_config_without_the_thumbnail_cannot_tile_as_gotocr2",
        _INTERNVL_CHAT,
        lambda snippet: _port_of(
            snippet,
            _INTERNVL_CONFIG.replace('"use_thumbnail": true', '"use_thumbnail": false'),
        ),
        refusal=AnalysisError,
        match="config.json sets use_thumbnail false; GotOcr2ImageProcessor always adds the thumbnail",
    ),
    invalid(
        "a_model_without_a_placeholder_replacing_chat_has_no_port",
        """
        class InternVLChatModel:
            def chat(self, tokenizer, pixel_values, question, generation_config):
                messages = [{"role": "user", "content": question}]
                return tokenizer.apply_chat_template(messages, tokenize=False)
        """,
        _port_of,
        refusal=AnalysisError,
        match="no method of its model writes items into a prompt",
    ),
]
