"""Which architecture vLLM builds the language model as, from the text config.

A generated class builds its language model with vLLM's
``init_vllm_registered_model(hf_config=config.text_config)``, which picks
the class by the text config's ``architectures``. A multimodal family's
text config rarely names one (``qwen2_vl_text``, ``glm4v_text``), so the
port must, in this order:

1. none, when the text config names its own architectures; but a single
   config (Chameleon's, Phi-4-multimodal's) is its own text config and names
   the port's class, which vLLM would build again without end: then another
   class it names, or its model_type's CausalLM named explicitly, else the
   rules below;
2. the CausalLM transformers builds for its ``model_type``, where vLLM
   ships it (vLLM names that one itself; one it does not ship, such as
   ``AriaTextForCausalLM``, would land on a backend class of vLLM's choosing);
3. the CausalLM of the family it grew from: the longest model_type its
   ``_``-segments spell with some left out (``qwen3_vl_moe_text`` →
   ``qwen3_moe``, ``gemma4_unified_text`` → ``gemma4_text``), again one vLLM
   ships, and never the port's own class (``gemma4_unified`` maps to it).
   Neither this nor what follows holds for an encoder-decoder model, whose
   decoder is no CausalLM;
4. vLLM's Transformers backend, which builds the text model through
   ``AutoModel`` and runs it on vLLM's attention: ``TransformersMoEForCausalLM``
   when the config has experts (vLLM's own test: any of its expert-count
   aliases), else ``TransformersForCausalLM``. Where ``AutoModel`` maps no
   class to the text config, the port registers the class HF's multimodal
   model builds (``DeepseekOcr2TextModel(config.text_config)``), so the
   backend builds the same one. Only layers of attention kinds run there;
5. where the backend cannot build it, the CausalLM of the family HF's
   modular file derives the text config from (``class
   Granite4VisionTextConfig(GraniteConfig)`` → ``granite``), where the text
   config has no layer kinds that family's config does not know. It comes
   after the backend because vLLM's class for that family reads the config
   as that family writes it (Cosmos 3 Edge's text model derives from one
   whose vLLM class takes no ``relu2``), while the backend runs HF's own;
6. none at all: the port says why where the language model is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import libcst as cst

from mmport.analyzers.backendscale import unreadable_scale
from mmport.analyzers.examples import valid
from mmport.errors import FOREIGN_ERRORS
from mmport.spec import LanguageModelSpec

__all__ = [
    "EXAMPLES",
    "Lineage",
    "config_argument",
    "language_model",
    "modular_lineage",
    "sub_config",
    "tied_embeddings",
]

# The family HF's modular file derives a config class from: its model_type and the
# layer kinds its default config has.
Lineage = tuple[str, frozenset[str]]

# vLLM's names for a config's expert count (CONFIG_FIELD_ALIASES["num_experts"]).
_EXPERT_COUNTS = (
    "num_experts",
    "moe_num_experts",
    "n_routed_experts",
    "num_local_experts",
)
# The layer kinds (a config's ``layer_types``) that run through the attention interface the
# Transformers backend replaces with vLLM's; any other (linear attention, mamba) it refuses.
_BACKEND_LAYERS = frozenset(
    {"full_attention", "sliding_attention", "chunked_attention"}
)
# What vLLM reads once for the whole text model (its KV cache's head size): a config
# giving a layer its own makes transformers refuse the one global value vLLM asks for.
_ONE_FOR_ALL_LAYERS = ("head_dim",)


def language_model(
    text_config: Any,
    built: tuple[str, str] | None = None,
    causal_lm: Mapping[str, Any] | None = None,
    base_models: Mapping[str, Any] | None = None,
    own_architecture: str = "",
    shipped: Collection[str] | None = None,
    lineage: Callable[[], Lineage | None] | None = None,
    encoder_decoder: bool = False,
    own_config: Callable[[str], str] | None = None,
) -> LanguageModelSpec:
    """The architecture the port names for ``text_config``; the mappings default to transformers' own.

    ``lineage`` finds the family HF's modular file derives the text config
    from (:func:`modular_lineage`), asked only when the rules before it find
    nothing (it parses a file); ``encoder_decoder`` says the multimodal model
    is one, so no CausalLM stands in for its decoder. ``own_config`` names the
    config class of vLLM's own an architecture is written for, or ""
    (:func:`mmport.analyzers.vllmsource.own_config_class`): such a class reads
    attributes HF's derived config need not have, so no lineage leads to it.

    ``shipped`` holds the architectures vLLM ships (None: unknown, every one
    counts as shipped; :func:`mmport.analyzers.vllmsource.shipped_architectures`).

    ``built`` is the class HF's multimodal model builds for the text config
    (module, name), when its constructor names one. ``own_architecture`` is
    the port's: a single config (Chameleon's, Phi-4-multimodal's) is its own
    text config and names it, and vLLM building the language model as the
    port's own class would build the port again, without end.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    causal_lm = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if causal_lm is None else causal_lm
    base_models = MODEL_MAPPING_NAMES if base_models is None else base_models
    model_type = text_config.model_type
    names = list(getattr(text_config, "architectures", None) or ())
    if own_architecture and own_architecture in names:
        named = _not_the_port(names, own_architecture, causal_lm.get(model_type))
        if named is not None:
            return named
    elif names or (model_type in causal_lm and _ships(shipped, causal_lm[model_type])):
        return LanguageModelSpec()

    if encoder_decoder:
        return LanguageModelSpec(
            unbuildable=f"the model is an encoder-decoder, and vLLM builds no CausalLM "
            f"for its decoder (text model_type {model_type!r})"
        )

    def usable(family: str) -> bool:
        return (
            family in causal_lm
            and causal_lm[family] != own_architecture
            and _ships(shipped, causal_lm[family])
        )

    grown_from = next((t for t in _families_named_in(model_type) if usable(t)), None)
    if grown_from is not None:
        return LanguageModelSpec(
            causal_lm[grown_from],
            f"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[{grown_from!r}], "
            f"for text model_type {model_type!r}",
        )
    backend = _on_the_backend(
        text_config, built, base_models, causal_lm.get(model_type)
    )
    if backend.unbuildable and backend.has_text_model and lineage is not None:
        derived = _derived_family(text_config, lineage(), usable)
        if derived is not None:
            return _lineage_choice(
                backend, derived, causal_lm[derived], model_type, own_config
            )
    return backend


def _lineage_choice(
    backend: LanguageModelSpec,
    family: str,
    causal: str,
    model_type: str,
    own_config: Callable[[str], str] | None,
) -> LanguageModelSpec:
    """``causal``, the CausalLM of the ``family`` HF's modular file derives the text config
    from, in place of the backend that cannot build it; the backend's refusal, with why,
    where vLLM writes that class for a config class of its own."""
    written_for = own_config(causal) if own_config is not None else ""
    if written_for:
        return dataclasses.replace(
            backend,
            unbuildable=f"{backend.unbuildable}; HF's modular file derives it from "
            f"{family!r}, whose vLLM class {causal} is written for "
            f"vLLM's own config class {written_for}, not for HF's configs",
        )
    return LanguageModelSpec(
        causal,
        f"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[{family!r}]: HF's modular file "
        f"derives the text config ({model_type!r}) from that family's, and "
        "vLLM's Transformers backend cannot build it",
    )


def _derived_family(
    text_config: Any, lineage: Lineage | None, usable: Callable[[str], bool]
) -> str | None:
    """The family of ``lineage`` when its CausalLM is usable and its config knows
    every layer kind of ``text_config`` the backend's attention does not run."""
    if lineage is None or not usable(lineage[0]):
        return None
    family, known_layers = lineage
    layers = set(getattr(text_config, "layer_types", None) or ())
    return family if layers <= known_layers | _BACKEND_LAYERS else None


def _ships(shipped: Collection[str] | None, architecture: str) -> bool:
    """Whether vLLM ships ``architecture`` (``shipped`` None: unknown, so it counts as shipped)."""
    return shipped is None or architecture in shipped


def _not_the_port(
    names: list[str], own_architecture: str, causal: str | None
) -> LanguageModelSpec | None:
    """For a config naming the port's own class: another class it names, else
    transformers' CausalLM for its model_type, named explicitly; None when neither
    is another class than the port's."""
    others = [name for name in names if name != own_architecture]
    if others:
        return LanguageModelSpec(
            others[0], f"the config names it beside {own_architecture}, this class"
        )
    if causal is None or causal == own_architecture:
        return None
    return LanguageModelSpec(
        causal,
        f"transformers' CausalLM for the config's model_type; the config names "
        f"{own_architecture}, this class",
    )


def _on_the_backend(
    text_config: Any,
    built: tuple[str, str] | None,
    base_models: Mapping[str, Any],
    unshipped: str | None = None,
) -> LanguageModelSpec:
    """vLLM's Transformers backend for a text config no CausalLM vLLM ships is known for,
    or why it cannot build it. ``unshipped``: transformers' CausalLM for it, which vLLM lacks."""
    model_type = text_config.model_type
    mapped = (
        f"transformers maps it to {unshipped}, which vLLM does not ship"
        if unshipped
        else "transformers maps it to no CausalLM"
    )
    unknown = f"the text config (model_type {model_type!r}) names no architecture, and {mapped}, nor a family it is named after"
    if getattr(text_config, "vocab_size", None) is None:
        return LanguageModelSpec(
            unbuildable=f"{unknown}; it has no vocabulary (no vocab_size): no text model",
            has_text_model=False,
        )
    refused = _backend_cannot_run(text_config)
    if refused:
        return LanguageModelSpec(unbuildable=f"{unknown}; {refused}")
    base = base_models.get(model_type)
    registers = None
    if base is None:
        if built is None:
            return LanguageModelSpec(
                unbuildable=f"{unknown}; no base model either, and HF's model builds no class by name"
            )
        if not _registrable(built, text_config):
            return LanguageModelSpec(
                unbuildable=f"{unknown}; AutoModel maps no class to it, and the class HF "
                f"builds, {built[1]}, is made for another config class, so AutoModel cannot take it"
            )
        base, registers = built[1], built
    scale = _unreadable_scale(registers[0] if registers else "transformers", base)
    if scale:
        return LanguageModelSpec(
            unbuildable=f"{unknown}; vLLM's Transformers backend takes each attention "
            "layer's softmax scale only as a literal or an attribute of the module, "
            f"and {scale} computes it in the call"
        )
    experts = any(getattr(text_config, name, None) for name in _EXPERT_COUNTS)
    return LanguageModelSpec(
        "TransformersMoEForCausalLM" if experts else "TransformersForCausalLM",
        f"{f'vLLM does not ship {unshipped}' if unshipped else 'no CausalLM is known'} "
        f"for text model_type {model_type!r}; vLLM's "
        f"Transformers backend builds {base} through AutoModel",
        registers=registers,
    )


def _backend_cannot_run(text_config: Any) -> str:
    """Why vLLM's Transformers backend cannot run the layers ``text_config`` describes, or ""."""
    other_layers = sorted(
        set(getattr(text_config, "layer_types", None) or ()) - _BACKEND_LAYERS
    )
    if other_layers:
        return (
            "vLLM's Transformers backend runs only attention layers, and this "
            f"config has {', '.join(other_layers)} layers"
        )
    varied = _varied_per_layer(text_config, _ONE_FOR_ALL_LAYERS)
    if varied:
        return (
            f"vLLM's Transformers backend reads one {', '.join(varied)} for every "
            "layer, and this config sets it per layer (per_layer_config)"
        )
    return ""


def _varied_per_layer(text_config: Any, names: Collection[str]) -> list[str]:
    """Which of ``names`` the text config's ``per_layer_config`` gives some layer a value
    of its own for (transformers' per-layer configs: Embedding Gemma 2's full-attention
    layers have a head size of their own)."""
    try:
        overrides = text_config.to_dict().get("per_layer_config") or {}
    except FOREIGN_ERRORS:
        return []
    found = {
        name
        for values in overrides.values()
        if isinstance(values, Mapping)
        for name in values
        if name in names
    }
    return sorted(found)


def tied_embeddings(config: Any, root: Sequence[str] = ()) -> str | None:
    """The config the port reads the text config's ``tie_word_embeddings`` from, where
    vLLM gives the text config none (:attr:`LanguageModelSpec.tie_flag_holder`).

    vLLM copies the flag to the text config from the top config only. HF's
    model ties by the flag of the config it was built from, read with a
    default of False; when the text config sits under another config
    (ColQwen2's ``vlm_config.text_config``), that inner model's config holds
    it. None when the top config or the text config has the flag itself; ""
    when no config on the way does. ``root`` is the sub-config the port's
    ``config`` is (:attr:`EncoderSpec.config_path`): the holder is named from it,
    or from vLLM's config where it sits above it.
    """
    text_config = config.get_text_config()
    if hasattr(config, "tie_word_embeddings") or hasattr(
        text_config, "tie_word_embeddings"
    ):
        return None
    path = _path_to(config, text_config)
    for depth in range(len(path) - 1, 0, -1):
        if hasattr(sub_config(config, path[:depth]), "tie_word_embeddings"):
            held = path[:depth]
            if held[: len(root)] == list(root):
                return ".".join(["config", *held[len(root) :]])
            return ".".join(["vllm_config.model_config.hf_config", *held])
    return ""


def _path_to(config: Any, target: Any) -> list[str]:
    """The attribute names leading from ``config`` through its sub-configs to ``target``."""
    for name, value in vars(config).items():
        if value is target:
            return [name]
        if hasattr(value, "get_text_config") and (rest := _path_to(value, target)):
            return [name, *rest]
    return []


def config_argument(call: cst.BaseExpression) -> tuple[str, ...] | None:
    """The sub-config path a constructor call takes as its config (``X(config)`` ->
    ``()``, ``X._from_config(config.thinker_config)`` -> ``("thinker_config",)``),
    or None for a call taking anything else."""
    if not isinstance(call, cst.Call) or not call.args:
        return None
    argument = next(
        (a for a in call.args if a.keyword and a.keyword.value == "config"),
        call.args[0],
    )
    parts = cst.Module([]).code_for_node(argument.value).strip().split(".")
    if parts[0] != "config" or not all(part.isidentifier() for part in parts):
        return None
    return tuple(parts[1:])


def sub_config(config: Any, path: Sequence[str]) -> Any:
    """``config``'s sub-config at ``path`` (``("thinker_config",)``; empty: ``config``)."""
    for name in path:
        config = getattr(config, name)
    return config


def modular_lineage(config_cls: type[Any]) -> Lineage | None:
    """The family HF's modular file derives ``config_cls`` from, if it has one:
    ``class Granite4VisionTextConfig(GraniteConfig)``, ``GraniteConfig`` imported from
    ``..granite.configuration_granite``, gives ``granite``. Read with libcst; nothing
    of the modular file is imported (it may need packages the model does not). Read
    once per class."""
    if config_cls not in _LINEAGES:
        _LINEAGES[config_cls] = _read_lineage(config_cls)
    return _LINEAGES[config_cls]


_LINEAGES: dict[type[Any], Lineage | None] = {}


def _read_lineage(config_cls: type[Any]) -> Lineage | None:
    module = inspect.getmodule(config_cls)
    filename = getattr(module, "__file__", None)
    if module is None or not filename or module.__package__ is None:
        return None
    for modular in sorted(Path(filename).parent.glob("modular_*.py")):
        tree = cst.parse_module(modular.read_text(encoding="utf-8"))
        imports = _imported_names(tree)
        for statement in tree.body:
            if (
                isinstance(statement, cst.ClassDef)
                and statement.name.value == config_cls.__name__
            ):
                for base in statement.bases:
                    found = _config_family(base.value, imports, module.__package__)
                    if found is not None:
                        return found
    return None


def _imported_names(tree: cst.Module) -> dict[str, tuple[str, str]]:
    """Name bound → (the (relative) module, the name there) of each module-level
    ``from ... import``."""
    found = {}
    lines = [s for s in tree.body if isinstance(s, cst.SimpleStatementLine)]
    for statement in lines:
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(
                small.names, cst.ImportStar
            ):
                dots = "." * len(small.relative)
                name = (
                    cst.Module([]).code_for_node(small.module) if small.module else ""
                )
                for alias in small.names:
                    bound = alias.evaluated_alias or alias.evaluated_name
                    found[bound] = (dots + name, alias.evaluated_name)
    return found


def _config_family(
    base: cst.BaseExpression, imports: Mapping[str, tuple[str, str]], package: str
) -> Lineage | None:
    """The model_type and layer kinds of the config class ``base`` names, if it is one."""
    if not isinstance(base, cst.Name) or base.value not in imports:
        return None
    module, name = imports[base.value]
    try:
        parent = getattr(importlib.import_module(module, package), name)
    except (ImportError, AttributeError):
        return None
    model_type = getattr(parent, "model_type", "")
    if not model_type or not inspect.isclass(parent):
        return None
    try:
        layers = getattr(parent(), "layer_types", None) or ()
    except FOREIGN_ERRORS:  # a config class refusing its own defaults: no kinds known
        layers = ()
    return model_type, frozenset(layers)


def _unreadable_scale(module: str, name: str) -> str:
    """:func:`~mmport.analyzers.backendscale.unreadable_scale` for the class ``name`` of ``module``
    ("" when it cannot be imported: nothing is known against it)."""
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except FOREIGN_ERRORS:
        return ""
    return unreadable_scale(cls) if isinstance(cls, type) else ""


def _registrable(built: tuple[str, str], text_config: Any) -> bool:
    """Whether AutoModel can map ``text_config``'s class to ``built`` (it checks the class's ``config_class``)."""
    import importlib

    cls = getattr(importlib.import_module(built[0]), built[1], None)
    return getattr(cls, "config_class", None) is type(text_config)


def _families_named_in(model_type: str) -> list[str]:
    """Model types ``model_type``'s segments spell with some left out, longest first.

    The first segment is kept and the order unchanged; among equally long
    ones, leaving out the last segment comes first (``qwen2_vl_text`` →
    ``qwen2_vl``, ``qwen2_text``, ``qwen2``).
    """
    first, *rest = model_type.split("_")
    return [
        "_".join([first, *kept])
        for size in range(len(rest) - 1, -1, -1)
        for kept in combinations(rest, size)
    ]


def _config(model_type: str, **settings: Any) -> Any:
    """A text config as the examples give it: a model_type and settings."""
    from types import SimpleNamespace

    return SimpleNamespace(
        **{
            "model_type": model_type,
            "architectures": None,
            "vocab_size": 32,
            **settings,
        }
    )


# A family whose text model transformers' AutoModel does not map, built by name in HF's model.
_OWN_TEXT_MODEL = """
class DeepseekOcr2TextConfig:
    model_type = "deepseek_ocr2_text"
    architectures = None
    vocab_size = 129280


class Ernie4_5Config:
    model_type = "ernie4_5"


class DeepseekOcr2TextModel:
    config_class = DeepseekOcr2TextConfig


class Ernie4_5Model:
    config_class = Ernie4_5Config
"""

_CAUSAL_LM = {
    "qwen2": "Qwen2ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
_BASE = {
    "glm4v_text": "Glm4vTextModel",
    "glm4v_moe_text": "Glm4vMoeTextModel",
    "qwen3_moe": "Qwen3MoeModel",
}


def _example(
    config: Any,
    built: tuple[str, str] | None = None,
    own: str = "",
    shipped: Collection[str] | None = None,
    lineage: Lineage | None = None,
    encoder_decoder: bool = False,
    own_configs: Mapping[str, str] | None = None,
) -> tuple[str, str, Any]:
    """The facts an example fixes: the architecture or that none can be built, and what is registered."""
    spec = language_model(
        config,
        built,
        _CAUSAL_LM,
        _BASE,
        own_architecture=own,
        shipped=shipped,
        lineage=lambda: lineage,
        encoder_decoder=encoder_decoder,
        own_config=lambda architecture: (own_configs or {}).get(architecture, ""),
    )
    return spec.architecture, "unbuildable" if spec.unbuildable else "", spec.registers


EXAMPLES = [
    valid(
        "a_text_config_naming_its_own_architecture_needs_none",
        "",
        lambda snippet: _example(_config("qwen2_vl_text", architectures=["X"])),
        ("", "", None),
    ),
    valid(
        "a_single_config_naming_the_ports_class_names_its_causal_lm",
        "",
        lambda snippet: _example(
            _config("qwen2", architectures=["Qwen2VLLike"]), own="Qwen2VLLike"
        ),
        ("Qwen2ForCausalLM", "", None),
    ),
    valid(
        "a_single_config_whose_causal_lm_is_the_port_runs_on_the_backend",
        "",
        lambda snippet: _example(
            _config("glm4v_text", architectures=["Glm4vTextModel"]),
            own="Glm4vTextModel",
        ),
        ("TransformersForCausalLM", "", None),
    ),
    valid(
        "a_config_with_no_vocabulary_has_no_text_model",
        "",
        lambda snippet: _example(
            _config("pixtral", vocab_size=None), own="PixtralVisionModel"
        ),
        ("", "unbuildable", None),
    ),
    valid(
        "qwen3_vl_moe_text_grew_from_qwen3_moe_not_qwen3",
        "",
        lambda snippet: _example(_config("qwen3_vl_moe_text")),
        ("Qwen3MoeForCausalLM", "", None),
    ),
    valid(
        "a_text_config_its_modular_file_derives_from_qwen3_takes_qwen3s_causal_lm",
        "",
        lambda snippet: _example(
            _config("acme_vision_text"), lineage=("qwen3", frozenset())
        ),
        ("Qwen3ForCausalLM", "", None),
    ),
    valid(
        "layer_kinds_the_derived_familys_config_lacks_keep_it_from_that_causal_lm",
        "",
        lambda snippet: _example(
            _config("acme_vision_text", layer_types=["linear_attention"]),
            lineage=("qwen3", frozenset({"full_attention"})),
        ),
        ("", "unbuildable", None),
    ),
    valid(
        "a_derived_familys_causal_lm_written_for_vllms_own_config_is_not_taken",
        "",
        lambda snippet: _example(
            _config("acme_vision_text", layer_types=["linear_attention"]),
            lineage=("qwen3", frozenset({"linear_attention"})),
            own_configs={"Qwen3ForCausalLM": "Qwen3VendorConfig"},
        ),
        ("", "unbuildable", None),
    ),
    valid(
        "an_encoder_decoders_decoder_is_no_causal_lm",
        "",
        lambda snippet: _example(_config("qwen3_decoder"), encoder_decoder=True),
        ("", "unbuildable", None),
    ),
    valid(
        "glm4v_text_runs_on_the_transformers_backend",
        "",
        lambda snippet: _example(_config("glm4v_text")),
        ("TransformersForCausalLM", "", None),
    ),
    valid(
        "a_text_config_with_experts_runs_on_the_moe_backend",
        "",
        lambda snippet: _example(_config("glm4v_moe_text", n_routed_experts=8)),
        ("TransformersMoEForCausalLM", "", None),
    ),
    valid(
        "a_text_model_transformers_cannot_build_is_said_to_be_unbuildable",
        "",
        lambda snippet: _example(_config("paddleocr_vl_text")),
        ("", "unbuildable", None),
    ),
    valid(
        "a_text_model_automodel_lacks_is_registered_as_hf_builds_it",
        _OWN_TEXT_MODEL,
        lambda snippet: _example(
            snippet.DeepseekOcr2TextConfig(),
            (snippet.__name__, "DeepseekOcr2TextModel"),
        )[2][1],
        "DeepseekOcr2TextModel",
    ),
    valid(
        "a_class_made_for_another_config_cannot_be_registered",
        _OWN_TEXT_MODEL,
        lambda snippet: _example(
            snippet.DeepseekOcr2TextConfig(), (snippet.__name__, "Ernie4_5Model")
        ),
        ("", "unbuildable", None),
    ),
    valid(
        "a_causal_lm_vllm_ships_is_left_to_vllm",
        "",
        lambda snippet: _example(_config("qwen2"), shipped={"Qwen2ForCausalLM"}),
        ("", "", None),
    ),
    valid(
        "a_causal_lm_vllm_does_not_ship_runs_on_the_backend_mmport_chooses",
        "",
        lambda snippet: _example(
            _config("qwen3_moe", num_experts=8), shipped={"Qwen2ForCausalLM"}
        ),
        ("TransformersMoEForCausalLM", "", None),
    ),
    valid(
        "linear_attention_layers_do_not_run_on_the_transformers_backend",
        "",
        lambda snippet: _example(
            _config("glm4v_text", layer_types=["linear_attention", "full_attention"])
        ),
        ("", "unbuildable", None),
    ),
]
