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

import dataclasses
from typing import Any

from mmport.analyzers.callblock import CallBlock, analyze_call_block
from mmport.analyzers.callparams import call_parameter
from mmport.analyzers.consumed import consumed_wrappers
from mmport.analyzers.count import CountOutcome, CountStep, ReplacementFacts
from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.fields import (
    FieldLayout,
    observe_fields,
    per_item_fields,
    refuses_images_alone,
)
from mmport.analyzers.imageproc import analyze_output_fields
from mmport.analyzers.layout import analyze_layout
from mmport.analyzers.limits import observe_limit
from mmport.analyzers.outputhook import analyze_output_hook
from mmport.analyzers.owncall import own_call_reason, process_method
from mmport.analyzers.settings import count_settings
from mmport.analyzers.sourcefile import (
    class_assignments,
    find_method,
    init_assignment_source,
)
from mmport.analyzers.wrappers import PlaceholderWrappers, analyze_placeholder_wrappers
from mmport.errors import FOREIGN_ERRORS, AnalysisError, one_line
from mmport.hf.modalities import most_written, sub_processor
from mmport.hf.processor import (
    call_processor,
    media_kwargs,
    probe_media,
    run_items,
    token_id_of,
)
from mmport.hf.quiet import quiet_transformers
from mmport.hf.wrappers import wrapped_placeholder
from mmport.spec import (
    CountRule,
    FieldSpec,
    GeometryRule,
    ModalitySpec,
    PromptUpdateSpec,
    Source,
)

__all__ = ["media_spec"]

# Why two items' outputs give no field layout: they cannot be split (AnalysisError),
# or HF cannot batch two such items at all (ragged frame counts).
_UNSPLIT: tuple[type[Exception], ...] = (AnalysisError, *FOREIGN_ERRORS)


def _attribute_source(processor_cls: type[Any], attr: str) -> Source:
    """Where the processor's constructor (or class body) sets ``attr``."""
    source = init_assignment_source(processor_cls, attr)
    if source is not None:
        return source
    assigned = class_assignments(processor_cls).get(attr)
    if assigned is not None:
        return assigned[0].source(assigned[1])
    return Source(processor_cls.__name__, 0)


def embed_token(
    snapshot: Any, processor: Any, token_id: int, modality: str, placeholder: str
) -> tuple[str, str, Source | None]:
    """Where the port finds the token the model embeds ``modality`` at, if it is not ``token_id``.

    Returns ``(owner, attribute, source)``: ``("config", "video_token_id", ...)``
    when the config names the token; else, where HF expands the placeholder
    into another token (InternVL's and SmolVLM's video frames are image
    tokens), the config or processor attribute holding the id HF writes most.
    ``("", "", None)`` when the placeholder's own token is embedded.
    """
    configured = snapshot.model_token_id(modality)
    # HF may write another token than the config names (GLM-4.1V embeds video frames at the image token).
    config = snapshot.load_config()
    named = {
        v for n in _id_attributes(config) if isinstance(v := getattr(config, n), int)
    }
    embed_id = _expanded_id(
        processor,
        modality,
        placeholder,
        token_id if configured is None else configured,
        named,
    )
    if embed_id is None or embed_id == token_id:
        return "", "", None
    for name in (f"{modality}_token_id", *_id_attributes(config)):
        if getattr(config, name, None) == embed_id:
            attr = type(config).attribute_map.get(name, name)
            found = class_assignments(type(config)).get(attr)
            return (
                "config",
                name,
                found[0].source(found[1])
                if found
                else Source(type(config).__name__, 0),
            )
    for name in _id_attributes(processor):
        if getattr(processor, name, None) == embed_id:
            return "processor", name, _attribute_source(type(processor), name)
    raise AnalysisError(
        f"HF embeds {modality}s at token id {embed_id}, which neither the config nor the processor names"
    )


def _id_attributes(obj: Any) -> list[str]:
    """Attributes of ``obj`` holding token ids (``image_token_id``, ``image_token_index``)."""
    names = vars(obj).keys() if hasattr(obj, "__dict__") else []
    found = [n for n in names if n.endswith(("_token_id", "_token_index"))]
    for key, value in getattr(type(obj), "attribute_map", {}).items():
        if key.endswith("_token_id") and value in found:
            found.append(key)
    return found


def _expanded_id(
    processor: Any,
    modality: str,
    placeholder: str,
    token_id: int,
    named: set[int] | frozenset[int] = frozenset(),
) -> int | None:
    """``token_id`` where HF writes it for one item, else the id HF writes most."""
    try:
        ids = call_processor(
            processor,
            placeholder,
            **media_kwargs(processor, modality, [probe_media(modality, 0)]),
        )["input_ids"][0].tolist()
        bare = set(call_processor(processor, "", [])["input_ids"][0].tolist())
    except FOREIGN_ERRORS:  # HF refuses one item with its placeholder, or text alone
        return None
    if token_id in ids:
        return token_id
    return most_written(ids, bare, named)


def _count(
    processor: Any,
    modality: str,
    kept: set[str],
    names: tuple[tuple[str, str], ...] = (),
    batch_axis: tuple[str, ...] = (),
) -> CountRule:
    """The hook on the item's outputs, else a visible delegation (see :func:`_delegated_count`)."""
    derived = _hook_on_outputs(processor, modality, kept, names, batch_axis)
    if derived.facts is not None:
        return derived.facts.count
    return _delegated_count(processor, modality, derived.reason)


def _hook_on_outputs(
    processor: Any,
    modality: str,
    kept: set[str],
    names: tuple[tuple[str, str], ...],
    batch_axis: tuple[str, ...],
) -> CountOutcome:
    """The count as the replacement hook reads it off the item's own HF outputs, or why it cannot be."""
    try:
        sub_kept = set(_sub_outputs(processor, modality))
    except FOREIGN_ERRORS:  # the sub-processor needs what only the processor passes it
        sub_kept = set()
    try:
        rule = analyze_output_hook(type(processor), modality, kept, sub_kept)
    except AnalysisError as exc:
        return CountOutcome(CountStep.DERIVED, reason=str(exc))
    rule = dataclasses.replace(rule, names=names, batch_axis=batch_axis)
    count = CountRule(
        (),
        "",
        False,
        "derived",
        rule.source,
        helpers=rule.helpers,
        imports=rule.imports,
        outputs=rule,
    )
    return CountOutcome(CountStep.DERIVED, ReplacementFacts(count, f"{modality}_token"))


def _delegated_count(processor: Any, modality: str, reason: str) -> CountRule:
    """HF counts each item at run time: its ``_process_<modality>``, or, where only HF's own
    ``__call__`` expands the placeholder, that call on the item alone."""
    processor_cls = type(processor)
    own_call = own_call_reason(processor_cls, modality)
    if own_call is not None:
        # Only HF's own __call__ gives an item's replacement (see mmport.analyzers.owncall).
        call = find_method(processor_cls, "__call__", models_only=True)
        assert call is not None, "own_call_reason found it"
        hook = find_method(processor_cls, f"replace_{modality}_token", models_only=True)
        why = (
            own_call
            if hook is None
            else f"{own_call}; its hook is not derived either ({reason})"
        )
        return CountRule(
            (),
            "",
            False,
            "delegated",
            call[0].source(call[1]),
            why,
            via_call=True,
        )
    found = find_method(processor_cls, f"replace_{modality}_token") or find_method(
        processor_cls, "__call__"
    )
    source = found[0].source(found[1]) if found else Source("(processor)", 0)
    return CountRule((), "", False, "delegated", source, reason)


def _fields(
    processor: Any,
    modality: str,
    placeholder: str | None,
    sources: dict[str, Source],
    one_a_prompt: bool = False,
) -> FieldLayout:
    """The observed field layout, or one batched field per key (and why) where HF's batch cannot be split.

    With ``one_a_prompt`` (HF's one block a prompt) no request holds two items:
    each key's single row is its item's.
    """
    if one_a_prompt:
        return FieldLayout(per_item_fields(processor, placeholder, sources, modality))
    try:
        return FieldLayout(observe_fields(processor, placeholder, sources, modality))
    except _UNSPLIT as exc:
        # HF cannot batch two such items (ragged frame counts), or they cannot be split
        reason = str(exc).splitlines()[0]
    try:
        fields = per_item_fields(processor, placeholder, sources, modality)
    except FOREIGN_ERRORS as exc:
        raise AnalysisError(
            f"HF refuses even one {modality} with its placeholder ({one_line(exc)})"
        ) from exc
    return FieldLayout(fields, "per_item", reason)


def _follows_metadata(processor: Any, placeholder: str) -> bool:
    """True when HF's answer for one video changes with its frame rate (Qwen2.5-VL's ``second_per_grid_ts``)."""
    import torch

    from mmport.media import make_video, video_metadata

    frames = make_video(4, 64, 48, 0)
    answers = []
    for fps in (2.0, 24.0):
        try:
            out = call_processor(
                processor,
                placeholder,
                [],
                videos=[(frames, video_metadata(4, 64, 48, fps))],
            )
        except (
            FOREIGN_ERRORS
        ):  # HF refuses the video at this frame rate: nothing follows it
            return False
        answers.append({k: v for k, v in out.items() if isinstance(v, torch.Tensor)})
    first, second = answers
    return first.keys() != second.keys() or any(
        not torch.equal(first[k], second[k]) for k in first
    )


def _follows_content(processor: Any, placeholder: str) -> bool:
    """True when HF gives a still video fewer tokens than a changing one of the same shape (frame-difference pruning)."""
    import numpy as np

    from mmport.media import make_video, video_metadata

    changing = make_video(4, 64, 64, 0)
    lengths = []
    for frames in (changing, np.zeros_like(changing)):
        try:
            out = call_processor(
                processor,
                placeholder,
                [],
                videos=[(frames, video_metadata(4, 64, 64, 2.0))],
            )
        except FOREIGN_ERRORS:  # HF refuses the video: no count to compare
            return False
        lengths.append(out["input_ids"].shape[-1])
    return lengths[0] != lengths[1]


def takes_merged_kwargs(processor_cls: type[Any], modality: str) -> bool:
    """True when HF's ``_process_<modality>`` reads its scope out of the whole merged kwargs.

    ``self.video_processor(videos, **kwargs["videos_kwargs"])`` (omni-modal
    processors) means ``kwargs`` is every scope, and so is what the hook gets;
    ``self.video_processor(videos, **kwargs)`` means the modality's scope alone.
    """
    import libcst.matchers as m

    found = find_method(processor_cls, process_method(modality))
    if found is None:
        return False
    scoped = m.Arg(star="**", value=m.Subscript(value=m.Name()))
    return bool(
        m.findall(found[1], m.Call(args=[m.ZeroOrMore(), scoped, m.ZeroOrMore()]))
    )


def _hook_names(
    processor: Any,
    modality: str,
    placeholder: str,
    fields: tuple[FieldSpec, ...],
    renamed: tuple,
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(port's name, the name the hook reads) for each field whose names differ, and the hook's
    names whose values lead with a batch axis HF's final output flattened away.

    The hook reads the sub-processor's outputs. The port names a field as HF's
    final output does, unless it renamed it apart from another modality's; and
    HF's ``__call__`` may itself have renamed what the sub-processor returned
    (InternVL merges the video processor's ``pixel_values_videos``, one row a
    video, into ``pixel_values``, one row a frame), found by the value both
    hold for the same item.
    """
    import torch

    undo = {new: old for old, new in renamed}
    try:
        final = run_items(processor, [probe_media(modality, 0)], placeholder, modality)
        direct = _sub_outputs(processor, modality)
    except FOREIGN_ERRORS:  # HF refuses the item: no outputs to match names across
        final, direct = {}, {}
    names, batch_axis = [], []
    for field in fields:
        name = undo.get(field.key, field.key)
        value = final.get(name)
        if value is not None and name not in direct:
            # The same values, possibly under another batch layout (HF's __call__ may flatten a batch of one).
            same = [
                k
                for k, v in direct.items()
                if isinstance(v, torch.Tensor)
                and v.numel() == value.numel()
                and torch.equal(v.reshape(value.shape), value)
            ]
            if len(same) == 1:
                name = same[0]
                if direct[name].shape == (1, *value.shape):
                    batch_axis.append(name)
        if name != field.key:
            names.append((field.key, name))
    return tuple(names), tuple(batch_axis)


def _one_per_item(processor: Any, modality: str, keys: tuple[str, ...]) -> bool:
    """Do the sub-processor's ``keys`` hold one value per item (row *i* is item *i*'s), so a port can keep them per item?"""
    import torch

    try:
        together = _sub_outputs(processor, modality, both=True)
        alone = [_sub_outputs(processor, modality, index=i) for i in range(2)]
    except (
        FOREIGN_ERRORS
    ):  # the sub-processor refuses the items: nothing to keep per item
        return False
    for key in keys:
        values = [
            torch.as_tensor(together[key]),
            *(torch.as_tensor(a[key]) for a in alone),
        ]
        whole, first, second = values
        if (
            whole.dim() == 0
            or whole.shape[0] != 2
            or first.shape[:1] != (1,)
            or second.shape[:1] != (1,)
        ):
            return False
        if not (torch.equal(whole[0], first[0]) and torch.equal(whole[1], second[0])):
            return False
    return True


def _sub_outputs(
    processor: Any, modality: str, index: int = 0, both: bool = False
) -> dict[str, Any]:
    """What the modality's sub-processor itself returns for probe item ``index`` (or both, together)."""
    _, sub = sub_processor(processor, modality)
    items = [probe_media(modality, i) for i in ((0, 1) if both else (index,))]
    with quiet_transformers():
        if modality == "video":
            frames = [f for f, _ in items]
            metadata = [
                {k: v for k, v in meta.items() if k != "do_sample_frames"}
                for _, meta in items
            ]
            return dict(
                sub(
                    videos=frames,
                    video_metadata=metadata,
                    do_sample_frames=False,
                    return_tensors="pt",
                )
            )
        return dict(
            sub(
                items,
                sampling_rate=getattr(sub, "sampling_rate", None),
                return_tensors="pt",
            )
        )


def _limit(processor: Any, modality: str, placeholder: str) -> int | None:
    """1 when HF refuses two items of ``modality`` in one prompt (one audio per text), else no limit."""
    try:
        run_items(
            processor,
            [probe_media(modality, 0), probe_media(modality, 0)],
            placeholder,
            modality,
        )
    except FOREIGN_ERRORS:  # HF refuses two items in one prompt: one a prompt
        return 1
    return None


def _renamed(
    fields: tuple[FieldSpec, ...], taken: set[str] | frozenset[str], modality: str
) -> tuple[tuple[FieldSpec, ...], tuple[tuple[str, str], ...]]:
    """Fields under names no earlier modality uses: ``pixel_values`` of videos becomes ``pixel_values_videos``."""
    renames = tuple((f.key, f"{f.key}_{modality}s") for f in fields if f.key in taken)
    if not renames:
        return fields, ()
    names = dict(renames)
    renamed = []
    for f in fields:
        sizes = f.sizes
        for old, new in renames:
            sizes = sizes.replace(f'"{old}"', f'"{new}"')
        renamed.append(dataclasses.replace(f, key=names.get(f.key, f.key), sizes=sizes))
    return tuple(renamed), renames


def _update(
    processor_cls: type[Any], placeholder_source: Source, token_attr: str
) -> PromptUpdateSpec:
    """The placeholder is replaced; the prompt-level facts (special tokens, a prefix or suffix HF adds) hold as read."""
    from mmport.analyzers.itemprefix import analyze_item_prefix

    update = analyze_layout(processor_cls, placeholder_source)
    prefix = analyze_item_prefix(processor_cls, token_attr)
    return dataclasses.replace(
        update,
        mode="replace",
        target="placeholder",
        source=placeholder_source,
        trailing_tokens=(),
        item_prefix=prefix,
    )


def _call_block(processor_cls: type[Any], modality: str) -> CallBlock | None:
    """The block of item tokens HF's own ``__call__`` inserts, where the model code has no hook for ``modality``."""
    if (
        find_method(processor_cls, f"replace_{modality}_token", models_only=True)
        is not None
    ):
        return None
    try:
        return analyze_call_block(processor_cls, modality)
    except AnalysisError:
        return None  # no such block: the hook or a delegation (which says why) counts


def _hook_count(
    processor: Any,
    modality: str,
    placeholder: str,
    fields: tuple[FieldSpec, ...],
    renamed: tuple,
    sources: dict[str, Source],
) -> tuple[CountRule, tuple[FieldSpec, ...]]:
    """The count from the replacement hook (or delegated), and the fields with any the hook needs kept beside HF's."""
    names, batch_axis = _hook_names(processor, modality, placeholder, fields, renamed)
    count = _count(
        processor,
        modality,
        {dict(names).get(f.key, f.key) for f in fields},
        names,
        batch_axis,
    )
    if (
        count.outputs is not None
        and count.outputs.extra_keys
        and not _one_per_item(processor, modality, count.outputs.extra_keys)
    ):
        reason = f"the hook reads {list(count.outputs.extra_keys)}, which HF drops and which hold no one value per item"
        count = dataclasses.replace(
            count,
            strategy="delegated",
            reason=reason,
            outputs=None,
            helpers=(),
            imports=(),
        )
    if count.outputs is not None and count.outputs.extra_keys:
        # One value per item, kept beside HF's outputs (see the port's _call_hf_processor).
        _, sub = sub_processor(processor, modality)
        extra = tuple(
            FieldSpec(
                k,
                "batched",
                sources.get(k, Source(f"{type(sub).__name__} (its own output)", 0)),
            )
            for k in count.outputs.extra_keys
        )
        fields = fields + extra
    return count, fields


def _needs_metadata(
    processor: Any,
    sub: Any,
    modality: str,
    placeholder: str,
    count: Any,
    parameter: Any,
) -> bool:
    """Whether vLLM must keep a video's metadata beside its frames for HF's call, if that call can take it at all.

    It must where the hook reads the metadata, where HF samples frames by
    default (vLLM's loader says in the metadata whether it did), or where HF's
    outputs follow the frame rate.
    """
    return (
        modality == "video"
        and (parameter is None or parameter.forwards_settings)
        and (
            bool(count.outputs and count.outputs.reads_metadata)
            or bool(getattr(sub, "do_sample_frames", False))
            or _follows_metadata(processor, placeholder)
        )
    )


@dataclasses.dataclass(frozen=True)
class _Placeholder:
    """How a prompt marks one item: the token and its wrappers, or nothing where HF's ``__call__`` inserts a block."""

    token_attr: str  # ``video_token``
    text: str  # the token's text
    source: Source  # where the processor sets it
    block: CallBlock | None
    wrappers: PlaceholderWrappers | None
    prompt: str  # what a prompt holds for one item ("" with a block)
    id_from_text: (
        bool  # the processor names no ``<token_attr>_id``: the port looks the text up
    )
    id_source: Source


def _placeholder(processor: Any, modality: str) -> _Placeholder:
    """The modality's placeholder as HF's prompts take it (see :class:`_Placeholder`)."""
    processor_cls: type = type(processor)
    token_attr = f"{modality}_token"
    text = str(getattr(processor, token_attr))
    source = _attribute_source(processor_cls, token_attr)
    block = _call_block(processor_cls, modality)
    wrappers = (
        None if block else analyze_placeholder_wrappers(processor_cls, token_attr)
    )
    # HF inserts a block itself: prompts carry no placeholder.
    prompt = (
        ""
        if block
        else wrapped_placeholder(
            processor,
            token_attr,
            (wrappers.before, wrappers.after) if wrappers else None,
        )
    )
    from_text = not hasattr(processor, f"{token_attr}_id")
    id_source = (
        source if from_text else _attribute_source(processor_cls, f"{token_attr}_id")
    )
    return _Placeholder(
        token_attr, text, source, block, wrappers, prompt, from_text, id_source
    )


def _count_and_update(
    processor: Any,
    modality: str,
    marker: _Placeholder,
    fields: tuple[FieldSpec, ...],
    renamed: tuple,
    sources: dict[str, Source],
) -> tuple[CountRule, tuple[FieldSpec, ...], PromptUpdateSpec]:
    """The count, the fields (with any the hook needs kept), and the prompt update: a block's, or the hook's."""
    processor_cls = type(processor)
    if marker.block:
        update = analyze_layout(processor_cls, marker.source, marker.block.update)
        return marker.block.facts.count, fields, update
    count, fields = _hook_count(
        processor, modality, marker.prompt, fields, renamed, sources
    )
    return count, fields, _update(processor_cls, marker.source, marker.token_attr)


def media_spec(
    snapshot: Any,
    processor: Any,
    modality: str,
    taken: set[str] | frozenset[str] = frozenset(),
) -> ModalitySpec:
    """Everything a port needs for the ``video`` or ``audio`` side of ``processor``.

    ``taken`` are the output names earlier modalities' fields use; this
    modality's outputs of the same name are renamed (see :func:`_renamed`).
    A processor without a hook for the modality may insert one block of its
    tokens per prompt in its own ``__call__`` (:mod:`mmport.analyzers.callblock`):
    that block fixes the count and the update, and HF supports one item a prompt.
    """
    marker = _placeholder(processor, modality)
    token_id = token_id_of(processor, marker.token_attr)
    _, sub = sub_processor(processor, modality)
    sources = {f.key: f.source for f in analyze_output_fields(type(sub))}
    limit = (
        observe_limit(processor, modality)
        if marker.block
        else _limit(processor, modality, marker.prompt)
    )
    one_a_prompt = limit == 1 and marker.block is not None
    layout = _fields(processor, modality, marker.prompt, sources, one_a_prompt)
    fields, renamed_keys = _renamed(layout.fields, taken, modality)
    embed_owner, embed_attr, embed_source = embed_token(
        snapshot, processor, token_id, modality, marker.prompt
    )
    count, fields, update = _count_and_update(
        processor, modality, marker, fields, renamed_keys, sources
    )
    spec = ModalitySpec(
        modality=modality,
        placeholder=marker.text,
        placeholder_source=marker.source,
        token_attr=f"{marker.token_attr}_id",
        token_id=token_id,
        token_source=marker.id_source,
        token_id_from_text=marker.id_from_text,
        count=count,
        geometry=GeometryRule("none"),
        update=update,
        fields=fields,
        limit=limit,
        worst_case_size=None,
        fields_strategy=layout.strategy,
        fields_reason=layout.reason,
        embed_token_attr=embed_attr,
        embed_token_source=embed_source,
        embed_token_owner=embed_owner,
        renamed_keys=renamed_keys,
    )
    return _with_call_facts(spec, processor, marker)


def _with_call_facts(
    spec: ModalitySpec, processor: Any, marker: _Placeholder
) -> ModalitySpec:
    """``spec`` with what vLLM must hand HF's call: the wrappers a prompt carries (or HF takes in with
    the placeholder), text beside items, the sub-processor's scope and settings, a video's metadata."""
    processor_cls: type = type(processor)
    modality, wrappers = spec.modality, marker.wrappers
    sub_attr, sub = sub_processor(processor, modality)
    parameter = call_parameter(processor_cls, modality)
    consumed = (
        None
        if marker.block or wrappers
        else consumed_wrappers(processor, modality, marker.token_attr)
    )
    return dataclasses.replace(
        spec,
        needs_text=refuses_images_alone(processor, modality),
        placeholder_wrappers=(wrappers.before, wrappers.after) if wrappers else (),
        wrappers_source=wrappers.source if wrappers else None,
        consumed_wrappers=consumed or (),
        consumed_source=_attribute_source(processor_cls, consumed[0])
        if consumed
        else None,
        sub_processor=sub_attr,
        needs_metadata=_needs_metadata(
            processor, sub, modality, marker.prompt, spec.count, parameter
        ),
        follows_content=modality == "video"
        and _follows_content(processor, marker.prompt),
        merged_kwargs=takes_merged_kwargs(processor_cls, modality),
        settings=count_settings(processor, sub, modality, spec.count),
        call_parameter=parameter,
    )


EXAMPLES = [
    valid(
        "an_omni_processor_reads_its_scope_out_of_every_scope",
        """
        class Qwen2_5OmniProcessor:
            def _process_videos(self, videos, **kwargs):
                return self.video_processor(videos, **kwargs["videos_kwargs"])
        """,
        lambda snippet: takes_merged_kwargs(snippet.Qwen2_5OmniProcessor, "video"),
        True,
    ),
    invalid(
        "a_processor_handed_its_scope_alone",
        """
        class LlavaOnevisionProcessor:
            def _process_videos(self, videos, **kwargs):
                return self.video_processor(videos, **kwargs)
        """,
        lambda snippet: takes_merged_kwargs(snippet.LlavaOnevisionProcessor, "video"),
        expected=False,
    ),
]
