"""Splitting HF outputs into per-item kwargs, and batching them back."""

from __future__ import annotations

import pytest
import torch

from mmport.runtime.vllm_compat.multimodal.inputs import (
    MultiModalFieldConfig,
    MultiModalKwargsItems,
    PlaceholderRange,
)


def split(hf_outputs, fields):
    items = MultiModalKwargsItems.from_hf_inputs(hf_outputs, fields)
    return [item.get_data() for item in items["image"]]


def test_batched_field_gives_each_item_its_row():
    pixels = torch.arange(3 * 2).reshape(3, 2)

    items = split(
        {"pixel_values": pixels},
        {"pixel_values": MultiModalFieldConfig.batched("image")},
    )

    assert [item["pixel_values"].tolist() for item in items] == [[0, 1], [2, 3], [4, 5]]


def test_flat_from_sizes_gives_each_item_its_run_of_rows():
    patches = torch.arange(9)
    sizes = torch.tensor([3, 4, 2])

    items = split(
        {"patches": patches},
        {"patches": MultiModalFieldConfig.flat_from_sizes("image", sizes)},
    )

    assert [item["patches"].tolist() for item in items] == [
        [0, 1, 2],
        [3, 4, 5, 6],
        [7, 8],
    ]


def test_flat_from_sizes_can_slice_along_a_later_dim():
    grid = torch.arange(2 * 5).reshape(2, 5)

    config = MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([2, 3]), dim=1)
    items = split({"grid": grid}, {"grid": config})

    assert [item["grid"].shape for item in items] == [(2, 2), (2, 3)]
    assert torch.equal(torch.cat([item["grid"] for item in items], dim=1), grid)


def test_shared_field_gives_every_item_the_whole_value():
    table = torch.tensor([1.0, 2.0])

    items = split(
        {"table": table, "pixel_values": torch.zeros(3, 1)},
        {
            "table": MultiModalFieldConfig.shared("image", 3),
            "pixel_values": MultiModalFieldConfig.batched("image"),
        },
    )

    assert all(item["table"] is table for item in items)


def test_keys_without_a_field_config_are_dropped():
    items = split(
        {"pixel_values": torch.zeros(2, 1), "attention_mask": torch.ones(2, 4)},
        {"pixel_values": MultiModalFieldConfig.batched("image")},
    )

    assert [sorted(item) for item in items] == [["pixel_values"], ["pixel_values"]]


def test_keys_of_one_modality_must_agree_on_the_item_count():
    fields = {
        "pixel_values": MultiModalFieldConfig.batched("image"),
        "image_sizes": MultiModalFieldConfig.batched("image"),
    }

    with pytest.raises(ValueError, match="Cannot merge different batch sizes"):
        MultiModalKwargsItems.from_hf_inputs(
            {"pixel_values": torch.zeros(2, 1), "image_sizes": torch.zeros(3)}, fields
        )


def test_batching_items_back_restores_the_hf_layout():
    outputs = {
        "patches": torch.arange(9).reshape(9, 1),
        "sizes": torch.tensor([3, 4, 2]),
        "table": torch.ones(2),
    }
    fields = {
        "patches": MultiModalFieldConfig.flat_from_sizes("image", outputs["sizes"]),
        "sizes": MultiModalFieldConfig.batched("image"),
        "table": MultiModalFieldConfig.shared("image", 3),
    }

    batched = MultiModalKwargsItems.from_hf_inputs(outputs, fields).get_data()

    assert all(torch.equal(batched[key], outputs[key]) for key in outputs)


def test_a_batch_of_one_adds_the_batch_dim_only_for_batched_fields():
    outputs = {"pixel_values": torch.zeros(2, 3), "patches": torch.zeros(5, 3)}
    fields = {
        "pixel_values": MultiModalFieldConfig.batched("image"),
        "patches": MultiModalFieldConfig.flat_from_sizes("image", torch.tensor([2, 3])),
    }
    first = MultiModalKwargsItems.from_hf_inputs(outputs, fields)["image"][0]

    alone = MultiModalKwargsItems({"image": [first]}).get_data()

    assert (alone["pixel_values"].shape, alone["patches"].shape) == ((1, 3), (2, 3))


def test_placeholder_range_counts_embeddings_from_its_mask():
    assert PlaceholderRange(offset=2, length=5).get_num_embeds() == 5
    mask = torch.tensor([False, True, False, True, True])
    assert PlaceholderRange(offset=2, length=5, is_embed=mask).get_num_embeds() == 3
