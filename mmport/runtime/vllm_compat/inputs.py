"""Prompt-side data types of vLLM 0.33 (``vllm.inputs``), as ports use them.

``MultiModalDataDict`` is what a user (or a dummy-inputs builder) hands in:
one entry per modality, each a single item or a list of items.
``MultiModalInput`` is what ``BaseMultiModalProcessor.apply`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    NotRequired,
    TypeAlias,
    TypedDict,
    TypeVar,
)

if TYPE_CHECKING:
    from .multimodal.inputs import MultiModalKwargsItems, PlaceholderRange

__all__ = [
    "ModalityData",
    "MultiModalDataDict",
    "MultiModalHashes",
    "MultiModalInput",
    "MultiModalPlaceholders",
    "MultiModalUUIDDict",
    "mm_input",
]

_T = TypeVar("_T")

ModalityData: TypeAlias = _T | list[_T | None] | None
"""One item, or a list of items, of a single modality."""

MultiModalDataDict: TypeAlias = Mapping[str, ModalityData[Any]]
"""Multi-modal data keyed by modality (``"image"``, ``"video"``, ``"audio"``...)."""

MultiModalUUIDDict: TypeAlias = Mapping[str, Sequence[str | None] | str]
"""Caller-chosen identifiers for items, keyed by modality."""

MultiModalHashes: TypeAlias = Mapping[str, list[str]]
"""One identity hash per item, keyed by modality."""

MultiModalPlaceholders: TypeAlias = Mapping[str, Sequence["PlaceholderRange"]]
"""Where each item's placeholder tokens sit in the prompt, keyed by modality."""


class MultiModalInput(TypedDict):
    """The processed prompt handed to the engine: token ids plus per-item data."""

    type: Literal["multimodal"]
    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    mm_kwargs: MultiModalKwargsItems
    mm_hashes: MultiModalHashes
    mm_placeholders: MultiModalPlaceholders
    cache_salt: NotRequired[str]


def mm_input(
    prompt_token_ids: list[int],
    mm_kwargs: MultiModalKwargsItems,
    mm_hashes: MultiModalHashes,
    mm_placeholders: MultiModalPlaceholders,
    *,
    prompt: str | None = None,
    cache_salt: str | None = None,
) -> MultiModalInput:
    """Assemble a :class:`MultiModalInput`, leaving unset optional keys out."""
    result = MultiModalInput(
        type="multimodal",
        prompt_token_ids=prompt_token_ids,
        mm_kwargs=mm_kwargs,
        mm_hashes=mm_hashes,
        mm_placeholders=mm_placeholders,
    )
    if prompt is not None:
        result["prompt"] = prompt
    if cache_salt is not None:
        result["cache_salt"] = cache_salt
    return result
