"""Static analysis of a model's HF code into a :class:`~mmport.spec.PortSpec`.

Each analyzer is a small libcst visitor plus one function returning frozen
facts with provenance; :func:`analyze` runs them for a snapshot.
"""

from __future__ import annotations

import libcst as cst

from mmport import __version__
from mmport.analyzers.count import ReplacementFacts, analyze_replacement
from mmport.analyzers.fields import observe_fields, per_item_fields, refuses_images_alone
from mmport.analyzers.imageproc import analyze_geometry, analyze_output_fields
from mmport.analyzers.layout import analyze_layout
from mmport.analyzers.modeling import analyze_encoder
from mmport.analyzers.replacement import analyze_replacement_text
from mmport.analyzers.sourcefile import class_assignments, find_method
from mmport.errors import AnalysisError
from mmport.sources import Snapshot
from mmport.spec import CountRule, EncoderSpec, GeometryRule, ModalitySpec, PortSpec, Source

__all__ = ["analyze"]


class _SelfAssignments(cst.CSTVisitor):
    """``self.<name> = ...`` statements of a constructor."""

    def __init__(self) -> None:
        self.nodes: dict[str, cst.Assign] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            self.nodes.setdefault(target.attr.value, node)


def _attribute_source(processor_cls: type, attr: str) -> Source:
    """Where the processor's constructor sets ``self.<attr>``."""
    found = find_method(processor_cls, "__init__", models_only=True)
    if found is not None:
        visitor = _SelfAssignments()
        found[1].visit(visitor)
        if attr in visitor.nodes:
            return found[0].source(visitor.nodes[attr])
    raise AnalysisError(f"{processor_cls.__name__}.__init__ does not set self.{attr}")


def _architecture(snapshot: Snapshot) -> str:
    architectures = snapshot.config_dict.get("architectures") or []
    if architectures:
        return architectures[0]
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(snapshot.model_type, "")


def _replacement(processor, geometry: GeometryRule) -> ReplacementFacts:
    """The derived count, else the derived replacement text, else a delegated count (with the reason)."""
    processor_cls, image_processor_cls = type(processor), type(processor.image_processor)
    try:
        facts = analyze_replacement(processor_cls, "image", image_processor_cls)
        if facts.count.uses_geometry and geometry.kind != "fixed":
            raise AnalysisError("the count reads an item size that the image processor does not fix")
        return facts
    except AnalysisError as exc:
        first = exc
    try:
        # The hook returns more than `token * count`: carry the whole hook over.
        return ReplacementFacts(analyze_replacement_text(processor_cls, image_processor_cls, processor), "image_token")
    except AnalysisError as exc:
        found = find_method(processor_cls, "replace_image_token") or find_method(processor_cls, "__call__")
        source = found[0].source(found[1]) if found else Source("(processor)", 0)
        reason = str(first) if "token * count" not in str(first) else str(exc)
        return ReplacementFacts(CountRule((), "", False, "delegated", source, reason=reason), "image_token")


def _embed_token(snapshot: Snapshot, token_id: int) -> tuple[str, Source | None]:
    """The config attribute of the token the model embeds at, if not ``token_id``.

    HF models place image features where ``input_ids == config.image_token_id``
    (``get_placeholder_mask``); most processors' placeholder is that token.
    """
    config = snapshot.load_config()
    embed_id = getattr(config, "image_token_id", None)
    if not isinstance(embed_id, int) or embed_id == token_id:
        return "", None
    attr = type(config).attribute_map.get("image_token_id", "image_token_id")
    found = class_assignments(type(config)).get(attr)
    return "image_token_id", found[0].source(found[1]) if found else Source(type(config).__name__, 0)


def _image_spec(snapshot: Snapshot, processor) -> ModalitySpec:
    processor_cls = type(processor)
    geometry = analyze_geometry(type(processor.image_processor))
    facts = _replacement(processor, geometry)
    placeholder_source = _attribute_source(processor_cls, facts.token_attr)
    token_attr = f"{facts.token_attr}_id"
    update = analyze_layout(processor_cls, placeholder_source)
    static_fields = analyze_output_fields(type(processor.image_processor))
    placeholder = None if update.mode == "insert" else getattr(processor, facts.token_attr)
    embed_token_attr, embed_token_source = _embed_token(snapshot, getattr(processor, token_attr))
    sources = {f.key: f.source for f in static_fields}
    fields_strategy, fields_reason = "derived", ""
    try:
        fields = observe_fields(processor, placeholder, sources)
    except (AnalysisError, RuntimeError) as exc:
        fields_strategy, fields_reason = "per_item", str(exc).splitlines()[0]
        fields = per_item_fields(processor, placeholder, sources)
    return ModalitySpec(
        modality="image",
        placeholder=getattr(processor, facts.token_attr),
        placeholder_source=placeholder_source,
        token_attr=token_attr,
        token_id=getattr(processor, token_attr),
        token_source=_attribute_source(processor_cls, token_attr),
        count=facts.count,
        geometry=geometry,
        update=update,
        fields=fields,
        limit=None,
        worst_case_size=_fixed_size(processor.image_processor, geometry.size_expr),
        fields_strategy=fields_strategy,
        fields_reason=fields_reason,
        needs_text=update.mode == "replace" and refuses_images_alone(processor),
        embed_token_attr=embed_token_attr,
        embed_token_source=embed_token_source,
    )


def _fixed_size(image_processor, size_expr: str) -> tuple[int, int] | None:
    """This snapshot's processed (height, width), evaluated like the port will."""
    if not size_expr:
        return None
    size = eval(size_expr, {}, {"image_processor": image_processor})  # expression built by analyze_geometry
    if size is None or size.get("height") is None:
        return None
    return (size["height"], size["width"])


def _encoder(architecture: str) -> tuple[EncoderSpec | None, str]:
    """HF's image encoder path for the model class, or None and the reason."""
    import transformers

    model_cls = getattr(transformers, architecture, None)
    if model_cls is None:
        return None, f"transformers has no class {architecture}"
    try:
        return analyze_encoder(model_cls), ""
    except AnalysisError as exc:
        return None, str(exc)


def analyze(snapshot: Snapshot) -> PortSpec:
    """Analyse ``snapshot``'s HF code and settings into a PortSpec."""
    import transformers

    processor = snapshot.load_processor()
    prefix = type(processor).__name__.removesuffix("Processor")
    architecture = _architecture(snapshot) or f"{prefix}ForConditionalGeneration"
    prefix = architecture.removesuffix("ForConditionalGeneration") or prefix
    encoder, encoder_reason = _encoder(architecture)
    return PortSpec(
        model_type=snapshot.model_type,
        ref=snapshot.ref,
        class_prefix=prefix,
        architecture=architecture,
        processor_class=type(processor).__name__,
        config_class=type(snapshot.load_config()).__name__,
        transformers_version=transformers.__version__,
        mmport_version=__version__,
        modalities=(_image_spec(snapshot, processor),),
        encoder=encoder,
        encoder_reason=encoder_reason,
    )
