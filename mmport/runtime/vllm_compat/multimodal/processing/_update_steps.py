"""Steps 4-5 of ``apply``: put the updates into the prompt, then check the result.

Kept apart from :mod:`.processor` so that the HF step and the prompt step each
read on their own; :class:`PromptUpdateSteps` is mixed into
``BaseMultiModalProcessor``, and a port may override any of its methods.

The three checks raise ``RuntimeError`` whose first sentence is the one
vLLM 0.33 raises, so that a user sees in ``mmport verify`` what vLLM would
say about the same port; the hint after it is mmport's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

from ..inputs import MultiModalKwargsItems
from ..parse import MultiModalDataItems
from .matching import (
    MultiModalPromptUpdates,
    MultiModalPromptUpdatesApplyResult,
    PlaceholderFeaturesInfo,
    apply_text_updates,
    apply_token_matches_with_placeholders,
    find_mm_placeholders,
    iter_text_matches,
)
from .updates import PromptTargetMatch, ResolvedPromptUpdate

__all__ = [
    "PromptUpdateSteps",
    "check_item_counts",
    "check_placeholder_counts",
    "check_update_counts",
]


def check_item_counts(
    mm_kwargs: Mapping[str, Sized], mm_item_counts: Mapping[str, int]
) -> None:
    """Each modality's HF output must split into one kwargs item per input item."""
    for modality, count in mm_item_counts.items():
        found = len(mm_kwargs.get(modality, []))
        if found != count:
            raise RuntimeError(
                f"Expected there to be {count} {modality} items in keyword arguments corresponding to "
                f"{count} {modality} data items, but only found {found}! Check that `_get_mm_fields_config` "
                "lists every per-item output of the HF processor and splits it into one entry per item."
            )


def check_update_counts(
    mm_updates: Mapping[str, Sized], mm_item_counts: Mapping[str, int]
) -> None:
    """Each input item must have prompt updates (its modality appears in ``_get_prompt_updates``)."""
    for modality, count in mm_item_counts.items():
        found = len(mm_updates.get(modality, []))
        if found != count:
            raise RuntimeError(
                f"Expected there to be {count} prompt updates corresponding to {count} {modality} items, "
                f"but instead found {found} prompt updates! Check that `_get_prompt_updates` returns an "
                f"update for the {modality!r} modality."
            )


def check_placeholder_counts(
    mm_placeholders: Mapping[str, Sized], mm_item_counts: Mapping[str, int]
) -> None:
    """Each input item must leave exactly one placeholder run in the final prompt."""
    for modality, count in mm_item_counts.items():
        found = len(mm_placeholders.get(modality, []))
        if found != count:
            raise RuntimeError(
                f"Expected there to be {count} prompt placeholders corresponding to {count} {modality} "
                f"items, but instead found {found} prompt placeholders! Check that every update writes a "
                "non-empty token sequence that survives re-tokenization of the prompt."
            )


class PromptUpdateSteps:
    """Applying resolved updates to prompt ids and validating the outcome (a mixin).

    Expects ``self.info`` (a ``BaseProcessingInfo``) for the tokenizer.
    """

    info: Any

    def _apply_token_matches_with_placeholders(
        self, token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> tuple[
        list[int],
        MultiModalPromptUpdatesApplyResult,
        Mapping[str, list[PlaceholderFeaturesInfo]],
    ]:
        """Apply updates whose targets match as tokens, recording placeholders."""
        return apply_token_matches_with_placeholders(token_ids, mm_prompt_updates)

    def _iter_text_matches(
        self,
        update: ResolvedPromptUpdate,
        prompt_text: str,
        tokenizer: Any,
        *,
        start_idx: int = 0,
    ) -> Iterator[PromptTargetMatch]:
        """Matches of ``update``'s target in decoded text."""
        return iter_text_matches(update, prompt_text, tokenizer, start_idx=start_idx)

    def _apply_prompt_updates_via_text(
        self,
        token_ids: list[int],
        mm_prompt_updates: MultiModalPromptUpdates,
        *,
        encode_segments_separately: bool = False,
    ) -> tuple[list[int], MultiModalPromptUpdatesApplyResult]:
        """Apply all updates in decoded text, then encode the result again."""
        tokenizer = self.info.get_tokenizer()
        return apply_text_updates(
            token_ids,
            mm_prompt_updates,
            tokenizer,
            encode_segments_separately=encode_segments_separately,
            find_in_text=self._iter_text_matches,
        )

    def _matched_updates_from_result(
        self,
        mm_prompt_updates: MultiModalPromptUpdates,
        match_result: MultiModalPromptUpdatesApplyResult,
    ) -> dict[str, list[Sequence[ResolvedPromptUpdate]]]:
        """The applied alternative of each item; an item with none fails like vLLM's assert."""
        matched: dict[str, list[Sequence[ResolvedPromptUpdate]]] = {}
        for modality, chosen in match_result.items():
            for item_idx, update_idx in enumerate(chosen):
                if update_idx is None:
                    # vLLM asserts here; keep the type and wording a user would see.
                    raise AssertionError(
                        f"Failed to apply prompt replacement for mm_items[{modality!r}][{item_idx}]"
                    )
                matched.setdefault(modality, []).append(
                    [mm_prompt_updates[modality][item_idx][update_idx]]
                )
        return matched

    def _find_mm_placeholders(
        self, new_token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> Mapping[str, list[PlaceholderFeaturesInfo]]:
        """Locate each item's written tokens in the final prompt."""
        return find_mm_placeholders(new_token_ids, mm_prompt_updates)

    def _apply_prompt_updates(
        self, token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
    ) -> tuple[list[int], Mapping[str, list[PlaceholderFeaturesInfo]]]:
        """Token matching first; if any item is left unmatched, redo everything in text."""
        new_ids, result, placeholders = self._apply_token_matches_with_placeholders(
            token_ids, mm_prompt_updates
        )
        if all(index is not None for chosen in result.values() for index in chosen):
            return new_ids, {m: found for m, found in placeholders.items() if found}
        new_ids, result = self._apply_prompt_updates_via_text(
            token_ids, mm_prompt_updates
        )
        return new_ids, self._find_mm_placeholders(
            new_ids, self._matched_updates_from_result(mm_prompt_updates, result)
        )

    def _validate_mm_kwargs(
        self, mm_kwargs: MultiModalKwargsItems, mm_item_counts: Mapping[str, int]
    ) -> None:
        """One kwargs item per data item, per modality (else vLLM's ``RuntimeError``)."""
        check_item_counts(mm_kwargs, mm_item_counts)

    def _validate_mm_updates(
        self, mm_updates: MultiModalPromptUpdates, mm_item_counts: Mapping[str, int]
    ) -> None:
        """Resolved updates for every data item (else vLLM's ``RuntimeError``)."""
        check_update_counts(mm_updates, mm_item_counts)

    def _validate_mm_placeholders(
        self,
        mm_placeholders: Mapping[str, list[PlaceholderFeaturesInfo]],
        mm_item_counts: Mapping[str, int],
    ) -> None:
        """One placeholder per data item (else vLLM's ``RuntimeError``)."""
        check_placeholder_counts(mm_placeholders, mm_item_counts)

    def _maybe_apply_prompt_updates(
        self, mm_items: MultiModalDataItems, mm_res: Any
    ) -> tuple[list[int], Mapping[str, list[PlaceholderFeaturesInfo]]]:
        """Check counts, apply the updates, check the placeholders."""
        counts = mm_items.get_all_counts()
        self._validate_mm_kwargs(mm_res.kwargs, counts)
        self._validate_mm_updates(mm_res.prompt_updates, counts)
        prompt_ids, placeholders = self._apply_prompt_updates(
            mm_res.prompt_ids, mm_res.prompt_updates
        )
        self._validate_mm_placeholders(placeholders, counts)
        return prompt_ids, placeholders
