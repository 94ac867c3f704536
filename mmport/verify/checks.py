"""The parity checks of DESIGN §4, each comparing the port with HF.

Every function takes the probe's results and appends :class:`Failure` values
to a :class:`CheckResult`; none raises for a disagreement.
"""

from __future__ import annotations

from typing import Any

import torch

from mmport.verify.report import CheckResult, Failure

__all__ = [
    "compare_items",
    "check_cache",
    "check_fields",
    "check_placeholders",
    "check_tokens",
    "first_divergence",
]


def first_divergence(expected: list[int], actual: list[int]) -> int | None:
    """The first index where two sequences differ (length included), or None."""
    for index, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return index
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def _at(seq: list[int], index: int) -> str:
    return str(seq[index]) if index < len(seq) else "<end>"


def check_tokens(result: CheckResult, probe: str, expected: list[int], actual: list[int]) -> None:
    """The port's prompt token ids equal HF's ``input_ids``."""
    result.runs += 1
    position = first_divergence(expected, actual)
    if position is not None:
        message = f"token ids differ (HF {len(expected)} tokens, port {len(actual)})"
        result.failures.append(Failure(probe, message, position, _at(expected, position), _at(actual, position)))


def check_placeholders(result: CheckResult, probe: str, hf_ids: list[int], token_id: int, counts: list[int], placeholders) -> None:
    """Each item's embedding positions match HF's, item by item."""
    result.runs += 1
    if len(placeholders) != len(counts):
        result.failures.append(Failure(probe, "number of placeholder ranges", None, str(len(counts)), str(len(placeholders))))
        return
    for index, (count, ph) in enumerate(zip(counts, placeholders)):
        if ph.num_embeds != count:
            message = f"item {index}: number of embedding positions in the placeholder"
            result.failures.append(Failure(probe, message, ph.offset, str(count), str(ph.num_embeds)))
            return
    hf_positions = [i for i, t in enumerate(hf_ids) if t == token_id]
    port_positions = [p for ph in placeholders for p in _embed_positions(ph)]
    position = first_divergence(hf_positions, port_positions)
    if position is not None:
        message = f"embedding position #{position} of the prompt"
        result.failures.append(Failure(probe, message, None, _at(hf_positions, position), _at(port_positions, position)))


def _embed_positions(ph) -> list[int]:
    if ph.is_embed is None:
        return list(range(ph.offset, ph.offset + ph.length))
    return [ph.offset + i for i, flag in enumerate(ph.is_embed) if flag]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}"
    return repr(value)[:60]


def compare_items(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[str, str, str] | None:
    """First differing key between HF on one item and the port's item: (key, HF, port)."""
    for key, want in expected.items():
        got = actual.get(key)
        if got is None:
            return key, _describe(want), "missing"
        if isinstance(want, torch.Tensor) and not _matches_item(want, got):
            return key, _describe(want), _describe(got)
    return None


def _matches_item(want: torch.Tensor, got: object) -> bool:
    """Does the port's item value equal HF's output for that item alone?

    HF returns one item with its batch axis; a batched field hands vLLM the
    row, a flat or shared one the whole value. Either form is right.
    """
    if not isinstance(got, torch.Tensor):
        return False
    if got.shape == want.shape:
        return torch.equal(got, want)
    return want.dim() > 0 and want.shape[0] == 1 and got.shape == want.shape[1:] and torch.equal(got, want[0])


def check_fields(result: CheckResult, probe: str, hf_mm: dict, singles: list[dict], items: list[dict]) -> None:
    """Every HF output key is carried, and slicing per item reproduces HF on that item alone."""
    result.runs += 1
    carried = set().union(*(item.keys() for item in items)) if items else set()
    if items:
        missing = sorted(set(hf_mm) - carried)
        if missing:
            result.failures.append(Failure(probe, f"HF returns {missing} but the port's field config drops them"))
            return
    for index, (single, item) in enumerate(zip(singles, items)):
        diff = compare_items(single, item)
        if diff is not None:
            key, want, got = diff
            result.failures.append(Failure(probe, f"item {index} field '{key}' differs from HF on that item alone", None, want, got))
            return


def check_cache(result: CheckResult, probe: str, together, alone: list) -> None:
    """Items processed one by one equal the same items processed together."""
    result.runs += 1
    placeholders = together.placeholders.get("image", [])
    items = together.items.get("image", [])
    for index, solo in enumerate(alone):
        solo_embeds = solo.placeholders["image"][0].num_embeds
        if solo_embeds != placeholders[index].num_embeds:
            message = f"item {index}: embedding positions alone vs in a batch"
            result.failures.append(Failure(probe, message, None, str(solo_embeds), str(placeholders[index].num_embeds)))
            return
        diff = compare_items(solo.items["image"][0], items[index])
        if diff is not None:
            key, want, got = diff
            message = f"item {index} field '{key}' alone differs from the same item in a batch"
            result.failures.append(Failure(probe, message, None, want, got))
            return
