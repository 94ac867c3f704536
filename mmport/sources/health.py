"""Is a snapshot usable as a reference at all? One HF call says, before any analysis.

A snapshot whose processor raises on every image (a setting of zero, a size
of the wrong type), or whose config names an embedding token the processor
never writes, cannot judge a port: every probe would fail, and the port would
be blamed. :func:`check_reference` runs the HF processor once on an ordinary
image and turns either problem into a :class:`BadReferenceError` naming it.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from mmport.errors import FOREIGN_ERRORS, BadReferenceError, one_line

__all__ = ["check_reference"]

# (width, height) of the images tried: ordinary sizes every processor takes.
HEALTH_SIZES = ((224, 224), (640, 480))


def _attempts(processor: Any) -> list[str]:
    """The prompts one image may take: with its placeholder, then without (processors that insert)."""
    from mmport.hf.wrappers import wrapped_placeholder

    try:
        return [wrapped_placeholder(processor), ""]
    except AttributeError:  # no placeholder to name: only the inserting form
        return [""]


def check_reference(snapshot: Any) -> None:
    """Raise :class:`BadReferenceError` unless HF expands an image into the token the model embeds at."""
    from mmport.hf.processor import call_processor, token_id_of
    from mmport.media import make_image

    processor = snapshot.load_processor()
    _check_some_modality(snapshot, processor)
    _check_media_tokens(snapshot, processor)
    if "image_processor" not in processor.get_attributes():
        return  # no image side to try
    embed_id = snapshot.model_image_token_id()
    embed_id = token_id_of(processor) if embed_id is None else embed_id
    rejection: Exception | None = None
    answered = False
    written: collections.Counter[int] = collections.Counter()
    for width, height in HEALTH_SIZES:
        for prompt in _attempts(processor):
            try:
                ids = call_processor(processor, prompt, [make_image(width, height, 0)])[
                    "input_ids"
                ][0].tolist()
            except FOREIGN_ERRORS as exc:
                rejection = rejection or exc
                continue
            answered = True
            if embed_id in ids:
                return
            # What HF wrote beyond the prompt's own text: the image's tokens.
            written += collections.Counter(ids) - collections.Counter(
                processor.tokenizer(prompt)["input_ids"]
            )
    if not answered:
        assert rejection is not None, "every attempt raised"
        raise BadReferenceError(
            f"{snapshot.path}: the HF processor rejects an ordinary {HEALTH_SIZES[0][0]}×{HEALTH_SIZES[0][1]} image "
            f"({one_line(rejection)}); check {_settings_hint(snapshot.path, processor, rejection)}"
        )
    token = processor.tokenizer.convert_ids_to_tokens(embed_id)
    if not written:
        raise BadReferenceError(
            f"{snapshot.path}: the HF processor writes no token for an ordinary "
            f"{HEALTH_SIZES[0][0]}×{HEALTH_SIZES[0][1]} image (the config embeds images at {token!r}, "
            f"id {embed_id}); check the image processor settings in {_settings_files(snapshot.path)}"
        )
    most = written.most_common(1)[0][0]
    raise BadReferenceError(
        f"{snapshot.path}: the config embeds images at token id {embed_id} ({token!r}), but the HF processor "
        f"writes {processor.tokenizer.convert_ids_to_tokens(most)!r} (id {most}) for an image; "
        "config.json and the tokenizer disagree"
    )


def _settings_hint(directory: Any, processor: Any, rejection: Exception) -> str:
    """Which settings to check for a rejected image: the processor's own (processor_config.json)
    where its own code raised, reading a setting of its own (LLaVA-NeXT's ``patch_size``, left
    None by a snapshot without that file); the image processor's otherwise."""
    import traceback

    own_file = _source_file(type(processor))
    frames = traceback.extract_tb(rejection.__traceback__)
    if own_file and frames and Path(frames[-1].filename) == own_file:
        return (
            f"the processor's settings ({type(processor).__name__}, processor_config.json; "
            f"{own_file.name}:{frames[-1].lineno})"
        )
    return f"the image processor settings in {_settings_files(directory)}"


def _source_file(cls: type) -> Path | None:
    """The file ``cls`` is defined in, or None (a class with no source file)."""
    import inspect

    try:
        return Path(inspect.getfile(cls))
    except (OSError, TypeError):
        return None


def _check_some_modality(snapshot: Any, processor: Any) -> None:
    """Raise :class:`BadReferenceError` when ``processor`` puts no item of any modality into the prompt.

    A processor with an audio or video sub-processor but no token for it
    (Whisper's: the audio goes to an encoder-decoder model's encoder, the
    decoder's prompt holds none of it) expands nothing a vLLM
    ``MultiModalProcessor`` could place; every probe would compare text alone.
    """
    from mmport.hf.modalities import SUB_PROCESSORS, handled_modalities

    if handled_modalities(processor):
        return
    attributes = set(processor.get_attributes())
    subs = [a for subs in SUB_PROCESSORS.values() for a in subs if a in attributes]
    has = (
        f"has {', '.join(subs)} but"
        if subs
        else "has no image, video or audio sub-processor and"
    )
    raise BadReferenceError(
        f"{snapshot.path}: {type(processor).__name__} {has} names no image, video or audio "
        "placeholder token: it puts no item into the prompt (an encoder-decoder model's "
        "encoder may take the media instead), and mmport ports processors that expand an "
        "item's placeholder in the prompt"
    )


def _settings_files(directory: Any) -> str:
    """The files of ``directory`` that hold the image processor's settings (5.x writes
    them into processor_config.json, older releases into preprocessor_config.json)."""
    names = [
        name
        for name in ("processor_config.json", "preprocessor_config.json")
        if (Path(directory) / name).is_file()
    ]
    return " or ".join(names) or "processor_config.json"


def unwritten_media_token(
    config: Any, processor: Any, modality: str
) -> tuple[str, int, int | None] | None:
    """``(attribute, configured id, the id HF writes most)`` when the config embeds a video or audio
    at a token HF never writes for one, nor any other token the config names; None when they agree.

    HF may write another token for an item than the config names for its
    modality, one the config names too (GLM-4.1V's video frames are image
    tokens). An item expanded into tokens the config names none of means
    config.json and the tokenizer disagree.
    """
    from mmport.hf.modalities import most_written
    from mmport.hf.processor import call_processor, media_kwargs, probe_media
    from mmport.hf.wrappers import wrapped_placeholder
    from mmport.sources.snapshot import configured_token_id, named_token_ids

    configured = configured_token_id(config, modality)
    if configured is None:
        return None
    named = named_token_ids(config)
    placeholder = wrapped_placeholder(processor, f"{modality}_token")
    ids = call_processor(
        processor,
        placeholder,
        **media_kwargs(processor, modality, [probe_media(modality, 0)]),
    )["input_ids"][0].tolist()
    try:
        text = placeholder.replace(str(getattr(processor, f"{modality}_token")), "")
        bare = set(call_processor(processor, text, [])["input_ids"][0].tolist())
    except FOREIGN_ERRORS:
        # the processor takes no prompt without its items (Qwen3-ASR)
        bare = set()
    if configured[1] in ids or named & (set(ids) - bare):
        return None
    return configured[0], configured[1], most_written(ids, bare, set())


def media_sides(processor: Any) -> list[str]:
    """The video and audio sides ``processor`` handles and does not refuse outright (those are not ported)."""
    from mmport.hf.modalities import handled_modalities, refused_modalities

    refused = refused_modalities(processor)
    return [
        m for m in handled_modalities(processor) if m != "image" and m not in refused
    ]


def _check_media_tokens(snapshot: Any, processor: Any) -> None:
    """Raise :class:`BadReferenceError` when the config embeds a video or audio at a token HF never
    writes (see :func:`unwritten_media_token`), on each side :func:`media_sides` names."""
    config = snapshot.load_config()
    for modality in media_sides(processor):
        mismatch = unwritten_media_token(config, processor, modality)
        if mismatch is None:
            continue
        token = processor.tokenizer.convert_ids_to_tokens(mismatch[1])
        article = "an" if modality == "audio" else "a"
        raise BadReferenceError(
            f"{snapshot.path}: the config embeds {modality}s at token id {mismatch[1]} ({token!r}), but the HF processor "
            f"never writes it for {article} {modality}; config.json and the tokenizer disagree"
        )
