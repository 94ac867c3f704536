"""The parity checks of DESIGN §4, each comparing the port with HF.

Every function takes the probe's results and appends :class:`Failure` values
to a :class:`CheckResult`; none raises for a disagreement. Each failure says
how vLLM would show it: a count vLLM checks against the encoder's output or
the items it holds (placeholder ranges and sizes, a field the model needs) is
``loud``, an error at serving time; a token id, position or value it would
serve wrong is ``silent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from mmport.verify.report import CheckResult, Failure, TokenWindow

__all__ = [
    "check_cache",
    "check_company_hash",
    "check_fields",
    "check_placeholders",
    "check_tokens",
    "compare_items",
    "embed_positions",
    "first_divergence",
    "port_key",
    "token_window",
]

# Tokens shown on each side of the first difference in a token window.
WINDOW = 12


def first_divergence(
    expected: list[int], actual: list[int], skip: frozenset[int] = frozenset()
) -> int | None:
    """The first index where two sequences differ (length included), or None; indices in ``skip`` are not compared."""
    for index, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b and index not in skip:
            return index
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def _at(seq: list[int], index: int) -> str:
    return str(seq[index]) if index < len(seq) else "<end>"


def check_tokens(
    result: CheckResult,
    probe: str,
    expected: list[int],
    actual: list[int],
    overwritten: frozenset[int] = frozenset(),
) -> int | None:
    """The port's prompt token ids equal HF's ``input_ids``; the first differing position, if any.

    ``overwritten`` holds the positions where HF's id is an embedding token and
    the port's placeholder puts an embedding: vLLM replaces the token there
    with the item's embedding before the language model reads it (its
    ``is_embed`` mask), so the id the port writes there is vLLM's business, not
    a difference a request could see. Such positions are noted, not failed.
    """
    result.runs += 1
    position = first_divergence(expected, actual, skip=overwritten)
    if position is not None:
        message = f"token ids differ (HF {len(expected)} tokens, port {len(actual)})"
        result.failures.append(
            Failure(
                probe,
                message,
                position,
                _at(expected, position),
                _at(actual, position),
                loudness="silent",
            )
        )
    elif (index := first_divergence(expected, actual)) is not None:
        note = f"{probe}: ids under embedding positions differ (from position {index}: HF {_at(expected, index)}, port {_at(actual, index)}); vLLM overwrites them"
        if note not in (result.summary or ""):
            result.summary = "; ".join(filter(None, [result.summary, note]))
    return position


def token_window(
    expected: list[int],
    actual: list[int],
    position: int,
    spell: Callable[[list[int]], list[str]] | None = None,
) -> TokenWindow:
    """Both sequences from :data:`WINDOW` tokens before ``position`` to :data:`WINDOW` after it.

    ``spell`` turns ids into the tokenizer's text for them (HF's
    ``convert_ids_to_tokens``); a side that ends early is shorter.
    """
    start = max(0, position - WINDOW)
    hf, port = (
        expected[start : position + WINDOW + 1],
        actual[start : position + WINDOW + 1],
    )
    hf_tokens, port_tokens = (spell(hf), spell(port)) if spell else ([], [])
    return TokenWindow(
        position, start, tuple(hf), tuple(port), tuple(hf_tokens), tuple(port_tokens)
    )


def check_placeholders(
    result: CheckResult,
    probe: str,
    hf_ids: list[int] | None,
    embed_ids: Mapping[str, int],
    items: Sequence[Any],
    counts: Sequence[int],
    placeholders: Mapping[str, list],
) -> None:
    """Each item's embedding positions match HF's, item by item and modality by modality.

    ``items`` are the probe's items in prompt order (each with a
    ``modality``), ``counts`` HF's embedding positions for each alone.
    With ``hf_ids`` the positions themselves are compared too, per embedding
    token (modalities that share one, as InternVL's video frames share the
    image token, are compared together); without, only the counts.
    """
    result.runs += 1
    failure = _count_failure(probe, items, counts, placeholders)
    if failure is None and hf_ids is not None:
        failure = _position_failure(probe, hf_ids, embed_ids, items, placeholders)
    if failure is not None:
        result.failures.append(failure)


def _count_failure(
    probe: str,
    items: Sequence[Any],
    counts: Sequence[int],
    placeholders: Mapping[str, list],
) -> Failure | None:
    """The first modality whose placeholder ranges, or their embedding counts, are not HF's (loud)."""
    for modality in dict.fromkeys(item.modality for item in items):
        wanted = [
            count
            for item, count in zip(items, counts, strict=False)
            if item.modality == modality
        ]
        ranges = placeholders.get(modality, [])
        if len(ranges) != len(wanted):
            return Failure(
                probe,
                f"number of {modality} placeholder ranges",
                None,
                str(len(wanted)),
                str(len(ranges)),
                loudness="loud",
            )
        for index, (count, ph) in enumerate(zip(wanted, ranges, strict=False)):
            if ph.num_embeds != count:
                message = f"{modality} {index}: number of embedding positions in the placeholder"
                return Failure(
                    probe,
                    message,
                    ph.offset,
                    str(count),
                    str(ph.num_embeds),
                    loudness="loud",
                )
    return None


def _position_failure(
    probe: str,
    hf_ids: list[int],
    embed_ids: Mapping[str, int],
    items: Sequence[Any],
    placeholders: Mapping[str, list],
) -> Failure | None:
    """The first embedding position the port puts elsewhere than HF, per embedding token (silent)."""
    for embed_id in dict.fromkeys(embed_ids[item.modality] for item in items):
        sharing = [
            m
            for m in dict.fromkeys(item.modality for item in items)
            if embed_ids[m] == embed_id
        ]
        hf_positions = [i for i, t in enumerate(hf_ids) if t == embed_id]
        port_positions = sorted(
            p
            for m in sharing
            for ph in placeholders.get(m, [])
            for p in embed_positions(ph)
        )
        position = first_divergence(hf_positions, port_positions)
        if position is not None:
            message = (
                f"{'/'.join(sharing)} embedding position #{position} of the prompt"
            )
            return Failure(
                probe,
                message,
                None,
                _at(hf_positions, position),
                _at(port_positions, position),
                loudness="silent",
            )
    return None


def embed_positions(ph) -> list[int]:
    """The prompt positions a vLLM placeholder range fills with embeddings (all of it without an ``is_embed`` mask)."""
    if ph.is_embed is None:
        return list(range(ph.offset, ph.offset + ph.length))
    return [ph.offset + i for i, flag in enumerate(ph.is_embed) if flag]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}"
    return repr(value)[:60]


def port_key(key: str, actual: Mapping[str, Any], want: Any = None) -> str | None:
    """The port's name for HF's output ``key``: the same, or one that extends it.

    A port whose modalities share an HF output name keeps each modality's
    under its own (InternVL's video frames come as ``pixel_values`` and are
    carried as ``pixel_values_videos``); with ``want``, a renamed key must
    also hold that value.
    """
    if key in actual:
        return key
    renamed = [k for k in actual if k.startswith(key + "_")]
    if want is not None:
        renamed = [
            k
            for k in renamed
            if isinstance(want, torch.Tensor) and _matches_item(want, actual[k])
        ]
        # A port's model class may consume the value under a name of its own: the value decides.
        renamed = renamed or [
            k
            for k in actual
            if isinstance(want, torch.Tensor) and _matches_item(want, actual[k])
        ]
    return renamed[0] if len(renamed) == 1 or (renamed and want is not None) else None


def compare_items(
    expected: dict[str, Any], actual: dict[str, Any]
) -> tuple[str, str, str] | None:
    """First differing key between HF on one item and the port's item: (key, HF, port)."""
    for key, want in expected.items():
        name = port_key(key, actual, want) or port_key(key, actual)
        if name is None:
            return key, _describe(want), "missing"
        got = actual[name]
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
    if want.dim() > 0 and want.shape[0] == 1 and got.dim() == want.dim() - 1:
        want = want[0]
    return _equal_or_padded(want, got)


def _equal_or_padded(want: torch.Tensor, got: torch.Tensor) -> bool:
    """``got`` equals ``want``, or is ``want`` zero-padded along one axis.

    Processors that batch items of different sizes pad each to the largest
    (LLaVA-NeXT's patches, to the most any image of the batch has), and HF's
    own model strips that padding by the item's size; a port handing vLLM an
    item padded by its batch is consumed as HF consumes its own batch.
    """
    if got.shape == want.shape:
        return torch.equal(got, want)
    if got.dim() != want.dim() or got.dtype != want.dtype:
        return False
    longer = [
        axis
        for axis, (g, w) in enumerate(zip(got.shape, want.shape, strict=True))
        if g != w
    ]
    if len(longer) != 1 or got.shape[longer[0]] < want.shape[longer[0]]:
        return False
    axis = longer[0]
    kept, padding = (
        got.narrow(axis, 0, want.shape[axis]),
        got.narrow(axis, want.shape[axis], got.shape[axis] - want.shape[axis]),
    )
    return torch.equal(kept, want) and not padding.any()


def check_fields(
    result: CheckResult,
    probe: str,
    hf_mm: dict,
    items: Sequence[Any],
    singles: list[dict],
    actual,
) -> None:
    """Every HF output key is carried, and slicing per item reproduces HF on that item alone.

    ``items`` are the probe's items in prompt order, ``singles`` HF's
    multimodal outputs for each item alone; ``actual`` is the port's output.
    """
    result.runs += 1
    port_items = _items_in_order(items, actual)
    if port_items:
        missing, singles = _dropped_keys(hf_mm, items, singles, port_items)
        if missing:
            result.failures.append(
                Failure(
                    probe,
                    f"HF returns {missing} but the port's field config drops them",
                    loudness="loud",
                )
            )
            return
    for index, (item, single, port_item) in enumerate(
        zip(items, singles, port_items, strict=False)
    ):
        diff = compare_items(single, port_item)
        if diff is not None:
            key, want, got = diff
            message = f"{item.modality} {_index_in_modality(items, index)} field '{key}' differs from HF on that item alone"
            result.failures.append(
                Failure(probe, message, None, want, got, loudness="silent")
            )
            return


def _dropped_keys(
    hf_mm: dict, items: Sequence[Any], singles: list[dict], port_items: list
) -> tuple[list[str], list[dict]]:
    """HF's per-item keys the port carries under no name, and HF's outputs for each item alone as the port carries them.

    A key HF gives no item alone (a padding mask across items) is batching,
    not an item's; a key that carries nothing of an item is idle, and left out.
    """
    carried: dict[str, Any] = {}
    for item in port_items:
        carried.update(item)
    per_item = {key for single in singles for key in single}
    named = {key for key in hf_mm if port_key(key, carried) is not None}
    idle = {
        key
        for key in hf_mm
        if key in per_item
        and _carries_nothing(key, hf_mm[key], singles, _item_counts(items))
    }
    singles = [
        _as_port_carries({k: v for k, v in single.items() if k not in idle}, port_item)
        for single, port_item in zip(singles, port_items, strict=False)
    ]
    # A key carried under another name holds HF's value for an item alone.
    named |= {
        key
        for single, item in zip(singles, port_items, strict=False)
        for key in single
        if port_key(key, item, single[key]) is not None
    }
    missing = sorted(
        key for key in hf_mm if key in per_item and key not in named and key not in idle
    )
    return missing, singles


def _as_port_carries(single: dict, port_item: Mapping[str, Any]) -> dict:
    """HF's outputs for one item, each padded one stripped by its mask where the port carries it stripped.

    A feature extractor pads even one item to its window and returns a mask
    (Qwen3-ASR's ``input_features`` and ``input_features_mask``); HF's model
    reads only the unmasked frames, and a port handing vLLM just those frames
    gives the model what HF's gives it.
    """
    masks = [
        torch.as_tensor(value)
        for key, value in single.items()
        if "mask" in key and isinstance(value, torch.Tensor) and value.dim() == 2
    ]
    kept = dict(single)
    for key, want in single.items():
        if not isinstance(want, torch.Tensor) or _carried_as_is(key, port_item, want):
            continue
        for mask in masks:
            stripped = _unmasked(want, mask)
            if stripped is not None and port_key(key, port_item, stripped):
                kept[key] = stripped
                break
    return kept


def _carried_as_is(key: str, port_item: Mapping[str, Any], want: torch.Tensor) -> bool:
    """True when the port carries HF's value itself, under HF's name or its own."""
    name = port_key(key, port_item, want)
    return name is not None and _matches_item(want, port_item[name])


def _unmasked(want: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """``want`` (one item, batch axis first) without the positions ``mask`` (1, T) hides, or None if they do not align."""
    if want.dim() < 2 or want.shape[0] != 1 or mask.shape[0] != 1:
        return None
    hides = mask.reshape(-1) == 0
    if not hides.any() or hides.all():
        return None
    for axis in range(want.dim() - 1, 0, -1):  # the time axis: last, else nearest it
        if want.shape[axis] == mask.shape[-1]:
            return want.index_select(axis, (~hides).nonzero().reshape(-1))
    return None


def _item_counts(items: Sequence[Any]) -> set[int]:
    """How many items the probe has, in all and of each modality."""
    modalities = [item.modality for item in items]
    return {len(items), *(modalities.count(m) for m in modalities)}


def _carries_nothing(
    key: str, together: Any, singles: list[dict], counts: set[int]
) -> bool:
    """True for an HF output no item needs from the port: vLLM hands its model each item as HF gives it alone.

    Two kinds, told by value: a count of the prompt's items (LLaVA-OneVision's
    ``batch_num_images``: ``[1]`` for every item alone, ``[n]`` for the prompt),
    which vLLM's model knows from the items it gets; and a mask that hides
    nothing of any item alone (Granite Speech's ``input_features_mask``), which
    marks only the padding HF adds when it batches items of different sizes.
    """
    try:
        values = [torch.as_tensor(single[key]) for single in singles if key in single]
    except (TypeError, ValueError, RuntimeError):
        return False  # not numbers: an item's own data
    if not values:
        return False
    if all(v.numel() == 1 and int(v.reshape(-1)[0]) == 1 for v in values):
        try:
            whole = torch.as_tensor(together).reshape(-1)
        except (TypeError, ValueError, RuntimeError):
            return False
        return whole.numel() == 1 and int(whole[0]) in counts
    is_mask = all(v.dtype == torch.bool for v in values) or "mask" in key
    return is_mask and all(bool((v != 0).all()) for v in values)


def _index_in_modality(items: Sequence[Any], index: int) -> int:
    """Item ``index``'s position among the items of its modality."""
    return sum(item.modality == items[index].modality for item in items[:index])


def _items_in_order(items: Sequence[Any], actual) -> list[dict]:
    """The port's per-item field values, in the probe's item order (missing items: empty)."""
    ordered = []
    for index, item in enumerate(items):
        modality_items = actual.items.get(item.modality, [])
        position = _index_in_modality(items, index)
        ordered.append(
            modality_items[position] if position < len(modality_items) else {}
        )
    return ordered


def check_cache(
    result: CheckResult, probe: str, items: Sequence[Any], together, alone: list
) -> None:
    """Items processed one by one equal the same items processed together."""
    result.runs += 1
    together_items = _items_in_order(items, together)
    for index, (item, solo) in enumerate(zip(items, alone, strict=False)):
        position = _index_in_modality(items, index)
        ranges = together.placeholders.get(item.modality, [])
        solo_embeds = solo.placeholders[item.modality][0].num_embeds
        if position >= len(ranges) or solo_embeds != ranges[position].num_embeds:
            message = f"{item.modality} {position}: embedding positions alone vs with the probe's other items"
            got = str(ranges[position].num_embeds) if position < len(ranges) else "none"
            result.failures.append(
                Failure(probe, message, None, str(solo_embeds), got, loudness="silent")
            )
            return
        diff = compare_items(solo.items[item.modality][0], together_items[index])
        if diff is not None:
            key, want, got = diff
            message = f"{item.modality} {position} field '{key}' alone differs from the same item beside others"
            result.failures.append(
                Failure(probe, message, None, want, got, loudness="silent")
            )
            return


def check_company_hash(
    result: CheckResult,
    probe: str,
    items: Sequence[Any],
    together,
    alone: list,
    beyond: set[int],
) -> None:
    """Items HF processes otherwise beside the probe's others (``beyond``) hash apart from themselves alone.

    vLLM's processor and encoder caches serve an item by its hash: one that
    hashes as it does alone would be served as processed alone.
    """
    for index in sorted(beyond):
        item = items[index]
        position = _index_in_modality(items, index)
        hashes = together.hashes.get(item.modality, [])
        alone_hashes = alone[index].hashes.get(item.modality, [])
        if (
            position < len(hashes)
            and alone_hashes
            and hashes[position] == alone_hashes[0]
        ):
            message = (
                f"{item.modality} {position}: HF processes it otherwise beside the probe's other items "
                "than alone, and the port hashes it as alone (vLLM's caches would serve one for the other)"
            )
            result.failures.append(
                Failure(
                    probe,
                    message,
                    None,
                    "a hash of its own",
                    "its hash alone",
                    loudness="silent",
                )
            )
            return
