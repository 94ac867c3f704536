"""PortSpec: the single data model between analysis and rendering.

Frozen dataclasses, JSON-serialisable with :func:`to_json`. Every derived fact
carries a :class:`Source`: the HF file (relative to the transformers package)
and line it was read from, so a porter can check the rule against its origin.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mmport.media import EMBEDDING_FIELDS
from mmport.spec.native import (
    CopiedCode,
    CopiedMethod,
    OwnModule,
    ProjectorLayer,
    VllmFeaturePath,
    VllmModelPlan,
    VllmProjector,
    VllmTowerBuild,
)
from mmport.spec.source import HelperFunction, Source

__all__ = [
    "CallParameter",
    "ChatPortSpec",
    "CopiedCode",
    "CopiedMethod",
    "CountRule",
    "CountStrategy",
    "EdgeMerges",
    "EntryPointSpec",
    "FeaturePath",
    "FieldSpec",
    "FieldsStrategy",
    "GeometryRule",
    "HelperFunction",
    "ItemPrefix",
    "LanguageModelSpec",
    "ModalitySpec",
    "OutputRule",
    "OwnModule",
    "PortSpec",
    "ProjectorLayer",
    "PromptUpdateSpec",
    "SelfHandledSpec",
    "Source",
    "SwitchSpec",
    "TextPrefix",
    "VllmFeaturePath",
    "VllmModelPlan",
    "VllmProjector",
    "VllmTowerBuild",
    "module_name",
    "to_json",
]


# How a port counts an item: statically (``derived``), or by asking HF at run time (``delegated``).
CountStrategy = Literal["derived", "delegated"]
# How a port splits HF's outputs into items: as observed across items (``derived``),
# or by calling HF on each item alone (``per_item``: HF's batch does not split).
FieldsStrategy = Literal["derived", "per_item"]


@dataclass(frozen=True)
class GeometryRule:
    """How the HF image processor sizes an item before counting.

    ``kind`` is ``"fixed"`` when every item is resized to one size read from
    the image processor at run time (``size_expr``), ``"none"`` when the count
    does not depend on the item at all.
    """

    kind: str
    size_expr: str = ""
    source: Source | None = None


@dataclass(frozen=True)
class CountRule:
    """The number of tokens one item expands to.

    ``statements`` are Python lines, transplanted from the HF processor with
    ``self`` renamed to ``processor``, that leave the count in ``result``;
    they may read ``height`` and ``width`` (the processed item size).
    ``strategy`` is ``"derived"`` (static) or ``"delegated"``: the port asks
    the HF processor for each item's replacement at run time, and ``reason``
    says why static derivation failed.

    When the count depends on the item's original size, the statements read
    ``image_height`` and ``image_width`` (``size_dependent``) and may call
    ``helpers`` (HF functions transplanted with them); ``item_reads`` tell
    which HF output each of those reads replaces, and ``imports`` are the
    import lines the transplanted code needs.

    When the hook returns more than ``token * count`` (begin/end-of-image
    tokens, row breaks, tile markers), ``replacement`` is the whole hook
    transplanted as ``def replace_image_token(processor, image_height,
    image_width, **kwargs) -> str``: the port tokenizes the string it returns
    and marks only the embedding token's positions.
    """

    statements: tuple[str, ...]
    result: str
    uses_geometry: bool
    strategy: CountStrategy
    source: Source
    reason: str = ""
    size_dependent: bool = False
    helpers: tuple[HelperFunction, ...] = ()
    imports: tuple[str, ...] = ()
    # Functions of the shared support module the transplanted code calls in place of
    # HF's private base-class methods (``merge_and_standardize_kwargs``).
    support_names: tuple[str, ...] = ()
    item_reads: tuple[tuple[str, str, Source], ...] = ()
    # Parameters a delegated call must pass to HF's ``_process_images`` beside
    # the images kwargs; the port takes them from the processor's merged kwargs.
    delegate_args: tuple[str, ...] = ()
    # Delegated through HF's own ``__call__``: a processor in the older style,
    # which expands placeholders there by itself (no ``replace_<modality>_token``).
    via_call: bool = False
    replacement: HelperFunction | None = None
    # Video and audio: the hook run on the item's own HF outputs (strategy "derived").
    outputs: OutputRule | None = None
    # The hook's ``**kwargs`` when the statements read them: HF passes the merged image kwargs.
    kwargs_name: str = ""
    # Where HF hands the images and merged kwargs to its image processor, when the hook
    # reads an output only a switch makes (the port then runs that preprocessing itself).
    preprocess_source: Source | None = None

    @property
    def preprocessed(self) -> bool:
        """Whether the count recomputes what HF's preprocessing gives the item (reads of its
        outputs rewritten to the item's size), which the port reads under the request's
        settings from the configured processor; a constant read recomputes nothing."""
        return any(kind != "constant" for _, kind, _ in self.item_reads)

    @property
    def switched_reads(self) -> tuple[tuple[str, Source], ...]:
        """``(key, source)`` of each read that is HF's constant while a switch is off and
        otherwise what HF's preprocessing gives a blank image of the item's size."""
        return tuple(
            (key, source) for key, kind, source in self.item_reads if kind == "constant"
        )

    @property
    def reads_configured(self) -> bool:
        """Whether the statements read the processor configured for the request (``configured``)."""
        return any(
            re.search(r"\bconfigured\b", code)
            for code in (*self.statements, self.result)
        )


@dataclass(frozen=True)
class OutputRule:
    """A replacement hook that runs in the port on the item's own HF outputs.

    ``hook`` is HF's ``replace_<modality>_token`` transplanted whole (``self``
    renamed to ``processor``); the port calls it on a batch of one built from
    the item's field values, at index 0. ``reads`` are the output keys it
    reads, ``reads_metadata`` whether it reads the video's metadata, and
    ``completion`` HF's lines that compute keys HF drops from kept ones (see
    :mod:`mmport.analyzers.outputhook`).
    """

    hook: HelperFunction
    reads: tuple[str, ...]
    source: Source
    reads_metadata: bool = False
    completion: HelperFunction | None = None
    helpers: tuple[HelperFunction, ...] = ()
    imports: tuple[str, ...] = ()
    # (the port's field name, the name the hook reads) where they differ, and the
    # hook's names whose values lead with a batch axis HF's final output flattened.
    names: tuple[tuple[str, str], ...] = ()
    batch_axis: tuple[str, ...] = ()
    # The hook takes ``**kwargs`` (the modality's merged processor kwargs).
    takes_kwargs: bool = True
    # ``completion`` reads the raw items (a batch of one) and the merged kwargs.
    completion_raw: bool = False
    completion_kwargs: bool = False
    # Keys the hook reads that the sub-processor returns and HF's processor then
    # drops: the port keeps them beside HF's outputs (a second sub-processor call).
    extra_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class ItemPrefix:
    """Text HF puts before each item's replacement, numbered by the item's index.

    ``text`` is an f-string transplanted from HF (``self`` renamed to
    ``processor``) that reads ``item_idx``, the item's index in the prompt.
    HF adds it only while ``condition`` holds (empty: always); ``setup`` are
    the HF lines, ``self`` renamed, that compute what ``condition`` reads from
    ``kwargs_name``, the processor's merged kwargs (empty when none is read).
    """

    text: str
    source: Source
    condition: str = ""
    condition_source: Source | None = None
    setup: tuple[str, ...] = ()
    setup_source: Source | None = None
    kwargs_name: str = ""


@dataclass(frozen=True)
class TextPrefix:
    """A special token the HF processor puts before every prompt's text.

    ``tokens`` are tokenizer attributes, tried in order (``bos_token``, then
    ``eos_token`` for a tokenizer without BOS). ``unless`` is when HF leaves
    a prompt alone: ``""`` never, ``"starts_with"`` when the prompt already
    starts with the token. ``only_with_special_tokens``: HF adds it only when
    it tokenizes with special tokens (vLLM's default).
    """

    tokens: tuple[str, ...]
    source: Source
    unless: str = ""
    only_with_special_tokens: bool = False


@dataclass(frozen=True)
class PromptUpdateSpec:
    """How the item's tokens enter the prompt.

    ``mode`` is ``"replace"`` (the placeholder token becomes the expansion) or
    ``"insert"`` (tokens go in at ``target`` without any placeholder text).
    ``trailing_tokens`` are tokenizer attributes (``bos_token``) appended after
    the last item's tokens; they get no embedding. ``prompt_suffix`` is text the
    HF processor appends to every prompt, ``suffix_tokens`` tokenizer attributes
    (``sep_token``) whose tokens it appends; ``add_special_tokens`` is False when
    the HF processor switches its tokenizer's BOS off. ``item_prefix`` is text
    HF puts before each item's replacement that depends on the item's index;
    ``prefix`` is a token the HF processor puts before every prompt's text itself.
    """

    mode: str
    target: str
    source: Source
    trailing_tokens: tuple[str, ...] = ()
    prompt_suffix: str = ""
    suffix_tokens: tuple[str, ...] = ()
    add_special_tokens: bool = True
    suffix_source: Source | None = None
    special_tokens_source: Source | None = None
    item_prefix: ItemPrefix | None = None
    prefix: TextPrefix | None = None


@dataclass(frozen=True)
class SelfHandledSpec:
    """A processor that handles images itself, called by a ``__call__`` of its own (DeepSeek-VL2).

    ``text_parameter`` is the name that ``__call__`` takes the prompt by
    (``prompt``), ``no_images`` what it takes for a sample without images
    (``"None"``, or ``"[]"`` where None fails: DeepSeek-VL2 takes
    ``len(images)``). ``alone_up_to`` is the number of items a prompt may hold
    with each item's tokens and outputs still those it has alone (DeepSeek-VL2
    tiles an image only in prompts of at most two): above it vLLM's per-item
    processor cache cannot hold the prompt's items. None when no item count
    probed changed them.
    """

    text_parameter: str
    no_images: str
    source: Source
    alone_up_to: int | None = None
    items_source: Source | None = None


@dataclass(frozen=True)
class EdgeMerges:
    """Tokens the tokenizer merges across an item's edges in HF's expanded text (Gemma 3's newlines).

    ``contexts`` are the prompts HF's ids showed it in, the item written as
    ``<item>`` (``"<item><item>"``: two items side by side); ``source`` is where
    HF writes the item's text. The port merges them after replacement (see
    :mod:`mmport.analyzers.edgemerges`).
    """

    contexts: tuple[str, ...]
    source: Source


@dataclass(frozen=True)
class CallParameter:
    """The ``__call__`` parameter HF takes a modality's items under, where it is not the usual one.

    InstructBLIP-Video's ``__call__`` takes its videos as ``images`` (``source``)
    and hands them to its video processor with nothing beside them
    (``call_source``): ``forwards_settings`` is then False, and no metadata or
    ``do_sample_frames`` may go into the call (its tokenizers would get them).
    """

    name: str
    source: Source
    forwards_settings: bool = True
    call_source: Source | None = None


@dataclass(frozen=True)
class FieldSpec:
    """One HF output key and how it splits into items (vLLM field config).

    ``sizes`` is the extra argument of the layout, as a Python expression over
    ``hf_inputs``: per-item row counts for ``flat_from_sizes``
    (``hf_inputs["image_grid_thw"].prod(-1)``), the item count for ``shared``.
    """

    key: str
    layout: str
    source: Source
    sizes: str = ""
    # Items processed one by one: HF's output for one item has rows of its own
    # (audio windows, image tiles), not a batch axis of one, so it is kept whole.
    rows: bool = False


@dataclass(frozen=True)
class SettingSpec:
    """A processor call kwarg that changes a modality's count: where the count reads it, where it is typed.

    ``folded_into`` names the kwarg the sub-processor folds it into before the
    count reads that one (Qwen2-VL's ``max_pixels`` into ``size``).
    """

    name: str
    read_at: Source
    declared_at: Source | None
    folded_into: str = ""


@dataclass(frozen=True)
class SwitchSpec:
    """A boolean call kwarg HF's preprocessing branches on (``do_pan_and_scan``), and what a port
    does with a request that flips it: ``followed`` (``how`` says how), or refused (``how`` says why)."""

    name: str
    followed: bool
    how: str
    read_at: Source


@dataclass(frozen=True)
class ModalitySpec:
    """Everything a port needs for one modality (``image``)."""

    modality: str
    placeholder: str
    placeholder_source: Source
    token_attr: str
    token_id: int
    token_source: Source
    count: CountRule
    geometry: GeometryRule
    update: PromptUpdateSpec
    fields: tuple[FieldSpec, ...]
    limit: int | None
    worst_case_size: tuple[int, int] | None
    # "derived", or "per_item" when HF batches items in a way that cannot be
    # split (padding across items): the port then calls HF once per item.
    fields_strategy: FieldsStrategy = "derived"
    fields_reason: str = ""
    # HF refuses images without text: vLLM's images-only call must carry placeholders.
    needs_text: bool = False
    # The config attribute naming the token the *model* embeds at, when it is
    # not the processor's placeholder token (Gemma 3: placeholder <start_of_image>,
    # embeddings at <image_soft_token>); empty when they are the same token.
    embed_token_attr: str = ""
    embed_token_source: Source | None = None
    # Where ``embed_token_attr`` is read: the HF config, or (video, audio) the processor.
    embed_token_owner: str = "config"
    # The processor has no ``<token_attr>``; the port looks the token's text up.
    token_id_from_text: bool = False
    # The placeholder in the prompt is not the embedded token (Aya Vision's
    # ``<image>`` expands to ``<|IMG_PATCH|>`` tokens); updates target its own id.
    placeholder_differs: bool = False
    # Processor attributes of the tokens HF demands around each placeholder in a
    # prompt (HunYuan-VL: <image_start><image><image_end>), empty when none.
    placeholder_wrappers: tuple[str, ...] = ()
    wrappers_source: Source | None = None
    # Processor attributes (before, after) of special tokens HF takes in with the
    # placeholder when the prompt writes them around it (mmport.analyzers.consumed).
    consumed_wrappers: tuple[str, ...] = ()
    consumed_source: Source | None = None
    # HF takes text or images, never both, and writes the prompt for an image
    # itself (ColPali); a request carries that prompt and one image.
    own_prompt_source: Source | None = None
    # The processor attribute of the modality's sub-processor (``feature_extractor``, ``video_processor``).
    sub_processor: str = ""
    # Video: vLLM must hand the port each video's metadata beside its frames.
    needs_metadata: bool = False
    # Video: HF's count follows the frames' content (VideoLLaMA3 drops patches that
    # repeat the previous frame's), so dummy videos must change from frame to frame.
    follows_content: bool = False
    # (HF's output name, this port's name) for outputs another modality names the
    # same (InternVL's video frames come as ``pixel_values``): processed apart, renamed.
    renamed_keys: tuple[tuple[str, str], ...] = ()
    # HF's ``_process_<modality>`` and hook take every scope of the merged kwargs
    # (omni-modal processors), not only the modality's own scope.
    merged_kwargs: bool = False
    # Request settings (``mm_processor_kwargs``) the count reads; a delegated count follows all.
    settings: tuple[SettingSpec, ...] = ()
    # Video, audio: HF's ``__call__`` takes the items under another parameter (None: the usual one).
    call_parameter: CallParameter | None = None
    # Preprocessing switches HF reads to resize, crop, pad or split but the count does
    # not (``read_at`` is HF's branch): the port refuses requests that flip them.
    unfollowed: tuple[SettingSpec, ...] = ()
    # Kwargs HF's preprocessing computes an item's geometry from but the derived count
    # does not read (``read_at`` is HF's call): a request that sets one is counted by
    # HF's processing of an item of that size.
    counted_by_hf: tuple[SettingSpec, ...] = ()
    # Tokens HF's tokenizer merges across this modality's item edges (None: none seen).
    edge_merges: EdgeMerges | None = None
    # The switches a request may flip (tiling, cropping, splitting), each followed or refused.
    switches: tuple[SwitchSpec, ...] = ()
    # Images: the processor handles them itself, through a __call__ of its own (DeepSeek-VL2).
    self_handled: SelfHandledSpec | None = None

    @property
    def embedding_fields(self) -> tuple[tuple[str, str], ...]:
        """``(key, role)`` of an item given to the port as a dict of precomputed embeddings."""
        return EMBEDDING_FIELDS[self.modality]


@dataclass(frozen=True)
class VllmEncoder:
    """vLLM's module for one kind of HF tower, and how far it stands in for HF's.

    ``answers``: the field of HF's output that vLLM's module returns, equal,
    when called with the input HF hands it first (``first``, HF's name for it)
    and the keywords in ``keywords`` (HF's names, which vLLM's forward takes
    with HF's meaning); "" where no plain call gives a field of HF's.
    ``layered``: the fields it gives when asked for every layer's output
    (``hidden_states``, each layer's output side by side, split apart); where
    neither gives any, ``unlike`` says why. ``attributes``: those of HF's module vLLM's has too,
    with HF's meaning. ``weights_under``: the prefix vLLM's module keeps the
    tower's weights under, beside HF's names in transformers 5.x (SigLIP's
    ``vision_model.``); vLLM's own loader stacks the attention projections.
    """

    path: str
    answers: str = ""
    first: str = "pixel_values"
    keywords: tuple[str, ...] = ()
    weights_under: str = ""
    attributes: tuple[str, ...] = ("dtype", "device")
    unlike: str = ""
    # The fields of HF's output it gives when asked for every layer (vLLM's layer
    # selection, built without the post-layernorm HF's hidden states lack), and
    # the expression, on the module, of its layer count.
    layered: tuple[str, ...] = ()
    layer_count: str = ""
    # Constructor keywords that make it compute what HF's does, as (name, code).
    builds_with: tuple[tuple[str, str], ...] = ()
    # HF's keywords handed on in the form vLLM's forward takes, as (name, code on
    # HF's value): Qwen2.5-VL's grid as a list of lists.
    converts: tuple[tuple[str, str], ...] = ()
    # HF's keyword holding each image's (height, width), where vLLM's forward takes
    # the images as a list of unpadded images and returns each one's features:
    # HF's padded batch is cut to the sizes, in whole patches (the module's
    # ``patch_size``), and the features are joined into HF's one sequence
    # (Pixtral's ``image_sizes``).
    unpads_by: str = ""
    # Attributes of HF's module that vLLM's lacks, as (name, type, code on vLLM's
    # module) the class gives it (Pixtral's ``patch_size``, in vLLM's config).
    provides: tuple[tuple[str, str, str], ...] = ()

    @property
    def readable(self) -> tuple[str, ...]:
        """The attributes HF's path may read on the module the class builds."""
        return (*self.attributes, *(name for name, _, _ in self.provides))

    @property
    def module(self) -> str:
        """The vLLM module that defines it (``vllm.model_executor.models.siglip``)."""
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        """The class's name (``SiglipVisionModel``)."""
        return self.path.rpartition(".")[2]


@dataclass(frozen=True)
class NativeTower:
    """vLLM's own module (``encoder``), built in place of HF's tower and answering HF's calls of it.

    ``config_attr`` is the sub-config HF builds the tower from (``.vision_config``);
    ``answers`` the fields of HF's output HF's path reads, which vLLM's module
    gives; ``callers`` the HF methods that call it; ``keywords`` those of the
    encoder's keywords HF's calls pass (Qwen2-VL's ``grid_thw``); ``layered``
    that they are answered from every layer's output (vLLM's layer selection)
    rather than the plain call, the module built without the post-layernorm
    HF's hidden states lack.
    """

    encoder: VllmEncoder
    config_attr: str
    answers: tuple[str, ...]
    callers: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    layered: bool = False

    @property
    def handed(self) -> tuple[str, ...]:
        """HF's keywords handed on to vLLM's forward: all but the sizes the class cuts by."""
        return tuple(k for k in self.keywords if k != self.encoder.unpads_by)

    def handed_on(self, keyword: str) -> str:
        """The code that hands HF's ``keyword`` to vLLM's forward."""
        return dict(self.encoder.converts).get(keyword, keyword)


@dataclass(frozen=True)
class EncoderModule:
    """One module HF's feature paths run, and the constructor line that builds it."""

    attr: str
    code: (
        str  # the right-hand side, e.g. ``AutoModel.from_config(config.vision_config)``
    )
    source: Source
    setup: tuple[str, ...] = ()  # local statements of HF's constructor the line reads
    # vLLM's own module for this tower, where it ships one
    # (``vllm.model_executor.models.siglip.SiglipVisionModel``).
    vllm_equivalent: str = ""
    # Built in place of HF's where it answers HF's calls (mmport.analyzers.towercalls);
    # else ``kept`` says why HF's module is built though vLLM ships one.
    native: NativeTower | None = None
    kept: str = ""
    # The (module, name) imports ``code`` and ``setup`` need.
    needs: tuple[tuple[str, str], ...] = ()

    @property
    def vllm_class(self) -> tuple[str, str]:
        """``vllm_equivalent`` as (module, class name)."""
        module, _, name = self.vllm_equivalent.rpartition(".")
        return module, name

    @property
    def class_suffix(self) -> str:
        """``attr`` in CamelCase (``VisionTower``), for the class a port builds it as."""
        return "".join(part.capitalize() for part in self.attr.split("_"))


@dataclass(frozen=True)
class InlineFeatures:
    """A modality's features as HF's ``forward`` computes them inline (Qwen2-Audio).

    ``params`` are the item inputs the lines read, in the order of the item's
    fields; ``lines`` the statements that lead to the features HF places at
    the modality's tokens, each ``(code, source, cited)``: ``cited`` where the
    line does not follow the one before it in HF; ``result`` the name holding
    the features there; ``self_reads`` the attributes of ``self`` the lines read.
    """

    params: tuple[str, ...]
    lines: tuple[tuple[str, Source, bool], ...]
    result: str
    self_reads: tuple[str, ...]
    free_names: tuple[str, ...]
    source: Source


@dataclass(frozen=True)
class FeaturePath:
    """One modality's encoder path: HF's ``get_<modality>_features`` and where it is.

    ``inline``: HF has no such method and computes the features in ``forward``;
    the generated class defines the method from those lines. ``through``: HF
    hands this modality's items to the model as another modality's inputs
    (InternVL's video frames as ``pixel_values``, embedded at the image token),
    so they go through that modality's path under HF's names (``renamed``:
    this port's field name → HF's); ``source`` is where HF says whose token
    receives them. ``output`` is the field of the method's output HF's
    forward places as the features.
    """

    modality: str
    method: str
    source: Source
    inline: InlineFeatures | None = None
    through: str = ""
    renamed: tuple[tuple[str, str], ...] = ()
    output: str = "pooler_output"

    @property
    def pooled(self) -> bool:
        """Whether HF places the output's ``pooler_output`` (transformers 5.x's convention)."""
        return self.output == "pooler_output"


@dataclass(frozen=True)
class EncoderSpec:
    """HF's encoder paths, one per modality it has, as the generated model class wires them.

    ``hf_class`` (in ``hf_module``) defines each path's ``get_<modality>_features``;
    they read ``modules`` (vision or audio tower, projector, ...) off ``self``,
    built once however many paths share them. ``missing`` names each modality
    the processor handles that HF's class has no such method for, with why.
    ``outer_attr`` is where the checkpoint class keeps that inner model
    (``model``; dotted where it is kept deeper, ``thinker.model``), and
    ``language_attr``/``lm_head_attr`` name the text side, for weight names.
    ``config_path`` is the sub-config HF builds ``hf_class`` from
    (``("thinker_config",)``), the generated class's config too.
    """

    hf_class: str
    hf_module: str
    paths: tuple[FeaturePath, ...]
    modules: tuple[EncoderModule, ...]
    imports: tuple[tuple[str, str], ...]  # (module, name) the constructor lines need
    language_attr: str
    language_source: Source
    outer_attr: str = ""
    lm_head_attr: str = ""
    reads_dtype: bool = False
    borrowed_methods: tuple[str, ...] = ()  # helper methods of hf_class the path calls
    # HF's multimodal rotary positions (``get_rope_index``: M-RoPE), when hf_class has them.
    rope_index_source: Source | None = None
    # The inputs ``get_rope_index`` takes by name beside the prompt (``image_grid_thw``,
    # ``second_per_grid_ts``): the generated class hands each on from the items' fields.
    rope_index_inputs: tuple[str, ...] = ()
    missing: tuple[tuple[str, str], ...] = ()  # (modality, why no path is derived)
    # The class HF builds ``language_attr`` as (module, name), when it names one (not AutoModel).
    language_class: tuple[str, str] | None = None
    # ``language_attr`` holds a whole CausalLM, its vocabulary projection inside
    # (BLIP-2's ``AutoModelForCausalLM.from_config``): its names are vLLM's CausalLM's.
    language_with_head: bool = False
    config_path: tuple[str, ...] = ()
    # Modalities with no path because HF's text model takes more of their features
    # than the embeddings (mmport.analyzers.sideinputs).
    side_refused: tuple[str, ...] = ()
    # Modules of HF's checkpoint class beside the holder's branch (Qwen2.5-Omni's
    # ``talker``): in the checkpoint, never built by the port, left unloaded.
    unbuilt_parts: tuple[str, ...] = ()

    @property
    def unpooled(self) -> bool:
        """Whether a path's features are another field than ``pooler_output``."""
        return not all(path.pooled for path in self.paths)

    @property
    def branch(self) -> str:
        """The checkpoint class's attribute the holder sits under (``thinker`` of ``thinker.model``)."""
        return self.outer_attr.split(".")[0]

    @property
    def unbuilt_prefixes(self) -> list[str]:
        """Checkpoint name prefixes of ``unbuilt_parts`` (``talker.``)."""
        return [f"{part}." for part in self.unbuilt_parts]

    @property
    def config_attr(self) -> str:
        """``config_path`` as an attribute chain (``.thinker_config``; empty: the config itself)."""
        return "".join(f".{name}" for name in self.config_path)

    @property
    def weight_renames(self) -> tuple[tuple[str, str], ...]:
        """Checkpoint name prefixes to the generated class's, where they differ: the
        modules move out of ``outer_attr``; the text model goes under vLLM's CausalLM."""
        under = {m.attr: m.native.encoder.weights_under for m in self.native_towers}  # type: ignore[union-attr]
        return tuple((old, new) for old, new in self.prefixes(under) if old != new)

    def prefixes(self, weights_under: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Each state-dict prefix of the checkpoint class (a module's, the text model's,
        the vocabulary projection's) and the generated class's for it; a module vLLM
        builds keeps its weights one level down (``weights_under``: SigLIP's
        ``vision_model.``)."""
        outer = f"{self.outer_attr}." if self.outer_attr else ""
        pairs = [
            (f"{outer}{m.attr}{dot}", f"{m.attr}{dot}{weights_under.get(m.attr, '')}")
            for m in self.modules
            for dot in ["" if "Parameter(" in m.code else "."]
        ]
        text = "language_model." if self.language_with_head else "language_model.model."
        pairs.append((f"{outer}{self.language_attr}.", text))
        if self.lm_head_attr:
            pairs.append((f"{self.lm_head_attr}.", "language_model.lm_head."))
        return tuple(pairs)

    def path(self, modality: str) -> FeaturePath | None:
        """The encoder path of ``modality``, if HF's class has one."""
        return next((p for p in self.paths if p.modality == modality), None)

    @property
    def hf_methods(self) -> tuple[str, ...]:
        """The methods of ``hf_class`` the generated class runs as its own: each feature
        path, ``get_rope_index`` when HF has one, and the helpers they call on ``self``."""
        rope = ("get_rope_index",) if self.rope_index_source is not None else ()
        features = tuple(p.method for p in self.paths if p.inline is None)
        return tuple(dict.fromkeys([*features, *rope, *self.borrowed_methods]))

    @property
    def native_towers(self) -> tuple[EncoderModule, ...]:
        """The modules built as vLLM's own (:class:`NativeTower`)."""
        return tuple(m for m in self.modules if m.native is not None)

    @property
    def tower_modalities(self) -> tuple[str, ...]:
        """The modalities the built modules encode (vLLM's ``_mark_tower_model`` takes them)."""
        return tuple(p.modality for p in self.paths)


@dataclass(frozen=True)
class EntryPointSpec:
    """A processor called by a method of its own (Molmo's ``process``), and what it does to the prompt.

    ``before``/``after``: text it puts around every prompt, items or not, under
    its kwargs' defaults (``format_read`` is False when the reader could not
    follow its prompt helper). ``prepended``: tokenizer attributes, tried in
    order, of the token it puts in front of the tokens once the items are in.
    ``items_index``: the index into the prompt's tokens every image goes in at
    (``-1``: the start). ``embed_token`` and ``fields`` are observed by running
    the entry point (with consent): the token at an item's embedding
    positions, and the output keys holding the item's rows.
    """

    method: str
    source: Source
    before: str = ""
    after: str = ""
    format_sources: tuple[Source, ...] = ()
    format_read: bool = False
    prepended: tuple[str, ...] = ()
    prepended_source: Source | None = None
    items_index: int | None = None
    items_source: Source | None = None
    embed_token: str = ""
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class LanguageModelSpec:
    """The architecture the port names for vLLM to build the language model as (mmport.analyzers.language).

    ``architecture`` is empty when the text config names its own; then
    ``unbuildable`` says why, if no architecture is known at all.
    """

    architecture: str = ""
    reason: str = ""
    unbuildable: str = ""
    # The class HF builds for the text config, (module, name), when AutoModel maps
    # none to it: the port registers it, so the Transformers backend builds the same.
    registers: tuple[str, str] | None = None
    # False when the HF model has no text model at all (a vision encoder's config has
    # no vocabulary): there is nothing for vLLM to generate with.
    has_text_model: bool = True
    # Where the text config's ``tie_word_embeddings`` comes from when vLLM gives it none
    # (the top config lacks it, and so does the text config): the config holding it, as
    # an expression on ``config`` (``config.vlm_config``), or "" when none does and HF's
    # default, False, stands. None: vLLM's own copy serves
    # (mmport.analyzers.language.tied_embeddings).
    tie_flag_holder: str | None = None

    @property
    def tie_word_embeddings(self) -> str:
        """The expression the port sets the text config's flag to; empty where it sets none."""
        if self.tie_flag_holder is None:
            return ""
        if not self.tie_flag_holder:
            return "False"
        return f"{self.tie_flag_holder}.tie_word_embeddings"

    @property
    def transformers_backend(self) -> bool:
        """Whether vLLM runs HF's own text model (its Transformers backend) rather than a class of its own."""
        return self.architecture.startswith("Transformers")

    @property
    def implementation(self) -> str:
        """Who implements the language model in vLLM, as the generated docstrings say it."""
        if self.transformers_backend:
            return "HF's own text model on vLLM's Transformers backend"
        return "vLLM's own implementation"


@dataclass(frozen=True)
class PortSpec:
    """What ``mmport inspect`` reports and ``mmport scaffold`` renders."""

    model_type: str
    ref: str
    class_prefix: str
    architecture: str
    processor_class: str
    config_class: str
    transformers_version: str
    mmport_version: str
    modalities: tuple[ModalitySpec, ...]
    # HF's image encoder path; None when it could not be derived (the reason is kept).
    encoder: EncoderSpec | None = None
    encoder_reason: str = ""
    # Modalities whose embeddings alone do not reproduce HF (its text model takes more of
    # their features: Qwen3-VL's deepstack inputs): precomputed embeddings are refused too.
    embeddings_refused: tuple[str, ...] = ()
    language: LanguageModelSpec = field(default_factory=LanguageModelSpec)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The snapshot ships the processor's code (auto_map), which runs only with consent.
    trust_remote_code: bool = False
    # The processor is called by a method of its own, not __call__ (mmport.analyzers.entryport).
    entry: EntryPointSpec | None = None
    # Where transformers defines config_class ("" for remote code): the model class reads
    # the checkpoint's config with it where vLLM substitutes a config class of its own.
    config_module: str = ""
    # vLLM reads this model_type with a config class of its own (mmport.analyzers.vllmsource).
    vllm_substitutes_config: bool = False
    # The processor class comes from outside transformers and the snapshot (--processor-code):
    # the port asks for it as registered with AutoProcessor, not by its name alone.
    processor_outside: bool = False
    # The model class's encoders written as vLLM code (mmport.analyzers.vllmclass), or
    # None and why the class runs HF's feature paths on the modules it builds.
    vllm_model: VllmModelPlan | None = None
    vllm_model_reason: str = ""

    @property
    def rereads_config(self) -> bool:
        """Whether the model class reads the checkpoint's config again with HF's class: it
        builds HF's modules, and vLLM hands it a config class of its own, not transformers'."""
        return bool(
            self.encoder and self.config_module and self.vllm_substitutes_config
        )

    @property
    def edge_merges(self) -> tuple[EdgeMerges, ...]:
        """Every modality's merges across item edges: the port merges at all items' edges when any."""
        return tuple(m.edge_merges for m in self.modalities if m.edge_merges)

    @property
    def image(self) -> ModalitySpec | None:
        """The image side, if the processor has one."""
        return next((m for m in self.modalities if m.modality == "image"), None)

    @property
    def prompt(self) -> PromptUpdateSpec:
        """The prompt-level facts (special tokens, a prefix or suffix HF adds): the first modality's."""
        return self.modalities[0].update

    @property
    def media(self) -> tuple[ModalitySpec, ...]:
        """The video and audio sides, in that order."""
        return tuple(m for m in self.modalities if m.modality != "image")

    @property
    def sub_processor_scopes(self) -> tuple[tuple[str, str], ...]:
        """``(attribute, kwargs scope)`` of each HF sub-processor the port's modalities go through.

        HF's processor routes ``images_kwargs`` to its ``image_processor``,
        ``videos_kwargs`` to its ``video_processor`` and ``audio_kwargs`` to its
        ``audio_processor`` or ``feature_extractor`` (whichever it has).
        """
        scopes = {
            "image": (("image_processor", "images_kwargs"),),
            "video": (("video_processor", "videos_kwargs"),),
            "audio": (
                ("audio_processor", "audio_kwargs"),
                ("feature_extractor", "audio_kwargs"),
            ),
        }
        return tuple(pair for m in self.modalities for pair in scopes[m.modality])

    def hook_helpers(self, side: ModalitySpec) -> tuple[HelperFunction, ...]:
        """The helpers ``side``'s output hook needs that no earlier side's code defines.

        Two sides' hooks often call one HF function (a video's and an audio's
        both count audio frames with ``compute_sscp``); the module defines it
        once, where the first of them needs it. Render order: the image
        count's helpers, then each video or audio hook's.
        """
        defined = {
            (h.name, h.code) for h in (self.image.count.helpers if self.image else ())
        }
        for earlier in self.media:
            outputs = earlier.count.outputs
            helpers = outputs.helpers if outputs else ()
            if earlier is side:
                return tuple(h for h in helpers if (h.name, h.code) not in defined)
            defined.update((h.name, h.code) for h in helpers)
        return ()

    @property
    def module_name(self) -> str:
        """The model_type as a Python module name (``blip-2`` → ``blip_2``)."""
        return module_name(self.model_type)

    @property
    def hf_model_name(self) -> str:
        """The name the generated class module gives HF's inner model class.

        HF's own name, unless the generated class has it (an embedding model
        whose architecture is its base model, ``EmbeddingGemma2Model``): then
        imported as ``HF<name>``, so neither shadows the other.
        """
        if self.encoder is None:
            return ""
        name = self.encoder.hf_class
        return f"HF{name}" if name == self.architecture else name

    @property
    def encoder_imports(self) -> tuple[tuple[str, str], ...]:
        """The (module, name) imports the encoder's constructor lines need, HF's model class aliased as used."""
        if self.encoder is None:
            return ()
        alias = self.hf_model_name
        return tuple(
            (
                module,
                f"{name} as {alias}"
                if name == self.encoder.hf_class != alias
                else name,
            )
            for module, name in self.encoder.imports
        )


@dataclass(frozen=True)
class ChatPortSpec:
    """A port of a checkpoint with no processor class whose model's ``chat()`` writes each image out (InternVL2).

    The port ships the custom HF processor such a checkpoint lacks: its tiles
    from transformers' ``tile_processor`` set up with the config's ``tiling``
    (setting → (config.json key, value, source)), its per-item text the
    ``segments`` of ``chat()``, each ``(text, factors)``: written once, or
    ``factors`` times (code: ``self.num_image_token``, the item's tile count).
    """

    model_type: str
    ref: str
    architecture: str
    class_prefix: str
    transformers_version: str
    mmport_version: str
    placeholder: str
    segments: tuple[tuple[str, tuple[str, ...]], ...]
    embed_text: str  # the segment whose positions take the image's features
    item_factor: str  # the name chat() gives an item's tile count
    init_statements: tuple[
        str, ...
    ]  # chat()'s other factors, as the model's __init__ sets them
    init_source: Source
    item_source: Source
    replace_source: Source
    tile_processor: str
    tiling: tuple[tuple[str, str, Any, Source], ...]
    card_source: Source | None
    trust_remote_code: bool = True

    @property
    def module_name(self) -> str:
        """The model_type as a Python module name."""
        return module_name(self.model_type)


def module_name(model_type: str) -> str:
    """A model_type as a Python module name (``blip-2`` → ``blip_2``)."""
    return re.sub(r"\W", "_", model_type)


def _plain(value: Any) -> Any:
    if isinstance(value, Source):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {
            f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json(spec: PortSpec | ChatPortSpec) -> str:
    """The spec as indented JSON; sources appear as ``file:line`` strings."""
    return json.dumps(_plain(spec), indent=2)
