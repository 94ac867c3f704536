"""Processors that write the prompt themselves: told apart, and their prompts read from HF."""

from __future__ import annotations

import pytest

from mmport.hf.ownprompt import run_recording_prompt, writes_own_prompt
from mmport.media import make_image
from mmport.sources import resolve


def _collapse(ids: list[int], token_id: int) -> list[int]:
    """``ids`` with each run of ``token_id`` shortened to one: the prompt before expansion."""
    return [
        t
        for i, t in enumerate(ids)
        if t != token_id or i == 0 or ids[i - 1] != token_id
    ]


@pytest.mark.parametrize("model_type", ["colpali", "colqwen2"])
def test_text_or_images_processor_writes_its_own_prompt(model_type) -> None:
    assert writes_own_prompt(resolve(model_type).load_processor())


@pytest.mark.parametrize("model_type", ["llava", "paligemma"])
def test_processor_taking_text_beside_images_does_not(model_type) -> None:
    # PaliGemma also builds its prompt, but around the user's text.
    assert not writes_own_prompt(resolve(model_type).load_processor())


@pytest.mark.parametrize("model_type", ["colpali", "colqwen2"])
def test_image_prompt_is_hfs_output_before_expansion(model_type) -> None:
    processor = resolve(model_type).load_processor()
    prompt, out = run_recording_prompt(processor, "ignored", [make_image(64, 48, 0)])
    assert "ignored" not in prompt and prompt.count(processor.image_token) == 1
    ids = out["input_ids"][0].tolist()
    assert (
        _collapse(ids, processor.image_token_id)
        == processor.tokenizer(prompt)["input_ids"]
    )
    # The prompt is read, not kept: HF's method is the class's own again.
    assert "prepare_inputs_layout" not in vars(processor)


@pytest.mark.parametrize("model_type", ["colpali", "colqwen2"])
def test_query_prompt_is_what_hf_tokenized(model_type) -> None:
    processor = resolve(model_type).load_processor()
    prompt, out = run_recording_prompt(processor, "which cat", [])
    assert "which cat" in prompt and prompt != "which cat"
    assert out["input_ids"][0].tolist() == processor.tokenizer(prompt)["input_ids"]
