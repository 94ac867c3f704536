"""The processor base class a port subclasses (``BaseMultiModalProcessor``).

``apply`` runs the vLLM 0.33 pipeline:

1. the prompt is token ids (``__call__`` tokenizes a text prompt first) and
   goes through ``_postprocess_prompt``;
2. the HF processor sees the multi-modal data only (plus ``_get_hf_mm_text``
   when a port needs text beside the data);
3. its output splits into per-item kwargs by ``_get_mm_fields_config``;
4. the port's ``_get_prompt_updates`` are applied to the token ids — token
   matches first, and when some target is not found as tokens, all of them
   again in decoded text, which is then re-encoded;
5. the placeholders found must number one per item, per modality.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from ...config.multimodal import MultiModalDummyOptions
from ...inputs import MultiModalInput, mm_input
from ..inputs import MultiModalFieldConfig, MultiModalKwargsItems
from ..parse import MultiModalDataItems
from ._update_steps import PromptUpdateSteps
from .context import BaseProcessingInfo, TimingContext
from .dummy_inputs import BaseDummyInputsBuilder
from .inputs import ProcessorInputs
from .matching import (
    MultiModalPromptUpdates,
    MultiModalPromptUpdatesApplyResult,
    PlaceholderFeaturesInfo,
)
from .updates import (
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdate,
    PromptUpdateDetails,
    ResolvedPromptUpdate,
)

__all__ = [
    "BaseMultiModalProcessor",
    "HFMultiModalInputs",
    "MultiModalProcessingResult",
    "MultiModalPromptUpdates",
    "MultiModalPromptUpdatesApplyResult",
    "PlaceholderFeaturesInfo",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptUpdate",
    "PromptUpdateDetails",
    "cached_encode",
]

_I = TypeVar("_I", bound=BaseProcessingInfo)


def cached_encode(
    tokenizer: Any,
    text: str,
    *,
    truncation: bool | None = None,
    add_special_tokens: bool = True,
) -> list[int]:
    """``tokenizer.encode`` with vLLM's keyword defaults (no cache in the bundled runtime)."""
    return tokenizer.encode(
        text, truncation=truncation, add_special_tokens=add_special_tokens
    )


class HFMultiModalInputs(NamedTuple):
    """What goes to the HF processor, its kwargs, and what bypasses it."""

    hf_data: dict[str, object]
    hf_kwargs: Mapping[str, object]
    passthrough_data: dict[str, object]


class MultiModalProcessingResult(NamedTuple):
    """The HF step's result: prompt ids, per-item kwargs, hashes and resolved updates."""

    prompt_ids: list[int]
    kwargs: MultiModalKwargsItems
    hashes: Mapping[str, list[str]]
    prompt_updates: MultiModalPromptUpdates


class BaseMultiModalProcessor(PromptUpdateSteps, ABC, Generic[_I]):
    """Turns a prompt and multi-modal data into engine inputs (subclass per model)."""

    requires_tokenizer: ClassVar[bool] = True

    def __init__(self, info: _I, dummy_inputs: BaseDummyInputsBuilder[_I]) -> None:
        if self.requires_tokenizer and info.ctx.tokenizer is None:
            raise ValueError(
                f"{type(self).__name__} requires a tokenizer and cannot be initialized without one."
            )
        self.info = info
        self.dummy_inputs = dummy_inputs
        self.data_parser = info.get_data_parser()

    # -- the port's contract ------------------------------------------------

    @abstractmethod
    def _get_mm_fields_config(
        self, hf_inputs: Any, hf_processor_mm_kwargs: Mapping[str, object]
    ) -> Mapping[str, MultiModalFieldConfig]:
        """For each HF output key to keep, its modality and how it splits into items."""

    @abstractmethod
    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        """The updates that put each item's placeholder tokens into the prompt."""

    # -- entry points ---------------------------------------------------------

    def __call__(
        self,
        prompt: str | list[int],
        mm_items: MultiModalDataItems,
        mm_uuid_items: Mapping[str, Any] | None = None,
        hf_processor_mm_kwargs: Mapping[str, object] | None = None,
        cache: Any = None,
    ) -> MultiModalInput:
        """Tokenize a text prompt with the default parameters, then :meth:`apply`."""
        if isinstance(prompt, str):
            encode_kwargs = self.info.default_tok_params.get_encode_kwargs()
            prompt_ids: list[int] = self.info.get_tokenizer().encode(
                prompt, **encode_kwargs
            )
        else:
            prompt_ids = prompt
        inputs = ProcessorInputs(
            prompt_ids,
            mm_items,
            mm_uuid_items,
            hf_processor_mm_kwargs=hf_processor_mm_kwargs or {},
            cache=cache,
        )
        return self.apply(inputs, TimingContext(enabled=False))

    def apply(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalInput:
        """Process one prompt: HF on the data, prompt updates on the ids, then checks."""
        result = self._cached_apply_hf_processor(inputs, timing_ctx)
        with timing_ctx.record("apply_prompt_updates"):
            prompt_ids, placeholders = self._maybe_apply_prompt_updates(
                inputs.mm_data_items, result
            )
        ranges = {m: [p.to_range() for p in found] for m, found in placeholders.items()}
        return mm_input(prompt_ids, result.kwargs, result.hashes, ranges)

    def get_dummy_inputs(
        self,
        seq_len: int,
        mm_counts: Mapping[str, int],
        mm_options: MultiModalDummyOptions,
    ) -> ProcessorInputs:
        """The profiling inputs: the builder's dummy text, tokenized, and its dummy data."""
        text = self.dummy_inputs.get_dummy_text(mm_counts)
        data = self.dummy_inputs.get_dummy_mm_data(seq_len, mm_counts, mm_options)
        items = self.info.parse_mm_data(data, validate=False)
        tokenizer = self.info.ctx.tokenizer
        prompt = (
            []
            if tokenizer is None
            else cached_encode(tokenizer, text, truncation=False)
        )
        return ProcessorInputs(prompt=prompt, mm_data_items=items)

    def get_dummy_mm_inputs(
        self, mm_counts: Mapping[str, int], **_ignored: Any
    ) -> MultiModalInput:
        """The processed profiling inputs, zero-padded to the context length."""
        model_config = self.info.ctx.model_config
        seq_len = model_config.max_model_len
        options = model_config.get_multimodal_config().limit_per_prompt
        processed = self.apply(
            self.get_dummy_inputs(seq_len, mm_counts, options),
            TimingContext(enabled=False),
        )
        padding = seq_len - len(processed["prompt_token_ids"])
        processed["prompt_token_ids"].extend([0] * max(padding, 0))
        return processed

    # -- HF processor step ----------------------------------------------------

    def _get_hf_mm_text(self, mm_counts: Mapping[str, int]) -> str | None:
        """Text to pass beside the data, for HF processors that insist on it (default: none)."""
        return None

    def _get_hf_mm_inputs(
        self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
    ) -> HFMultiModalInputs:
        """Split parsed items into HF processor data (``images=...``) and passthrough data."""
        hf_data: dict[str, object] = {}
        passthrough: dict[str, object] = {}
        for items in mm_items.values():
            if len(items) == 0:
                continue
            hf_data.update(items.get_processor_data())
            passthrough.update(items.get_passthrough_data())
        if hf_data:
            text = self._get_hf_mm_text(mm_items.get_all_counts())
            if text is not None:
                hf_data = {"text": text, **hf_data}
                # Placeholders must stay aligned, so the dummy text is never cut.
                hf_kwargs = {"truncation": False, **hf_kwargs}
        if "audios" in hf_data:
            # HF processors name the audio argument in the singular.
            hf_data["audio"] = hf_data.pop("audios")
        return HFMultiModalInputs(hf_data, hf_kwargs, passthrough)

    def _call_hf_processor(
        self, hf_data: Mapping[str, object], hf_kwargs: Mapping[str, object]
    ) -> Any:
        """Run the HF processor on the data (override to reshape inputs or outputs)."""
        return self.info.ctx.call_hf_processor(
            self.info.get_hf_processor(**hf_kwargs), hf_data, hf_kwargs
        )

    def _postprocess_hf_mm_data(
        self,
        mm_inputs: Mapping[str, object],
        hf_processor_mm_kwargs: Mapping[str, object],
        processed_data: Any,
    ) -> Any:
        """Adjust the HF output before it is split into items (default: unchanged)."""
        return processed_data

    def _finalize_hf_mm_data(
        self,
        hf_data: Mapping[str, object],
        hf_kwargs: Mapping[str, object],
        passthrough_data: Mapping[str, object],
        processed_data: Any = None,
    ) -> Any:
        """Merge passthrough data into the HF output, then post-process it."""
        if processed_data is None:
            from transformers import BatchFeature

            processed_data = BatchFeature()
        processed_data.update(passthrough_data)
        return self._postprocess_hf_mm_data(hf_data, hf_kwargs, processed_data)

    def _apply_hf_processor_main(
        self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]
    ) -> Any:
        """The HF processor's output for ``mm_items`` (not called when there is no data)."""
        hf_data, hf_kwargs, passthrough = self._get_hf_mm_inputs(mm_items, hf_kwargs)
        processed = self._call_hf_processor(hf_data, hf_kwargs) if hf_data else None
        return self._finalize_hf_mm_data(hf_data, hf_kwargs, passthrough, processed)

    def _postprocess_prompt(self, prompt: list[int]) -> list[int]:
        """Adjust prompt ids before updates are located (default: unchanged)."""
        return prompt

    def _bind_and_group_updates(
        self, prompt_updates: Sequence[PromptUpdate], mm_item_counts: Mapping[str, int]
    ) -> MultiModalPromptUpdates:
        """Resolve every update for every item: ``{modality: [[updates of item 0], ...]}``."""
        by_modality: dict[str, list[PromptUpdate]] = {}
        for update in prompt_updates:
            by_modality.setdefault(update.modality, []).append(update)
        return {
            modality: [
                [u.resolve(i) for u in updates]
                for i in range(mm_item_counts.get(modality, 0))
            ]
            for modality, updates in by_modality.items()
        }

    def _get_mm_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> MultiModalPromptUpdates:
        """The port's updates, resolved per item."""
        updates = self._get_prompt_updates(
            mm_items=mm_items,
            hf_processor_mm_kwargs=hf_processor_mm_kwargs,
            out_mm_kwargs=out_mm_kwargs,
        )
        return self._bind_and_group_updates(updates, mm_items.get_all_counts())

    def _get_mm_hashes(self, inputs: ProcessorInputs) -> Mapping[str, list[str]]:
        """One identity hash per item."""
        return inputs.get_mm_hashes(self.info.model_id)

    def _apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """Run HF on the data, split the output into items and resolve the updates."""
        with timing_ctx.record("apply_hf_processor"):
            processed = self._apply_hf_processor_main(
                inputs.mm_data_items, inputs.hf_processor_mm_kwargs
            )
        fields = self._get_mm_fields_config(processed, inputs.hf_processor_mm_kwargs)
        mm_kwargs = MultiModalKwargsItems.from_hf_inputs(processed, fields)
        with timing_ctx.record("get_mm_hashes"):
            hashes = self._get_mm_hashes(inputs)
        updates = self._get_mm_prompt_updates(
            inputs.mm_data_items, inputs.hf_processor_mm_kwargs, mm_kwargs
        )
        return MultiModalProcessingResult(
            self._postprocess_prompt(inputs.prompt), mm_kwargs, hashes, updates
        )

    def _cached_apply_hf_processor(
        self, inputs: ProcessorInputs, timing_ctx: TimingContext
    ) -> MultiModalProcessingResult:
        """Same as :meth:`_apply_hf_processor`: the bundled runtime has no processor cache."""
        return self._apply_hf_processor(inputs, timing_ctx)

    def _recompute_cached_prompt_update(
        self, cached_update: ResolvedPromptUpdate, new_item_idx: int
    ) -> ResolvedPromptUpdate:
        """A cached item's update, re-bound to its index in the current prompt."""
        return replace(cached_update, item_idx=new_item_idx)
