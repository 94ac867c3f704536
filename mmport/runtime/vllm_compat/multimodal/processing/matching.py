"""Applying resolved prompt updates to a prompt, and finding placeholders again.

Planning (:func:`plan_prompt_updates`) decides which update applies where;
it works the same on token ids and on decoded text, given a function that
finds an update's target. The rules, which follow vLLM 0.33:

1. Items are numbered in priority order: modalities in the order their
   updates were returned, then items in order. Items whose alternatives have
   identical ``(mode, target)`` lists share a queue, consumed in order.
2. Each round, every queue's head item takes its first alternative that
   matches at or after the cursor. The matching head with the best priority
   sets the round's mode; other heads retry restricted to that mode.
3. An insertion (or a replacement of an empty range) applies to *every* item
   left in its queue, all at the same match. A non-empty replacement applies
   only to the single item with the earliest match (ties: best priority).
4. The round's updates are ordered by (match, priority); the cursor moves to
   the end of the last one. Planning stops when no head matches.

Example: prompt ``[BOS, IMG, x, IMG]``, two images, each ``IMG`` replaced by
``[IMG] * 3``: round 1 replaces at 1, round 2 at 3, giving
``[BOS, IMG, IMG, IMG, x, IMG, IMG, IMG]`` with placeholders at 1 and 5.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import torch

from ..inputs import PlaceholderRange
from .updates import (
    PromptIndex,
    PromptTargetMatch,
    PromptUpdateDetails,
    ResolvedPromptUpdate,
    UpdateMode,
)

__all__ = [
    "MultiModalPromptUpdates",
    "MultiModalPromptUpdatesApplyResult",
    "PlaceholderFeaturesInfo",
    "apply_text_updates",
    "apply_token_matches",
    "apply_token_matches_with_placeholders",
    "find_mm_placeholders",
    "iter_text_matches",
    "plan_prompt_updates",
]

MultiModalPromptUpdates: TypeAlias = Mapping[
    str, Sequence[Sequence[ResolvedPromptUpdate]]
]
"""Per modality, per item: the alternative updates for that item, in order."""

MultiModalPromptUpdatesApplyResult: TypeAlias = Mapping[str, list[int | None]]
"""Per modality, per item: the index of the alternative applied, or ``None``."""

FindMatches: TypeAlias = Callable[
    [ResolvedPromptUpdate, int], Iterator[PromptTargetMatch]
]
_Queue: TypeAlias = deque[tuple[int, Sequence[ResolvedPromptUpdate]]]


@dataclass
class PlaceholderFeaturesInfo:
    """The tokens one item's update wrote, where they start, and their embedding mask."""

    modality: str
    item_idx: int
    start_idx: int
    tokens: list[int]
    is_embed: torch.Tensor | None

    @property
    def length(self) -> int:
        """How many prompt positions the placeholder spans."""
        return len(self.tokens)

    def to_range(self) -> PlaceholderRange:
        """As the :class:`PlaceholderRange` handed to the engine."""
        return PlaceholderRange(
            offset=self.start_idx, length=self.length, is_embed=self.is_embed
        )


class _Planned(NamedTuple):
    priority: int
    update: ResolvedPromptUpdate
    update_idx: int
    match: PromptTargetMatch


def _embed_mask(content: PromptUpdateDetails) -> torch.Tensor | None:
    return None if content.is_embed is None else content.is_embed(content.full)


def _target_key(target: Any) -> tuple[str, object]:
    # Position targets compare by identity: two calls of start() are two targets.
    return (
        ("index", id(target))
        if isinstance(target, PromptIndex)
        else ("tokens", tuple(target))
    )


def _build_queues(mm_prompt_updates: MultiModalPromptUpdates) -> list[_Queue]:
    queues: dict[tuple[object, ...], _Queue] = {}
    priority = 0
    for items in mm_prompt_updates.values():
        for alternatives in items:
            signature = tuple((u.mode, _target_key(u.target)) for u in alternatives)
            queues.setdefault(signature, deque()).append((priority, alternatives))
            priority += 1
    return list(queues.values())


def _head_match(
    queue: _Queue, find: FindMatches, cursor: int, mode: UpdateMode | None = None
) -> tuple[PromptTargetMatch, int] | None:
    """The first alternative of the queue's head item that matches from ``cursor``."""
    for index, update in enumerate(queue[0][1]):
        if mode is None or update.mode == mode:
            match = next(find(update, cursor), None)
            if match is not None:
                return match, index
    return None


def _take_round(
    matches: list[tuple[_Queue, PromptTargetMatch, int]], mode: UpdateMode
) -> list[_Planned]:
    """Pop the items this round applies (rule 3 of the module docstring)."""
    taken: list[_Planned] = []
    replacements = []
    for queue, match, index in matches:
        if mode is UpdateMode.REPLACE and match.start_idx != match.end_idx:
            replacements.append((queue, match, index))
            continue
        while queue:
            priority, alternatives = queue.popleft()
            taken.append(_Planned(priority, alternatives[index], index, match))
    if replacements:
        queue, match, index = min(replacements, key=lambda r: (r[1], r[0][0][0]))
        priority, alternatives = queue.popleft()
        taken.append(_Planned(priority, alternatives[index], index, match))
    return taken


def plan_prompt_updates(
    mm_prompt_updates: MultiModalPromptUpdates, find: FindMatches
) -> tuple[list[_Planned], dict[str, list[int | None]]]:
    """Decide which alternative of which item applies at which match, in prompt order."""
    queues = _build_queues(mm_prompt_updates)
    result: dict[str, list[int | None]] = {
        m: [None] * len(items) for m, items in mm_prompt_updates.items()
    }
    planned: list[_Planned] = []
    cursor = 0
    while queues:
        heads = [
            (q, *found)
            for q in queues
            if (found := _head_match(q, find, cursor)) is not None
        ]
        if not heads:
            break
        leader, _, leader_idx = min(heads, key=lambda h: h[0][0][0])
        mode = leader[0][1][leader_idx].mode
        round_matches = []
        for queue, match, index in heads:
            if queue[0][1][index].mode != mode:
                retried = _head_match(queue, find, cursor, mode)
                if retried is None:
                    continue
                match, index = retried
            round_matches.append((queue, match, index))
        chosen = sorted(
            _take_round(round_matches, mode), key=lambda p: (p.match, p.priority)
        )
        for step in chosen:
            result[step.update.modality][step.update.item_idx] = step.update_idx
            cursor = step.match.end_idx
        planned.extend(chosen)
        queues = [q for q in queues if q]
    return planned, result


def _cut_point(step: _Planned) -> int:
    # An insertion keeps its target; a replacement drops it.
    return (
        step.match.end_idx
        if step.update.mode is UpdateMode.INSERT
        else step.match.start_idx
    )


def apply_token_matches_with_placeholders(
    token_ids: list[int], mm_prompt_updates: MultiModalPromptUpdates
) -> tuple[
    list[int], dict[str, list[int | None]], dict[str, list[PlaceholderFeaturesInfo]]
]:
    """Apply the updates whose targets match as tokens; record each written placeholder."""
    planned, result = plan_prompt_updates(
        mm_prompt_updates, lambda u, at: u.iter_token_matches(token_ids, start_idx=at)
    )
    placeholders: dict[str, list[PlaceholderFeaturesInfo]] = {
        m: [] for m in mm_prompt_updates
    }
    out: list[int] = []
    prev_end = 0
    for step in planned:
        out.extend(token_ids[prev_end : _cut_point(step)])
        tokens = step.update.content.full
        if tokens:
            info = PlaceholderFeaturesInfo(
                step.update.modality,
                step.update.item_idx,
                len(out),
                tokens,
                _embed_mask(step.update.content),
            )
            placeholders[step.update.modality].append(info)
            out.extend(tokens)
        prev_end = step.match.end_idx
    out.extend(token_ids[prev_end:])
    return out, result, placeholders


def apply_token_matches(
    prompt: list[int], mm_prompt_updates: MultiModalPromptUpdates
) -> tuple[list[int], dict[str, list[int | None]]]:
    """Like :func:`apply_token_matches_with_placeholders`, without the placeholders."""
    new_ids, result, _ = apply_token_matches_with_placeholders(
        prompt, mm_prompt_updates
    )
    return new_ids, result


def iter_text_matches(
    update: ResolvedPromptUpdate,
    prompt_text: str,
    tokenizer: Any,
    *,
    start_idx: int = 0,
) -> Iterator[PromptTargetMatch]:
    """Non-overlapping matches of the update's target, decoded, in ``prompt_text``."""
    if isinstance(update.target, PromptIndex):
        index = update.target.get_text_match_index(tokenizer, prompt_text, start_idx)
        if index is not None:
            yield PromptTargetMatch(index, index)
        return
    needle = tokenizer.decode(update.target)
    if not needle:
        return
    index = prompt_text.find(needle, start_idx)
    while index != -1:
        yield PromptTargetMatch(index, index + len(needle))
        index = prompt_text.find(needle, index + len(needle))


def apply_text_updates(
    token_ids: list[int],
    mm_prompt_updates: MultiModalPromptUpdates,
    tokenizer: Any,
    *,
    encode_segments_separately: bool = False,
    find_in_text: Callable[..., Iterator[PromptTargetMatch]] = iter_text_matches,
) -> tuple[list[int], dict[str, list[int | None]]]:
    """The fallback: decode, apply the updates to the text, encode again.

    A target written as ordinary text can tokenize differently inside the
    prompt (``"\\n"`` inside ``"\\n\\n"``), so it is found in text instead.
    With ``encode_segments_separately`` each piece is encoded on its own, so
    that BPE cannot merge across a piece boundary. ``find_in_text`` has the
    signature of :func:`iter_text_matches` (a processor passes its override).
    """
    text = tokenizer.decode(token_ids)
    planned, result = plan_prompt_updates(
        mm_prompt_updates, lambda u, at: find_in_text(u, text, tokenizer, start_idx=at)
    )
    pieces: list[str] = []
    prev_end = 0
    for step in planned:
        pieces.append(text[prev_end : _cut_point(step)])
        pieces.append(tokenizer.decode(step.update.content.full))
        prev_end = step.match.end_idx
    pieces.append(text[prev_end:])
    if encode_segments_separately:
        return [
            t
            for piece in pieces
            for t in tokenizer.encode(piece, add_special_tokens=False)
        ], result
    return tokenizer.encode("".join(pieces), add_special_tokens=False), result


def _iter_placeholders(
    prompt: list[int], mm_prompt_updates: MultiModalPromptUpdates
) -> Iterator[PlaceholderFeaturesInfo]:
    counts = {m: len(items) for m, items in mm_prompt_updates.items()}
    found = dict.fromkeys(mm_prompt_updates, 0)

    def all_found() -> bool:
        return all(found[m] >= counts[m] for m in found)

    if all_found():
        return
    pos = 0
    candidates: list[tuple[str, ResolvedPromptUpdate]] | None = None
    while pos < len(prompt):
        if candidates is None:
            # Only the next unfound item of each modality can start here.
            candidates = [
                (m, update)
                for m, items in mm_prompt_updates.items()
                if found[m] < counts[m]
                for update in items[found[m]]
            ]
            if not candidates:
                return
        for modality, update in candidates:
            full = update.content.full
            end = pos + len(full)
            if full and end <= len(prompt) and prompt[pos:end] == full:
                yield PlaceholderFeaturesInfo(
                    modality, found[modality], pos, full, _embed_mask(update.content)
                )
                pos = end
                found[modality] += 1
                if all_found():
                    return
                candidates = None
                break
        else:
            pos += 1


def find_mm_placeholders(
    prompt: list[int], mm_prompt_updates: MultiModalPromptUpdates
) -> dict[str, list[PlaceholderFeaturesInfo]]:
    """Scan ``prompt`` left to right for each item's content, items in order per modality."""
    by_modality: dict[str, list[PlaceholderFeaturesInfo]] = {}
    for info in _iter_placeholders(prompt, mm_prompt_updates):
        by_modality.setdefault(info.modality, []).append(info)
    return by_modality
