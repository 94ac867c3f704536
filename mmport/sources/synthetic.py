"""Synthetic snapshots: a model_type built offline from transformers' defaults.

``build_synthetic("llava", directory)`` writes what a hub checkpoint would hold
for processing — ``config.json``, the processor and image-processor configs and
a tokenizer — using only the installed transformers' default config, default
image processor and a generated tokenizer (see :mod:`mmport.sources.tokens`).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmport.errors import FOREIGN_ERRORS, BadReferenceError
from mmport.sources.defaults import (
    image_processor_reads,
    looked_up_ids,
    lookup_config,
    none_default_params,
    token_literals,
    tokenizer_self_added,
    tokenizer_token_reads,
    vocabulary_lookups,
)
from mmport.sources.measure import extra_token_params, measure_extra_tokens
from mmport.sources.siblings import fill_from_siblings
from mmport.sources.tokens import (
    BASE_SPECIALS,
    TokenPlan,
    tokenizer_family,
    write_tokenizer,
)

__all__ = ["build_synthetic", "multimodal_model_types", "processor_class_for"]

# A special token's shape (``<image>``, ``<|image|>``, ``[IMG]``); whole strings
# are matched against _SPECIAL_SHAPE, tags inside written text found by _TAG.
_TAG = re.compile(r"<[^<>\s]{1,48}>|<\|[^|\s]{1,48}\|>|\[[A-Z_]{2,32}\]")
_SPECIAL_SHAPE = re.compile(rf"^(?:{_TAG.pattern})$")
_ID_SUFFIXES = ("_token_id", "_token_index")
# Images whose expansions show the text a processor writes: one it keeps whole, one it tiles.
_WRAPPER_IMAGE_SIZES = ((64, 64), (1600, 1200))
# Frames in the video whose expansion shows the text written per frame (two temporal groups).
_WRAPPER_VIDEO_FRAMES = 4
# Processor settings that size the vision tower's token grid, as configs name them too.
_GRID_SETTINGS = (
    "patch_size",
    "spatial_merge_size",
    "merge_size",
    "temporal_patch_size",
)


def multimodal_model_types() -> list[str]:
    """model_types of the installed transformers that have a processor class."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    return sorted(PROCESSOR_MAPPING_NAMES)


def processor_class_for(model_type: str) -> type[Any]:
    """The HF processor class for ``model_type``, or a BadReferenceError."""
    from transformers.models.auto.processing_auto import (
        PROCESSOR_MAPPING_NAMES,
        processor_class_from_name,
    )

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    if name is None:
        raise BadReferenceError(
            f"unknown model_type '{model_type}': transformers has no processor for it; "
            "pass a snapshot directory, a hub id (org/name) or a transformers model_type such as llava"
        )
    return processor_class_from_name(name)


def _special_tokens(processor_cls: type[Any]) -> tuple[dict[str, str], list[str]]:
    """Named and anonymous special-token strings the processor's code uses.

    Named tokens come from ``*_token`` constructor defaults, ``*_TOKEN``
    module constants, and ``tokenizer.<name>_token`` reads in the processor
    (those get the text the constructor sets for that name, else a synthetic
    text such as ``<boi>``). Tokens the constructor sets outright or adds to
    the tokenizer itself are held unnamed.
    """
    named: dict[str, str] = {}
    for param in inspect.signature(processor_cls.__init__).parameters.values():
        if param.name.endswith("_token") and isinstance(param.default, str):
            named[param.name] = param.default
    anonymous: list[str] = []
    module = inspect.getmodule(processor_cls)
    for attr, value in vars(module).items():
        if isinstance(value, str) and _SPECIAL_SHAPE.match(value):
            if attr.isupper() and attr.endswith("_TOKEN"):
                named.setdefault(attr.lower(), value)
            else:
                anonymous.append(value)
    literals = token_literals(processor_cls)
    for name, default in tokenizer_token_reads(processor_cls).items():
        # A tokenizer token the processor also sets outright has that text.
        named.setdefault(
            name, default or literals.get(name) or f"<{name.removesuffix('_token')}>"
        )
    # In the vocabulary, unnamed, as the processor's checkpoints hold them.
    for name, text in tokenizer_self_added(processor_cls).items():
        named.pop(name, None)
        anonymous.append(text)
    anonymous.extend(literals.values())
    # Looked up by text: special-token shaped, or named by a *_TOKEN constant (MiniMax's ']<]start of image[>[').
    constants = {
        v
        for k, v in vars(processor_cls).items()
        if k.isupper() and k.endswith("_TOKEN")
    }
    anonymous.extend(
        t
        for t in vocabulary_lookups(processor_cls)
        if _SPECIAL_SHAPE.match(t) or t in constants
    )
    return named, [t for t in dict.fromkeys(anonymous) if t not in named.values()]


def _config_token_ids(config: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """``(name, id)`` for each ``<name>_token_id``/``_token_index`` the config or a sub-config sets to an int."""
    layers = [
        config,
        *[v for v in config.values() if isinstance(v, Mapping) and "model_type" in v],
    ]
    for layer in layers:
        for key, value in layer.items():
            suffix = next((s for s in _ID_SUFFIXES if key.endswith(s)), None)
            if (
                suffix is not None
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                yield key[: -len(suffix)], value


def _fixed_ids(config: Mapping[str, Any], texts: Mapping[str, str]) -> dict[str, int]:
    """Pin each named token to the id the config gives ``<name>_id``/``_index``."""
    fixed: dict[str, int] = {}
    for name, value in _config_token_ids(config):
        text = texts.get(name + "_token")
        if text and text not in fixed and value not in fixed.values():
            fixed[text] = value
    return fixed


# Words a token's text and a config key spell differently for the same thing.
_SAME_WORD = {
    "begin": "start",
    "bos": "start",
    "img": "image",
    "vid": "video",
    "eos": "end",
    "aud": "audio",
}
# Words that tell nothing about which token is meant.
_FILLER_WORDS = frozenset({"of", "the", "token", "id", "index"})


def _words(text: str) -> frozenset[str]:
    """The words of a token text or config key, spelt one way (``<|begin_of_image|>`` → {start, image})."""
    return frozenset(
        _SAME_WORD.get(w, w)
        for w in re.findall(r"[a-z]+", text.lower())
        if w not in _FILLER_WORDS
    )


def _fixed_by_words(
    config: Mapping[str, Any], tags: Sequence[str], fixed: Mapping[str, int]
) -> dict[str, int]:
    """Pin tags the processor writes as text to the config ids whose names spell the same words.

    GLM-4V writes ``<|begin_of_image|>`` before each video frame, and its
    config names that token's id ``image_start_token_id``: on a checkpoint the
    two agree, and vLLM's port writes the id where HF writes the text. Only an
    id no token holds yet, and a tag and id that pair one to one.
    """
    taken = set(fixed.values())
    free = {
        name: value for name, value in _config_token_ids(config) if value not in taken
    }
    pinned: dict[str, int] = {}
    for tag in tags:
        if tag in fixed:
            continue
        matches = {value for key, value in free.items() if _words(key) == _words(tag)}
        unique = not any(_words(other) == _words(tag) for other in tags if other != tag)
        if (
            len(matches) == 1
            and unique
            and (value := matches.pop()) not in pinned.values()
        ):
            pinned[tag] = value
    return pinned


def _tokens_for_unheld_ids(
    config: Mapping[str, Any], processor: Any, pinned: Mapping[str, int]
) -> dict[str, int]:
    """A token for each id a config ``*_token_id`` names that no token holds, named after its key.

    Qwen2-VL's config names ``vision_start_token_id`` and its chat template
    writes ``<|vision_start|>`` around each image; a checkpoint's vocabulary
    holds the token at that id, and vLLM's placeholder text names it. The text
    takes the shape of the processor's own image token (``<|...|>``, ``<...>``
    or ``[...]``).
    """
    tokenizer = processor.tokenizer
    shape = str(
        getattr(processor, "image_token", None)
        or getattr(tokenizer, "image_token", None)
        or "<x>"
    )
    taken = set(pinned.values())
    made: dict[str, int] = {}
    for name, value in _config_token_ids(config):
        if (
            value < 0
            or value in taken
            or tokenizer.convert_ids_to_tokens(value) is not None
        ):
            continue
        text = (
            f"<|{name}|>"
            if shape.startswith("<|")
            else f"[{name.upper()}]"
            if shape.startswith("[")
            else f"<{name}>"
        )
        if text not in made and text not in pinned:
            made[text] = value
            taken.add(value)
    return made


def _backend_class(
    mapping: Mapping[str, Any], keys: list[str], load
) -> type[Any] | None:
    """The class a (backend → name) mapping gives for the first known key."""
    has_torchvision = importlib.util.find_spec("torchvision") is not None
    order = ("torchvision", "pil") if has_torchvision else ("pil",)
    for key in keys:
        names = mapping.get(key)
        if isinstance(names, str):
            return load(names)
        for backend in order:
            if names and names.get(backend):
                return load(names[backend])
    return None


def _processor_families(processor_cls: type[Any]) -> list[str]:
    """The model folders the processor class and its transformers bases live in.

    A variant that borrows another family's processor (``glm4v_moe`` uses
    ``Glm4vProcessor``) has no image processor of its own in the auto
    mappings; the processor's own family does.
    """
    folders = [
        k.__module__.split(".")[2]
        for k in processor_cls.__mro__
        if k.__module__.startswith("transformers.models.")
    ]
    return list(dict.fromkeys(folders))


def _sub_config_families(sub_type: str) -> list[str]:
    """A sub-config's model_type, then the families of the processor transformers maps it to.

    A wrapper model nests the model it extends: ``colmodernvbert`` holds a
    ``modernvbert`` ``vlm_config``, whose processor is ``Idefics3Processor``;
    the image processor is registered under ``idefics3`` only.
    """
    from transformers.models.auto.processing_auto import (
        PROCESSOR_MAPPING_NAMES,
        processor_class_from_name,
    )

    name = PROCESSOR_MAPPING_NAMES.get(sub_type)
    try:
        families = _processor_families(processor_class_from_name(name)) if name else []
    except FOREIGN_ERRORS:
        # the sub-model's processor needs a backend this machine lacks
        families = []
    # A tower's own type names its family: ``audioflamingo3_encoder`` is AudioFlamingo3's.
    stem = re.sub(
        r"_(audio_encoder|vision_model|encoder|vision|audio|model)$", "", sub_type
    )
    return [sub_type, *families, *([stem] if stem != sub_type else [])]


def _lookup_keys(
    model_type: str, config: Mapping[str, Any], processor_cls: type[Any] | None = None
) -> list[str]:
    """The model_type, the processor's own families, then each sub-config's (vision tower first)."""
    subs = [
        v["model_type"]
        for v in config.values()
        if isinstance(v, Mapping) and "model_type" in v
    ]
    families = _processor_families(processor_cls) if processor_cls is not None else []
    nested = [
        key
        for sub in sorted(subs, key=lambda t: "vision" not in t)
        for key in _sub_config_families(sub)
    ]
    return list(dict.fromkeys([model_type, *families, *nested]))


def _image_processor(
    model_type: str, config: Mapping[str, Any], processor_cls: type[Any] | None = None
) -> Any:
    """The default image processor, torchvision-backed when that is installed."""
    from transformers.models.auto.image_processing_auto import (
        IMAGE_PROCESSOR_MAPPING_NAMES,
        get_image_processor_class_from_name,
    )

    cls = _backend_class(
        IMAGE_PROCESSOR_MAPPING_NAMES,
        _lookup_keys(model_type, config, processor_cls),
        get_image_processor_class_from_name,
    )
    if cls is None:
        has_torchvision = importlib.util.find_spec("torchvision") is not None
        raise BadReferenceError(
            f"model_type '{model_type}' has no image processor usable here"
            + ("" if has_torchvision else "; install torchvision (see README)")
        )
    return cls(**_vision_geometry(cls, config))


def _other_processor(
    attribute: str,
    model_type: str,
    config: Mapping[str, Any],
    processor_cls: type[Any] | None = None,
) -> Any | None:
    """A default video processor or feature extractor for ``attribute``, if transformers maps one."""
    from transformers.models.auto import feature_extraction_auto, video_processing_auto

    keys = _lookup_keys(model_type, config, processor_cls)
    mapping: Mapping[str, Any]
    if attribute == "video_processor":
        mapping = video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES
        cls = _backend_class(
            mapping, keys, video_processing_auto.video_processor_class_from_name
        )
    elif attribute in {"feature_extractor", "audio_processor"}:
        mapping = feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES
        cls = _backend_class(
            mapping, keys, feature_extraction_auto.feature_extractor_class_from_name
        )
    else:
        return None
    if cls is None:
        return None
    # Frames feed the same vision tower as images: a checkpoint sizes both for it.
    return (
        cls(**_audio_geometry(cls, config))
        if attribute != "video_processor"
        else cls(**_vision_geometry(cls, config))
    )


def _audio_geometry(
    feature_extractor_cls: type[Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """The mel bins that make the feature extractor feed the configured audio tower.

    As with image sizes (:func:`_vision_geometry`), transformers' default
    feature extractors and model configs are written independently
    (Qwen2-Audio's extracts 80 mel bins while its default tower takes 128); a
    real checkpoint pairs them. A feature extractor taking ``feature_size``
    gets the tower's ``num_mel_bins``.
    """
    import inspect

    num_mel_bins = lookup_config(config, "num_mel_bins")
    if (
        not isinstance(num_mel_bins, int)
        or "feature_size" not in inspect.signature(feature_extractor_cls).parameters
    ):
        return {}
    return {"feature_size": num_mel_bins}


def _vision_geometry(
    image_processor_cls: type[Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """Size settings that make the image processor feed the configured tower.

    transformers' default image processors and default model configs are
    written independently (LLaVA's crops to 224 px while its default CLIP
    tower takes 336 px); a real checkpoint pairs them. Each size setting the
    image processor declares is set to the tower's ``image_size``, and its
    patch to the tower's patch (:func:`_patch_geometry`).
    """
    overrides = _patch_geometry(image_processor_cls, config)
    image_size = lookup_config(config, "image_size")
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        height = width = image_size
    elif (
        isinstance(image_size, list | tuple)
        and len(image_size) == 2
        and all(isinstance(v, int) for v in image_size)
    ):
        height, width = image_size  # InternVL's [448, 448]
    else:
        return overrides
    for attr in ("size", "crop_size"):
        size = getattr(image_processor_cls, attr, None)
        if isinstance(size, Mapping) and {"height", "width"} <= set(size):
            overrides[attr] = {"height": height, "width": width}
        elif isinstance(size, Mapping) and set(size) == {"shortest_edge"}:
            overrides[attr] = {"shortest_edge": min(height, width)}
    return overrides


def _patch_geometry(
    image_processor_cls: type[Any], config: Mapping[str, Any]
) -> dict[str, Any]:
    """The tower's ``patch_size`` for an image or video processor that patchifies for it.

    Qwen3-VL's default processor is Qwen2-VL's, with 14 px patches, while its
    default tower embeds 16 px patches; a checkpoint's processor patchifies as
    its tower embeds (the tower reshapes HF's flattened patches by its own
    size). A processor patch more than twice the tower's, or less than half,
    is another concept under the same name (Step3p7's 504 px crop windows)
    and is left alone; a ``{"height", "width"}`` patch keeps its form.
    """
    patch = lookup_config(config, "patch_size")
    declared = getattr(image_processor_cls, "patch_size", None)
    if not isinstance(patch, int) or isinstance(patch, bool) or patch <= 0:
        return {}
    value: int | dict[str, int]
    if isinstance(declared, Mapping) and set(declared) == {"height", "width"}:
        current, value = declared["height"], {"height": patch, "width": patch}
    elif isinstance(declared, int) and not isinstance(declared, bool):
        current, value = declared, patch
    else:
        return {}
    return (
        {"patch_size": value}
        if _same_scale(current, patch) and current != patch
        else {}
    )


def _grid_params(processor_cls: type[Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's patch and merge sizes for processor settings of those names that default otherwise.

    Pixtral's processor (Mistral 3's) counts ``[IMG]`` tokens by its own
    ``patch_size`` (16) and ``spatial_merge_size`` (1), while Mistral 3's default
    config has 14 px patches merged 2×2; a checkpoint's processor config
    carries its model's values. Settings named for the grid
    (:data:`_GRID_SETTINGS`) take the config's value; a patch of another scale
    is another concept (:func:`_same_scale`).
    """
    import inspect

    params = inspect.signature(processor_cls.__init__).parameters
    found: dict[str, Any] = {}
    for name in _GRID_SETTINGS:
        default = params[name].default if name in params else None
        value = lookup_config(config, name)
        if (
            isinstance(default, int)
            and isinstance(value, int)
            and value != default
            and _same_scale(default, value)
        ):
            found[name] = value
    return found


def _same_scale(a: int, b: int) -> bool:
    """Two sizes of one concept: neither more than twice the other."""
    return min(a, b) > 0 and max(a, b) <= 2 * min(a, b)


def _processor_kwargs(
    processor_cls: type[Any], config: Any, image_processor: Any
) -> dict[str, Any]:
    """Settings a checkpoint would carry, derived from the config (see defaults and measure)."""
    kwargs = {}
    extra = extra_token_params(processor_cls)
    if extra and (measured := measure_extra_tokens(config)) is not None:
        kwargs.update(dict.fromkeys(extra, measured))
    config = config.to_dict()
    for name in none_default_params(processor_cls):
        value = lookup_config(config, name)
        if value is not None:
            kwargs[name] = value
    kwargs.update(_grid_params(processor_cls, config))
    for name in image_processor_reads(processor_cls):
        if getattr(image_processor, name, None) is None:
            value = lookup_config(config, name)
            if value is not None:
                setattr(image_processor, name, value)
    return kwargs


def _sub_processors(
    processor_cls: type[Any], model_type: str, config: Mapping[str, Any], tokenizer: Any
) -> dict[str, Any]:
    """One default object per attribute the processor is built from."""
    parts: dict[str, Any] = {}
    for attribute in processor_cls.get_attributes():
        if "tokenizer" in attribute:
            parts[attribute] = tokenizer
        elif attribute == "image_processor":
            parts[attribute] = _image_processor(model_type, config, processor_cls)
        else:
            parts[attribute] = _other_processor(
                attribute, model_type, config, processor_cls
            )
    _return_metadata_if_read(processor_cls, parts.get("video_processor"))
    fill_from_siblings(parts)
    return parts


def _return_metadata_if_read(processor_cls: type[Any], video_processor: Any) -> None:
    """Have the video processor return metadata where the processor's video hook reads it.

    Some hooks read ``video_inputs["video_metadata"]`` unconditionally while the
    video processor returns it only with ``return_metadata``, which their
    checkpoints set; a default video processor would make every video fail.
    """
    hook = next(
        (
            k.__dict__["replace_video_token"]
            for k in processor_cls.__mro__
            if "replace_video_token" in k.__dict__
        ),
        None,
    )
    if (
        video_processor is None
        or hook is None
        or getattr(video_processor, "return_metadata", True)
    ):
        return
    try:
        source = inspect.getsource(hook)
    except (OSError, TypeError):
        return
    if '"video_metadata"' in source or "'video_metadata'" in source:
        video_processor.return_metadata = True


def optional_sub_configs(config_cls: type[Any]) -> dict[str, dict[str, Any]]:
    """Each optional sub-config the config class declares, as its defaults would build it.

    A composite config may leave a tower's sub-config off by default
    (``SubConfigSpec(..., optional=True)``: NemotronH-Omni's Parakeet
    ``audio_config``, Gemma 4's vision and audio towers); a checkpoint whose
    processor serves that modality carries it. Without it nothing in the
    snapshot names the sub-model's type, by which transformers' auto mappings
    find the feature extractor, and the model has no tower to check.
    """
    specs = getattr(config_cls, "sub_configs_defaults", None) or {}
    return {key: dict(spec.init_kwargs) for key, spec in specs.items() if spec.optional}


def _architecture(model_type: str) -> str | None:
    """The class a checkpoint of ``model_type`` names in ``architectures``."""
    from transformers.models.auto import modeling_auto

    # Retrievers (ColPali) have no generation head; ColQwen2 is mapped for pre-training only.
    # MODEL_FOR_MULTIMODAL_LM comes after the image mappings, whose names a family's
    # image-text class keeps where both map it.
    mappings = (
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",
        # Audio-language models generate text too (Qwen2-Audio).
        "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
        "MODEL_FOR_RETRIEVAL_MAPPING_NAMES",
        # Audio encoders feeding a text decoder (AudioFlamingo3, MusicFlamingo): their
        # checkpoints name the generating class, not the bare model.
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "MODEL_MAPPING_NAMES",
        "MODEL_FOR_PRETRAINING_MAPPING_NAMES",
    )
    for mapping in mappings:
        name = getattr(modeling_auto, mapping, {}).get(model_type)
        if name:
            return name
    return None


def _cover_vocabulary(config: Any, num_tokens: int) -> None:
    """Grow each ``vocab_size`` that is too small to embed every tokenizer id.

    Default configs may place a special token at the vocabulary's end (LLaVA's
    ``image_token_index`` 32000 with ``vocab_size`` 32000); real checkpoints
    pad the vocabulary past it, and the model must embed every id.
    """
    from transformers import PretrainedConfig

    for layer in [
        config,
        *(v for v in vars(config).values() if isinstance(v, PretrainedConfig)),
    ]:
        vocab = getattr(layer, "vocab_size", None)
        if isinstance(vocab, int) and vocab < num_tokens:
            layer.vocab_size = num_tokens


def _synthetic_config(model_type: str) -> Any:
    """A default config of ``model_type``, its sub-configs filled in and its model class named."""
    from transformers import CONFIG_MAPPING

    # A model's own config class, with its own sub-config kwargs.
    config_cls: type[Any] = CONFIG_MAPPING[model_type]
    config = config_cls(**optional_sub_configs(config_cls))
    # Real checkpoints name their model class; vLLM resolves models by it.
    architecture = _architecture(model_type)
    config.architectures = [architecture] if architecture else None
    return config


def _token_plan(
    processor_cls: type[Any], config: Any, config_dict: dict[str, Any]
) -> TokenPlan:
    """The first plan of the synthetic vocabulary: the special tokens the processor names or adds, at the ids the config names."""
    named, anonymous = _special_tokens(processor_cls)
    # Tokens the processor adds itself still sit at the id the config names.
    texts = {
        **BASE_SPECIALS,
        **token_literals(processor_cls),
        **tokenizer_self_added(processor_cls),
        **named,
    }
    # An id kept from a lookup by text (``self.video_start_id``) is the config's ``video_start_token_id``.
    looked_up = {
        f"{attr.removesuffix('_id').removesuffix('_token')}_token": text
        for attr, text in looked_up_ids(processor_cls).items()
    }
    texts = {**looked_up, **texts}
    return TokenPlan(
        named,
        tuple(anonymous),
        _fixed_ids(config_dict, texts),
        family=tokenizer_family(config),
    )


def build_synthetic(model_type: str, directory: Path) -> None:
    """Write a synthetic snapshot of ``model_type`` into ``directory``.

    The tokenizer is built twice: once to learn the ordinary text the processor
    writes around an item (Gemma 3's ``"\\n\\n"`` before ``<start_of_image>``),
    then with that text merged into whole tokens, as a checkpoint's vocabulary
    holds it (see :mod:`mmport.sources.tokens`). Tags the processor writes as
    text (Molmo 2's ``<im_patch>``, Idefics3's ``<row_1_col_1>``) are added
    tokens in its checkpoints' tokenizers: where the first build shows any,
    they become added tokens and the text around them is learned again.
    """
    processor_cls = processor_class_for(model_type)
    config = _synthetic_config(model_type)
    config_dict = config.to_dict()
    plan = _token_plan(processor_cls, config, config_dict)
    processor = _write_snapshot(processor_cls, model_type, config, plan, directory)
    if _writes_its_own_bos(processor):
        plan = dataclasses.replace(plan, adds_bos=False)
        processor = _write_snapshot(processor_cls, model_type, config, plan, directory)
    written = wrapper_texts(processor)
    tags = written_tags(written)
    pinned = {**plan.fixed_ids, **_fixed_by_words(config_dict, tags, plan.fixed_ids)}
    unheld = _tokens_for_unheld_ids(config_dict, processor, pinned)
    if tags or unheld:
        pinned = {**pinned, **unheld}
        plan = dataclasses.replace(
            plan, anonymous=(*plan.anonymous, *tags, *unheld), fixed_ids=pinned
        )
        processor = _write_snapshot(processor_cls, model_type, config, plan, directory)
        written = wrapper_texts(processor)
    if written:
        processor = _write_snapshot(
            processor_cls,
            model_type,
            config,
            dataclasses.replace(plan, texts=written),
            directory,
        )
    if (
        _align_image_token_id(config, processor)
        | _align_media_token_ids(config, processor)
        | _tower_fits_tiles(config, processor)
    ):
        config.save_pretrained(directory)


def _write_snapshot(
    processor_cls: type[Any],
    model_type: str,
    config: Any,
    plan: TokenPlan,
    directory: Path,
) -> Any:
    """Write the tokenizer, the config and the processor built on them; returns the processor."""
    from transformers import AutoTokenizer

    write_tokenizer(plan, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    _cover_vocabulary(config, max(tokenizer.get_vocab().values()) + 1)
    config.save_pretrained(directory)
    parts = _sub_processors(processor_cls, model_type, config.to_dict(), tokenizer)
    kwargs = _processor_kwargs(processor_cls, config, parts.get("image_processor"))
    processor = processor_cls(**parts, **kwargs)
    processor.save_pretrained(directory)
    return processor


def wrapper_texts(processor: Any) -> tuple[str, ...]:
    """The ordinary (non-special) text HF writes for one image beside its special tokens.

    The prompt holds only the placeholder, so every text run in HF's ids
    is the processor's own: Gemma 3's ``"\\n\\n"`` around the image block,
    Idefics3's ``"\\n"`` between tile rows. A small image and a large one:
    some processors write text only for an image they tile (Step3p7's
    ``<patch_start>`` before each crop).
    """
    from mmport.hf.processor import call_processor, text_boundaries
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.media import make_image

    special = text_boundaries(processor.tokenizer)

    def image_call(width: int, height: int) -> Callable[[], Any]:
        return lambda: call_processor(
            processor, wrapped_placeholder(processor), [make_image(width, height, 0)]
        )

    calls = [image_call(width, height) for width, height in _WRAPPER_IMAGE_SIZES]
    calls += _video_wrapper_calls(processor)
    runs: list[str] = []
    for call in calls:
        try:
            ids = call()["input_ids"][0].tolist()
        except FOREIGN_ERRORS:
            # the processor needs more than a placeholder: its texts stay unlearned
            continue
        run: list[int] = []
        for token in [*ids, None]:
            if token is not None and token not in special:
                run.append(token)
            elif run:
                runs.append(processor.tokenizer.decode(run))
                run = []
    return tuple(t for t in dict.fromkeys(runs) if t.strip(" \n\t") or len(t) > 8)


def _video_wrapper_calls(processor: Any) -> list[Callable[[], Any]]:
    """HF on one short video under the processor's video token, where it has one: per-frame text
    (GLM-4V's ``<|begin_of_image|>`` and timestamps) is written only for videos."""
    from mmport.hf.processor import call_processor
    from mmport.media import make_video, video_metadata

    token = getattr(processor, "video_token", None)
    if (
        not isinstance(token, str)
        or getattr(processor, "video_processor", None) is None
    ):
        return []
    frames, size = _WRAPPER_VIDEO_FRAMES, _WRAPPER_IMAGE_SIZES[0]
    video = (make_video(frames, *size, 0), video_metadata(frames, *size, fps=2.0))
    return [lambda: call_processor(processor, token, [], videos=[video])]


def _writes_its_own_bos(processor: Any) -> bool:
    """True when HF's ids for a plain text open with two BOS: the processor writes one, the tokenizer adds one.

    Emu3's processor prepends ``tokenizer.bos_token`` to every prompt; its
    checkpoints' tokenizer adds none, or every prompt would open twice.
    """
    from mmport.hf.processor import call_processor

    tokenizer = getattr(processor, "tokenizer", None)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = call_processor(processor, "hi", [])["input_ids"][0].tolist()
    except FOREIGN_ERRORS:  # a processor that takes no text alone: nothing to tell
        return False
    return ids[:2] == [bos, bos]


def written_tags(texts: tuple[str, ...]) -> tuple[str, ...]:
    """The special-token-shaped pieces (``<im_patch>``, ``<row_1_col_1>``) of ``texts``, in order, once each."""
    return tuple(dict.fromkeys(piece for text in texts for piece in _TAG.findall(text)))


def _align_media_token_ids(config: Any, processor: Any) -> bool:
    """Point each video or audio token id of the config at the token HF writes for an item, where
    HF writes neither it nor another token the config names (CSM's default config embeds audio at
    its pad id, 128002, which the synthetic vocabulary gives the pad token, not ``<|AUDIO|>``).
    Returns whether the config changed."""
    from mmport.sources.health import media_sides, unwritten_media_token

    changed = False
    for modality in media_sides(processor):
        try:
            mismatch = unwritten_media_token(config, processor, modality)
        except FOREIGN_ERRORS:
            # the processor needs more than a placeholder: leave the config as it is
            continue
        if mismatch is not None and mismatch[2] is not None:
            setattr(config, mismatch[0], mismatch[2])
            changed = True
    return changed


# Config settings that merge a tower's patches into fewer positions, by name.
_MERGE_SETTINGS = ("scale_factor", "spatial_merge_size", "merge_size")


def _tower_fits_tiles(config: Any, processor: Any) -> bool:
    """Point a fixed-size tower at the square tiles HF's processor cuts, where its defaults disagree.

    Idefics3's default processor cuts 364 px tiles and writes 169 positions
    each (13 × 13 after merging 2 × 2), while its default tower takes 224 px
    in 32 px patches, a grid it cannot even merge: no checkpoint pairs them,
    and HF's own model refuses every image. The tower takes the tile's side,
    and the patch that gives HF's positions per tile under the config's merge
    factor. Returns whether the config changed.
    """
    import math

    from mmport.hf.processor import call_processor
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.media import make_image

    vision = getattr(config, "vision_config", None)
    size, patch, token = (
        getattr(vision, "image_size", None),
        getattr(vision, "patch_size", None),
        getattr(config, "image_token_id", None),
    )
    if not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (size, patch, token)
    ):
        return False
    try:
        out = call_processor(
            processor, wrapped_placeholder(processor), [make_image(64, 64, 0)]
        )
        pixels, ids = out["pixel_values"], out["input_ids"][0].tolist()
    except FOREIGN_ERRORS:  # the processor needs more than a placeholder, or gives no pixels: leave the config
        return False
    if (
        getattr(pixels, "ndim", 0) < 4
        or pixels.shape[-1] != pixels.shape[-2]
        or pixels.shape[-1] == size
    ):
        return False
    side, tiles = int(pixels.shape[-1]), math.prod(pixels.shape[:-3])
    per_tile, rest = divmod(ids.count(token), tiles)
    grid = math.isqrt(per_tile)
    merge = next(
        (
            v
            for v in (lookup_config(config.to_dict(), n) for n in _MERGE_SETTINGS)
            if isinstance(v, int) and v > 0
        ),
        1,
    )
    if (
        vision is None
        or rest
        or grid == 0
        or grid * grid != per_tile
        or side % (grid * merge)
    ):
        return False
    vision.image_size, vision.patch_size = side, side // (grid * merge)
    return True


def _align_image_token_id(config: Any, processor: Any) -> bool:
    """Point ``config.image_token_id`` at the token HF's expansion repeats, when it names another.

    A checkpoint's config and vocabulary agree on the token the model embeds
    at. Where the processor takes that token from another tokenizer attribute
    (InternVL's ``context_image_token``) or expands its placeholder into a
    different token (Aya Vision's ``<|IMG_PATCH|>``), the default config's id
    is not in the synthetic vocabulary; the id the processor writes most for
    one image is. Returns whether the config changed.
    """
    from mmport.hf.processor import call_processor, text_boundaries
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.media import make_image

    current = getattr(config, "image_token_id", None)
    if not isinstance(current, int) or isinstance(current, bool):
        return False
    try:
        ids = call_processor(
            processor, wrapped_placeholder(processor), [make_image(64, 64, 0)]
        )["input_ids"][0].tolist()
    except FOREIGN_ERRORS:
        # the processor needs more than a placeholder: leave the config as it is
        return False
    # The embedding token is the one HF repeats: Llama 4 writes <|image|> once per image
    # and embeds at each <|patch|>, which its config names.
    special = text_boundaries(processor.tokenizer)
    counts = collections.Counter(t for t in ids if t in special) or collections.Counter(
        ids
    )
    if not counts:
        return False
    repeated, times = counts.most_common(1)[0]
    if ids.count(current) >= times:
        return False
    config.image_token_id = repeated
    return True
