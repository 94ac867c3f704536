"""The model class written as vLLM code: vLLM's towers through their own API, projectors on vLLM's layers.

These facts are what a generated class needs where it does not run HF's
feature methods (:mod:`mmport.analyzers.nativepath`,
:mod:`mmport.analyzers.projector`, :mod:`mmport.analyzers.vllmclass`); each
carries the HF line it was read from. Names as they appear in the output are
properties here, so the template only lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from mmport.spec.source import HelperFunction, Source

if TYPE_CHECKING:
    from mmport.spec import EncoderModule

__all__ = [
    "CopiedCode",
    "CopiedMethod",
    "OwnModule",
    "ProjectorLayer",
    "ProjectorLayerKind",
    "VllmFeaturePath",
    "VllmModelPlan",
    "VllmProjector",
    "VllmTowerBuild",
]

# How vLLM builds one layer of a projector: a linear layer sharded by its output
# (``column``) or by its input (``row``), or whole on every rank (``replicated``);
# an activation of HF's table by vLLM's (``act``); a norm or a torch activation
# module as HF builds it (``module``): per token, which no sharding changes.
ProjectorLayerKind = Literal["column", "row", "replicated", "act", "module"]

# vLLM's class for each kind of linear layer, and the keyword each adds to HF's arguments.
_LINEAR_CLASSES = {
    "column": ("ColumnParallelLinear", "gather_output=False"),
    "row": ("RowParallelLinear", "input_is_parallel=True"),
    "replicated": ("ReplicatedLinear", ""),
}
_LAYERS_MODULE = "vllm.model_executor.layers.linear"
_ACTIVATIONS_MODULE = "vllm.model_executor.layers.activation"


@dataclass(frozen=True)
class ProjectorLayer:
    """One layer of a projector: HF's attribute, how vLLM builds it, and HF's arguments (code)."""

    attr: str
    kind: ProjectorLayerKind
    arguments: tuple[str, ...]
    source: Source

    @property
    def linear(self) -> bool:
        """Whether vLLM's layer is a linear layer, which returns (output, bias)."""
        return self.kind in _LINEAR_CLASSES

    @property
    def constructor(self) -> str:
        """The constructor call as the port writes it, up to its quantization and prefix."""
        if self.kind == "act":
            return f"get_act_fn({self.arguments[0]})"
        if self.kind == "module":
            return self.arguments[0]
        name, extra = _LINEAR_CLASSES[self.kind]
        return f"{name}({', '.join([*self.arguments, *([extra] if extra else [])])}"


@dataclass(frozen=True)
class VllmProjector:
    """HF's projector module (``hf_class``), written as a module of vLLM's layers.

    ``argument`` is what HF builds it from (``config``), ``setup`` the local
    statements of HF's constructor its layers read, ``layers`` in the order
    HF's ``forward`` runs them; ``built_at`` the line of HF's model that builds it.
    """

    attr: str
    hf_class: str
    source: Source
    parameter: str
    argument: str
    setup: tuple[str, ...]
    layers: tuple[ProjectorLayer, ...]
    forward_source: Source
    built_at: Source | None = None

    @property
    def imports(self) -> tuple[tuple[str, str], ...]:
        """The (module, name) imports its layers need."""
        needs = []
        for layer in self.layers:
            if layer.linear:
                needs.append((_LAYERS_MODULE, _LINEAR_CLASSES[layer.kind][0]))
            elif layer.kind == "act":
                needs.append((_ACTIVATIONS_MODULE, "get_act_fn"))
        return tuple(dict.fromkeys(needs))

    @property
    def summary(self) -> str:
        """One line for ``inspect``: each layer and how vLLM builds it."""
        layers = ", ".join(f"{layer.attr} ({layer.kind})" for layer in self.layers)
        return f"{self.hf_class} on vLLM's layers: {layers}"

    @property
    def copied(self) -> bool:
        """Whether the port holds HF's code copied (no: a chain laid out anew)."""
        return False

    @property
    def quantized(self) -> bool:
        """Whether the module takes vLLM's ``quant_config`` and ``prefix`` (always)."""
        return True

    @property
    def import_lines(self) -> tuple[str, ...]:
        """Import lines beyond :attr:`imports` (none)."""
        return ()


@dataclass(frozen=True)
class CopiedCode:
    """One HF class or method as the port holds it: its name, HF's line, and the code."""

    name: str
    source: Source
    code: str


@dataclass(frozen=True)
class OwnModule:
    """HF's module class ``hf_class``, copied into the port onto vLLM's layers
    (:mod:`mmport.analyzers.ownmodule`).

    ``classes``: the copied classes, those it builds first; ``import_lines`` what
    they read; ``quantized``: the class takes vLLM's ``quant_config`` and ``prefix``.
    """

    attr: str
    hf_class: str
    source: Source
    argument: str
    classes: tuple[CopiedCode, ...]
    import_lines: tuple[str, ...]
    quantized: bool
    built_at: Source | None = None

    @property
    def imports(self) -> tuple[tuple[str, str], ...]:
        """``from`` imports as (module, name) pairs: none, all are :attr:`import_lines`."""
        return ()

    @property
    def summary(self) -> str:
        """One line for ``inspect``: the classes copied, and what vLLM builds in them."""
        names = [c.name for c in self.classes]
        linear = " with vLLM's linear layers" if self.quantized else ""
        return f"HF's code copied{linear}: {', '.join(names)}"

    @property
    def copied(self) -> bool:
        """Whether the port holds HF's code copied (yes)."""
        return True


@dataclass(frozen=True)
class CopiedMethod:
    """HF's feature method as the class's own method ``name`` (:mod:`mmport.analyzers.copiedpath`).

    ``code`` is the ``def`` (at class level), its tower block replaced by
    vLLM's tower call; ``params`` the item fields it takes, the tower's input
    first; ``methods`` HF's methods it calls, copied as the class's;
    ``helpers`` the functions they call, transplanted to module level.
    """

    name: str
    params: tuple[str, ...]
    code: str
    source: Source
    methods: tuple[CopiedCode, ...] = ()
    helpers: tuple[HelperFunction, ...] = ()
    import_lines: tuple[str, ...] = ()
    # The attributes of ``self`` the copied code reads (modules, parameters, config).
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class VllmFeaturePath:
    """One modality's HF feature method as the steps vLLM code runs (:mod:`mmport.analyzers.nativepath`).

    The tower ``tower`` on ``tower_input``; the hidden states of the layer or
    layers ``layers`` names (code on the class's config; "" for the tower's
    output), with the CLS token dropped by ``strategy`` (code: a config value
    or ``"default"``; "" for none); then the modules ``steps``, in order.
    ``tower_line``, ``selection_lines`` and ``step_lines`` are the HF lines of
    the tower's call, of the hidden states' selection, and of each step.
    """

    modality: str
    method: str
    source: Source
    tower: str
    tower_input: str
    layers: str
    strategy: str
    steps: tuple[str, ...]
    tower_line: Source
    selection_lines: tuple[Source, ...] = ()
    step_lines: tuple[Source, ...] = ()
    # HF's last reshape of the features to (items, rows, <this>) (code on the class's
    # ``self.config``; "" for none); its line is the last of ``step_lines``.
    regroup: str = ""
    # Keywords of HF's tower call handed on to vLLM's module (``patch_attention_mask``).
    tower_keywords: tuple[str, ...] = ()
    # The field of HF's tower output read where no layer is chosen.
    tower_output: str = "last_hidden_state"
    # HF's method takes the whole batch (flat fields, every item's rows end to end),
    # as vLLM hands it over: called once, not per item.
    batched_call: bool = False
    # HF's method copied as the class's own, where the steps are more than modules.
    copied: CopiedMethod | None = None
    # Each item's input comes with rows of its own (HF's crops or tiles, one item's
    # output kept whole), not as one row of a batch.
    item_rows: bool = False
    # The item fields that come with rows of their own (each item's crops, chunks and
    # their masks): handed to HF's copied method whole, the others as a batch of one.
    whole: tuple[str, ...] = ()
    # HF's copied lines give every item's rows joined in one sequence (Qwen2-Audio's
    # masked selection in forward): the class runs them on one item at a time.
    joins_items: bool = False
    # The field of what the copied method returns that holds the features, where it
    # returns HF's output object whole (a method copied on HF's kept tower).
    output_field: str = ""

    @property
    def read_output(self) -> str:
        """What the class appends to the copied method's call to read its features."""
        return f".{self.output_field}" if self.output_field else ""

    @property
    def lines(self) -> tuple[Source, ...]:
        """The HF lines of the tower's call and of its output's selection."""
        return (self.tower_line, *self.selection_lines)

    @property
    def strategy_code(self) -> str:
        """The strategy as the class's methods read it (``self.config...`` or a literal)."""
        return (
            f"self.{self.strategy}"
            if self.strategy.startswith("config.")
            else self.strategy
        )

    def schema_name(self, prefix: str) -> str:
        """The stem of the path's input classes for a class prefix (``LlavaImage``;
        ``Qwen2Audio``, not ``Qwen2AudioAudio``)."""
        return (
            prefix if prefix.endswith(self.schema_stem) else prefix + self.schema_stem
        )

    @property
    def input_noun(self) -> str:
        """What vLLM's input classes call the item's raw input: ``Pixel`` values, or
        audio ``Feature``s."""
        return "Feature" if self.modality == "audio" else "Pixel"

    @property
    def schema_stem(self) -> str:
        """The modality as vLLM's input classes name it (``Image``)."""
        return self.modality.capitalize()


@dataclass(frozen=True)
class VllmTowerBuild:
    """vLLM's own tower module (``vllm_class``), built from ``config_attr``.

    ``select_layers``: the path reads hidden states of chosen layers, which
    vLLM's module gives by its layer selection, built only as deep as the
    deepest of them and without the post-layernorm HF's hidden states lack;
    ``post_norm``: the path reads the tower's output after its post-layernorm.
    """

    attr: str
    vllm_class: str
    config_attr: str
    select_layers: str
    post_norm: bool
    source: Source
    # The prefix vLLM's module keeps the tower's weights under (``vision_model.``).
    weights_under: str = ""
    # Constructor keywords that make vLLM's module compute what HF's does, (name, code).
    builds_with: tuple[tuple[str, str], ...] = ()
    # HF's keywords handed on in the form vLLM's forward takes, (name, code on HF's value).
    converts: tuple[tuple[str, str], ...] = ()
    # HF's keyword holding each image's (height, width), where vLLM's module takes the
    # images unpadded, as a list, and gives each one's features (Pixtral's).
    unpads_by: str = ""
    # The patch size on vLLM's module (code on it: ``self.config.patch_size``).
    patch_size: str = "self.patch_size"
    # Why HF's module is kept (vLLM ships none): ``vllm_class`` is then HF's class,
    # built from ``config_attr`` and called by HF's lines (mmport.analyzers.keptpath).
    kept: str = ""

    @property
    def patch_size_code(self) -> str:
        """The patch size as the class reads it off its tower."""
        return f"self.{self.attr}.{self.patch_size.removeprefix('self.')}"

    def handed(self, name: str) -> str:
        """The code handing HF's keyword ``name`` on to vLLM's module."""
        return dict(self.converts).get(name, name)

    @property
    def owner(self) -> str:
        """Whose module the class builds: ``vLLM's`` or ``HF's`` (kept)."""
        return "HF's" if self.kept else "vLLM's"

    @property
    def class_name(self) -> str:
        """The class's name (vLLM's ``CLIPVisionModel``, or HF's where kept)."""
        return self.vllm_class.rpartition(".")[2]

    @property
    def module(self) -> str:
        """vLLM's module defining the class."""
        return self.vllm_class.rpartition(".")[0]


@dataclass(frozen=True)
class VllmModelPlan:
    """The generated class's encoders, as vLLM code: towers, projectors, each path's steps,
    and the checkpoint names it loads by (``mapper``: prefix to prefix, every layout)."""

    towers: tuple[VllmTowerBuild, ...]
    projectors: tuple[VllmProjector | OwnModule, ...]
    paths: tuple[VllmFeaturePath, ...]
    mapper: tuple[tuple[str, str], ...]
    # Weights of the model's own the copied paths read (``nn.Parameter``), built by HF's lines.
    parameters: tuple[EncoderModule, ...] = ()
    # The copied code reads the model's dtype or device (``self.dtype``).
    reads_dtype: bool = False
    # HF's get_rope_index, copied: the class's M-RoPE positions (vLLM's SupportsMRoPE).
    rope: CopiedMethod | None = None

    @property
    def imports(self) -> tuple[tuple[str, str], ...]:
        """The (module, name) imports the encoders need."""
        needs = [(t.module, t.class_name) for t in self.towers]
        needs += [need for p in self.projectors for need in p.imports]
        if any(t.select_layers for t in self.towers):
            needs.append(("vllm.model_executor.models.utils", "get_layer_index"))
        return tuple(dict.fromkeys(needs))

    @property
    def import_lines(self) -> tuple[str, ...]:
        """Whole import lines the copied modules and methods need (``import math``)."""
        lines = [x for p in self.projectors for x in p.import_lines]
        lines += [x for p in self.paths if p.copied for x in p.copied.import_lines]
        lines += list(self.rope.import_lines if self.rope else ())
        lines += [
            f"from {m} import {n}" if m else f"import {n}"
            for p in self.parameters
            for m, n in p.needs
        ]
        return tuple(dict.fromkeys(lines))

    @property
    def copied_code(self) -> tuple[str, ...]:
        """Every piece of HF's code the class holds copied (classes, methods, functions)."""
        copies = [p.copied for p in self.paths if p.copied] + [self.rope]
        code = [c.code for c in copies if c] + [h.code for h in self.helpers]
        code += [m.code for c in copies if c for m in c.methods]
        code += [k.code for p in self.projectors if p.copied for k in p.classes]  # type: ignore[union-attr]
        return tuple(code)

    @property
    def helpers(self) -> tuple[HelperFunction, ...]:
        """Module-level functions the copied methods call, each once."""
        copies = [p.copied for p in self.paths if p.copied] + [self.rope]
        found = {h.name: h for c in copies if c for h in c.helpers}
        return tuple(found.values())

    @property
    def connector_phrase(self) -> str:
        """What the module docstring says of the projectors (``""`` for none)."""
        if not self.projectors:
            return ""
        phrases = [
            "on vLLM's tensor-parallel layers"
            if not p.copied
            else "as HF's code, copied onto vLLM's linear layers"
            if p.quantized
            else "as HF's code, copied"
            for p in self.projectors
        ]
        noun = "projectors" if len(self.projectors) > 1 else "projector"
        return f"the {noun} {' and '.join(dict.fromkeys(phrases))}"

    @property
    def quantizes(self) -> bool:
        """Whether any module the class builds takes vLLM's ``quant_config`` (a kept HF
        tower does not)."""
        return any(not t.kept for t in self.towers) or any(
            p.quantized for p in self.projectors
        )

    @property
    def tower_attrs(self) -> tuple[str, ...]:
        """The attributes holding towers (vLLM's LoRA mapping names them)."""
        return tuple(t.attr for t in self.towers)

    @property
    def connector_attrs(self) -> tuple[str, ...]:
        """The attributes holding projectors."""
        return tuple(p.attr for p in self.projectors)

    @property
    def marked_modalities(self) -> str:
        """The modalities the towers encode, as ``_mark_tower_model`` takes them (code)."""
        names = [f'"{p.modality}"' for p in self.paths]
        return names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"

    def tower(self, attr: str) -> VllmTowerBuild:
        """The tower built at ``attr``."""
        return next(t for t in self.towers if t.attr == attr)
