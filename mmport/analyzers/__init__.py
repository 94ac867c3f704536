"""Static analysis of a model's HF code into a :class:`~mmport.spec.PortSpec`.

Each analyzer is a small libcst visitor plus one function returning frozen
facts with provenance; :func:`analyze` runs them for a snapshot.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from mmport import __version__
from mmport.analyzers.callblock import analyze_call_block
from mmport.analyzers.count import (
    CountOutcome,
    CountStep,
    HookShape,
    ReplacementFacts,
    analyze_replacement,
    hook_shape,
)
from mmport.analyzers.edgemerges import analyze_edge_merges
from mmport.analyzers.entryport import analyze_entry_port
from mmport.analyzers.fields import (
    FieldLayout,
    observe_fields,
    per_item_fields,
    refuses_images_alone,
)
from mmport.analyzers.imageproc import analyze_geometry, analyze_output_fields
from mmport.analyzers.itemprefix import analyze_item_prefix
from mmport.analyzers.language import (
    language_model,
    modular_lineage,
    tied_embeddings,
)
from mmport.analyzers.layout import analyze_layout
from mmport.analyzers.limits import observe_limit
from mmport.analyzers.media import media_spec
from mmport.analyzers.modeling import analyze_encoder
from mmport.analyzers.owncall import own_call_reason
from mmport.analyzers.replacement import analyze_replacement_text, merged_image_kwargs
from mmport.analyzers.selfhandled import analyze_self_handled, observed_text_prefix
from mmport.analyzers.settings import (
    count_settings,
    unfollowed_switches,
    unread_geometry_factors,
)
from mmport.analyzers.sourcefile import (
    class_assignments,
    find_method,
    init_assignment_source,
)
from mmport.analyzers.vllmclass import vllm_model_plan
from mmport.analyzers.vllmsource import (
    own_config_class,
    shipped_architectures,
    substituted_model_types,
)
from mmport.analyzers.wrappers import PlaceholderWrappers, analyze_placeholder_wrappers
from mmport.errors import AnalysisError, SideInputsRefusal
from mmport.hf.entry import entry_point
from mmport.hf.modalities import (
    handled_modalities,
    handles_images_itself,
    refused_modalities,
)
from mmport.hf.ownprompt import writes_own_prompt
from mmport.hf.processor import token_id_of
from mmport.hf.wrappers import wrapped_placeholder
from mmport.sources import Snapshot
from mmport.spec import (
    CountRule,
    EdgeMerges,
    EncoderSpec,
    FeaturePath,
    GeometryRule,
    LanguageModelSpec,
    ModalitySpec,
    PortSpec,
    PromptUpdateSpec,
    SettingSpec,
    Source,
    SwitchSpec,
    VllmModelPlan,
)

__all__ = ["analyze"]


def _attribute_source(processor_cls: type[Any], attr: str) -> Source:
    """Where the processor's constructor sets ``self.<attr>``."""
    source = init_assignment_source(processor_cls, attr)
    if source is None:
        raise AnalysisError(
            f"{processor_cls.__name__}.__init__ does not set self.{attr}"
        )
    return source


def _shipped_module(cls: type[Any]) -> str:
    """The transformers module defining ``cls``; "" for a snapshot's own code (it cannot be imported by name)."""
    return cls.__module__ if cls.__module__.startswith("transformers.") else ""


def _architecture(snapshot: Snapshot) -> str:
    architectures = snapshot.config_dict.get("architectures") or []
    if architectures:
        return architectures[0]
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    return MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(snapshot.model_type, "")


def _replacement(
    processor, geometry: GeometryRule
) -> tuple[ReplacementFacts, PromptUpdateSpec | None]:
    """The count's fallback chain: derived, else transplanted, else delegated to HF with the reason.

    A processor without a replacement hook may insert a block of image tokens
    in its own ``__call__``; that block also fixes the prompt update. Which
    refusal a delegation carries is read off the hook's shape: a hook that
    returns ``token * count`` (or none) is the derivation's to read, so its
    refusal says why; one that returns more is the transplant's.
    """
    shape = hook_shape(type(processor))
    derived = _derived_count(processor, geometry, shape)
    if derived.facts is not None:
        return derived.facts, derived.update
    transplanted = _transplanted_count(processor)
    if transplanted.facts is not None:
        return transplanted.facts, None
    refused = transplanted if shape is HookShape.WHOLE else derived
    return _delegated_count(processor, refused.reason), None


def _derived_count(processor, geometry: GeometryRule, shape: HookShape) -> CountOutcome:
    """The count read off the hook's ``token * count``, or off the block HF's ``__call__`` inserts (no hook)."""
    processor_cls = type(processor)
    try:
        if shape is HookShape.ABSENT:
            block = analyze_call_block(processor_cls)
            return CountOutcome(CountStep.DERIVED, block.facts, update=block.update)
        facts = analyze_replacement(
            processor_cls, "image", type(processor.image_processor)
        )
    except AnalysisError as exc:
        return CountOutcome(CountStep.DERIVED, reason=str(exc))
    if facts.count.uses_geometry and geometry.kind != "fixed":
        return CountOutcome(
            CountStep.DERIVED,
            reason="the count reads an item size that the image processor does not fix",
        )
    return CountOutcome(CountStep.DERIVED, facts)


def _transplanted_count(processor) -> CountOutcome:
    """The whole hook carried over, for one that returns more than ``token * count``."""
    try:
        rule = analyze_replacement_text(
            type(processor), type(processor.image_processor)
        )
    except AnalysisError as exc:
        return CountOutcome(CountStep.TRANSPLANTED, reason=str(exc))
    return CountOutcome(CountStep.TRANSPLANTED, ReplacementFacts(rule, "image_token"))


def _delegated_count(processor, reason: str) -> ReplacementFacts:
    """HF counts each image at run time: through its own ``__call__``, or its ``_process_images``."""
    processor_cls = type(processor)
    found = find_method(processor_cls, "replace_image_token") or find_method(
        processor_cls, "__call__"
    )
    source = found[0].source(found[1]) if found else Source("(processor)", 0)
    own_call = own_call_reason(processor_cls, "image")
    if own_call is not None:
        rule = CountRule(
            (),
            "",
            False,
            "delegated",
            source,
            f"{own_call}: {reason}",
            via_call=True,
        )
    else:
        rule = CountRule(
            (),
            "",
            False,
            "delegated",
            source,
            reason,
            delegate_args=_process_images_args(
                processor_cls, _merged_image_kwargs(processor)
            ),
        )
    return ReplacementFacts(rule, "image_token")


def _process_images_args(
    processor_cls: type[Any], image_kwargs: set[str]
) -> tuple[str, ...]:
    """Processor kwargs HF's ``__call__`` hands ``_process_images`` beside the image kwargs.

    Lfm2Vl's ``__call__`` passes ``use_image_special_tokens`` (a processor-level
    kwarg) to its own ``_process_images``: as a named parameter in newer
    releases, in older ones (5.20) inside ``**kwargs``, which
    ``_process_images`` pops (``kwargs.pop("use_image_special_tokens")``). A
    delegated port must pass it too. Names the merged image kwargs
    (``image_kwargs``) already hold (GotOcr2's ``multi_page``) arrive with them.
    """
    import inspect

    import libcst as cst
    import libcst.matchers as m

    from mmport.hf.syntax import find_all, string_value

    params = list(inspect.signature(processor_cls._process_images).parameters.values())[
        2:
    ]
    named = [
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    star = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
    found = find_method(processor_cls, "_process_images")
    if star is not None and found is not None:
        pop = m.Call(
            func=m.Attribute(value=m.Name(star), attr=m.Name("pop")),
            args=[m.Arg(m.SimpleString())],
        )
        named += [
            key
            for call in find_all(found[1], pop, cst.Call)
            if (key := string_value(call.args[0].value)) is not None
        ]
    return tuple(name for name in named if name not in image_kwargs)


def _merged_image_kwargs(processor) -> set[str]:
    """Names of the image kwargs HF's ``__call__`` merges (none, where the processor cannot merge them)."""
    try:
        return set(merged_image_kwargs(processor))
    except (AttributeError, TypeError, ValueError, KeyError):
        return set()


def _embed_token(snapshot: Snapshot, token_id: int) -> tuple[str, Source | None]:
    """The config attribute of the token the model embeds at, if not ``token_id``.

    HF models place image features where ``input_ids == config.image_token_id``
    (``get_placeholder_mask``); most processors' placeholder is that token.
    """
    embed_id = snapshot.model_image_token_id()
    if embed_id is None or embed_id == token_id:
        return "", None
    config = snapshot.load_config()
    attr = type(config).attribute_map.get("image_token_id", "image_token_id")
    found = class_assignments(type(config)).get(attr)
    return "image_token_id", found[0].source(found[1]) if found else Source(
        type(config).__name__, 0
    )


def _image_fields(
    processor, placeholder: str | None, sources: dict, flipped, own_prompt
) -> FieldLayout:
    """The image fields as observed across items where HF batches them, else item by item, with the reason.

    Item by item where HF's outputs do not split, or where it writes its own
    prompt (one image a request: each key's single row is that image's, see
    ownprompt), and then ``per_item`` where an image's output has rows of its own.
    """
    if own_prompt:
        fields = per_item_fields(processor, placeholder, sources, switches=flipped)
        if any(f.rows for f in fields):
            return FieldLayout(
                fields, "per_item", "an image's output has rows of its own (tiles)"
            )
        return FieldLayout(fields)
    try:
        return FieldLayout(
            observe_fields(processor, placeholder, sources, switches=flipped)
        )
    except (AnalysisError, RuntimeError) as exc:
        reason = str(exc).splitlines()[0]
    return FieldLayout(
        per_item_fields(processor, placeholder, sources, switches=flipped),
        "per_item",
        reason,
    )


def _self_handled_image_spec(processor) -> ModalitySpec:
    """The image side of a processor that handles images itself: HF's own ``__call__`` counts them.

    See :mod:`mmport.analyzers.selfhandled`.
    """
    processor_cls = type(processor)
    placeholder_source = _attribute_source(processor_cls, "image_token")
    placeholder = str(processor.image_token)
    handled = analyze_self_handled(processor, placeholder)
    reason = (
        f"{processor_cls.__name__} handles images itself, with no image processor, and its "
        "__call__ writes each image's tokens inline, in no hook a port can carry over"
    )
    token_id_from_text = not hasattr(processor, "image_token_id")
    # HF tokenizes the text without special tokens and puts its own first (observed).
    update = dataclasses.replace(
        _image_update(processor_cls, "image_token", placeholder_source, None),
        add_special_tokens=False,
        special_tokens_source=handled.source,
        prefix=observed_text_prefix(processor, handled.source),
    )
    layout = _image_fields(processor, placeholder, {}, (), None)
    return ModalitySpec(
        modality="image",
        placeholder=placeholder,
        placeholder_source=placeholder_source,
        token_attr="image_token_id",
        token_id=token_id_of(processor, "image_token"),
        token_source=placeholder_source
        if token_id_from_text
        else _attribute_source(processor_cls, "image_token_id"),
        token_id_from_text=token_id_from_text,
        count=CountRule(
            (), "", False, "delegated", handled.source, reason, via_call=True
        ),
        geometry=GeometryRule("none"),
        update=update,
        fields=layout.fields,
        limit=None,
        worst_case_size=None,
        fields_strategy=layout.strategy,
        fields_reason=layout.reason,
        needs_text=refuses_images_alone(processor),
        self_handled=handled,
    )


def _image_side(snapshot: Snapshot, processor) -> ModalitySpec:
    """The image side: through HF's own ``__call__`` for a processor that handles images itself."""
    if handles_images_itself(processor):
        return _self_handled_image_spec(processor)
    return _image_spec(snapshot, processor)


def _image_spec(snapshot: Snapshot, processor) -> ModalitySpec:
    """Everything a port needs for the image side of ``processor``."""
    processor_cls = type(processor)
    geometry = analyze_geometry(type(processor.image_processor))
    facts, inserted = _replacement(processor, geometry)
    placeholder_source = _attribute_source(processor_cls, facts.token_attr)
    token_attr = f"{facts.token_attr}_id"
    token_id = token_id_of(processor, facts.token_attr)
    # Some processors name the token (an AddedToken, even) but not its id.
    token_id_from_text = not hasattr(processor, token_attr)
    update = _image_update(
        processor_cls, facts.token_attr, placeholder_source, inserted
    )
    static_fields = analyze_output_fields(type(processor.image_processor))
    token_text = str(getattr(processor, facts.token_attr))
    wrappers, placeholder = _image_placeholder(processor, facts.token_attr, update)
    embed_token_attr, embed_token_source = _embed_token(snapshot, token_id)
    sources = {f.key: f.source for f in static_fields}
    own_prompt = _own_prompt_source(processor)
    settings = count_settings(
        processor, processor.image_processor, "image", facts.count, geometry.size_expr
    )
    unfollowed, counted_by_hf, tiling = _request_switches(
        processor, facts.count, settings
    )
    # The fields must split HF's outputs under each switch a request may flip, as by default.
    flipped = _flipped_switches(processor, [s.name for s in (*settings, *tiling)])
    layout = _image_fields(processor, placeholder, sources, flipped, own_prompt)
    return ModalitySpec(
        modality="image",
        placeholder=token_text,
        placeholder_source=placeholder_source,
        token_attr=token_attr,
        token_id=token_id,
        token_source=placeholder_source
        if token_id_from_text
        else _attribute_source(processor_cls, token_attr),
        token_id_from_text=token_id_from_text,
        placeholder_differs=placeholder is not None
        and _token_id(processor, token_text) != token_id,
        placeholder_wrappers=(wrappers.before, wrappers.after) if wrappers else (),
        wrappers_source=wrappers.source if wrappers else None,
        count=facts.count,
        geometry=geometry,
        update=update,
        fields=layout.fields,
        limit=observe_limit(processor)
        if update.mode == "insert" or own_prompt
        else None,
        worst_case_size=_fixed_size(processor.image_processor, geometry.size_expr),
        fields_strategy=layout.strategy,
        fields_reason=layout.reason,
        needs_text=update.mode == "replace" and refuses_images_alone(processor),
        embed_token_attr=embed_token_attr,
        embed_token_source=embed_token_source,
        own_prompt_source=own_prompt,
        settings=settings,
        unfollowed=unfollowed,
        counted_by_hf=counted_by_hf,
        switches=_switch_specs(facts.count, (*settings, *tiling), unfollowed, flipped),
    )


def _image_update(
    processor_cls: type[Any],
    token_attr: str,
    placeholder_source: Source,
    inserted: PromptUpdateSpec | None,
) -> PromptUpdateSpec:
    """How HF changes the prompt for an image (or the block its ``__call__`` inserts), with a replaced
    placeholder's per-item prefix."""
    update = analyze_layout(processor_cls, placeholder_source, inserted)
    if update.mode != "replace":
        return update
    return dataclasses.replace(
        update, item_prefix=analyze_item_prefix(processor_cls, token_attr)
    )


def _image_placeholder(
    processor, token_attr: str, update: PromptUpdateSpec
) -> tuple[PlaceholderWrappers | None, str | None]:
    """The wrappers HF demands around the placeholder, and what a prompt holds for one image (None: HF inserts it)."""
    wrappers = analyze_placeholder_wrappers(type(processor), token_attr)
    if update.mode == "insert":
        return wrappers, None
    pair = (wrappers.before, wrappers.after) if wrappers else None
    return wrappers, wrapped_placeholder(processor, token_attr, pair)


# Calls that cut an item into several (tiles, crops, patches): the switches guarding one.
TILING_CALLS = ("split", "crop", "patch", "tile")


def _request_switches(
    processor, count: CountRule, settings: tuple[SettingSpec, ...]
) -> tuple[tuple[SettingSpec, ...], tuple[SettingSpec, ...], tuple[SettingSpec, ...]]:
    """``(unfollowed, counted_by_hf, tiling)``: the switches the port refuses, the kwargs HF counts
    for it, and (a count delegated to HF, which follows every setting) the tiling switches."""
    image_processor = processor.image_processor
    if count.strategy == "delegated":
        return (
            (),
            (),
            unfollowed_switches(
                image_processor, "image", processor, set(), TILING_CALLS
            ),
        )
    followed = {s.name for s in settings} | {s.folded_into for s in settings}
    unfollowed = unfollowed_switches(image_processor, "image", processor, followed)
    return (
        unfollowed,
        unread_geometry_factors(image_processor, "image", processor, followed),
        (),
    )


def _flipped_switches(processor, names: list[str]) -> dict[str, bool]:
    """Those of ``names`` that HF's call defaults to a bool (switches), each flipped."""
    try:
        defaults = merged_image_kwargs(processor)
    except (AttributeError, TypeError, ValueError, KeyError):
        defaults = {}  # a processor that cannot merge its kwargs: the image processor's own values
    values = {
        name: defaults.get(name, getattr(processor.image_processor, name, None))
        for name in names
    }
    return {
        name: not value for name, value in values.items() if isinstance(value, bool)
    }


def _switch_specs(
    count: CountRule,
    followed: tuple[SettingSpec, ...],
    unfollowed: tuple[SettingSpec, ...],
    flipped: dict[str, bool],
) -> tuple[SwitchSpec, ...]:
    """Each switch a request may flip: followed (the count and the fields follow it) or refused, and why."""
    counts = (
        "HF counts each item under it"
        if count.strategy == "delegated"
        else "the count reads it"
    )
    how = f"{counts}; the fields split HF's outputs under it as by default"
    switches = [
        SwitchSpec(s.name, True, how, s.read_at) for s in followed if s.name in flipped
    ]
    refused = "HF resizes, crops, pads or splits by it, and the count does not read it"
    return (
        *switches,
        *(SwitchSpec(s.name, False, refused, s.read_at) for s in unfollowed),
    )


def _own_prompt_source(processor) -> Source | None:
    """Where HF writes the prompt for images alone, if it takes no text beside them."""
    if not writes_own_prompt(processor):
        return None
    found = find_method(type(processor), "prepare_inputs_layout", models_only=True)
    if found is None:
        raise AnalysisError(
            f"{type(processor).__name__} writes its own prompt, but not in prepare_inputs_layout"
        )
    return found[0].source(found[1])


def _token_id(processor, text: str) -> int:
    """The id the processor's tokenizer gives ``text`` as one token."""
    return processor.tokenizer.convert_tokens_to_ids(text)


def _fixed_size(image_processor, size_expr: str) -> tuple[int, int] | None:
    """This snapshot's processed (height, width), evaluated like the port will."""
    if not size_expr:
        return None
    size = eval(
        size_expr, {}, {"image_processor": image_processor}
    )  # expression built by analyze_geometry
    if size is None or size.get("height") is None:
        return None
    return (size["height"], size["width"])


def _encoder(
    architecture: str, modalities: tuple[ModalitySpec, ...], config: Any = None
) -> tuple[EncoderSpec | None, str, tuple[str, ...]]:
    """HF's encoder paths of ``modalities`` for the model class (its ``config`` resolves
    the auto classes it builds), or None and the reason; and the modalities whose
    embeddings alone would not reproduce HF (:attr:`PortSpec.embeddings_refused`)."""
    import transformers

    model_cls = getattr(transformers, architecture, None)
    if model_cls is None:
        return None, f"transformers has no class {architecture}", ()
    item_inputs = {m.modality: tuple(f.key for f in m.fields) for m in modalities}
    try:
        encoder = analyze_encoder(
            model_cls, tuple(m.modality for m in modalities), item_inputs, config
        )
    except SideInputsRefusal as exc:
        return None, str(exc), exc.modalities
    except AnalysisError as exc:
        return None, str(exc), ()
    return _through_other_paths(encoder, modalities), "", encoder.side_refused


def _vllm_model(
    architecture: str,
    encoder: EncoderSpec | None,
    modalities: tuple[ModalitySpec, ...],
    config: Any,
    language: LanguageModelSpec,
    model_type: str,
) -> tuple[VllmModelPlan | None, str]:
    """The class's encoders as vLLM code (mmport.analyzers.vllmclass), or None and why not."""
    import transformers

    if encoder is None:
        return None, "no encoder path is derived"
    if language.registers or language.unbuildable:
        return None, "vLLM builds the language model from a class the port registers"
    try:
        plan = vllm_model_plan(
            getattr(transformers, architecture),
            encoder,
            modalities,
            config,
            substitutes_config=model_type in substituted_model_types(),
        )
    except AnalysisError as exc:
        return None, str(exc)
    return plan, ""


def _through_other_paths(
    encoder: EncoderSpec, modalities: tuple[ModalitySpec, ...]
) -> EncoderSpec:
    """Give a modality with no path of its own the path of the modality HF hands it as.

    InternVL's and SmolVLM's processors hand a video's frames to the model as
    images: HF names those outputs as the image's (the port renames them,
    ``renamed_keys``), and the model places their features at the image token
    (the video's embed token is the image's). Such a video goes through the
    image path, under HF's names.
    """
    paths = list(encoder.paths)
    missing = dict(encoder.missing)
    for side in modalities:
        hf_names = dict((ours, hf) for hf, ours in side.renamed_keys)
        for other in modalities:
            path = encoder.path(other.modality)
            if (
                side.modality not in missing
                or path is None
                or not side.embed_token_attr
                or side.embed_token_attr != (other.embed_token_attr or other.token_attr)
                or not hf_names
                or {hf_names.get(f.key) for f in side.fields}
                - {f.key for f in other.fields}
            ):
                continue
            del missing[side.modality]
            paths.append(
                FeaturePath(
                    side.modality,
                    path.method,
                    side.embed_token_source or path.source,
                    through=other.modality,
                    renamed=tuple(hf_names.items()),
                )
            )
    return dataclasses.replace(
        encoder, paths=tuple(paths), missing=tuple(missing.items())
    )


def _language(
    config: Any, encoder: EncoderSpec | None, architecture: str
) -> LanguageModelSpec:
    """The language model the port has vLLM build, and the tie flag its text config needs."""
    text_config = config.get_text_config()
    language = language_model(
        text_config,
        encoder.language_class if encoder else None,
        own_architecture=architecture,
        shipped=shipped_architectures(),
        lineage=lambda: modular_lineage(type(text_config)),
        encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
        own_config=own_config_class,
    )
    root = encoder.config_path if encoder else ()
    return dataclasses.replace(language, tie_flag_holder=tied_embeddings(config, root))


def _modalities(
    snapshot: Snapshot, processor, refused: dict[str, str]
) -> tuple[ModalitySpec, ...]:
    """Every modality the processor handles; a later one renames outputs an earlier one names the same."""
    specs: list[ModalitySpec] = []
    for modality in handled_modalities(processor):
        if modality in refused:
            continue
        taken = {f.key for spec in specs for f in spec.fields}
        spec = (
            _image_side(snapshot, processor)
            if modality == "image"
            else media_spec(snapshot, processor, modality, taken)
        )
        specs.append(
            dataclasses.replace(spec, edge_merges=_edge_merges(processor, spec))
        )
    return tuple(specs)


def _edge_merges(processor, spec: ModalitySpec) -> EdgeMerges | None:
    """The tokens HF's tokenizer merges across the modality's item edges (replaced placeholders only)."""
    if spec.update.mode != "replace" or spec.own_prompt_source:
        return None
    before, after = (
        (getattr(processor, name) for name in spec.placeholder_wrappers)
        if spec.placeholder_wrappers
        else ("", "")
    )
    placeholder_id = _token_id(processor, spec.placeholder)
    return analyze_edge_merges(
        processor,
        spec.modality,
        f"{before}{spec.placeholder}{after}",
        placeholder_id,
        spec.count.source,
    )


def analyze(snapshot: Snapshot) -> PortSpec:
    """Analyse ``snapshot``'s HF code and settings into a PortSpec."""
    import transformers

    from mmport.sources.health import check_reference
    from mmport.sources.processorless import names_no_processor

    if not snapshot.processor_code and names_no_processor(snapshot.path):
        from mmport.analyzers.chatport import analyze_chat

        return analyze_chat(snapshot)  # type: ignore[return-value]
    processor = snapshot.load_processor()
    if entry_point(type(processor)) is not None:
        # Called by a method of its own (Molmo's ``process``): a port of its own kind.
        return analyze_entry_port(snapshot, processor)
    check_reference(
        snapshot
    )  # a processor that cannot be the reference fails here, with its reason
    prefix = type(processor).__name__.removesuffix("Processor")
    architecture = _architecture(snapshot) or f"{prefix}ForConditionalGeneration"
    # The model name without its task: LlavaForConditionalGeneration, ColPaliForRetrieval.
    prefix = re.sub(r"For[A-Z][A-Za-z]*$", "", architecture) or prefix
    refused = refused_modalities(processor)
    if refused and set(refused) == set(handled_modalities(processor)):
        raise AnalysisError(
            f"{type(processor).__name__} cannot be ported: "
            + "; ".join(refused.values())
        )
    modalities = _modalities(snapshot, processor, refused)
    config = snapshot.load_config()
    encoder, encoder_reason, embeddings_refused = _encoder(
        architecture, modalities, config
    )
    language = _language(config, encoder, architecture or "")
    vllm_model, vllm_model_reason = _vllm_model(
        architecture, encoder, modalities, config, language, snapshot.model_type
    )
    return PortSpec(
        model_type=snapshot.model_type,
        ref=snapshot.ref,
        class_prefix=prefix,
        architecture=architecture,
        processor_class=type(processor).__name__,
        config_class=type(snapshot.load_config()).__name__,
        config_module=_shipped_module(type(snapshot.load_config())),
        vllm_substitutes_config=snapshot.model_type in substituted_model_types(),
        transformers_version=transformers.__version__,
        mmport_version=__version__,
        modalities=modalities,
        notes=tuple(
            f"{modality} not ported: {reason}" for modality, reason in refused.items()
        ),
        encoder=encoder,
        encoder_reason=encoder_reason,
        embeddings_refused=embeddings_refused,
        language=language,
        trust_remote_code=snapshot.trust_remote_code,
        processor_outside=snapshot.processor_code is not None,
        vllm_model=vllm_model,
        vllm_model_reason=vllm_model_reason,
    )
