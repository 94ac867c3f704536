"""The video and audio sides of a processor, as port facts.

Each is read the way the image side is, with what differs: the count comes
from the replacement hook run on the item's own HF outputs
(:mod:`mmport.analyzers.outputhook`), or, where that cannot be derived, from
HF's ``_process_<modality>`` called at run time on the one item (delegated,
with the reason); fields are observed on two items far apart in size; the
port learns from the sub-processor what vLLM must hand it (metadata beside a
video's frames, audio at the feature extractor's sampling rate).
"""

from __future__ import annotations

from typing import Any

from mmport.analyzers.fields import observe_fields, per_item_fields, refuses_images_alone, token_id_of
from mmport.analyzers.imageproc import analyze_output_fields
from mmport.analyzers.outputhook import analyze_output_hook
from mmport.analyzers.sourcefile import SelfAssignments, class_assignments, find_method
from mmport.analyzers.wrappers import analyze_placeholder_wrappers, wrapped_placeholder
from mmport.errors import AnalysisError
from mmport.spec import CountRule, GeometryRule, ModalitySpec, PromptUpdateSpec, Source

__all__ = ["SUB_PROCESSORS", "handled_modalities", "media_spec", "sub_processor"]

# The processor attributes holding each modality's sub-processor, in the order HF looks them up.
SUB_PROCESSORS = {"image": ("image_processor",), "video": ("video_processor",), "audio": ("audio_processor", "feature_extractor")}


def handled_modalities(processor: Any) -> list[str]:
    """The modalities ``processor`` takes: a sub-processor for it and (but for images) a placeholder token."""
    from mmport.media import MODALITIES

    attributes = set(processor.get_attributes())
    found = []
    for modality in MODALITIES:
        has_sub = any(getattr(processor, a, None) is not None for a in SUB_PROCESSORS[modality] if a in attributes)
        if has_sub and (modality == "image" or getattr(processor, f"{modality}_token", None) is not None):
            found.append(modality)
    return found


def sub_processor(processor: Any, modality: str) -> tuple[str, Any]:
    """``(attribute, object)`` of the sub-processor that handles ``modality``."""
    for attribute in SUB_PROCESSORS[modality]:
        value = getattr(processor, attribute, None)
        if value is not None:
            return attribute, value
    raise AnalysisError(f"{type(processor).__name__} has no {modality} processor")


def _attribute_source(processor_cls: type, attr: str) -> Source:
    """Where the processor's constructor (or class body) sets ``attr``."""
    found = find_method(processor_cls, "__init__", models_only=True)
    if found is not None:
        visitor = SelfAssignments()
        found[1].visit(visitor)
        if attr in visitor.nodes:
            return found[0].source(visitor.nodes[attr])
    assigned = class_assignments(processor_cls).get(attr)
    if assigned is not None:
        return assigned[0].source(assigned[1])
    return Source(processor_cls.__name__, 0)


def embed_token(snapshot: Any, token_id: int, modality: str) -> tuple[str, Source | None]:
    """The config attribute of the token the model embeds ``modality`` at, if not ``token_id``."""
    embed_id = snapshot.model_token_id(modality)
    if embed_id is None or embed_id == token_id:
        return "", None
    config = snapshot.load_config()
    name = f"{modality}_token_id"
    attr = type(config).attribute_map.get(name, name)
    found = class_assignments(type(config)).get(attr)
    return name, found[0].source(found[1]) if found else Source(type(config).__name__, 0)


def _count(processor: Any, modality: str, kept: set[str]) -> CountRule:
    """The hook on the item's outputs, else a visible delegation to HF's ``_process_<modality>``."""
    try:
        rule = analyze_output_hook(type(processor), modality, kept)
    except AnalysisError as exc:
        hook = find_method(type(processor), f"replace_{modality}_token") or find_method(type(processor), "__call__")
        source = hook[0].source(hook[1]) if hook else Source("(processor)", 0)
        return CountRule((), "", False, "delegated", source, str(exc))
    return CountRule((), "", False, "derived", rule.source, helpers=rule.helpers, imports=rule.imports, outputs=rule)


def _fields(processor: Any, modality: str, placeholder: str | None, sources: dict[str, Source]) -> tuple[tuple, str, str]:
    """The observed field layout, or one batched field per key (and why) where HF's batch cannot be split."""
    try:
        return observe_fields(processor, placeholder, sources, modality), "derived", ""
    except Exception as exc:  # HF cannot batch two such items (ragged frame counts), or they cannot be split
        return per_item_fields(processor, placeholder, sources, modality), "per_item", str(exc).splitlines()[0]


def media_spec(snapshot: Any, processor: Any, modality: str) -> ModalitySpec:
    """Everything a port needs for the ``video`` or ``audio`` side of ``processor``."""
    processor_cls = type(processor)
    token_attr = f"{modality}_token"
    token_text = str(getattr(processor, token_attr))
    token_id = token_id_of(processor, token_attr)
    placeholder_source = _attribute_source(processor_cls, token_attr)
    wrappers = analyze_placeholder_wrappers(processor_cls, token_attr)
    placeholder = wrapped_placeholder(processor, token_attr, wrappers)
    sub_attr, sub = sub_processor(processor, modality)
    sources = {f.key: f.source for f in analyze_output_fields(type(sub))}
    fields, fields_strategy, fields_reason = _fields(processor, modality, placeholder, sources)
    embed_attr, embed_source = embed_token(snapshot, token_id, modality)
    token_id_from_text = not hasattr(processor, f"{token_attr}_id")
    count = _count(processor, modality, {f.key for f in fields})
    # The hook reads a video's metadata, or HF samples frames by default (and vLLM's
    # loader says in the metadata whether it did): vLLM must keep the metadata.
    needs_metadata = modality == "video" and (bool(count.outputs and count.outputs.reads_metadata) or bool(getattr(sub, "do_sample_frames", False)))
    return ModalitySpec(
        modality=modality,
        placeholder=token_text,
        placeholder_source=placeholder_source,
        token_attr=f"{token_attr}_id",
        token_id=token_id,
        token_source=placeholder_source if token_id_from_text else _attribute_source(processor_cls, f"{token_attr}_id"),
        token_id_from_text=token_id_from_text,
        count=count,
        geometry=GeometryRule("none"),
        update=PromptUpdateSpec("replace", "placeholder", placeholder_source),
        fields=fields,
        limit=None,
        worst_case_size=None,
        fields_strategy=fields_strategy,
        fields_reason=fields_reason,
        needs_text=refuses_images_alone(processor, modality),
        embed_token_attr=embed_attr,
        embed_token_source=embed_source,
        placeholder_wrappers=(wrappers.before, wrappers.after) if wrappers else (),
        wrappers_source=wrappers.source if wrappers else None,
        sub_processor=sub_attr,
        needs_metadata=needs_metadata,
    )
