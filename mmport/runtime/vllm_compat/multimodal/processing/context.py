"""What a processing port reads about its model (``ctx``) and the info base class.

:class:`InputProcessingContext` bundles the model config and tokenizer and
builds the HF processor; :class:`BaseProcessingInfo` is the port's view of
it (``self.info.get_hf_processor()``, ``get_supported_mm_limits()`` ...).
In the bundled runtime a context comes from a snapshot directory::

    ctx = InputProcessingContext.from_directory("/path/to/snapshot")
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from mmport.errors import FOREIGN_ERRORS

from ...config.model import ModelConfig
from ...config.multimodal import MultiModalConfig
from ...exceptions import VLLMValidationError
from ...renderers import TokenizeParams
from ..parse import EmbeddingItems, MultiModalDataItems, MultiModalDataParser

__all__ = ["BaseProcessingInfo", "InputProcessingContext", "TimingContext"]

_PATCH_LOCK = threading.Lock()
# The nested kwarg scopes HF processors accept beside the flat namespace.
_KWARG_SCOPES = ("text_kwargs", "images_kwargs", "videos_kwargs", "audio_kwargs")


def _call_kwarg_names(processor: Any) -> set[str]:
    """Every kwarg name the processor's typed call kwargs declare, scopes included (vLLM's dynamic kwargs)."""
    import typing

    names: set[str] = set()
    try:
        hints = typing.get_type_hints(processor.valid_processor_kwargs)
    except FOREIGN_ERRORS:  # an annotation that does not resolve: no kwargs declared
        return names
    for scope in _KWARG_SCOPES:
        for base in reversed(getattr(hints.get(scope), "__mro__", ())):
            names.update(getattr(base, "__annotations__", {}))
    return names


@dataclass
class TimingContext:
    """Seconds spent per processing stage; ``record`` is a no-op when disabled."""

    enabled: bool = True
    stage_secs: dict[str, float] = field(default_factory=dict)

    @property
    def total_secs(self) -> float:
        """Seconds over all stages."""
        return sum(self.stage_secs.values())

    @contextmanager
    def record(self, stage: str) -> Iterator[None]:
        """Add the time spent in the block to ``stage``."""
        if not self.enabled:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_secs[stage] = (
                self.stage_secs.get(stage, 0.0) + time.perf_counter() - start
            )

    def get_stats_dict(self) -> dict[str, float]:
        """``{"<stage>_secs": seconds, ..., "preprocessor_total_secs": total}``."""
        return {
            **{f"{k}_secs": v for k, v in self.stage_secs.items()},
            "preprocessor_total_secs": self.total_secs,
        }


def _freeze(value: Any) -> Any:
    """A hashable stand-in for kwargs values, to key the processor cache."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    hash(value)  # unhashable values raise TypeError: the caller skips the cache
    return value


def _accepted_kwargs(
    fn: Callable[..., Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The subset of ``kwargs`` that ``fn`` accepts by keyword (all of them with ``**kwargs``)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {
        p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return {k: v for k, v in kwargs.items() if k in names}


@contextmanager
def _tokenizer_given(tokenizer: Any) -> Iterator[None]:
    """Inside the block, HF processors loaded with ``tokenizer=`` do not load another.

    ``ProcessorMixin.from_pretrained`` loads the checkpoint's tokenizer and
    then replaces it with the ``tokenizer`` keyword (vLLM passes its own), so
    the load is wasted: for a vocabulary with many added tokens it costs more
    than a processor call. Where the processor's constructor takes
    ``tokenizer``, the primary tokenizer "loaded" here is the given one; the
    processor is the same object it would have been. Transformers releases
    without this hook, and classes that override it, load as before.
    """
    from transformers import ProcessorMixin

    original = ProcessorMixin.__dict__.get("_load_tokenizer_from_pretrained")
    if not isinstance(original, classmethod):
        yield
        return

    def load(cls: type[Any], sub_processor_type: str, *args: Any, **kwargs: Any) -> Any:
        if (
            sub_processor_type == "tokenizer"
            and "tokenizer" in inspect.signature(cls.__init__).parameters
        ):
            return tokenizer
        return original.__func__(cls, sub_processor_type, *args, **kwargs)

    patched: Any = ProcessorMixin  # its classmethod is swapped for the block, not called through this name
    with _PATCH_LOCK:
        patched._load_tokenizer_from_pretrained = classmethod(load)
        try:
            yield
        finally:
            patched._load_tokenizer_from_pretrained = original


def _to_model_dtype(value: Any, dtype: torch.dtype | None) -> Any:
    """Cast floating tensors (at any depth) to ``dtype``, as vLLM does to HF output."""
    if isinstance(value, torch.Tensor):
        value = (
            value.to(dtype=dtype)
            if dtype is not None and value.is_floating_point()
            else value
        )
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_model_dtype(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to_model_dtype(v, dtype) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class InputProcessingContext:
    """The model config and tokenizer, plus a per-kwargs cache of HF processors."""

    model_config: ModelConfig
    tokenizer: Any
    _processors: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_directory(
        cls,
        path: str | Path,
        *,
        dtype: str = "float32",
        trust_remote_code: bool = False,
    ) -> InputProcessingContext:
        """Config via ``AutoConfig``, tokenizer via ``AutoTokenizer``, from a local snapshot."""
        from transformers import AutoTokenizer

        model_config = ModelConfig.from_directory(
            path, dtype=dtype, trust_remote_code=trust_remote_code
        )
        # vLLM loads generation tokenizers to truncate from the left.
        tokenizer = AutoTokenizer.from_pretrained(
            path, truncation_side="left", trust_remote_code=trust_remote_code
        )
        return cls(model_config, tokenizer)

    def get_tokenizer(self) -> Any:
        """The tokenizer; a ``ValueError`` when the model runs without one."""
        if self.tokenizer is None:
            raise ValueError(
                "You cannot pass text prompts when `skip_tokenizer_init=True`"
            )
        return self.tokenizer

    def get_hf_config(self, typ: type[Any] | tuple[type, ...] | None = None, /) -> Any:
        """The HF config, checked to be an instance of ``typ`` (``TypeError`` if not)."""
        if typ is None:
            from transformers import PreTrainedConfig

            typ = PreTrainedConfig
        hf_config = self.model_config.hf_config
        if not isinstance(hf_config, typ):
            raise TypeError(
                f"Invalid type of HuggingFace config. Expected type: {typ}, but found type: {type(hf_config)}"
            )
        return hf_config

    def get_mm_config(self) -> MultiModalConfig:
        """The multi-modal config; a ``RuntimeError`` for a text-only model."""
        if self.model_config.multimodal_config is None:
            raise RuntimeError("Not a multimodal model")
        return self.model_config.multimodal_config

    def get_merged_mm_kwargs(self, kwargs: Mapping[str, object]) -> dict[str, Any]:
        """Configured processor kwargs updated by ``kwargs``.

        A flat key that also sits inside a scope (``images_kwargs`` ...) is
        dropped from the flat namespace, so the scoped value wins.
        """
        merged = self.get_mm_config().merge_mm_processor_kwargs(kwargs)
        scoped = {
            k
            for s in _KWARG_SCOPES
            if isinstance(scope := merged.get(s), Mapping)
            for k in scope
        }
        return {
            k: v for k, v in merged.items() if k in _KWARG_SCOPES or k not in scoped
        }

    def get_hf_processor(
        self, typ: type[Any] | tuple[type, ...] | None = None, /, **kwargs: object
    ) -> Any:
        """The HF processor built with ``kwargs`` (built once per distinct kwargs).

        With a concrete processor class ``typ`` it is built by that class,
        else by ``AutoProcessor``; either way it must be an instance of ``typ``.
        """
        from transformers import AutoProcessor, ProcessorMixin

        typ = ProcessorMixin if typ is None else typ
        merged = self.get_merged_mm_kwargs(kwargs)
        merged.pop("tokenizer", None)
        use_auto = (
            isinstance(typ, tuple)
            or typ is ProcessorMixin
            or not hasattr(typ, "from_pretrained")
        )
        factory = (
            AutoProcessor.from_pretrained
            if use_auto or isinstance(typ, tuple)
            else typ.from_pretrained
        )
        if merged:
            # As vLLM: kwargs HF takes per call are left to the call, not built in.
            dynamic = _call_kwarg_names(self.get_hf_processor(typ))
            merged = {k: v for k, v in merged.items() if k not in dynamic}
        try:
            key: Any = (factory, _freeze(merged))
        except TypeError:
            key = None
        processor = self._processors.get(key) if key is not None else None
        if processor is None:
            with _tokenizer_given(self.tokenizer):
                processor = factory(
                    self.model_config.model,
                    tokenizer=self.tokenizer,
                    trust_remote_code=self.model_config.trust_remote_code,
                    **merged,
                )
            if key is not None:
                self._processors[key] = processor
        if not isinstance(processor, typ):
            raise TypeError(
                f"Invalid type of HuggingFace processor. Expected type: {typ}, but found type: {type(processor)}"
            )
        return processor

    def call_hf_processor(
        self,
        hf_processor: Callable[..., Any],
        data: Mapping[str, object],
        kwargs: Mapping[str, object] = {},
    ) -> Any:
        """Call ``hf_processor(**data, **kwargs)`` with ``return_tensors="pt"``.

        Kwargs the processor cannot take are dropped; float outputs are cast
        to the model dtype; failures become a ``ValueError`` naming the call.
        """
        from transformers import BatchFeature

        allowed = _accepted_kwargs(hf_processor, self.get_merged_mm_kwargs(kwargs))
        allowed.setdefault("return_tensors", "pt")
        try:
            output = hf_processor(**data, **allowed)
        except FOREIGN_ERRORS as exc:
            raise ValueError(
                f"Failed to apply {type(hf_processor).__name__} on data={data} with kwargs={allowed}"
            ) from exc
        if isinstance(output, BatchFeature):
            return BatchFeature(
                _to_model_dtype(dict(output.data), self.model_config.dtype)
            )
        return _to_model_dtype(output, self.model_config.dtype)


class BaseProcessingInfo:
    """A port's source of facts about its model: config, processor, limits."""

    def __init__(self, ctx: InputProcessingContext) -> None:
        self.ctx = ctx

    @property
    def model_id(self) -> str:
        """The model's name or snapshot path."""
        return self.ctx.model_config.model

    def get_tokenizer(self) -> Any:
        """The tokenizer."""
        return self.ctx.get_tokenizer()

    def get_hf_config(self) -> Any:
        """The HF config (ports usually narrow the type)."""
        return self.ctx.get_hf_config()

    def get_hf_processor(self, **kwargs: object) -> Any:
        """The HF processor built with ``kwargs``."""
        return self.ctx.get_hf_processor(**kwargs)

    def get_default_tok_params(self) -> TokenizeParams:
        """How text prompts are tokenized: up to the context length, with special tokens."""
        encoder_config = self.ctx.model_config.encoder_config or {}
        return TokenizeParams(
            max_total_tokens=self.ctx.model_config.max_model_len,
            do_lower_case=encoder_config.get("do_lower_case", False),
            add_special_tokens=True,
        )

    @cached_property
    def default_tok_params(self) -> TokenizeParams:
        """:meth:`get_default_tok_params`, computed once."""
        return self.get_default_tok_params()

    @property
    def allow_missing_mm_embeddings(self) -> bool:
        """Whether precomputed embedding tensors may be left out of a request."""
        return self.ctx.get_mm_config().allow_missing_mm_embeddings

    def _get_expected_hidden_size(self) -> int | None:
        """The hidden size embedding inputs must have, when the model accepts them."""
        if not self.ctx.get_mm_config().enable_mm_embeds:
            return None
        return self.ctx.model_config.get_inputs_embeds_size()

    def get_data_parser(self) -> MultiModalDataParser:
        """The parser for raw multi-modal data (override to add modalities or options)."""
        return MultiModalDataParser(
            expected_hidden_size=self._get_expected_hidden_size(),
            allow_missing_mm_embeddings=self.allow_missing_mm_embeddings,
        )

    @cached_property
    def data_parser(self) -> MultiModalDataParser:
        """:meth:`get_data_parser`, computed once."""
        return self.get_data_parser()

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        """Most items per modality a prompt may hold (``None``: unlimited). Ports must override."""
        raise NotImplementedError

    @cached_property
    def supported_mm_limits(self) -> Mapping[str, int | None]:
        """:meth:`get_supported_mm_limits`, computed once."""
        return self.get_supported_mm_limits()

    @cached_property
    def allowed_mm_limits(self) -> Mapping[str, int]:
        """The supported limits, capped by the configured per-prompt limits."""
        config = self.ctx.get_mm_config()
        return {
            modality: config.get_limit_per_prompt(modality)
            if limit is None
            else min(config.get_limit_per_prompt(modality), limit)
            for modality, limit in self.supported_mm_limits.items()
        }

    def validate_num_items(self, modality: str, num_items: int) -> None:
        """Raise ``VLLMValidationError`` when a prompt has too many items of ``modality``."""
        supported = self.supported_mm_limits.get(modality, 0)
        allowed = self.allowed_mm_limits.get(modality, 0)
        supported = allowed if supported is None else supported
        limit = min(supported, allowed)
        if num_items > limit:
            message = f"At most {limit} {modality}(s) may be provided in one prompt."
            if num_items <= supported:
                message += " Set `--limit-mm-per-prompt` to increase this limit."
            raise VLLMValidationError(message, parameter=modality)

    def parse_mm_data(
        self, mm_data: Mapping[str, Any], *, validate: bool = True
    ) -> MultiModalDataItems:
        """Parse raw data into items; with ``validate``, check item counts against limits."""
        items = self.data_parser.parse_mm_data(mm_data)
        if validate:
            config = self.ctx.get_mm_config()
            for modality, modality_items in items.items():
                if isinstance(modality_items, EmbeddingItems):
                    if not config.enable_mm_embeds:
                        raise ValueError(
                            f"You must set `--enable-mm-embeds` to input `{modality}_embeds`"
                        )
                    if config.get_limit_per_prompt(modality) == 0:
                        continue
                self.validate_num_items(modality, len(modality_items))
        return items

    def get_mm_max_tokens_per_item(
        self, seq_len: int, mm_counts: Mapping[str, int]
    ) -> Mapping[str, int] | None:
        """Precomputed most tokens per item, or ``None`` to measure with dummy inputs."""
        return None
