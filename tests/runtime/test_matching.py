"""The bundled runtime's prompt-update matching, on plain token ids.

Token ids here are arbitrary small integers: ``IMG`` plays an image
placeholder, ``AUD`` an audio one, ``BOS`` the begin-of-sequence token.
"""

from __future__ import annotations

import torch

from mmport.runtime.vllm_compat.multimodal.processing.matching import (
    apply_token_matches_with_placeholders,
    find_mm_placeholders,
)
from mmport.runtime.vllm_compat.multimodal.processing.updates import (
    PromptIndexTargets,
    PromptInsertion,
    PromptReplacement,
    PromptUpdateDetails,
    iter_token_matches,
)

BOS, IMG, AUD, X, Y = 1, 50, 60, 7, 8


def bind(updates, counts):
    """Resolve updates per item, grouped by modality, as the processor does."""
    grouped = {}
    for update in updates:
        grouped.setdefault(update.modality, []).append(update)
    return {
        m: [[u.resolve(i) for u in us] for i in range(counts.get(m, 0))]
        for m, us in grouped.items()
    }


def apply(prompt, updates, counts):
    new_ids, result, placeholders = apply_token_matches_with_placeholders(
        prompt, bind(updates, counts)
    )
    spans = {
        m: [(p.start_idx, p.length) for p in found] for m, found in placeholders.items()
    }
    return new_ids, result, spans


def test_token_matches_do_not_overlap():
    assert [tuple(m) for m in iter_token_matches([X, X, X, X, X], [X, X])] == [
        (0, 2),
        (2, 4),
    ]
    assert list(iter_token_matches([X, Y], [])) == []


def test_replacement_expands_each_placeholder_in_order():
    # Item i gets i + 2 tokens, so the order of application is visible.
    update = PromptReplacement("image", [IMG], lambda i: [IMG] * (i + 2))

    new_ids, result, spans = apply([BOS, IMG, X, IMG], [update], {"image": 2})

    assert new_ids == [BOS, IMG, IMG, X, IMG, IMG, IMG]
    assert result == {"image": [0, 0]}
    assert spans == {"image": [(1, 2), (4, 3)]}


def test_unmatched_item_is_reported_as_none():
    update = PromptReplacement("image", [IMG], [IMG, IMG])

    new_ids, result, _ = apply([BOS, IMG, X], [update], {"image": 2})

    assert new_ids == [BOS, IMG, IMG, X]
    assert result == {"image": [0, None]}


def test_insertion_at_start_puts_every_item_before_the_prompt():
    update = PromptInsertion(
        "image", PromptIndexTargets.start(), lambda i: [IMG] * (i + 1)
    )

    new_ids, _, spans = apply([BOS, X], [update], {"image": 2})

    assert new_ids == [IMG, IMG, IMG, BOS, X]
    assert spans == {"image": [(0, 1), (1, 2)]}


def test_insertion_after_prefix_keeps_the_prefix_first():
    update = PromptInsertion("image", PromptIndexTargets.prefix([BOS]), [IMG, IMG])

    new_ids, _, spans = apply([BOS, X], [update], {"image": 1})

    assert new_ids == [BOS, IMG, IMG, X]
    assert spans == {"image": [(1, 2)]}


def test_prefix_target_does_not_match_a_prompt_without_it():
    update = PromptInsertion("image", PromptIndexTargets.prefix([BOS]), [IMG])

    new_ids, result, _ = apply([X, BOS], [update], {"image": 1})

    assert new_ids == [X, BOS]
    assert result == {"image": [None]}


def test_insertion_at_end_matches_even_an_empty_prompt():
    update = PromptInsertion("image", PromptIndexTargets.end(), [IMG])

    assert apply([BOS, X], [update], {"image": 1})[0] == [BOS, X, IMG]
    assert apply([], [update], {"image": 1})[0] == [IMG]


def test_earlier_modality_wins_a_shared_placeholder():
    # Both modalities target the same token: image was listed first, so it
    # takes the first occurrence and audio the second.
    image = PromptReplacement("image", [X], [IMG])
    audio = PromptReplacement("audio", [X], [AUD])

    new_ids, _, spans = apply([X, Y, X], [image, audio], {"image": 1, "audio": 1})

    assert new_ids == [IMG, Y, AUD]
    assert spans == {"image": [(0, 1)], "audio": [(2, 1)]}


def test_second_alternative_applies_when_the_first_does_not_match():
    first = PromptReplacement("image", [Y, Y], [IMG])
    second = PromptReplacement("image", [X], [IMG, IMG])

    new_ids, result, _ = apply([BOS, X], [first, second], {"image": 1})

    assert new_ids == [BOS, IMG, IMG]
    assert result == {"image": [1]}


def test_select_token_id_marks_only_that_token_as_embedding():
    details = PromptUpdateDetails.select_token_id([X, IMG, IMG, Y], IMG)
    update = PromptReplacement("image", [IMG], details)

    _, _, placeholders = apply_token_matches_with_placeholders(
        [BOS, IMG], bind([update], {"image": 1})
    )

    (info,) = placeholders["image"]
    assert info.is_embed.tolist() == [False, True, True, False]
    assert info.to_range().get_num_embeds() == 2


def test_select_token_ids_accepts_several_embedding_tokens():
    details = PromptUpdateDetails.select_token_ids([X, IMG, AUD, Y], [IMG, AUD])

    assert details.is_embed(details.full).tolist() == [False, True, True, False]


def test_find_placeholders_scans_items_in_order():
    update = PromptReplacement("image", [IMG], lambda i: [IMG] * (i + 1))
    updates = bind([update], {"image": 2})

    found = find_mm_placeholders([BOS, IMG, X, IMG, IMG], updates)

    assert [(p.item_idx, p.start_idx, p.length) for p in found["image"]] == [
        (0, 1, 1),
        (1, 3, 2),
    ]


def test_find_placeholders_carries_the_embedding_mask():
    details = PromptUpdateDetails.select_token_id([X, IMG], IMG)
    updates = bind([PromptReplacement("image", [IMG], details)], {"image": 1})

    (info,) = find_mm_placeholders([BOS, X, IMG], updates)["image"]

    assert (info.start_idx, info.is_embed.tolist()) == (1, [False, True])
    assert torch.equal(info.to_range().is_embed, torch.tensor([False, True]))
