"""Whether the model class is written as vLLM code, and the plan it is written from.

A port writes its encoders as vLLM's own ports do when every piece of HF's
feature paths has a vLLM form:

- the tower is one vLLM ships (:data:`~mmport.analyzers.vllmencoders.VLLM_ENCODERS`)
  and gives what HF's path reads: chosen layers' hidden states through its
  layer selection (built only as deep as the deepest, without the
  post-layernorm HF's hidden states lack), or the field of HF's output its
  plain call answers (``last_hidden_state``, Qwen2-VL's ``pooler_output``);
- each path's steps are that tower, its layer selection, and modules run on
  the features (:mod:`mmport.analyzers.nativepath`); where a path does more
  (a second field, helper methods, reshapes between the steps), HF's method
  is copied as the class's own with one call of vLLM's tower in place of
  HF's tower block (:mod:`mmport.analyzers.copiedpath`);
- every other module is a chain of layers vLLM builds
  (:mod:`mmport.analyzers.projector`), HF's class copied onto vLLM's layers
  (:mod:`mmport.analyzers.ownmodule`), or a weight of the model's own built by
  HF's line; M-RoPE positions come from HF's ``get_rope_index``, copied;
- the checkpoint's names in every layout transformers loads (the hub's and
  transformers 5.x's saved names, :mod:`mmport.hf.weights`) reach the class's
  by prefix alone, which is checked name by name, as vLLM's ``WeightsMapper``
  applies the prefixes.

Anything else is a reason, and the class keeps the path it has (HF's methods
run on the modules it builds); ``mmport inspect`` shows the reason.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import libcst as cst

from mmport.analyzers.copiedpath import copied_feature_path, copied_methods
from mmport.analyzers.examples import invalid, valid
from mmport.analyzers.keptpath import inline_path, kept_method_path
from mmport.analyzers.language import config_argument
from mmport.analyzers.modeling import ROPE_INDEX_METHOD
from mmport.analyzers.nativepath import native_feature_path
from mmport.analyzers.ownmodule import own_module
from mmport.analyzers.projector import vllm_projector
from mmport.analyzers.vllmencoders import VLLM_ENCODERS
from mmport.errors import AnalysisError
from mmport.hf.weights import Layouts, layouts
from mmport.spec import (
    EncoderModule,
    EncoderSpec,
    FeaturePath,
    ModalitySpec,
    OwnModule,
    VllmEncoder,
    VllmFeaturePath,
    VllmModelPlan,
    VllmProjector,
    VllmTowerBuild,
)

__all__ = ["EXAMPLES", "prefix_table", "vllm_model_plan"]

# How HF builds a weight that is a tensor of the model's own (LLaVA-NeXT's image_newline).
_PARAMETER = "nn.Parameter("


def _envelope(encoder: EncoderSpec, substitutes_config: bool) -> str:
    """Why the class as a whole is not written as vLLM code yet ("" where it may be)."""
    if encoder.config_path or encoder.unbuilt_parts:
        return f"HF builds {encoder.hf_class} from a sub-config beside other parts"
    if substitutes_config:
        return "vLLM reads this model_type with a config class of its own"
    if encoder.missing:
        return "; ".join(why for _, why in encoder.missing)
    for path in encoder.paths:
        if path.through:
            return f"HF computes the {path.modality} features through another path"
    return ""


def _encoder_for(module: EncoderModule) -> VllmEncoder | None:
    """vLLM's module for ``module`` where it has the layer selection API."""
    encoder = next(
        (e for e in VLLM_ENCODERS.values() if e.path == module.vllm_equivalent), None
    )
    return encoder


def _tower_build(
    module: EncoderModule, encoder: VllmEncoder, path: VllmFeaturePath
) -> VllmTowerBuild:
    """How vLLM's module is built to give what ``path`` reads of HF's."""
    sub = config_argument(cst.parse_expression(module.code)) or ()
    config_attr = "".join(f".{name}" for name in sub)
    if path.layers:
        if "hidden_states" not in encoder.layered:
            raise AnalysisError(
                f"vLLM's {encoder.name} gives no chosen layers' hidden states"
            )
        post_norm = False
    elif encoder.answers == path.tower_output:
        post_norm = True
    elif path.tower_output in encoder.layered:
        post_norm = False
    else:
        raise AnalysisError(
            f"vLLM's {encoder.name} gives no {path.tower_output} as HF's"
        )
    return VllmTowerBuild(
        module.attr,
        encoder.path,
        config_attr,
        path.layers,
        post_norm,
        module.source,
        encoder.weights_under,
        encoder.builds_with,
        encoder.converts,
        encoder.unpads_by,
        dict((n, c) for n, _, c in encoder.provides).get(
            "patch_size", "self.patch_size"
        ),
    )


def _path(
    inner: type[Any],
    modality: ModalitySpec,
    method: str,
    encoder: EncoderSpec,
    config: Any,
    output: str = "pooler_output",
) -> tuple[VllmFeaturePath, VllmTowerBuild]:
    """One modality's path as vLLM steps, on the tower of ``modules`` it calls: read as
    steps (:mod:`~mmport.analyzers.nativepath`), else HF's method copied with vLLM's
    tower call in it (:mod:`~mmport.analyzers.copiedpath`); where vLLM ships no module
    for any of them, HF's method copied whole on HF's tower, kept
    (:mod:`~mmport.analyzers.keptpath`), its ``output`` field read."""
    fields = [f.key for f in modality.fields]
    # Every item's rows end to end (Qwen2-VL's patches): HF's method takes the batch.
    flat = any(f.layout.startswith("flat") for f in modality.fields)
    reasons = []
    for module in encoder.modules:
        vllm_encoder = _encoder_for(module)
        if vllm_encoder is None:
            continue
        others = [m.attr for m in encoder.modules if m is not module]
        try:
            if len(fields) == 1 and not encoder.borrowed_methods:
                path = native_feature_path(
                    inner,
                    method,
                    modality.modality,
                    module.attr,
                    fields[0],
                    others,
                    config,
                )
            else:
                path, copied = copied_feature_path(
                    inner,
                    method,
                    modality.modality,
                    module.attr,
                    fields,
                    others,
                    config,
                    vllm_encoder,
                )
                path = replace(path, copied=copied, batched_call=flat)
            return path, _tower_build(module, vllm_encoder, path)
        except AnalysisError as exc:
            reasons.append(str(exc))
    if reasons or any(m.vllm_equivalent for m in encoder.modules):
        raise AnalysisError(
            "; ".join(reasons) or "no tower of the path is one vLLM selects layers of"
        )
    # vLLM ships no module for the tower: HF's, kept, and HF's method copied whole.
    path, tower = kept_method_path(
        inner, method, modality.modality, fields, encoder.modules, config, output
    )
    return replace(path, batched_call=flat), tower


def _projector(inner: type[Any], module: EncoderModule) -> VllmProjector | OwnModule:
    """The module at ``module.attr`` as vLLM's layers, where HF builds it as ``Class(argument)``."""
    call = cst.parse_expression(module.code)
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Name)
        and len(call.args) == 1
        and call.args[0].keyword is None
    ):
        raise AnalysisError(
            f"HF builds {module.attr} as `{module.code}` ({module.source})"
        )
    cls = getattr(sys.modules[inner.__module__], call.func.value, None)
    if not isinstance(cls, type):
        raise AnalysisError(f"{call.func.value} is not a class of {inner.__module__}")
    argument = cst.Module([]).code_for_node(call.args[0].value)
    try:
        projector: VllmProjector | OwnModule = vllm_projector(
            cls, module.attr, argument
        )
    except AnalysisError as chain:
        # More than a chain of layers: HF's class, copied onto vLLM's layers.
        try:
            projector = own_module(cls, module.attr, argument)
        except AnalysisError as copy:
            raise AnalysisError(f"{chain}; {copy}") from None
    return replace(projector, built_at=module.source)


def _prefix_map(mapping: Mapping[str, str], name: str) -> str:
    """``name`` through ``mapping`` as vLLM's WeightsMapper applies prefixes: each in turn."""
    for prefix, new in mapping.items():
        if name.startswith(prefix):
            name = name.replace(prefix, new, 1)
    return name


def _mapper(
    encoder: EncoderSpec,
    weights_under: Mapping[str, str],
    names: Sequence[Layouts],
) -> tuple[tuple[str, str], ...]:
    """Checkpoint prefixes → the class's, for every layout of ``names`` (:mod:`mmport.hf.weights`).

    The state dict's module prefixes go where the class keeps each module (a
    vLLM tower's weights one level down, ``vision_tower.vision_model.``). A layout whose names differ from the state dict's inside a module (the
    saved CLIP tower's ``vision_tower.embeddings`` beside the hub's
    ``vision_tower.vision_model.embeddings``) cannot share one prefix with it:
    vLLM applies each prefix in turn, so the short one would match the other's
    output. Those prefixes go one name deeper (``vision_tower.embeddings.``).
    """
    return prefix_table(encoder.prefixes(weights_under), names)


def prefix_table(
    own: Sequence[tuple[str, str]], names: Sequence[Layouts]
) -> tuple[tuple[str, str], ...]:
    """The prefix table that takes every layout of ``names`` to the class's names, where
    ``own`` takes the state dict's (see :func:`_mapper`); refuses where none does."""
    expected = {}
    for name, *_ in names:
        prefix, ours = next(((p, o) for p, o in own if name.startswith(p)), ("", ""))
        if not prefix:
            raise AnalysisError(
                f"the parameter {name} is in no module the class builds"
            )
        expected[name] = ours + name[len(prefix) :]
    reasons = []
    for deeper in (False, True):
        try:
            mapping = _prefixes(own, names, expected, deeper)
        except AnalysisError as exc:
            reasons.append(str(exc))
            continue
        return tuple(mapping.items())
    raise AnalysisError(reasons[-1])


def _prefixes(
    own: Sequence[tuple[str, str]],
    names: Sequence[Layouts],
    expected: Mapping[str, str],
    deeper: bool,
) -> dict[str, str]:
    """The prefix table (see :func:`_mapper`), checked name by name as vLLM applies it."""
    pairs = list(own)
    for name, *others in names:
        prefix, ours = next((p, o) for p, o in own if name.startswith(p))
        rest = name[len(prefix) :]
        step = rest.split(".", 1)[0] + "." if deeper and "." in rest else ""
        for other in others:
            if not other.endswith(rest):
                raise AnalysisError(
                    f"the checkpoint name {other} maps to no module the class builds"
                )
            pairs.append((other[: len(other) - len(rest)] + step, ours + step))
    table: dict[str, str] = {}
    for old, new in dict.fromkeys(pairs):
        if old != new and table.setdefault(old, new) != new:
            raise AnalysisError(f"the checkpoint prefix {old} stands for two modules")
    # The longest first: a name one prefix maps is then past every shorter one's reach.
    mapping = dict(sorted(table.items(), key=lambda item: -len(item[0])))
    for layout in names:
        for given in layout:
            if _prefix_map(mapping, given) != expected[layout[0]]:
                raise AnalysisError(
                    f"the checkpoint name {given} reaches no parameter by prefix alone"
                )
    return mapping


def _modality_path(
    inner: type[Any],
    feature_path: FeaturePath,
    modality: ModalitySpec,
    encoder: EncoderSpec,
    config: Any,
) -> tuple[VllmFeaturePath, VllmTowerBuild]:
    """One modality's path and its tower, with the item fields that come in rows."""
    if feature_path.inline is not None:
        # HF's lines in forward, on HF's tower where vLLM ships none.
        path, tower = inline_path(inner, feature_path, encoder.modules, config)
    else:
        path, tower = _path(
            inner, modality, feature_path.method, encoder, config, feature_path.output
        )
    whole = tuple(f.key for f in modality.fields if f.rows)
    return replace(path, item_rows=modality.fields[0].rows, whole=whole), tower


def vllm_model_plan(
    architecture_cls: type[Any],
    encoder: EncoderSpec,
    modalities: Sequence[ModalitySpec],
    config: Any,
    *,
    substitutes_config: bool = False,
) -> VllmModelPlan:
    """The plan the class is written from as vLLM code (see the module docstring), or
    :class:`AnalysisError` saying why it keeps HF's feature paths."""
    why = _envelope(encoder, substitutes_config)
    if why:
        raise AnalysisError(why)
    inner = getattr(sys.modules[encoder.hf_module], encoder.hf_class)
    paths, towers = [], {}
    for feature_path in encoder.paths:
        modality = next(m for m in modalities if m.modality == feature_path.modality)
        path, tower = _modality_path(inner, feature_path, modality, encoder, config)
        paths.append(path)
        towers[tower.attr] = tower
    if len(towers) > 1:
        raise AnalysisError(f"the paths run {len(towers)} towers; the class writes one")
    rope = None
    if encoder.rope_index_source is not None:
        # vLLM asks the class for M-RoPE positions: HF's get_rope_index, the class's own.
        rope = copied_methods(inner, [ROPE_INDEX_METHOD])
    stepped = {step for path in paths for step in path.steps}
    stepped |= set(rope.reads if rope else ())
    stepped |= {attr for path in paths if path.copied for attr in path.copied.reads}
    projectors, parameters = [], []
    for module in encoder.modules:
        if module.attr in towers:
            continue
        if module.attr not in stepped:
            raise AnalysisError(
                f"HF builds {module.attr}, which no step of a path runs"
            )
        if module.code.startswith(_PARAMETER):
            parameters.append(module)  # a tensor of its own: built by HF's line
            continue
        projectors.append(_projector(inner, module))
    under = {attr: t.weights_under for attr, t in towers.items()}
    try:
        names = layouts(architecture_cls, config)
    except (ValueError, TypeError, AttributeError, RuntimeError) as exc:
        # The names come from HF's model built on this config, which may not build.
        raise AnalysisError(
            f"HF's {architecture_cls.__name__} does not build from this config "
            f"({type(exc).__name__}: {exc})"
        ) from None
    mapper = _mapper(encoder, under, names)
    return VllmModelPlan(
        tuple(towers.values()),
        tuple(projectors),
        tuple(paths),
        mapper,
        tuple(parameters),
        encoder.reads_dtype,
        rope,
    )


# LLaVA's names: the state dict's, transformers 5.x's saved ones, the hub's.
_OWN = [
    ("model.vision_tower.", "vision_tower.vision_model."),
    ("lm_head.", "language_model.lm_head."),
]
_CLIP = (
    "model.vision_tower.encoder.layers.0.mlp.fc1.weight",
    "vision_tower.encoder.layers.0.mlp.fc1.weight",
    "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight",
)
_HEAD = (
    "lm_head.weight",
    "language_model.lm_head.weight",
    "language_model.lm_head.weight",
)

EXAMPLES = [
    valid(
        "a_layout_that_differs_inside_a_module_goes_one_name_deeper",
        "",
        lambda _: prefix_table(_OWN, [_CLIP, _HEAD]),
        (
            ("vision_tower.encoder.", "vision_tower.vision_model.encoder."),
            ("model.vision_tower.", "vision_tower.vision_model."),
            ("lm_head.", "language_model.lm_head."),
        ),
    ),
    invalid(
        "a_name_that_keeps_no_suffix_of_the_state_dicts_refuses",
        "",
        lambda _: prefix_table(
            _OWN, [("lm_head.weight", "output.w", "lm_head.weight")]
        ),
        refusal=AnalysisError,
        match="the checkpoint name output.w maps to no module",
    ),
]
