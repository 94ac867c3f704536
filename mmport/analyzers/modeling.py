"""Derive the encoder paths, one per modality, from the HF modeling code.

The checkpoint class (``LlavaForConditionalGeneration``) usually keeps an
inner model (``self.model = LlavaModel(config)``) whose
``get_image_features`` runs the vision tower and the projector (and
``get_video_features``, ``get_audio_features`` for the modalities it has).
From each such method we learn which ``self.<module>`` it reads; from the
inner model's constructor, the line that builds each of them; and which
attribute holds the language model (built from ``config.text_config``). The
generated model class builds the same modules under the same names, once
however many paths read them, so HF's own feature paths run on them and
checkpoint weights map by prefix. A model that computes a modality's features
inside ``forward`` (Qwen2-Audio) gets that method written from HF's lines
there (:mod:`mmport.analyzers.inlinefeatures`).
"""

from __future__ import annotations

import builtins
import inspect
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import libcst as cst

from mmport.analyzers.examples import invalid, snippet_line, valid
from mmport.analyzers.inlinefeatures import (
    DTYPE_DEVICE,
    InlineRefusal,
    inline_features,
)
from mmport.analyzers.language import config_argument, sub_config
from mmport.analyzers.sideinputs import side_inputs
from mmport.analyzers.sourcefile import (
    ParsedClass,
    SelfAssignments,
    find_method,
    parse_class,
    self_call,
)
from mmport.analyzers.towercalls import tower_calls
from mmport.analyzers.vllmencoders import vllm_encoder
from mmport.errors import AnalysisError, SideInputsRefusal
from mmport.media import MODALITIES
from mmport.spec import EncoderModule, EncoderSpec, FeaturePath, NativeTower

__all__ = ["analyze_encoder", "features_method"]

# HF's M-RoPE positions for a prompt (Qwen2-VL and its descendants).
ROPE_INDEX_METHOD = "get_rope_index"
# ``self`` attributes any nn.Module/PreTrainedModel has that are not submodules.
_MODULE_STATE = frozenset({"config", "training"})


class _SelfReads(cst.CSTVisitor):
    """First-level ``self.<attr>`` reads, in order of appearance."""

    def __init__(self) -> None:
        self.attrs: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if (
            isinstance(node.value, cst.Name)
            and node.value.value == "self"
            and node.attr.value not in self.attrs
        ):
            self.attrs.append(node.attr.value)


class _Names(cst.CSTVisitor):
    """Free names of an expression: those a comprehension binds
    (``[Block(config) for _ in range(n)]``) are its own."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.bound: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node.value)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        targets = _Names()
        node.target.visit(targets)
        self.bound.update(targets.names)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # ``a.b``: only ``a`` is a free name
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # ``f(dtype=x)``: the keyword is no name
        return False


def _constructor(cls: type[Any]) -> tuple[ParsedClass, dict[str, cst.Assign]]:
    found = find_method(cls, "__init__", models_only=True)
    if found is None:
        raise AnalysisError(
            f"{cls.__name__} has no constructor in transformers' models"
        )
    visitor = SelfAssignments()
    found[1].visit(visitor)
    return found[0], visitor.nodes


def features_method(modality: str) -> str:
    """HF's name for ``modality``'s encoder path (``get_image_features``)."""
    return f"get_{modality}_features"


def _defines_any(cls: Any, methods: list[str]) -> bool:
    return isinstance(cls, type) and any(hasattr(cls, m) for m in methods)


@dataclass(frozen=True)
class _Holder:
    """The class that defines the feature methods, and where the checkpoint class keeps it.

    ``attr`` is its dotted path from the checkpoint class (``model``,
    ``thinker.model``; empty: the checkpoint class itself), ``lm_head`` the
    dotted path of the vocabulary projection a class above it keeps, and
    ``config_path`` the sub-config attributes it is built from, in order
    (``("thinker_config",)``: HF builds it from ``config.thinker_config``).
    """

    cls: type
    attr: str = ""
    lm_head: str = ""
    config_path: tuple[str, ...] = ()


def _built_models(
    cls: type[Any], config: Any = None
) -> list[tuple[str, type, cst.Assign]]:
    """The classes ``cls``'s constructor builds (``self.model = LlavaModel(config)``,
    ``Cls._from_config(...)``), each with its attribute and the assignment.

    An auto class (ColPali's ``self.vlm = AutoModel.from_config(config.vlm_config)``)
    builds the class transformers maps the sub-config to, known given ``config``,
    the config ``cls`` is built from.
    """
    _, assigns = _constructor(cls)
    module = sys.modules[cls.__module__]
    built = []
    for attr, node in assigns.items():
        inner = _class_built_by(node.value, module, config)
        if inner is not None and inner is not cls:
            built.append((attr, inner, node))
    return built


def _class_built_by(call: cst.BaseExpression, module: Any, config: Any) -> type | None:
    """The class a constructor call in ``module`` builds (``X(...)``, ``X._from_config(...)``,
    or what an auto class maps its sub-config of ``config`` to), or None."""
    if not isinstance(call, cst.Call):
        return None
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _FACTORIES:
        func = func.value
    if not isinstance(func, cst.Name):
        return None
    built = getattr(module, func.value, None)
    if hasattr(built, "_model_mapping"):  # an auto class
        built = _mapped_class(built, config, config_argument(call))
    return built if isinstance(built, type) else None


# The class methods that build a model from a config.
_FACTORIES = ("_from_config", "from_config")


def _mapped_class(auto: Any, config: Any, path: tuple[str, ...] | None) -> Any:
    """The class ``auto`` builds from ``config`` followed along ``path``, or None."""
    if config is None or path is None:
        return None
    try:
        return auto._model_mapping[type(sub_config(config, path))]
    except (AttributeError, KeyError):
        return None


def _deepest(holder: _Holder, methods: list[str], config: Any = None) -> _Holder:
    """``holder``, or the class it keeps that defines the methods too, followed down.

    A class that hands the methods on to one it keeps (Qwen2.5-Omni's thinker
    to its ``model``) is no encoder: built whole, it would build the language
    model inside the tower. The class that keeps the modules is the one to build.
    """
    while True:
        _, assigns = _constructor(holder.cls)
        deeper = next(
            (
                (attr, inner, path)
                for attr, inner, node in _built_models(
                    holder.cls, _sub_config_or_none(config, holder.config_path)
                )
                if _defines_any(inner, methods)
                and (path := config_argument(node.value)) is not None
            ),
            None,
        )
        if deeper is None:
            return holder
        attr, inner, path = deeper
        holder = _Holder(
            inner,
            _under(holder.attr, attr),
            _under(holder.attr, _lm_head(assigns)) or holder.lm_head,
            holder.config_path + path,
        )


def _unbuilt_parts(outer: Any, holder: _Holder) -> tuple[str, ...]:
    """The modules HF's checkpoint class builds beside the holder's branch, in any of its
    methods (Qwen2.5-Omni's ``talker`` and ``token2wav``, built by ``enable_talker``):
    their weights are in the checkpoint, and the port, which builds none of them,
    leaves them unloaded. Usually none: LLaVA's class builds its ``model`` and the
    vocabulary projection only."""
    if not holder.attr:
        return ()
    parsed = parse_class(outer)
    if parsed is None:
        return ()
    assigns = SelfAssignments()
    parsed.classdef.visit(assigns)
    kept = {holder.attr.split(".")[0], holder.lm_head.split(".")[0]}
    return tuple(
        attr
        for attr, node in assigns.nodes.items()
        if attr not in kept and _builds_module(node)
    )


def _builds_module(assign: cst.Assign) -> bool:
    """Whether ``assign`` builds a module: a class called by name, or a ``from_config``."""
    call = assign.value
    if not isinstance(call, cst.Call):
        return False
    func = _code(call.func).split(".")
    return func[-1] in _FACTORIES or func[-1][:1].isupper()


def _sub_config_or_none(config: Any, path: Sequence[str]) -> Any:
    """``config``'s sub-config at ``path``, or None where there is none to follow."""
    try:
        return None if config is None else sub_config(config, path)
    except AttributeError:
        return None


def _inner_model(
    outer: type[Any],
    methods: list[str],
    item_inputs: Mapping[str, Sequence[str]],
    config: Any = None,
) -> _Holder:
    """The class that defines the feature methods, and where the checkpoint class keeps it.

    An inner model the checkpoint class builds by name (``self.model =
    LlavaModel(config)``) is preferred, whether or not the checkpoint class
    also forwards the methods to it, and followed down to the class that
    keeps the modules (:func:`_deepest`); else the checkpoint class itself.
    Where no class defines them, the inner model whose ``forward`` computes a
    modality's features inline (:mod:`mmport.analyzers.inlinefeatures`).
    """
    _, assigns = _constructor(outer)
    built = _built_models(outer, config)
    for attr, inner, node in built:
        if _defines_any(inner, methods):
            holder = _Holder(
                inner, attr, _lm_head(assigns), config_argument(node.value) or ()
            )
            return _deepest(holder, methods, config)
    if _defines_any(outer, methods):
        return _Holder(outer)
    refusals = []
    candidates: list[tuple[str, type, cst.Assign | None]] = [*built, ("", outer, None)]
    for attr, inner, built_by in candidates:
        for modality, inputs in item_inputs.items():
            try:
                inline_features(inner, modality, inputs)
            except InlineRefusal as exc:
                refusals.append(str(exc))
                continue
            except AnalysisError:
                continue  # no features placed there at all
            if built_by is None:
                return _Holder(outer)
            return _Holder(
                inner, attr, _lm_head(assigns), config_argument(built_by.value) or ()
            )
    # Where a forward does place features but they cannot be sliced out, say why.
    raise AnalysisError(
        f"{outer.__name__} keeps no inner model that defines {' or '.join(methods)}"
        + "".join(f"; {refusal}" for refusal in dict.fromkeys(refusals))
    )


class _LocalAssignments(cst.CSTVisitor):
    """``name = value`` statements of a constructor (locals its module lines may use)."""

    def __init__(self) -> None:
        self.found: dict[str, cst.Assign] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        if len(node.targets) == 1 and isinstance(target, cst.Name):
            self.found.setdefault(target.value, node)


def _import_for(module: Any, name: str) -> tuple[str, str]:
    """``(module, name)`` for ``from module import name`` (``("", name)``: ``import name``)."""
    obj = getattr(module, name)
    if inspect.ismodule(obj):  # torch, nn, math: imported as Python code would
        parent, _, leaf = obj.__name__.rpartition(".")
        return parent, leaf
    origin = getattr(obj, "__module__", "") or ""
    # Auto classes are public at the top level; model classes stay in their module.
    return (
        ("transformers", name)
        if origin.startswith("transformers.models.auto")
        else (module.__name__, name)
    )


def _dependencies(
    code: str, module: Any, locals_: dict[str, str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Local statements and imports a transplanted expression needs, or AnalysisError."""
    setup: list[str] = []
    imports: list[tuple[str, str]] = []
    names = _Names()
    cst.parse_expression(code).visit(names)
    for name in dict.fromkeys(names.names):
        if name in {"self", "config"} or name in vars(builtins) or name in names.bound:
            continue
        if name in locals_:
            inner_setup, inner_imports = _dependencies(locals_[name], module, locals_)
            setup += [*inner_setup, f"{name} = {locals_[name]}"]
            imports += inner_imports
        elif hasattr(module, name):
            imports.append(_import_for(module, name))
        else:
            raise AnalysisError(
                f"a constructor line reads `{name}`, which mmport cannot resolve"
            )
    return setup, imports


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _built_class(owner: type[Any], assign: cst.Assign) -> tuple[str, str] | None:
    """The class ``self.x = Cls(...)`` or ``Cls._from_config(...)`` builds, as (module, name), if a class of transformers' own."""
    call = assign.value
    if not isinstance(call, cst.Call):
        return None
    func = call.func
    if isinstance(func, cst.Attribute):
        func = func.value
    if not isinstance(func, cst.Name):
        return None
    built = getattr(sys.modules[owner.__module__], func.value, None)
    if not isinstance(built, type) or not built.__module__.startswith("transformers."):
        return None  # AutoModel and the like are no class of one model
    return built.__module__, built.__name__


def _under(parent: str, attr: str) -> str:
    """The dotted path of ``attr`` inside ``parent`` (empty ``parent``: the top; empty ``attr``: none)."""
    return f"{parent}.{attr}" if parent and attr else attr


def _lm_head(outer_assigns: dict[str, cst.Assign]) -> str:
    """The checkpoint class's vocabulary projection (``self.lm_head = nn.Linear(..., vocab_size)``)."""
    for attr, node in outer_assigns.items():
        if (
            isinstance(node.value, cst.Call)
            and "Linear" in _code(node.value.func)
            and "vocab" in _code(node.value)
        ):
            return attr
    return ""


def _encoder_modules(
    inner: type[Any], reads: list[str]
) -> tuple[list[EncoderModule], list[str]]:
    """The modules (each with the imports its line needs) and borrowed methods behind
    the ``self.`` reads of the feature paths."""
    parsed, assigns = _constructor(inner)
    local_assigns = _LocalAssignments()
    init = find_method(inner, "__init__", models_only=True)
    assert init is not None, "_constructor found it"
    init[1].visit(local_assigns)
    locals_ = {
        name: _code(node.value).strip() for name, node in local_assigns.found.items()
    }
    modules, borrowed = [], []
    order = list(assigns)
    # Build modules in constructor order: later lines may read earlier ones (self.dtype).
    for attr in sorted(reads, key=lambda a: order.index(a) if a in order else -1):
        if attr in _MODULE_STATE or attr in DTYPE_DEVICE:
            continue
        if callable(getattr(inner, attr, None)):
            borrowed.append(attr)  # a helper method of HF's class, reused as is
            continue
        node = assigns.get(attr)
        if node is None:
            raise AnalysisError(
                f"{inner.__name__}'s feature path reads self.{attr}, which its constructor does not set"
            )
        code = _code(node.value).strip()
        setup, needed = _dependencies(code, sys.modules[inner.__module__], locals_)
        modules.append(
            EncoderModule(
                attr,
                code,
                parsed.source(node),
                tuple(dict.fromkeys(setup)),
                needs=tuple(needed),
            )
        )
    return modules, borrowed


# get_rope_index parameters the generated class fills itself, not from an item's fields.
_ROPE_OWN_INPUTS = frozenset(
    {"self", "input_ids", "mm_token_type_ids", "attention_mask"}
)


def _rope_index(inner: type[Any]) -> tuple[Any, list[str], tuple[str, ...]]:
    """HF's ``get_rope_index`` (its source), the helper methods it calls on ``self``, and the
    per-item inputs it takes by name (``image_grid_thw``, ``second_per_grid_ts``, ...)."""
    found = find_method(inner, ROPE_INDEX_METHOD)
    if found is None:
        return None, [], ()
    parsed, method = found
    reads = _SelfReads()
    method.body.visit(reads)
    helpers = [a for a in reads.attrs if inspect.isfunction(getattr(inner, a, None))]
    inputs = tuple(
        name
        for name, parameter in inspect.signature(
            getattr(inner, ROPE_INDEX_METHOD)
        ).parameters.items()
        if name not in _ROPE_OWN_INPUTS
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    )
    return parsed.source(method), helpers, inputs


def _paths(
    inner: type[Any],
    modalities: tuple[str, ...],
    item_inputs: Mapping[str, Sequence[str]],
) -> tuple[list[FeaturePath], list[str], list[tuple[str, str]]]:
    """Each modality's feature method on ``inner``, the ``self.`` reads of them all, and the modalities without one.

    A modality HF has no method for gets the lines of ``inner.forward`` that
    compute its features inline, where they can be sliced out.
    """
    paths: list[FeaturePath] = []
    reads = _SelfReads()
    inline_reads: list[str] = []
    missing: list[tuple[str, str]] = []
    for modality in modalities:
        method = features_method(modality)
        found = find_method(inner, method)
        if found is None:
            try:
                inline = inline_features(inner, modality, item_inputs.get(modality, ()))
            except AnalysisError as exc:
                missing.append(
                    (modality, f"{inner.__name__} defines no {method}, and {exc}")
                )
                continue
            inline_reads += inline.self_reads
            paths.append(FeaturePath(modality, method, inline.source, inline))
            continue
        parsed, node = found
        unmet = _unmet_inputs(node, item_inputs.get(modality))
        if unmet:
            missing.append(
                (
                    modality,
                    f"{inner.__name__}.{method} needs {', '.join(unmet)}, none of "
                    f"the {modality} item's fields (vLLM hands the encoder each item's "
                    "fields, nothing of the prompt)",
                )
            )
            continue
        node.body.visit(reads)
        paths.append(
            FeaturePath(
                modality,
                method,
                parsed.source(node),
                output=_features_field(inner, method),
            )
        )
    return paths, list(dict.fromkeys([*reads.attrs, *inline_reads])), missing


# The output field of a feature method that holds the features, unless HF's forward
# reads another (transformers 5.x's convention; Qwen2.5-Omni's audio path in 5.20 reads
# last_hidden_state, the audio tower's output handed on).
_FEATURES_FIELD = "pooler_output"
_OUTPUT_FIELDS = frozenset({"pooler_output", "last_hidden_state"})


class _OutputReads(cst.CSTVisitor):
    """``self.<method>(...).<field>`` reads: the field of a feature method's output HF uses."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.fields: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        call = node.value
        if (
            isinstance(call, cst.Call)
            and self_call(call) == self.method
            and node.attr.value in _OUTPUT_FIELDS
        ):
            self.fields.append(node.attr.value)


def _features_field(inner: type[Any], method: str) -> str:
    """The field of ``method``'s output that ``inner``'s forward places as the features."""
    found = find_method(inner, "forward")
    if found is None:
        return _FEATURES_FIELD
    reads = _OutputReads(method)
    found[1].visit(reads)
    return reads.fields[0] if reads.fields else _FEATURES_FIELD


def _unmet_inputs(method: cst.FunctionDef, fields: Sequence[str] | None) -> list[str]:
    """The parameters ``method`` requires (no default) that are none of ``fields``, the
    item's fields (None: not known, nothing unmet). InstructBLIP's feature methods
    require ``qformer_input_ids``, the prompt's tokens, which no item has."""
    if fields is None:
        return []
    params = [*method.params.params[1:], *method.params.kwonly_params]
    return [
        p.name.value for p in params if p.default is None and p.name.value not in fields
    ]


def analyze_encoder(
    architecture_cls: type[Any],
    modalities: tuple[str, ...] = ("image",),
    item_inputs: Mapping[str, Sequence[str]] = {},
    config: Any = None,
) -> EncoderSpec:
    """Read ``architecture_cls`` and its inner model into an :class:`EncoderSpec`.

    ``modalities`` are those the processor handles; each gets the path HF's
    class defines for it, or a line in ``missing`` saying it has none.
    ``item_inputs`` name each modality's fields: what a path HF computes
    inline in ``forward`` may read. ``config``, the checkpoint's, tells which
    class an auto class in a constructor builds.
    """
    modalities = tuple(m for m in MODALITIES if m in modalities)
    holder = _inner_model(
        architecture_cls, [features_method(m) for m in modalities], item_inputs, config
    )
    inner = holder.cls
    paths, reads, missing, text_side = _usable_paths(inner, modalities, item_inputs)
    side_refused = tuple(m for m, why in missing if SIDE_INPUTS_REASON in why)
    if not paths:
        raise _no_paths(inner, missing, side_refused)
    modules, borrowed = _encoder_modules(inner, reads)
    modules = [
        _as_vllm_builds(
            m, inner, paths, borrowed, item_inputs, config, holder.config_path
        )
        for m in modules
    ]
    # What HF's lines need, for the modules built as HF builds them.
    imports = [need for m in modules if m.native is None for need in m.needs]
    module = sys.modules[inner.__module__]
    imports += [
        _import_for(module, name)
        for path in paths
        if path.inline is not None
        for name in path.inline.free_names
    ]
    parsed, _ = _constructor(inner)
    language_attr, language_node, own_head = text_side
    if not modules or language_node is None:
        raise AnalysisError(
            f"{inner.__name__} builds no encoder modules or no language model from config.text_config"
        )
    rope_source, rope_helpers, rope_inputs = _rope_index(inner)
    return EncoderSpec(
        language_class=_built_class(inner, language_node),
        hf_class=inner.__name__,
        hf_module=inner.__module__,
        paths=tuple(paths),
        modules=tuple(modules),
        imports=tuple(dict.fromkeys([(inner.__module__, inner.__name__), *imports])),
        language_attr=language_attr,
        language_source=parsed.source(language_node),
        outer_attr=holder.attr,
        lm_head_attr=holder.lm_head or _under(holder.attr, own_head),
        config_path=holder.config_path,
        unbuilt_parts=_unbuilt_parts(architecture_cls, holder),
        side_refused=side_refused,
        reads_dtype=bool(set(reads) & DTYPE_DEVICE)
        or any("self.dtype" in m.code for m in modules),
        borrowed_methods=tuple(dict.fromkeys([*borrowed, *rope_helpers])),
        rope_index_source=rope_source,
        rope_index_inputs=rope_inputs,
        missing=tuple(missing),
        language_with_head=_builds_causal_lm(language_node),
    )


def _as_vllm_builds(
    module: EncoderModule,
    inner: type[Any],
    paths: Sequence[FeaturePath],
    borrowed: Sequence[str],
    item_inputs: Mapping[str, Sequence[str]],
    config: Any,
    root: Sequence[str],
) -> EncoderModule:
    """``module`` with vLLM's equivalent named, and built in place of HF's where vLLM's
    module answers every call of it in the methods the class runs
    (:mod:`mmport.analyzers.towercalls`); else with why HF's is kept."""
    encoder = vllm_encoder(module.code, config, root)
    if encoder is None:
        return module
    named = replace(module, vllm_equivalent=encoder.path)
    if any(p.inline is not None and module.attr in p.inline.self_reads for p in paths):
        return replace(
            named, kept="lines of HF's forward written into this class read it"
        )
    runs = [
        (p.method, item_inputs.get(p.modality), p.output)
        for p in paths
        if p.inline is None and not p.through
    ]
    # Helpers the paths call (a feature method another one calls is read above).
    read = {name for name, _, _ in runs}
    runs += [(h, None, "") for h in borrowed if h not in read]
    methods = []
    for name, fields, output in runs:
        found = find_method(inner, name)
        if found is None:
            return replace(named, kept=f"{name} is not in transformers' sources")
        methods.append((found[1], fields, output))
    # HF's tower ignores a keyword its forward does not name, as the class does.
    built = cst.parse_expression(module.code)
    hf_tower = _class_built_by(
        built,
        sys.modules[inner.__module__],
        _sub_config_or_none(config, root),
    )
    forward = getattr(hf_tower, "forward", None)
    takes = frozenset(inspect.signature(forward).parameters) if forward else None
    calls = tower_calls(methods, module.attr, encoder, takes)
    if isinstance(calls, str):
        return replace(named, kept=calls)
    callers = tuple(name for name, _, _ in runs)
    path = config_argument(built) or ()
    native = NativeTower(
        encoder,
        "".join(f".{name}" for name in path),
        calls.fields,
        callers,
        calls.keywords,
        calls.layered,
    )
    return replace(named, native=native, setup=())


def _no_paths(
    inner: type[Any], missing: list[tuple[str, str]], side_refused: tuple[str, ...]
) -> AnalysisError:
    """Why ``inner`` has no path a port can serve: each modality's reason."""
    why = "; ".join(dict.fromkeys(why for _, why in missing))  # a shared reason once
    if side_refused:
        return SideInputsRefusal(why, side_refused)
    return AnalysisError(
        why or f"{inner.__name__}'s feature methods are not in transformers' sources"
    )


# How a modality refused for its side inputs says so (the reason's own words).
SIDE_INPUTS_REASON = "beside the embeddings"


def _usable_paths(
    inner: type[Any],
    modalities: tuple[str, ...],
    item_inputs: Mapping[str, Sequence[str]],
) -> tuple[
    list[FeaturePath],
    list[str],
    list[tuple[str, str]],
    tuple[str, cst.Assign | None, str],
]:
    """The paths a port can serve, the ``self.`` reads of them, the modalities without
    one (with why), and the text side (:func:`_text_side`).

    A modality whose features HF also hands its text model beside the embeddings
    (:mod:`mmport.analyzers.sideinputs`) has no path: vLLM's language model takes
    the embeddings alone, so the port would differ from HF.
    """
    paths, reads, missing = _paths(inner, modalities, item_inputs)
    _, assigns = _constructor(inner)
    text_side = _text_side(inner, assigns, reads)
    methods = {p.method: p.modality for p in paths if p.inline is None}
    side = side_inputs(inner, text_side[0], methods) if text_side[0] else {}
    if not side:
        return paths, reads, missing, text_side
    # Modalities whose features go the same way share one reason.
    sharing: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for modality, (names, source) in side.items():
        sharing.setdefault((tuple(names), str(source)), []).append(modality)
    refused = [
        (
            modality,
            f"HF's {inner.__name__}.forward hands its text model "
            f"{', '.join(names)} from the {' and '.join(shared)} features "
            f"{SIDE_INPUTS_REASON} ({source}), and vLLM's language model takes the "
            "embeddings alone",
        )
        for (names, source), shared in sharing.items()
        for modality in shared
    ]
    kept = tuple(m for m in modalities if m not in side)
    paths, reads, more = _paths(inner, kept, item_inputs)
    return paths, reads, [*more, *refused], _text_side(inner, assigns, reads)


def _text_side(
    inner: type[Any], assigns: dict[str, cst.Assign], reads: Sequence[str]
) -> tuple[str, cst.Assign | None, str]:
    """The attribute holding ``inner``'s language model and the line that builds it (None:
    none), and the vocabulary projection ``inner`` keeps itself ("" if none).

    A projection the holder keeps (Qwen2.5-Omni's thinker, a checkpoint class with the
    feature methods) is built from config.text_config too, but is no language model:
    its weights go to vLLM's CausalLM's head.
    """
    own_head = _lm_head(assigns)
    language = [
        (attr, node)
        for attr, node in _language_assignments(inner, assigns, reads)
        if attr != own_head
    ]
    if not language:
        return "", None, own_head
    attr, node = next(
        ((a, n) for a, n in language if isinstance(n.value, cst.Call)), language[0]
    )
    return attr, node, own_head


def _language_assignments(
    inner: type[Any], assigns: Mapping[str, cst.Assign], reads: Sequence[str]
) -> list[tuple[str, cst.Assign]]:
    """The ``self.`` attributes ``inner``'s constructor builds from ``config.text_config``,
    each with the assignment that builds it.

    An attribute set from a local name (BLIP-2: ``language_model =
    AutoModelForCausalLM.from_config(config.text_config)`` under one branch,
    ``AutoModelForSeq2SeqLM`` under the other, then ``self.language_model =
    language_model``) takes the local assignment that builds a CausalLM, the
    only kind vLLM generates with, else the first.
    """
    found = []
    locals_ = None
    for attr, node in assigns.items():
        if attr in reads:
            continue
        if "text_config" in _code(node.value):
            found.append((attr, node))
        elif isinstance(node.value, cst.Name):
            if locals_ is None:
                locals_ = _local_assignments(inner)
            built = [
                n
                for n in locals_.get(node.value.value, [])
                if "text_config" in _code(n.value)
            ]
            if built:
                found.append(
                    (attr, next((n for n in built if _builds_causal_lm(n)), built[0]))
                )
    return found


def _local_assignments(cls: type[Any]) -> dict[str, list[cst.Assign]]:
    """Every ``name = ...`` in ``cls``'s constructor, under any branch, by name, in order."""
    found = find_method(cls, "__init__", models_only=True)
    names: dict[str, list[cst.Assign]] = {}
    if found is None:
        return names

    class _Locals(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            target = node.targets[0].target
            if isinstance(target, cst.Name):
                names.setdefault(target.value, []).append(node)

    found[1].visit(_Locals())
    return names


def _builds_causal_lm(assign: cst.Assign) -> bool:
    """Whether ``assign`` builds a whole CausalLM (``AutoModelForCausalLM.from_config``)."""
    call = assign.value
    return isinstance(call, cst.Call) and "ForCausalLM" in _code(call.func)


# LLaVA: the checkpoint class keeps an inner model whose get_image_features runs the tower and the projector.
_LLAVA = """
from types import SimpleNamespace

from torch import nn

AutoModel = SimpleNamespace(from_config=None)


class LlavaMultiModalProjector:
    pass


class LlavaModel:
    def __init__(self, config):
        self.vision_tower = AutoModel.from_config(config.vision_config)
        self.multi_modal_projector = LlavaMultiModalProjector(config)
        self.language_model = AutoModel.from_config(config.text_config)

    def get_image_features(self, pixel_values, vision_feature_layer=-2, **kwargs):
        image_outputs = self.vision_tower(pixel_values, output_hidden_states=True, **kwargs)
        selected_image_feature = image_outputs.hidden_states[vision_feature_layer]
        return self.multi_modal_projector(selected_image_feature)


class LlavaForConditionalGeneration:
    def __init__(self, config):
        self.model = LlavaModel(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)

    def get_image_features(self, pixel_values, **kwargs):
        return self.model.get_image_features(pixel_values, **kwargs)
"""


# Qwen2.5-Omni: the checkpoint class keeps a thinker, built from its own sub-config, which
# hands the feature methods on to its inner model; another method builds a talker beside it.
_OMNI = """
from torch import nn


class OmniAudioEncoder:
    pass


class OmniTextModel:
    pass


class OmniTalker:
    pass


class OmniThinkerModel:
    def __init__(self, config):
        self.audio_tower = OmniAudioEncoder(config.audio_config)
        self.language_model = OmniTextModel(config.text_config)

    def get_audio_features(self, input_features, feature_attention_mask=None):
        return self.audio_tower(input_features)

    def forward(self, input_ids, input_features=None):
        return self.get_audio_features(input_features).last_hidden_state


class OmniThinker:
    def __init__(self, config):
        self.model = OmniThinkerModel(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size)

    def get_audio_features(self, input_features, feature_attention_mask=None):
        return self.model.get_audio_features(input_features, feature_attention_mask)


class OmniForConditionalGeneration:
    def __init__(self, config):
        self.thinker = OmniThinker(config.thinker_config)

    def enable_talker(self):
        self.talker = OmniTalker._from_config(self.config.talker_config)
"""


# ColPali: a retrieval class builds a whole vision-language model through an auto class,
# from a sub-config; which class that is, the checkpoint's config says.
_RETRIEVAL = """
from torch import nn


class VlmConfig:
    vision_config = None
    text_config = None


class RetrievalConfig:
    vlm_config = VlmConfig()


class VisionTower:
    pass


class TextModel:
    pass


class VlmModel:
    def __init__(self, config):
        self.vision_tower = VisionTower(config.vision_config)
        self.language_model = TextModel(config.text_config)

    def get_image_features(self, pixel_values):
        return self.vision_tower(pixel_values)


class AutoModel:
    _model_mapping = {VlmConfig: VlmModel}


class RetrievalModel:
    def __init__(self, config):
        self.vlm = AutoModel.from_config(config.vlm_config)
        self.embedding_proj_layer = nn.Linear(128, 128)
"""


def _nested_facts(spec: EncoderSpec) -> tuple:
    """Where a nested holder sits, what it is built from, and what is left beside it."""
    return (
        spec.hf_class,
        spec.outer_attr,
        spec.lm_head_attr,
        spec.config_path,
        spec.unbuilt_parts,
        tuple(m.attr for m in spec.modules),
        tuple(p.output for p in spec.paths),
    )


def _encoder_facts(spec: EncoderSpec) -> tuple:
    """The parts of an :class:`EncoderSpec` a snippet fixes (its module name is the loader's)."""
    return (
        spec.hf_class,
        spec.outer_attr,
        tuple((m.attr, m.code, m.source.line) for m in spec.modules),
        spec.language_attr,
        spec.language_source.line,
        spec.lm_head_attr,
        tuple((p.modality, p.source.line) for p in spec.paths),
    )


EXAMPLES = [
    valid(
        "llava_features_run_the_tower_and_the_projector",
        _LLAVA,
        lambda snippet: _encoder_facts(
            analyze_encoder(snippet.LlavaForConditionalGeneration)
        ),
        (
            "LlavaModel",
            "model",
            (
                (
                    "vision_tower",
                    "AutoModel.from_config(config.vision_config)",
                    snippet_line(_LLAVA, "self.vision_tower =").line,
                ),
                (
                    "multi_modal_projector",
                    "LlavaMultiModalProjector(config)",
                    snippet_line(_LLAVA, "self.multi_modal_projector =").line,
                ),
            ),
            "language_model",
            snippet_line(_LLAVA, "self.language_model =").line,
            "lm_head",
            (("image", snippet_line(_LLAVA, "def get_image_features").line),),
        ),
    ),
    valid(
        "a_holder_kept_deeper_is_followed_down_to_its_sub_config",
        _OMNI,
        lambda snippet: _nested_facts(
            analyze_encoder(snippet.OmniForConditionalGeneration, ("audio",))
        ),
        (
            "OmniThinkerModel",
            "thinker.model",
            "thinker.lm_head",
            ("thinker_config",),
            ("talker",),
            ("audio_tower",),
            ("last_hidden_state",),
        ),
    ),
    valid(
        "an_auto_class_builds_the_class_the_config_maps_it_to",
        _RETRIEVAL,
        lambda snippet: _nested_facts(
            analyze_encoder(
                snippet.RetrievalModel, ("image",), {}, snippet.RetrievalConfig()
            )
        ),
        (
            "VlmModel",
            "vlm",
            "",
            ("vlm_config",),
            ("embedding_proj_layer",),
            ("vision_tower",),
            ("pooler_output",),
        ),
    ),
    valid(
        "a_module_list_built_by_a_comprehension_needs_no_import_for_its_variable",
        """
        from torch import nn

        class Projector:
            pass

        class TextModel:
            pass

        class StackModel:
            def __init__(self, config):
                self.projectors = nn.ModuleList([Projector(config) for _ in range(2)])
                self.language_model = TextModel(config.text_config)

            def get_image_features(self, pixel_values):
                return [p(pixel_values) for p in self.projectors]
        """,
        lambda snippet: [
            (m.attr, m.code) for m in analyze_encoder(snippet.StackModel).modules
        ],
        [("projectors", "nn.ModuleList([Projector(config) for _ in range(2)])")],
    ),
    invalid(
        "a_model_without_an_image_features_method",
        """
        class Wav2Vec2Model:
            def __init__(self, config):
                self.feature_extractor = None

        class Wav2Vec2ForCTC:
            def __init__(self, config):
                self.wav2vec2 = Wav2Vec2Model(config)
        """,
        lambda snippet: analyze_encoder(snippet.Wav2Vec2ForCTC, ("image", "audio")),
        refusal=AnalysisError,
        match="keeps no inner model that defines get_image_features or get_audio_features",
    ),
]
