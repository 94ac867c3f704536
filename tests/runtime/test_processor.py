"""The bundled runtime end to end: small test ports over a real LLaVA HF processor.

Each port is in ``conftest.PORT_CASES``; it replaces or inserts
``TOKENS_PER_IMAGE`` (4) image tokens per image.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mmport.runtime.backends import BundledBackend
from mmport.runtime.vllm_compat.exceptions import VLLMValidationError

TOKENS_PER_IMAGE = 4  # as in conftest.PRELUDE


@pytest.fixture
def run(write_port, llava_snapshot):
    """Build test port ``case`` on the bundled backend; returns its runner."""

    def build(case, **settings):
        backend = BundledBackend()
        return backend.build(
            backend.load_port(write_port(case, **settings)), llava_snapshot
        )

    return build


def images(count):
    return [
        Image.new("RGB", (40 + 10 * i, 30), (20 * i, 100, 200)) for i in range(count)
    ]


def test_replacement_expands_each_image_token(run):
    runner = run("replace")
    image_id = runner.hf_processor.image_token_id

    out = runner.process("a<image>b<image>", {"image": images(2)})

    starts = [p.offset for p in out.placeholders["image"]]
    assert [p.length for p in out.placeholders["image"]] == [TOKENS_PER_IMAGE] * 2
    assert all(
        out.prompt_token_ids[s : s + TOKENS_PER_IMAGE] == [image_id] * TOKENS_PER_IMAGE
        for s in starts
    )
    assert (
        runner.tokenizer.decode(out.prompt_token_ids).count("<image>")
        == 2 * TOKENS_PER_IMAGE
    )


def test_text_prompt_is_tokenized_with_special_tokens(run):
    runner = run("replace")

    out = runner.process("hello", {})

    assert out.prompt_token_ids == runner.tokenizer.encode("hello")
    assert out.prompt_token_ids[0] == runner.tokenizer.bos_token_id
    assert (out.placeholders, out.items) == ({}, {})


@pytest.mark.parametrize(
    ("case", "first_placeholder"),
    [("insert_start", 0), ("insert_prefix", 1), ("insert_end", None)],
)
def test_insertions_land_where_their_target_says(run, case, first_placeholder):
    runner = run(case)
    prompt_ids = runner.tokenizer.encode("hi")

    out = runner.process("hi", {"image": images(2)})

    # Both images insert at the same position, one after the other.
    at = len(prompt_ids) if first_placeholder is None else first_placeholder
    assert [(p.offset, p.length) for p in out.placeholders["image"]] == [
        (at, TOKENS_PER_IMAGE),
        (at + TOKENS_PER_IMAGE, TOKENS_PER_IMAGE),
    ]
    assert (
        out.prompt_token_ids[:at] + out.prompt_token_ids[at + 2 * TOKENS_PER_IMAGE :]
        == prompt_ids
    )


def test_select_token_id_excludes_wrapping_tokens_from_embeddings(run):
    out = run("select_token_id").process("<image>", {"image": images(1)})

    (placeholder,) = out.placeholders["image"]
    assert placeholder.is_embed == (False,) + (True,) * TOKENS_PER_IMAGE + (False,)
    assert (placeholder.length, placeholder.num_embeds) == (
        TOKENS_PER_IMAGE + 2,
        TOKENS_PER_IMAGE,
    )


def test_text_fallback_matches_a_target_written_as_characters(run):
    by_tokens = run("replace").process("x<image>y", {"image": images(1)})

    by_text = run("text_fallback").process("x<image>y", {"image": images(1)})

    assert by_text.prompt_token_ids == by_tokens.prompt_token_ids
    assert by_text.placeholders == by_tokens.placeholders


def test_fields_split_per_item_as_if_each_image_were_processed_alone(run):
    runner = run("flat_and_shared")
    pictures = images(2)

    together = runner.process("<image><image>", {"image": pictures})
    alone = [runner.process("<image>", {"image": [p]}) for p in pictures]

    assert sorted(together.items["image"][0]) == [
        "channel_means",
        "planes",
        "planes_per_image",
    ]
    for item, single in zip(together.items["image"], alone, strict=True):
        assert item["planes"].shape[0] == 3  # one plane per colour channel
        assert all(
            torch.equal(item[key], single.items["image"][0][key]) for key in item
        )


@pytest.mark.parametrize(
    ("case", "first_sentence"),
    [
        (
            "no_fields",
            "Expected there to be 1 image items in keyword arguments corresponding to 1 image data items",
        ),
        (
            "no_updates",
            "Expected there to be 1 prompt updates corresponding to 1 image items",
        ),
        (
            "empty_replacement",
            "Expected there to be 1 prompt placeholders corresponding to 1 image items",
        ),
    ],
)
def test_vllm_count_checks_raise_its_runtime_errors(run, case, first_sentence):
    with pytest.raises(RuntimeError, match=first_sentence):
        run(case).process("<image>", {"image": images(1)})


def test_an_update_that_matches_nowhere_fails_like_vllm(run):
    with pytest.raises(
        AssertionError,
        match=r"Failed to apply prompt replacement for mm_items\['image'\]\[0\]",
    ):
        run("replace").process("no placeholder here", {"image": images(1)})


def test_item_count_above_the_ports_limit_is_rejected(run):
    with pytest.raises(
        VLLMValidationError, match=r"At most 1 image\(s\) may be provided in one prompt"
    ):
        run("replace", MAX_IMAGES=1).process("<image><image>", {"image": images(2)})


def test_dummy_inputs_run_through_apply(run):
    runner = run("replace")

    text, data = runner.dummy(seq_len=64, mm_counts={"image": 3})
    out = runner.dummy_output(seq_len=64, mm_counts={"image": 3})

    assert text == "<image>" * 3
    assert len(data["image"]) == 3
    assert [p.length for p in out.placeholders["image"]] == [TOKENS_PER_IMAGE] * 3
    # The dummy prompt is encoded with special tokens, as vLLM's profiler does.
    assert out.prompt_token_ids[0] == runner.tokenizer.bos_token_id


def test_hf_processor_is_built_once_per_kwargs(run):
    runner = run("replace")

    assert runner.hf_processor is runner.hf_processor
