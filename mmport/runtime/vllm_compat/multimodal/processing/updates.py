"""Prompt updates: how a port says where each item's placeholder tokens go.

A port returns updates from ``_get_prompt_updates``; the processor resolves
each one per item (``update.resolve(item_idx)``) and applies it to the
prompt's token ids::

    # "<image>" (id 32000) becomes 576 copies of itself, for every image
    PromptReplacement("image", target=[32000], replacement=[32000] * 576)

    # 256 image tokens go right after BOS; the wrapping tokens get no embedding
    PromptInsertion(
        "image",
        target=PromptIndexTargets.prefix([bos_id]),
        insertion=PromptUpdateDetails.select_token_id([boi] + [img] * 256 + [eoi], img),
    )

Targets and contents are token ids, or callables of the item index that
return them; a target may also be a :class:`PromptIndexTargets` position.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple, Protocol, TypeAlias

import torch

__all__ = [
    "PromptIndex",
    "PromptIndexTargets",
    "PromptInsertion",
    "PromptReplacement",
    "PromptTargetMatch",
    "PromptUpdate",
    "PromptUpdateDetails",
    "ResolvedPromptUpdate",
    "UpdateMode",
    "iter_token_matches",
]


class _TokenIndexFn(Protocol):
    def __call__(self, prompt: list[int], start_idx: int = 0) -> int | None: ...


class _TextIndexFn(Protocol):
    def __call__(
        self, tokenizer: Any, prompt: str, start_idx: int = 0
    ) -> int | None: ...


@dataclass
class PromptIndex:
    """A position in the prompt, found in token space or (for the fallback) in text."""

    get_match_index: _TokenIndexFn
    get_text_match_index: _TextIndexFn


class PromptIndexTargets:
    """Targets that name a position instead of a token sequence."""

    @staticmethod
    def start() -> PromptIndex:
        """Before the first token; matches even an empty prompt.

        Like vLLM's, it answers 0 wherever the search resumes from.
        """
        return PromptIndex(
            lambda prompt, start_idx=0: 0, lambda tokenizer, prompt, start_idx=0: 0
        )

    @staticmethod
    def prefix(seq: list[int]) -> PromptIndex:
        """Right after ``seq`` when the prompt starts with it; no match otherwise."""

        def in_tokens(prompt: list[int], start_idx: int = 0) -> int | None:
            if start_idx != 0:
                return None
            return len(seq) if prompt[: len(seq)] == seq else None

        def in_text(tokenizer: Any, prompt: str, start_idx: int = 0) -> int | None:
            if start_idx != 0:
                return None
            text = tokenizer.decode(seq)
            return len(text) if prompt[: len(text)] == text else None

        return PromptIndex(in_tokens, in_text)

    @staticmethod
    def end() -> PromptIndex:
        """After the last token; matches even an empty prompt."""
        return PromptIndex(
            lambda prompt, start_idx=0: len(prompt),
            lambda tokenizer, prompt, start_idx=0: len(prompt),
        )


UpdateTarget: TypeAlias = list[int] | PromptIndex
PromptUpdateTarget: TypeAlias = Callable[[int], UpdateTarget] | UpdateTarget


@dataclass
class PromptUpdateDetails:
    """The tokens an update writes (``full``) and which of them get embeddings.

    ``is_embed(full)`` returns a bool tensor over ``full``; ``None`` means all
    positions receive an embedding.
    """

    full: list[int]
    is_embed: Callable[[list[int]], torch.Tensor] | None = None

    @staticmethod
    def from_seq(seq: list[int]) -> PromptUpdateDetails:
        """Every token of ``seq`` receives an embedding."""
        return PromptUpdateDetails(full=seq)

    @staticmethod
    def select_token_id(seq: list[int], embed_token_id: int) -> PromptUpdateDetails:
        """Only the occurrences of ``embed_token_id`` in ``seq`` receive embeddings."""
        return PromptUpdateDetails(
            full=seq, is_embed=lambda full: torch.tensor(full) == embed_token_id
        )

    @staticmethod
    def select_token_ids(
        seq: list[int], embed_token_ids: list[int]
    ) -> PromptUpdateDetails:
        """Only tokens of ``seq`` that are in ``embed_token_ids`` receive embeddings."""
        return PromptUpdateDetails(
            full=seq,
            is_embed=lambda full: torch.isin(
                torch.tensor(full), torch.tensor(embed_token_ids)
            ),
        )


PromptUpdateInfo: TypeAlias = list[int] | PromptUpdateDetails
PromptUpdateContent: TypeAlias = Callable[[int], PromptUpdateInfo] | PromptUpdateInfo


class UpdateMode(str, Enum):  # noqa: UP042 - same str() as vLLM's
    """Whether an update keeps its target (insert after it) or overwrites it."""

    INSERT = "insert"
    REPLACE = "replace"


class PromptTargetMatch(NamedTuple):
    """Where a target was found: ``[start_idx, end_idx)`` (empty for positions)."""

    start_idx: int
    end_idx: int


def iter_token_matches(
    token_ids: list[int], match_ids: list[int], *, start_idx: int = 0
) -> Iterator[PromptTargetMatch]:
    """Non-overlapping occurrences of ``match_ids`` in ``token_ids``, left to right.

    An empty ``match_ids`` matches nowhere.
    """
    if start_idx < 0:
        raise ValueError("start_idx must be non-negative")
    if not match_ids:
        return
    width = len(match_ids)
    last_start = len(token_ids) - width
    first = match_ids[0]
    while start_idx <= last_start:
        try:
            # list.index scans in C; only candidates are compared in full.
            start_idx = token_ids.index(first, start_idx, last_start + 1)
        except ValueError:
            return
        if token_ids[start_idx : start_idx + width] == match_ids:
            yield PromptTargetMatch(start_idx, start_idx + width)
            start_idx += width
        else:
            start_idx += 1


@dataclass
class PromptUpdate(ABC):
    """An update for every item of ``modality`` (abstract; see the two subclasses)."""

    modality: str
    target: PromptUpdateTarget

    @property
    @abstractmethod
    def content(self) -> PromptUpdateContent:
        """The tokens this update writes."""

    @property
    @abstractmethod
    def mode(self) -> UpdateMode:
        """Insert after the target, or replace it."""

    def resolve(self, item_idx: int) -> ResolvedPromptUpdate:
        """This update for item ``item_idx``, with callables evaluated."""
        target = self.target(item_idx) if callable(self.target) else self.target
        content = self.content(item_idx) if callable(self.content) else self.content
        if not isinstance(content, PromptUpdateDetails):
            content = PromptUpdateDetails.from_seq(content)
        return ResolvedPromptUpdate(self.modality, item_idx, self.mode, target, content)


@dataclass
class PromptInsertion(PromptUpdate):
    """Insert ``insertion`` right after each match of ``target``."""

    insertion: PromptUpdateContent = field(repr=False)

    @property
    def content(self) -> PromptUpdateContent:
        return self.insertion

    @property
    def mode(self) -> UpdateMode:
        return UpdateMode.INSERT


@dataclass
class PromptReplacement(PromptUpdate):
    """Replace a match of ``target`` with ``replacement``."""

    replacement: PromptUpdateContent = field(repr=False)

    @property
    def content(self) -> PromptUpdateContent:
        return self.replacement

    @property
    def mode(self) -> UpdateMode:
        return UpdateMode.REPLACE


@dataclass(frozen=True)
class ResolvedPromptUpdate:
    """A :class:`PromptUpdate` bound to one item."""

    modality: str
    item_idx: int
    mode: UpdateMode
    target: UpdateTarget
    content: PromptUpdateDetails = field(repr=False)

    def iter_token_matches(
        self, prompt: list[int], *, start_idx: int = 0
    ) -> Iterator[PromptTargetMatch]:
        """Each match of the target in ``prompt`` from ``start_idx`` on."""
        if isinstance(self.target, PromptIndex):
            index = self.target.get_match_index(prompt, start_idx)
            if index is not None:
                yield PromptTargetMatch(index, index)
            return
        yield from iter_token_matches(prompt, self.target, start_idx=start_idx)

    def with_target(self, target: UpdateTarget) -> ResolvedPromptUpdate:
        """A copy with another target."""
        return replace(self, target=target)

    def with_content(self, content: PromptUpdateInfo) -> ResolvedPromptUpdate:
        """A copy with other content."""
        if not isinstance(content, PromptUpdateDetails):
            content = PromptUpdateDetails.from_seq(content)
        return replace(self, content=content)
