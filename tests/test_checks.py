"""The per-item comparison the fields and cache checks share: values, as vLLM's model consumes them."""

from __future__ import annotations

import torch

from mmport.verify.checks import compare_items


def test_an_item_zero_padded_by_its_batch_equals_hf_on_it_alone() -> None:
    alone = {
        "pixel_values": torch.rand(1, 4, 3, 8, 8)
    }  # HF on the item alone: 4 patches
    padded = torch.cat(
        [alone["pixel_values"][0], torch.zeros(1, 3, 8, 8)]
    )  # padded to a batch's 5
    assert compare_items(alone, {"pixel_values": padded}) is None


def test_padding_that_is_not_zero_is_another_value() -> None:
    alone = {"pixel_values": torch.rand(1, 4, 3, 8, 8)}
    other = torch.cat(
        [alone["pixel_values"][0], torch.rand(1, 3, 8, 8)]
    )  # another item's patch
    assert compare_items(alone, {"pixel_values": other})[0] == "pixel_values"
    # Shorter, or longer along two axes, is never padding.
    assert (
        compare_items(alone, {"pixel_values": alone["pixel_values"][0, :3]}) is not None
    )
    assert compare_items(alone, {"pixel_values": torch.zeros(5, 3, 9, 8)}) is not None


def test_a_value_carried_under_the_ports_own_name_is_found_by_value() -> None:
    alone = {"pixel_values": torch.rand(1, 3, 8, 8)}
    assert compare_items(alone, {"images": alone["pixel_values"][0]}) is None
    key, _, got = compare_items(alone, {"images": torch.rand(3, 8, 8)})
    assert (key, got) == ("pixel_values", "missing")


def test_ids_under_positions_vllm_overwrites_are_noted_not_failed() -> None:
    # InternVL's video frames: HF writes the image context token where vLLM's port writes the
    # video token; both put an embedding there, which replaces the id before the model reads it.
    from mmport.verify.checks import check_tokens
    from mmport.verify.report import CheckResult

    hf, port = [1, 5, 9, 9, 6], [1, 5, 7, 7, 6]
    passed = CheckResult("tokens")
    assert (
        check_tokens(passed, "probe0", hf, port, overwritten=frozenset({2, 3})) is None
    )
    assert not passed.failures and "vLLM overwrites" in passed.summary
    failed = CheckResult("tokens")
    assert check_tokens(failed, "probe0", hf, port, overwritten=frozenset({2})) == 3
    assert failed.failures[0].position == 3


def test_a_count_of_the_prompts_items_and_a_mask_hiding_nothing_may_be_dropped() -> (
    None
):
    # LLaVA-OneVision's batch_num_images ([1] alone, [n] for the prompt) and a mask of all ones
    # for each item alone: vLLM's model gets items one by one and needs neither.
    from types import SimpleNamespace

    from mmport.verify.checks import check_fields
    from mmport.verify.report import CheckResult

    items = [SimpleNamespace(modality="image")] * 2
    pixels = [torch.rand(3, 4, 4), torch.rand(3, 4, 4)]
    singles = [
        {
            "pixel_values": p[None],
            "batch_num_images": torch.tensor([1]),
            "pixel_mask": torch.ones(1, 4, 4, dtype=torch.bool),
        }
        for p in pixels
    ]
    hf_mm = {
        "pixel_values": torch.stack(pixels),
        "batch_num_images": torch.tensor([2]),
        "pixel_mask": torch.ones(2, 4, 4, dtype=torch.bool),
    }
    port = SimpleNamespace(items={"image": [{"pixel_values": p[None]} for p in pixels]})
    passed = CheckResult("fields")
    check_fields(passed, "probe0", hf_mm, items, singles, port)
    assert not passed.failures, passed.failures
    # A per-item value of 1 for each item is the item's own (one per item, not the prompt's count).
    singles = [{**single, "image_num_patches": torch.tensor([1])} for single in singles]
    failed = CheckResult("fields")
    check_fields(
        failed,
        "probe0",
        {**hf_mm, "image_num_patches": torch.tensor([1, 1])},
        items,
        singles,
        port,
    )
    assert "image_num_patches" in failed.failures[0].message


def test_a_feature_padded_to_its_window_is_compared_without_the_frames_its_mask_hides() -> (
    None
):
    # Qwen3-ASR: HF pads one audio's features to the window with a mask; vLLM's port hands the
    # model only the unmasked frames, under its own name. Those frames are HF's value.
    from types import SimpleNamespace

    from mmport.verify.checks import check_fields
    from mmport.verify.report import CheckResult

    items = [SimpleNamespace(modality="audio")]
    features = torch.rand(1, 8, 30)
    mask = torch.zeros(1, 30, dtype=torch.int32)
    mask[0, :12] = 1
    singles = [{"input_features": features, "input_features_mask": mask}]

    def port_carrying(frames: torch.Tensor):
        item = {"input_audio_features": frames, "feature_attention_mask": mask[0]}
        return SimpleNamespace(items={"audio": [item]})

    passed = CheckResult("fields")
    check_fields(
        passed, "probe0", singles[0], items, singles, port_carrying(features[0, :, :12])
    )
    assert not passed.failures, passed.failures
    # Frames the mask keeps, but not HF's: another value.
    failed = CheckResult("fields")
    check_fields(
        failed,
        "probe0",
        singles[0],
        items,
        singles,
        port_carrying(features[0, :, 1:13]),
    )
    assert "input_features" in failed.failures[0].message
