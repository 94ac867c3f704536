"""Is a snapshot usable as a reference at all? One HF call says, before any analysis.

A snapshot whose processor raises on every image (a setting of zero, a size
of the wrong type), or whose config names an embedding token the processor
never writes, cannot judge a port: every probe would fail, and the port would
be blamed. :func:`check_reference` runs the HF processor once on an ordinary
image and turns either problem into a :class:`BadReferenceError` naming it.
"""

from __future__ import annotations

from typing import Any

from mmport.errors import BadReferenceError, one_line

__all__ = ["check_reference"]

# (width, height) of the images tried: ordinary sizes every processor takes.
HEALTH_SIZES = ((224, 224), (640, 480))


def _attempts(processor: Any) -> list[str]:
    """The prompts one image may take: with its placeholder, then without (processors that insert)."""
    from mmport.analyzers.wrappers import wrapped_placeholder

    try:
        return [wrapped_placeholder(processor), ""]
    except Exception:  # no placeholder to name: only the inserting form
        return [""]


def check_reference(snapshot: Any) -> None:
    """Raise :class:`BadReferenceError` unless HF expands an image into the token the model embeds at."""
    from mmport.analyzers.fields import call_processor, token_id_of
    from mmport.verify.probes import make_image

    processor = snapshot.load_processor()
    if "image_processor" not in processor.get_attributes():
        return  # no image side to try
    embed_id = snapshot.model_image_token_id()
    embed_id = token_id_of(processor) if embed_id is None else embed_id
    rejection: Exception | None = None
    answered = False
    for width, height in HEALTH_SIZES:
        for prompt in _attempts(processor):
            try:
                ids = call_processor(processor, prompt, [make_image(width, height, 0)])["input_ids"][0].tolist()
            except Exception as exc:
                rejection = rejection or exc
                continue
            answered = True
            if embed_id in ids:
                return
    if not answered:
        raise BadReferenceError(
            f"{snapshot.path}: the HF processor rejects an ordinary {HEALTH_SIZES[0][0]}×{HEALTH_SIZES[0][1]} image "
            f"({one_line(rejection)}); check the processor settings in processor_config.json"
        )
    token = processor.tokenizer.convert_ids_to_tokens(embed_id)
    raise BadReferenceError(
        f"{snapshot.path}: the config embeds images at token id {embed_id} ({token!r}), but the HF processor never "
        "writes it for an image; config.json and the tokenizer disagree"
    )
